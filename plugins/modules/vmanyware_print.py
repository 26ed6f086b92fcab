#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_print
short_description: Print text as it is in the play's output, for a block the user saves as a file
version_added: 0.2.0
description:
  - Prints O(text) line by line as it is, without the JSON quoting of C(ansible.builtin.debug) (which shows a multi-line string as
    one quoted line with literal C(\n) in it), so that the printed block can be copied and saved as is. The C(provision) role prints
    its confirmation block with it (YAML, with its explanation as C(#) comments).
  - Runs only as its action plugin on the controller (in Ansible's worker); contacts no host, changes nothing, takes no connection
    options. The text is not returned, so it is printed once whatever the verbosity.
author:
  - vmanyware developers (@vmanyware)
options:
  text:
    description: The text to print. A final line break is not doubled.
    type: str
    required: true
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details: The whole module is its action plugin; no module process runs.
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
    support: full
    details: Prints the same text; nothing changes in either mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
    support: none
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
    support: full
    details: Never changed.
"""

EXAMPLES = r"""
- name: Print the block to save as confirm.yml
  vmanyware.proxmox.vmanyware_print:
    text: "{{ '# save this block as confirm.yml\n' ~ ({'provision_confirmation': confirmation} | to_nice_yaml(indent=2)) }}"
"""

RETURN = r"""
changed:
  description: Always V(false).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule


def main() -> None:
    # Only reached without the action plugin (never in a normal run): print nothing, fail clearly.
    module = AnsibleModule(argument_spec={"text": {"type": "str", "required": True}}, supports_check_mode=True)
    module.fail_json(
        msg="vmanyware_print runs only as its action plugin on the controller.", error_code="invalid_option"
    )


if __name__ == "__main__":
    main()
