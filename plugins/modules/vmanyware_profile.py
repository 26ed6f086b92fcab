#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_profile
short_description: Run one profile's role against the operation's guest (stage profile)
version_added: 0.3.0
description:
  - Stage C(profile:<name>) of an operation whose plan requests profiles (one stage per profile, after C(packages) and before
    C(snapshot), in the plan's run order).
  - Runs the profile's role with the plan's variables in a nested C(ansible-playbook) on the controller, against the guest through the
    transport O(guest_connection) - a VM through the C(vmanyware.proxmox.qga) connection (default) or SSH with the agent-verified host
    keys of the readiness stage; a container over SSH into it (default, with the operator's known_hosts) or by C(pct exec) over SSH
    to its node (P(vmanyware.proxmox.pct#connection)). The API connection reaches the nested run in its environment only (qga); the
    variables in a 0600 extra-vars file that is removed afterwards.
  - The journal records the dispatch before the nested run starts and the evidence (changed, ok, failed and unreachable task counts,
    seconds) after it. A completed stage is skipped; a plan entry baked into the template (C(run=false)) is skipped with its reason.
  - A stage found dispatched but unfinished (the controller died), a failed nested run and a cancelled one leave the stage
    C(uncertain); it runs again only with O(rerun_uncertain_profile=true). See C(docs/profiles.md), "Running profiles" in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.node_ssh
  - vmanyware.proxmox.attributes
options:
  operation_id:
    description:
      - The operation returned by M(vmanyware.proxmox.vmanyware_operation). Required, except in check mode with O(preview_operation).
    type: str
  preview_operation:
    description:
      - Check mode only, the C(preview_document) that M(vmanyware.proxmox.vmanyware_operation) returned in check mode.
    type: dict
  profile:
    description: The profile's name, as the plan's C(profiles) list names it.
    type: str
    required: true
  guest_connection:
    description:
      - V(qga) (VMs) reaches the guest through the Proxmox API and its guest agent (the connection options of this task, passed to the
        nested run as E(PROXMOX_*) environment variables).
      - V(ssh) goes through SSH to the readiness address as the guest user with C(StrictHostKeyChecking=yes) - for a VM against the host
        keys the readiness stage verified through the agent; for a container against O(known_hosts_file), which must hold the
        container's key under its recorded address (C(HostKeyAlias); containers have no API to read it, nothing is trusted on first
        use).
      - V(pct) (containers) runs each task with C(pct exec) over SSH to the container's node (P(vmanyware.proxmox.pct#connection),
        pipelining on), with O(node_ssh); the route is probed read-only before the stage is dispatched.
      - Unset - V(qga) for a VM, V(ssh) for a container. A transport the guest type cannot take fails with
        C(profile_transport_unsupported) before anything runs or is recorded, check mode included.
    type: str
    choices: [qga, ssh, pct]
  ssh_host:
    description:
      - SSH transport - connect here instead of the recorded address (a port forward or NAT in front of the guest); the host key is
        still looked up under the recorded address (C(HostKeyAlias)).
    type: str
  ssh_port:
    description: SSH transport - the port of that connection (default 22).
    type: int
  ssh_private_key_file:
    description: SSH transport - the private key to log in with (default - the SSH client's).
    type: path
  known_hosts_file:
    description:
      - SSH transport into a container (required there) - the operator's known_hosts file with the container's host key under its recorded
        address. Without that key the stage fails with C(stage_precondition_failed) (rule V(host_key_unknown)) before anything runs.
      - Not used for a VM, whose keys the readiness stage verified through the guest agent.
    type: path
  node_ssh:
    description:
      - The node SSH route of the V(pct) transport (required there), as O(vmanyware.proxmox.vmanyware_capabilities#module:node_ssh) takes
        it. The node is the operation's target node, reached at its O(node_ssh.endpoints) entry or by its name.
      - Before the dispatch a read-only probe logs in (the node's host key verified), finds C(pct) and the container running; a failure
        is its C(node_ssh_*) code and the stage stays pending.
    type: dict
  rerun_uncertain_profile:
    description:
      - Run an C(uncertain) profile stage again (its earlier run may have applied part of the role). Without it such a stage fails
        with C(profile_uncertain) and nothing runs. The journal records the re-run before it starts.
    type: bool
    default: false
  profile_timeout:
    description: Seconds the nested run may take; a longer one is ended and the stage becomes C(uncertain).
    type: float
    default: 3600
  profile_become:
    description: Run the role with C(become=true) (SSH as a non-root guest user); the guest agent runs commands as root already.
    type: bool
    default: false
  provisioning_enabled:
    description:
      - Opens the provisioning gate for this stage when E(VMANYWARE_PROVISIONING_ENABLED) is unset (or empty); an environment value of
        exactly C(false) wins. A closed gate fails with C(provisioning_disabled) and nothing runs.
    type: bool
attributes:
  check_mode:
    support: full
    details:
      - Returns the role, its variables, the transport the stage would use and the command each task becomes on it; nothing runs
        and nothing is recorded.
  diff_mode:
    support: none
    details: The role's own tasks change the guest; their diffs are not collected.
  idempotent:
    support: full
    details: A completed stage is skipped with C(changed=false).
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Run the docker-host profile of an operation through the guest agent
  vmanyware.proxmox.vmanyware_profile:
    operation_id: "{{ operation.operation_id }}"
    profile: docker-host
  register: profile

- name: Run the base profile in a container by pct exec over SSH to its node
  vmanyware.proxmox.vmanyware_profile:
    operation_id: "{{ operation.operation_id }}"
    profile: base
    guest_connection: pct
    node_ssh:
      private_key_file: /etc/vmanyware/pct_node_key
      known_hosts_file: /etc/vmanyware/pve_known_hosts
      endpoints:
        pve1: pve1.example.org

- name: Run an uncertain profile again after checking the guest
  vmanyware.proxmox.vmanyware_profile:
    operation_id: "{{ operation.operation_id }}"
    profile: ssh-hardening
    rerun_uncertain_profile: true
"""

RETURN = r"""
changed:
  description: Whether the role changed anything (its changed task count is above 0).
  returned: always
  type: bool
operation_id:
  description: The operation the stage belongs to.
  returned: always
  type: str
profile:
  description: The profile's name.
  returned: always
  type: str
skipped:
  description: V(true) when the plan entry is baked into the template and runs no stage.
  returned: when the profile is baked
  type: bool
reason:
  description: Why the profile did not run (baked into the template).
  returned: when the profile is baked
  type: str
stage:
  description: The stage as recorded after this run (C(kind) V(profile:<name>), C(position), C(status), C(attempts)).
  returned: when the profile has a stage
  type: dict
evidence:
  description:
    - The stage's evidence - C(changed), C(ok), C(failed), C(unreachable) task counts of the nested run, C(seconds), C(exitStatus),
      C(recapFound), C(role), C(transport).
  returned: when the stage completed
  type: dict
preview:
  description:
    - Check mode - the C(profile), C(version), C(role), C(vars) and C(transport) the run would use, and C(equivalent), the command line
      each task's command becomes on that transport (C(<task>) stands for it).
  returned: in check mode
  type: dict
log:
  description: The progress lines of this run (one per profile).
  returned: always
  type: list
  elements: str
error_code:
  description:
    - On failure, the fixed error code (see C(docs/errors.md)), for example V(profile_failed), V(profile_uncertain),
      V(stage_out_of_order), V(provisioning_disabled), V(run_cancelled), V(profile_transport_unsupported), a C(node_ssh_*) code.
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.profile import profile_entry

ENTRY = profile_entry()


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
