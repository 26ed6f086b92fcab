#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_provision
short_description: Run every remaining stage of a VM operation in one task
version_added: 0.2.0
description:
  - Runs the remaining declared stages of an operation created by M(vmanyware.proxmox.vmanyware_operation) in their declared order
    (clone, resources, disk, cloudinit, seed, start, readiness, packages, snapshot, as the plan declares them), one after another in
    one task. Each stage runs exactly as its own module runs it (M(vmanyware.proxmox.vmanyware_clone) and the others, which stay
    for step-by-step use) - the same journal protocol, the gates re-read before every new write, a lost reply resolved by reads
    only and never sent again, and the same preconditions and read-back observation.
  - With O(confirmation) instead of O(operation_id) it records the confirmed operation itself, or finds it again, exactly
    as M(vmanyware.proxmox.vmanyware_operation) does (O(vmanyware.proxmox.vmanyware_operation#module:state=present)) with the same
    options (the plan inputs O(catalog_path) or O(catalog), O(definition_path) or O(definition) and O(target_vmid), and
    O(idempotency_key), O(provisioning_enabled)) - the same gates, the same check of the confirmation against the plan computed
    again from those inputs, and no Proxmox write before the operation is recorded. A confirmation that is missing,
    incomplete or names another plan fails exactly as there (C(confirmation_required) with the block in
    RV(error_details.expected_confirmation), C(plan_changed), ...) with nothing recorded or sent. With O(preflight=true) the
    preflight runs after those checks and before the record, on the document the record would write; checks that do not pass
    stop a new operation with nothing recorded (no operation to abandon; a VMID lease stays a lease). The provision role's
    confirmed one-task path runs that way.
  - Stops at the first stage that fails, with that stage's error code; RV(stages) then lists every stage this run reached with its
    result. The operation keeps the guest; re-running the module continues from the journal (completed stages are not run again).
  - A stage whose write carries the configuration's C(digest) (resources, disk, cloudinit) takes the VM configuration the previous
    stage read back moments ago in this run instead of reading it again; Proxmox refuses the write if the configuration changed
    since (RV(reads_saved)). The seed and start stages, whose writes carry no digest, read the configuration, the pending changes
    and the power state themselves right before sending, so another client's change since the previous stage (C(sshkeys), say)
    stops the run there.
  - The power state read moments ago (at most 5 seconds, and only while this run sent nothing but configuration, resize and
    Cloud-Init updates, which never change it) serves the preconditions of readiness only (Proxmox refuses guest agent requests
    to a VM that is not running). Any other write, and any write without a normal reply, makes the next check read. Lost replies
    are always resolved by fresh reads.
  - Prints one progress line per stage and, while a stage runs long, one every O(progress_interval) seconds (when it runs in
    Ansible's worker on the controller, the default; the lines are also returned in RV(log)).
  - With O(preflight=true) (in check mode too) the run first makes the read-only checks of M(vmanyware.proxmox.vmanyware_preflight)
    (the same code) of the operation's plan and catalog mapping, on the same connection as the stages, one progress
    line per check, and returns them in RV(preflight). The clone stage then takes the template configuration and the answer
    "VMID free" the preflight read moments ago instead of reading them again (Proxmox decides both again when it clones; see
    C(docs/stages.md)).
  - When the checks do not pass (O(preflight_fail_on)) and the operation has not begun (no stage was ever dispatched), the run
    fails with C(preflight_failed) before sending anything - with O(confirmation) and a new operation, before recording it (nothing
    recorded); with O(operation_id) the operation stays recorded with every stage pending (a re-run resumes it; to plan
    differently abandon it first). In check mode the preview stops the same way, with the checks in RV(preflight). When it has
    begun (its VM may exist already, so the VMID check fails), the stages resume, with a warning.
  - Only for VM operations. A container operation's stages run with M(vmanyware.proxmox.vmanyware_container).
  - The protocol every stage follows is described in C(docs/stages.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
options:
  readiness_timeout:
    description: The readiness stage's deadline in seconds (as O(vmanyware.proxmox.vmanyware_readiness#module:readiness_timeout)).
    type: float
    default: 300
  packages_timeout:
    description: Bound in seconds for each guest command of the packages stage (as M(vmanyware.proxmox.vmanyware_packages)).
    type: float
    default: 900
  profile_connection:
    description:
      - The transport the profile stages will run through (O(vmanyware.proxmox.vmanyware_profile#module:guest_connection)), named by
        the check-mode preview of each profile stage with the command each task becomes. This module never runs a profile itself.
      - Unset - V(qga), the default of a VM. V(pct) is for containers - the preview fails with C(profile_transport_unsupported).
    type: str
    choices: [qga, ssh, pct]
  snapshots_enabled:
    description:
      - Opens the snapshots gate for the snapshot stage when E(VMANYWARE_SNAPSHOTS_ENABLED) is unset (or empty).
      - An environment value of exactly C(false) wins over this option.
    type: bool
  progress_interval:
    description: At most this many seconds between two progress lines while a stage runs long (each stage also prints one when it ends).
    type: float
    default: 30
  preflight:
    description:
      - Run the preflight's read-only checks of the operation's plan before the first stage (and, with O(confirmation), before
        recording the operation; in check mode too; not when no stage remains to run). See the description for what checks
        that do not pass do.
    type: bool
    default: false
  preflight_fail_on:
    description:
      - As O(vmanyware.proxmox.vmanyware_preflight#module:fail_on) - V(failed) counts failed checks, V(unknown) also checks that
        reads could decide but left unknown, V(never) no result.
    type: str
    choices: [failed, unknown, never]
    default: failed
  confirmation:
    description:
      - Record the confirmed operation in this task, then run its stages (see the description); mutually exclusive with
        O(operation_id). The block exactly as M(vmanyware.proxmox.vmanyware_operation) returned it in
        RV(vmanyware.proxmox.vmanyware_operation#module:error_details.expected_confirmation), with C(confirmed=true).
      - Needs O(target_vmid), O(definition_path) or O(definition), and O(catalog_path) or O(catalog) (which is then the plan's
        catalog as well as the one every write checks the mapping against); C(invalid_option) otherwise.
    type: dict
  definition_path:
    description:
      - With O(confirmation), the environment definition file (as
        O(vmanyware.proxmox.vmanyware_operation#module:definition_path)). Mutually exclusive with O(definition).
    type: path
  definition:
    description:
      - With O(confirmation), the environment definition as YAML text or a dictionary (as
        O(vmanyware.proxmox.vmanyware_operation#module:definition)).
    type: raw
  target_vmid:
    description: With O(confirmation), the VMID of the new VM (as O(vmanyware.proxmox.vmanyware_operation#module:target_vmid)).
    type: int
  target_node:
    description: With O(confirmation), the node of the new VM (as O(vmanyware.proxmox.vmanyware_operation#module:target_node)).
    type: str
  addresses:
    description: With O(confirmation), the addresses leased for C(address) V(auto) (as O(vmanyware.proxmox.vmanyware_operation#module:addresses)).
    type: dict
  presets_path:
    description: With O(confirmation), the presets directory (as O(vmanyware.proxmox.vmanyware_operation#module:presets_path)).
    type: path
  presets:
    description: With O(confirmation), the presets inline (as O(vmanyware.proxmox.vmanyware_operation#module:presets)).
    type: list
    elements: raw
  profiles_path:
    description: With O(confirmation), the profile declarations directory (as O(vmanyware.proxmox.vmanyware_operation#module:profiles_path)).
    type: path
  profiles:
    description: With O(confirmation), the profile declarations inline (as O(vmanyware.proxmox.vmanyware_operation#module:profiles)).
    type: list
    elements: raw
  ssh_key_sources:
    description: With O(confirmation), the SSH key sources (as O(vmanyware.proxmox.vmanyware_operation#module:ssh_key_sources)).
    type: list
    elements: dict
  idempotency_key:
    description:
      - With O(confirmation), as O(vmanyware.proxmox.vmanyware_operation#module:idempotency_key) (default
        C(<planHash>@<providerScopeId>)); the same key and confirmation find the operation recorded before.
    type: str
  known_hosts_path:
    description:
      - Once every stage is completed, install the operation's agent-verified SSH host keys (its hand-off's C(known_hosts), read by
        readiness through the guest agent) in this known_hosts file on the controller, as M(vmanyware.proxmox.vmanyware_known_hosts)
        installs them (one marked block per operation, mode 0600, under a lock); RV(known_hosts) says what changed.
      - Nothing is installed while a stage remains, and in check mode the file is not written.
    type: path
extends_documentation_fragment:
  - vmanyware.proxmox.stage
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
attributes:
  check_mode:
    support: full
    details:
      - A preview of each remaining stage - the first pending stage runs its reads and returns the exact requests it would send; the
        stages after it list the requests the plan implies (they depend on the earlier ones). Writes nothing.
  diff_mode:
    support: full
    details: The diff of the first stage this run reaches that has one.
  idempotent:
    support: full
    details: Completed stages return their compact record without sending anything; a completed operation sends nothing.
requirements:
  - PyYAML
  - jsonschema
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Run every stage of the confirmed operation
  vmanyware.proxmox.vmanyware_provision:
    operation_id: "{{ operation.operation_id }}"
    catalog_path: files/catalog.yml
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem
  register: provisioned

- name: Show what each stage did
  ansible.builtin.debug:
    msg: "{{ provisioned.stages | map(attribute='kind') | zip(provisioned.stages | map(attribute='status')) | list }}"

- name: Record the confirmed operation, check its plan, then run every stage (the provision role's confirmed path)
  vmanyware.proxmox.vmanyware_provision:
    catalog_path: files/catalog.yml
    definition_path: files/kernel-lab.yml
    target_vmid: 201
    confirmation: "{{ reviewed_confirmation }}"
    preflight: true
    preflight_fail_on: failed
    known_hosts_path: ~/.ssh/vmanyware_known_hosts
  register: provisioned

- name: Show the preflight checks
  ansible.builtin.debug:
    msg: "{{ provisioned.preflight.checks | vmanyware.proxmox.check_table }}"
"""

RETURN = r"""
changed:
  description: Whether any stage of this run sent a request that changed the VM.
  returned: always
  type: bool
done:
  description:
    - Whether every declared stage is completed. V(false) in check mode, and when O(wait_budget) passed first (re-run to continue).
  returned: always
  type: bool
operation_id:
  description: The operation (with O(confirmation), the one this task recorded or found).
  returned: always, except when O(confirmation) failed before an operation was recorded
  type: str
created:
  description: Whether this run recorded the operation (V(false) when the same confirmation found it recorded before, and in check mode).
  returned: with O(confirmation), on success
  type: bool
status:
  description: The operation's status after this run (V(completed) once every stage completed).
  returned: success
  type: str
stages:
  description:
    - One entry per stage this run reached, in order. On failure the last entry is the failed stage.
  returned: always
  type: list
  elements: dict
  contains:
    kind:
      description: The stage kind.
      type: str
      returned: always
    position:
      description: Position of the stage in the operation.
      type: int
      returned: always
    status:
      description: The stage's journal status after this run (V(failed) for the stage that stopped the run).
      type: str
      returned: always
    changed:
      description: Whether this stage sent a request that changed the VM in this run.
      type: bool
      returned: always
    done:
      description: Whether the stage is completed.
      type: bool
      returned: always
    seconds:
      description: Seconds this run spent on the stage.
      type: float
      returned: always
    requests:
      description: The mutating requests the stage sent (or in check mode would send), as the stage modules return them.
      type: list
      elements: dict
      returned: when the stage did not fail
    error_code:
      description: The stage's error code.
      type: str
      returned: for the failed stage
requests:
  description: Every mutating request of this run (or in check mode, of the preview), in order (method, path, params, cli; no secret).
  returned: success
  type: list
  elements: dict
reads_saved:
  description:
    - Precondition reads this run did not repeat because it had read them moments ago - the VM configuration and power state,
      and with O(preflight=true) the template configuration and the VMID check.
  returned: success
  type: int
preflight:
  description:
    - The preflight's result with O(preflight=true), as M(vmanyware.proxmox.vmanyware_preflight) returns it - C(checks) (C(code),
      C(status), C(message), in fixed order), C(summary), C(plan_hash), C(provider_scope_id), C(creation_enabled),
      C(creation_blockers), C(tls_verified), C(vmid_reserved), C(capabilities).
    - Also returned on failure, C(preflight_failed) included.
  returned: with O(preflight=true), when a stage remained to run
  type: dict
known_hosts:
  description: What installing the host keys did, as M(vmanyware.proxmox.vmanyware_known_hosts) returns it (C(path), C(outcome), C(lines), C(changed)).
  returned: with O(known_hosts_path), once the operation is completed
  type: dict
progress:
  description: Progress of the stage still running when O(wait_budget) passed.
  returned: when RV(done=false) outside check mode
  type: dict
diff:
  description: Before and after of the first stage this run reached that has a diff (with C(--diff)).
  returned: in diff mode
  type: dict
log:
  description: The progress lines of this run (one per stage, one per O(progress_interval) of a long stage).
  returned: always
  type: list
  elements: str
  sample: ["stage 1/8 clone: completed in 2.1 s", "stage 2/8 resources: completed in 0.1 s"]
log_shown:
  description: Whether the lines of RV(log) (the preflight's checks among them) were printed while the task ran (the in-process run on the
    controller); the provision role shows them again only when they were not.
  returned: success
  type: bool
ansible_facts:
  description: Facts set by the module, only when asked (O(set_operation_fact=true)).
  returned: with O(set_operation_fact=true)
  type: dict
  contains:
    vmanyware_operation:
      description: The public view of the operation (as M(vmanyware.proxmox.vmanyware_operation_info) returns it).
      type: dict
      returned: with O(set_operation_fact=true)
error_code:
  description:
    - On failure, the failed stage's fixed error code (see C(docs/errors.md)), for example V(task_failed) or V(outcome_uncertain).
    - With O(confirmation), before anything is recorded, the code of M(vmanyware.proxmox.vmanyware_operation), for example
      V(confirmation_required) or V(plan_changed).
  returned: failure
  type: str
error_details:
  description: Safe details of a failure.
  returned: failure
  type: dict
  contains:
    expected_confirmation:
      description: The confirmation block of the freshly computed plan (as M(vmanyware.proxmox.vmanyware_operation) returns it).
      type: dict
      returned: with O(confirmation), on V(confirmation_required) and V(plan_changed)
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import provision_entry

ENTRY = provision_entry()


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
