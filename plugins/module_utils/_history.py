# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The history of operations in a journal: one summary per operation, newest first, with filters.

Listing must stay fast with thousands of operations (docs/benchmarks.md, "Listing operations"), so
the summaries are cached in ``history-cache.json`` in the journal directory, keyed by each
operation file's inode, size and modification time: journal writes replace files atomically (a new
inode each time), so an entry whose key still matches describes exactly the file on disk. Any other
file is loaded and validated as usual. The cache is only a cache: it is rebuilt when missing or not
understood, and a failure to write it never fails a listing.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import os
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._io import LocalFileError, atomic_write_json, read_json_strict
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    TIMESTAMP_FORMAT,
    JournalError,
    JournalStore,
    lifecycle_status,
    validate_operation_id,
)

CACHE_NAME = "history-cache.json"
CACHE_KIND = "vmanyware.dev/v1/HistoryCache"
CACHE_VERSION = 1
MAX_CACHE_BYTES = 256 * 1024 * 1024
STATUSES = ("open", "completed", "failed", "uncertain", "abandoned", "cleaned")
DEFAULT_LIMIT = 100


def summarize(document: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The listing row of an operation document (identities, status, times; nothing private)."""
    plan = document["plan"]
    failure = document["failure"]
    return {
        "operationId": document["operationId"],
        "status": lifecycle_status(document),
        "provisioningStatus": document["status"],
        "failureCode": failure["code"] if failure else None,
        "released": document["release"] is not None,
        "providerScopeId": document["providerScopeId"],
        "createdAt": document["createdAt"],
        "updatedAt": document["updatedAt"],
        "definitionName": plan["definitionName"] if isinstance(plan.get("definitionName"), str) else None,
        "targetNode": document["target"]["node"],
        "targetVmid": document["target"]["vmid"],
        "ipv4": (document.get("handoff") or {}).get("ipv4"),
    }


class Filters(t.NamedTuple):
    """What ``list_operations`` keeps: every given filter must match."""

    status: tuple[str, ...] = ()
    target_vmid: int | None = None
    definition_name: str | None = None
    since: str | None = None  # a journal timestamp (createdAt at or after)

    def keep(self, row: t.Mapping[str, t.Any]) -> bool:
        return ((not self.status or row["status"] in self.status)
                and (self.target_vmid is None or row["targetVmid"] == self.target_vmid)
                and (self.definition_name is None or row["definitionName"] == self.definition_name)
                and (self.since is None or row["createdAt"] >= self.since))


def parse_filters(status: t.Any = None, target_vmid: t.Any = None, definition_name: t.Any = None, since: t.Any = None) -> Filters:
    """Checked filters; ``since`` is ISO 8601 UTC (``2026-01-31``, ``2026-01-31T12:00:00Z`` or the journal's own format)."""
    statuses = [status] if isinstance(status, str) else list(status or [])
    for index, value in enumerate(statuses):
        if value not in STATUSES:
            raise InputError("status must name operation statuses: %s." % ", ".join(STATUSES), path="status[%d]" % index,
                             details={"rule": "enum"})
    if target_vmid is not None and (isinstance(target_vmid, bool) or not isinstance(target_vmid, int)):
        raise InputError("target_vmid must be an integer.", path="target_vmid", details={"rule": "integer"})
    return Filters(tuple(statuses), target_vmid, definition_name or None, _since(since) if since else None)


def _since(value: t.Any) -> str:
    text = str(value).strip()
    for form in (TIMESTAMP_FORMAT, "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"):
        try:
            parsed = datetime.datetime.strptime(text, form)
        except ValueError:
            continue
        return parsed.strftime(TIMESTAMP_FORMAT)
    raise InputError("since must be an ISO 8601 UTC date or time (2026-01-31 or 2026-01-31T12:00:00Z).", path="since",
                     details={"rule": "timestamp"})


def _file_key(entry: os.DirEntry) -> list[int] | None:
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return None
    return [info.st_ino, info.st_size, info.st_mtime_ns]


def _read_cache(path: str) -> dict[str, t.Any]:
    try:
        cache = read_json_strict(path, MAX_CACHE_BYTES, follow_symlinks=False)
    except LocalFileError:
        return {}
    if (not isinstance(cache, dict) or cache.get("kind") != CACHE_KIND or cache.get("version") != CACHE_VERSION
            or not isinstance(cache.get("entries"), dict)):
        return {}
    return t.cast(dict, cache["entries"])


def _cached_row(entry: t.Any, key: list[int]) -> dict[str, t.Any] | None:
    if isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("row"), dict):
        return t.cast(dict, entry["row"])
    return None


def summaries(store: JournalStore) -> list[dict[str, t.Any]]:
    """One row per operation in the journal (unordered); a corrupt operation file raises ``journal_corrupt``."""
    cache_path = os.path.join(store.journal_dir, CACHE_NAME)
    cached = _read_cache(cache_path)
    fresh: dict[str, t.Any] = {}
    rows: list[dict[str, t.Any]] = []
    changed = False
    try:
        with os.scandir(store.journal_dir) as entries:
            files = [entry for entry in entries if entry.name.startswith("op-") and entry.name.endswith(".json")]
    except OSError:
        raise JournalError("The journal directory cannot be read.", code="io_error") from None
    for entry in files:
        operation_id = entry.name[:-5]
        try:
            validate_operation_id(operation_id)
        except InputError:
            continue  # temp files of interrupted writes and anything else that is not an operation
        key = _file_key(entry)
        row = _cached_row(cached.get(operation_id), key) if key is not None else None
        if row is None:
            try:
                row = summarize(store.load(operation_id))
            except JournalError as err:
                if err.code == "not_found":  # removed while listing
                    continue
                raise
            changed = True
        if key is not None:
            fresh[operation_id] = {"key": key, "row": row}
        rows.append(row)
    if changed or len(fresh) != len(cached):
        try:
            atomic_write_json(cache_path, {"kind": CACHE_KIND, "version": CACHE_VERSION, "entries": fresh}, 0o600)
        except LocalFileError:
            pass  # only a cache: the next listing reads the documents again
    return rows


def list_operations(store: JournalStore, filters: Filters = Filters(), limit: int | None = DEFAULT_LIMIT) -> dict[str, t.Any]:
    """``{'operations': rows newest first (createdAt, then id), 'total': matches before the limit}``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError("limit must be a positive integer.", path="limit", details={"rule": "minimum"})
    rows = [row for row in summaries(store) if filters.keep(row)]
    rows.sort(key=lambda row: (row["createdAt"], row["operationId"]), reverse=True)
    return {"operations": rows[:limit] if limit is not None else rows, "total": len(rows)}

