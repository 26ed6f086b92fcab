# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""/storage: storage.cfg as pve-storage's API2/Storage/Config.pm shows it (not a node's storage status)."""

from __future__ import annotations

from pvesim.testing import PvesimAdmin

from .conftest import Api, root_api


def test_index_lists_what_the_caller_may_use(pvesim: PvesimAdmin, api: Api) -> None:
    admin = root_api(pvesim)
    configs = {c["storage"]: c for c in admin.storage.get()}
    assert set(configs) == {"local", "local-lvm"}
    assert configs["local"]["type"] == "dir" and configs["local"]["path"] == "/var/lib/vz"
    assert configs["local"]["content"] == "backup,import,iso,snippets,vztmpl"
    assert configs["local-lvm"]["type"] == "lvmthin" and configs["local-lvm"]["content"] == "images,rootdir"
    assert configs["local-lvm"]["thinpool"] == "data" and configs["local-lvm"]["vgname"] == "pve"
    assert len({c["digest"] for c in configs.values()}) == 1  # one digest: the whole file's
    assert [c["storage"] for c in admin.storage.get(type="dir")] == ["local"]
    # The full token has Datastore.* on local-lvm only: the list is filtered, not refused.
    assert [c["storage"] for c in api.data(api.get("/storage"))] == ["local-lvm"]
    assert pvesim.schema_violations() == []


def test_read_needs_datastore_allocate(pvesim: PvesimAdmin, api: Api) -> None:
    pvesim.reset("cluster")
    admin = root_api(pvesim)
    shared = admin.storage("shared").get()
    assert shared["type"] == "nfs" and shared["path"] == "/mnt/pve/shared" and shared["storage"] == "shared"
    assert api.get("/storage/local-lvm").status_code == 403  # AllocateSpace is not Allocate
    pvesim.set_storage("local", enabled=0)
    assert admin.storage("local").get()["disable"] == 1
    missing = api.req("GET", "/storage/nosuch")
    assert missing.status_code == 403  # the permission check comes first
    store = admin._store  # pylint: disable=protected-access
    reply = store["session"].get(store["base_url"] + "/storage/nosuch")
    assert (reply.status_code, reply.reason) == (500, "storage 'nosuch' does not exist")
    assert pvesim.schema_violations() == []
