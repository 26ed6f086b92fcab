# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: validate_catalog
short_description: Validate a v1 template catalog and return it normalized
version_added: 0.1.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Validates a v1 template catalog with the collection's strict rules (C(docs/formats.md)) and returns it with every mapping
    in catalog field order.
  - An invalid catalog fails with the fixed code V(invalid_catalog), the field path and the rule; the value is never echoed.
options:
  _input:
    description: The catalog as YAML text (at most 64 KiB), or as an already parsed dictionary.
    type: raw
    required: true
requirements:
  - PyYAML (for YAML text input)
"""

EXAMPLES = r"""
- name: Read and check the catalog once
  ansible.builtin.set_fact:
    catalog: "{{ lookup('ansible.builtin.file', 'catalog.yml') | vmanyware.proxmox.validate_catalog }}"
"""

RETURN = r"""
_value:
  description: The validated catalog (C(apiVersion), C(kind), C(images)).
  type: dict
"""

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import (
    validate_catalog as _validate_catalog,
)


def validate_catalog(value: t.Any) -> dict[str, t.Any]:
    """Filter: YAML text or dict -> validated catalog."""
    try:
        if isinstance(value, (str, bytes, t.Mapping)):
            return parse_catalog(text=value)
        return _validate_catalog(value)
    except VmanywareError as err:
        raise AnsibleFilterError("%s (error_code=%s)" % (err.message, err.code)) from None


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"validate_catalog": validate_catalog}
