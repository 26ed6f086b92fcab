# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Connection plugin: tasks in an LXC container by ``pct exec`` over SSH to its Proxmox node (docs/containers.md)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: pct
short_description: Run tasks inside a Proxmox VE container with pct exec over SSH to its node
version_added: 0.3.0
description:
  - Runs each command of a task inside an LXC container by logging in to the container's Proxmox VE node with SSH and
    running C(pct exec <vmid> -- /bin/sh -c <command>) there. The container needs no SSH server, no network and no key of
    its own; the node needs its SSH server and C(pct).
  - The node's SSH host key must be in O(known_hosts_file) (C(StrictHostKeyChecking=yes)); there is no trust on first use.
    Only the dedicated O(private_key_file) is offered (C(IdentitiesOnly), no agent), nothing prompts (C(BatchMode)) and
    no ssh_config is read, so these options are all that applies.
  - Files are written by streaming their bytes on stdin to C(cat > dest) under C(pct exec) (one SSH round trip, no
    temporary copy on the node, binary-safe as no terminal is allocated); they are read back with C(cat) the same way.
  - The transport is the system's OpenSSH client (C(ssh)); no Python dependency.
  - Before the first command, a read-only probe checks the login, C(pct) on the node and the container
    (C(pct status <vmid>)); its failures and ssh's own have fixed codes (C(node_ssh_*), docs/errors.md) and never
    show ssh's diagnostics. The output of the task's own command is returned as it is.
  - See C(docs/containers.md) in the collection, section "The node SSH route (pct exec)".
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - connection_pipelining
options:
  remote_addr:
    description: The Proxmox VE node to log in to (host name or address), the node the container runs on.
    type: str
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: vmanyware_pct_node_host
  port:
    description: The node's SSH port.
    type: int
    default: 22
    vars:
      - name: ansible_port
      - name: vmanyware_pct_node_port
    env:
      - name: VMANYWARE_PCT_NODE_PORT
  remote_user:
    description: The user on the node; C(pct) needs V(root).
    type: str
    default: root
    vars:
      - name: ansible_user
      - name: vmanyware_pct_node_user
    env:
      - name: VMANYWARE_PCT_NODE_USER
  private_key_file:
    description:
      - Required. The dedicated private key for the node login (its public key in the node user's authorized_keys).
      - No other key and no agent is offered.
    type: path
    vars:
      - name: ansible_private_key_file
      - name: ansible_ssh_private_key_file
      - name: vmanyware_pct_private_key_file
    env:
      - name: VMANYWARE_PCT_PRIVATE_KEY_FILE
  known_hosts_file:
    description:
      - Required. A known_hosts file with the node's SSH host key (for a port other than 22 the host is written C([host]:port)).
      - A node whose key is missing or different fails with C(node_ssh_host_key_not_verified) before anything runs.
    type: path
    vars:
      - name: vmanyware_pct_known_hosts_file
    env:
      - name: VMANYWARE_PCT_KNOWN_HOSTS_FILE
  vmid:
    description: Required. The container's VMID (100-999999999) on the node.
    type: int
    vars:
      - name: proxmox_vmid
      - name: vmanyware_pct_vmid
  connect_timeout:
    description: Seconds to wait for the node's SSH endpoint (C(ConnectTimeout)).
    type: int
    default: 10
    vars:
      - name: vmanyware_pct_connect_timeout
    env:
      - name: VMANYWARE_PCT_CONNECT_TIMEOUT
  command_timeout:
    description:
      - Seconds one command (or one file copy) may take; then the ssh client is stopped and the task fails with
        C(node_ssh_command_timeout) (the process in the container may go on).
    type: int
    default: 3600
    vars:
      - name: vmanyware_pct_command_timeout
    env:
      - name: VMANYWARE_PCT_COMMAND_TIMEOUT
  ssh_executable:
    description: The OpenSSH client to run.
    type: str
    default: ssh
    vars:
      - name: vmanyware_pct_ssh_executable
    env:
      - name: VMANYWARE_PCT_SSH_EXECUTABLE
notes:
  - C(become) inside the container works as usual (the commands run as root in the container by default).
  - The node's login user must be allowed to run C(pct) (V(root) on Proxmox VE).
"""

EXAMPLES = r"""
# inventory: the container is the Ansible host; ansible_host is its node
# [containers]
# web1 ansible_host=pve1.example.org proxmox_vmid=201
# [containers:vars]
# ansible_connection=vmanyware.proxmox.pct
# vmanyware_pct_known_hosts_file=/etc/vmanyware/pve_known_hosts
# ansible_private_key_file=/etc/vmanyware/pct_node_key

- name: Configure a container over its node
  hosts: containers
  gather_facts: false
  tasks:
    - name: Install nginx
      ansible.builtin.apt:
        name: nginx
"""

import os
import typing as t

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.node_ssh import (
    NodeSshRoute,
    NodeSshSettings,
    exec_command,
    fetch_command,
    put_command,
    validate_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError

display = Display()


def _failure(err: VmanywareError) -> AnsibleConnectionFailure:
    text = f"{err.code}: {err.message}"
    if err.path:
        text += f" (option {err.path})"
    return AnsibleConnectionFailure(text)


class Connection(ConnectionBase):
    """pct exec over SSH to the container's node."""

    transport = "vmanyware.proxmox.pct"
    has_pipelining = True
    default_user = "root"

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._route: NodeSshRoute | None = None
        self._vmid: int | None = None

    def _settings(self) -> NodeSshSettings:
        return NodeSshSettings(
            host=str(self.get_option("remote_addr") or ""),
            port=int(self.get_option("port") or 22),
            user=str(self.get_option("remote_user") or "root"),
            private_key_file=str(self.get_option("private_key_file") or ""),
            known_hosts_file=str(self.get_option("known_hosts_file") or ""),
            connect_timeout=int(self.get_option("connect_timeout")),
            command_timeout=float(self.get_option("command_timeout")),
            ssh_executable=str(self.get_option("ssh_executable") or "ssh"),
        )

    def _connect(self) -> Connection:
        if self._connected:
            return self
        try:
            settings = self._settings()
            vmid = validate_settings(settings, self.get_option("vmid"), need_vmid=True)
            route = NodeSshRoute(settings)
            route.probe(vmid)
        except VmanywareError as err:
            raise _failure(err) from None
        display.vvv(f"PCT: CT {vmid} on {settings.user}@{settings.host}:{settings.port} is running", host=settings.host)
        self._route, self._vmid, self._connected = route, vmid, True
        return self

    def _ready(self) -> tuple[NodeSshRoute, int]:
        self._connect()
        if self._route is None or self._vmid is None:  # pragma: no cover - _connect sets both or raises
            raise AnsibleConnectionFailure("[internal_error] The node SSH route is not open.")
        return self._route, self._vmid

    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = True) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        route, vmid = self._ready()
        display.vvv(f"PCT EXEC (CT {vmid}) {cmd}", host=route.settings.host)
        try:
            result = route.run(exec_command(vmid, cmd), stdin=in_data)
        except VmanywareError as err:
            raise _failure(err) from None
        return result.rc, result.stdout, result.stderr

    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        route, vmid = self._ready()
        display.vvv(f"PCT PUT {in_path} TO {out_path} (CT {vmid})", host=route.settings.host)
        if not os.path.isfile(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound(f"file or module does not exist: {in_path}")
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as handle:
            data = handle.read()
        self._transfer(route, put_command(vmid, out_path), data, "write")

    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        route, vmid = self._ready()
        display.vvv(f"PCT FETCH {in_path} TO {out_path} (CT {vmid})", host=route.settings.host)
        stdout = self._transfer(route, fetch_command(vmid, in_path), None, "read")
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as handle:
            handle.write(stdout)

    @staticmethod
    def _transfer(route: NodeSshRoute, command: str, data: bytes | None, verb: str) -> bytes:
        try:
            result = route.run(command, stdin=data)
        except VmanywareError as err:
            raise _failure(err) from None
        if result.rc != 0:
            # the container's own error text may name paths of the task; the exit code is enough to act on
            raise AnsibleError(
                f"node_ssh_transfer_failed: could not {verb} the file in the container (exit code {result.rc})."
            )
        return result.stdout

    def reset(self) -> None:
        self.close()

    def close(self) -> None:
        self._route, self._vmid, self._connected = None, None, False
