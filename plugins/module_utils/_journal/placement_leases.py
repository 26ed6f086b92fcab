# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Placement leases: the node placement chose for a reviewed plan, held in the journal by the plan's target VMID until
its operation is created (docs/operations.md, "Placement leases").

Reviews run before anything is confirmed, so Proxmox's reads and the journal's pending operations look the same to N
reviews at once, and the rule would send all of them to one node. A review that knows its target VMID therefore writes
a lease (``placement-leases/<target key>.json``: the chosen node, its storage, the memory and disk counted, created and
expiry times) in the same journal-locked section in which it reads the other leases and decides: two reviews serialize
on the lock, and the later one counts the earlier one's lease like a guest that is about to exist.

A repeated review of the same VMID replaces its lease and never counts itself. A lease ends when the operation for its
VMID is created (``JournalStore._supersede_lease``, in the locked step that writes the target claim: the operation then
counts as pending), when it expires (``lease_seconds``; the roles pass their VMID lease time), or when the VMID lease of
that VMID is released (``vmid.release``). Check mode writes and removes nothing. A lease file that cannot be read is
not counted (placement does not stop on it) and is replaced by the next review of its VMID.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import os
import time
import typing as t

from .._core.files import LocalFileError, atomic_write_json, remove_file_durable
from . import JournalError, JournalStore, epoch_seconds
from .pending import pending_operations
from .vmid import DEFAULT_LEASE_SECONDS, check_lease_seconds, check_vmid, lease_paths, lease_timestamp, read_lease

LEASE_KIND = "vmanyware.dev/v1/PlacementLease"
LEASE_KEYS = ("kind", "providerScopeId", "vmid", "node", "storage", "memoryMiB", "diskGiB", "createdAt", "expiresAt")
# What a lease says about the guest it stands for; a repeat with the same values changes nothing but the times.
CHOICE_KEYS = ("node", "storage", "memoryMiB", "diskGiB")

__all__ = ["DEFAULT_LEASE_SECONDS", "LEASE_KIND", "LEASE_KEYS", "PlacementLedger"]


def _is_count(value: t.Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _valid(lease: t.Mapping[str, t.Any]) -> bool:
    return (
        isinstance(lease["providerScopeId"], str)
        and isinstance(lease["vmid"], int)
        and not isinstance(lease["vmid"], bool)
        and isinstance(lease["node"], str)
        and (lease["storage"] is None or isinstance(lease["storage"], str))
        and _is_count(lease["memoryMiB"])
        and _is_count(lease["diskGiB"])
    )


def _corrupt(path: str) -> JournalError:
    return JournalError(
        "A placement lease file is not valid.", code="journal_corrupt", details={"lease": os.path.basename(path)}
    )


class PlacementLedger:
    """What placement reads and writes in one journal directory (``_core.protocols.PlacementJournal``): the pending
    operations and the placement leases, under the journal lock.

    ``lease_seconds``: how long a lease written now lives; ``check_mode``: read only, nothing is written or removed.
    """

    def __init__(
        self,
        store: JournalStore,
        *,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        check_mode: bool = False,
        clock: t.Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.lease_seconds = check_lease_seconds(lease_seconds)
        self.check_mode = check_mode
        self.clock = clock
        self.known: dict[str, dict[str, dict[str, t.Any] | None]] = {}  # per scope: the operations read so far

    @property
    def directory(self) -> str:
        return self.store.layout.placement_leases_dir

    def locked(self) -> t.ContextManager[None]:
        """The journal-wide lock: reviews, VMID reservations and operation creations serialize on it."""
        return self.store.journal_lock()

    def pending(self, scope: str) -> list[dict[str, t.Any]]:
        """The confirmed, unfinished operations of ``scope`` (``_journal/pending.py``). A later call of the same ledger
        loads only the operation files that appeared since the first: placement reads the whole journal before it
        takes the lock, and under it only what was created meanwhile."""
        return pending_operations(self.store, scope, self.known.setdefault(scope, {}))

    # -- the lease files ----------------------------------------------------------------------------------------------
    def path(self, scope: str, vmid: int) -> str:
        return self.store.layout.placement_lease_path(scope, vmid)

    def read_file(self, path: str) -> dict[str, t.Any] | None:
        """The lease in ``path``: ``None`` when there is none, ``journal_corrupt`` when it is not a valid lease."""
        return read_lease(path, kind=LEASE_KIND, keys=LEASE_KEYS, valid=_valid, corrupt=_corrupt)

    def live(self, lease: t.Mapping[str, t.Any]) -> bool:
        return epoch_seconds(lease["expiresAt"]) > self.clock()

    def all(self, scope: str) -> list[dict[str, t.Any]]:
        """Every readable lease of ``scope``, expired ones too, lowest VMID first (unreadable files are skipped)."""
        found = []
        for path in lease_paths(self.directory):
            try:
                lease = self.read_file(path)
            except JournalError:
                continue  # not counted, and replaced by the next review of its VMID
            if lease is not None and lease["providerScopeId"] == scope:
                found.append(lease)
        return sorted(found, key=lambda item: item["vmid"])

    def leases(self, scope: str, *, exclude_vmid: int | None = None) -> list[dict[str, t.Any]]:
        """The live leases of ``scope`` except ``exclude_vmid``'s (a review never counts its own); outside check mode,
        expired leases are removed on the way (the caller holds the journal lock)."""
        found = []
        for lease in self.all(scope):
            if not self.live(lease):
                if not self.check_mode:
                    self._remove(self.path(scope, lease["vmid"]))
                continue
            if lease["vmid"] != exclude_vmid:
                found.append(lease)
        return found

    def hold(self, scope: str, vmid: int, choice: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        """Write (replace) the lease of ``vmid`` for ``choice`` (``node``, ``storage``, ``memoryMiB``, ``diskGiB``);
        the caller holds the journal lock. Returns ``lease`` (the lease written, or in check mode the one that would
        be), ``written`` and ``changed`` (no live lease of ``vmid`` said the same before; a repeat only renews it)."""
        check_vmid(vmid)
        path = self.path(scope, vmid)
        try:
            before = self.read_file(path)
        except JournalError:
            before = None
        now = self.clock()
        lease = {
            "kind": LEASE_KIND,
            "providerScopeId": scope,
            "vmid": vmid,
            **{key: choice[key] for key in CHOICE_KEYS},
            "createdAt": lease_timestamp(now),
            "expiresAt": lease_timestamp(now + self.lease_seconds),
        }
        same = before is not None and self.live(before) and all(before[k] == lease[k] for k in CHOICE_KEYS)
        if not self.check_mode:
            try:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
                atomic_write_json(path, lease, 0o600)
            except (OSError, LocalFileError):
                raise JournalError("A placement lease file cannot be written.", code="io_error") from None
        return {"lease": lease, "written": not self.check_mode, "changed": not same}

    def drop(self, scope: str, vmid: int) -> bool:
        """Remove the lease of ``vmid`` (the caller holds the journal lock); check mode removes nothing. Whether there
        was one to remove."""
        if self.check_mode:
            return os.path.lexists(self.path(scope, vmid))
        return self.store.drop_placement_lease(scope, vmid)

    def _remove(self, path: str) -> None:
        try:
            remove_file_durable(path)
        except LocalFileError:
            raise JournalError("A placement lease file cannot be removed.", code="io_error") from None
