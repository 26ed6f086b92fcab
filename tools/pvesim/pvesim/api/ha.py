# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/cluster/ha/status/manager_status`` (pve-ha-manager's ``PVE::API2::HA::Status``): the HA manager's view of the
nodes, where a node in maintenance mode shows.

PVE puts a node into maintenance with ``ha-manager crm-command node-maintenance enable <node>`` (or the LRM on a
reboot with ``shutdown_policy=migrate``): the CRM's ``node_status`` then says ``maintenance`` for it and the node's LRM
reports ``mode: maintenance``. The reply is ``{manager_status, quorum, lrm_status}``: ``manager_status`` is the CRM's
status file (``master_node``, ``node_status``, ``service_status``, ``timestamp``), ``lrm_status`` one entry per node of
``node_status``. An offline member is ``unknown`` to the CRM. The simulator has no HA services (``service_status``
empty). The admin call ``PUT /_pvesim/ha/nodes/{node}`` ``{"maintenance": bool}`` (``admin``) switches a member's
maintenance mode; the ``cluster`` seed starts with none.
"""

from __future__ import annotations

import typing as t

from .core import Call, Sim, route


def _node_state(online: bool, maintenance: bool) -> str:
    if not online:
        return "unknown"
    return "maintenance" if maintenance else "online"


@route("GET", "/cluster/ha/status/manager_status")
def manager_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    """Needs ``Sys.Audit`` on ``/`` (as in PVE)."""
    sim.require(call.subject, "/", ["Sys.Audit"])
    st = sim.state
    now = int(sim.clock.now())
    node_status: dict[str, str] = {}
    lrm_status: dict[str, dict[str, t.Any]] = {}
    for name in sorted(st.members):
        member = st.members[name]
        node_status[name] = _node_state(member.online, member.maintenance)
        lrm_status[name] = {
            "mode": "maintenance" if member.maintenance else "active",
            "state": "wait_for_agent_lock",
            "results": {},
            "timestamp": now,
        }
    online = sum(1 for member in st.members.values() if member.online)
    return {
        "manager_status": {
            "master_node": st.node,
            "node_status": node_status,
            "service_status": {},
            "timestamp": now,
        },
        "quorum": {"node": st.node, "quorate": 1 if online * 2 > len(st.members) else 0},
        "lrm_status": lrm_status,
    }


def admin(sim: Sim, method: str, path: str, data: t.Mapping[str, t.Any]) -> t.Any:
    """``PUT /_pvesim/ha/nodes/{node}`` ``{"maintenance": bool}``; ``NotImplemented`` for every other admin path."""
    prefix = "/ha/nodes/"
    if method != "PUT" or not path.startswith(prefix):
        return NotImplemented
    name = path[len(prefix) :]
    maintenance = data.get("maintenance")
    if not isinstance(maintenance, bool):
        raise ValueError("maintenance must be true or false")
    with sim.state.lock:
        member = sim.state.members.get(name)
        if member is None:
            raise LookupError(f"no cluster node {name}")
        member.maintenance = maintenance
        return {"node": name, "maintenance": maintenance}
