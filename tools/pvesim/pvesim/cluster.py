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

from .api import ApiError, Call, Sim, route
from .state import GIB, Member, State, Storage

CLUSTER_NAME = "vmanyware-lab"
CLUSTER_NODES = (("pve-test", 1, "192.0.2.10"), ("pve-test2", 2, "192.0.2.11"), ("pve-test3", 3, "192.0.2.12"))
PROXY_FAILURE = "Errors during connection establishment, proxy handshake: No route to host"


def _bridge(name: str, ip: str, ports: str) -> dict[str, t.Any]:
    return {"iface": name, "type": "bridge", "active": 1, "autostart": 1, "bridge_ports": ports, "bridge_stp": "off",
            "bridge_fd": "0", "method": "static", "method6": "manual", "families": ["inet"], "cidr": f"{ip}/24",
            "address": ip, "netmask": "24", "priority": 5}


def seed_cluster(state: State) -> None:
    """The demo seed grown into a three-node cluster ``vmanyware-lab``.

    ``pve-test`` (the node answering, with template 9000), ``pve-test2`` and ``pve-test3``, all online.
    Every node has ``vmbr0``; ``pve-test2`` also ``vmbr1``. A shared NFS storage ``shared`` holds
    images, import and snippets on every node; ``local-lvm`` and ``local`` exist on every node.
    One SDN VNet ``labnet`` in the simple zone ``lab``. The ``full`` token may also audit the cluster
    (``Sys.Audit`` on ``/``, not propagated), let nodes download (``Sys.AccessNetwork`` on ``/nodes``) and use ``shared``
    and ``labnet``: enough to build a template from a cloud image over the API.
    """
    state.cluster_name = CLUSTER_NAME
    local = state.members[state.node]
    local.nodeid, local.ip = CLUSTER_NODES[0][1], CLUSTER_NODES[0][2]
    for name, nodeid, ip in CLUSTER_NODES[1:]:
        bridges = {"vmbr0": _bridge("vmbr0", ip, "eno1")}
        if name == "pve-test2":
            bridges["vmbr1"] = _bridge("vmbr1", "198.51.100." + ip.rsplit(".", 1)[1], "eno2")
        state.members[name] = Member(name, nodeid, ip, True, bridges)
    state.storages["shared"] = Storage("shared", "nfs", ["images", "import", "snippets", "iso"], total=2048 * GIB, used=100 * GIB,
                                       shared=1)
    state.vnets = {"labnet": {"vnet": "labnet", "zone": "lab", "type": "vnet", "tag": 100, "alias": "lab network"}}
    for subject in ("vmanyware@pve", "vmanyware@pve!full"):
        acl = state.acl.setdefault(subject, {})
        acl["/"] = (frozenset({"Sys.Audit"}), False)
        acl["/nodes"] = (frozenset({"Sys.Audit", "Sys.AccessNetwork"}), True)
        acl["/storage/shared"] = (frozenset({"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"}), True)
        acl["/sdn/zones/lab/labnet"] = (frozenset({"SDN.Use", "SDN.Audit"}), True)
        acl["/sdn/zones/localnetwork"] = (frozenset({"SDN.Use", "SDN.Audit"}), True)


def member(sim: Sim, node: str) -> Member:
    """The cluster member ``node`` as the proxy finds it: unknown -> 500, offline -> 595 (proxy failure)."""
    found = sim.state.members.get(node)
    if found is None:
        raise ApiError(500, f"no such cluster node '{node}'")
    if not found.online:
        raise ApiError(595, PROXY_FAILURE)
    return found


def node_entry(sim: Sim, node: Member) -> dict[str, t.Any]:
    """One ``GET /nodes`` / ``cluster/resources`` node entry; an offline node reports no usage."""
    entry: dict[str, t.Any] = {"node": node.name, "status": "online" if node.online else "offline", "type": "node",
                               "id": f"node/{node.name}", "level": ""}
    if node.online:
        uptime = sim.clock.now() if hasattr(sim.clock, "now") else 0
        entry.update({"cpu": 0.03, "maxcpu": 16, "mem": 8 * GIB, "maxmem": 64 * GIB, "disk": 10 * GIB, "maxdisk": 100 * GIB,
                      "uptime": int(uptime)})
    return entry


@route("GET", "/cluster/status")
def cluster_status(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """``PVE::API2::ClusterConfig`` status: a ``cluster`` entry (only when clustered) and one entry per node."""
    del call
    st = sim.state
    res: list[dict[str, t.Any]] = []
    if st.cluster_name:
        online = sum(1 for m in st.members.values() if m.online)
        res.append({"id": "cluster", "type": "cluster", "name": st.cluster_name, "nodes": len(st.members),
                    "quorate": 1 if online * 2 > len(st.members) else 0, "version": len(st.members)})
    for name in sorted(st.members):
        m = st.members[name]
        res.append({"id": f"node/{name}", "type": "node", "name": name, "ip": m.ip, "level": "",
                    "local": 1 if name == st.node else 0, "nodeid": m.nodeid if st.cluster_name else 0, "online": 1 if m.online else 0})
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
    name = path[len("/nodes/"):]
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
