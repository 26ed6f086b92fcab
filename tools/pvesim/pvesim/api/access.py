# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/access``: tickets and the permission listing (PVE API2/AccessControl.pm)."""

from __future__ import annotations

import secrets
import time
import typing as t

from .core import ApiError, Call, Sim, route


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
