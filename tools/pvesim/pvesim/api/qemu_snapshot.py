# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Snapshots: list, create, config, delete, rollback (qemu-server API2/Qemu.pm, PVE/AbstractConfig.pm)."""

from __future__ import annotations

import time
import typing as t

from .. import guestlink
from ..state import DRIVE_RE, Snapshot, is_cdrom
from ..tasks import Task, TaskFailed
from .core import ApiError, Call, Sim, route
from .qemu_config import snapshot_config_of

RESERVED_SNAPNAMES = ("current", "pending")


@route("GET", "/nodes/{node}/qemu/{vmid}/snapshot")
def snapshot_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    vm = sim.vm(call)
    res: list[dict[str, t.Any]] = []
    for name, s in sorted(vm.snapshots.items()):
        entry: dict[str, t.Any] = {"name": name, "snaptime": s.snaptime, "description": s.description}
        if s.vmstate:
            entry["vmstate"] = 1
        if s.parent:
            entry["parent"] = s.parent
        res.append(entry)
    current: dict[str, t.Any] = {
        "name": "current",
        "digest": vm.digest(),
        "description": "You are here!",
        "running": 1 if vm.status == "running" else 0,
    }
    if vm.config.get("parent"):
        current["parent"] = vm.config["parent"]
    res.append(current)
    return res


@route("POST", "/nodes/{node}/qemu/{vmid}/snapshot")
def snapshot_create(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    snapname = str(call.params["snapname"])
    with st.lock:
        vm = sim.vm(call)
    if snapname.lower() in RESERVED_SNAPNAMES:
        raise ApiError(500, f"unable to use snapshot name '{snapname.lower()}' (reserved name)")
    vmstate = call.bool("vmstate")
    description = call.str("description") or ""

    def body(task: Task) -> None:
        with st.lock:
            if vm.lock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            if snapname in vm.snapshots:
                raise TaskFailed(f"snapshot name '{snapname}' already used")
            vm.config["lock"] = "snapshot"
        try:
            with_state = vmstate and vm.status == "running"
            if with_state:
                task.log("saving VM state and RAM using storage 'local-lvm'")
            sim.sleep("qmsnapshot_vmstate" if with_state else "qmsnapshot")
            with st.lock:
                conf = {k: v for k, v in vm.config.items() if k not in ("lock", "parent", "description")}
                for key, value in list(conf.items()):
                    if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
                        task.log(f"snapshotting '{key}' ({value.split(',')[0]})")
                vm.snapshots[snapname] = Snapshot(
                    snapname, conf, int(time.time()), description, with_state, vm.config.get("parent")
                )
                vm.config["parent"] = snapname
        finally:
            with st.lock:
                if vm.config.get("lock") == "snapshot":
                    del vm.config["lock"]

    return sim.start_task(call, "qmsnapshot", str(vm.vmid), body)


@route("GET", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}")
def snapshot_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    vm = sim.vm(call)
    sim.require(call.subject, f"/vms/{vm.vmid}", ["VM.Audit"])
    if str(call.params["snapname"]) not in vm.snapshots:
        raise ApiError(500, f"snapshot '{call.params['snapname']}' does not exist")
    return [{"subdir": "rollback"}, {"subdir": "config"}]


@route("GET", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config")
def snapshot_config(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    vm = sim.vm(call)
    return snapshot_config_of(vm, str(call.params["snapname"]))


@route("DELETE", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}")
def snapshot_delete(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    name = str(call.params["snapname"])
    with st.lock:
        vm = sim.vm(call)
    force = call.bool("force")

    def body(task: Task) -> None:
        with st.lock:
            if name not in vm.snapshots:
                raise TaskFailed(f"snapshot '{name}' does not exist")
            if vm.lock and not force:
                raise TaskFailed(f"VM is locked ({vm.lock})")
        sim.sleep("qmdelsnapshot")
        with st.lock:
            snap = vm.snapshots.pop(name)
            task.log(f"delete snapshot '{name}'")
            for other in vm.snapshots.values():
                if other.parent == name:
                    other.parent = snap.parent
            if vm.config.get("parent") == name:
                if snap.parent:
                    vm.config["parent"] = snap.parent
                else:
                    vm.config.pop("parent", None)

    return sim.start_task(call, "qmdelsnapshot", str(vm.vmid), body)


@route("POST", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback")
def snapshot_rollback(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    name = str(call.params["snapname"])
    with st.lock:
        vm = sim.vm(call)
        if name not in vm.snapshots:
            raise ApiError(500, f"snapshot '{name}' does not exist")
    start = call.bool("start")

    def body(task: Task) -> None:
        with st.lock:
            if vm.lock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            snap = vm.snapshots[name]
            if vm.status == "running" and not snap.vmstate:
                guestlink.stop_guest(vm.guest)
                vm.status, vm.guest, vm.started_at = "stopped", None, None
            desc = vm.config.get("description")
            vm.config = dict(snap.conf)
            if desc is not None:
                vm.config["description"] = desc
            vm.config["parent"] = name
            vm.pending, vm.pending_delete = {}, []
            task.log(f"rollback to snapshot '{name}'")
        sim.sleep("qmrollback")
        if start or snap.vmstate:
            with st.lock:
                vm.status = "running"
                vm.started_at = sim.clock.now()
                vm.guest = guestlink.create_guest(sim, vm)

    return sim.start_task(call, "qmrollback", str(vm.vmid), body)
