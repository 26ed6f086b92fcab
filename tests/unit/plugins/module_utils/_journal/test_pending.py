# SPDX-License-Identifier: GPL-3.0-or-later
"""``_journal/pending.py``: the confirmed, unfinished operations placement counts (docs/operations.md, "Placement")."""

from __future__ import annotations

import typing as t
from pathlib import Path

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.pending import pending_operations
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)

REPO = Path(__file__).resolve().parents[5]
SCOPE = "pve:" + "d" * 64
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


def _operation(store: JournalStore, vmid: int) -> str:
    planned = build_plan(
        catalog_path=REPO / "examples/catalog.yml", definition_path=REPO / "examples/definition.yml", target_vmid=vmid
    )
    created = create_operation(
        store,
        planned=planned,
        provider_scope_id=SCOPE,
        confirmation=expected_confirmation(planned.plan, SCOPE),
        idempotency_key=None,
        environ=ON,
    )
    return t.cast(str, created["operation_id"])


def test_pending_entries_name_their_vmid_node_and_resources(tmp_path: Path) -> None:
    store = JournalStore(str(tmp_path / "journal"))
    operation_id = _operation(store, 201)
    [entry] = pending_operations(store, SCOPE)
    assert entry["operationId"] == operation_id
    assert (entry["vmid"], entry["node"], entry["storage"]) == (201, "pve-test", "local-lvm")
    assert entry["memoryMiB"] > 0 and entry["diskGiB"] > 0
    assert pending_operations(store, "pve:" + "0" * 64) == []  # another provider scope


def test_released_operations_are_not_pending(tmp_path: Path) -> None:
    """An operation abandoned without a reason keeps its provisioning status (``open``): only its release says it is
    over, and placement must not count it."""
    store = JournalStore(str(tmp_path / "journal"))
    first = _operation(store, 201)
    second = _operation(store, 202)
    assert sorted(p["vmid"] for p in pending_operations(store, SCOPE)) == [201, 202]
    store.abandon_operation(first)
    assert store.load(first)["status"] == "open" and store.load(first)["release"] is not None
    assert [p["vmid"] for p in pending_operations(store, SCOPE)] == [202]
    store.abandon_operation(second, "not needed")
    assert pending_operations(store, SCOPE) == []


def test_known_operations_are_not_loaded_again(tmp_path: Path, monkeypatch: t.Any) -> None:
    """Placement reads the journal before the lock and, under it, only the operations created since."""
    store = JournalStore(str(tmp_path / "journal"))
    first = _operation(store, 201)
    known: dict[str, t.Any] = {}
    assert [p["vmid"] for p in pending_operations(store, SCOPE, known)] == [201]
    loaded: list[str] = []
    load = store.load
    monkeypatch.setattr(store, "load", lambda operation_id: loaded.append(operation_id) or load(operation_id))
    second = _operation(store, 202)
    loaded.clear()
    assert sorted(p["vmid"] for p in pending_operations(store, SCOPE, known)) == [201, 202]
    assert loaded == [second] and set(known) == {first, second}
    store.abandon_operation(first, "gone")  # a known entry may be stale: it still counts (conservative) ...
    assert sorted(p["vmid"] for p in pending_operations(store, SCOPE, known)) == [201, 202]
    assert [p["vmid"] for p in pending_operations(store, SCOPE)] == [202]  # ... until the next fresh read
