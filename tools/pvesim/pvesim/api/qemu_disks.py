# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A VM's disks as objects of their own (qemu-server API2/Qemu.pm): ``unlink`` (detach to ``unusedN`` or destroy)
and ``move_disk`` (to another storage, or reassigned to another VM), with qemu-server's refusals."""

from __future__ import annotations

import dataclasses
import re

from ..state import DRIVE_RE, FILE_STORAGE_TYPES, VM, format_size, is_cdrom
from ..tasks import Task, TaskFailed
from .core import ApiError, Call, Sim, param_error, route
from .qemu_config import qemu_config_put
from .qemu_volumes import free_volume, images_storage, materialize

_UNUSED_RE = re.compile(r"unused\d+")


@route("PUT", "/nodes/{node}/qemu/{vmid}/unlink")
def qemu_unlink(sim: Sim, call: Call) -> None:
    """``update_vm`` with ``delete=idlist``: a disk goes to ``unusedN``, or is destroyed with ``force``."""
    params = {k: v for k, v in call.params.items() if k not in ("idlist",)}
    params["delete"] = call.params["idlist"]
    qemu_config_put(sim, dataclasses.replace(call, params=params))


def _volume_format(sim: Sim, volid: str) -> str:
    storage = sim.state.storages.get(volid.split(":", 1)[0])
    if storage is not None and storage.type not in FILE_STORAGE_TYPES:
        return "raw"
    match = re.search(r"\.(raw|qcow2|vmdk)$", volid)
    return match.group(1) if match else "raw"


def _new_volid(sim: Sim, sid: str, vmid: int, fmt: str) -> str:
    storage = sim.state.storages[sid]
    name = sim.state.next_disk_name(sid, vmid)
    if storage.type in FILE_STORAGE_TYPES:
        return f"{sid}:{vmid}/{name}.{fmt}"
    return f"{sid}:{name}"


def _in_snapshot(vm: VM, volid: str) -> bool:
    return any(
        value.split(",")[0] == volid
        for snap in vm.snapshots.values()
        for key, value in snap.conf.items()
        if DRIVE_RE.fullmatch(key) or _UNUSED_RE.fullmatch(key)
    )


def _drive_volume(disk: str, value: str, cdrom_refusal: str) -> str:
    """The volume of a drive (or an ``unusedN``) that is to move; a drive without one, or a CD drive, is refused."""
    volid = value if _UNUSED_RE.fullmatch(disk) else value.split(",")[0]
    if volid in ("none", "cdrom", ""):
        raise ApiError(500, f"disk '{disk}' has no associated volume")
    if is_cdrom(value):
        raise ApiError(500, cdrom_refusal)
    return volid


def _check_lock(vm: VM) -> None:
    if vm.lock:
        raise ApiError(500, f"VM is locked ({vm.lock})")


def _assert_digest(digest: str | None, vm: VM, prefix: str = "") -> None:
    if digest and digest != vm.digest():
        raise ApiError(500, f"{prefix}detected modified configuration - file changed by other user? Try again.")


def _check_move(sim: Sim, call: Call, vm: VM, disk: str, sid: str, fmt: str | None) -> tuple[str, bool]:
    """load_and_check_move: the source volume, and whether a snapshot uses it."""
    _check_lock(vm)
    _assert_digest(call.str("digest"), vm)
    value = vm.config.get(disk)
    if not value:
        raise ApiError(500, f"disk '{disk}' does not exist")
    volid = _drive_volume(disk, value, "you can't move a cdrom")
    old_fmt = _volume_format(sim, volid)
    if volid.split(":", 1)[0] == sid and (not fmt or old_fmt == fmt):
        raise ApiError(500, "you can't move to the same storage with same format")
    images_storage(sim, sid)
    snapshotted = _in_snapshot(vm, volid)
    if snapshotted and call.bool("delete"):
        raise ApiError(500, "you can't move a disk with snapshots and delete the source")
    return volid, snapshotted


def _move_to_storage(sim: Sim, call: Call, vm: VM, disk: str, sid: str) -> str:
    sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace"])
    fmt = call.str("format")
    _check_move(sim, call, vm, disk, sid, fmt)

    def body(task: Task) -> None:
        st = sim.state
        with st.lock:
            try:
                volid, snapshotted = _check_move(sim, call, vm, disk, sid, fmt)
            except ApiError as err:
                raise TaskFailed(err.message) from None
            storage = st.storages[sid]
            size = st.volume_size(volid) or 0
            if size > storage.avail:
                raise TaskFailed(f"storage migration failed: not enough space on storage '{sid}'")
            target_fmt = fmt if storage.type in FILE_STORAGE_TYPES and fmt else "raw"
            new_volid = _new_volid(sim, sid, vm.vmid, target_fmt)
            storage.volumes[new_volid] = size
            task.log(
                f"copying volume '{volid}' from current storage '{volid.split(':', 1)[0]}' to target storage '{sid}'"
            )
            if snapshotted:
                task.warn("moving disk with snapshots, snapshots will not be moved!")
        sim.sleep("qmmove")
        with st.lock:
            old = vm.config[disk]
            options = (
                [p for p in old.split(",")[1:] if not p.startswith("size=")] if not _UNUSED_RE.fullmatch(disk) else []
            )
            vm.config[disk] = ",".join([new_volid, *options, f"size={format_size(size)}"])
            if call.bool("delete"):
                task.log(f"removing source volume '{volid}' after successful copy")
                free_volume(sim, volid)
            else:
                n = 0
                while f"unused{n}" in vm.config:
                    n += 1
                vm.config[f"unused{n}"] = volid
                task.log(f"adding source volume '{volid}' as 'unused{n}' to config")

    return sim.start_task(call, "qmmove", str(vm.vmid), body)


def _check_reassign(sim: Sim, call: Call, disk: str, target_disk: str) -> tuple[VM, VM, str]:
    """load_and_check_reassign_configs: (source VM, target VM, source volume)."""
    st = sim.state
    vmid, target_vmid = int(call.params["vmid"]), int(call.params["target-vmid"])
    source, target = st.vms.get(vmid), st.vms.get(target_vmid)
    if source is None:
        raise ApiError(500, f"could not find VM {vmid}")
    if target is None:
        raise ApiError(500, f"could not find target VM {target_vmid}")
    if source.node != target.node:
        raise ApiError(500, f"Both VMs need to be on the same node ({source.node} != {target.node})")
    _check_lock(source)
    _check_lock(target)
    if source.is_template or target.is_template:
        raise ApiError(500, "Can't move disks from or to template VMs")
    _assert_digest(call.str("digest"), source, f"VM {vmid}: ")
    _assert_digest(call.str("target-digest"), target, f"VM {target_vmid}: ")
    value = source.config.get(disk)
    if value is None:
        raise ApiError(500, f"Disk '{disk}' for VM '{vmid}' does not exist")
    if target_disk in target.config:
        raise ApiError(500, f"Target disk key '{target_disk}' is already in use for VM '{target_vmid}'")
    volid = _drive_volume(disk, value, "CD drive contents can't be moved to another VM")
    if ":" not in volid:
        raise ApiError(500, f"Volume '{volid}' not managed by PVE")
    if _in_snapshot(source, volid):
        raise ApiError(500, "Can't move disk used by a snapshot to another VM")
    if source.status == "running" and not _UNUSED_RE.fullmatch(disk):
        raise ApiError(500, "Cannot move disk to another VM while the source VM is running - detach first")
    return source, target, volid


def _reassign(sim: Sim, call: Call, disk: str) -> str:
    target_vmid = int(call.params["target-vmid"])
    target_disk = call.str("target-disk") or disk
    if call.userid != "root@pam":
        sim.require(call.subject, f"/vms/{target_vmid}", ["VM.Config.Disk"])
    if int(call.params["vmid"]) == target_vmid:
        raise param_error({"target-vmid": "must be different than source VMID to reassign disk"})
    _source, _target, volid = _check_reassign(sim, call, disk, target_disk)
    sim.require(call.subject, f"/storage/{volid.split(':', 1)[0]}", ["Datastore.AllocateSpace"])

    def body(task: Task) -> None:
        st = sim.state
        sim.sleep("qmmove")
        with st.lock:
            try:
                source, target, volid = _check_reassign(sim, call, disk, target_disk)
            except ApiError as err:
                raise TaskFailed(err.message) from None
            task.log(f"reassign disk '{disk}' from VM '{source.vmid}' as '{target_disk}' to VM '{target.vmid}'")
            sid = volid.split(":", 1)[0]
            storage = st.storages[sid]
            new_volid = _new_volid(sim, sid, target.vmid, _volume_format(sim, volid))
            storage.volumes[new_volid] = storage.volumes.pop(volid, 0)
            value = source.config.pop(disk)
            task.log(f"removing disk '{disk}' from VM '{source.vmid}' config")
            if _UNUSED_RE.fullmatch(target_disk):
                target.config[target_disk] = new_volid
            else:
                options = value.split(",")[1:] if not _UNUSED_RE.fullmatch(disk) else []
                target.config[target_disk] = materialize(sim, target, target_disk, ",".join([new_volid, *options]))

    return sim.start_task(call, "qmmove", f"{call.params['vmid']}-{disk}>{target_vmid}-{target_disk}", body)


@route("POST", "/nodes/{node}/qemu/{vmid}/move_disk")
def qemu_move_disk(sim: Sim, call: Call) -> str:
    """Either ``storage`` (copy, the source kept as ``unusedN`` unless ``delete``) or ``target-vmid`` (reassign)."""
    sim.check_node(call)
    disk = str(call.params["disk"])
    sid = call.str("storage")
    if call.params.get("target-vmid") is not None and sid:
        msg = "either set 'storage' or 'target-vmid', but not both"
        raise param_error({"target-vmid": msg, "storage": msg})
    if call.params.get("target-vmid") is not None:
        return _reassign(sim, call, disk)
    if sid:
        return _move_to_storage(sim, call, sim.vm(call), disk, sid)
    msg = "both 'storage' and 'target-vmid' missing, either needs to be set"
    raise param_error({"target-vmid": msg, "storage": msg})
