# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container snapshots: list, create and delete (``/nodes/{node}/lxc/{vmid}/snapshot``), after pve-container."""

from __future__ import annotations

import time
import typing as t

from .api.core import ApiError, Call, Sim, route
from .api.qemu_snapshot import RESERVED_SNAPNAMES
from .lxc import record
from .state import Snapshot, parse_kv
from .tasks import Task, TaskFailed


@route("GET", "/nodes/{node}/lxc/{vmid}/snapshot")
def lxc_snapshot_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    ct = record(sim, call)
    res: list[dict[str, t.Any]] = []
    for name, snap in sorted(ct["snapshots"].items()):
        entry: dict[str, t.Any] = {"name": name, "snaptime": snap.snaptime, "description": snap.description}
        if snap.parent:
            entry["parent"] = snap.parent
        res.append(entry)
    current: dict[str, t.Any] = {
        "name": "current",
        "description": "You are here!",
        "running": 1 if ct["status"] == "running" else 0,
    }
    if ct["config"].get("parent"):
        current["parent"] = ct["config"]["parent"]
    res.append(current)
    return res


@route("POST", "/nodes/{node}/lxc/{vmid}/snapshot")
def lxc_snapshot_create(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    ct = record(sim, call)
    vmid = int(call.params["vmid"])
    snapname = str(call.params["snapname"])
    if snapname.lower() in RESERVED_SNAPNAMES:
        raise ApiError(500, f"unable to use snapshot name '{snapname.lower()}' (reserved name)")
    description = call.str("description") or ""

    def body(task: Task) -> None:
        with st.lock:
            if ct["config"].get("lock"):
                raise TaskFailed(f"CT is locked ({ct['config']['lock']})")
            if snapname in ct["snapshots"]:
                raise TaskFailed(f"snapshot name '{snapname}' already used")
            ct["config"]["lock"] = "snapshot"
        try:
            sim.sleep("vzsnapshot")
            with st.lock:
                conf = {k: v for k, v in ct["config"].items() if k not in ("lock", "parent", "description")}
                task.log(f"snapshotting 'rootfs' ({parse_kv(conf.get('rootfs', ''), 'volume').get('volume', '')})")
                ct["snapshots"][snapname] = Snapshot(
                    snapname, conf, int(time.time()), description, False, ct["config"].get("parent")
                )
                ct["config"]["parent"] = snapname
        finally:
            with st.lock:
                if ct["config"].get("lock") == "snapshot":
                    del ct["config"]["lock"]

    return sim.start_task(call, "vzsnapshot", str(vmid), body)


@route("DELETE", "/nodes/{node}/lxc/{vmid}/snapshot/{snapname}")
def lxc_snapshot_delete(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    ct = record(sim, call)
    name = str(call.params["snapname"])
    force = call.bool("force")

    def body(task: Task) -> None:
        with st.lock:
            if name not in ct["snapshots"]:
                raise TaskFailed(f"snapshot '{name}' does not exist")
            if ct["config"].get("lock") and not force:
                raise TaskFailed(f"CT is locked ({ct['config']['lock']})")
        sim.sleep("vzdelsnapshot")
        with st.lock:
            snap = ct["snapshots"].pop(name)
            task.log(f"delete snapshot '{name}'")
            for other in ct["snapshots"].values():
                if other.parent == name:
                    other.parent = snap.parent
            if ct["config"].get("parent") == name:
                if snap.parent:
                    ct["config"]["parent"] = snap.parent
                else:
                    ct["config"].pop("parent", None)

    return sim.start_task(call, "vzdelsnapshot", str(call.params["vmid"]), body)
