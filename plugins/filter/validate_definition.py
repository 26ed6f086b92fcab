# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: validate_definition
short_description: Validate a v1 environment definition and return it normalized
version_added: 0.1.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Validates a v1 environment definition with the collection's strict rules (C(docs/formats.md)) and returns it with
    defaults applied (C(packages) V([]) and C(snapshotAfterProvisioning) V(false) when absent).
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
- name: Fail early on an invalid definition
  ansible.builtin.set_fact:
    definition: "{{ lookup('ansible.builtin.file', 'kernel-lab.yml') | vmanyware.proxmox.validate_definition }}"
"""

RETURN = r"""
_value:
  description: The validated definition with defaults applied, exactly what the definition hash is computed over.
  type: dict
"""

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import parse_definition
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import (
    validate_definition as _validate_definition,
)


def validate_definition(value: t.Any) -> dict[str, t.Any]:
    """Filter: YAML text or dict -> validated definition with defaults applied."""
    try:
        if isinstance(value, (str, bytes, t.Mapping)):
            return parse_definition(text=value)
        return _validate_definition(value)
    except VmanywareError as err:
        raise AnsibleFilterError("%s (error_code=%s)" % (err.message, err.code)) from None


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"validate_definition": validate_definition}
