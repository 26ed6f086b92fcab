#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_cleanup
short_description: Remove the VM or container that a failed, uncertain or abandoned operation created (guarded, journaled)
version_added: 0.2.0
description:
  - Removes the guest that operation O(operation_id) created - its VM, or its container for a container operation (the plan's C(guestType) is
    C(container)) - when that operation is C(failed), C(uncertain) or C(abandoned) (a
    C(completed) one only with O(allow_completed=true)). An C(open) operation must be abandoned first
    (M(vmanyware.proxmox.vmanyware_operation) with O(vmanyware.proxmox.vmanyware_operation#module:state=abandoned)).
  - The guest's API path is C(/nodes/{node}/qemu/{vmid}) for a VM and C(/nodes/{node}/lxc/{vmid}) for a container; below,
    C({guest}) stands for it. Guards, steps and journal are the same for both.
  - Before anything is sent, and again before each request, reads must show that the gate E(VMANYWARE_LIFECYCLE_ENABLED) is
    exactly V(true) (C(lifecycle_disabled)); that the token holds C(VM.Allocate) (and C(VM.PowerMgmt) with O(stop=true)) on
    C(/vms/{vmid}) (C(permission_denied)); that the guest's description (C({guest}/config)) binds exactly this operation - its id,
    definitionHash and planHash (C(cleanup_binding_mismatch)); that it is not a template (C(cleanup_template)), not C(protection=1)
    (C(cleanup_protected)) and not locked (C(locked)). The configured provider must be the one the operation was confirmed for (C(plan_changed)), checked before
    any connection. Each failing guard leaves the guest untouched and sends nothing.
  - As every stage, the cleanup needs verified TLS - O(validate_certs) with a CA file or the system CAs, or a O(api_fingerprint) pin;
    otherwise it fails with C(tls_unverified) before any connection (O(unverified_tls_read_only) does not apply, since the cleanup writes).
  - A running guest (C({guest}/status/current)) is refused (C(cleanup_running)) unless O(stop=true); then
    C(POST {guest}/status/stop) is recorded in the journal, sent once and its C(qmstop) (VM) or C(vzstop) (container) task followed
    by GET.
  - Then C(DELETE {guest}) with C(purge=1) and C(destroy-unreferenced-disks=1) (never C(force)), recorded before it is sent, its
    C(qmdestroy) or C(vzdestroy) task followed by GET. A lost reply is resolved by reads (the node's task list; is the guest gone?)
    and never sent again; when reads cannot tell, the cleanup stays C(uncertain) and the module says what to check.
  - When no guest exists at the target (the clone or create never happened, or it was removed by hand), nothing is sent.
  - At the end the operation's status is C(cleaned) and its target is released, so a new operation may take the VMID. The
    journal entry stays readable. See "Lifecycle" in C(docs/operations.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  operation_id:
    description: The operation whose guest to remove.
    type: str
    required: true
  stop:
    description: Stop the guest first when it runs (a recorded C(POST .../status/stop)). Without it a running guest is refused.
    type: bool
    default: false
  allow_completed:
    description: Also remove the guest of a C(completed) operation.
    type: bool
    default: false
  lifecycle_enabled:
    description:
      - Enables the cleanup for this task when E(VMANYWARE_LIFECYCLE_ENABLED) is unset. E(VMANYWARE_LIFECYCLE_ENABLED=false) always
        wins; any value of the variable other than V(true), V(false) or empty fails with C(configuration_error).
    type: bool
  wait_budget:
    description:
      - How long this run waits for a running Proxmox task before returning RV(done=false) with progress. Re-running keeps following
        the same task by reading it; nothing is sent again. When unset, the module waits up to O(timeout).
    type: float
  timeout:
    description: Deadline in seconds for each Proxmox task (C(task_timeout) when it passes; a re-run keeps following the task).
    type: float
  lock_wait:
    description: How long to wait out a C(VM is locked) refusal (the request changed nothing) before failing with C(locked).
    type: float
    default: 60
attributes:
  check_mode:
    support: full
    details: Makes every guard read and returns the exact requests it would send (RV(requests), each with its C(qm) or C(pct)
      command line) and what would be removed; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A cleaned operation returns what was removed with C(changed=false) and sends nothing.
requirements:
  - requests
  - truststore
notes:
  - The privileges are listed in C(docs/permissions.md) (stage C(cleanup)).
"""

EXAMPLES = r"""
- name: Remove the half-created guest of a failed operation
  vmanyware.proxmox.vmanyware_cleanup:
    operation_id: "{{ failed_operation_id }}"
    stop: true
  environment:
    VMANYWARE_LIFECYCLE_ENABLED: "true"
  register: cleanup

- name: Remove the container of an abandoned container operation (the same module; the plan says guestType container)
  vmanyware.proxmox.vmanyware_cleanup:
    operation_id: "{{ abandoned_container_operation_id }}"
    stop: true
    lifecycle_enabled: true

- name: Show what was removed
  ansible.builtin.debug:
    msg: "VM {{ cleanup.removed.vmid }}: volumes {{ cleanup.removed.volumes }}, snapshots {{ cleanup.removed.snapshots }}"
"""

RETURN = r"""
changed:
  description: Whether this run changed the guest or the journal.
  returned: always
  type: bool
done:
  description: Whether the cleanup is complete. V(false) with RV(progress) when O(wait_budget) ran out (re-run to
    continue), and in check mode.
  returned: always
  type: bool
operation_id:
  description: The operation.
  returned: always
  type: str
requests:
  description:
    - The mutating requests this run sent, or in check mode would send (C(method), C(path), C(params); secrets redacted).
    - Each entry also has C(cli), the equivalent command on the node (C(qm stop ...), C(qm destroy ...), C(pct stop
      ...), C(pct destroy ...)), when one exists.
    - Empty when nothing was (or would be) sent.
  returned: always
  type: list
  elements: dict
removed:
  description: What was removed (in check mode - what would be). C(vmid) is V(null) when no guest existed.
  returned: always
  type: dict
  contains:
    vmid:
      description: The VMID of the removed guest.
      type: int
    volumes:
      description: The volumes the guest owned (a VM's disks; a container's root file system and mount points),
        freed with it.
      type: list
      elements: str
    snapshots:
      description: The guest's snapshots (removed with it).
      type: list
      elements: str
progress:
  description: What the cleanup is waiting for when RV(done) is V(false) (C(step) names it).
  returned: when the cleanup is still in progress
  type: dict
operation:
  description: The public view of the operation (see M(vmanyware.proxmox.vmanyware_operation_info)), with its C(cleanup).
  returned: always
  type: dict
ansible_facts:
  description: Facts set by the module.
  returned: always
  type: dict
  contains:
    vmanyware_operation:
      description: Same as RV(operation).
      type: dict
error_code:
  description:
    - The fixed error code when the module fails (see C(docs/errors.md)), for example V(lifecycle_disabled), V(cleanup_not_eligible),
      V(cleanup_binding_mismatch), V(cleanup_template), V(cleanup_protected), V(cleanup_running), V(permission_denied),
      V(locked), V(plan_changed), V(outcome_uncertain).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_argument_spec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.cleanup import run_cleanup
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import journal_argument_spec


def argument_spec() -> dict:
    spec = journal_argument_spec()
    spec.update(connection_argument_spec())
    spec.update(
        {
            "operation_id": {"type": "str", "required": True},
            "stop": {"type": "bool", "default": False},
            "allow_completed": {"type": "bool", "default": False},
            "lifecycle_enabled": {"type": "bool"},
            "wait_budget": {"type": "float"},
            "timeout": {"type": "float"},
            "lock_wait": {"type": "float", "default": 60.0},
        }
    )
    return spec


def action(params, check_mode, diff) -> dict:
    return run_cleanup(params, check_mode=check_mode)


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action, libraries=("requests",))


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
