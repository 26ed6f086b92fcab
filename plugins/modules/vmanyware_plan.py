#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_plan
short_description: Build the reviewable plan for an environment definition, offline
version_added: 0.1.0
description:
  - Reads a v1 template catalog and a v1 environment definition, validates both strictly, selects the catalog mapping of the
    definition's image and returns the v1 plan document with its C(definitionHash) and C(planHash).
  - It takes no connection options; a C(module_defaults) entry for the action group
    C(group/vmanyware.proxmox.proxmox) may still set them, they are left out for this module.
  - Contacts no Proxmox host and changes nothing; the plan says so with RV(plan.liveVerified=false) and RV(plan.vmidReserved=false).
  - The formats, the hashes and the plan document are specified in C(docs/formats.md) in the collection.
options:
  repeat_mapping:
    description:
      - The catalog mapping a recorded operation was confirmed with, when its definition is planned again (the provision role's
        C(provision_repeat_operation)). The catalog must still map the definition's image exactly so - the module fails with
        C(repeat_image_removed) when the image is no longer in the catalog, and with C(repeat_mapping_changed) (the differing
        field names in C(error_details.fields)) when its mapping changed since.
    type: dict
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.plan_inputs
  - vmanyware.proxmox.plan_inputs.definition_sources
  - vmanyware.proxmox.attributes
attributes:
  check_mode:
    support: full
    details: The module never changes anything; check mode returns the same result.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - PyYAML
  - jsonschema
"""

EXAMPLES = r"""
- name: Plan an environment from files
  vmanyware.proxmox.vmanyware_plan:
    catalog_path: files/catalog.yml
    definition_path: files/kernel-lab.yml
    target_vmid: 201
  register: planned

- name: Show the hash to confirm
  ansible.builtin.debug:
    msg: "{{ planned.plan_hash }}"

- name: Plan a definition that starts from a preset, with the operator's SSH key sources
  vmanyware.proxmox.vmanyware_plan:
    catalog_path: files/catalog.yml  # presets are read from files/presets unless presets_path says otherwise
    definition_path: files/kernel-lab-big.yml
    ssh_key_sources:
      - name: personal
        path: ~/.ssh/id_ed25519.pub
      - name: team
        path: /srv/team-keys
    target_vmid: 203

- name: Plan from inline text
  vmanyware.proxmox.vmanyware_plan:
    catalog: "{{ lookup('ansible.builtin.file', 'catalog.yml') }}"
    definition: "{{ lookup('ansible.builtin.file', 'kernel-lab.yml') }}"
    target_vmid: 202
"""

RETURN = r"""
plan_hash:
  description: The C(planHash), SHA-256 (lowercase hex) over the definition hash, the selected mapping and the target VMID.
  returned: success
  type: str
  sample: 5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df
definition_hash:
  description: The C(definitionHash), SHA-256 (lowercase hex) of the RFC 8785 canonical JSON of the validated definition.
  returned: success
  type: str
  sample: 109cb47497a9c1740f37adc432f0f14bd3fd31d43e2bf67d435a696a44345366
definition:
  description:
    - The effective definition the plan is built from, as validated (defaults applied), merged with its preset (with C(preset),
      its C(name), C(version) and C(hash)), with its profiles pinned (C(profiles), each with C(version) and C(declarationHash))
      and with the keys of the SSH key sources; the keys are shown as a count
      (C(access.sshPublicKeyCount)), as the journal's snapshots show them. The C(definitionHash) is this definition's.
  returned: success
  type: dict
creation_enabled:
  description:
    - Whether an operation for this plan could be created now, judged from the gates and the mapping alone (the plan
      makes no connection; the preflight adds the TLS check). False when the provisioning gate is closed, when the plan
      declares a final snapshot and the snapshots gate is closed, or when the mapping lacks a C(imageDefaultUser) attestation.
  returned: success
  type: bool
creation_blockers:
  description: The error codes creating an operation would fail with, in order; empty when RV(creation_enabled) is true.
  returned: success
  type: list
  elements: str
  sample: ["provisioning_disabled"]
plan:
  description: The v1 plan document (C(docs/formats.md), "Plan v1"). It contains no SSH key, only their count.
  returned: success
  type: dict
  contains:
    apiVersion:
      description: Always V(vmanyware.dev/v1).
      type: str
      returned: success
    kind:
      description: Always V(Plan).
      type: str
      returned: success
    definitionName:
      description: The definition's C(name).
      type: str
      returned: success
    definitionHash:
      description: Same as RV(definition_hash).
      type: str
      returned: success
    planHash:
      description: Same as RV(plan_hash).
      type: str
      returned: success
    provider:
      description: Always V(proxmox-ve).
      type: str
      returned: success
    source:
      description: The selected catalog mapping exactly as hashed, in catalog field order (C(imageDefaultUser) only when the catalog has it).
      type: dict
      returned: success
    target:
      description: Where the VM will be created.
      type: dict
      returned: success
      contains:
        node:
          description: The mapping's node.
          type: str
          returned: success
        vmid:
          description: The target VMID.
          type: int
          returned: success
        name:
          description: The VM name (the definition's C(name)).
          type: str
          returned: success
    resources:
      description: The declared C(cores), C(memoryMiB) and C(diskGiB).
      type: dict
      returned: success
    storage:
      description: The mapping's storage.
      type: str
      returned: success
    bridge:
      description: The mapping's bridge.
      type: str
      returned: success
    guestUser:
      description: The mapping's guest user.
      type: str
      returned: success
    network:
      description: Always V(ipv4-dhcp).
      type: str
      returned: success
    access:
      description:
        - Access summary; C(sshPublicKeyCount) is the number of keys the guest gets (the keys are not returned).
        - With O(ssh_key_sources), C(sshPublicKeys) lists each key once, in the order the guest gets them, with its C(type),
          C(fingerprint) (C(SHA256:...), as C(ssh-keygen -l) prints it) and C(sources) (V(definition) for the definition's own).
      type: dict
      returned: success
    preset:
      description:
        - The preset the definition starts from (docs/profiles.md) - C(name), C(version), C(hash) (its canonical SHA-256, covered
          by C(definitionHash) and so by C(planHash)) and C(fields), the dotted fields of the definition the preset gave.
      type: dict
      returned: when the definition names a preset
    profiles:
      description:
        - The profiles in run order (docs/profiles.md, "Profiles") - C(name), C(version), C(role), C(declarationHash),
          C(vars) (the request's over the declaration's defaults), C(requiredBy) (only for a profile added because others
          require it), C(perGuest), C(lockoutRisk), C(baked) (the chosen template has it baked in) and C(run) (false only
          when baked and not per-guest). Each profile that runs is one C(profile) step named C(profile:<name>).
      type: list
      elements: dict
      returned: when the definition requests profiles
    templateChoice:
      description:
        - Which template of the image was chosen and why - C(templateVmid), C(bakedRequested) (requested profiles baked in),
          C(candidates) (templates of the image on the node) and C(reason) (V(single_template), V(most_requested_baked),
          V(fewest_other_baked), V(lowest_template_vmid)).
      type: dict
      returned: when the definition requests profiles, or the catalog has several templates of the image on the node
    packages:
      description: The declared packages (C(name), and C(version) when declared).
      type: list
      elements: dict
      returned: success
    snapshotAfterProvisioning:
      description: Whether a snapshot is taken after provisioning.
      type: bool
      returned: success
    diskExpansion:
      description: Whether C(diskGiB) is larger than the mapping's C(sourceDiskGiB).
      type: bool
      returned: success
    steps:
      description:
        - Ordered steps, each with a 1-based C(position) and a C(kind).
        - Kinds in order are V(clone), V(resources), V(disk) (only when expanding), V(cloudinit), V(seed), V(start), V(readiness),
          V(packages) (only when declared) and V(snapshot) (only when declared).
      type: list
      elements: dict
      returned: success
    liveVerified:
      description: Always V(false) for this module; nothing was checked against Proxmox.
      type: bool
      returned: success
    vmidReserved:
      description: Always V(false) for this module; the VMID is not reserved.
      type: bool
      returned: success
error_code:
  description: The fixed error code when the module fails (see C(docs/formats.md)).
  returned: failure
  type: str
  sample: invalid_definition
error_path:
  description: The path of the offending input field when the module fails.
  returned: failure, when a field is at fault
  type: str
  sample: resources.diskGiB
error_details:
  description: Safe facts about the failure, such as the C(rule) broken and the C(line) and C(column) of a YAML error.
  returned: failure, when available
  type: dict
  sample: {"rule": "maximum"}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    creation_blockers,
    snapshots_view,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    PLAN_INPUT_CONSTRAINTS,
    plan_from_params,
    plan_input_argument_spec,
)


def argument_spec() -> dict:
    spec = plan_input_argument_spec()
    spec["repeat_mapping"] = {"type": "dict"}
    return spec


def action(params, check_mode, diff) -> dict:
    planned = plan_from_params(params)
    blockers = creation_blockers(planned.plan, planned.mapping, os.environ)  # the gates and the mapping; no connection
    return {
        "changed": False,
        "plan": planned.plan,
        "plan_hash": planned.plan_hash,
        "definition_hash": planned.definition_hash,
        # the effective definition (merged with its preset), its keys as a count as the journal's snapshots show them
        "definition": snapshots_view({"definition": planned.definition, "mapping": {}, "plan": {}})["definition"],
        "creation_enabled": not blockers,
        "creation_blockers": blockers,
    }


ENTRY = ModuleEntry(
    argument_spec=argument_spec, action=action, libraries=("PyYAML", "jsonschema"), **PLAN_INPUT_CONSTRAINTS
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
