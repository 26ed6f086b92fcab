# SPDX-License-Identifier: GPL-3.0-or-later
"""``_journal/placement_leases.py``: the lease files (written under the journal lock, replaced on a repeat, never counted
by their own VMID, ignored once expired, none in check mode), and their end at operation creation and with the VMID lease
(docs/operations.md, "Placement leases")."""

from __future__ import annotations

import json
import os
import stat
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore, target_key
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.placement_leases import (
    LEASE_KEYS,
    LEASE_KIND,
    PlacementLedger,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.vmid import LeaseBook, release
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)

REPO = Path(__file__).resolve().parents[5]
SCOPE = "pve:" + "f" * 64
OTHER_SCOPE = "pve:" + "0" * 64
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def choice(node: str = "pve-a", memory: int = 2048, disk: int = 20) -> dict[str, t.Any]:
    return {"node": node, "storage": "shared", "memoryMiB": memory, "diskGiB": disk}


def ledger(store: JournalStore, clock: Clock | None = None, **options: t.Any) -> PlacementLedger:
    return PlacementLedger(store, clock=clock or Clock(), **options)


def hold(book: PlacementLedger, vmid: int, scope: str = SCOPE, **fields: t.Any) -> dict[str, t.Any]:
    with book.locked():
        return book.hold(scope, vmid, choice(**fields))


def lease_file(store: JournalStore, vmid: int, scope: str = SCOPE) -> Path:
    return Path(store.journal_dir) / "placement-leases" / (target_key(scope, vmid) + ".json")


def _operation(store: JournalStore, vmid: int) -> dict[str, t.Any]:
    planned = build_plan(
        catalog_path=REPO / "examples/catalog.yml", definition_path=REPO / "examples/definition.yml", target_vmid=vmid
    )
    return create_operation(
        store,
        planned=planned,
        provider_scope_id=SCOPE,
        confirmation=expected_confirmation(planned.plan, SCOPE),
        idempotency_key=None,
        environ=ON,
    )


def test_a_lease_is_one_private_file_keyed_like_the_target_claim(store: JournalStore) -> None:
    clock = Clock()
    held = hold(ledger(store, clock, lease_seconds=600), 201)
    path = lease_file(store, 201)
    assert path == Path(store.layout.placement_lease_path(SCOPE, 201))
    stored = json.loads(path.read_text(encoding="utf-8"))
    assert tuple(stored) == LEASE_KEYS and stored["kind"] == LEASE_KIND
    assert stored == held["lease"] and held["written"] and held["changed"]
    assert (stored["vmid"], stored["node"], stored["storage"], stored["memoryMiB"], stored["diskGiB"]) == (
        201,
        "pve-a",
        "shared",
        2048,
        20,
    )
    assert stored["createdAt"] == "2027-01-15T08:00:00.000000Z" and stored["expiresAt"] == "2027-01-15T08:10:00.000000Z"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert [name for name in os.listdir(path.parent) if name.startswith(".")] == []  # no temp file left behind


def test_another_reviews_lease_counts_its_own_does_not(store: JournalStore) -> None:
    book = ledger(store)
    hold(book, 201, node="pve-a")
    hold(book, 202, node="pve-b")
    hold(book, 203, scope=OTHER_SCOPE, node="pve-c")  # another provider: never counted here
    with book.locked():
        assert [(lease["vmid"], lease["node"]) for lease in book.leases(SCOPE)] == [(201, "pve-a"), (202, "pve-b")]
        assert [lease["vmid"] for lease in book.leases(SCOPE, exclude_vmid=201)] == [202]


def test_a_repeated_review_replaces_its_lease(store: JournalStore) -> None:
    clock = Clock()
    book = ledger(store, clock)
    first = hold(book, 201, node="pve-a")
    clock.now += 60
    again = hold(book, 201, node="pve-a")  # the same choice: renewed, not a change
    assert again["changed"] is False and again["lease"]["expiresAt"] > first["lease"]["expiresAt"]
    moved = hold(book, 201, node="pve-b")
    assert moved["changed"] is True
    with book.locked():
        assert [(lease["vmid"], lease["node"]) for lease in book.leases(SCOPE)] == [(201, "pve-b")]
    assert len(os.listdir(lease_file(store, 201).parent)) == 1


def test_expired_leases_are_ignored_and_removed_outside_check_mode(store: JournalStore) -> None:
    clock = Clock()
    hold(ledger(store, clock, lease_seconds=60), 201)
    hold(ledger(store, clock, lease_seconds=600), 202)
    clock.now += 61
    checking = ledger(store, clock, check_mode=True)
    with checking.locked():
        assert [lease["vmid"] for lease in checking.leases(SCOPE)] == [202]
    assert lease_file(store, 201).exists()  # check mode removes nothing
    book = ledger(store, clock)
    with book.locked():
        assert [lease["vmid"] for lease in book.leases(SCOPE)] == [202]
    assert not lease_file(store, 201).exists() and lease_file(store, 202).exists()
    # an expired lease of the same VMID is no "same choice": the repeat is a change
    clock.now += 600
    assert hold(book, 202)["changed"] is True


def test_check_mode_writes_no_lease(store: JournalStore) -> None:
    held = hold(ledger(store, check_mode=True), 201)
    assert held["written"] is False and held["lease"]["node"] == "pve-a" and held["changed"] is True
    assert not lease_file(store, 201).parent.exists()
    hold(ledger(store), 201)
    checking = ledger(store, check_mode=True)
    with checking.locked():
        assert checking.drop(SCOPE, 201) is True  # says there is one, removes nothing
    assert lease_file(store, 201).exists()


def test_creating_the_operation_ends_the_lease(store: JournalStore) -> None:
    book = ledger(store)
    hold(book, 201)
    hold(book, 202)
    created = _operation(store, 201)
    assert created["created"] and not lease_file(store, 201).exists() and lease_file(store, 202).exists()
    with book.locked():
        assert [lease["vmid"] for lease in book.leases(SCOPE)] == [202]
        [pending] = book.pending(SCOPE)  # the operation now counts as pending instead
    assert (pending["vmid"], pending["node"]) == (201, "pve-test")
    # a crash between the claim and the removal: the replayed creation removes it
    hold(book, 201)
    replay = _operation(store, 201)
    assert not replay["created"] and not lease_file(store, 201).exists()


def test_releasing_the_vmid_lease_releases_the_placement_lease(store: JournalStore) -> None:
    clock = Clock()
    vmids = LeaseBook(store, SCOPE, clock)
    with store.journal_lock():
        for vmid in (201, 202):
            vmids.create(vmids.new(vmid, "owner-a", "vm", 3600))
    book = ledger(store, clock)
    for vmid in (201, 202, 203):
        hold(book, vmid)
    assert release(store, SCOPE, owner="owner-a", vmid=201, check_mode=True, clock=clock)["released"] == [201]
    assert lease_file(store, 201).exists()  # check mode releases nothing
    assert release(store, SCOPE, owner="owner-a", vmid=201, clock=clock)["released"] == [201]
    assert not lease_file(store, 201).exists() and lease_file(store, 202).exists()
    assert release(store, SCOPE, owner="owner-b", clock=clock)["released"] == []  # not its VMIDs: kept
    assert lease_file(store, 202).exists()
    assert release(store, SCOPE, owner="owner-a", clock=clock)["released"] == [202]
    assert not lease_file(store, 202).exists() and lease_file(store, 203).exists()  # 203 has no VMID lease of theirs


def test_an_unreadable_lease_is_not_counted_and_is_replaced(store: JournalStore) -> None:
    book = ledger(store)
    hold(book, 202)
    path = lease_file(store, 201)
    path.write_text('{"kind": "something else"}', encoding="utf-8")
    with book.locked():
        assert [lease["vmid"] for lease in book.leases(SCOPE)] == [202]
    assert path.exists()  # not counted, not removed by a listing
    assert hold(book, 201)["written"] and json.loads(path.read_text(encoding="utf-8"))["kind"] == LEASE_KIND


def test_bad_lease_seconds_and_vmid_are_refused(store: JournalStore) -> None:
    for seconds in (0, 604801, True):
        with pytest.raises(InputError) as info:
            ledger(store, lease_seconds=seconds)
        assert info.value.path == "lease_seconds"
    with pytest.raises(InputError) as info:
        hold(ledger(store), 99)
    assert info.value.code == "invalid_target_vmid"
