# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/version``, ``/nodes``, datacenter options and ``nextid``, node storage and network (pve-manager API2)."""

from __future__ import annotations

import time
import typing as t

from .. import cluster
from ..state import GIB
from .core import PVE_VERSION, ApiError, Call, Sim, param_error, route


@route("GET", "/version")
def version(sim: Sim, call: Call) -> dict[str, str]:
    del sim, call
    return dict(PVE_VERSION)


@route("GET", "/nodes")
def nodes(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    del call
    return [cluster.node_entry(sim, sim.state.members[name]) for name in sorted(sim.state.members)]


@route("GET", "/nodes/{node}")
def node_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    return [{"name": n} for n in ("qemu", "storage", "network", "tasks", "status", "version")]


@route("GET", "/nodes/{node}/version")
def node_version(sim: Sim, call: Call) -> dict[str, str]:
    sim.check_node(call)
    return dict(PVE_VERSION)


@route("GET", "/nodes/{node}/status")
def node_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    return {
        "uptime": int(time.monotonic()),
        "cpu": 0.03,
        "pveversion": "pve-manager/9.1.3/b5d5c8d5e7f5c4a1",
        "kversion": "Linux 6.14.11-4-pve",
        "memory": {"total": 64 * GIB, "used": 8 * GIB, "free": 56 * GIB},
        "cpuinfo": {"cpus": 16, "sockets": 1, "cores": 8, "model": "Simulated CPU"},
        "loadavg": ["0.10", "0.08", "0.05"],
    }


@route("GET", "/cluster/nextid")
def nextid(sim: Sim, call: Call) -> int:
    """PVE's ``nextid``: a given VMID is returned when no guest (VM, template, container) has it; else the lowest free
    one in the datacenter's ``next-id`` range (``lower`` inclusive, default 100; ``upper`` exclusive, default 1000000)."""
    st = sim.state
    vmid = call.int("vmid")
    with st.lock:
        if vmid is not None:
            if not st.vmid_used(vmid):
                return vmid
            raise param_error({"vmid": f"VM {vmid} already exists"})
        next_id = st.datacenter.get("next-id") or {}
        lower = int(next_id.get("lower", 100))
        upper = int(next_id.get("upper", 1000 * 1000))
        for i in range(lower, upper):
            if not st.vmid_used(i):
                return i
    raise ApiError(500, f"unable to get any free VMID in range [{lower}, {upper}]")


NEXT_ID_KEYS = ("lower", "upper")


def parse_next_id(text: str) -> dict[str, int]:
    """``[lower=<int>][,upper=<int>]`` (schema-validated already) as datacenter.cfg's parser returns it."""
    result: dict[str, int] = {}
    for part in text.split(","):
        if not part:
            continue
        key, value = part.split("=", 1) if "=" in part else (part, "")
        if key not in NEXT_ID_KEYS or key in result:
            raise param_error({"next-id": f"invalid format - unknown or duplicate key '{key}'"})
        result[key] = int(value)
    return result


@route("GET", "/cluster/options")
def cluster_options(sim: Sim, call: Call) -> dict[str, t.Any]:
    """datacenter.cfg; without Sys.Audit on / only ``console`` and ``tag-style`` (plus ``allowed-tags``), as in PVE."""
    st = sim.state
    with st.lock:
        config = {key: (dict(value) if isinstance(value, dict) else value) for key, value in st.datacenter.items()}
    if not sim.has(call.subject, "/", ["Sys.Audit"]):
        config = {key: value for key, value in config.items() if key in ("console", "tag-style")}
    config["allowed-tags"] = []
    return config


@route("PUT", "/cluster/options")
def set_cluster_options(sim: Sim, call: Call) -> None:
    """Set (or ``delete``) datacenter options; ``next-id`` is parsed, other options are kept as given."""
    st = sim.state
    with st.lock:
        for key in (call.str("delete") or "").replace(";", ",").split(","):
            if key.strip():
                st.datacenter.pop(key.strip(), None)
        for key, value in call.params.items():
            if key == "delete":
                continue
            st.datacenter[key] = parse_next_id(str(value)) if key == "next-id" else value
    return None


def _storage_entry(st_obj: t.Any, with_type: bool = True) -> dict[str, t.Any]:
    total = st_obj.total
    avail = st_obj.avail
    used = max(0, total - avail)
    res = {
        "storage": st_obj.storage,
        "type": st_obj.type,
        "content": ",".join(sorted(st_obj.content)),
        "total": total if st_obj.active else 0,
        "used": used if st_obj.active else 0,
        "avail": avail if st_obj.active else 0,
        "used_fraction": (used / total) if total and st_obj.active else 0,
        "shared": st_obj.shared,
        "enabled": st_obj.enabled,
        "active": st_obj.active,
    }
    if not with_type:
        del res["type"]
    return res


@route("GET", "/nodes/{node}/storage")
def node_storage(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    st = sim.state
    content = call.str("content")
    only = call.str("storage")
    enabled = call.bool("enabled")
    res = []
    for sid in sorted(st.storages):
        s = st.storages[sid]
        if only and sid != only:
            continue
        if not s.on_node(sim.call_node(call)):
            continue
        if content and not set(content.split(",")) & set(s.content):
            continue
        if enabled and not s.enabled:
            continue
        if not sim.has(call.subject, f"/storage/{sid}", ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True):
            continue
        res.append(_storage_entry(s))
    return res


@route("GET", "/nodes/{node}/storage/{storage}/status")
def storage_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    sid = str(call.params["storage"])
    s = sim.state.storages.get(sid)
    if s is None:
        raise ApiError(500, f"storage '{sid}' does not exist")
    if not s.enabled:
        raise ApiError(500, f"storage '{sid}' is disabled")
    res = _storage_entry(s)
    del res["storage"]
    return res


@route("GET", "/nodes/{node}/network")
def node_network(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    ntype = call.str("type")
    res = []
    bridges = sim.state.members[sim.call_node(call)].bridges
    for name in sorted(bridges):
        b = dict(bridges[name])
        if ntype and ntype not in (b["type"], "any_bridge"):
            continue
        res.append(b)
    return res


@route("GET", "/nodes/{node}/network/{iface}")
def node_network_iface(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    b = sim.state.members[sim.call_node(call)].bridges.get(str(call.params["iface"]))
    if b is None:
        raise ApiError(500, f"network interface '{call.params['iface']}' does not exist")
    return dict(b)
