# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The journal store (docs/journal.md): locks, claims and atomic, validated mutations of operation documents.

Every write is atomic and durable (``_core.files.atomic_write_json``); every mutation takes the
operation's lock, re-reads the file, checks the expected state (compare-and-set), applies one
change and writes. A target (provider scope + VMID) and an idempotency key are each held by at
most one operation (claim files created exclusively under the journal-wide lock).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import contextlib
import os
import stat
import typing as t

from .._core.errors import InputError
from .._core.files import (
    LocalFileError,
    atomic_write_json,
    create_json_exclusive,
    read_json_strict,
    remove_file_durable,
)
from .._core.lock import DEFAULT_LOCK_TIMEOUT, FileLock
from .document import (
    _MAX_MESSAGE,
    _OPERATION_ID,
    CLEANUP_STEPS,
    LIFECYCLE_KEY,
    JournalError,
    _is_int,
    cleanup_view,
    hash_idempotency_key,
    journal_conflict,
    new_operation_id,
    recorded_hashes_match,
    require_cleanup_eligible,
    stage,
    utc_now,
    validate_document,
    validate_operation_id,
)
from .builders import (
    _check_key,
    _check_scope,
    _check_vmid,
    _new_stage,
    _operation_inputs,
    _same_inputs,
    adopted_operation_document,
    new_operation_document,
)
from .address_claims import AddressClaims
from .layout import JournalLayout
from .stage_records import StageRecords

CLAIM_KIND = "vmanyware.dev/v1/Claim"

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
MAX_CLAIM_BYTES = 4096


def _corrupt(operation_id: str) -> JournalError:
    return JournalError(
        "The journal file of operation %s is not a valid operation document; it was left untouched." % operation_id,
        code="journal_corrupt",
        details={"operationId": operation_id},
    )


def _is_regular_file(path: str) -> bool:
    """Whether ``path`` itself (not a link's target) is a regular file; ``True`` when it cannot be told (an I/O error stays one)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return True


# ---------------------------------------------------------------------------------------------
# the store


class JournalStore(StageRecords, AddressClaims):
    """The operations of a journal directory (``JournalLayout``: where each file lives).

    ``journal_dir`` is created (mode 0700, parents too) if missing; an existing directory must be
    owned by the current user and not writable by group or others (``configuration_error``).
    """

    def __init__(self, journal_dir: str, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        self.layout = JournalLayout(journal_dir)
        self.layout.create()
        self.journal_dir = self.layout.journal_dir
        self.leases_dir = self.layout.leases_dir
        self.lock_timeout = float(lock_timeout)

    stage = staticmethod(stage)

    # -- paths and locks ------------------------------------------------------------------------

    def operation_path(self, operation_id: str) -> str:
        return self.layout.operation_path(operation_id)

    def lease_path(self, scope: str, vmid: int) -> str:
        """The VMID lease file of a target (``_vmid``): same key as its claim, so creating the operation can supersede it."""
        return self.layout.lease_path(scope, vmid)

    @contextlib.contextmanager
    def _locked(self, path: str) -> t.Iterator[None]:
        lock = FileLock(path, timeout=self.lock_timeout)
        try:
            lock.acquire()
        except LocalFileError as err:
            raise JournalError(
                "A journal lock could not be acquired in time; another run may be using this operation.",
                code=err.code if err.code == "journal_locked" else "io_error",
            ) from None
        try:
            yield
        finally:
            lock.release()

    def _journal_lock(self) -> t.ContextManager[None]:
        return self._locked(self.layout.journal_lock_path)

    def journal_lock(self) -> t.ContextManager[None]:
        """The journal-wide lock that claims are made under (VMID leases are made under it too)."""
        return self._journal_lock()

    def _operation_lock(self, operation_id: str) -> t.ContextManager[None]:
        return self._locked(self.layout.operation_lock_path(operation_id))

    # -- reading --------------------------------------------------------------------------------

    def list_operations(self) -> list[str]:
        """Operation ids present in the journal, sorted; one directory scan, no file is parsed.

        Temp files of interrupted writes, lock files and claim files are not listed.
        """
        return self.layout.list_operations()

    def load(self, operation_id: str) -> dict[str, t.Any]:
        """The validated document of ``operation_id``: ``not_found``, ``journal_corrupt`` or ``io_error`` otherwise."""
        path = self.operation_path(operation_id)
        try:
            document = read_json_strict(path, MAX_DOCUMENT_BYTES, follow_symlinks=False)
        except LocalFileError as err:
            if err.code == "not_found":
                raise JournalError(
                    "The operation does not exist in the journal.",
                    code="not_found",
                    details={"operationId": operation_id},
                ) from None
            if err.code == "io_error" and _is_regular_file(
                path
            ):  # a socket or a device cannot be opened: not a regular file
                raise JournalError(
                    "The journal file of an operation cannot be read.",
                    code="io_error",
                    details={"operationId": operation_id},
                ) from None
            raise _corrupt(operation_id) from None
        try:
            validate_document(document, operation_id)
        except Exception:  # pylint: disable=broad-exception-caught  # any rule violation is corruption
            raise _corrupt(operation_id) from None
        if not recorded_hashes_match(document):
            raise _corrupt(operation_id)
        return t.cast("dict[str, t.Any]", document)

    def _read_claim(self, path: str) -> str | None:
        """The operation id a claim file points at, ``None`` if there is no claim."""
        try:
            claim = read_json_strict(path, MAX_CLAIM_BYTES, follow_symlinks=False)
        except LocalFileError as err:
            if err.code == "not_found":
                return None
            raise JournalError(
                "A journal claim file is not valid; it was left untouched.",
                code="journal_corrupt",
                details={"claim": os.path.basename(os.path.dirname(path))},
            ) from None
        if (
            not isinstance(claim, dict)
            or tuple(claim) != ("kind", "operationId")
            or claim["kind"] != CLAIM_KIND
            or not isinstance(claim["operationId"], str)
            or not _OPERATION_ID.match(claim["operationId"])
        ):
            raise JournalError(
                "A journal claim file is not valid; it was left untouched.",
                code="journal_corrupt",
                details={"claim": os.path.basename(os.path.dirname(path))},
            )
        return claim["operationId"]

    def _claim(self, path: str, operation_id: str) -> bool:
        return create_json_exclusive(path, {"kind": CLAIM_KIND, "operationId": operation_id})

    def _load_or_none(self, operation_id: str) -> dict[str, t.Any] | None:
        try:
            return self.load(operation_id)
        except JournalError as err:
            if err.code == "not_found":
                return None
            raise

    def target_holder(self, provider_scope_id: str, target_vmid: int) -> str | None:
        """The id of the operation that holds the target, or ``None``."""
        scope, vmid = _check_scope(provider_scope_id), _check_vmid(target_vmid)
        holder = self._read_claim(self.layout.target_path(scope, vmid))
        if holder is None:
            return None
        document = self._load_or_none(holder)
        return None if document is None or document["release"] is not None else holder

    def find_by_idempotency_key(self, idempotency_key: str) -> str | None:
        """The id of the operation created with this key, or ``None``."""
        holder = self._read_claim(self.layout.key_path(hash_idempotency_key(_check_key(idempotency_key))))
        return holder if holder is not None and self._load_or_none(holder) is not None else None

    # -- writing --------------------------------------------------------------------------------

    def _write(self, document: dict[str, t.Any], change: tuple[str, str]) -> None:
        """Validate and atomically replace the operation file. ``change`` names what the write records: the stage kind
        (or ``operation``/``cleanup``) and the status it records, named in the refusal of an invalid document."""
        try:
            validate_document(document, document.get("operationId"))
        except Exception:  # pylint: disable=broad-exception-caught
            raise JournalError(
                "Refusing to write an invalid operation document.",
                code="internal_error",
                details={"operationId": document.get("operationId"), "change": "%s:%s" % change},
            ) from None
        try:
            atomic_write_json(self.operation_path(document["operationId"]), document, 0o600)
        except LocalFileError:
            raise JournalError(
                "The journal file of an operation cannot be written.",
                code="io_error",
                details={"operationId": document["operationId"]},
            ) from None

    def create_operation(
        self,
        *,
        idempotency_key: str | None,
        provider_scope_id: str,
        definition: t.Mapping[str, t.Any],
        mapping: t.Mapping[str, t.Any],
        plan: t.Mapping[str, t.Any],
        confirmation: t.Mapping[str, t.Any],
        target_node: str,
        target_vmid: int,
        stage_kinds: list[str],
    ) -> tuple[dict[str, t.Any], bool]:
        """Create an operation and claim its target (and key); return ``(document, created)``.

        With an ``idempotency_key`` already used: identical inputs return the existing operation
        with ``created=False``; different inputs raise ``idempotency_key_conflict``. A target
        held by another unreleased operation raises ``conflicting_operation`` (its id in details).
        """
        key_hash, target, kinds, snapshots = _operation_inputs(
            idempotency_key,
            provider_scope_id,
            definition,
            mapping,
            plan,
            confirmation,
            target_node,
            target_vmid,
            stage_kinds,
        )
        target_path = self.layout.target_path(target["scope"], target["vmid"])

        with self._journal_lock():
            if key_hash is not None:
                existing = self._key_holder(key_hash)
                if existing is not None:
                    if not _same_inputs(existing, snapshots, target, kinds):
                        raise JournalError(
                            code="idempotency_key_conflict",
                            path="idempotency_key",
                            details={"operationId": existing["operationId"]},
                        )
                    self._complete_target_claim(existing, target_path)
                    return existing, False
            self._free_target(target_path)
            for path in self._address_claim_paths(target["scope"], snapshots["mapping"]):
                self._free_target(path, claim="address")
            operation_id = new_operation_id()
            while os.path.lexists(self.operation_path(operation_id)):  # pragma: no cover - 128 random bits
                operation_id = new_operation_id()
            document = new_operation_document(operation_id, key_hash, target, snapshots, kinds, utc_now())
            self._write_new(document, key_hash, target_path, "open")
            return document, True

    def adopt_operation(
        self,
        *,
        operation_id: str,
        idempotency_key: str | None,
        provider_scope_id: str,
        definition: t.Mapping[str, t.Any],
        mapping: t.Mapping[str, t.Any],
        plan: t.Mapping[str, t.Any],
        confirmation: t.Mapping[str, t.Any],
        target_node: str,
        target_vmid: int,
        stage_kinds: list[str],
        observed: list[t.Mapping[str, t.Any]],
    ) -> tuple[dict[str, t.Any], bool]:
        """Record an operation whose journal was lost, rebuilt from reads of Proxmox; return ``(document, adopted)``.

        ``operation_id`` is the id the VM's description names; ``observed`` has one entry per stage
        (``adopted_operation_document``). Same locks, claims and validation as ``create_operation``:
        under the journal lock, an operation file that already exists is returned unchanged
        (``adopted=False``, never overwritten; like an idempotent creation replay, a target claim
        that a crash cut short is completed when the target is the same); a key held by another operation raises
        ``idempotency_key_conflict``, a target held by another unreleased operation
        ``conflicting_operation``. Then the operation file, the key claim and the target claim are
        written in that order (each write records ``operation:adopted``).
        """
        validate_operation_id(operation_id)
        key_hash, target, kinds, snapshots = _operation_inputs(
            idempotency_key,
            provider_scope_id,
            definition,
            mapping,
            plan,
            confirmation,
            target_node,
            target_vmid,
            stage_kinds,
        )
        target_path = self.layout.target_path(target["scope"], target["vmid"])
        with self._journal_lock():
            existing = self._load_or_none(operation_id)
            if existing is not None:
                if existing["target"] == target:
                    self._complete_target_claim(existing, target_path)
                return existing, False
            if key_hash is not None:
                holder = self._key_holder(key_hash)
                if holder is not None:
                    raise JournalError(
                        code="idempotency_key_conflict",
                        path="idempotency_key",
                        details={"operationId": holder["operationId"]},
                    )
            self._free_target(target_path)
            document = adopted_operation_document(operation_id, key_hash, target, snapshots, kinds, observed, utc_now())
            self._write_new(document, key_hash, target_path, "adopted")
            return document, True

    def _key_holder(self, key_hash: str) -> dict[str, t.Any] | None:
        """The operation an idempotency key is bound to; a claim whose operation file is gone is stale and removed."""
        holder = self._read_claim(self.layout.key_path(key_hash))
        if holder is None:
            return None
        existing = self._load_or_none(holder)
        if existing is None:
            remove_file_durable(self.layout.key_path(key_hash))  # stale: its operation file is gone
        return existing

    def _free_target(self, target_path: str, claim: str = "target") -> None:
        """``conflicting_operation`` when another unreleased operation holds the target (or, ``claim="address"``, a
        static address of the plan); a stale claim is removed."""
        holder = self._read_claim(target_path)
        if holder is not None:
            held_by = self._load_or_none(holder)
            if held_by is not None and held_by["release"] is None:
                details = {"operationId": holder, **({"claim": claim} if claim != "target" else {})}
                raise JournalError(code="conflicting_operation", details=details)
            remove_file_durable(target_path)  # stale: released, or its operation file is gone

    def _write_new(self, document: dict[str, t.Any], key_hash: str | None, target_path: str, status: str) -> None:
        """Write a new operation file, then its key claim, then its target claim (under the journal lock).

        A crash in between leaves either an operation nobody refers to (nothing was dispatched), or
        a key claim whose retry completes the target claim (``_complete_target_claim``).
        """
        operation_id = document["operationId"]
        self._write(document, ("operation", status))
        if key_hash is not None and not self._claim(
            self.layout.key_path(key_hash), operation_id
        ):  # pragma: no cover - under lock
            raise journal_conflict(operation_id, "key_claim_exists")
        if not self._claim(target_path, operation_id):  # pragma: no cover - checked under the lock
            raise journal_conflict(operation_id, "target_claim_exists")
        self._supersede_lease(document["target"])
        self._claim_addresses(document)

    def _complete_target_claim(self, document: dict[str, t.Any], target_path: str) -> None:
        """Idempotent replay: make sure the operation still holds its target (a crash may have cut creation short)."""
        if document["release"] is not None:
            return
        holder = self._read_claim(target_path)
        if holder == document["operationId"]:
            self._supersede_lease(document["target"])  # a crash may have come between the claim and the lease's removal
            self._claim_addresses(document)
            return
        if holder is not None:
            other = self._load_or_none(holder)
            if other is not None and other["release"] is None:
                raise JournalError(code="conflicting_operation", details={"operationId": holder})
            remove_file_durable(target_path)
        self._claim(target_path, document["operationId"])
        self._supersede_lease(document["target"])
        self._claim_addresses(document)

    def _supersede_lease(self, target: t.Mapping[str, t.Any]) -> None:
        """The target's VMID lease (if any) has become this claim: remove it, so releasing the claim frees the VMID; the
        placement lease of the reviewed plan (if any) goes too: the operation now counts as pending on its node."""
        remove_file_durable(self.lease_path(target["scope"], target["vmid"]))
        self.drop_placement_lease(target["scope"], target["vmid"])

    def drop_placement_lease(self, scope: str, vmid: int) -> bool:
        """Remove the placement lease of ``vmid`` (``_journal/placement_leases.py``); the caller holds the journal lock.
        ``False`` when there was none."""
        try:
            return remove_file_durable(self.layout.placement_lease_path(scope, vmid))
        except LocalFileError:
            raise JournalError("A placement lease file cannot be removed.", code="io_error") from None

    def _mutate(
        self,
        operation_id: str,
        apply: t.Callable[[dict[str, t.Any]], tuple[str, str]],
        expected_revision: int | None,
    ) -> dict[str, t.Any]:
        """Lock, re-read, check, apply (which returns what the write records: the stage kind and its status), write."""
        validate_operation_id(operation_id)
        if expected_revision is not None and not _is_int(expected_revision):
            raise InputError(
                "expected_revision must be an integer.", path="expected_revision", details={"rule": "integer"}
            )
        with self._operation_lock(operation_id):
            document = self.load(operation_id)
            if expected_revision is not None and document["revision"] != expected_revision:
                raise journal_conflict(operation_id, "revision")
            if document["release"] is not None:
                raise journal_conflict(operation_id, "released")
            if (document.get(LIFECYCLE_KEY) or {}).get("cleanup") is not None:
                raise journal_conflict(operation_id, "cleanup")  # the guest is being removed: provisioning is over
            change = apply(document)
            document["revision"] += 1
            document["updatedAt"] = utc_now()
            self._write(document, change)
            return document

    def release_target(self, operation_id: str, reason: str, *, note: str | None = None) -> dict[str, t.Any]:
        """Release the operation's target (and end the operation's life in the journal).

        ``closed`` requires a ``completed`` operation; ``abandoned`` is the operator's explicit
        decision for any status (the VM, if any, is left alone), recorded with the operator's
        ``note`` (why) in ``lifecycle.abandonment``; ``cleaned`` is written by ``finish_cleanup``
        only. The document records the release first, then the claim file is removed; a crash in
        between leaves a claim that the next ``create_operation`` recognizes as released. Failures
        never release a target.
        """
        validate_operation_id(operation_id)
        if reason not in ("closed", "abandoned"):
            raise InputError("The release reason is not closed or abandoned.", path="reason", details={"rule": "enum"})
        if note is not None and (
            not isinstance(note, str) or not 0 < len(note.strip()) <= _MAX_MESSAGE or "\x00" in note
        ):
            raise InputError("The reason must be 1-1024 characters.", path="reason", details={"rule": "length"})
        with self._journal_lock():
            with self._operation_lock(operation_id):
                document = self.load(operation_id)
                if document["release"] is not None:
                    raise journal_conflict(operation_id, "released")
                if reason == "closed" and document["status"] != "completed":
                    raise journal_conflict(operation_id, "not_completed")
                if note is not None:
                    document.setdefault(LIFECYCLE_KEY, {"abandonment": None, "cleanup": None})
                    document[LIFECYCLE_KEY]["abandonment"] = {"at": utc_now(), "reason": note}
                return self._release(document, reason)

    def _release(self, document: dict[str, t.Any], reason: str) -> dict[str, t.Any]:
        """Record the release (under the journal and operation locks), then remove the target claim."""
        document["release"] = {"reason": reason, "releasedAt": utc_now()}
        document["revision"] += 1
        document["updatedAt"] = document["release"]["releasedAt"]
        self._write(document, ("operation", reason))
        target_path = self.layout.target_path(document["target"]["scope"], document["target"]["vmid"])
        if self._read_claim(target_path) == document["operationId"]:
            remove_file_durable(target_path)
        self._release_addresses(document)
        return document

    def close_operation(self, operation_id: str) -> dict[str, t.Any]:
        """Release the target of a completed operation."""
        return self.release_target(operation_id, "closed")

    def abandon_operation(self, operation_id: str, reason: str | None = None) -> dict[str, t.Any]:
        """Operator decision: release the target whatever the status (the VM is not touched); ``reason`` says why."""
        return self.release_target(operation_id, "abandoned", note=reason)

    # -- cleanup (vmanyware_cleanup) -----------------------------------------------------------------

    def begin_cleanup(self, operation_id: str, *, allow_completed: bool = False) -> dict[str, t.Any]:
        """Start the cleanup track of an eligible operation (``cleanup_not_eligible`` otherwise); idempotent.

        The track holds one pending step per ``CLEANUP_STEPS`` kind; ``cleanup_track`` drives it.
        """
        validate_operation_id(operation_id)
        with self._operation_lock(operation_id):
            document = self.load(operation_id)
            if (document.get(LIFECYCLE_KEY) or {}).get("cleanup") is not None:
                return document
            require_cleanup_eligible(document, allow_completed)
            now = utc_now()
            document.setdefault(LIFECYCLE_KEY, {"abandonment": None, "cleanup": None})
            document[LIFECYCLE_KEY]["cleanup"] = {
                "startedAt": now,
                "completedAt": None,
                "status": "open",
                "failure": None,
                "steps": [_new_stage(index, kind) for index, kind in enumerate(CLEANUP_STEPS, start=1)],
            }
            document["revision"] += 1
            document["updatedAt"] = now
            self._write(document, ("cleanup", "open"))
            return document

    def cleanup_track(self) -> JournalStore:
        """A store over the cleanup tracks: ``load`` returns ``cleanup_view`` and every stage record method
        (``record_dispatch`` ... ``update_operation_status``) writes the track, under the same lock and rules."""
        return _CleanupTrack(self)

    def finish_cleanup(self, operation_id: str) -> dict[str, t.Any]:
        """After a completed cleanup: release the target as ``cleaned`` unless it was released already; idempotent."""
        validate_operation_id(operation_id)
        with self._journal_lock():
            with self._operation_lock(operation_id):
                document = self.load(operation_id)
                cleanup = (document.get(LIFECYCLE_KEY) or {}).get("cleanup")
                if cleanup is None or cleanup["status"] != "completed":
                    raise journal_conflict(operation_id, "cleanup_not_completed")
                if document["release"] is not None:
                    return document
                return self._release(document, "cleaned")


class _CleanupTrack(JournalStore):
    """``JournalStore.cleanup_track``: the stage record methods, applied to ``lifecycle.cleanup``."""

    def __init__(self, store: JournalStore) -> None:  # pylint: disable=super-init-not-called  # shares the store's directory
        self.__dict__.update(store.__dict__)

    def load(self, operation_id: str) -> dict[str, t.Any]:
        document = JournalStore.load(self, operation_id)
        if (document.get(LIFECYCLE_KEY) or {}).get("cleanup") is None:
            raise JournalError(
                "The operation has no cleanup in progress.", code="not_found", details={"operationId": operation_id}
            )
        return cleanup_view(document)

    def _mutate(
        self, operation_id: str, apply: t.Callable[[dict[str, t.Any]], tuple[str, str]], expected_revision: int | None
    ) -> dict[str, t.Any]:
        validate_operation_id(operation_id)
        with self._operation_lock(operation_id):
            document = JournalStore.load(self, operation_id)
            if expected_revision is not None and document["revision"] != expected_revision:
                raise journal_conflict(operation_id, "revision")
            cleanup = (document.get(LIFECYCLE_KEY) or {}).get("cleanup")
            if cleanup is None:
                raise journal_conflict(operation_id, "no_cleanup")
            view = cleanup_view(document)
            change = apply(view)
            now = utc_now()
            cleanup.update(
                status=view["status"],
                failure=view["failure"],
                steps=view["stages"],
                completedAt=now if view["status"] == "completed" else None,
            )
            document["revision"] += 1
            document["updatedAt"] = now
            self._write(document, change)
            return cleanup_view(document)
