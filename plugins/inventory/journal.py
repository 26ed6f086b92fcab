# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: journal
short_description: Inventory of the guests that vmanyware provisioned, from the local operation journal
version_added: 0.2.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Reads a vmanyware operation journal directory (no Proxmox request) and adds one host per completed operation that recorded a
    guest address - the operations M(vmanyware.proxmox.vmanyware_operation_info) lists with the same filters.
  - C(ansible_host) is the IPv4 address the readiness stage recorded, C(ansible_user) the plan's guest user. The SSH host keys
    that the readiness stage read through the QEMU guest agent are written to a known_hosts file per operation (mode 0600, under
    O(known_hosts_dir)) and passed with C(-o StrictHostKeyChecking=yes -o UserKnownHostsFile=...), so SSH connects only to a
    host presenting exactly those keys.
  - The data is historical. Readiness was observed once, when the operation ran; it is not current reachability. A guest that was
    stopped, removed by hand or given another address since is still listed (a cleaned or abandoned operation is not, unless
    O(status) asks for it, and then it has no usable address).
  - Host names are C(<VM name>-<VMID>); when several listed operations have the same host name, the newest one wins.
  - Groups - C(vmanyware_definition_<definition name>) and C(vmanyware_status_<status>), plus those of O(groups) and O(keyed_groups).
  - An operation file that cannot be loaded (corrupt, truncated, oversized, a symbolic link, not a regular file, recorded hashes
    that are not those of its snapshots) is skipped with a warning naming the file and the code (C(journal_corrupt)); every
    valid operation still becomes a host. The file is left untouched.
extends_documentation_fragment:
  - constructed
options:
  plugin:
    description: The name of this plugin; the inventory file must be named C(*.vmanyware_journal.yml) or C(*.vmanyware_journal.yaml).
    type: str
    required: true
    choices: [vmanyware.proxmox.journal]
  journal_dir:
    description:
      - The journal directory. When unset, E(VMANYWARE_JOURNAL_DIR) is used, else C($XDG_STATE_HOME/vmanyware/journal), else
        C(~/.local/state/vmanyware/journal). It must exist.
    type: path
  status:
    description: Operations with one of these statuses become hosts (only those with a recorded address can be reached).
    type: list
    elements: str
    default: [completed]
    choices: [open, completed, failed, uncertain, abandoned, cleaned]
  target_vmid:
    description: Only the operation(s) that targeted this VMID.
    type: int
  definition_name:
    description: Only operations of the definition with this name.
    type: str
  since:
    description: Only operations created at or after this UTC time (V(2026-01-31) or V(2026-01-31T12:00:00Z)).
    type: str
  limit:
    description: At most this many operations (the newest). Unset - all.
    type: int
  known_hosts_dir:
    description:
      - Directory for the per-operation known_hosts files (created with mode 0700). Default - C(known_hosts) in the journal directory.
    type: path
  connection:
    description:
      - How Ansible reaches the VMs. V(ssh) - C(ansible_host), C(ansible_user) and the strict known_hosts file above.
      - V(qga) - C(ansible_connection=vmanyware.proxmox.qga) with C(vmanyware_vmid) and C(vmanyware_node), so tasks run through the
        Proxmox API and the QEMU guest agent (docs/guest-agent-connection.md); no SSH and no guest address are needed, so an operation
        that recorded none is listed too. The plugin reads the API connection from C(vmanyware_connection), C(vmanyware_qga_*) or
        E(PROXMOX_*) variables.
      - Containers (C(guestType=container)) have no guest agent; they keep V(ssh).
    type: str
    default: ssh
    choices: [ssh, qga]
    version_added: 0.3.0
"""

EXAMPLES = r"""
# file: inventory/provisioned.vmanyware_journal.yml
plugin: vmanyware.proxmox.journal
journal_dir: /var/lib/vmanyware/journal
definition_name: kernel-lab
since: "2026-01-01"
keyed_groups:
  - key: vmanyware_node
    prefix: node
# qga - the VMs are reached through the Proxmox API and the QEMU guest agent (vmanyware.proxmox.qga), no SSH
connection: ssh
"""

import os
import re
import typing as t

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Constructable

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.history import (
    list_operations,
    parse_filters,
    skipped_warning,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.files import LocalFileError, atomic_write_bytes
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    JournalError,
    JournalStore,
    resolve_journal_dir,
)

_NAME = re.compile(r"[^A-Za-z0-9_]")


def group_name(prefix: str, value: t.Any) -> str:
    """``<prefix>_<value>`` with every character other than letters, digits and ``_`` replaced by ``_``."""
    return "%s_%s" % (prefix, _NAME.sub("_", str(value)))


class InventoryModule(BaseInventoryPlugin, Constructable):
    NAME = "vmanyware.proxmox.journal"

    def verify_file(self, path: str) -> bool:
        return super().verify_file(path) and path.endswith((".vmanyware_journal.yml", ".vmanyware_journal.yaml"))

    def parse(self, inventory: t.Any, loader: t.Any, path: str, cache: bool = True) -> None:
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        try:
            hosts = self._hosts()
        except VmanywareError as err:
            raise AnsibleParserError("vmanyware journal inventory: %s (%s)" % (err.message, err.code)) from None
        strict = self.get_option("strict")
        for host in hosts:
            name = self.inventory.add_host(host.pop("inventory_hostname"))
            for group in host.pop("groups"):
                self.inventory.add_group(group)
                self.inventory.add_child(group, name)
            for key, value in host.items():
                self.inventory.set_variable(name, key, value)
            self._set_composite_vars(self.get_option("compose"), host, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), host, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), host, name, strict=strict)

    def _hosts(self) -> list[dict[str, t.Any]]:
        journal_dir = resolve_journal_dir(self.get_option("journal_dir"), os.environ)
        if not os.path.isdir(journal_dir):
            raise AnsibleParserError("vmanyware journal inventory: the journal directory does not exist.")
        store = JournalStore(journal_dir)
        filters = parse_filters(
            self.get_option("status"),
            self.get_option("target_vmid"),
            self.get_option("definition_name"),
            self.get_option("since"),
        )
        known_hosts_dir = self.get_option("known_hosts_dir") or os.path.join(journal_dir, "known_hosts")
        qga = self.get_option("connection") == "qga"
        hosts: dict[str, dict[str, t.Any]] = {}
        listed = list_operations(store, filters, self.get_option("limit"))
        for entry in listed[
            "skipped_files"
        ]:  # one bad operation file never empties the inventory: it is named and skipped
            self.display.warning(skipped_warning(entry))
        for row in listed["operations"]:  # newest first
            try:
                document = store.load(row["operation_id"])
            except JournalError as err:  # changed since it was listed
                if err.code != "not_found":
                    self.display.warning(skipped_warning({"file": row["operation_id"] + ".json", "code": err.code}))
                continue
            handoff = document.get("handoff") or {}
            known = [line for line in handoff.get("knownHosts") or [] if isinstance(line, str)]
            # SSH goes to "address" (a network with IPv6: the IPv4 one if any, else the IPv6); "ipv4" before networks
            address = handoff.get("address") or handoff.get("ipv4")
            agent = qga and document["plan"].get("guestType", "vm") != "container"
            if not agent and (not address or not known):
                continue  # no recorded address and host keys: nothing to connect to
            name = "%s-%d" % (document["plan"]["target"]["name"], document["target"]["vmid"])
            if name in hosts:
                continue  # an older operation of the same host name
            if agent:  # the guest agent through the Proxmox API: the VMID and node below are all it needs
                reach: dict[str, t.Any] = {"ansible_connection": "vmanyware.proxmox.qga"}
            else:
                known_hosts = self._write_known_hosts(known_hosts_dir, row["operation_id"], known)
                reach = {
                    "ansible_host": address,
                    "ansible_user": document["plan"]["guestUser"],
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s" % known_hosts,
                }
            hosts[name] = {
                "inventory_hostname": name,
                "groups": [
                    group_name("vmanyware_definition", row["definition_name"]),
                    group_name("vmanyware_status", row["status"]),
                ],
                **reach,
                "vmanyware_operation_id": row["operation_id"],
                "vmanyware_status": row["status"],
                "vmanyware_definition_name": row["definition_name"],
                "vmanyware_node": row["target_node"],
                "vmanyware_vmid": row["target_vmid"],
                "vmanyware_created_at": row["created_at"],
                "vmanyware_readiness_observed_at": handoff.get("readinessObservedAt"),
                "vmanyware_host_key_fingerprints": dict(handoff.get("hostKeyFingerprints") or {}),
            }
        return list(hosts.values())

    @staticmethod
    def _write_known_hosts(directory: str, operation_id: str, lines: list[str]) -> str:
        """The operation's agent-verified host keys as a known_hosts file (rewritten only when it differs)."""
        path = os.path.join(directory, operation_id)
        content = "".join(line.rstrip("\n") + "\n" for line in lines)
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            try:
                with open(path, encoding="utf-8") as handle:
                    if handle.read() == content:
                        return path
            except FileNotFoundError:
                pass
            atomic_write_bytes(path, content.encode("utf-8"), 0o600)
        except (OSError, LocalFileError):
            raise AnsibleParserError(
                "vmanyware journal inventory: the known_hosts directory cannot be written."
            ) from None
        return path
