# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Volume bookkeeping shared by config updates, start, clone, destroy and imports (qemu-server vdisk_alloc/free)."""

from __future__ import annotations

import re

from ..state import DRIVE_RE, GIB, VM, Storage, format_size, is_cdrom, is_cloudinit_volume, parse_kv
from ..tasks import TaskFailed
from .core import ApiError, Sim, param_error


def enabled_storage(sim: Sim, sid: str) -> Storage:
    """``PVE::Storage::storage_check_enabled``: the storage exists and is not disabled."""
    storage = sim.state.storages.get(sid)
    if storage is None:
        raise ApiError(500, f"storage '{sid}' does not exist")
    if not storage.enabled:
        raise ApiError(500, f"storage '{sid}' is disabled")
    return storage


def images_storage(sim: Sim, sid: str) -> Storage:
    """An enabled storage that takes VM disk images (the target of a clone or a disk move)."""
    storage = enabled_storage(sim, sid)
    if "images" not in storage.content:
        raise param_error({"storage": f"storage '{sid}' does not support vm images"})
    return storage


def materialize(sim: Sim, vm: VM, key: str, value: str) -> str:
    """Allocate new volumes (``storage:SIZE``), cloud-init drives and MACs like qemu-server."""
    st = sim.state
    if DRIVE_RE.fullmatch(key):
        parts = value.split(",")
        m = re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?|cloudinit)", parts[0], re.I)
        if m:
            sid, size = m.group(1), m.group(2)
            storage = st.storages[sid]
            if not storage.enabled or not storage.active:
                raise TaskFailed(f"storage '{sid}' is not available on node '{vm.node}'")
            if size == "cloudinit":
                volid = f"{sid}:vm-{vm.vmid}-cloudinit"
                storage.volumes[volid] = 4 << 20
                rest = [p for p in parts[1:] if not p.startswith("media=")]
                return ",".join([volid, "media=cdrom", *rest])
            if "images" not in storage.content:
                raise TaskFailed(f"storage '{sid}' does not support vm images")
            nbytes = int(float(size) * GIB)
            if nbytes > storage.avail:
                raise TaskFailed(
                    f"lvcreate 'pve/{st.next_disk_name(sid, vm.vmid)}' error:   Volume group \"pve\" has insufficient "
                    f"free space ({storage.avail >> 22} extents): {nbytes >> 22} required."
                )
            volid = f"{sid}:{st.next_disk_name(sid, vm.vmid)}"
            storage.volumes[volid] = nbytes
            rest = [p for p in parts[1:] if not p.startswith("size=")]
            return ",".join([volid, *rest, f"size={format_size(nbytes)}"])
        if ":" in parts[0] and not is_cdrom(value) and "import-from=" not in value:
            # an existing volume: qemu-server's create_disks reads its size from the storage and writes it
            # (a drive update without ``size=`` still shows the size, one with a wrong ``size=`` is corrected)
            existing = st.volume_size(parts[0])
            if existing is None:
                raise TaskFailed(f"volume {parts[0]} does not exist")
            rest = [p for p in parts[1:] if not p.startswith("size=")]
            return ",".join([parts[0], *rest, f"size={format_size(existing)}"])
    if re.fullmatch(r"net\d+", key):
        parts = value.split(",")
        first = parts[0]
        if "=" in first and first.split("=", 1)[0] not in ("model", "macaddr", "bridge"):
            model, mac = first.split("=", 1)  # virtio=MAC shorthand (keyAlias)
            data = parse_kv(",".join(parts[1:]), "model")
        else:
            data = parse_kv(value, "model")
            model, mac = data.pop("model", "virtio"), data.pop("macaddr", None)
        return print_net(model, mac or st.new_mac(), data)
    return value


def print_net(model: str, mac: str, props: dict[str, str]) -> str:
    """qemu-server ``print_net`` (pve-common ``print_property_string``): ``model=MAC`` first (the key alias combined
    with ``macaddr``), then every other property sorted by key: ``virtio=MAC,bridge=vmbr2,mtu=1450,tag=42``."""
    return ",".join([f"{model}={mac.upper()}", *(f"{k}={props[k]}" for k in sorted(props) if k != "macaddr")])


def delete_key(sim: Sim, vm: VM, key: str, force: bool) -> None:
    value = vm.config.pop(key, None)
    if value is None:
        return
    if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
        volid = value.split(",")[0]
        unused_or_free(sim, vm, volid, force)
    elif DRIVE_RE.fullmatch(key) and is_cloudinit_volume(value):
        free_volume(sim, value.split(",")[0])
    elif re.fullmatch(r"unused\d+", key):
        free_volume(sim, value)


def unused_or_free(sim: Sim, vm: VM, volid: str, force: bool) -> None:
    if force:
        free_volume(sim, volid)
        return
    n = 0
    while f"unused{n}" in vm.config:
        n += 1
    vm.config[f"unused{n}"] = volid


def free_volume(sim: Sim, volid: str) -> None:
    storage = sim.state.storages.get(volid.split(":", 1)[0])
    if storage is not None:
        storage.volumes.pop(volid, None)
