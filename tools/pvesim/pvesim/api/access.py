# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/access``: tickets, the permission listing (PVE API2/AccessControl.pm), and the read side of realms, groups and
users (API2/Domains.pm, Group.pm, User.pm): what they list, and to whom."""

from __future__ import annotations

import hashlib
import secrets
import time
import typing as t

from ..state import User
from .core import ApiError, Call, Sim, route

USER_ADMIN_PRIVS = ["User.Modify", "Sys.Audit"]


@route("GET", "/access/ticket")
def get_ticket(sim: Sim, call: Call) -> None:
    del sim, call


@route("POST", "/access/ticket")
def create_ticket(sim: Sim, call: Call) -> dict[str, t.Any]:
    username = str(call.params["username"])
    realm = call.str("realm")
    if realm and "@" not in username:
        username = f"{username}@{realm}"
    password = str(call.params["password"])
    st = sim.state
    user = st.users.get(username)
    ok = False
    if user is not None and user.enable:
        if user.password is not None and secrets.compare_digest(user.password, password):
            ok = True
        elif (
            password.startswith("PVE:")
            and st.tickets.get(password, ("", 0.0))[0] == username
            and st.tickets[password][1] > time.time()
        ):
            ok = True
    if not ok:
        raise ApiError(401, "authentication failure")
    ticket = f"PVE:{username}:{int(time.time()):08X}::{secrets.token_urlsafe(64)}"
    csrf = f"{int(time.time()):08X}:{secrets.token_urlsafe(32)}"
    st.tickets[ticket] = (username, time.time() + 7200)
    st.csrf[ticket] = csrf
    return {
        "ticket": ticket,
        "CSRFPreventionToken": csrf,
        "username": username,
        "cap": {"vms": {p: 1 for p in sorted(st.permissions(username, "/vms"))}},
    }


@route("GET", "/access/permissions")
def get_permissions(sim: Sim, call: Call) -> dict[str, dict[str, int]]:
    st = sim.state
    target = call.str("userid") or call.subject
    if target != call.subject:
        own_token = target.startswith(call.subject + "!") and "!" not in call.subject
        if not own_token:
            sim.require(call.subject, "/access", ["Sys.Audit"])
    path = call.str("path")
    paths = (
        [path]
        if path
        else sorted(set(st.acl_paths(target)) | {"/", "/access", "/nodes", "/storage", "/vms", "/sdn", "/pool"})
    )
    res: dict[str, dict[str, int]] = {}
    for p in paths:
        privs = st.permissions(target, p)
        if privs or path:
            res[p] = {priv: 1 for priv in sorted(privs)}
    return res


# --- realms (domains.cfg) -----------------------------------------------------------------------------------------


def _domains_digest(sim: Sim) -> str:
    text = "".join(
        f"{section['type']}: {realm}\n\tcomment {section['comment']}\n\n"
        for realm, section in sorted(sim.state.realms.items())
    )
    return hashlib.sha1(text.encode()).hexdigest()


@route("GET", "/access/domains")
def domains_index(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """Readable without a login (the login box lists the realms)."""
    del call
    res = []
    for realm, section in sorted(sim.state.realms.items()):
        entry: dict[str, t.Any] = {"realm": realm, "type": section["type"]}
        if section.get("comment"):
            entry["comment"] = section["comment"]
        res.append(entry)
    return res


@route("GET", "/access/domains/{realm}")
def domain_read(sim: Sim, call: Call) -> dict[str, t.Any]:
    realm = str(call.params["realm"])
    section = sim.state.realms.get(realm)
    if section is None:
        raise ApiError(500, f"domain '{realm}' does not exist")
    return {**section, "digest": _domains_digest(sim)}


# --- groups and users (user.cfg) ----------------------------------------------------------------------------------


def _groups_of(sim: Sim, userid: str) -> list[str]:
    return sorted(g.groupid for g in sim.state.groups.values() if userid in g.users)


def _user_admin_of(sim: Sim, subject: str) -> tuple[bool, set[str]]:
    """(may administer every user, the users of the groups ``subject`` has User.Modify or Sys.Audit on)."""
    if sim.has(subject, "/access/groups", USER_ADMIN_PRIVS, any_of=True):
        return True, set()
    allowed: set[str] = set()
    for group in sim.state.groups.values():
        if sim.has(subject, f"/access/groups/{group.groupid}", USER_ADMIN_PRIVS, any_of=True):
            allowed |= group.users
    return False, allowed


def _user_entry(sim: Sim, user: User, full: bool) -> dict[str, t.Any]:
    entry: dict[str, t.Any] = {"enable": int(user.enable), "expire": user.expire}
    for key in ("email", "comment"):
        if getattr(user, key):
            entry[key] = getattr(user, key)
    if full:
        entry["groups"] = _groups_of(sim, user.userid)
        entry["tokens"] = [
            {"tokenid": tok.name, "expire": tok.expire, "privsep": int(tok.privsep), "comment": tok.comment}
            for tok in sorted(sim.state.tokens.values(), key=lambda tok: tok.name)
            if tok.userid == user.userid
        ]
        for token in entry["tokens"]:
            if not token["comment"]:
                del token["comment"]
    return entry


@route("GET", "/access/groups")
def groups_index(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    res = []
    for groupid, group in sorted(sim.state.groups.items()):
        if not sim.has(call.subject, f"/access/groups/{groupid}", [*USER_ADMIN_PRIVS, "Group.Allocate"], any_of=True):
            continue
        entry: dict[str, t.Any] = {"groupid": groupid}
        if group.comment:
            entry["comment"] = group.comment
        if group.users:
            entry["users"] = ",".join(sorted(group.users))
        res.append(entry)
    return res


@route("GET", "/access/groups/{groupid}")
def group_read(sim: Sim, call: Call) -> dict[str, t.Any]:
    groupid = str(call.params["groupid"])
    group = sim.state.groups.get(groupid)
    if group is None:
        raise ApiError(500, f"group '{groupid}' does not exist")
    res: dict[str, t.Any] = {"members": sorted(group.users)}
    if group.comment:
        res["comment"] = group.comment
    return res


@route("GET", "/access/users")
def users_index(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """Users the caller may administer, and always the caller itself (PVE compares the authenticated ID)."""
    every, allowed = _user_admin_of(sim, call.subject)
    enabled = call.params.get("enabled")
    res = []
    for userid, user in sorted(sim.state.users.items()):
        if not (every or userid == call.subject or userid in allowed):
            continue
        if enabled is not None and bool(user.enable) != call.bool("enabled"):
            continue
        entry = _user_entry(sim, user, call.bool("full"))
        if "groups" in entry:
            entry["groups"] = ",".join(entry["groups"])
            if not entry["groups"]:
                del entry["groups"]
        realm = userid.rsplit("@", 1)[-1]
        if realm in sim.state.realms:
            entry["realm-type"] = sim.state.realms[realm]["type"]
        entry["userid"] = userid
        res.append(entry)
    return res


@route("GET", "/access/users/{userid}")
def user_read(sim: Sim, call: Call) -> dict[str, t.Any]:
    """The check (``userid-group``) already refused unknown users and users the caller may not administer."""
    user = sim.state.users[str(call.params["userid"])]
    return _user_entry(sim, user, True)
