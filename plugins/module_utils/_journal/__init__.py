# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The durable per-operation journal (docs/journal.md).

One JSON file per operation records what was decided (immutable snapshots of definition,
mapping, plan, confirmation, target) and, stage by stage, what was sent and what came back.
A stage is marked ``dispatching`` durably *before* its request is sent, so a lost reply can
never turn into a second VM: the next run finds ``submissionStarted: true`` and reconciles
instead of re-sending.

Guarantees:
- every write is atomic and durable (``_core.files.atomic_write_json``); every mutation takes the
  operation's lock, re-reads the file, checks the expected state (compare-and-set) and writes;
- the whole document is validated on every load and before every write; a file that does not
  validate raises ``journal_corrupt`` and is never repaired, rewritten or removed;
- a target (provider scope + VMID) and an idempotency key are each held by at most one
  operation (``targets/`` and ``keys/`` claim files created exclusively under the journal lock);
- no secret (``_redaction``), no idempotency key in clear and no guest output is stored.

The parts: ``document`` (the v1 document's rules, builders and readers), ``store`` (locks,
claims, atomic mutations: ``JournalStore``), ``stage_records`` (its stage and status transitions), ``builders``
(new and adopted operation documents) and ``layout`` (the directory: where it is and what
lives where). Callers import from here.

This is a private module_utils package: not a public API.
"""

from __future__ import annotations

from .document import (
    CLEANUP_STEPS,
    KIND,
    LIFECYCLE_KEY,
    OPERATION_STATUSES,
    RELEASE_REASONS,
    SCHEMA_VERSION,
    STAGE_STATUSES,
    TIMESTAMP_FORMAT,
    JournalError,
    cleanup_view,
    epoch_seconds,
    hash_idempotency_key,
    lifecycle_status,
    new_operation_id,
    operation_begun,
    require_cleanup_eligible,
    stage,
    utc_now,
    validate_document,
    validate_operation_id,
)
from .builders import ADOPTED_REQUEST, adopted_operation_document, new_operation_document
from .layout import ENV_JOURNAL_DIR, JournalLayout, resolve_journal_dir, target_key
from .store import CLAIM_KIND, MAX_CLAIM_BYTES, MAX_DOCUMENT_BYTES, JournalStore

__all__ = [
    "ADOPTED_REQUEST",
    "CLAIM_KIND",
    "CLEANUP_STEPS",
    "ENV_JOURNAL_DIR",
    "KIND",
    "LIFECYCLE_KEY",
    "MAX_CLAIM_BYTES",
    "MAX_DOCUMENT_BYTES",
    "OPERATION_STATUSES",
    "RELEASE_REASONS",
    "SCHEMA_VERSION",
    "STAGE_STATUSES",
    "TIMESTAMP_FORMAT",
    "JournalError",
    "JournalLayout",
    "JournalStore",
    "adopted_operation_document",
    "cleanup_view",
    "epoch_seconds",
    "hash_idempotency_key",
    "lifecycle_status",
    "new_operation_document",
    "new_operation_id",
    "operation_begun",
    "require_cleanup_eligible",
    "resolve_journal_dir",
    "stage",
    "target_key",
    "utc_now",
    "validate_document",
    "validate_operation_id",
]
