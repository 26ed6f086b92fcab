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


def pending_operations(store: JournalStore, scope: str) -> list[dict[str, t.Any]]:
    """``operationId``, ``vmid``, ``node``, ``storage``, ``memoryMiB``, ``diskGiB`` of each unfinished, unreleased
    operation of ``scope`` (an unreadable operation file is skipped: the history listing reports it, placement does not
    stop on it)."""
    found = []
    for operation_id in store.list_operations():
        try:
            document = store.load(operation_id)
        except JournalError:
            continue
        if document["providerScopeId"] != scope or document["release"] is not None:
            continue
        if lifecycle_status(document) not in PENDING_STATUSES:
            continue
        resources = document["definition"].get("resources") or {}
        found.append(
            {
                "operationId": operation_id,
                "vmid": document["target"]["vmid"],
                "node": document["target"]["node"],
                "storage": document["plan"].get("storage"),
                "memoryMiB": int(resources.get("memoryMiB", 0)),
                "diskGiB": int(resources.get("diskGiB", 0)),
            }
        )
    return found
