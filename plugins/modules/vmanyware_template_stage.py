#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_template_stage
short_description: Run one stage of a template build operation
version_added: 0.2.0
description:
  - Runs the stage O(stage) of an operation created by M(vmanyware.proxmox.vmanyware_template_operation), on the same protocol as the
    VM stages - preconditions by C(GET), the dispatch recorded in the journal before the request, a known task reconciled by C(GET),
    a lost reply resolved by reads only (never sent again; the stage stays C(uncertain) when reads cannot decide), an independent
    read-back. Check mode returns the exact request the stage would send.
  - V(download) - C(POST .../storage/{importStorage}/download-url) with the checksum; a mismatch fails with C(image_checksum_mismatch).
  - V(create) - C(POST /nodes/{node}/qemu) (q35, OVMF with efidisk0, virtio-scsi-single, C(import-from), Cloud-Init drive, serial0,
    guest agent), bound to the operation by description and tag. V(disk) - grow the disk to C(diskGiB) when declared.
  - V(configure) - the preparation boot's C(ciuser), ephemeral C(sshkeys) (O(build_ssh_public_key); only its fingerprint is
    journaled) and static C(ipconfig0). V(start) - boot it.
  - V(prepare) and V(generalize) send nothing - the role works in the guest over SSH and reports O(prepared_by), O(passwd_status) and
    O(authorized_keys_left); V(prepare) waits until the guest agent answers through the API.
  - V(shutdown) (no force unless O(force_stop)), V(unconfigure) (delete C(ipconfig0), C(sshkeys), C(ciuser)), V(convert)
    (C(POST .../template)), V(stamp) (tags and description; returns the catalog mapping).
  - See C(docs/templates.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  stage:
    description: The stage to run; stages run in plan order.
    type: str
    required: true
    choices: [download, create, disk, configure, start, prepare, generalize, shutdown, unconfigure, convert, stamp]
  build_ssh_public_key:
    description: The public half of the ephemeral key of this run (V(configure) only). The private key stays with the role.
    type: str
  prepared_by:
    description:
      - How the guest was prepared (V(prepare), V(generalize)). V(ssh) - over SSH with Ansible's modules.
      - V(stand-in) - a simulated guest that cannot be reached; recorded as such, written into the stamp, never attested.
    type: str
    choices: [ssh, stand-in]
  passwd_status:
    description: The output line of C(passwd -S <guestUser>) in the guest after generalizing (V(generalize), with V(ssh)).
    type: str
  authorized_keys_left:
    description: How many keys the guest user's C(authorized_keys) holds after generalizing (V(generalize), with V(ssh)).
    type: int
  force_stop:
    description: V(shutdown) only - let Proxmox stop the VM when the guest does not shut down in time.
    type: bool
    default: false
  write_check:
    description:
      - V(prepare) and V(generalize) only - do not run the stage; re-read its gate right before the role writes in the guest over SSH
        (installing packages, starting the agent, generalizing), with the stages' rule (C(VMANYWARE_PROVISIONING_ENABLED) exactly
        V(false) wins over O(provisioning_enabled); empty is unset), as M(vmanyware.proxmox.vmanyware_container) does for its apt.
      - A closed gate fails with C(provisioning_disabled); the stage stays C(pending). Sends and records nothing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Runs the same reads and returns the exact request it would send in RV(requests); writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A completed stage returns its recorded evidence without sending anything.
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Download the image (following the task for at most 30 s per run)
  vmanyware.proxmox.vmanyware_template_stage:
    operation_id: "{{ template_operation.operation_id }}"
    stage: download
    wait_budget: 30
  register: download
  until: download.done
  retries: 120

- name: Re-read the provisioning gate right before installing packages in the guest over SSH
  vmanyware.proxmox.vmanyware_template_stage:
    operation_id: "{{ template_operation.operation_id }}"
    stage: prepare
    write_check: true
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
write_allowed:
  description: With O(write_check=true), V(true) when the gate is open and the role's write in the guest may follow.
  returned: with O(write_check=true), while the stage is not completed
  type: bool
stage:
  description:
    - The stage as recorded in the journal after this run, compact. Its evidence (what the read-back recorded) is
      in M(vmanyware.proxmox.vmanyware_operation_info) with O(vmanyware.proxmox.vmanyware_operation_info#module:evidence=true).
  returned: always
  type: dict
  contains:
    kind:
      description: The template build stage (V(download), V(create), V(disk), V(configure), V(start), V(prepare),
        V(generalize), V(shutdown), V(unconfigure), V(convert) or V(stamp)).
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
    - Each entry also has C(cli), the equivalent command on the node (C(qm create ...), C(qm set ...), C(qm template
      ...)), when one exists.
    - Empty when nothing was (or would be) sent.
  returned: always
  type: list
  elements: dict
catalog_mapping:
  description: V(stamp) once done - the catalog mapping of the new template (C(sourceDiskGiB) as observed; C(imageDefaultUser)
    only when the build verified a locked password and no authorized keys itself).
  returned: when O(stage=stamp) is done
  type: dict
catalog_mapping_yaml:
  description: RV(catalog_mapping) as YAML, one list item ready to paste under C(images:) of a catalog.
  returned: when O(stage=stamp) is done
  type: str
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
      V(conflict), V(locked), V(task_failed), V(outcome_uncertain), V(plan_changed), V(provisioning_disabled), V(image_checksum_mismatch),
      V(vmid_taken).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import (
    open_store,
    run_stage,
    stage_argument_spec,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import TEMPLATE, module_stage_kinds
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.template.common import (
    GUEST_WRITE_STAGES,
    PREPARED_BY,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.template.stamp import stamp_output
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import template_stage


def argument_spec() -> dict:
    spec = stage_argument_spec()
    spec.update(
        {
            "stage": {"type": "str", "required": True, "choices": list(module_stage_kinds(TEMPLATE))},
            "build_ssh_public_key": {"type": "str"},
            "prepared_by": {"type": "str", "choices": list(PREPARED_BY)},
            "passwd_status": {"type": "str", "no_log": False},  # the status line of passwd -S: no secret
            "authorized_keys_left": {"type": "int", "no_log": False},
            "force_stop": {"type": "bool", "default": False},
            "write_check": {"type": "bool", "default": False},
        }
    )
    return spec


def action(params, check_mode, diff) -> dict:
    if params.get("write_check") and params["stage"] not in GUEST_WRITE_STAGES:
        raise InputError(
            "write_check is only for stage=prepare and stage=generalize.", code="invalid_option", path="write_check"
        )
    result = run_stage(params, template_stage(params["stage"], params), check_mode=check_mode, diff=diff)
    if result.get("done") and not check_mode and (result.get("stage") or {}).get("kind") == "stamp":
        # The result is compact (no evidence): the stamp's mapping is read back from the journal record.
        result.update(stamp_output(open_store(params.get("journal_dir")).load(params["operation_id"])))
    return result


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action, libraries=("requests",))


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
