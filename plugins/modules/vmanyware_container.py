#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_container
short_description: Run one stage of a container operation (template, create, start, readiness, packages, snapshot)
version_added: 0.3.0
description:
  - Runs one stage of an operation whose plan has C(guestType=container) (see C(docs/containers.md)), through the same journaled
    protocol as the VM stages.
  - V(template) resolves the newest appliance matching the catalog's version glob and sends C(POST /nodes/{node}/aplinfo) only when it
    is missing; V(create) sends C(POST /nodes/{node}/lxc) once with the binding description, a MAC derived from the operation id and
    the definition's SSH keys; V(start) sends C(POST .../status/start); V(readiness) only reads C(GET .../interfaces) until the interface
    with the recorded MAC has a usable IPv4 (deadline journaled at the first start).
  - V(packages) verifies and records what the role installed over SSH (Proxmox has no exec API for containers); V(snapshot) takes
    one snapshot (C(vzsnapshot)) and needs the snapshots gate open too (E(VMANYWARE_SNAPSHOTS_ENABLED) or O(snapshots_enabled)).
  - Before every new write the gates are re-read (an environment V(false) wins over the options); when one is closed the module
    fails with C(provisioning_disabled) or C(snapshot_disabled), sends nothing and the stage stays pending. Unverified TLS is
    refused (C(tls_unverified)).
  - No container request is ever sent twice. A submission whose outcome is unknown is resolved by reads (the
    C(vzcreate)/C(vzstart)/C(download) task of the token, the binding description, the power state) within the run's wait budget;
    otherwise the stage stays C(uncertain) and the module says what to check.
  - Containers have no API to read their SSH host keys; readiness records C(hostKeysVerified=false).
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  stage:
    description:
      - The container stage to run. It must be a step of the operation's plan.
    type: str
    required: true
    choices: [template, create, start, readiness, packages, snapshot]
  installed:
    description:
      - For O(stage=packages) only. The installed packages as C(ansible.builtin.package_facts) reports them on the container
        (name to a list of C({version}) entries, or name to version). The stage sends nothing; it verifies every declared package
        (and declared version) against this and records it.
    type: dict
  write_check:
    description:
      - For O(stage=packages) only. Sends and records nothing. Re-reads the provisioning gate (an environment V(false) wins
        over O(provisioning_enabled)) and compares the catalog, and fails with the gate's code (C(provisioning_disabled)) or
        C(plan_changed) when the write that follows must not happen. The role runs this right before each of its package writes
        over SSH (C(apt) cache update, C(apt) install), which Proxmox never sees.
    type: bool
    default: false
  readiness_timeout:
    description:
      - Seconds from the readiness stage's first start until the container must have its IPv4. Journaled once; re-runs keep it.
    type: float
    default: 300
  snapshots_enabled:
    description:
      - For O(stage=snapshot) only. Opens the snapshots gate when E(VMANYWARE_SNAPSHOTS_ENABLED) is unset (or empty).
      - An environment value of exactly C(false) wins over this option.
    type: bool
attributes:
  check_mode:
    support: full
    details: Reads Proxmox and returns the request the stage would send (with its C(pct)/C(pveam) equivalent); writes nothing.
  diff_mode:
    support: full
    details: V(template), V(create) and V(start) return before and after.
  idempotent:
    support: full
    details: A completed stage returns its recorded evidence with C(changed=false) and sends nothing.
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Run the container stages of an operation in order
  vmanyware.proxmox.vmanyware_container:
    operation_id: "{{ operation.operation_id }}"
    stage: "{{ item }}"
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem
  loop: "{{ operation.operation.stages | map(attribute='kind') | select('in', ['template', 'create', 'start', 'readiness']) }}"
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
  description: With O(write_check=true), V(true) when the gates are open and the package write may follow.
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
      description: The container stage (V(template), V(create), V(start), V(readiness), V(packages) or V(snapshot)).
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
    - Each entry also has C(cli), the equivalent command on the node (C(pveam download ...), C(pct create ...),
      C(pct start ...)), when one exists.
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
      V(conflict), V(locked), V(task_failed), V(outcome_uncertain), V(plan_changed), V(provisioning_disabled), V(snapshot_disabled),
      V(tls_unverified).
  returned: failure
  type: str
"""


import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageLogic
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import stage_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import (
    CONTAINER,
    module_stage_kinds,
    stage_spec,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import build_logic


def _logic(params: dict[str, t.Any]) -> StageLogic:
    if params.get("write_check") and params["stage"] != "packages":
        raise InputError("write_check is only for stage=packages.", code="invalid_option", path="write_check")
    return t.cast(StageLogic, build_logic(stage_spec(params["stage"], CONTAINER), params))


ENTRY = stage_entry(
    _logic,
    {
        "stage": {"type": "str", "required": True, "choices": list(module_stage_kinds(CONTAINER))},
        "installed": {"type": "dict"},
        "write_check": {"type": "bool", "default": False},
        "readiness_timeout": {"type": "float", "default": 300.0},
        "snapshots_enabled": {"type": "bool"},
    },
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
