# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The appliance index and template downloads (``GET/POST /nodes/{node}/aplinfo``) and a storage's content list (``GET
/nodes/{node}/storage/{storage}/content``): what containers are created from."""

from __future__ import annotations

import hashlib
import re
import typing as t

from .api.core import ApiError, Call, Sim, param_error, route
from .lxc import _FORMATS, MB, TEMPLATE_CACHE
from .tasks import Task, TaskFailed

# The appliance index (``pveam available``): a fixed subset with real names and versions.
APPLIANCES: tuple[dict[str, str], ...] = tuple(
    {
        "template": f"{package}_{version}_amd64.{ext}",
        "package": package,
        "version": version,
        "os": os_name,
        "section": section,
        "type": "lxc",
        "architecture": "amd64",
        "maintainer": "Proxmox Support Team <support@proxmox.com>",
        "headline": headline,
        "description": headline,
        "infopage": "https://pve.proxmox.com/wiki/Linux_Container#pct_supported_distributions",
        "location": f"http://download.proxmox.com/images/system/{package}_{version}_amd64.{ext}",
        "source": f"http://download.proxmox.com/images/system/{package}_{version}_amd64.{ext}",
        "sha512sum": hashlib.sha512(f"{package}_{version}".encode()).hexdigest(),
        "manageurl": "",
    }
    for package, version, ext, os_name, section, headline in (
        ("debian-12-standard", "12.7-1", "tar.zst", "debian-12", "system", "Debian 12 Bookworm (standard)"),
        ("debian-12-standard", "12.12-1", "tar.zst", "debian-12", "system", "Debian 12 Bookworm (standard)"),
        ("debian-13-standard", "13.1-2", "tar.zst", "debian-13", "system", "Debian 13 Trixie (standard)"),
        ("ubuntu-24.04-standard", "24.04-2", "tar.zst", "ubuntu-24.04", "system", "Ubuntu 24.04 Noble (standard)"),
        ("alpine-3.22-default", "20250617", "tar.xz", "alpine-3.22", "system", "Alpine Linux 3.22 (default)"),
    )
)


TEMPLATE_SIZE = 128 * MB


@route("GET", "/nodes/{node}/aplinfo")
def aplinfo(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    return [dict(entry) for entry in APPLIANCES]


@route("POST", "/nodes/{node}/aplinfo")
def aplinfo_download(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    template = str(call.params["template"])
    sid = str(call.params["storage"])
    entry = next((e for e in APPLIANCES if e["template"] == template), None)
    if entry is None:
        raise param_error({"template": "no such template"})
    storage = st.storages.get(sid)
    if storage is None or not storage.on_node(sim.call_node(call)):
        raise ApiError(500, f"storage '{sid}' does not exist")
    if "vztmpl" not in storage.content:
        raise param_error({"storage": f"storage '{sid}' does not support templates"})
    volid = f"{sid}:vztmpl/{template}"

    def body(task: Task) -> None:
        task.log(f"starting template download from: {entry['location']}")
        task.log(f"target file: {TEMPLATE_CACHE}/{template}")
        sim.sleep("download")
        with st.lock:
            if TEMPLATE_SIZE > storage.avail and volid not in storage.volumes:
                raise TaskFailed(f"write failed: No space left on device ({TEMPLATE_CACHE}/{template}.tmp.{task.pid})")
            storage.volumes[volid] = TEMPLATE_SIZE
        task.log(f"{TEMPLATE_SIZE // MB}.00 MB downloaded, calculating checksum")
        task.log(f"download of '{entry['location']}' to '{TEMPLATE_CACHE}/{template}' finished")

    return sim.start_task(call, "download", template, body)


# Volume name prefixes of the file-based content types (``<storage>:<type>/<file>``).
_FILE_CONTENT = ("vztmpl", "import", "iso", "snippets", "backup")


def _content_entry(sim: Sim, volid: str, size: int) -> dict[str, t.Any]:
    name = volid.split(":", 1)[1]
    kind = next((k for k in _FILE_CONTENT if name.startswith(k + "/")), None)
    if kind == "vztmpl":
        fmt = next((f for suffix, f in _FORMATS.items() if name.endswith(suffix)), "raw")
        return {"volid": volid, "content": "vztmpl", "format": fmt, "size": size, "ctime": 1760000000}
    if kind is not None:  # an imported cloud image (imagebuild's download-url) and the other files: format = extension
        return {"volid": volid, "content": kind, "format": name.rsplit(".", 1)[-1], "size": size}
    base = name.split("/")[-1]
    m = re.match(r"(?:vm|base|subvol)-(\d+)-", base)
    fmt = base.rsplit(".", 1)[-1] if base.endswith((".qcow2", ".raw", ".vmdk")) else "raw"  # file storages
    entry: dict[str, t.Any] = {"volid": volid, "format": fmt, "size": size, "used": size}
    if m:
        entry["vmid"] = int(m.group(1))
        entry["content"] = "rootdir" if entry["vmid"] in sim.state.containers else "images"
    else:
        entry["content"] = "images"
    if "/" in name and name.split("/")[0].startswith("base-"):  # a linked clone names its base volume
        entry["parent"] = f"{volid.split(':', 1)[0]}:{name.split('/')[0]}"
    return entry


@route("GET", "/nodes/{node}/storage/{storage}/content")
def storage_content(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """Every content type of a storage: templates, imported images, VM disks and container volumes."""
    sim.check_node(call)
    sid = str(call.params["storage"])
    storage = sim.state.storages.get(sid)
    if storage is None or not storage.on_node(sim.call_node(call)):
        raise ApiError(500, f"storage '{sid}' does not exist")
    if not storage.enabled:
        raise ApiError(500, f"storage '{sid}' is disabled")
    content = call.str("content")
    vmid = call.int("vmid")
    res = []
    for volid in sorted(storage.volumes):
        entry = _content_entry(sim, volid, storage.volumes[volid])
        if content and entry["content"] != content:
            continue
        if vmid is not None and entry.get("vmid") != vmid:
            continue
        res.append(entry)
    return res
