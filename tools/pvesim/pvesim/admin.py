# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The admin API (``/_pvesim/``, docs/simulator.md "Admin API"): reset, the request log, fault rules, the clock, raw
VM edits, storage and guest knobs. ``AdminApi`` is mixed into the server's ``App``, which authenticates the call."""

from __future__ import annotations

import re
import typing as t

from . import cluster, guestlink, lxc
from .api import ha
from .timings import apply_timings, timings_dict

API_PREFIX = "/api2/json"
ADMIN_PREFIX = "/_pvesim"
ADMIN_HEADER = "X-Pvesim-Admin"
NO_AUTH = {
    ("GET", "/access/domains"),
    ("GET", "/access/ticket"),
    ("POST", "/access/ticket"),
    ("POST", "/access/vncticket"),
}
MAX_BODY = 64 * 1024  # pve-http-server $limit_max_post


class AdminApi:
    """``App``'s admin calls (``handle_admin`` checks the admin token, then calls ``_admin``)."""

    def _admin(self, method: str, path: str, data: dict[str, t.Any]) -> t.Any:  # noqa: C901
        sim = self.sim
        st = sim.state
        if (method, path) == ("POST", "/reset"):
            self.reset(str(data.get("seed", "demo")))
            return None
        if path == "/requests":
            if method == "GET":
                return self.log.list()
            if method == "DELETE":
                self.log.clear()
                return None
        if path == "/faults":
            if method == "POST":
                return {"id": self.faults.add(data).id}
            if method == "GET":
                return self.faults.list()
            if method == "DELETE":
                self.faults.clear()
                return None
        if (method, path) == ("POST", "/clock"):
            self.clock.set_speed(float(data["speed"]))
            return {"speed": self.clock.speed}
        if (method, path) == ("GET", "/clock"):
            return {"speed": self.clock.speed, "now": self.clock.now()}
        if path == "/timings":
            if method == "GET":
                return timings_dict(sim)
            if method == "PUT":
                return apply_timings(sim, data)
        if (method, path) == ("GET", "/tasks"):
            return sim.tasks.admin_list()
        if path == "/storage-locks":
            if method == "PUT":  # {"enabled": bool}: switch the storage lock model until the next reset
                sim.storage_locks.enabled = bool(data.get("enabled", True))
            if method in ("GET", "PUT"):
                return sim.storage_locks.stats()
        handled = cluster.admin(sim, method, path, data)
        if handled is not NotImplemented:
            return handled
        handled = ha.admin(sim, method, path, data)
        if handled is not NotImplemented:
            return handled
        m = re.fullmatch(r"/vms/(\d+)(/config|/guest)?", path)
        if m:
            vmid = int(m.group(1))
            with st.lock:
                vm = st.vms.get(vmid)
                if m.group(2) == "/guest" and method == "PUT":
                    _faults, _timing, unknown = guestlink.split_knobs(data)
                    if unknown:
                        raise ValueError(f"unknown guest knobs: {', '.join(sorted(unknown))}")
                    sim.guest_knobs.setdefault(vmid, {}).update(data)
                    if vm is not None and vm.guest is not None:
                        guestlink.apply_knobs(vm.guest, data)
                    return {"knobs": sim.guest_knobs[vmid]}
                if vm is None:
                    raise LookupError(f"VM {vmid} does not exist")
                if m.group(2) == "/config" and method == "PUT":
                    for key in data.get("delete", []) or []:
                        vm.config.pop(str(key), None)
                    for key, value in (data.get("set") or {}).items():
                        vm.config[str(key)] = str(value)
                    return {"digest": vm.digest(), "config": dict(vm.config)}
                if m.group(2) is None and method == "DELETE":
                    del st.vms[vmid]
                    guestlink.stop_guest(vm.guest)
                    guestlink.forget_vm(sim, vmid)
                    return None
                if m.group(2) is None and method == "GET":
                    return {
                        "vmid": vmid,
                        "status": vm.status,
                        "config": dict(vm.config),
                        "pending": dict(vm.pending),
                        "pending_delete": list(vm.pending_delete),
                        "snapshots": sorted(vm.snapshots),
                        "digest": vm.digest(),
                        "raw": vm.raw_config(),
                        "pool": vm.pool,
                        **guestlink.admin_info(vm.guest),
                    }
        m = re.fullmatch(r"/storage/([^/]+)", path)
        if m and method in ("PUT", "GET"):
            with st.lock:
                s = st.storages.get(m.group(1))
                if s is None:
                    raise LookupError(f"storage {m.group(1)} does not exist")
                if method == "PUT":
                    if "avail" in data:
                        s.avail_override = None if data["avail"] is None else int(data["avail"])
                    for key in ("enabled", "active", "shared"):
                        if key in data:
                            setattr(s, key, 1 if data[key] else 0)
                    if "content" in data:
                        content = data["content"]
                        s.content = content.split(",") if isinstance(content, str) else list(content)
                    if "total" in data:
                        s.total = int(data["total"])
                return {
                    "storage": s.storage,
                    "total": s.total,
                    "avail": s.avail,
                    "enabled": s.enabled,
                    "active": s.active,
                    "content": s.content,
                    "volumes": dict(s.volumes),
                }
        m = re.fullmatch(r"/containers/(\d+)/config", path)
        if (
            m and method == "PUT"
        ):  # set/delete config keys by hand (protection, lock, template, description), as for VMs
            vmid = int(m.group(1))
            with st.lock:
                if vmid not in st.containers:
                    raise LookupError(f"CT {vmid} does not exist")
                config = lxc.complete(vmid, st.containers[vmid], st.containers[vmid].get("node", st.node))["config"]
                for key in data.get("delete", []) or []:
                    config.pop(str(key), None)
                for key, value in (data.get("set") or {}).items():
                    config[str(key)] = str(value)
                return {"config": dict(config)}
        m = re.fullmatch(r"/containers/(\d+)", path)
        if m and method == "GET":
            vmid = int(m.group(1))
            with st.lock:
                if vmid not in st.containers:
                    raise LookupError(f"CT {vmid} does not exist")
                ct = st.containers[vmid]
                info = {
                    "vmid": vmid,
                    "name": ct.get("name"),
                    "node": ct.get("node", st.node),
                    "status": ct.get("status"),
                    "config": dict(ct.get("config") or {}),
                }
            backend = getattr(sim, "container_backend", None)
            return {**info, **(backend.admin_info(vmid) if backend is not None else {"container_backend": "simulated"})}
        if m and method in ("PUT", "DELETE"):
            vmid = int(m.group(1))
            with st.lock:
                if method == "DELETE":
                    if st.containers.pop(vmid, None) is None:
                        raise LookupError(f"CT {vmid} does not exist")
                    return None
                if vmid in st.vms:
                    raise ValueError(f"VM {vmid} already exists")
                st.containers[vmid] = {
                    "name": str(data.get("name", f"CT{vmid}")),
                    "template": bool(data.get("template", False)),
                    "status": "stopped",
                }
                return dict(st.containers[vmid], vmid=vmid)
        if (method, path) == (
            "GET",
            "/node-ssh",
        ):  # pvesim.nodessh: each node's SSH endpoint, {} without --node-ssh-...
            return dict(getattr(self, "node_ssh_info", None) or {})
        m = re.fullmatch(r"/bridges/([^/]+)", path)
        if m and method == "DELETE":
            with st.lock:
                if st.bridges.pop(m.group(1), None) is None:
                    raise LookupError(f"bridge {m.group(1)} does not exist")
            return None
        m = re.fullmatch(r"/tokens/([^/]+)", path)
        if m and method == "PUT":
            tokenid = m.group(1)
            with st.lock:
                token = st.tokens.get(tokenid)
                if token is None:
                    raise LookupError(f"token {tokenid} does not exist")
                if "expire" in data:
                    token.expire = int(data["expire"] or 0)
                if "privsep" in data:
                    token.privsep = bool(data["privsep"])
                if "privileges" in data:
                    st.acl[tokenid] = {
                        str(p): (frozenset(str(x) for x in privs), True)
                        for p, privs in (data["privileges"] or {}).items()
                    }
                    user_acl = st.acl.setdefault(token.userid, {})
                    for p, (privs, prop) in st.acl[tokenid].items():
                        cur = user_acl.get(p, (frozenset(), True))[0]
                        user_acl[p] = (cur | privs, prop)
                return {
                    "tokenid": tokenid,
                    "expire": token.expire,
                    "privsep": int(token.privsep),
                    "privileges": {p: sorted(v[0]) for p, v in st.acl.get(tokenid, {}).items()},
                }
        return NotImplemented
