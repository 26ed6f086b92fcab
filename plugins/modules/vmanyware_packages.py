#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_packages
short_description: Install the declared packages in the guest through the guest agent (stage packages)
version_added: 0.2.0
description:
  - Stage C(packages) of an operation, present only when the definition declares packages.
  - C(dpkg-query) (through C(agent/exec), as the positional parameters of one fixed POSIX C(sh) wrapper that records a marker in the
    guest, never interpolated) decides what is missing; when everything is installed in the declared versions nothing is installed.
  - Otherwise runs C(apt-get update), then one C(apt-get install -y --no-install-recommends -- name[=version]...) with a fixed argument
    array, each PID journaled before it is polled, and verifies every package and version with C(dpkg-query).
  - A lost install reply is never re-run; C(dpkg-query) decides, else the stage stays C(uncertain).
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  packages_timeout:
    description:
      - Bound in seconds for each guest command of the stage (the install is bounded from its dispatch).
    type: float
    default: 900
attributes:
  check_mode:
    support: full
    details: Reads the VM and returns the install request for every declared package; no guest command runs.
  diff_mode:
    support: none
    details: The stage changes the guest, not the VM configuration.
  idempotent:
    support: full
    details: A completed stage returns its compact record with C(changed=false) and sends nothing.
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Run the packages stage of an operation
  vmanyware.proxmox.vmanyware_packages:
    operation_id: "{{ operation.operation_id }}"
    wait_budget: 120
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem
  register: stage
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
      description: V(packages).
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
      V(conflict), V(locked), V(task_failed), V(outcome_uncertain), V(plan_changed), V(provisioning_disabled).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import stage_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.packages import PackagesStage

ENTRY = stage_entry(
    lambda params: PackagesStage(packages_timeout=params["packages_timeout"]),
    {"packages_timeout": {"type": "float", "default": 900.0}},
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
