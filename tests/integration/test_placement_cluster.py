# SPDX-License-Identifier: GPL-3.0-or-later
"""Placement across nodes on the simulator's three-node cluster (docs/operations.md, "Placement"): ``target_node: auto``
chooses a node by the documented rule, the plan binds it, the confirmation names it, and the guest is cloned there with
Proxmox's ``target`` (the template on shared storage) and configured on that node; a cross-node clone of a template on
local storage fails in the preflight with nothing sent."""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest
import yaml

import guest_support as gs

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.placement import place
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import parse_definition
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.placement_leases import PlacementLedger
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import ProvisionStopped, provision

pytestmark = pytest.mark.integration
SPEED = 400
ADDRESS = "203.0.113.60"
LAB = {
    "name": "lab",
    "bridge": "vmbr2",
    "vlan": 42,
    "ipv4": {
        "mode": "static",
        "subnet": "203.0.113.0/24",
        "gateway": "203.0.113.1",
        "dns": ["203.0.113.53"],
        "searchDomain": "lab.example",
    },
}


@pytest.fixture()
def cluster(pvesim: t.Any) -> t.Any:
    pvesim.reset("cluster")  # vmbr2 (VLAN-aware) on pve-test and pve-test2 only; template 9001 on shared storage
    pvesim.set_speed(SPEED)
    pvesim.set_timings(guest={"agent_up_after": 0.2, "dhcp_after_agent": 0.1, "cloudinit_done_after_boot": 0.4})
    return pvesim


def _inputs(template_vmid: int, *, network: bool = True, storage: str = "shared") -> tuple[str, str]:
    catalog = yaml.safe_load(gs.catalog_text())
    catalog["images"][0]["templateVmid"] = template_vmid
    catalog["images"][0]["storage"] = storage  # a clone to another node goes onto shared storage only
    definition = yaml.safe_load(gs.definition_text())
    if network:
        catalog["networks"] = [LAB]
        definition["network"] = {"name": "lab", "ipv4": {"address": ADDRESS}}
        definition["targetNode"] = "auto"
    return yaml.safe_dump(catalog), yaml.safe_dump(definition)


def _params(sim: t.Any, tmp_path: Path, catalog: str, definition: str, **extra: t.Any) -> dict[str, t.Any]:
    """vmanyware_provision's options recording the confirmed operation itself (the provision role's one-task path)."""
    conn = sim.connection
    params: dict[str, t.Any] = {
        "operation_id": None,
        "journal_dir": str(tmp_path / "journal"),
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"],
        "api_token_secret": conn["tokens"]["full"]["secret"],
        "ca_path": conn["ca_file"],
        "validate_certs": True,
        "api_timeout": 10,
        "lock_wait": 10.0,
        "provisioning_enabled": True,
        "readiness_timeout": 60.0,
        "storage_concurrency": 3,
        "catalog": catalog,
        "catalog_path": None,
        "definition": definition,
        "definition_path": None,
        "target_vmid": gs.VMID,
        "idempotency_key": None,
        "preflight": True,
    }
    params.update(extra)
    return params


def _placed(sim: t.Any, tmp_path: Path, catalog: str, definition: str, prefer: str | None = None) -> dict[str, t.Any]:
    store = JournalStore(str(tmp_path / "journal"))
    with ProxmoxClient(gs.settings_for(sim.connection)) as client:
        return place(
            client,
            parse_catalog(text=catalog),
            parse_definition(text=definition),
            journal=PlacementLedger(store),
            prefer=prefer,
        )


def _review(sim: t.Any, tmp_path: Path, catalog: str, definition: str, node: str) -> dict[str, t.Any]:
    with pytest.raises(VmanywareError) as info:
        provision(
            _params(sim, tmp_path, catalog, definition, target_node=node, confirmation={}), check_mode=False, diff=False
        )
    assert info.value.code == "confirmation_required"
    return dict(info.value.details["expected_confirmation"])


def test_auto_places_a_static_vlan_guest_on_the_chosen_node(cluster: t.Any, tmp_path: Path) -> None:
    cluster.set_node_maintenance("pve-test", True)
    catalog, definition = _inputs(9001)
    cluster.clear_requests()
    placed = _placed(cluster, tmp_path, catalog, definition)
    assert all(entry["method"] == "GET" for entry in cluster.requests())  # placement only reads
    reasons = {c["node"]: c["reasons"] for c in placed["candidates"]}
    assert reasons == {"pve-test": ["maintenance"], "pve-test2": [], "pve-test3": ["bridge_missing"]}
    assert (placed["node"], placed["clone"]) == ("pve-test2", "target")

    confirmation = _review(cluster, tmp_path, catalog, definition, placed["node"])
    assert confirmation["targetNode"] == "pve-test2" and confirmation["sourceVmid"] == 9001

    # the apply run keeps the confirmed node while it still qualifies, so the confirmation matches
    again = _placed(cluster, tmp_path, catalog, definition, prefer=confirmation["targetNode"])
    assert (again["node"], again["preferred_kept"]) == ("pve-test2", True)
    assert again["not_examined"] == ["pve-test", "pve-test3"]  # the confirmed node qualifies: the others are not read
    cluster.clear_requests()
    result = provision(
        _params(cluster, tmp_path, catalog, definition, target_node=again["node"], confirmation=confirmation),
        check_mode=False,
        diff=False,
    )
    assert result["done"] and result["status"] == "completed", result
    checks = {c["code"]: c["status"] for c in result["preflight"]["checks"]}
    assert checks["target_node_online"] == checks["clone_source_shared"] == checks["bridge_vlan_aware"] == "passed"
    [clone] = cluster.requests("POST", r"/clone$")
    assert clone["path"] == "/nodes/pve-test/qemu/9001/clone" and clone["params"]["target"] == "pve-test2"
    writes = [e["path"] for e in cluster.requests() if e["method"] != "GET" and "/clone" not in e["path"]]
    assert writes and all("/nodes/pve-test2/qemu/%d/" % gs.VMID in path for path in writes)
    with ProxmoxClient(gs.settings_for(cluster.connection)) as client:
        config = client.get("/nodes/pve-test2/qemu/%d/config" % gs.VMID)  # the guest lives on the chosen node
    assert config["net0"].endswith(",bridge=vmbr2,tag=42") and config["ipconfig0"].startswith("ip=" + ADDRESS)
    assert cluster.schema_violations() == []


def test_cross_node_clone_of_a_local_template_fails_in_preflight_with_nothing_sent(
    cluster: t.Any, tmp_path: Path
) -> None:
    catalog, definition = _inputs(9000, network=False)  # template 9000's disks are on local-lvm of pve-test
    confirmation = _review(cluster, tmp_path, catalog, definition, "pve-test2")
    assert confirmation["targetNode"] == "pve-test2"
    cluster.clear_requests()
    with pytest.raises(ProvisionStopped) as info:
        provision(
            _params(cluster, tmp_path, catalog, definition, target_node="pve-test2", confirmation=confirmation),
            check_mode=False,
            diff=False,
        )
    result = info.value.to_result()
    assert result["error_code"] == "preflight_failed" and result["stages"] == []
    assert result["error_details"]["failed_checks"] == ["clone_source_shared"]
    assert [e for e in cluster.requests() if e["method"] in ("POST", "PUT", "DELETE")] == []
    assert not list((tmp_path / "journal").glob("op-*.json"))  # nothing recorded
    # placement never offers that node for this template
    placed = _placed(cluster, tmp_path, catalog, definition)
    assert {c["node"]: c["reasons"] for c in placed["candidates"]}["pve-test2"] == ["template_unreachable"]
    assert placed["node"] == "pve-test"


def test_cross_node_clone_onto_local_storage_fails_in_preflight_with_nothing_sent(
    cluster: t.Any, tmp_path: Path
) -> None:
    """Template 9001 is on shared storage, but the plan's storage local-lvm is not: qemu-server refuses the clone
    ("can't clone to non-shared storage"), so the preflight stops it and placement skips the other nodes."""
    catalog, definition = _inputs(9001, network=False, storage="local-lvm")
    confirmation = _review(cluster, tmp_path, catalog, definition, "pve-test2")
    cluster.clear_requests()
    with pytest.raises(ProvisionStopped) as info:
        provision(
            _params(cluster, tmp_path, catalog, definition, target_node="pve-test2", confirmation=confirmation),
            check_mode=False,
            diff=False,
        )
    result = info.value.to_result()
    assert result["error_code"] == "preflight_failed"
    assert result["error_details"]["failed_checks"] == ["clone_storage_shared"]
    assert [e for e in cluster.requests() if e["method"] in ("POST", "PUT", "DELETE")] == []
    placed = _placed(cluster, tmp_path, catalog, definition)
    reasons = {c["node"]: c["reasons"] for c in placed["candidates"]}
    assert reasons["pve-test2"] == reasons["pve-test3"] == ["storage_not_shared"] and placed["node"] == "pve-test"
