# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Building a template from a cloud image (PVE 8.4+): download-url, import content, create with import-from, template.

Facts from pve-storage and qemu-server, reproduced (not their code):

- ``POST /nodes/{node}/storage/{storage}/download-url`` normalizes the file name (every character
  outside ``[A-Za-z0-9_.-]`` becomes ``_``), refuses a content type the storage is not configured
  for, and for content ``import`` a name without a disk image extension (``.qcow2``, ``.raw``,
  ``.vmdk``, ``.ova``, ``.ovf``). The ``download`` worker fetches to a temporary file, checks the
  checksum and only then renames it: a mismatch fails the task with ``checksum mismatch: got ...
  != expect ...`` and leaves nothing behind. An existing file with the expected checksum is kept
  without a download ("no need to download"); without a checksum an existing file is refused.
  The simulator fetches from loopback hosts only (tests talk to loopback only).
- ``GET /nodes/{node}/storage/{storage}/content`` lists volumes, ``content=`` filters them.
- ``POST /nodes/{node}/qemu`` creates a VM under a ``create`` lock in a ``qmcreate`` worker;
  ``<storage>:0,import-from=<volid>`` allocates a new volume of the image's *virtual* size (read
  from the qcow2 header; raw: the file size) and copies it; ``efidisk0`` gets a small volume.
- ``POST /nodes/{node}/qemu/{vmid}/template`` (``qmtemplate``) renames every non-cdrom disk
  ``vm-N-disk-M`` to ``base-N-disk-M`` and sets ``template: 1``; a running VM or a template is refused.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import re
import struct
import tempfile
import urllib.parse
import urllib.request

from .api.core import ApiError, Call, Sim, param_error, route
from .api.qemu_volumes import free_volume, materialize
from .state import DRIVE_RE, GIB, VM, format_size, is_cdrom, parse_kv
from .tasks import Task, TaskFailed

IMPORT_EXTENSIONS = (".qcow2", ".raw", ".vmdk", ".ova", ".ovf")
MAX_DOWNLOAD_BYTES = 8 * GIB
EFIDISK_BYTES = 528 * 1024  # OVMF 4m variables, raw
_CHUNK = 1 << 20


def import_files(sim: Sim) -> dict[str, str]:
    """volid -> the file on the simulator host that holds an imported image (``--guests real`` boots it)."""
    files: dict[str, str] = sim.__dict__.setdefault("import_files", {})
    return files


def image_file(sim: Sim, volid: str) -> str | None:
    return import_files(sim).get(volid)


def set_image_file(sim: Sim, volid: str, path: str) -> None:
    """``volid``'s content now lives in ``path`` (a real guest booted it: its overlay holds what the guest wrote)."""
    import_files(sim)[volid] = path


def clone_image_file(sim: Sim, source: str, target: str) -> None:
    """A cloned volume starts with its source's content (a clone of a template built from an image boots that image)."""
    files = import_files(sim)
    if source in files:
        files[target] = files[source]


def files_dir(sim: Sim) -> str:
    path: str = sim.__dict__.setdefault("import_dir", tempfile.mkdtemp(prefix="pvesim-import-"))
    return path


def normalize_filename(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]", "_", name)


def virtual_size(path: str) -> int:
    """The disk size an image gives when imported: the qcow2 header's size, else the file size."""
    with open(path, "rb") as handle:
        header = handle.read(32)
    if header[:4] == b"QFI\xfb" and len(header) >= 32:
        return int(struct.unpack(">Q", header[24:32])[0])
    return os.path.getsize(path)


def _loopback(url: str) -> bool:
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _fetch(url: str, target: str, algorithm: str | None) -> tuple[int, str | None]:
    """Stream ``url`` into ``target``; (bytes, hex digest) - the digest only when an algorithm is given."""
    digest = hashlib.new(algorithm) if algorithm else None
    size = 0
    with urllib.request.urlopen(url, timeout=30) as reply, open(target, "wb") as out:  # noqa: S310 - loopback only, checked
        while True:
            chunk = reply.read(_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_DOWNLOAD_BYTES:
                raise TaskFailed("download exceeds the simulator's size bound")
            out.write(chunk)
            if digest is not None:
                digest.update(chunk)
    return size, digest.hexdigest() if digest is not None else None


def file_digest(path: str, algorithm: str) -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


@route("POST", "/nodes/{node}/storage/{storage}/download-url")
def download_url(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    sid = str(call.params["storage"])
    content = str(call.params["content"])
    storage = st.storages.get(sid)
    if storage is None:
        raise ApiError(500, f"storage '{sid}' does not exist")
    if not storage.enabled:
        raise ApiError(500, f"storage '{sid}' is disabled")
    if content not in storage.content:
        raise param_error({"storage": f"storage '{sid}' is not configured for content-type '{content}'"})
    sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateTemplate"])
    filename = normalize_filename(str(call.params["filename"]))
    if content == "import" and not filename.endswith(IMPORT_EXTENSIONS):
        raise param_error({"filename": "invalid filename or wrong extension"})
    if content == "iso" and not filename.endswith((".iso", ".img")):
        raise param_error({"filename": "invalid filename or wrong extension"})
    url = str(call.params["url"])
    checksum = call.str("checksum")
    algorithm = call.str("checksum-algorithm")
    volid = f"{sid}:{content}/{filename}"
    files = import_files(sim)

    def body(task: Task) -> None:
        task.log(f"downloading {url} to {filename}")
        existing = files.get(volid) if volid in storage.volumes else None
        if existing is not None:
            if checksum and algorithm and file_digest(existing, algorithm) == checksum.lower():
                task.log(f"file already exists {checksum.lower()}, no need to download")
                return
            if not checksum:
                raise TaskFailed(f"refusing to override existing file '{filename}'")
            task.log("checksum mismatch of the existing file, re-download")
        if not _loopback(url):
            raise TaskFailed("the simulator downloads from loopback hosts only")
        tmp = os.path.join(files_dir(sim), f"{filename}.tmp_{os.getpid()}_{id(task)}")
        try:
            try:
                size, got = _fetch(url, tmp, algorithm if checksum else None)
            except (OSError, ValueError) as err:
                raise TaskFailed(f"download failed: {type(err).__name__}") from None
            task.log(f"downloaded {size} bytes")
            if checksum and got != checksum.lower():
                raise TaskFailed(f"checksum mismatch: got '{got}' != expect '{checksum.lower()}'")
            if checksum:
                task.log("calculating checksum...OK, checksum verified")
            final = os.path.join(files_dir(sim), filename)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        sim.sleep("download")
        with st.lock:
            storage.volumes[volid] = size
            files[volid] = final
        task.log(f"download of '{url}' to '{filename}' finished")

    return sim.start_task(call, "download", filename, body)


# ``GET /nodes/{node}/storage/{storage}/content`` (import volumes included) is served by ``appliances.storage_content``:
# one listing for every content type.


def _import_disk(sim: Sim, vm: VM, key: str, value: str, allocated: list[str], task: Task) -> str:
    """``storage:0,import-from=volid[,...]``: a new volume of the image's virtual size on ``storage``."""
    st = sim.state
    data = parse_kv(value, "file")
    source = data.pop("import-from")
    sid = data.pop("file").split(":", 1)[0]
    data.pop("size", None)
    source_sid = source.split(":", 1)[0]
    path = image_file(sim, source)
    if source_sid not in st.storages or source not in st.storages[source_sid].volumes or path is None:
        raise TaskFailed(f"unable to parse volume ID '{source}' or the volume does not exist")
    storage = st.storages.get(sid)
    if storage is None or "images" not in storage.content:
        raise TaskFailed(f"storage '{sid}' does not support vm images")
    nbytes = virtual_size(path)
    if nbytes > storage.avail:
        raise TaskFailed(f"import failed: storage '{sid}' has insufficient free space")
    volid = f"{sid}:{st.next_disk_name(sid, vm.vmid)}"
    storage.volumes[volid] = nbytes
    allocated.append(volid)
    import_files(sim)[volid] = path  # the disk's content is the image's (a real guest boots it)
    task.log(f"importing disk '{source}' to VM {vm.vmid} ...")
    task.log(f"transferred {nbytes / GIB:.1f} GiB of {nbytes / GIB:.1f} GiB (100.00%)")
    return ",".join([volid, *(f"{k}={v}" for k, v in data.items()), f"size={format_size(nbytes)}"])


def _efidisk(sim: Sim, vm: VM, value: str, allocated: list[str]) -> str:
    data = parse_kv(value, "file")
    sid = data.pop("file").split(":", 1)[0]
    storage = sim.state.storages.get(sid)
    if storage is None or "images" not in storage.content:
        raise TaskFailed(f"storage '{sid}' does not support vm images")
    volid = f"{sid}:{sim.state.next_disk_name(sid, vm.vmid)}"
    storage.volumes[volid] = EFIDISK_BYTES
    allocated.append(volid)
    return ",".join([volid, *(f"{k}={v}" for k, v in data.items()), f"size={format_size(EFIDISK_BYTES)}"])


_CREATE_SKIP = {
    "node",
    "vmid",
    "start",
    "unique",
    "force",
    "pool",
    "storage",
    "archive",
    "live-restore",
    "bwlimit",
    "import-working-storage",
}


@route("POST", "/nodes/{node}/qemu")
def qemu_create(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    vmid = int(call.params["vmid"])
    if call.params.get("archive") is not None:
        raise ApiError(501, "restore is not simulated")
    conf = {key: call.str(key) or "" for key in call.params if key not in _CREATE_SKIP}
    # The schema says "user: all": qemu-server checks VM.Allocate on the VM (or its pool) itself.
    pool = call.str("pool")
    if not sim.has(call.subject, f"/vms/{vmid}", ["VM.Allocate"]) and not (
        pool and sim.has(call.subject, f"/pool/{pool}", ["VM.Allocate"])
    ):
        sim.require(call.subject, f"/vms/{vmid}", ["VM.Allocate"])
    for key, value in sorted(conf.items()):  # the storage, import source and bridge checks of qemu-server's create
        if DRIVE_RE.fullmatch(key):
            data = parse_kv(value, "file")
            if not is_cdrom(value):
                sim.require(call.subject, f"/storage/{data['file'].split(':', 1)[0]}", ["Datastore.AllocateSpace"])
            if "import-from" in data:
                source_sid = data["import-from"].split(":", 1)[0]
                sim.require(
                    call.subject, f"/storage/{source_sid}", ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True
                )
        elif re.fullmatch(r"net\d+", key):
            sim.require_vnet(call.subject, parse_kv(value, "model"))
    with st.lock:
        if vmid in st.vms:
            raise ApiError(500, f"unable to create VM {vmid} - VM {vmid} already exists on node '{st.vms[vmid].node}'")
        vm = VM(vmid, sim.call_node(call), {"lock": "create"}, pool=call.str("pool"))
        st.vms[vmid] = vm

    def body(task: Task) -> None:
        allocated: list[str] = []
        try:
            with st.lock:
                newconf: dict[str, str] = {}
                for key in sorted(conf):
                    value = conf[key]
                    if DRIVE_RE.fullmatch(key) and "import-from=" in value:
                        newconf[key] = _import_disk(sim, vm, key, value, allocated, task)
                    elif key == "efidisk0":
                        newconf[key] = _efidisk(sim, vm, value, allocated)
                    else:
                        newconf[key] = materialize(sim, vm, key, value)
                        first = newconf[key].split(",")[0]
                        if DRIVE_RE.fullmatch(key) and first != value.split(",")[0]:
                            allocated.append(first)
                newconf.setdefault("smbios1", f"uuid={st.new_uuid()}")
                newconf.setdefault("vmgenid", st.new_uuid())
                newconf.setdefault("meta", "creation-qemu=10.0.2,ctime=1760000000")
                newconf["lock"] = "create"
                vm.config = newconf
            sim.sleep("qmcreate")
            with st.lock:
                vm.config.pop("lock", None)
        except BaseException:
            with st.lock:
                for volid in allocated:
                    free_volume(sim, volid)
                    import_files(sim).pop(volid, None)
                if st.vms.get(vmid) is vm:
                    del st.vms[vmid]
            raise

    return sim.start_task(call, "qmcreate", str(vmid), body)


@route("POST", "/nodes/{node}/qemu/{vmid}/template")
def qemu_template(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    with st.lock:
        vm = sim.vm(call)
        if vm.is_template:
            raise ApiError(500, "you can't convert a template to a template")
        if vm.status == "running":
            raise ApiError(500, "you can't convert a VM to template if VM is running")
        if vm.lock:
            raise ApiError(500, f"VM is locked ({vm.lock})")
        only = call.str("disk")
        vm.config["lock"] = "template"

    def body(task: Task) -> None:
        sim.sleep("qmtemplate")
        with st.lock:
            files = import_files(sim)
            for key, value in sorted(vm.config.items()):
                if not DRIVE_RE.fullmatch(key) or is_cdrom(value) or (only and key != only):
                    continue
                volid, _sep, rest = value.partition(",")
                base = re.sub(r":vm-(\d+)-disk-", r":base-\1-disk-", volid)
                if base == volid:
                    continue
                storage = st.storages[volid.split(":", 1)[0]]
                storage.volumes[base] = storage.volumes.pop(volid, 0)
                if volid in files:
                    files[base] = files.pop(volid)
                vm.config[key] = base + (_sep + rest if rest else "")
                task.log(f"rename {volid} to {base}")
            vm.config.pop("lock", None)
            vm.config["template"] = "1"

    return sim.start_task(call, "qmtemplate", str(vm.vmid), body)
