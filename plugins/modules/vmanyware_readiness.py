#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_readiness
short_description: Wait until the guest is ready through the QEMU guest agent (stage readiness)
version_added: 0.2.0
description:
  - Stage C(readiness) of an operation. Sends no configuration change; uses the guest agent read-only
    (C(agent/ping), one C(cloud-init status --long --wait) through C(agent/exec) whose C(agent/exec-status) is polled until
    cloud-init finished, C(agent/network-get-interfaces), C(agent/file-read) of the SSH host public keys).
  - Ready means cloud-init reports C(done) and the interface with net0's MAC has a usable IPv4 (not loopback, not link-local).
  - The deadline (O(readiness_timeout)) is journaled when the stage first starts and never extended by re-runs; each probe's PID is
    journaled before it is polled.
  - Returns the address, the guest user and ready-made C(known_hosts) lines with SHA256 fingerprints of the host keys as read through
    the agent. Readiness never grants SSH trust itself; compare the fingerprints through a channel you trust before using them.
  - Fails with C(guest_agent_unavailable), C(guest_network_unavailable), C(readiness_timeout), C(cloudinit_failed) or
    C(guest_exec_unavailable); these fail the stage.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  readiness_timeout:
    description:
      - Seconds from the stage's first start until the guest must be ready. Journaled once; re-runs keep the first deadline.
    type: float
    default: 300
attributes:
  check_mode:
    support: full
    details: Reads the VM's power state and identity only; no guest agent command runs. Returns C(done=false).
  diff_mode:
    support: none
    details: The stage changes nothing.
  idempotent:
    support: full
    details: A completed stage returns its compact record with C(changed=false) and sends nothing.
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Run the readiness stage of an operation
  vmanyware.proxmox.vmanyware_readiness:
    operation_id: "{{ operation.operation_id }}"
    readiness_timeout: 600
    wait_budget: 60
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem
  register: stage

- name: Read the recorded evidence
  vmanyware.proxmox.vmanyware_operation_info:
    operation_id: "{{ operation.operation_id }}"
    evidence: true
  register: info

- name: Trust the host keys only after comparing the fingerprints out of band
  ansible.builtin.debug:
    msg: "{{ (info.operation.stages | selectattr('kind', 'equalto', 'readiness') | first).evidence.hostKeyFingerprints }}"
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
      description: V(readiness).
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
progress:
  description:
    - What the stage is waiting for when RV(done=false) - its still running Proxmox task, or the phase its probes
      reached.
  returned: when the stage is still in progress
  type: dict
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
      V(conflict), V(locked), V(task_failed), V(outcome_uncertain), V(plan_changed), V(provisioning_disabled), V(readiness_timeout),
      V(guest_agent_unavailable).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import stage_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import ReadinessStage

ENTRY = stage_entry(
    lambda params: ReadinessStage(readiness_timeout=params["readiness_timeout"]),
    {"readiness_timeout": {"type": "float", "default": 300.0}},
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
