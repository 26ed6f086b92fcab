#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_operation
short_description: Create a confirmed provisioning operation in the local journal, adopt one whose journal was lost, or abandon one
version_added: 0.1.0
description:
  - Recomputes the plan from the same inputs as M(vmanyware.proxmox.vmanyware_plan), checks the gates and the operator's
    confirmation of exactly this plan, and records a new operation in the local journal. The stage modules
    (M(vmanyware.proxmox.vmanyware_clone), M(vmanyware.proxmox.vmanyware_resources), M(vmanyware.proxmox.vmanyware_disk), ...) then
    act only on that operation's recorded snapshots.
  - With O(state=present) it sends no API request. To bind the operation to the provider, it opens one TLS connection to O(api_host), verifies the
    certificate exactly as every API request would (O(api_fingerprint) pin, O(ca_path) or the system CAs), reads the certificate
    and closes the connection without sending any HTTP byte; with O(api_fingerprint) it does not connect at all.
  - Without a complete, matching O(confirmation) it fails with C(confirmation_required) (or C(plan_changed) when the confirmation
    names another plan, provider or target); the failure result carries the block to review and pass back in
    RV(error_details.expected_confirmation).
  - A review run (no complete O(confirmation)) gets that block whatever the gates say, so a read-only credential can review; its
    RV(error_details.provisioning_enabled) and RV(error_details.snapshots_enabled) say whether an apply run would find the gates
    open. Only an apply run (a complete O(confirmation)) needs E(VMANYWARE_PROVISIONING_ENABLED=true).
  - A target (provider and VMID) is held by at most one operation (C(conflicting_operation)); re-running with the same
    idempotency key and the same confirmation returns the existing operation with C(changed=false).
  - Gates, the confirmation block and idempotency are described in C(docs/operations.md) in the collection.
  - With O(state=adopt) it rebuilds the journal entry of an operation whose journal was lost (for example an AWX job in a fresh
    container), from GET requests only. It reads the target VM's binding description (operation id and both hashes, which must equal the
    recomputed plan's, else C(plan_changed)), its configuration, power state, pending changes and Cloud-Init dumps, its snapshot
    list and the node's task list. Each stage is recorded as completed (with the evidence the stage would record), pending, or
    uncertain (resolved by reads on the stage's next run). Nothing but GET requests is ever sent. See "Recovering a lost journal"
    in C(docs/operations.md).
  - With O(state=abandoned) it records the operator's decision to give up an operation (O(operation_id)), with when and why (O(reason)).
    It releases the operation's target claim, so a new operation may take the VMID, and sends nothing to Proxmox; the guest, if any,
    is left alone (M(vmanyware.proxmox.vmanyware_cleanup) removes it). The operation stays readable; no stage runs on it afterwards
    (C(operation_abandoned)). See "Lifecycle" in C(docs/operations.md).
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.plan_inputs
  - vmanyware.proxmox.plan_inputs.definition_sources
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.attributes
options:
  target_vmid:
    description:
      - The VMID of the VM to create. Required with O(state=present) and O(state=adopt).
    type: int
    required: false
  operation_id:
    description:
      - The operation to abandon. Required with O(state=abandoned); not used otherwise.
    type: str
  reason:
    description:
      - Why the operation is abandoned (1-1024 characters, recorded in the journal and shown by
        M(vmanyware.proxmox.vmanyware_operation_info)). Required with O(state=abandoned). Do not put secrets in it.
    type: str
  state:
    description:
      - V(present) creates the operation (no API request).
      - V(adopt) recovers an operation whose journal was lost from reads of Proxmox. It needs the same inputs, gates and
        confirmation as V(present). A target VM without a binding description fails with C(not_found); an operation that is
        still in the journal is returned unchanged (RV(adopted=false), C(changed=false)); a locked VM fails with C(locked).
      - V(abandoned) abandons O(operation_id) (no API request, no plan inputs, no gate). An operation already abandoned is returned
        unchanged (C(changed=false)); one that was closed or cleaned fails with C(journal_conflict).
    type: str
    choices: [present, adopt, abandoned]
    default: present
  confirmation:
    description:
      - The confirmation of the plan, exactly as returned in RV(error_details.expected_confirmation) after review, with C(confirmed=true).
      - Fields C(definitionName), C(definitionHash), C(providerScopeId), C(planHash), C(targetNode), C(targetVmid), C(sourceVmid),
        C(storage), C(bridge), C(confirmed).
    type: dict
  idempotency_key:
    description:
      - Identifies this creation request. Re-running with the same key and the same inputs returns the same operation; the same
        key with different inputs fails with C(idempotency_key_conflict).
      - Only its SHA-256 is stored in the journal, never the key in clear.
      - Defaults to C(<planHash>@<providerScopeId>).
    type: str
  provisioning_enabled:
    description:
      - Opens the provisioning gate for this task when E(VMANYWARE_PROVISIONING_ENABLED) is unset (or empty); V(false) closes it.
      - An environment value of exactly V(false) always wins (the administrator's kill switch, for example on an AWX execution
        environment); when the option is unset the variable must be exactly V(true). Any other value of the variable fails with
        C(configuration_error) before anything else happens.
    type: bool
attributes:
  check_mode:
    support: full
    details:
      - Checks gates, confirmation and journal claims and returns the operation it would create; writes nothing.
      - With O(state=adopt) it makes the same reads and returns the operation it would record; writes nothing.
      - With O(state=abandoned) it returns whether the operation would be abandoned; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - The same inputs (and idempotency key) return the existing operation with C(changed=false).
      - With O(state=adopt), an operation already in the journal is returned unchanged with C(changed=false).
      - With O(state=abandoned), an operation already abandoned is returned unchanged with C(changed=false).
requirements:
  - PyYAML
  - requests
notes:
  - E(VMANYWARE_SNAPSHOTS_ENABLED) must be exactly V(true) when the definition asks for a snapshot (C(snapshot_disabled) otherwise).
  - The catalog mapping must carry a C(imageDefaultUser) attestation (C(attestation_required) otherwise).
  - TLS must be verified, by O(validate_certs) with a CA file (or the system CAs) or by a fingerprint pin, because the
    operation is bound to the provider's certificate; otherwise the module fails with C(tls_unverified).
"""

EXAMPLES = r"""
- name: Ask for the confirmation block
  vmanyware.proxmox.vmanyware_operation:
    catalog_path: files/catalog.yml
    definition_path: files/kernel-lab.yml
    target_vmid: 201
  register: attempt
  failed_when: attempt.error_code | default('') not in ['confirmation_required']

- name: Create the operation after review
  vmanyware.proxmox.vmanyware_operation:
    catalog_path: files/catalog.yml
    definition_path: files/kernel-lab.yml
    target_vmid: 201
    confirmation: "{{ reviewed_confirmation }}"
  register: operation

- name: Recover the operation after the journal was lost (GET requests only)
  vmanyware.proxmox.vmanyware_operation:
    state: adopt
    catalog_path: files/catalog.yml
    definition_path: files/kernel-lab.yml
    target_vmid: 201
    confirmation: "{{ reviewed_confirmation }}"
  register: recovered

- name: Give up a failed operation (frees its VMID; the VM is left alone)
  vmanyware.proxmox.vmanyware_operation:
    state: abandoned
    operation_id: "{{ operation.operation_id }}"
    reason: "clone failed on a full storage; retrying on another VMID"
"""

RETURN = r"""
operation_id:
  description:
    - The id of the operation. In check mode, when it would be created, the id of the preview (RV(preview_document)); stage tasks of
      the same play given this id in check mode preview against that document (through the fact C(vmanyware_preview_operation)), so a
      playbook written for the normal mode runs unchanged with C(--check).
    - With O(state=adopt), the id the VM's binding description names (also in check mode).
    - With O(state=abandoned), O(operation_id).
  returned: success
  type: str
  sample: op-jhk7jbe4mkjzshug4nkssf4kf4
created:
  description: Whether this run created the operation (always V(false) with O(state=adopt)).
  returned: success, with O(state=present) or O(state=adopt)
  type: bool
adopted:
  description: Whether this run recorded (or, in check mode, would record) the operation from reads of Proxmox.
  returned: success, with O(state=adopt)
  type: bool
adoption:
  description: Per stage, what the reads proved (V(completed), V(pending) or V(uncertain)) and why. Empty when nothing was adopted.
  returned: success, with O(state=adopt)
  type: list
  elements: dict
  contains:
    kind:
      description: The stage kind.
      type: str
    status:
      description: The status recorded for the stage.
      type: str
    reason:
      description: Fixed text naming what the reads showed.
      type: str
observed:
  description: What the reads showed about the VM (C(powerState), C(pendingKeys), C(qmstartTasks)).
  returned: with O(state=adopt), when the operation was (or would be) adopted
  type: dict
operation:
  description: The public view of the operation (see M(vmanyware.proxmox.vmanyware_operation_info)).
  returned: success
  type: dict
preview_document:
  description:
    - Check mode only, when the operation would be created or adopted. The complete operation document an apply run would record
      (never written). Stage tasks in check mode get it automatically when their O(vmanyware.proxmox.vmanyware_clone#module:operation_id)
      is RV(operation_id); it can also be passed explicitly as O(vmanyware.proxmox.vmanyware_clone#module:preview_operation).
  returned: check mode, when the operation does not exist in the journal yet
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
  description:
    - On failure, the fixed error code, for example V(confirmation_required), V(plan_changed), V(provisioning_disabled),
      V(snapshot_disabled), V(attestation_required), V(conflicting_operation), V(idempotency_key_conflict), V(configuration_error),
      V(tls_verification_failed), V(transport_lost); with O(state=adopt) also V(not_found) and V(locked).
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
    provisioning_enabled:
      description: Whether the provisioning gate is open for this run (an apply run needs it).
      type: bool
      returned: with confirmation_required
    snapshots_enabled:
      description: Whether an apply run would pass the snapshot gate (V(true) when the plan takes no snapshot).
      type: bool
      returned: with confirmation_required
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_argument_spec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.operation_states import (
    STATES,
    operation_from_params,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    PLAN_INPUT_MUTUALLY_EXCLUSIVE,
    PLAN_INPUT_REQUIRED_ONE_OF,
    plan_input_argument_spec,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import journal_argument_spec


def argument_spec() -> dict:
    spec = plan_input_argument_spec()
    spec.update(connection_argument_spec())
    spec.update(journal_argument_spec())
    spec["confirmation"] = {"type": "dict"}
    spec["idempotency_key"] = {"type": "str", "no_log": False}
    spec["provisioning_enabled"] = {"type": "bool"}
    spec["state"] = {"type": "str", "choices": list(STATES), "default": "present"}
    spec["target_vmid"] = dict(spec["target_vmid"], required=False)
    spec["operation_id"] = {"type": "str"}
    spec["reason"] = {"type": "str"}
    return spec


# The plan inputs are required to create or adopt; abandoning needs only the operation and why.
REQUIRED_IF = tuple(
    rule
    for state in ("present", "adopt")
    for rule in [("state", state, ["target_vmid"])]
    + [("state", state, list(group), True) for group in PLAN_INPUT_REQUIRED_ONE_OF]
) + (("state", "abandoned", ["operation_id", "reason"]),)


def action(params, check_mode, diff) -> dict:
    return operation_from_params(params, params["state"], check_mode=check_mode, environ=os.environ)


ENTRY = ModuleEntry(
    argument_spec=argument_spec,
    action=action,
    libraries=("PyYAML", "jsonschema", "requests"),
    mutually_exclusive=PLAN_INPUT_MUTUALLY_EXCLUSIVE,
    required_if=REQUIRED_IF,
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
