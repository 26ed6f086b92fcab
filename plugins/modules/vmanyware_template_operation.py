#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_template_operation
short_description: Create a confirmed template build operation in the local journal
version_added: 0.2.0
description:
  - Recomputes the template build plan from the same inputs as M(vmanyware.proxmox.vmanyware_template_plan), checks the
    provisioning gate and the operator's confirmation of exactly this plan, and records a new operation in the local journal.
    M(vmanyware.proxmox.vmanyware_template_stage) then runs the build's stages on that operation only.
  - Sends no API request. To bind the operation to the provider it reads the server certificate in one verified TLS handshake
    (no HTTP byte, no credential), or uses O(api_fingerprint) without connecting. TLS must be verified (by O(validate_certs) with a
    CA or by a fingerprint pin); otherwise it fails with C(tls_unverified).
  - Without a complete, matching O(confirmation) it fails with C(confirmation_required) (or C(plan_changed)); the failure carries the
    block to review in RV(error_details.expected_confirmation).
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.template_build_inputs
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.attributes
options:
  confirmation:
    description:
      - The confirmation of the plan, exactly as returned in RV(error_details.expected_confirmation) after review, with C(confirmed=true).
      - Fields C(templateBuildHash), C(planHash), C(providerScopeId), C(targetNode), C(templateVmid), C(storage), C(importStorage),
        C(bridge), C(imageUrl), C(confirmed).
    type: dict
  idempotency_key:
    description:
      - Identifies this creation request; only its SHA-256 is stored. Defaults to C(<planHash>@<providerScopeId>).
    type: str
  provisioning_enabled:
    description:
      - Opens the provisioning gate for this task when E(VMANYWARE_PROVISIONING_ENABLED) is unset (or empty); V(false) closes it.
      - An environment value of exactly V(false) always wins (the administrator's kill switch); when the option is unset the
        variable must be exactly V(true).
    type: bool
attributes:
  check_mode:
    support: full
    details: Checks the gate, the confirmation and the journal claims and returns the operation it would create; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The same inputs (and idempotency key) return the existing operation with C(changed=false).
requirements:
  - PyYAML
  - jsonschema
  - requests
"""

EXAMPLES = r"""
- name: Create the template build operation after review
  vmanyware.proxmox.vmanyware_template_operation:
    template_build_path: files/template-build.yml
    confirmation: "{{ reviewed_confirmation }}"
  register: template_operation
"""

RETURN = r"""
operation_id:
  description:
    - The id of the operation. In check mode, when it would be created, the id of the preview (RV(preview_document)), never
      recorded; stage tasks of the same play given this id in check mode preview against that document.
  returned: success
  type: str
created:
  description: Whether this run created the operation.
  returned: success
  type: bool
operation:
  description: The public view of the operation (stages, status, hashes; nothing secret).
  returned: success
  type: dict
preview_document:
  description:
    - Check mode only - the operation document an apply run would record.
    - Pass it to O(vmanyware.proxmox.vmanyware_template_stage#module:preview_operation) to preview every stage.
  returned: check mode, when the operation does not exist yet
  type: dict
ansible_facts:
  description: Facts set by the module.
  returned: success
  type: dict
  contains:
    vmanyware_operation:
      description: Same as RV(operation).
      type: dict
      returned: success
    vmanyware_preview_operation:
      description: Same as RV(preview_document) (V(null) when there is none); check-mode stage tasks read it.
      type: dict
      returned: success
error_code:
  description: On failure, the fixed error code (for example V(confirmation_required), V(plan_changed), V(provisioning_disabled), V(conflicting_operation)).
  returned: failure
  type: str
error_details:
  description: Safe details of a failure.
  returned: failure
  type: dict
  contains:
    expected_confirmation:
      description: The confirmation block of the freshly computed plan (hashes, names, ids; nothing secret).
      type: dict
      returned: with confirmation_required and plan_changed
    fields:
      description: The confirmation fields that differ.
      type: list
      elements: str
      returned: with plan_changed
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    connection_argument_spec,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import OperationInputs
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import (
    journal_argument_spec,
    open_store,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    TEMPLATE_BUILD_CONSTRAINTS,
    template_build_argument_spec,
    template_plan_from_params,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import run_template_operation


def argument_spec() -> dict:
    spec = template_build_argument_spec()
    spec.update(connection_argument_spec())
    spec.update(journal_argument_spec())
    spec["confirmation"] = {"type": "dict"}
    spec["idempotency_key"] = {"type": "str", "no_log": False}
    spec["provisioning_enabled"] = {"type": "bool"}
    return spec


def action(params, check_mode, diff) -> dict:
    inputs = OperationInputs(
        store=lambda: open_store(params["journal_dir"]),
        planned=lambda: template_plan_from_params(params),
        connection=lambda: connection_settings(params),
    )
    return run_template_operation(
        inputs,
        confirmation=params["confirmation"],
        idempotency_key=params["idempotency_key"],
        provisioning_option=params["provisioning_enabled"],
        environ=os.environ,
        check_mode=check_mode,
    )


ENTRY = ModuleEntry(
    argument_spec=argument_spec,
    action=action,
    libraries=("PyYAML", "jsonschema", "requests"),
    **TEMPLATE_BUILD_CONSTRAINTS,
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
