# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The read side of /access: realms (world-readable list), groups and users, each filtered or refused as
pve-access-control does (API2/Domains.pm, Group.pm, User.pm, RPCEnvironment ``userid-group``)."""

from __future__ import annotations

import requests

from pvesim.testing import PvesimAdmin

from .conftest import Api, root_api


def test_realms_are_listed_to_anyone(pvesim: PvesimAdmin) -> None:
    conn = pvesim.connection
    anonymous = requests.get(conn["url"] + "/access/domains", verify=conn["ca_file"], timeout=30)
    assert anonymous.status_code == 200  # the login box lists them before anyone logs in
    assert anonymous.json()["data"] == [
        {"realm": "pam", "type": "pam", "comment": "Linux PAM standard authentication"},
        {"realm": "pve", "type": "pve", "comment": "Proxmox VE authentication server"},
    ]
    assert [e["endpoint"] for e in pvesim.requests(path_regex="^/access/domains$")] == ["GET /access/domains"]


def test_one_realm_needs_sys_audit_or_realm_allocate(pvesim: PvesimAdmin, api: Api) -> None:
    realm = root_api(pvesim).access.domains("pve").get()
    assert realm["type"] == "pve" and realm["comment"] == "Proxmox VE authentication server"
    assert len(realm["digest"]) == 40
    assert api.get("/access/domains/pve").status_code == 403  # the full token may not audit /access/realm
    pvesim.set_token("vmanyware@pve!limited", privileges={"/access/realm": ["Sys.Audit"]})
    limited = Api(pvesim.connection, "limited")
    assert limited.data(limited.get("/access/domains/pam"))["type"] == "pam"
    missing = limited.get("/access/domains/ldap")
    assert (missing.status_code, missing.reason) == (500, "domain 'ldap' does not exist")
    assert pvesim.schema_violations() == []


def test_groups_are_filtered_by_privilege(pvesim: PvesimAdmin, api: Api) -> None:
    admin = root_api(pvesim)
    assert admin.access.groups.get() == [
        {"groupid": "operators", "comment": "people who confirm plans", "users": "vmanyware@pve"}
    ]
    assert admin.access.groups("operators").get() == {
        "comment": "people who confirm plans",
        "members": ["vmanyware@pve"],
    }
    assert api.data(api.get("/access/groups")) == []  # filtered, not refused
    assert api.get("/access/groups/operators").status_code == 403
    pvesim.set_token("vmanyware@pve!limited", privileges={"/access/groups/operators": ["Group.Allocate"]})
    limited = Api(pvesim.connection, "limited")
    assert [g["groupid"] for g in limited.data(limited.get("/access/groups"))] == ["operators"]
    assert limited.get("/access/groups/operators").status_code == 403  # reading one needs it on /access/groups
    assert pvesim.schema_violations() == []


def test_users_list_and_read(pvesim: PvesimAdmin, api: Api) -> None:
    admin = root_api(pvesim)
    users = {u["userid"]: u for u in admin.access.users.get(full=1)}
    assert set(users) == {"root@pam", "vmanyware@pve"}
    assert users["root@pam"] == {
        "userid": "root@pam",
        "enable": 1,
        "expire": 0,
        "email": "root@localhost",
        "realm-type": "pam",
        "tokens": [],
    }
    automation = users["vmanyware@pve"]
    assert automation["groups"] == "operators" and automation["realm-type"] == "pve"
    assert [tok["tokenid"] for tok in automation["tokens"]] == ["full", "limited"]
    assert all(tok["privsep"] == 1 for tok in automation["tokens"])
    assert "tokens" not in admin.access.users.get()[0]  # only with full=1
    assert admin.access.users.get(enabled=0) == []
    one = admin.access.users("vmanyware@pve").get()
    assert one["groups"] == ["operators"] and one["enable"] == 1  # a list here, a string in the index
    # A token is not its user: without privileges it lists nobody and reads nobody.
    assert api.data(api.get("/access/users")) == []
    assert api.get("/access/users/vmanyware@pve").status_code == 403
    missing = api.get("/access/users/nobody@pve")
    assert (missing.status_code, missing.reason) == (500, "no such user ('nobody@pve')")
    # User.Modify on a group lets it see that group's users, and only them.
    pvesim.set_token("vmanyware@pve!limited", privileges={"/access/groups/operators": ["User.Modify"]})
    limited = Api(pvesim.connection, "limited")
    assert [u["userid"] for u in limited.data(limited.get("/access/users"))] == ["vmanyware@pve"]
    assert limited.data(limited.get("/access/users/vmanyware@pve"))["groups"] == ["operators"]
    assert limited.get("/access/users/root@pam").status_code == 403
    assert pvesim.schema_violations() == []
