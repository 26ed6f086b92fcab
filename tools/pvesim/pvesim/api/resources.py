# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/cluster/resources`` (PVE API2/Cluster.pm): guests, nodes, storages and SDN zones as one list."""

from __future__ import annotations

import re
import typing as t

from .. import cluster
from ..state import VM, is_cdrom, parse_kv, size_to_bytes
from .core import Call, Sim, route


def ct_resource(vmid: int, ct: t.Mapping[str, t.Any], node: str) -> dict[str, t.Any]:
    conf = ct.get("config") or {}
    res = {
        "id": f"lxc/{vmid}",
        "type": "lxc",
        "vmid": vmid,
        "node": ct.get("node", node),
        "status": ct.get("status", "stopped"),
        "name": ct.get("name", f"CT{vmid}"),
        "template": 1 if ct.get("template") else 0,
        "maxcpu": int(conf.get("cores", 1)),
        "maxmem": int(conf.get("memory", 512)) << 20,
        "maxdisk": 8 << 30,
        "cpu": 0,
        "mem": 0,
        "disk": 0,
        "uptime": 0,
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    }
    for key in ("tags", "lock"):  # the container's config (lxc.py), as for VMs
        if conf.get(key):
            res[key] = conf[key]
    if ct.get("pool"):
        res["pool"] = ct["pool"]
    return res


def vm_resource(sim: Sim, vm: VM) -> dict[str, t.Any]:
    conf = vm.config
    res: dict[str, t.Any] = {
        "id": f"qemu/{vm.vmid}",
        "type": "qemu",
        "vmid": vm.vmid,
        "node": vm.node,
        "status": vm.status,
        "name": conf.get("name", f"VM {vm.vmid}"),
        "template": 1 if vm.is_template else 0,
        "maxcpu": int(conf.get("cores", "1")) * int(conf.get("sockets", "1")),
        "maxmem": int(parse_kv(conf.get("memory", "512"), "current").get("current", "512")) << 20,
        "maxdisk": _boot_disk_size(sim, vm),
        "cpu": 0.01 if vm.status == "running" else 0,
        "mem": 0,
        "disk": 0,
        "uptime": _uptime(sim, vm),
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    }
    if conf.get("tags"):
        res["tags"] = conf["tags"]
    if conf.get("lock"):
        res["lock"] = conf["lock"]
    if vm.pool:
        res["pool"] = vm.pool
    return res


def _uptime(sim: Sim, vm: VM) -> int:
    if vm.status != "running" or vm.started_at is None:
        return 0
    return int(sim.clock.now() - vm.started_at)


def _boot_disk_size(sim: Sim, vm: VM) -> int:
    for key in sorted(vm.disks()):
        value = vm.config[key]
        if is_cdrom(value):
            continue
        m = re.search(r"(?:^|,)size=([^,]+)", value)
        if m:
            try:
                return size_to_bytes(m.group(1))
            except ValueError:
                return 0
        size = sim.state.volume_size(value.split(",")[0])
        return size or 0
    return 0


def storage_resource(sim: Sim, node: str, sid: str) -> dict[str, t.Any]:
    """A storage on one node as ``/cluster/resources`` and a pool's members show it (API2Tools extract_storage_stats)."""
    s = sim.state.storages[sid]
    member = sim.state.members.get(node)
    return {
        "id": f"storage/{node}/{sid}",
        "type": "storage",
        "storage": sid,
        "node": node,
        "status": "available" if s.active and s.enabled and (member is None or member.online) else "unknown",
        "plugintype": s.type,
        "content": ",".join(sorted(s.content)),
        "shared": s.shared,
        "disk": s.used_bytes(),
        "maxdisk": s.total,
    }


@route("GET", "/cluster/resources")
def cluster_resources(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    st = sim.state
    rtype = call.str("type")
    res: list[dict[str, t.Any]] = []
    if rtype in (None, "vm"):
        guests = {vmid: "qemu" for vmid in st.vms}
        guests.update({vmid: "lxc" for vmid in st.containers})
        for vmid in sorted(guests):
            if sim.has(call.subject, f"/vms/{vmid}", ["VM.Audit"]):
                if guests[vmid] == "qemu":
                    res.append(vm_resource(sim, st.vms[vmid]))
                else:
                    res.append(ct_resource(vmid, st.containers[vmid], st.node))
    members = [st.members[name] for name in sorted(st.members)]
    if rtype in (None, "node"):
        for node in members:
            if sim.has(call.subject, f"/nodes/{node.name}", ["Sys.Audit"]):
                res.append(cluster.node_entry(sim, node))
    if rtype in (None, "storage"):
        for node in members:
            for sid in sorted(st.storages):
                s = st.storages[sid]
                if s.on_node(node.name) and sim.has(
                    call.subject, f"/storage/{sid}", ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True
                ):
                    res.append(storage_resource(sim, node.name, sid))
    if rtype in (None, "sdn"):
        for node in members:
            res.append(
                {
                    "id": f"sdn/{node.name}/localnetwork",
                    "type": "sdn",
                    "sdn": "localnetwork",
                    "node": node.name,
                    "status": "ok" if node.online else "unknown",
                }
            )
    return res
