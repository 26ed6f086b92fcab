# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: check_table
short_description: Format preflight checks, operation stages or the history of operations as aligned lines, one per entry
version_added: 0.1.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Turns the RV(vmanyware.proxmox.vmanyware_preflight#module:checks) list into lines
    C(<status> <code> <message>), the C(stages) list of an operation
    (M(vmanyware.proxmox.vmanyware_operation_info)) into lines C(<position> <kind> <status>), the
    RV(vmanyware.proxmox.vmanyware_capabilities#module:operations) list into lines C(<status> <operation> via <api or ssh>) followed by the reasons,
    or the C(operations) listed by M(vmanyware.proxmox.vmanyware_operation_info) without an operation id into lines
    C(<created_at> <operation_id> <status> <node>/<vmid> <definition_name> <failure_code>).
  - Columns are padded so the lines read as a table in C(ansible-playbook) output and AWX job events.
options:
  _input:
    description: >-
      A list of checks (with C(status), C(code), C(message)), of stages (with C(position), C(kind), C(status)), of
      capability operations (with C(status), C(operation), C(via), C(reasons)) or of listed operations
      (with C(operation_id), C(created_at), C(status)).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Print the preflight checks
  ansible.builtin.debug:
    msg: "{{ preflight.checks | vmanyware.proxmox.check_table }}"

- name: Print the history of operations
  ansible.builtin.debug:
    msg: "{{ history.operations | vmanyware.proxmox.check_table }}"
"""

RETURN = r"""
_value:
  description: One line per entry.
  type: list
  elements: str
"""

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.text_table import aligned_lines, check_row


def _cells(entry: t.Mapping[str, t.Any]) -> list[str]:
    if "operation_id" in entry and "created_at" in entry:
        return [
            str(entry["created_at"])[:19].replace("T", " "),
            str(entry["operation_id"]),
            str(entry.get("status", "")),
            "%s/%s" % (entry.get("target_node", ""), entry.get("target_vmid", "")),
            str(entry.get("definition_name") or ""),
            str(entry.get("failure_code") or ""),
        ]
    if "operation" in entry:
        reasons = "; ".join(
            str(reason.get("message", "")) for reason in entry.get("reasons") or [] if isinstance(reason, t.Mapping)
        )
        return [
            str(entry.get("status", "")),
            str(entry.get("operation", "")),
            "via " + str(entry.get("via", "")) + (": " + reasons if reasons else ""),
        ]
    if "code" in entry:
        return check_row(entry)
    if "kind" in entry:
        upid = " " + str(entry["upid"]) if entry.get("upid") else ""
        return [str(entry.get("position", "")), str(entry.get("kind", "")), str(entry.get("status", "")) + upid]
    raise AnsibleFilterError("check_table expects preflight checks, operation stages or capability operations")


def check_table(entries: t.Any) -> list[str]:
    """Filter: checks or stages -> aligned lines."""
    if not isinstance(entries, list) or not all(isinstance(entry, t.Mapping) for entry in entries):
        raise AnsibleFilterError("check_table expects a list of mappings")
    return aligned_lines([_cells(entry) for entry in entries])


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"check_table": check_table}
