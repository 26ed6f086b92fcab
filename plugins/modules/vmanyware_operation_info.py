#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_operation_info
short_description: Show an operation from the local journal, or list the history of operations
version_added: 0.1.0
description:
  - Reads one operation from the local journal and returns its public view - identities, hashes, status, stage progress
    and the hand-off; with O(evidence=true) also each stage's evidence. No secret, no idempotency key.
  - Contacts no Proxmox host and takes no connection options; a C(module_defaults) entry for the action group
    C(group/vmanyware.proxmox.proxmox) may still set them, they are left out for this module.
  - A missing operation fails with C(not_found); a journal file that is not a valid operation document fails with
    C(journal_corrupt) and is left untouched.
  - Without O(operation_id) it lists the operations of the journal, newest first (RV(operations)), filtered by O(status),
    O(target_vmid), O(definition_name) and O(since), at most O(limit) of them. The listing keeps a summary cache
    (C(history-cache.json)) in the journal directory so that thousands of operations list in well under a second;
    it is rebuilt from the operation files whenever it does not match them.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.attributes
options:
  operation_id:
    description: The operation to show. Without it, the module lists operations (see O(status) ... O(limit)).
    type: str
  include_snapshots:
    description:
      - With O(operation_id), also return RV(snapshots), the definition, catalog mapping and plan exactly as the operation
        recorded them when it was created (what later runs must act on, rather than reading the journal file).
      - SSH public keys appear only as a count, as in the plan, unless O(include_public_keys) is set.
    type: bool
    default: false
  include_public_keys:
    description:
      - With O(include_snapshots), return the definition's SSH public keys as recorded instead of their count. They are
        public keys, not secrets; planning the same definition again needs them (the C(provision) role's
        C(provision_repeat_operation) sets this).
    type: bool
    default: false
  status:
    description: List only operations with one of these statuses.
    type: list
    elements: str
    choices: [open, completed, failed, uncertain, abandoned, cleaned]
  target_vmid:
    description: List only operations whose target is this VMID.
    type: int
  definition_name:
    description: List only operations of the definition with this name.
    type: str
  since:
    description: List only operations created at or after this UTC time (V(2026-01-31) or V(2026-01-31T12:00:00Z)).
    type: str
  limit:
    description: List at most this many operations (the newest); RV(total) counts every match.
    type: int
    default: 100
  evidence:
    description:
      - With O(operation_id), also return each stage's evidence (C(evidence) in RV(operation.stages)), what its independent read-back
        recorded (volume, digests, MAC address, seed hashes, IPv4 and host keys, installed package versions, snapshot name). The stage
        modules return a compact record without it.
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

- name: Failed operations of the last week
  vmanyware.proxmox.vmanyware_operation_info:
    status: [failed, uncertain]
    since: "{{ '%Y-%m-%d' | strftime(now(utc=true).timestamp() - 7 * 86400) }}"
  register: history

- name: Stages not yet completed
  ansible.builtin.debug:
    msg: "{{ info.operation.stages | rejectattr('status', 'equalto', 'completed') | map(attribute='kind') | list }}"

- name: Read the plan the operation was confirmed with
  vmanyware.proxmox.vmanyware_operation_info:
    operation_id: "{{ operation.operation_id }}"
    include_snapshots: true
  register: recorded
"""

RETURN = r"""
operations:
  description: Without O(operation_id), the matching operations, newest first (at most O(limit)).
  returned: success, without O(operation_id)
  type: list
  elements: dict
  contains:
    operation_id:
      description: The operation id.
      type: str
    status:
      description: V(open), V(completed), V(failed), V(uncertain), V(abandoned) or V(cleaned).
      type: str
    provisioning_status:
      description: The status the stages reached (V(open), V(completed), V(failed) or V(uncertain)).
      type: str
    failure_code:
      description: The error code of a failed or uncertain operation, else V(null).
      type: str
    released:
      description: Whether the operation released its target.
      type: bool
    provider_scope_id:
      description: The provider scope.
      type: str
    created_at:
      description: Creation time (UTC).
      type: str
    updated_at:
      description: Time of the last journal write (UTC).
      type: str
    definition_name:
      description: The definition's name.
      type: str
    target_node:
      description: The target node.
      type: str
    target_vmid:
      description: The target VMID.
      type: int
    ipv4:
      description: The guest address recorded by readiness, else V(null).
      type: str
total:
  description: Without O(operation_id), how many operations match the filters (before O(limit)).
  returned: success, without O(operation_id)
  type: int
skipped_files:
  description:
    - Without O(operation_id), the operation files that could not be loaded (corrupt, truncated, oversized, a symbolic link, not
      a regular file, recorded hashes that are not those of the recorded snapshots, unreadable), whatever the filters - C(file),
      C(operation_id) and C(code) (V(journal_corrupt) or V(io_error)). Each is also a warning; they are left untouched and every
      valid operation is listed. Loading one of them with O(operation_id) fails with its code.
  returned: success, without O(operation_id)
  type: list
  elements: dict
operation:
  description: The public view of the operation (keys in snake_case; the journal document keeps its camelCase).
  returned: success, with O(operation_id)
  type: dict
  contains:
    operation_id:
      description: The operation id.
      type: str
      returned: success
    status:
      description:
        - V(open), V(completed), V(failed), V(uncertain), V(abandoned) (the operator abandoned it) or V(cleaned)
          (M(vmanyware.proxmox.vmanyware_cleanup) removed its guest).
      type: str
      returned: success
    provisioning_status:
      description: The status the stages reached (V(open), V(completed), V(failed) or V(uncertain)).
      type: str
      returned: success
    begun:
      description:
        - Whether any stage was ever dispatched (a stage beyond V(pending), or one sent before and refused). An operation that has
          not begun was only recorded - nothing was sent for it; a preflight that does not pass stops it before its first write,
          while one that has begun resumes (C(docs/operations.md)).
      type: bool
      returned: success
    release:
      description: C(reason) (V(closed), V(abandoned) or V(cleaned)) and C(released_at) once the target was released, else V(null).
      type: dict
      returned: success
    abandonment:
      description: C(at) and C(reason) (the operator's text) once the operation was abandoned, else V(null).
      type: dict
      returned: success
    cleanup:
      description:
        - The cleanup of the guest once started, else V(null) - C(status), C(started_at), C(completed_at), C(failure), C(steps)
          (C(kind), C(status), C(upid), C(failure)) and C(removed) (C(vmid), C(volumes), C(snapshots)).
      type: dict
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
      description: Node, VMID, name and instance tag of the guest, and C(guest_type) - V(vm), or V(container) for a container operation.
      type: dict
      returned: success
    guest_user:
      description: The guest user of the image.
      type: str
      returned: success
    network:
      description:
        - The planned NIC of a named network (C(network), C(bridge), C(vlan), C(mtu), and per family C(ipv4)/C(ipv6) the
          C(mode), static C(address) with prefix, C(gateway), C(dns), C(search_domain), and C(leased) when the address came from
          the network's pool); V(null) for a plan without a named network.
        - C(addresses_held) says whether the operation still holds its static addresses (address claims in the journal), true
          until it is closed, abandoned or cleaned up.
      type: dict
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
snapshots:
  description: The operation's immutable snapshots (only with O(include_snapshots=true)).
  returned: when O(include_snapshots=true)
  type: dict
  contains:
    definition:
      description: The validated definition as recorded, with C(access.sshPublicKeyCount) in place of the keys (the keys with
        O(include_public_keys=true)).
      type: dict
      returned: when O(include_snapshots=true)
    mapping:
      description: The catalog mapping the plan was built from (C(imageDefaultUser) included when the catalog had it).
      type: dict
      returned: when O(include_snapshots=true)
    plan:
      description: The v1 plan document as confirmed.
      type: dict
      returned: when O(include_snapshots=true)
error_code:
  description: On failure, the fixed error code (V(not_found), V(journal_corrupt), V(invalid_option), V(io_error)).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.history import (
    STATUSES,
    list_operations,
    parse_filters,
    skipped_warning,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import validate_operation_id
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import public_view, snapshots_view
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import (
    journal_argument_spec,
    open_store,
)


def argument_spec() -> dict:
    spec = journal_argument_spec()
    spec["operation_id"] = {"type": "str"}
    spec["include_snapshots"] = {"type": "bool", "default": False}
    spec["include_public_keys"] = {"type": "bool", "default": False}
    spec["status"] = {"type": "list", "elements": "str", "choices": list(STATUSES)}
    spec["target_vmid"] = {"type": "int"}
    spec["definition_name"] = {"type": "str"}
    spec["since"] = {"type": "str"}
    spec["limit"] = {"type": "int", "default": 100}
    spec["evidence"] = {"type": "bool", "default": False}
    return spec


def action(params, check_mode, diff) -> dict:
    store = open_store(params["journal_dir"])
    if not params["operation_id"]:
        filters = parse_filters(params["status"], params["target_vmid"], params["definition_name"], params["since"])
        listed = list_operations(store, filters, params["limit"])
        if listed["skipped_files"]:  # one bad file never hides the others: each is named in a warning
            listed["warnings"] = [skipped_warning(entry) for entry in listed["skipped_files"]]
        return dict(listed, changed=False)
    operation_id = validate_operation_id(params["operation_id"])
    document = store.load(operation_id)
    result = {"changed": False, "operation": public_view(document, evidence=params["evidence"])}
    if params["include_snapshots"]:
        result["snapshots"] = snapshots_view(document, with_public_keys=bool(params.get("include_public_keys")))
    return result


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
