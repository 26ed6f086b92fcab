# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Generic evaluation of an endpoint's schema ``permissions`` object (pve-access-control semantics)."""

from __future__ import annotations

import re
import typing as t

from .core import ApiError, Sim, perm_error


def check_permissions(sim: Sim, ep_perms: dict[str, t.Any], subject: str, params: dict[str, t.Any]) -> None:
    """Evaluate a schema ``permissions`` object; raises ``ApiError(403)``.

    Supported: ``user: all|world``, ``check: [perm, path, privs, (any, 1)?, (require_param, p)?]``,
    ``and``/``or``, ``userid-group`` (RPCEnvironment's: the user must exist, then the privileges on ``/access/groups``
    or on a group of that user), ``userid-param``/``perm-modify`` (approximated: self or Sys.Audit/User.Modify on
    /access).
    Without ``check``/``user`` only root@pam passes (PVE semantics).
    """
    if not ep_perms:
        if subject != "root@pam":
            raise perm_error("user != root@pam")
        return
    user = ep_perms.get("user")
    check = ep_perms.get("check")
    if user in ("all", "world"):
        # PVE's check_api2_permissions returns before ``check`` (then only a hint, e.g. GET /cluster/options filters itself).
        return
    if check is None:
        if subject != "root@pam":
            raise perm_error("user != root@pam")
        return
    _eval_check(sim, check, subject, params, noerr=False)


def _subst(path: str, params: dict[str, t.Any]) -> str | None:
    missing = False

    def rep(m: re.Match[str]) -> str:
        nonlocal missing
        v = params.get(m.group(1))
        if v is None:
            missing = True
            return ""
        return str(v)

    res = re.sub(r"\{([^}]+)\}", rep, path)
    return None if missing else res


def _eval_check(sim: Sim, check: list[t.Any], subject: str, params: dict[str, t.Any], noerr: bool) -> bool:
    kind = check[0]
    if kind == "perm":
        path = _subst(check[1], params)
        privs = list(check[2])
        opts = dict(zip(check[3::2], check[4::2]))
        req = opts.get("require_param")
        if req is not None and params.get(req) is None:
            if noerr:
                return False
            raise ApiError(400, "Parameter verification failed.", {req: "parameter is required"})
        if path is None:
            if noerr:
                return False
            raise perm_error()
        ok = sim.has(subject, path, privs, any_of=bool(opts.get("any")))
        if ok or noerr:
            return ok
        sim.require(subject, path, privs, any_of=bool(opts.get("any")))
        return True
    if kind == "and":
        for sub in check[1:]:
            if not _eval_check(sim, sub, subject, params, noerr):
                return False
        return True
    if kind == "or":
        for sub in check[1:]:
            if _eval_check(sim, sub, subject, params, True):
                return True
        if noerr:
            return False
        raise perm_error()
    if kind == "userid-group":
        return _userid_group(sim, check, subject, params, noerr)
    if kind in ("userid-param", "perm-modify"):
        userid = params.get("userid")
        if (
            userid is None
            or userid == subject.split("!")[0]
            or sim.has(subject, "/access", ["User.Modify"])
            or sim.has(subject, "/access", ["Sys.Audit"])
        ):
            return True
        if noerr:
            return False
        raise perm_error()
    return True  # unknown check kinds: allowed (documented approximation)


def _userid_group(sim: Sim, check: list[t.Any], subject: str, params: dict[str, t.Any], noerr: bool) -> bool:
    privs = list(check[1])
    options = dict(zip(check[2::2], check[3::2]))
    userid = params.get("userid")
    existing = options.get("groups_param") != "create"
    if existing and str(userid) not in sim.state.users:
        if noerr:
            return False
        raise ApiError(500, f"no such user ('{userid}')")
    if sim.has(subject, "/access/groups", privs, any_of=True):
        return True
    groups = {
        g.groupid
        for g in sim.state.groups.values()
        if sim.has(subject, f"/access/groups/{g.groupid}", privs, any_of=True)
    }
    if options.get("groups_param"):
        wanted = [g for g in re.split(r"[,;\s\0]+", str(params.get("groups") or "")) if g]
        if not wanted or any(g not in groups for g in wanted):
            if noerr:
                return False
            raise perm_error()
    if existing and not any(str(userid) in sim.state.groups[g].users for g in groups):
        if noerr:
            return False
        raise perm_error()
    return True
