# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: definition_hash
short_description: The definitionHash of a v1 environment definition
version_added: 0.1.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Validates a v1 environment definition strictly and returns its C(definitionHash), the SHA-256 (lowercase hex) of the RFC 8785
    canonical JSON of the validated definition with defaults applied.
  - YAML comments, key order and formatting do not change the hash; any declared input does. See C(docs/formats.md) in the collection.
  - An invalid definition fails with the fixed code V(invalid_definition), the field path and the rule; the value is never echoed.
options:
  _input:
    description: The definition as YAML text (at most 64 KiB), or as an already parsed dictionary.
    type: raw
    required: true
requirements:
  - PyYAML (for YAML text input)
"""

EXAMPLES = r"""
- name: Hash a definition file
  ansible.builtin.debug:
    msg: "{{ lookup('ansible.builtin.file', 'kernel-lab.yml') | vmanyware.proxmox.definition_hash }}"
"""

RETURN = r"""
_value:
  description: The definition hash, 64 lowercase hexadecimal characters.
  type: str
"""

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import (
    parse_definition,
    validate_definition,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import (
    definition_hash as compute_definition_hash,
)


def definition_hash(value: t.Any) -> str:
    """Filter: YAML text or dict -> definitionHash."""
    try:
        if isinstance(value, (str, bytes, t.Mapping)):
            definition = parse_definition(text=value)
        else:
            definition = validate_definition(value)
        return compute_definition_hash(definition)
    except VmanywareError as err:
        raise AnsibleFilterError("%s (error_code=%s)" % (err.message, err.code)) from None


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"definition_hash": definition_hash}
