#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_known_hosts
short_description: Install an operation's agent-verified SSH host keys as one marked block of a known_hosts file
version_added: 0.2.0
description:
  - Keeps one block per operation in a known_hosts file on the controller, between the lines C(# BEGIN vmanyware <operation id>)
    and C(# END vmanyware <operation id>) - the block the C(provision) role wrote with C(ansible.builtin.blockinfile) before,
    which is updated in place. Only that block changes; every other line of the file stays as it is. A missing block is
    added at the end of the file; with no O(known_hosts) lines the block is removed, markers included.
  - The lines are the ones readiness read through the guest agent and recorded in the operation's hand-off
    (C(handoff.known_hosts) of M(vmanyware.proxmox.vmanyware_operation_info)); the module writes them as given.
  - Creates the file with mode 0600 (and a missing directory with mode 0700) and sets mode 0600 on an existing one. The new text
    replaces the file atomically, under a lock (C(<path>.lock)) so that the parallel hosts of one play can write their
    blocks into the same file. A symbolic link is followed.
  - Runs in Ansible's worker on the controller (no module process), like every module of the collection; it contacts no
    Proxmox host. It takes no connection options; a C(module_defaults) entry for the action group
    C(group/vmanyware.proxmox.proxmox) may still set them, they are left out for this module.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.attributes
options:
  path:
    description: The known_hosts file on the controller (for example the one C(UserKnownHostsFile) names for the guest's SSH connection).
    type: path
    required: true
  operation_id:
    description: The operation whose block this is (the block's markers name it).
    type: str
    required: true
  known_hosts:
    description:
      - The block's lines, one known_hosts entry each (C(<host> <key type> <base64 key>)), in this order.
      - An empty list removes the operation's block.
    type: list
    elements: str
    required: true
attributes:
  check_mode:
    support: full
    details: Returns the result and diff the run would have; writes nothing.
  diff_mode:
    support: full
    details: The file's text before and after.
  idempotent:
    support: full
    details: Changed only when the block's text or the file's mode changes.
requirements: []
"""

EXAMPLES = r"""
- name: Install the agent-verified SSH host keys of the new VM
  vmanyware.proxmox.vmanyware_known_hosts:
    path: ~/.ssh/vmanyware_known_hosts
    operation_id: "{{ info.operation.operation_id }}"
    known_hosts: "{{ info.operation.handoff.known_hosts }}"
  when: info.operation.handoff.known_hosts is defined

- name: Remove them again (for example after the cleanup of the guest)
  vmanyware.proxmox.vmanyware_known_hosts:
    path: ~/.ssh/vmanyware_known_hosts
    operation_id: "{{ info.operation.operation_id }}"
    known_hosts: []
"""

RETURN = r"""
changed:
  description: Whether the file's text or mode changed (in check mode, would change).
  returned: always
  type: bool
path:
  description: The known_hosts file, as given in O(path).
  returned: success
  type: str
outcome:
  description:
    - V(created) (the file did not exist), V(written) (the block was added or replaced), V(removed) (an empty O(known_hosts)
      removed the block), V(mode) (only the file's mode was set to 0600) or V(unchanged).
  returned: success
  type: str
  sample: written
lines:
  description: How many lines the block holds after this run.
  returned: success
  type: int
diff:
  description: The file's text before and after (with C(--diff)).
  returned: in diff mode
  type: dict
error_code:
  description: On failure, the fixed error code (V(invalid_option) for a line that is not one known_hosts entry, V(io_error)).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.known_hosts import install_block
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry


def argument_spec() -> dict:
    spec: dict = {}
    spec["path"] = {"type": "path", "required": True}
    spec["operation_id"] = {"type": "str", "required": True}
    spec["known_hosts"] = {"type": "list", "elements": "str", "required": True}
    return spec


def action(params, check_mode, diff) -> dict:
    return install_block(
        params["path"], params["operation_id"], params["known_hosts"], check_mode=check_mode, diff=diff
    )


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
