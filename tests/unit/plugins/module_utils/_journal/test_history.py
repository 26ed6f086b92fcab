# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The history listing: newest first, filters, limit, and a summary cache that never shows stale rows."""

from __future__ import annotations

import json
import os
import typing as t
from pathlib import Path

import pytest
from hashed_plan import hashed_plan

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.history import (
    CACHE_NAME,
    Filters,
    list_operations,
    parse_filters,
    skipped_warning,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    MAX_DOCUMENT_BYTES,
    JournalError,
    JournalStore,
)

SCOPE = "pve:" + "c" * 64


def _create(store: JournalStore, vmid: int, name: str = "web") -> str:
    document, _created = store.create_operation(
        idempotency_key=None,
        provider_scope_id=SCOPE,
        definition={"name": name},
        mapping={"image": "debian"},
        plan=hashed_plan({"name": name}, {"image": "debian"}, vmid, definitionName=name),
        confirmation={"confirmed": True},
        target_node="pve",
        target_vmid=vmid,
        stage_kinds=["clone"],
    )
    return t.cast(str, document["operationId"])


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def test_newest_first_filters_and_limit(store: JournalStore) -> None:
    first = _create(store, 201)
    second = _create(store, 202, name="db")
    third = _create(store, 203)
    store.record_dispatch(second, "clone", {"method": "POST"})
    store.record_failed(second, "clone", "task_failed", "A Proxmox task ended with an error.")
    store.abandon_operation(third, "not needed")
    listed = list_operations(store)
    assert [row["operation_id"] for row in listed["operations"]] == [third, second, first] and listed["total"] == 3
    assert [row["status"] for row in listed["operations"]] == ["abandoned", "failed", "open"]
    assert listed["operations"][1]["failure_code"] == "task_failed" and listed["operations"][0]["released"] is True
    assert [
        row["operation_id"] for row in list_operations(store, parse_filters(status=["failed", "open"]))["operations"]
    ] == [second, first]
    assert [row["operation_id"] for row in list_operations(store, parse_filters(target_vmid=201))["operations"]] == [
        first
    ]
    assert [
        row["operation_id"] for row in list_operations(store, parse_filters(definition_name="db"))["operations"]
    ] == [second]
    limited = list_operations(store, Filters(), limit=1)
    assert [row["operation_id"] for row in limited["operations"]] == [third] and limited["total"] == 3
    created = store.load(second)["createdAt"]
    assert {row["operation_id"] for row in list_operations(store, parse_filters(since=created))["operations"]} == {
        second,
        third,
    }
    assert list_operations(store, parse_filters(since="2999-01-01"))["total"] == 0
    assert list_operations(store, parse_filters(since="2000-01-01T00:00:00Z"))["total"] == 3


@pytest.mark.parametrize("kwargs", [{"status": ["gone"]}, {"since": "yesterday"}, {"target_vmid": "201"}])
def test_bad_filters(kwargs: dict[str, t.Any]) -> None:
    with pytest.raises(VmanywareError) as info:
        parse_filters(**kwargs)
    assert info.value.code == "invalid_option"


def test_cache_follows_every_write_and_is_rebuilt_when_damaged(store: JournalStore) -> None:
    oid = _create(store, 201)
    assert list_operations(store)["operations"][0]["status"] == "open"
    cache = Path(store.journal_dir) / CACHE_NAME
    assert oid in json.loads(cache.read_text())["entries"] and cache.stat().st_mode & 0o777 == 0o600
    store.abandon_operation(oid, "why")  # an atomic replace: a new file key, so the cached row is not used
    assert list_operations(store)["operations"][0]["status"] == "abandoned"
    cache.write_text("not json")
    assert list_operations(store)["operations"][0]["status"] == "abandoned"
    os.unlink(store.operation_path(oid))
    assert list_operations(store)["total"] == 0 and json.loads(cache.read_text())["entries"] == {}


def _bad_files(store: JournalStore, tmp_path: Path) -> dict[str, str]:
    """One operation file per way of being bad, each under a valid operation id: ``{operation_id: what}``."""
    bad: dict[str, str] = {}
    ids = [_create(store, 300 + index, name="bad") for index in range(8)]
    paths = {oid: Path(store.operation_path(oid)) for oid in ids}
    good = paths[ids[0]].read_bytes()
    paths[ids[0]].write_text("{}")
    bad[ids[0]] = "not a document"
    paths[ids[1]].write_bytes(good[: len(good) // 2])
    bad[ids[1]] = "truncated"
    paths[ids[2]].write_bytes(b" " * (MAX_DOCUMENT_BYTES + 1))
    bad[ids[2]] = "oversized"
    target = tmp_path / "elsewhere.json"
    target.write_bytes(paths[ids[3]].read_bytes())
    paths[ids[3]].unlink()
    paths[ids[3]].symlink_to(target)
    bad[ids[3]] = "symlink"
    paths[ids[4]].unlink()
    os.mkfifo(paths[ids[4]])  # a FIFO would block a reader: it is never opened
    bad[ids[4]] = "fifo"
    paths[ids[5]].unlink()
    paths[ids[5]].mkdir()
    bad[ids[5]] = "directory"
    edited = json.loads(paths[ids[6]].read_text())
    edited["plan"]["planHash"] = "b" * 64
    paths[ids[6]].write_text(json.dumps(edited))
    bad[ids[6]] = "edited planHash"
    edited = json.loads(paths[ids[7]].read_text())
    edited["definition"]["name"] = "db"
    paths[ids[7]].write_text(json.dumps(edited))
    bad[ids[7]] = "edited definition"
    return bad


def test_bad_operation_files_are_skipped_and_reported_and_the_rest_listed(store: JournalStore, tmp_path: Path) -> None:
    """Issue 31: a corrupt, truncated, oversized, symlinked, non-regular or re-hashed file never fails the listing."""
    valid = [_create(store, 201), _create(store, 202, name="db")]
    list_operations(store)  # the valid rows are cached before the others go bad
    bad = _bad_files(store, tmp_path)
    before = {oid: os.lstat(store.operation_path(oid)) for oid in bad}
    for _round in range(2):  # the bad files are never cached: the second listing skips them again
        listed = list_operations(store)
        assert sorted(row["operation_id"] for row in listed["operations"]) == sorted(valid) and listed["total"] == 2
        assert listed["skipped_files"] == [
            {"file": oid + ".json", "operation_id": oid, "code": "journal_corrupt"} for oid in sorted(bad)
        ]
    assert (
        list_operations(store, parse_filters(definition_name="db"))["skipped_files"] == listed["skipped_files"]
    )  # whatever the filters
    warning = skipped_warning(listed["skipped_files"][0])
    assert sorted(bad)[0] + ".json" in warning and "journal_corrupt" in warning
    assert json.loads((Path(store.journal_dir) / CACHE_NAME).read_text())["entries"].keys() == set(valid)
    for oid in bad:  # left untouched; loading it by id still fails with the fixed code and message
        after = os.lstat(store.operation_path(oid))
        assert (after.st_ino, after.st_mtime_ns, after.st_mode) == (
            before[oid].st_ino,
            before[oid].st_mtime_ns,
            before[oid].st_mode,
        )
        with pytest.raises(VmanywareError) as info:
            store.load(oid)
        assert info.value.code == "journal_corrupt", bad[oid]
        assert (
            info.value.message
            == "The journal file of operation %s is not a valid operation document; it was left untouched." % oid
        )


def test_an_unreadable_operation_file_is_skipped_as_io_error(
    store: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    valid = _create(store, 201)
    unreadable = _create(store, 202)
    real_load = JournalStore.load

    def load(self: JournalStore, operation_id: str) -> dict[str, t.Any]:
        if (
            operation_id == unreadable
        ):  # what a read error gives (a mode-0 file stays readable to root, who runs the tests here)
            raise JournalError(
                "The journal file of an operation cannot be read.",
                code="io_error",
                details={"operationId": operation_id},
            )
        return real_load(self, operation_id)

    monkeypatch.setattr(JournalStore, "load", load)
    listed = list_operations(store)
    assert [row["operation_id"] for row in listed["operations"]] == [valid]
    assert listed["skipped_files"] == [{"file": unreadable + ".json", "operation_id": unreadable, "code": "io_error"}]
