# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The history of operations in a journal: one summary per operation, newest first, with filters.

Listing must stay fast with thousands of operations (docs/benchmarks.md, "Listing operations"), so
the summaries are cached in ``history-cache.json`` in the journal directory, keyed by each
operation file's inode, size and modification time: journal writes replace files atomically (a new
inode each time), so an entry whose key still matches describes exactly the file on disk. Any other
file is loaded and validated as usual (its recorded hashes too). The cache is only a cache: it is rebuilt when missing
or not understood, and a failure to write it never fails a listing.

One bad operation file (corrupt, truncated, oversized, a symbolic link, not a regular file, unreadable, hashes that are
not those of its snapshots) never fails the listing: it is left untouched, skipped and reported (``skipped_files``: its file
name and the code, ``journal_corrupt`` or ``io_error``; ``skipped_warning`` the operator's line), and every valid
operation is listed. Loading that operation by id still fails with its code (``JournalStore.load``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import json
import os
import stat
import typing as t

from .._core.errors import InputError
from .._core.files import LocalFileError, atomic_write_json
from . import TIMESTAMP_FORMAT, JournalError, JournalStore, lifecycle_status

CACHE_NAME = "history-cache.json"
CACHE_KIND = "vmanyware.dev/v1/HistoryCache"
CACHE_VERSION = 2  # 2: rows are cached only for files whose recorded hashes were checked
MAX_CACHE_BYTES = 256 * 1024 * 1024
STATUSES = ("open", "completed", "failed", "uncertain", "abandoned", "cleaned")
DEFAULT_LIMIT = 100


# The listing row, stored in the cache as a list in this order (compact: the cache of 10,000 operations parses fast).
# Keys in snake_case, as every module return key (the journal documents keep their camelCase).
ROW_KEYS = (
    "operation_id",
    "status",
    "provisioning_status",
    "failure_code",
    "released",
    "provider_scope_id",
    "created_at",
    "updated_at",
    "definition_name",
    "target_node",
    "target_vmid",
    "ipv4",
)
_STATUS, _CREATED, _NAME, _VMID = (
    ROW_KEYS.index(key) for key in ("status", "created_at", "definition_name", "target_vmid")
)


def summarize(document: t.Mapping[str, t.Any]) -> list[t.Any]:
    """The listing row of an operation document in ``ROW_KEYS`` order (identities, status, times; nothing private)."""
    plan = document["plan"]
    failure = document["failure"]
    name = plan.get("definitionName")
    return [
        document["operationId"],
        lifecycle_status(document),
        document["status"],
        failure["code"] if failure else None,
        document["release"] is not None,
        document["providerScopeId"],
        document["createdAt"],
        document["updatedAt"],
        name if isinstance(name, str) else None,
        document["target"]["node"],
        document["target"]["vmid"],
        (document.get("handoff") or {}).get("ipv4"),
    ]


class Filters(t.NamedTuple):
    """What ``list_operations`` keeps: every given filter must match."""

    status: tuple[str, ...] = ()
    target_vmid: int | None = None
    definition_name: str | None = None
    since: str | None = None  # a journal timestamp (createdAt at or after)

    def keep(self, row: t.Sequence[t.Any]) -> bool:
        return (
            (not self.status or row[_STATUS] in self.status)
            and (self.target_vmid is None or row[_VMID] == self.target_vmid)
            and (self.definition_name is None or row[_NAME] == self.definition_name)
            and (self.since is None or row[_CREATED] >= self.since)
        )


def parse_filters(
    status: t.Any = None, target_vmid: t.Any = None, definition_name: t.Any = None, since: t.Any = None
) -> Filters:
    """Checked filters; ``since`` is ISO 8601 UTC (``2026-01-31``, ``2026-01-31T12:00:00Z`` or the journal's own format)."""
    statuses = [status] if isinstance(status, str) else list(status or [])
    for index, value in enumerate(statuses):
        if value not in STATUSES:
            raise InputError(
                "status must name operation statuses: %s." % ", ".join(STATUSES),
                path="status[%d]" % index,
                details={"rule": "enum"},
            )
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
    raise InputError(
        "since must be an ISO 8601 UTC date or time (2026-01-31 or 2026-01-31T12:00:00Z).",
        path="since",
        details={"rule": "timestamp"},
    )


def _read_cache(path: str) -> dict[str, t.Any]:
    """``{operationId: [inode, size, mtime_ns, *row]}``, or ``{}`` when the cache is missing or not understood."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CACHE_BYTES + 1)
        cache = json.loads(data) if len(data) <= MAX_CACHE_BYTES else None
    except (OSError, ValueError):
        return {}
    if (
        not isinstance(cache, dict)
        or cache.get("kind") != CACHE_KIND
        or cache.get("version") != CACHE_VERSION
        or not isinstance(cache.get("entries"), dict)
    ):
        return {}
    return t.cast("dict[str, t.Any]", cache["entries"])


def skipped_warning(entry: t.Mapping[str, t.Any]) -> str:
    """The warning shown for an operation file a listing skipped (fixed text: the file name and the code, no content)."""
    return (
        "vmanyware journal: %s was skipped (%s): it is not a valid, readable operation document and was left untouched; "
        "the other operations are listed." % (entry["file"], entry["code"])
    )


def summaries(store: JournalStore) -> tuple[list[list[t.Any]], list[dict[str, str]]]:
    """``(rows, skipped)``: one row (``ROW_KEYS`` order) per valid operation in the journal, unordered, and one entry
    ``{file, operation_id, code}`` per operation file that could not be loaded (sorted by file name)."""
    cache_path = os.path.join(store.journal_dir, CACHE_NAME)
    cached = _read_cache(cache_path)
    fresh: dict[str, list[t.Any]] = {}
    skipped: list[dict[str, str]] = []
    changed = False
    for operation_id in store.list_operations():
        try:
            info = os.stat(store.operation_path(operation_id), follow_symlinks=False)
        except OSError:
            continue  # removed while listing
        if not stat.S_ISREG(info.st_mode):  # a symbolic link, a directory, a FIFO...: never opened
            skipped.append({"file": operation_id + ".json", "operation_id": operation_id, "code": "journal_corrupt"})
            continue
        key = [info.st_ino, info.st_size, info.st_mtime_ns]
        entry = cached.get(operation_id)
        if not (isinstance(entry, list) and entry[:3] == key and len(entry) == 3 + len(ROW_KEYS)):
            try:
                entry = key + summarize(store.load(operation_id))
            except JournalError as err:
                if err.code == "not_found":  # removed while listing
                    continue
                skipped.append(
                    {
                        "file": operation_id + ".json",
                        "operation_id": operation_id,
                        "code": err.code if err.code == "io_error" else "journal_corrupt",
                    }
                )
                continue
            changed = True
        fresh[operation_id] = entry
    if changed or len(fresh) != len(cached):
        try:
            atomic_write_json(cache_path, {"kind": CACHE_KIND, "version": CACHE_VERSION, "entries": fresh}, 0o600)
        except LocalFileError:
            pass  # only a cache: the next listing reads the documents again
    return [entry[3:] for entry in fresh.values()], skipped


def list_operations(
    store: JournalStore, filters: Filters = Filters(), limit: int | None = DEFAULT_LIMIT
) -> dict[str, t.Any]:
    """``{'operations': rows newest first (created_at, then id), 'total': matches before the limit,
    'skipped_files': bad files}`` (not ``skipped``: Ansible reads a result's ``skipped`` as a skipped task).

    ``skipped_files`` (``summaries``) lists every operation file that could not be loaded, whatever the filters (its status is
    unknown); the listing of the others is complete.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError("limit must be a positive integer.", path="limit", details={"rule": "minimum"})
    all_rows, skipped = summaries(store)
    rows = [row for row in all_rows if filters.keep(row)]
    rows.sort(key=lambda row: (row[_CREATED], row[0]), reverse=True)
    shown = rows[:limit] if limit is not None else rows
    return {"operations": [dict(zip(ROW_KEYS, row)) for row in shown], "total": len(rows), "skipped_files": skipped}
