# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The three-node ``cluster`` seed: cluster status, proxied node requests, offline members, VNets, content types."""

from __future__ import annotations

import typing as t

import pytest

from pvesim.schema import Schema
from pvesim.testing import PvesimAdmin, start_server, stop_server

from .conftest import Api


@pytest.fixture()
def cluster(pvesim: PvesimAdmin) -> PvesimAdmin:
    pvesim.reset("cluster")
    return pvesim


_TYPES: dict[str, t.Callable[[t.Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: v in (0, 1, True, False),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def return_errors(schema: dict[str, t.Any], value: t.Any, where: str = "data") -> list[str]:
    """Where ``value`` breaks a PVE ``returns`` schema: types, enums, missing non-optional and unknown properties."""
    kind = schema.get("type")
    if kind in _TYPES and not _TYPES[kind](value):
        return [f"{where}: not {kind}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: not in enum"]
    errors: list[str] = []
    if kind == "array":
        for index, item in enumerate(value):
            errors += return_errors(schema.get("items", {}), item, f"{where}[{index}]")
    if kind == "object" and "properties" in schema:
        props = schema["properties"]
        errors += [
            f"{where}.{key}: unknown" for key in value if key not in props and not schema.get("additionalProperties")
        ]
        errors += [
            f"{where}.{key}: missing" for key, sub in props.items() if key not in value and not sub.get("optional")
        ]
        for key, item in value.items():
            if key in props:
                errors += return_errors(props[key], item, f"{where}.{key}")
    return errors


def returns_ok(method: str, path: str, data: t.Any) -> list[str]:
    endpoint, _params = Schema.load().match(method, path)
    return return_errors(endpoint.returns, data)


def test_return_checker_finds_errors() -> None:
    assert returns_ok("GET", "/cluster/status", [{"type": "bogus", "id": "x", "name": "n"}]) == [
        "data[0].type: not in enum"
    ]
    assert returns_ok("GET", "/cluster/status", [{"type": "node", "name": "n", "extra": 1}]) == [
        "data[0].extra: unknown",
        "data[0].id: missing",
    ]


def test_cluster_status_lists_three_nodes(cluster: PvesimAdmin, api: Api) -> None:
    status = api.data(api.get("/cluster/status"))
    assert returns_ok("GET", "/cluster/status", status) == []
    head, *nodes = status
    assert head == {"id": "cluster", "type": "cluster", "name": "vmanyware-lab", "nodes": 3, "quorate": 1, "version": 3}
    assert [(n["name"], n["nodeid"], n["online"], n["local"]) for n in nodes] == [
        ("pve-test", 1, 1, 1),
        ("pve-test2", 2, 1, 0),
        ("pve-test3", 3, 1, 0),
    ]
    assert [n["node"] for n in api.data(api.get("/nodes"))] == ["pve-test", "pve-test2", "pve-test3"]
    assert api.data(api.get("/nodes/pve-test3/status"))["pveversion"].startswith("pve-manager/9.1")
    assert cluster.schema_violations() == []


def test_cluster_status_needs_sys_audit_on_root(pvesim: PvesimAdmin, api: Api) -> None:
    resp = api.get("/cluster/status")  # demo seed: the token has Sys.Audit on /nodes/pve-test only
    assert resp.status_code == 403 and "Sys.Audit" in resp.json()["message"]


def test_requests_for_another_member_are_served_by_that_node(cluster: PvesimAdmin, api: Api) -> None:
    bridges = api.data(api.get("/nodes/pve-test2/network", type="bridge"))
    assert [(b["iface"], b["address"]) for b in bridges] == [
        ("vmbr0", "192.0.2.11"),
        ("vmbr1", "198.51.100.11"),
        ("vmbr2", "203.0.113.11"),
    ]
    local = {b["iface"]: b for b in api.data(api.get("/nodes/pve-test/network", type="bridge"))}
    assert sorted(local) == ["vmbr0", "vmbr2"]
    # VLAN-aware (ifupdown2's bridge-vlan-aware, as PVE's network read shows it) and plain bridges
    assert local["vmbr2"]["bridge_vlan_aware"] == 1 and local["vmbr2"]["bridge_vids"] == "2-4094"
    assert "bridge_vlan_aware" not in local["vmbr0"]
    assert "vmbr2" not in {b["iface"] for b in api.data(api.get("/nodes/pve-test3/network", type="bridge"))}
    # the template's config lives on pve-test: asked through pve-test2 it does not exist there
    resp = api.get("/nodes/pve-test2/qemu/9000/config")
    assert resp.status_code == 500 and "nodes/pve-test2/qemu-server/9000.conf" in resp.json()["message"]
    assert api.data(api.get("/nodes/pve-test2/qemu")) == []
    assert [vm["vmid"] for vm in api.data(api.get("/nodes/pve-test/qemu"))] == [9000, 9001]


def test_clone_to_another_node_needs_shared_storage(cluster: PvesimAdmin, api: Api) -> None:
    """qemu-server refuses a target node when any volume of the source is on local storage, whatever ``storage``
    the clone would go to; the local node as target is no target."""
    refused = api.post("/nodes/pve-test/qemu/9000/clone", newid=301, full=1, storage="shared", target="pve-test2")
    assert (refused.status_code, refused.reason) == (500, "can't clone VM to node 'pve-test2' (VM uses local storage)")
    assert api.get("/nodes/pve-test2/qemu/301/config").status_code == 500  # nothing was created
    local = api.data(api.post("/nodes/pve-test/qemu/9000/clone", newid=302, full=1, target="pve-test"))
    assert api.wait(local)["exitstatus"] == "OK"
    assert cluster.schema_violations() == []


def test_clone_target_refuses_a_storage_that_is_not_shared_or_not_there(cluster: PvesimAdmin, api: Api) -> None:
    """qemu-server clone_vm: with ``target`` the ``storage`` must be shared (checked before the source's volumes)."""
    resp = api.post("/nodes/pve-test/qemu/9001/clone", newid=301, full=1, storage="local-lvm", target="pve-test2")
    assert (resp.status_code, resp.reason) == (500, "can't clone to non-shared storage 'local-lvm'")
    assert api.get("/nodes/pve-test2/qemu/301/config").status_code == 500


def test_clone_to_another_node_moves_the_config_there_at_the_end(cluster: PvesimAdmin, api: Api) -> None:
    """qemu-server writes the new config (``lock: clone``) on the node the clone runs on and renames it into the
    target node's directory as the task's last step."""
    cluster.set_timings(tasks={"qmclone_full": 50.0})  # 1 s real at the default speed
    upid = api.data(
        api.post("/nodes/pve-test/qemu/9001/clone", newid=301, full=1, storage="shared", target="pve-test2")
    )
    assert api.data(api.get("/nodes/pve-test/qemu/301/config"))["lock"] == "clone"
    assert api.get("/nodes/pve-test2/qemu/301/config").status_code == 500
    assert api.wait(upid)["exitstatus"] == "OK"
    assert "lock" not in api.data(api.get("/nodes/pve-test2/qemu/301/config"))
    assert api.get("/nodes/pve-test/qemu/301/config").status_code == 500


def test_clone_to_another_node_and_its_tasks(cluster: PvesimAdmin, api: Api) -> None:
    upid = api.data(
        api.post("/nodes/pve-test/qemu/9001/clone", newid=301, name="far", full=1, storage="shared", target="pve-test2")
    )
    assert upid.startswith("UPID:pve-test:")  # the clone worker runs on the source node
    assert api.wait(upid)["exitstatus"] == "OK"
    assert api.get(f"/nodes/pve-test2/tasks/{upid}/status").status_code == 500  # each node keeps its own task log
    config = api.data(api.get("/nodes/pve-test2/qemu/301/config"))
    assert config["name"] == "far" and config["scsi0"].startswith("shared:vm-301-disk-0")
    assert api.get("/nodes/pve-test/qemu/301/config").status_code == 500
    start = api.data(api.post("/nodes/pve-test2/qemu/301/status/start"))
    assert start.startswith("UPID:pve-test2:") and ":qmstart:301:" in start
    assert [t["upid"] for t in api.data(api.get("/nodes/pve-test2/tasks", source="all"))] == [start]
    resources = {r["id"]: r for r in api.data(api.get("/cluster/resources", type="vm"))}
    assert resources["qemu/301"]["node"] == "pve-test2"
    assert cluster.schema_violations() == []


def test_offline_member_fails_like_a_failed_proxy(cluster: PvesimAdmin, api: Api) -> None:
    cluster.set_node_online("pve-test3", False)
    resp = api.get("/nodes/pve-test3/status")
    assert resp.status_code == 595
    nodes = {n["node"]: n for n in api.data(api.get("/nodes"))}
    assert nodes["pve-test3"]["status"] == "offline" and "cpu" not in nodes["pve-test3"]
    status = {n["name"]: n for n in api.data(api.get("/cluster/status"))}
    assert status["pve-test3"]["online"] == 0 and status["vmanyware-lab"]["quorate"] == 1
    assert api.get("/nodes/pve-nowhere/status").status_code == 500
    cluster.set_node_online("pve-test3", True)
    assert api.get("/nodes/pve-test3/status").status_code == 200


def test_import_and_snippets_content_and_node_storages(cluster: PvesimAdmin, api: Api) -> None:
    imports = api.data(api.get("/nodes/pve-test2/storage", content="import"))
    assert [(s["storage"], s["shared"]) for s in imports] == [("shared", 1)]
    assert "snippets" in imports[0]["content"].split(",") and "images" in imports[0]["content"].split(",")
    assert [s["storage"] for s in api.data(api.get("/nodes/pve-test3/storage", content="snippets"))] == ["shared"]
    assert cluster.schema_violations() == []


def test_vnet_list_is_filtered_by_sdn_audit(cluster: PvesimAdmin, api: Api, limited: Api) -> None:
    vnets = api.data(api.get("/cluster/sdn/vnets"))
    assert returns_ok("GET", "/cluster/sdn/vnets", vnets) == []
    assert [(v["vnet"], v["zone"]) for v in vnets] == [("labnet", "lab")]
    assert limited.data(limited.get("/cluster/sdn/vnets")) == []


def test_serve_with_the_cluster_seed(tmp_path: t.Any) -> None:
    proc, conn = start_server(str(tmp_path), extra=["--seed", "cluster"])
    try:
        nodes = Api(conn).data(Api(conn).get("/nodes"))
        assert [n["node"] for n in nodes] == ["pve-test", "pve-test2", "pve-test3"]
    finally:
        stop_server(proc)
