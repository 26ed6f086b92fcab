# SPDX-License-Identifier: GPL-3.0-or-later
"""Placement (``_checks/placement.py``): which nodes qualify, each exclusion reason, the deterministic order, the
journal's pending operations subtracted, and ``prefer`` (docs/operations.md, "Placement")."""

from __future__ import annotations

import copy
import typing as t

import pytest
from format_samples import catalog, definition, mapping
from pve_fake import FakeClient

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import (
    InputError,
    ProviderError,
    VmanywareError,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.clone_source import source_shared
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.placement import REASONS, place
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import validate_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import validate_definition

GIB = 1024**3
MIB = 1024**2
NODES = ("pve-a", "pve-b", "pve-c")
SCOPE = "scope-1"


def denied() -> ProviderError:
    return ProviderError(code="permission_denied", details={"status": 403})


def cluster() -> dict[str, t.Any]:
    """Three healthy nodes; the template (debian-13, VMID 9000 on pve-a) on shared storage."""
    state: dict[str, t.Any] = {
        "nodes": {n: {"node": n, "status": "online", "mem": 8 * GIB, "maxmem": 64 * GIB} for n in NODES},
        "maintenance": {n: "online" for n in NODES},
        "guests": [],
        # the plan's storage: shared, as a clone to another node needs (qemu-server: can't clone to non-shared storage)
        "storage": {
            n: {"active": 1, "enabled": 1, "shared": 1, "content": "images,rootdir", "avail": 500 * GIB} for n in NODES
        },
        "bridges": {n: [{"iface": "vmbr0", "type": "bridge"}] for n in NODES},
        "template": {
            "template": 1,
            "scsi0": "shared:base-9000-disk-0,size=8G",
            "ide2": "shared:vm-9000-cloudinit,media=cdrom",
        },
        "shared": [{"storage": "shared", "shared": 1}, {"storage": "local-lvm", "shared": 0}],
    }
    return state


def client(state: dict[str, t.Any]) -> FakeClient:
    routes: dict[str, t.Any] = {
        "/nodes": list(state["nodes"].values()),
        "/cluster/ha/status/manager_status": state["maintenance"]
        if isinstance(state["maintenance"], BaseException)
        else {"manager_status": {"node_status": state["maintenance"]}, "quorum": {"quorate": 1}, "lrm_status": {}},
        "/cluster/resources": state["guests"],
        "/nodes/pve-a/qemu/9000/config": state["template"],
        "/nodes/pve-a/storage": state["shared"],
    }
    for node in NODES:
        routes["/nodes/%s/storage/shared/status" % node] = state["storage"][node]
        routes["/nodes/%s/network" % node] = state["bridges"][node]
    fake = FakeClient(routes)
    fake.provider_scope_id = SCOPE
    return fake


def inputs(catalog_doc: dict[str, t.Any] | None = None, **fields: t.Any) -> tuple[dict[str, t.Any], dict[str, t.Any]]:
    doc = catalog_doc if catalog_doc is not None else catalog()
    for item in doc["images"]:
        if item["node"] == "pve-test":
            item["node"] = "pve-a"
        item["storage"] = "shared"
    defn = definition()
    defn.update(fields)
    return validate_catalog(doc), validate_definition(defn)


def run(
    state: dict[str, t.Any],
    *,
    pending: t.Sequence[dict[str, t.Any]] = (),
    prefer: str | None = None,
    catalog_doc: dict[str, t.Any] | None = None,
    **fields: t.Any,
) -> dict[str, t.Any]:
    parsed_catalog, parsed_definition = inputs(catalog_doc, **fields)
    fake = client(state)
    result = place(fake, parsed_catalog, parsed_definition, pending_of=lambda scope: list(pending), prefer=prefer)
    assert fake.mutations() == []  # placement only reads
    return result


def by_node(result: dict[str, t.Any]) -> dict[str, dict[str, t.Any]]:
    return {c["node"]: c for c in result["candidates"]}


def test_equal_nodes_order_by_name() -> None:
    result = run(cluster())
    assert result["node"] == "pve-a" and result["order"] == ["pve-a", "pve-b", "pve-c"]
    assert [c["node"] for c in result["candidates"]] == list(NODES)
    assert by_node(result)["pve-a"]["clone"] == "per-node-template" and by_node(result)["pve-b"]["clone"] == "target"
    assert by_node(result)["pve-a"]["reason"] == "chosen" and by_node(result)["pve-b"]["qualifies"] is True
    assert result["provider_scope_id"] == SCOPE and result["preferred_kept"] is None


def test_fewest_running_guests_then_most_free_memory() -> None:
    state = cluster()
    state["guests"] = [
        {"vmid": 100, "node": "pve-a", "status": "running", "type": "qemu"},
        {"vmid": 101, "node": "pve-b", "status": "stopped", "type": "qemu"},  # stopped guests do not count
        {"vmid": 102, "node": "pve-c", "status": "running", "type": "lxc"},
    ]
    assert run(state)["order"] == ["pve-b", "pve-a", "pve-c"]
    state["guests"][1]["status"] = "running"
    state["nodes"]["pve-c"]["mem"] = 4 * GIB  # more free memory breaks the tie
    assert run(state)["order"] == ["pve-c", "pve-a", "pve-b"]


def test_deterministic_whatever_the_reply_order() -> None:
    state = cluster()
    first = run(state)
    state["nodes"] = dict(reversed(list(state["nodes"].items())))
    assert run(state) == first


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda s: s["nodes"]["pve-b"].update(status="offline"), "offline"),
        (lambda s: s["maintenance"].update({"pve-b": "maintenance"}), "maintenance"),
        (lambda s: s["storage"]["pve-b"].update(active=0), "storage_inactive"),
        (lambda s: s["storage"]["pve-b"].update(content="iso"), "storage_content"),
        (lambda s: s["storage"]["pve-b"].pop("avail"), "storage_space_unknown"),
        (lambda s: s["storage"]["pve-b"].update(avail=10 * GIB), "storage_space_short"),
        (lambda s: s["bridges"].update({"pve-b": [{"iface": "vmbr9"}]}), "bridge_missing"),
        (lambda s: s["nodes"]["pve-b"].update(mem=63 * GIB), "memory_short"),
        (lambda s: s["nodes"]["pve-b"].pop("maxmem"), "memory_unknown"),
    ],
)
def test_each_exclusion_reason(change: t.Callable[[dict[str, t.Any]], None], reason: str) -> None:
    state = cluster()
    change(state)
    result = run(state)
    assert by_node(result)["pve-b"]["reasons"] == [reason] and by_node(result)["pve-b"]["qualifies"] is False
    assert by_node(result)["pve-b"]["reason"] == REASONS[reason]
    assert result["order"] == ["pve-a", "pve-c"]


def test_vlan_needs_a_vlan_aware_bridge() -> None:
    state = cluster()
    for node in NODES:
        state["bridges"][node] = [{"iface": "vmbr2", "bridge_vlan_aware": 1 if node == "pve-c" else 0}]
    doc = catalog()
    doc["networks"] = [{"name": "lab", "bridge": "vmbr2", "vlan": 42, "ipv4": {"mode": "dhcp"}}]
    result = run(state, catalog_doc=doc, network={"name": "lab"})
    assert result["node"] == "pve-c"
    assert by_node(result)["pve-a"]["reasons"] == by_node(result)["pve-b"]["reasons"] == ["bridge_not_vlan_aware"]


def test_local_template_reaches_only_its_node_and_per_node_templates() -> None:
    state = cluster()
    state["template"]["scsi0"] = "local-lvm:base-9000-disk-0,size=8G"
    result = run(state)
    assert by_node(result)["pve-b"]["reasons"] == ["template_unreachable"] and result["order"] == ["pve-a"]
    doc = catalog()
    doc["images"].append(mapping(node="pve-c", templateVmid=9100))
    state["nodes"]["pve-a"]["mem"] = 60 * GIB
    result = run(state, catalog_doc=doc)
    assert result["order"] == ["pve-c", "pve-a"] and result["clone"] == "per-node-template"
    state["template"] = denied()
    assert by_node(run(state))["pve-b"]["reasons"] == ["template_unknown"]


def test_maintenance_unreadable_excludes_every_node() -> None:
    state = cluster()
    state["maintenance"] = denied()
    with pytest.raises(VmanywareError) as info:
        run(state)
    assert info.value.code == "no_node_qualifies"
    assert {c["node"]: c["reasons"] for c in info.value.details["candidates"]} == dict.fromkeys(
        NODES, ["maintenance_unknown"]
    )


def test_pending_operations_are_subtracted() -> None:
    state = cluster()
    state["nodes"]["pve-a"]["mem"] = 4 * GIB  # the most free memory: first
    assert run(state)["node"] == "pve-a"
    pending = [
        {"node": "pve-a", "storage": "shared", "memoryMiB": 8 * 1024, "diskGiB": 0},
        {"node": "pve-b", "storage": "other", "memoryMiB": 0, "diskGiB": 490},  # another storage: not counted
    ]
    result = run(state, pending=pending)
    assert result["order"] == ["pve-b", "pve-c", "pve-a"]  # pve-a's free memory 52 GiB after the subtraction
    assert by_node(result)["pve-a"]["free_memory_bytes"] == 52 * GIB
    pending = [{"node": "pve-b", "storage": "shared", "memoryMiB": 0, "diskGiB": 490}]
    assert by_node(run(state, pending=pending))["pve-b"]["reasons"] == ["storage_space_short"]
    pending = [{"node": "pve-c", "storage": "shared", "memoryMiB": 59 * 1024, "diskGiB": 0}]
    assert by_node(run(state, pending=pending))["pve-c"]["reasons"] == ["memory_short"]


def test_prefer_is_kept_while_it_qualifies() -> None:
    state = cluster()
    result = run(state, prefer="pve-c")
    assert (result["node"], result["preferred_kept"]) == ("pve-c", True)
    assert by_node(result)["pve-c"]["chosen"] and not by_node(result)["pve-a"]["chosen"]
    state["maintenance"]["pve-c"] = "maintenance"
    result = run(state, prefer="pve-c")
    assert (result["node"], result["preferred_kept"]) == ("pve-a", False)
    assert run(state, prefer="pve-nowhere")["preferred_kept"] is False


def test_no_node_qualifies_lists_every_reason() -> None:
    state = cluster()
    for node in NODES:
        state["storage"][node]["avail"] = GIB
    state["nodes"]["pve-c"]["status"] = "offline"
    with pytest.raises(VmanywareError) as info:
        run(state)
    assert info.value.code == "no_node_qualifies"
    assert info.value.details["candidates"] == [
        {"node": "pve-a", "reasons": ["storage_space_short"]},
        {"node": "pve-b", "reasons": ["storage_space_short"]},
        {"node": "pve-c", "reasons": ["offline"]},
    ]


def test_definition_naming_its_node_is_not_placed() -> None:
    with pytest.raises(InputError) as info:
        run(cluster(), targetNode="pve-b")
    assert info.value.code == "target_node_conflict"
    assert run(cluster(), targetNode="auto")["node"] == "pve-a"


def test_source_shared_statuses() -> None:
    template = {"scsi0": "shared:base-1,size=8G", "ide2": "none,media=cdrom", "efidisk0": "local:1/x.raw"}
    assert source_shared(template, {"shared": True, "local": False})[0] == "failed"
    assert source_shared(template, {"shared": True})[0] == "unknown"
    assert source_shared(template, None)[0] == "unknown"
    shared_only = copy.deepcopy(template)
    del shared_only["efidisk0"]
    assert source_shared(shared_only, {"shared": True})[0] == "passed"
    assert source_shared({"net0": "virtio"}, {})[0] == "failed"


def test_a_clone_with_target_needs_the_plans_storage_shared() -> None:
    """qemu-server refuses a clone to another node onto storage that is not shared: those nodes do not qualify."""
    state = cluster()
    for node in ("pve-b", "pve-c"):
        state["storage"][node] = dict(state["storage"][node], shared=0)
    result = run(state)
    reasons = {node: candidate["reasons"] for node, candidate in by_node(result).items()}
    assert reasons == {"pve-a": [], "pve-b": ["storage_not_shared"], "pve-c": ["storage_not_shared"]}
    assert result["node"] == "pve-a"
