# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Several nodes in one cluster: the ``cluster`` seed, ``/cluster/status``, ``/cluster/sdn/vnets``.

The simulator answers as the node the client connected to (``State.node``). A request for another
member (``/nodes/pve-test2/...``) is served as pveproxy proxies it: with that node's VMs, network
interfaces, storages and task log; a member that is offline answers ``595`` like a proxy whose
connection failed (see ``Sim.check_node``). Storage definitions are cluster-wide (storage.cfg) and
may be limited to some nodes (``nodes``); VMIDs are unique in the cluster.
"""

from __future__ import annotations

import typing as t

from .api.core import Call, Sim, route
from .state import GIB, Member


def node_entry(sim: Sim, node: Member) -> dict[str, t.Any]:
    """One ``GET /nodes`` / ``cluster/resources`` node entry; an offline node reports no usage."""
    entry: dict[str, t.Any] = {
        "node": node.name,
        "status": "online" if node.online else "offline",
        "type": "node",
        "id": f"node/{node.name}",
        "level": "",
    }
    if node.online:
        uptime = sim.clock.now() if hasattr(sim.clock, "now") else 0
        entry.update(
            {
                "cpu": 0.03,
                "maxcpu": 16,
                "mem": 8 * GIB,
                "maxmem": 64 * GIB,
                "disk": 10 * GIB,
                "maxdisk": 100 * GIB,
                "uptime": int(uptime),
            }
        )
    return entry


@route("GET", "/cluster/status")
def cluster_status(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """``PVE::API2::ClusterConfig`` status: a ``cluster`` entry (only when clustered) and one entry per node."""
    del call
    st = sim.state
    res: list[dict[str, t.Any]] = []
    if st.cluster_name:
        online = sum(1 for m in st.members.values() if m.online)
        res.append(
            {
                "id": "cluster",
                "type": "cluster",
                "name": st.cluster_name,
                "nodes": len(st.members),
                "quorate": 1 if online * 2 > len(st.members) else 0,
                "version": len(st.members),
            }
        )
    for name in sorted(st.members):
        m = st.members[name]
        res.append(
            {
                "id": f"node/{name}",
                "type": "node",
                "name": name,
                "ip": m.ip,
                "level": "",
                "local": 1 if name == st.node else 0,
                "nodeid": m.nodeid if st.cluster_name else 0,
                "online": 1 if m.online else 0,
            }
        )
    return res


@route("GET", "/cluster/sdn/vnets")
def sdn_vnets(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """Only VNets where the caller has ``SDN.Audit`` or ``SDN.Allocate`` on ``/sdn/zones/<zone>/<vnet>``."""
    st = sim.state
    res = []
    for vnet in sorted(st.vnets):
        entry = st.vnets[vnet]
        if sim.has(call.subject, f"/sdn/zones/{entry['zone']}/{vnet}", ["SDN.Audit", "SDN.Allocate"], any_of=True):
            res.append(dict(entry))
    return res


def admin(sim: Sim, method: str, path: str, data: t.Mapping[str, t.Any]) -> t.Any:
    """``PUT /_pvesim/nodes/{node}`` ``{"online": bool}``; ``NotImplemented`` for every other admin path."""
    if method != "PUT" or not path.startswith("/nodes/"):
        return NotImplemented
    name = path[len("/nodes/") :]
    online = data.get("online")
    if not isinstance(online, bool):
        raise ValueError("online must be true or false")
    with sim.state.lock:
        node = sim.state.members.get(name)
        if node is None:
            raise LookupError(f"no cluster node {name}")
        if name == sim.state.node and not online:
            raise ValueError("the answering node cannot be offline")
        node.online = online
        return {"node": name, "online": online}
