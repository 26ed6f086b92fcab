# SPDX-License-Identifier: GPL-3.0-or-later
"""Placement (``_checks/placement.py``): which nodes qualify, each exclusion reason, the deterministic order, the
journal's pending operations and placement leases counted and subtracted, and ``prefer`` (docs/operations.md,
"Placement" and "Placement leases")."""

from __future__ import annotations

import collections
import contextlib
import copy
import threading
import time
import typing as t
from pathlib import Path

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
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.placement_leases import PlacementLedger
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.vmid import LeaseBook, release

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


class Journal:
    """An in-memory ``PlacementJournal``: the pending operations and leases given; every call checks that it runs under
    the lock, and the leases held are kept (a later run counts them, as the journal would)."""

    def __init__(self, pending: t.Sequence[dict[str, t.Any]] = (), leases: t.Sequence[dict[str, t.Any]] = ()) -> None:
        self.pending_ops = [dict(p) for p in pending]
        self.held = {lease["vmid"]: dict(lease) for lease in leases}
        self.depth = 0
        self.dropped: list[int] = []
        self.pending_depths: list[int] = []

    @contextlib.contextmanager
    def locked(self) -> t.Iterator[None]:
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1

    def pending(self, scope: str) -> list[dict[str, t.Any]]:
        assert scope == SCOPE
        self.pending_depths.append(self.depth)  # read once before the lock, and again under it
        return list(self.pending_ops)

    def leases(self, scope: str, *, exclude_vmid: int | None = None) -> list[dict[str, t.Any]]:
        assert self.depth == 1 and scope == SCOPE
        return [dict(lease) for vmid, lease in sorted(self.held.items()) if vmid != exclude_vmid]

    def hold(self, scope: str, vmid: int, choice: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        assert self.depth == 1 and scope == SCOPE
        before = self.held.get(vmid) or {}
        lease = {"providerScopeId": scope, "vmid": vmid, **choice, "createdAt": "c", "expiresAt": "e"}
        self.held[vmid] = lease
        return {"lease": lease, "written": True, "changed": any(before.get(k) != v for k, v in choice.items())}

    def drop(self, scope: str, vmid: int) -> bool:
        assert self.depth == 1 and scope == SCOPE
        self.dropped.append(vmid)
        return self.held.pop(vmid, None) is not None


def run(
    state: dict[str, t.Any],
    *,
    pending: t.Sequence[dict[str, t.Any]] = (),
    prefer: str | None = None,
    catalog_doc: dict[str, t.Any] | None = None,
    journal: t.Any = None,
    vmid: int | None = None,
    **fields: t.Any,
) -> dict[str, t.Any]:
    parsed_catalog, parsed_definition = inputs(catalog_doc, **fields)
    fake = client(state)
    journal = journal if journal is not None else Journal(pending)
    result = place(fake, parsed_catalog, parsed_definition, journal=journal, vmid=vmid, prefer=prefer)
    assert fake.mutations() == []  # placement only reads Proxmox
    if isinstance(journal, Journal):
        assert journal.pending_depths[-2:] == [0, 1]  # the pending operations counted are those read under the lock
    return result


def by_node(result: dict[str, t.Any]) -> dict[str, dict[str, t.Any]]:
    return {c["node"]: c for c in result["candidates"]}


def test_equal_nodes_order_by_name() -> None:
    result = run(cluster())
    assert result["node"] == "pve-a" and result["order"] == ["pve-a", "pve-b", "pve-c"]
    assert [c["node"] for c in result["candidates"]] == list(NODES)
    assert by_node(result)["pve-a"]["clone"] == "per-node-template" and by_node(result)["pve-b"]["clone"] == "target"
    assert by_node(result)["pve-a"]["reason"].startswith("chosen: ") and by_node(result)["pve-b"]["qualifies"] is True
    assert by_node(result)["pve-b"]["reason"] == (
        "qualifies; ties with the chosen node (0 expected guests, as much free memory), whose name sorts first"
    )
    assert result["provider_scope_id"] == SCOPE and result["preferred_kept"] is None
    assert (result["lease"], result["lease_written"], result["changed"]) == (None, False, False)  # no vmid: no lease


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
    # each pending operation is an expected guest of its node: pve-c has none; pve-b beats pve-a on free memory (56 GiB
    # against 52 GiB after the subtraction)
    assert result["order"] == ["pve-c", "pve-b", "pve-a"]
    assert by_node(result)["pve-a"]["free_memory_bytes"] == 52 * GIB
    assert [
        (c["running_guests"], c["pending_guests"], c["leased_guests"], c["expected_guests"])
        for c in result["candidates"]
    ] == [
        (0, 1, 0, 1),
        (0, 1, 0, 1),
        (0, 0, 0, 0),
    ]
    pending = [{"node": "pve-b", "storage": "shared", "memoryMiB": 0, "diskGiB": 490}]
    assert by_node(run(state, pending=pending))["pve-b"]["reasons"] == ["storage_space_short"]
    pending = [{"node": "pve-c", "storage": "shared", "memoryMiB": 59 * 1024, "diskGiB": 0}]
    assert by_node(run(state, pending=pending))["pve-c"]["reasons"] == ["memory_short"]


def test_prefer_is_kept_while_it_qualifies() -> None:
    state = cluster()
    result = run(state, prefer="pve-c")
    assert (result["node"], result["preferred_kept"]) == ("pve-c", True)
    assert by_node(result)["pve-c"]["chosen"] and list(by_node(result)) == ["pve-c"]  # the others: not_examined
    state["maintenance"]["pve-c"] = "maintenance"
    result = run(state, prefer="pve-c")
    assert (result["node"], result["preferred_kept"]) == ("pve-a", False)
    assert run(state, prefer="pve-nowhere")["preferred_kept"] is False


def test_prefer_is_examined_first_and_the_others_only_when_it_no_longer_qualifies() -> None:
    """An apply run names the confirmed node: while it qualifies the rule keeps it whatever the other nodes say, so their
    storage and bridge are not read; when it no longer qualifies every node is examined and the rule chooses."""
    parsed_catalog, parsed_definition = inputs(None)
    state = cluster()
    state["guests"] = [{"vmid": 100, "node": "pve-c", "status": "running", "type": "qemu"}]  # the rule alone: not pve-c
    fake = client(state)
    result = place(fake, parsed_catalog, parsed_definition, journal=Journal(), vmid=301, prefer="pve-c")
    assert (result["node"], result["preferred_kept"], result["not_examined"]) == ("pve-c", True, ["pve-a", "pve-b"])
    assert [c["node"] for c in result["candidates"]] == ["pve-c"] and result["order"] == ["pve-c"]
    assert result["lease"]["node"] == "pve-c" and result["lease_written"] is True
    read = fake.paths("GET")
    # the template's node is read only for the template (is it on shared storage?), not as a candidate
    assert [p for p in read if p.startswith(("/nodes/pve-a/", "/nodes/pve-b/"))] == [
        "/nodes/pve-a/qemu/9000/config",
        "/nodes/pve-a/storage",
    ]
    assert "/nodes/pve-c/storage/shared/status" in read and "/nodes/pve-c/network" in read

    state["nodes"]["pve-c"]["mem"] = state["nodes"]["pve-c"]["maxmem"]  # no free memory left: it no longer qualifies
    fake = client(state)
    journal = Journal()
    result = place(fake, parsed_catalog, parsed_definition, journal=journal, vmid=301, prefer="pve-c")
    assert (result["node"], result["preferred_kept"], result["not_examined"]) == ("pve-a", False, [])
    assert by_node(result)["pve-c"]["reasons"] == ["memory_short"] and set(by_node(result)) == set(NODES)
    assert "/nodes/pve-b/network" in fake.paths("GET") and journal.held[301]["node"] == "pve-a"
    assert journal.dropped == []  # the first, preferred-only round wrote and dropped nothing
    assert run(cluster())["not_examined"] == []  # no prefer: every node is examined


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


# -- expected guests and placement leases ---------------------------------------------------------------------------


def lease(vmid: int, node: str, memory_mib: int = 1024, disk_gib: int = 10) -> dict[str, t.Any]:
    return {"vmid": vmid, "node": node, "storage": "shared", "memoryMiB": memory_mib, "diskGiB": disk_gib}


def counts(result: dict[str, t.Any]) -> dict[str, tuple[int, int, int, int]]:
    return {
        c["node"]: (c["running_guests"], c["pending_guests"], c["leased_guests"], c["expected_guests"])
        for c in result["candidates"]
    }


def ledger(tmp_path: Path, clock: t.Callable[[], float] | None = None, **options: t.Any) -> PlacementLedger:
    return PlacementLedger(JournalStore(str(tmp_path / "journal")), clock=clock or time.time, **options)


def test_expected_guests_order_the_nodes_each_vmid_once() -> None:
    state = cluster()
    state["guests"] = [
        {"vmid": 100, "node": "pve-a", "status": "running", "type": "qemu"},
        {"vmid": 101, "node": "pve-b", "status": "running", "type": "qemu"},
    ]
    pending = [
        {
            "vmid": 101,
            "node": "pve-b",
            "storage": "shared",
            "memoryMiB": 0,
            "diskGiB": 0,
        },  # its guest runs: counted once
        {"vmid": 102, "node": "pve-a", "storage": "shared", "memoryMiB": 0, "diskGiB": 0},
    ]
    journal = Journal(pending, [lease(103, "pve-c"), lease(104, "pve-c"), lease(105, "pve-c")])
    result = run(state, journal=journal)
    assert counts(result) == {"pve-a": (1, 1, 0, 2), "pve-b": (1, 0, 0, 1), "pve-c": (0, 0, 3, 3)}
    assert result["order"] == ["pve-b", "pve-a", "pve-c"]  # running guests alone would have put pve-c first
    reasons = {c["node"]: c["reason"] for c in result["candidates"]}
    assert reasons["pve-b"] == (
        "chosen: fewest expected guests (1 expected: 1 running, 0 pending, 0 leased), then most free memory, then name"
    )
    assert reasons["pve-c"] == (
        "qualifies; more expected guests than the chosen node (3 expected: 0 running, 0 pending, 3 leased, chosen 1)"
    )
    state["nodes"]["pve-a"]["mem"] = 0  # more free memory than pve-b, but more expected guests: after it
    assert run(state, journal=Journal(pending))["order"] == ["pve-c", "pve-b", "pve-a"]


def test_leased_resources_are_subtracted() -> None:
    journal = Journal(leases=[lease(201, "pve-b", memory_mib=55 * 1024), lease(202, "pve-c", disk_gib=490)])
    result = run(cluster(), journal=journal)
    assert by_node(result)["pve-b"]["reasons"] == ["memory_short"]  # 56 GiB free, 55 GiB leased, 2 GiB asked
    assert by_node(result)["pve-c"]["reasons"] == ["storage_space_short"]
    assert by_node(result)["pve-b"]["free_memory_bytes"] == GIB and result["order"] == ["pve-a"]


def test_a_review_leases_its_choice_and_never_counts_its_own_lease() -> None:
    journal = Journal(leases=[lease(201, "pve-a", memory_mib=2048, disk_gib=20), lease(202, "pve-b")])
    result = run(cluster(), journal=journal, vmid=201)  # its own earlier lease (pve-a) is not counted
    assert result["node"] == "pve-a" and counts(result)["pve-a"] == (0, 0, 0, 0)
    assert counts(result)["pve-b"] == (0, 0, 1, 1)
    assert result["lease"] == {
        "vmid": 201,
        "node": "pve-a",
        "storage": "shared",
        "memory_mib": 2048,
        "disk_gib": 20,
        "created_at": "c",
        "expires_at": "e",
        "provider_scope_id": SCOPE,
    }
    assert result["lease_written"] is True and result["changed"] is False  # the same choice again
    other = run(cluster(), journal=journal, vmid=203)
    assert other["node"] == "pve-c" and journal.held[203]["node"] == "pve-c" and other["changed"] is True


def test_sequential_reviews_spread_and_without_vmid_pile_up(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    assert [run(cluster(), journal=book, vmid=vmid)["node"] for vmid in range(201, 207)] == [
        "pve-a",
        "pve-b",
        "pve-c",
        "pve-a",
        "pve-b",
        "pve-c",
    ]
    # repeated reviews of the same VMIDs replace their leases: the same nodes again, six leases in all
    assert [run(cluster(), journal=book, vmid=vmid)["node"] for vmid in range(201, 207)] == [
        "pve-a",
        "pve-b",
        "pve-c",
        "pve-a",
        "pve-b",
        "pve-c",
    ]
    assert len(list((tmp_path / "journal" / "placement-leases").iterdir())) == 6
    # without a vmid nothing is leased: every review sees the same state and chooses the same node
    fresh = ledger(tmp_path / "fresh")
    assert {run(cluster(), journal=fresh)["node"] for _review in range(6)} == {"pve-a"}
    assert not (tmp_path / "fresh" / "journal" / "placement-leases").exists()


def test_concurrent_reviews_serialize_on_the_journal_lock(tmp_path: Path) -> None:
    """Six threads review at once (separate ledgers and clients, one journal directory): the lock makes each count the
    leases of those before it, so they spread 2/2/2 whatever the order they get the lock in."""
    store_dir = tmp_path / "journal"
    JournalStore(str(store_dir))
    nodes: dict[int, str] = {}
    barrier = threading.Barrier(6)

    def review(vmid: int) -> None:
        parsed_catalog, parsed_definition = inputs()
        fake = client(cluster())
        book = PlacementLedger(JournalStore(str(store_dir)))
        barrier.wait()
        nodes[vmid] = place(fake, parsed_catalog, parsed_definition, journal=book, vmid=vmid)["node"]

    threads = [threading.Thread(target=review, args=(vmid,)) for vmid in range(201, 207)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(collections.Counter(nodes.values()).values()) == [2, 2, 2]


def test_expired_leases_are_not_counted(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    book = ledger(tmp_path, lambda: now[0], lease_seconds=60)
    assert run(cluster(), journal=book, vmid=201)["node"] == "pve-a"
    assert run(cluster(), journal=book, vmid=202)["node"] == "pve-b"
    now[0] += 61
    result = run(cluster(), journal=book, vmid=203)
    assert result["node"] == "pve-a" and all(c["leased_guests"] == 0 for c in result["candidates"])


def test_check_mode_writes_no_lease_and_says_so(tmp_path: Path) -> None:
    checking = ledger(tmp_path, check_mode=True)
    result = run(cluster(), journal=checking, vmid=201)
    assert result["lease_written"] is False and result["lease"]["node"] == "pve-a" and result["changed"] is True
    assert not (tmp_path / "journal" / "placement-leases").exists()
    assert run(cluster(), journal=checking, vmid=202)["node"] == "pve-a"  # nothing was held: the same node again


def test_released_with_the_vmid_lease_and_ended_by_a_review_where_nothing_qualifies(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    run(cluster(), journal=book, vmid=201)
    vmids = LeaseBook(book.store, SCOPE)
    with book.store.journal_lock():
        vmids.create(vmids.new(201, "owner", "vm", 3600))
    assert run(cluster(), journal=book, vmid=202)["node"] == "pve-b"  # 201's lease counts
    release(book.store, SCOPE, owner="owner", vmid=201)
    assert counts(run(cluster(), journal=book, vmid=203))["pve-a"] == (0, 0, 0, 0)  # released with the VMID lease
    state = cluster()
    for node in NODES:
        state["nodes"][node]["status"] = "offline"
    with pytest.raises(VmanywareError) as info:
        run(state, journal=book, vmid=202)
    assert info.value.code == "no_node_qualifies"
    with book.locked():
        assert [held["vmid"] for held in book.leases(SCOPE)] == [203]  # 202 holds no node any more


def test_prefer_is_kept_whatever_the_leases_say() -> None:
    journal = Journal(leases=[lease(202, "pve-c"), lease(203, "pve-c")])
    result = run(cluster(), journal=journal, vmid=201, prefer="pve-c")
    assert (result["node"], result["preferred_kept"]) == ("pve-c", True) and journal.held[201]["node"] == "pve-c"
    assert by_node(result)["pve-c"]["reason"].startswith("chosen: the node the confirmation names")
    assert result["not_examined"] == ["pve-a", "pve-b"]


def test_a_bad_vmid_is_refused_before_any_read() -> None:
    with pytest.raises(InputError) as info:
        run(cluster(), vmid=99)
    assert (info.value.code, info.value.path) == ("invalid_target_vmid", "vmid")
