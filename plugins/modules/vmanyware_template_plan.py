#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_template_plan
short_description: Validate a template build document and plan the build offline
version_added: 0.2.0
description:
  - Reads a v1 C(TemplateBuild) document (a cloud image URL with its checksum, the node, storages, bridge, template VMID, machine
    settings, guest user, packages to bake in and the build address), validates it strictly and returns the build plan with its
    C(template_build_hash) and C(plan_hash).
  - Never contacts Proxmox VE and never changes anything.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.template_build_inputs
  - vmanyware.proxmox.attributes
attributes:
  check_mode:
    support: full
    details: The module only computes; check mode returns the same result.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - PyYAML
  - jsonschema
notes:
  - Contacts no Proxmox host and takes no connection options; connection options set by module defaults of the
    C(vmanyware.proxmox.proxmox) group are left out for this module.
"""

EXAMPLES = r"""
- name: Plan the template build
  vmanyware.proxmox.vmanyware_template_plan:
    template_build_path: files/template-build.yml
  register: template_plan

- name: Show the plan hash to review
  ansible.builtin.debug:
    msg: "{{ template_plan.plan_hash }}"
"""

RETURN = r"""
plan:
  description: The C(TemplateBuildPlan) v1 document (C(docs/templates.md)); it holds no secret.
  returned: success
  type: dict
plan_hash:
  description: SHA-256 of the compact JSON C([template_build_hash, templateVmid]).
  returned: success
  type: str
template_build_hash:
  description: SHA-256 of the RFC 8785 canonical JSON of the validated document with defaults applied.
  returned: success
  type: str
error_code:
  description: On failure, the fixed error code (for example V(invalid_template_build)).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    TEMPLATE_BUILD_CONSTRAINTS,
    template_build_argument_spec,
    template_plan_from_params,
)


def argument_spec() -> dict:
    spec = template_build_argument_spec()
    return spec


def action(params, check_mode, diff) -> dict:
    planned = template_plan_from_params(params)
    return {
        "changed": False,
        "plan": planned.plan,
        "plan_hash": planned.plan_hash,
        "template_build_hash": planned.template_build_hash,
    }


ENTRY = ModuleEntry(
    argument_spec=argument_spec, action=action, libraries=("PyYAML", "jsonschema"), **TEMPLATE_BUILD_CONSTRAINTS
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
