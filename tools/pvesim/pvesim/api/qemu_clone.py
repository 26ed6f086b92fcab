# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Clone, resize and destroy: where a VM's volumes come and go, under the per-storage lock (qemu-server)."""

from __future__ import annotations

import re
import typing as t

from .. import guestlink, imagebuild
from ..state import DRIVE_RE, GIB, VM, format_size, is_cdrom, is_cloudinit_volume, parse_kv, print_kv
from ..tasks import Task, TaskFailed
from .core import ApiError, Call, Sim, cluster_member, param_error, perm_error, route
from .qemu_volumes import free_volume, images_storage, print_net


def _on_shared_storage(sim: Sim, conf: dict[str, str]) -> bool:
    """check_storage_access_clone's ``$sharedvm``: every volume of the source (CD images too) on shared storage."""
    for key, value in conf.items():
        volid = value.split(",")[0]
        if not DRIVE_RE.fullmatch(key) or volid in ("none", "cdrom", "") or ":" not in volid:
            continue
        storage = sim.state.storages.get(volid.split(":", 1)[0])
        if storage is None or not storage.shared:
            return False
    return True


@route("POST", "/nodes/{node}/qemu/{vmid}/clone")
def qemu_clone(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    newid = int(call.params["newid"])
    storage = call.str("storage")
    fmt = call.str("format")
    snapname = call.str("snapname")
    target = call.str("target")
    pool = call.str("pool")
    if target in ("localhost", sim.call_node(call)):
        target = None  # qemu-server: the local node as target is no target
    if target:
        cluster_member(sim, target)
    with st.lock:
        if pool is not None and pool not in st.pools:  # RPCEnvironment::check_pool_exist
            raise perm_error(f"pool '{pool}' does not exist")
        src = sim.vm(call)
        if storage:
            target_storage = images_storage(sim, storage)
            if target and not target_storage.on_node(target):  # storage_check_enabled on the target node
                raise ApiError(500, f"storage '{storage}' is not available on node '{target}'")
            if target and not target_storage.shared:
                raise ApiError(500, f"can't clone to non-shared storage '{storage}'")
        if src.lock:
            raise ApiError(500, f"VM is locked ({src.lock})")
        if snapname and snapname not in src.snapshots:
            raise ApiError(500, f"snapshot '{snapname}' does not exist")
        full = call.bool("full", not src.is_template) if call.params.get("full") is not None else not src.is_template
        if storage and not full:
            raise ApiError(500, "parameter 'storage' not allowed for linked clones")
        if fmt and not full:
            raise ApiError(500, "parameter 'format' not allowed for linked clones")
        oldconf = dict(src.snapshots[snapname].conf) if snapname else dict(src.config)
        for key, value in sorted(oldconf.items()):  # check_storage_access_clone, then check_bridge_access
            if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
                sid = value.split(":", 1)[0]
                sim.require(
                    call.subject, f"/storage/{storage if (storage and full) else sid}", ["Datastore.AllocateSpace"]
                )
        for key, value in sorted(oldconf.items()):
            if re.fullmatch(r"net\d+", key):
                sim.require_vnet(call.subject, parse_kv(value, "model"))
        if target and not _on_shared_storage(sim, oldconf):
            raise ApiError(500, f"can't clone VM to node '{target}' (VM uses local storage)")
        if call.fault("lock_timeout"):
            raise ApiError(500, f"can't lock file '/var/lock/qemu-server/lock-{newid}.conf' - got timeout")
        if newid in st.vms:
            raise ApiError(500, f"unable to create VM {newid}: config file already exists")
        if newid in st.containers:
            # PVE finds no qemu config file, then check_vmid_unused refuses the ID held by the container.
            raise ApiError(500, f"CT {newid} already exists on node '{st.node}'")
        # create the target config with the clone lock right away (atomic under the state lock)
        # the config is created on the node the clone runs on and renamed into the target node's directory at the end
        target_vm = VM(
            newid, sim.call_node(call), {"lock": "clone"}, pool=pool
        )  # add_vm_to_pool: a member from the start
        st.vms[newid] = target_vm
        src_name = oldconf.get("name")

    # the storages the clone allocates on, counted as in flight from now until its last allocation
    alloc_storages = sorted(
        {
            storage if (storage and full and not is_cloudinit_volume(v)) else v.split(":", 1)[0]
            for k, v in oldconf.items()
            if DRIVE_RE.fullmatch(k) and (not is_cdrom(v) or is_cloudinit_volume(v))
        }
    )
    phases = [sim.storage_locks.begin_allocating(sid) for sid in alloc_storages]

    def end_allocating() -> None:
        for phase in phases:
            phase.end()

    def body(task: Task) -> None:
        task.log(f"create {'full' if full else 'linked'} clone of VM {src.vmid} ({src_name or src.vmid})")
        newconf: dict[str, str] = {}
        allocated: list[str] = []
        drives: list[tuple[str, str]] = []
        try:
            with st.lock:
                for key in sorted(oldconf):
                    value = oldconf[key]
                    if key in (
                        "parent",
                        "snaptime",
                        "vmstate",
                        "snapstate",
                        "runningcpu",
                        "runningmachine",
                        "lock",
                        "template",
                    ):
                        continue
                    if re.fullmatch(r"unused\d+", key):
                        continue
                    if re.fullmatch(r"net\d+", key):  # always a new MAC, the value printed anew (print_net)
                        first = value.split(",")[0]
                        model = first.split("=", 1)[0] if "=" in first else first
                        if model == "model":
                            model = first.split("=", 1)[1]
                        newconf[key] = print_net(model, st.new_mac(), parse_kv(",".join(value.split(",")[1:]), "model"))
                    elif DRIVE_RE.fullmatch(key) and (not is_cdrom(value) or is_cloudinit_volume(value)):
                        drives.append((key, value))
                    else:
                        newconf[key] = value
            # clone_disk per drive (sorted, like qemu-server): vdisk_alloc / vdisk_clone under the storage lock
            for index, (key, value) in enumerate(drives):
                volid = value.split(",")[0]
                if is_cloudinit_volume(value):
                    sid = volid.split(":", 1)[0]
                    task.log(f"create full clone of drive {key} ({volid})")
                    with sim.storage_locks.hold(sid, "alloc", f"{sid}:vm-{newid}-cloudinit"), st.lock:
                        new_vol = f"{sid}:vm-{newid}-cloudinit"
                        st.storages[sid].volumes[new_vol] = 4 << 20
                        allocated.append(new_vol)
                    newconf[key] = ",".join([new_vol, *value.split(",")[1:]])
                else:
                    tsid = storage if (storage and full) else volid.split(":", 1)[0]
                    task.log(f"create {'full' if full else 'linked'} clone of drive {key} ({volid})")
                    with sim.storage_locks.hold(tsid, "alloc", volid), st.lock:
                        tstore = st.storages[tsid]
                        size = st.volume_size(volid) or 0
                        if full:
                            if call.fault("disk_full") or size > tstore.avail:
                                name = st.next_disk_name(tsid, newid)
                                raise TaskFailed(
                                    f"lvcreate 'pve/{name}' error:   Volume group \"pve\" has "
                                    f"insufficient free space ({tstore.avail >> 22} extents): {size >> 22} required."
                                )
                            new_vol = f"{tsid}:{st.next_disk_name(tsid, newid)}"
                        else:
                            base = volid.split(":", 1)[1].split("/")[0]
                            new_vol = f"{tsid}:{base}/{st.next_disk_name(tsid, newid)}"
                        tstore.volumes[new_vol] = size
                        allocated.append(new_vol)
                        imagebuild.clone_image_file(
                            sim, volid, new_vol
                        )  # --guests real: the clone boots the source's content
                    newconf[key] = ",".join([new_vol, *value.split(",")[1:]])
                if index == len(drives) - 1:
                    end_allocating()  # before the last line a client could read as "allocations done"
                if full or is_cloudinit_volume(value):
                    task.log(f"allocated target volume '{new_vol}'")  # qemu-server clone_disk (commit 473b6774)
            end_allocating()
            with st.lock:
                smbios = parse_kv(newconf.get("smbios1", ""), "uuid")
                smbios["uuid"] = st.new_uuid()
                newconf["smbios1"] = print_kv(smbios, "")
                if newconf.get("vmgenid"):
                    newconf["vmgenid"] = st.new_uuid()
                newconf["name"] = call.str("name") or f"Copy-of-VM-{src_name or src.vmid}"
                if call.str("description"):
                    newconf["description"] = call.str("description") or ""
                newconf["lock"] = "clone"
                target_vm.config = newconf
            if full:
                for vol in allocated:
                    gib = (st.volume_size(vol) or 0) / GIB
                    task.log(f"transferred {gib:.1f} GiB of {gib:.1f} GiB (100.00%)")
            sim.sleep("qmclone_full" if full else "qmclone_linked")
            with st.lock:
                target_vm.config.pop("lock", None)
                if target:
                    target_vm.node = target  # qemu-server: rename($conffile, config_file($newid, $target))
                target_vm.cloudinit_generated = guestlink.generated_snapshot(target_vm.config)
        except BaseException as err:
            end_allocating()
            # qemu-server clone_vm: vdisk_free every new volume (each under the storage lock; a failure only
            # warns and leaves the volume), then unlink the new config file, then die "clone failed: ..."
            for vol in allocated:
                try:
                    with sim.storage_locks.hold(vol.split(":", 1)[0], "free", vol), st.lock:
                        free_volume(sim, vol)
                except TaskFailed as free_err:
                    task.log(str(free_err))
            with st.lock:
                if st.vms.get(newid) is target_vm:
                    del st.vms[newid]
            if isinstance(err, TaskFailed):
                raise TaskFailed(f"clone failed: {err}") from err
            raise

    def on_finish(task: Task) -> None:
        end_allocating()
        if task.lines and task.lines[-1].startswith("TASK ERROR"):
            with st.lock:
                vm2 = st.vms.get(newid)
                if vm2 is target_vm:
                    for key, value in list(vm2.config.items()):
                        if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
                            free_volume(sim, value.split(",")[0])
                    del st.vms[newid]

    return sim.start_task(call, "qmclone", str(src.vmid), body, on_finish)


@route("PUT", "/nodes/{node}/qemu/{vmid}/resize")
def qemu_resize(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    with st.lock:
        vm = sim.vm(call)
        current = vm.config.get(str(call.params["disk"]))
    disk = str(call.params["disk"])
    sizestr = str(call.params["size"])
    digest = call.str("digest")
    skiplock = call.bool("skiplock")
    if skiplock and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    # LVMPlugin::volume_resize runs lvextend under the storage lock (LVM and LVM-thin)
    lock_sid = current.split(":", 1)[0] if current and not is_cdrom(current) and ":" in current else None
    if lock_sid not in st.storages or st.storages[lock_sid].type not in ("lvm", "lvmthin"):
        lock_sid = None
    phase = sim.storage_locks.begin_allocating(lock_sid) if lock_sid else None

    def grow(task: Task) -> None:
        with st.lock:
            if digest and digest != vm.digest() or call.fault("checksum_mismatch"):
                raise TaskFailed("checksum mismatch (file change by other user?)")
            if vm.lock and not skiplock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            value = vm.config.get(disk)
            if value is None:
                raise TaskFailed(f"disk '{disk}' does not exist")
            if is_cdrom(value):
                raise TaskFailed("you can't resize a cdrom")
            volid = value.split(",")[0]
            sid = volid.split(":", 1)[0]
            sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace"])
            size = st.volume_size(volid)
            if size is None:
                raise TaskFailed(f"Could not determine current size of volume '{volid}'")
            m = re.fullmatch(r"(\+)?(\d+(?:\.\d+)?)([KMGT])?", sizestr)
            if not m:
                raise TaskFailed("internal error")
            newsize = float(m.group(2)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(
                m.group(3) or "", 1
            )
            if m.group(1):
                newsize += size
            new = int(newsize)
            if new < size:
                raise TaskFailed("shrinking disks is not supported")
            if new == size:
                return
            storage = st.storages[sid]
            if call.fault("disk_full") or new - size > storage.avail:
                raise TaskFailed(
                    f"lvextend 'pve/{volid.split(':', 1)[1]}' error:   Insufficient free space: "
                    f"{(new - size) >> 22} extents needed, but only {storage.avail >> 22} available"
                )
            task.log(
                f"  Size of logical volume pve/{volid.split(':', 1)[1].split('/')[-1]} changed from "
                f"{format_size(size)} to {format_size(new)}."
            )
            storage.volumes[volid] = new
            parts = [p for p in value.split(",")[1:] if not p.startswith("size=")]
            vm.config[disk] = ",".join([volid, *parts, f"size={format_size(new)}"])

    def body(task: Task) -> None:
        if lock_sid is None:
            grow(task)
        else:
            with sim.storage_locks.hold(lock_sid, "resize", current.split(",")[0] if current else ""):
                grow(task)
        sim.sleep("resize")

    def on_finish(task: Task) -> None:
        if phase is not None:
            phase.end()

    return sim.start_task(call, "resize", str(vm.vmid), body, on_finish)


@route("DELETE", "/nodes/{node}/qemu/{vmid}")
def qemu_destroy(sim: Sim, call: Call) -> str:
    """PVE's destroy_vm: early checks (protection, running) in the request and again under the config lock in the
    ``qmdestroy`` worker, which then refuses a locked VM, frees the VM's volumes (with ``destroy-unreferenced-disks``
    also its volumes on enabled storages that the config does not reference) and removes the config last."""
    sim.check_node(call)
    st = sim.state
    skiplock = call.bool("skiplock")
    if skiplock and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    unreferenced = call.bool("destroy-unreferenced-disks")

    def early_checks(vm: VM, fail: t.Callable[[str], Exception]) -> None:
        if vm.config.get("protection") == "1":
            raise fail(f"can't remove VM {vm.vmid} - protection mode enabled")
        if vm.status == "running":
            raise fail(f"VM {vm.vmid} is running - destroy failed")

    with st.lock:
        vm = sim.vm(call)
        early_checks(vm, lambda message: ApiError(500, message))

    def body(task: Task) -> None:
        with st.lock:
            if st.vms.get(vm.vmid) is not vm:
                raise TaskFailed(f"Configuration file 'nodes/{st.node}/qemu-server/{vm.vmid}.conf' does not exist")
            early_checks(vm, TaskFailed)
            if vm.lock and not skiplock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            linked = [
                v
                for v in st.vms.values()
                for val in v.config.values()
                if v is not vm and vm.is_template and f"base-{vm.vmid}-disk" in val and "/" in val.split(",")[0]
            ]
            if linked:
                raise TaskFailed(f"base volume of template {vm.vmid} is used by linked clones")
            vm.config["lock"] = "destroyed"
        sim.sleep("qmdestroy")
        with st.lock:
            volids = [
                value.split(",")[0]
                for key, value in vm.config.items()
                if (DRIVE_RE.fullmatch(key) or re.fullmatch(r"unused\d+", key))
                and (not is_cdrom(value) or is_cloudinit_volume(value))
            ]
            for snap in vm.snapshots.values():
                volids += [value.split(",")[0] for key, value in snap.conf.items() if DRIVE_RE.fullmatch(key)]
            referenced = set(volids)
            if unreferenced:
                owned = re.compile(rf"(^|/)(vm|base)-{vm.vmid}-")
                for storage in st.storages.values():
                    volids += [v for v in storage.volumes if storage.enabled and owned.search(v.split(":", 1)[-1])]
        # destroy_vm: vdisk_free per volume (under the storage lock); a failure warns and leaves the volume
        for volid in dict.fromkeys(volids):
            try:
                with sim.storage_locks.hold(volid.split(":", 1)[0], "free", volid), st.lock:
                    if volid not in referenced:
                        task.log(f"  Removed unreferenced volume '{volid}'")
                    elif sim.state.volume_size(volid) is not None:
                        task.log(f'  Logical volume "{volid.split(":", 1)[-1].split("/")[-1]}" successfully removed.')
                    free_volume(sim, volid)
            except TaskFailed as err:
                task.warn(f"Could not remove disk '{volid}', check manually: {err}")
        with st.lock:
            st.vms.pop(vm.vmid, None)
        guestlink.forget_vm(sim, vm.vmid)

    return sim.start_task(call, "qmdestroy", str(vm.vmid), body)
