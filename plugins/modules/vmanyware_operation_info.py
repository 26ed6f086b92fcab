#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_operation_info
short_description: Show an operation from the local journal
version_added: 0.1.0
description:
  - Reads one operation from the local journal and returns its public view - identities, hashes, status, stage progress
    and the hand-off; with O(evidence=true) also each stage's evidence. No secret, no idempotency key.
  - Contacts no Proxmox host. The connection options are accepted so that one C(module_defaults) entry for the action group
    C(group/vmanyware.proxmox.proxmox) serves every module of the collection; this module never uses them.
  - A missing operation fails with C(not_found); a journal file that is not a valid operation document fails with
    C(journal_corrupt) and is left untouched.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  operation_id:
    description: The operation to show.
    type: str
    required: true
  evidence:
    description:
      - Also return each stage's evidence (C(evidence) in RV(operation.stages)), what its independent read-back recorded (volume,
        digests, MAC address, seed hashes, IPv4 and host keys, installed package versions, snapshot name). The stage modules
        return a compact record without it.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: The module only reads the journal.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements: []
"""

EXAMPLES = r"""
- name: Show an operation
  vmanyware.proxmox.vmanyware_operation_info:
    operation_id: "{{ operation.operation_id }}"
  register: info

- name: Stages not yet completed
  ansible.builtin.debug:
    msg: "{{ info.operation.stages | rejectattr('status', 'equalto', 'completed') | map(attribute='kind') | list }}"
"""

RETURN = r"""
operation:
  description: The public view of the operation (keys in snake_case; the journal document keeps its camelCase).
  returned: success
  type: dict
  contains:
    operation_id:
      description: The operation id.
      type: str
      returned: success
    status:
      description: V(open), V(completed), V(failed) or V(uncertain).
      type: str
      returned: success
    failure:
      description: Code, message and stage of a failed or uncertain operation.
      type: dict
      returned: success
    released:
      description: Whether the operation released its target.
      type: bool
      returned: success
    provider_scope_id:
      description: The provider scope the operation was confirmed for.
      type: str
      returned: success
    created_at:
      description: Creation time (UTC).
      type: str
      returned: success
    updated_at:
      description: Time of the last journal write (UTC).
      type: str
      returned: success
    definition_name:
      description: The definition's name.
      type: str
      returned: success
    definition_hash:
      description: The definition hash.
      type: str
      returned: success
    plan_hash:
      description: The plan hash.
      type: str
      returned: success
    source:
      description: C(image), C(node), C(template_vmid) and C(template_version) of the catalog mapping.
      type: dict
      returned: success
    instance:
      description: Node, VMID, name and instance tag of the VM.
      type: dict
      returned: success
    guest_user:
      description: The guest user of the image.
      type: str
      returned: success
    stages:
      description: Position, kind, status, submission_started, upid and failure of each stage (and C(evidence) with O(evidence=true)).
      type: list
      elements: dict
      returned: success
    handoff:
      description: The end result recorded by the last stages (empty until then), e.g. C(ipv4), C(known_hosts), C(snapshot).
      type: dict
      returned: success
error_code:
  description: On failure, the fixed error code (V(not_found), V(journal_corrupt), V(invalid_option), V(io_error)).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._argspec import connection_argument_spec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import validate_operation_id
from ansible_collections.vmanyware.proxmox.plugins.module_utils._module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import public_view
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage_module import journal_argument_spec, open_store


def argument_spec() -> dict:
    spec = journal_argument_spec()
    spec.update(connection_argument_spec())  # accepted for module_defaults groups, never used
    spec["operation_id"] = {"type": "str", "required": True}
    spec["evidence"] = {"type": "bool", "default": False}
    return spec


def action(params, check_mode, diff) -> dict:
    operation_id = validate_operation_id(params["operation_id"])
    return {"changed": False, "operation": public_view(open_store(params["journal_dir"]).load(operation_id), evidence=params["evidence"])}


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
