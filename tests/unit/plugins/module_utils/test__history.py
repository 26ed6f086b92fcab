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

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._history import CACHE_NAME, Filters, list_operations, parse_filters
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

SCOPE = "pve:" + "c" * 64


def _create(store: JournalStore, vmid: int, name: str = "web") -> str:
    document, _created = store.create_operation(
        idempotency_key=None, provider_scope_id=SCOPE, definition={"name": name}, mapping={"image": "debian"},
        plan={"definitionHash": "a" * 64, "planHash": "b" * 64, "definitionName": name}, confirmation={"confirmed": True},
        target_node="pve", target_vmid=vmid, stage_kinds=["clone"])
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
    assert [row["operation_id"] for row in list_operations(store, parse_filters(status=["failed", "open"]))["operations"]] == [second, first]
    assert [row["operation_id"] for row in list_operations(store, parse_filters(target_vmid=201))["operations"]] == [first]
    assert [row["operation_id"] for row in list_operations(store, parse_filters(definition_name="db"))["operations"]] == [second]
    limited = list_operations(store, Filters(), limit=1)
    assert [row["operation_id"] for row in limited["operations"]] == [third] and limited["total"] == 3
    created = store.load(second)["createdAt"]
    assert {row["operation_id"] for row in list_operations(store, parse_filters(since=created))["operations"]} == {second, third}
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


def test_a_corrupt_operation_is_reported_not_hidden(store: JournalStore) -> None:
    oid = _create(store, 201)
    Path(store.operation_path(oid)).write_text("{}")
    with pytest.raises(VmanywareError) as info:
        list_operations(store)
    assert info.value.code == "journal_corrupt"
