# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/pools``: resource pools (pve-manager API2/Pool.pm): list, read, create, update members, delete.

A guest's membership is kept with the guest (``VM.pool``, a container's ``pool``); a pool's storages with the pool.
Both ``/pools/{poolid}`` and the newer ``/pools?poolid=`` forms are served, as Proxmox serves both.
"""

from __future__ import annotations

import re
import typing as t

from ..state import Pool
from .core import ApiError, Call, Sim, route
from .resources import ct_resource, storage_resource, vm_resource


def _split_list(value: str | None) -> list[str]:
    """``PVE::Tools::split_list``: commas, semicolons, whitespace and NULs separate items."""
    return [item for item in re.split(r"[,;\s\0]+", value or "") if item]


def _guest_pool(sim: Sim, vmid: int) -> str | None:
    st = sim.state
    if vmid in st.vms:
        return st.vms[vmid].pool
    if vmid in st.containers:
        pool: str | None = st.containers[vmid].get("pool")
        return pool
    return next((p.poolid for p in st.pools.values() if vmid in p.absent_vms), None)


def _set_guest_pool(sim: Sim, vmid: int, poolid: str | None) -> None:
    st = sim.state
    for pool in st.pools.values():
        pool.absent_vms.discard(vmid)
    if vmid in st.vms:
        st.vms[vmid].pool = poolid
    elif vmid in st.containers:
        st.containers[vmid]["pool"] = poolid
    elif poolid is not None:
        st.pools[poolid].absent_vms.add(vmid)  # user.cfg may name a guest that does not exist (yet)


def _members(sim: Sim, poolid: str, kind: str | None) -> list[dict[str, t.Any]]:
    st = sim.state
    res: list[dict[str, t.Any]] = []
    for vmid in sorted(set(st.vms) | set(st.containers)):
        if _guest_pool(sim, vmid) != poolid:
            continue
        if vmid in st.vms and kind in (None, "qemu"):
            res.append(vm_resource(sim, st.vms[vmid]))
        elif vmid in st.containers and kind in (None, "lxc"):
            res.append(ct_resource(vmid, st.containers[vmid], st.node))
    if kind in (None, "storage"):
        for sid in sorted(st.pools[poolid].storage):
            storage = st.storages.get(sid)
            if storage is None:
                continue
            node = st.node if storage.on_node(st.node) else min(storage.nodes or [st.node])
            res.append(storage_resource(sim, node, sid))
    return res


def _existing(sim: Sim, poolid: str) -> Pool:
    pool = sim.state.pools.get(poolid)
    if pool is None:
        raise ApiError(500, f"pool '{poolid}' does not exist")
    return pool


@route("GET", "/pools")
def pools_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    st = sim.state
    poolid = call.str("poolid")
    if poolid is not None:
        # Pool.pm calls ``$rpcenv->check(..., ['Pool.Audit'], 1)`` here and ignores the result: no filter, no refusal
        pool = _existing(sim, poolid)
        entry: dict[str, t.Any] = {"members": _members(sim, poolid, call.str("type"))}
        if pool.comment:
            entry["comment"] = pool.comment
        return [{**entry, "poolid": poolid}]
    res: list[dict[str, t.Any]] = []
    for name in sorted(st.pools):
        if not sim.has(call.subject, f"/pool/{name}", ["Pool.Audit"]):
            continue
        entry = {"poolid": name}
        if st.pools[name].comment:
            entry["comment"] = st.pools[name].comment
        res.append(entry)
    return res


@route("POST", "/pools")
def pools_create(sim: Sim, call: Call) -> None:
    st = sim.state
    poolid = str(call.params["poolid"])
    if poolid in st.pools:
        raise ApiError(500, f"pool '{poolid}' already exists")
    if not re.match(r"[A-Za-z]", poolid):
        raise ApiError(500, "pool name must start with a letter")
    st.pools[poolid] = Pool(poolid, call.str("comment") or "")


@route("GET", "/pools/{poolid}")
def pools_get(sim: Sim, call: Call) -> dict[str, t.Any]:
    pool = _existing(sim, str(call.params["poolid"]))
    res: dict[str, t.Any] = {"members": _members(sim, pool.poolid, call.str("type"))}
    if pool.comment:
        res["comment"] = pool.comment
    return res


def _check_perm_modify(sim: Sim, subject: str, path: str) -> None:
    """RPCEnvironment::check_perm_modify: Permissions.Modify, or the allocate privilege of the object's kind."""
    privs = ["Permissions.Modify", "Datastore.Allocate" if path.startswith("/storage/") else "VM.Allocate"]
    sim.require(subject, path, privs, any_of=True)


def _update(sim: Sim, call: Call) -> None:
    pool = _existing(sim, str(call.params["poolid"]))
    delete = call.bool("delete")
    if call.params.get("comment") is not None:
        pool.comment = call.str("comment") or ""
    for item in _split_list(call.str("vms")):
        vmid = int(item)
        _check_perm_modify(sim, call.subject, f"/vms/{vmid}")
        current = _guest_pool(sim, vmid)
        if delete:
            if current != pool.poolid:
                raise ApiError(500, f"VM {vmid} is not a pool member")
            _set_guest_pool(sim, vmid, None)
            continue
        if current == pool.poolid:
            raise ApiError(500, f"VM {vmid} is already a pool member")
        if current is not None:
            if not call.bool("allow-move"):
                raise ApiError(500, f"VM {vmid} belongs already to pool '{current}' and 'allow-move' is not set")
            sim.require(call.subject, f"/pool/{current}", ["Pool.Allocate"])
        _set_guest_pool(sim, vmid, pool.poolid)
    for sid in _split_list(call.str("storage")):
        _check_perm_modify(sim, call.subject, f"/storage/{sid}")
        if delete:
            if sid not in pool.storage:
                raise ApiError(500, f"Storage '{sid}' is not a pool member")
            pool.storage.discard(sid)
        else:
            if sid in pool.storage:
                raise ApiError(500, f"Storage '{sid}' is already a pool member")
            pool.storage.add(sid)


def _locked_user_config(sim: Sim, errmsg: str, change: t.Callable[[], None]) -> None:
    """PVE::AccessControl::lock_user_config: all or nothing, and the error names what failed."""
    st = sim.state
    saved = (
        {vmid: vm.pool for vmid, vm in st.vms.items()},
        {vmid: ct.get("pool") for vmid, ct in st.containers.items()},
        {pid: (p.comment, set(p.storage), set(p.absent_vms)) for pid, p in st.pools.items()},
        {subject: dict(acl) for subject, acl in st.acl.items()},
    )
    try:
        change()
    except ApiError as err:
        if err.status == 403:
            raise
        for vmid, vm_pool in saved[0].items():
            st.vms[vmid].pool = vm_pool
        for vmid, ct_pool in saved[1].items():
            st.containers[vmid]["pool"] = ct_pool
        st.pools = {pid: Pool(pid, c, s, a) for pid, (c, s, a) in saved[2].items()}
        st.acl = saved[3]
        raise ApiError(err.status, f"{errmsg}: {err.message}") from None


@route("PUT", "/pools")
def pools_update(sim: Sim, call: Call) -> None:
    """Add or (``delete``) remove guests and storages, change the comment; a guest of another pool moves only with
    ``allow-move``. The member's own privileges are checked as Proxmox does (``check_perm_modify``)."""
    _locked_user_config(sim, "update pools failed", lambda: _update(sim, call))


@route("PUT", "/pools/{poolid}")
def pools_update_by_path(sim: Sim, call: Call) -> None:
    pools_update(sim, call)


def _delete(sim: Sim, poolid: str) -> None:
    st = sim.state
    _existing(sim, poolid)
    for vmid in sorted(set(st.vms) | set(st.containers)):
        if _guest_pool(sim, vmid) == poolid:
            raise ApiError(500, f"pool '{poolid}' is not empty (contains VM {vmid})")
    for sid in sorted(st.pools[poolid].storage):
        if sid in st.storages:
            raise ApiError(500, f"pool '{poolid}' is not empty (contains storage '{sid}')")
    del st.pools[poolid]
    for acl in st.acl.values():  # delete_pool_acl
        acl.pop(f"/pool/{poolid}", None)


@route("DELETE", "/pools")
def pools_delete(sim: Sim, call: Call) -> None:
    """Only an empty pool goes (destroyed guests and removed storages do not count); its ACL entries go with it."""
    poolid = str(call.params["poolid"])
    _locked_user_config(sim, "delete pool failed", lambda: _delete(sim, poolid))


@route("DELETE", "/pools/{poolid}")
def pools_delete_by_path(sim: Sim, call: Call) -> None:
    pools_delete(sim, call)
