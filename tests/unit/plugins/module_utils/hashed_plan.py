# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plan snapshots whose hashes are those of their definition and mapping, as the journal checks on every load.

Tests that record hand-made operations (no catalog, no definition file) build their ``plan`` snapshot here,
with the collection's own hashing (``_hashing``), so the recorded hashes match the recorded snapshots.
"""

from __future__ import annotations

import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import definition_hash, plan_hash


def hashed_plan(
    definition: t.Mapping[str, t.Any], mapping: t.Mapping[str, t.Any], target_vmid: int, **plan: t.Any
) -> dict[str, t.Any]:
    """``plan`` with ``definitionHash`` and ``planHash`` computed over ``definition``, ``mapping`` and ``target_vmid``."""
    recorded = definition_hash(definition)
    return dict(plan, definitionHash=recorded, planHash=plan_hash(recorded, mapping, target_vmid))
