# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: plan_hash
short_description: The planHash of a definition hash, a catalog mapping and a target VMID
version_added: 0.1.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Returns the C(planHash), the SHA-256 (lowercase hex) of the compact JSON array C([definitionHash, mapping, targetVmid]) with
    the mapping in catalog field order (C(docs/formats.md) in the collection).
  - The mapping is validated like a catalog entry (code V(invalid_catalog)); the VMID must be 100-999999999 and differ from the
    mapping's template VMID (code V(invalid_target_vmid)); the definition hash must be 64 lowercase hex characters (code V(invalid_plan)).
positional: mapping, target_vmid
options:
  _input:
    description: The definition hash (for example from the P(vmanyware.proxmox.definition_hash#filter) filter).
    type: str
    required: true
  mapping:
    description: The selected catalog mapping (one entry of the catalog's C(images)).
    type: dict
    required: true
  target_vmid:
    description: The target VMID.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Recompute the plan hash of a reviewed plan
  ansible.builtin.debug:
    msg: "{{ planned.definition_hash | vmanyware.proxmox.plan_hash(planned.plan.source, 201) }}"
"""

RETURN = r"""
_value:
  description: The plan hash, 64 lowercase hexadecimal characters.
  type: str
"""

import re
import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import normalize_mapping
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import plan_hash as compute_plan_hash
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import check_target_vmid


def plan_hash(definition_hash: t.Any, mapping: t.Any, target_vmid: t.Any) -> str:
    """Filter: (definitionHash, mapping, VMID) -> planHash."""
    try:
        if not isinstance(definition_hash, str) or re.fullmatch(r"[0-9a-f]{64}", definition_hash) is None:
            raise InputError(
                "The definition hash is not 64 lowercase hexadecimal characters.",
                code="invalid_plan",
                path="definition_hash",
                details={"rule": "pattern"},
            )
        normalized = normalize_mapping(dict(mapping) if isinstance(mapping, t.Mapping) else mapping)
        vmid = check_target_vmid(target_vmid, normalized["templateVmid"])
        return compute_plan_hash(str(definition_hash), normalized, vmid)
    except VmanywareError as err:
        raise AnsibleFilterError("%s (error_code=%s)" % (err.message, err.code)) from None


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"plan_hash": plan_hash}
