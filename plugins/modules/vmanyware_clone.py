#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_clone
short_description: Clone the catalog template into the operation's VM (stage clone)
version_added: 0.1.0
description:
  - Runs the C(clone) stage of an operation created by M(vmanyware.proxmox.vmanyware_operation) - a full clone
    (C(full=1)) of the catalog template to the confirmed VMID on the mapping's storage, named after the definition.
  - Preconditions (read only) - the template exists on the mapped node and is a template; C(GET /cluster/nextid?vmid=N) shows the VMID
    free. A VMID used by any VM not bound to this operation fails with C(vmid_taken) and nothing is sent. When another client takes
    the VMID after that read, Proxmox refuses the clone (nothing is created) and the stage fails with C(vmid_taken) as well.
  - The new VM's description binds it to the operation (operation id, definitionHash, planHash); later stages compare it exactly.
  - The dispatch is recorded in the journal before the request is sent. A lost reply is resolved by reading the node's
    C(qmclone) tasks and the target's configuration; the request is sent again only when reads prove it did not apply
    (harmless - the fixed VMID allows at most one clone to create it).
  - Observation - the VM exists, is stopped and unlocked, carries the description and has its disk on the planned storage; the
    evidence records the volume, config digest, C(net0) MAC address and disk size.
  - The protocol every stage follows is described in C(docs/stages.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
attributes:
  check_mode:
    support: full
    details: Runs the same reads and returns the exact request it would send in RV(requests); writes nothing.
  diff_mode:
    support: full
    details: Shows the VM before (absent) and after (VMID, name, storage, description, source).
  idempotent:
    support: full
    details: A completed stage returns its compact record without sending anything.
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Run the clone stage
  vmanyware.proxmox.vmanyware_clone:
    operation_id: "{{ operation.operation_id }}"
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem

- name: Clone, waiting at most 30 seconds per run for the task
  vmanyware.proxmox.vmanyware_clone:
    operation_id: "{{ operation.operation_id }}"
    wait_budget: 30
  register: clone
  until: clone.done
  retries: 40
"""

RETURN = r"""
changed:
  description: Whether this run sent a request that changed the target (V(false) on a re-run of a completed stage).
  returned: always
  type: bool
done:
  description:
    - Whether the stage is completed. V(false) with RV(progress) when the run's O(wait_budget) ran out before the
      stage's task or the guest was done (re-run to continue), and in check mode.
  returned: always
  type: bool
operation_id:
  description: The operation the stage belongs to.
  returned: always
  type: str
stage:
  description:
    - The stage as recorded in the journal after this run, compact. Its evidence (what the read-back recorded) is
      in M(vmanyware.proxmox.vmanyware_operation_info) with O(vmanyware.proxmox.vmanyware_operation_info#module:evidence=true).
  returned: always
  type: dict
  contains:
    kind:
      description: V(clone).
      type: str
      returned: always
    position:
      description: Position of the stage in the operation (1-based, the plan step's position).
      type: int
      returned: always
    status:
      description: V(pending), V(dispatching), V(submitted), V(completed), V(failed) or V(uncertain).
      type: str
      returned: always
    upid:
      description: The Proxmox task id of the request, when it started a task.
      type: str
      returned: always
    attempts:
      description: How many times the request was dispatched (a re-send after reads proved it did not apply counts).
      type: int
      returned: always
requests:
  description:
    - The mutating requests this run sent, or in check mode would send (C(method), C(path), C(params); secrets redacted).
    - Each entry also has C(cli), the equivalent command on the node (C(qm clone ...), C(qm set ...)), when one
      exists.
    - Empty when nothing was (or would be) sent.
  returned: always
  type: list
  elements: dict
  sample: [{method: POST, path: /nodes/pve-test/qemu/9000/clone, params: {newid: 201, full: 1, storage: local-lvm}}]
progress:
  description:
    - What the stage is waiting for when RV(done=false) - its still running Proxmox task, or the phase its probes
      reached.
    - While the stage waits for a free allocation slot of the storage (O(storage_concurrency)), nothing has been
      sent and the progress says so, with the seconds waited in this run.
  returned: when the stage is still in progress or waits for a storage slot
  type: dict
  sample: {waiting: a free allocation slot on storage local-lvm, storage: local-lvm, storageConcurrency: 3, waitedSeconds: 20.0}
admission:
  description: The storage slot this run held while its request allocated (O(storage_concurrency)) and how long
    it waited for it.
  returned: when this run sent the request with admission control on
  type: dict
  sample: {storage: local-lvm, slot: 0, waitedSeconds: 4.2}
task:
  description: The outcome of the stage's Proxmox task (C(upid), C(status), C(exitstatus), C(warnings), C(log_tail)).
  returned: when this run followed the stage's task to its end
  type: dict
warnings:
  description: A warning when the Proxmox task ended with warnings (the stage is still completed).
  returned: when the task ended with warnings
  type: list
  elements: str
diff:
  description: Before and after of what the stage changes (with C(--diff)).
  returned: in diff mode, when the stage changes settings
  type: dict
ansible_facts:
  description: Facts set by the module, only when asked (O(set_operation_fact=true)); a stage never overwrites a
    fact otherwise.
  returned: with O(set_operation_fact=true)
  type: dict
  contains:
    vmanyware_operation:
      description: The public view of the operation (as M(vmanyware.proxmox.vmanyware_operation_info) returns it).
      type: dict
      returned: with O(set_operation_fact=true)
error_code:
  description:
    - On failure, the fixed error code (see C(docs/errors.md)), for example V(stage_precondition_failed), V(stage_out_of_order),
      V(conflict), V(locked), V(task_failed), V(outcome_uncertain), V(plan_changed), V(provisioning_disabled), V(vmid_taken).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import stage_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage

ENTRY = stage_entry(lambda params: CloneStage())


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
