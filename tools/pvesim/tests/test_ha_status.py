# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``GET /cluster/ha/status/manager_status`` and the admin switch of a node's HA maintenance mode."""

from __future__ import annotations

import pytest

from pvesim.testing import PvesimAdmin

from .conftest import Api


@pytest.fixture()
def cluster(pvesim: PvesimAdmin) -> PvesimAdmin:
    pvesim.reset("cluster")
    return pvesim


def test_manager_status_lists_every_member_online(cluster: PvesimAdmin, api: Api) -> None:
    status = api.data(api.get("/cluster/ha/status/manager_status"))
    assert set(status) == {"manager_status", "quorum", "lrm_status"}
    assert status["manager_status"]["node_status"] == {
        "pve-test": "online",
        "pve-test2": "online",
        "pve-test3": "online",
    }
    assert status["manager_status"]["master_node"] == "pve-test" and status["manager_status"]["service_status"] == {}
    assert {node: lrm["mode"] for node, lrm in status["lrm_status"].items()} == dict.fromkeys(
        status["lrm_status"], "active"
    )
    assert status["quorum"] == {"node": "pve-test", "quorate": 1}
    assert cluster.schema_violations() == []


def test_maintenance_and_offline_members(cluster: PvesimAdmin, api: Api) -> None:
    assert cluster.set_node_maintenance("pve-test2", True) == {"node": "pve-test2", "maintenance": True}
    cluster.set_node_online("pve-test3", False)
    status = api.data(api.get("/cluster/ha/status/manager_status"))
    assert status["manager_status"]["node_status"] == {
        "pve-test": "online",
        "pve-test2": "maintenance",
        "pve-test3": "unknown",
    }
    assert status["lrm_status"]["pve-test2"]["mode"] == "maintenance"
    cluster.set_node_maintenance("pve-test2", False)
    status = api.data(api.get("/cluster/ha/status/manager_status"))
    assert status["manager_status"]["node_status"]["pve-test2"] == "online"


def test_maintenance_admin_refuses_bad_input(cluster: PvesimAdmin) -> None:
    with pytest.raises(Exception):
        cluster.set_node_maintenance("pve-nowhere", True)
    with pytest.raises(Exception):
        cluster._call("PUT", "/ha/nodes/pve-test2", {"maintenance": "yes"})  # pylint: disable=protected-access


def test_manager_status_needs_sys_audit_on_root(pvesim: PvesimAdmin) -> None:
    pvesim.reset("demo")
    resp = Api(pvesim.connection, "limited").get("/cluster/ha/status/manager_status")
    assert resp.status_code == 403


def test_reset_ends_maintenance(cluster: PvesimAdmin, api: Api) -> None:
    cluster.set_node_maintenance("pve-test", True)
    cluster.reset("cluster")
    status = api.data(api.get("/cluster/ha/status/manager_status"))
    assert status["manager_status"]["node_status"]["pve-test"] == "online"
