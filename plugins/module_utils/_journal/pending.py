# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Confirmed operations of the journal that have not finished: what placement subtracts from a node's free memory and
storage (docs/operations.md, "Placement").

An operation counts while its status is ``open`` or ``uncertain`` (confirmed, recorded, not completed, failed, abandoned
or cleaned) and its target is not released, in the given provider scope: its guest may not exist yet, or not use its
memory yet, so Proxmox's reads do not show what it will take. The release decides, not the status alone: an operation
abandoned without a reason keeps its provisioning status (``open`` say) and only its ``release`` says it is over. It
counts with the whole memory and disk its definition asks for (a conservative estimate: a guest already cloned is then
counted twice for its disk).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from . import JournalError, JournalStore, lifecycle_status

PENDING_STATUSES = ("open", "uncertain")


def pending_entry(store: JournalStore, operation_id: str, scope: str) -> dict[str, t.Any] | None:
    """``operationId``, ``vmid``, ``node``, ``storage``, ``memoryMiB``, ``diskGiB`` of the operation when it is an
    unfinished, unreleased operation of ``scope``; else ``None`` (an unreadable operation file too: the history listing
    reports it, placement does not stop on it)."""
    try:
        document = store.load(operation_id)
    except JournalError:
        return None
    if document["providerScopeId"] != scope or document["release"] is not None:
        return None
    if lifecycle_status(document) not in PENDING_STATUSES:
        return None
    resources = document["definition"].get("resources") or {}
    return {
        "operationId": operation_id,
        "vmid": document["target"]["vmid"],
        "node": document["target"]["node"],
        "storage": document["plan"].get("storage"),
        "memoryMiB": int(resources.get("memoryMiB", 0)),
        "diskGiB": int(resources.get("diskGiB", 0)),
    }


def pending_operations(
    store: JournalStore, scope: str, known: dict[str, dict[str, t.Any] | None] | None = None
) -> list[dict[str, t.Any]]:
    """The ``pending_entry`` of each unfinished, unreleased operation of ``scope``, in operation id order.

    ``known`` (updated in place): the entries of operations read before (``None``: not pending); only the other
    operation files are loaded. An operation's status only moves on (an operation never becomes pending again), so a
    known entry can only be stale by still counting an operation that finished meanwhile: conservative, as placement
    wants it. Placement reads the whole journal once before it takes the journal lock and, under the lock, only the
    operations created since (a directory scan), so the locked section stays short whatever the history.
    """
    seen = known if known is not None else {}
    found = []
    for operation_id in store.list_operations():
        if operation_id not in seen:
            seen[operation_id] = pending_entry(store, operation_id, scope)
        entry = seen[operation_id]
        if entry is not None:
            found.append(dict(entry))
    return found
