# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: qga
short_description: Run tasks inside a Proxmox VE VM through the Proxmox API and the QEMU guest agent
version_added: 0.3.0
author:
  - vmanyware developers (@vmanyware)
description:
  - Runs every command of a task inside the VM O(vmid) on O(node) with C(POST /nodes/{node}/qemu/{vmid}/agent/exec), and
    transfers files with C(agent/file-write) and C(agent/file-read). No SSH, no network path to the guest; the guest needs
    qemu-guest-agent running and the VM C(agent=1).
  - The connection to the Proxmox API follows the same options and TLS rules as the collection's modules (the
    C(vmanyware.proxmox.connection) doc fragment options). TLS must be verified (a CA or a SHA-256 pin); O(unverified_tls_read_only)
    never applies, since an exec is a write.
  - An exec whose reply was lost is never sent again (C(qga_exec_outcome_unknown)); Ansible decides about retries.
  - Commands run as the guest agent's user (root on the usual images), through C(/bin/sh); become (C(sudo), C(su)) works as with any
    connection. Pipelining is not supported, so modules are copied to the guest's remote temporary directory first.
  - See docs/guest-agent-connection.md in the collection for the protocol, the limits and the error codes.
extends_documentation_fragment:
  - vmanyware.proxmox.connection
options:
  api_host:
    vars: [{name: vmanyware_qga_api_host}]
    env: [{name: PROXMOX_HOST}]
  api_port:
    vars: [{name: vmanyware_qga_api_port}]
    env: [{name: PROXMOX_PORT}]
  api_user:
    vars: [{name: vmanyware_qga_api_user}]
    env: [{name: PROXMOX_USER}]
  api_token_id:
    vars: [{name: vmanyware_qga_api_token_id}]
    env: [{name: PROXMOX_TOKEN_ID}]
  api_token_secret:
    vars: [{name: vmanyware_qga_api_token_secret}]
    env: [{name: PROXMOX_TOKEN_SECRET}]
  api_password:
    vars: [{name: vmanyware_qga_api_password}]
    env: [{name: PROXMOX_PASSWORD}]
  validate_certs:
    vars: [{name: vmanyware_qga_validate_certs}]
    env: [{name: PROXMOX_VALIDATE_CERTS}]
  ca_path:
    vars: [{name: vmanyware_qga_ca_path}]
    env: [{name: PROXMOX_CA_PATH}]
  api_fingerprint:
    vars: [{name: vmanyware_qga_api_fingerprint}]
    env: [{name: PROXMOX_FINGERPRINT}]
  api_timeout:
    vars: [{name: vmanyware_qga_api_timeout}]
    env: [{name: PROXMOX_TIMEOUT}, {name: PROXMOX_API_TIMEOUT}]
  unverified_tls_read_only:
    description:
      - Not honoured by this plugin. Running a command is a write, so unverified TLS is refused with C(tls_unverified) whatever this says.
    vars: [{name: vmanyware_qga_unverified_tls_read_only}]
    env: [{name: PROXMOX_UNVERIFIED_TLS_READ_ONLY}]
  api_connection:
    description:
      - The connection options as one mapping with the option names above as keys (V(api_host), V(api_token_id), ...), as the
        collection's playbooks take them in C(vmanyware_connection).
      - Precedence per option - its own variable (C(vmanyware_qga_<option>)), then this mapping, then the E(PROXMOX_*) environment
        variable, then the default.
    type: dict
    vars: [{name: vmanyware_connection}, {name: vmanyware_qga_api_connection}]
  vmid:
    description: The VMID of the VM to run in. The journal inventory and the provision role set C(vmanyware_vmid).
    type: int
    required: true
    vars: [{name: vmanyware_qga_vmid}, {name: vmanyware_vmid}]
  node:
    description: The cluster node the VM runs on. The journal inventory and the provision role set C(vmanyware_node).
    type: str
    required: true
    vars: [{name: vmanyware_qga_node}, {name: vmanyware_node}]
  command_timeout:
    description:
      - Seconds a command may run before the task fails with C(qga_command_timeout), naming the PID; the command is not killed.
      - C(exec-status) is read 0.25 s after the exec, then as often as the command has run so far, at most every 0.5 s in its first
        minute and every second after.
    type: float
    default: 600
    vars: [{name: vmanyware_qga_command_timeout}]
    env: [{name: VMANYWARE_QGA_COMMAND_TIMEOUT}]
  file_size_limit:
    description: The largest file, in bytes, that put_file or fetch_file transfers; a larger one fails with C(qga_file_too_large).
    type: int
    default: 67108864
    vars: [{name: vmanyware_qga_file_size_limit}]
    env: [{name: VMANYWARE_QGA_FILE_SIZE_LIMIT}]
  status_rereads:
    description:
      - How many more times a lost C(exec-status) reply is read again (besides the client's own retries of a GET), before the task
        fails with C(qga_exec_status_lost), naming the PID.
    type: int
    default: 3
    vars: [{name: vmanyware_qga_status_rereads}]
notes:
  - The exec's output comes back as text through the Proxmox API (decoded as UTF-8 by Proxmox); binary output is not preserved.
    Files are transferred as base64 and arrive byte for byte.
  - A become password is passed as the command's standard input (C(sudo -S) reads it); C(su) with a password needs a terminal,
    which the guest agent does not give.
"""

EXAMPLES = r"""
# inventory: a VM reached through the guest agent, the API token from PROXMOX_* variables
all:
  hosts:
    web-1:
      ansible_connection: vmanyware.proxmox.qga
      vmanyware_vmid: 201
      vmanyware_node: pve1
      vmanyware_qga_api_host: pve1.example.org
      vmanyware_qga_ca_path: /etc/ssl/certs/pve-root.pem
"""

import os
import tempfile
import typing as t

from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.plugins.connection import ConnectionBase, ensure_connect
from ansible.utils.display import Display

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    CONNECTION_OPTION_NAMES,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.guest_agent import AgentLimits, GuestAgentTransport
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import require_verified_connection
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError

display = Display()

# Failures of the task, not of the connection: the host stays reachable for the next task.
TASK_CODES = frozenset(
    {
        "qga_command_timeout",
        "qga_output_truncated",
        "qga_file_too_large",
        "qga_transfer_failed",
        "not_found",
        "permission_denied",
    }
)


def ansible_error(err: VmanywareError) -> AnsibleError:
    """``[code] message``: the fixed text of a collection error (never a provider body or a secret)."""
    text = "[%s] %s" % (err.code, err.message)
    return AnsibleError(text) if err.code in TASK_CODES else AnsibleConnectionFailure(text)


class Connection(ConnectionBase):
    """Commands and files through the QEMU guest agent of one VM, over the collection's Proxmox client."""

    transport = "vmanyware.proxmox.qga"
    has_pipelining = False  # input-data is capped at 64 KiB and a module's stdin would travel in the exec request
    has_tty = False

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self._agent: GuestAgentTransport | None = None
        self._client: ProxmoxClient | None = None

    def _option(self, name: str, mapping: t.Mapping[str, t.Any]) -> t.Any:
        """Its own variable (or a direct setting) first, then ``api_connection``, then the environment, then the default."""
        value, origin = self.get_option_and_origin(name)
        if str(origin).startswith(("var", "Direct")) or name not in mapping:
            return value
        return mapping[name]

    def _connect(self) -> Connection:
        if self._connected:
            return self
        mapping = self.get_option("api_connection") or {}
        if not isinstance(mapping, dict):
            raise AnsibleConnectionFailure(
                "[configuration_error] api_connection (vmanyware_connection) must be a mapping."
            )
        try:
            settings = connection_settings({name: self._option(name, mapping) for name in CONNECTION_OPTION_NAMES})
            require_verified_connection(settings)  # before any request: exec writes, the read-only opt-in never applies
            limits = AgentLimits(
                command_timeout=float(self.get_option("command_timeout")),
                file_size_limit=int(self.get_option("file_size_limit")),
                status_rereads=int(self.get_option("status_rereads")),
            )
            if limits.command_timeout <= 0 or limits.file_size_limit <= 0 or limits.status_rereads < 0:
                raise AnsibleConnectionFailure(
                    "[configuration_error] command_timeout and file_size_limit must be positive, status_rereads not negative."
                )
            self._client = ProxmoxClient(settings)
            self._agent = GuestAgentTransport(
                self._client, str(self.get_option("node")), int(self.get_option("vmid")), limits
            )
        except VmanywareError as err:
            raise ansible_error(err) from None
        display.vvv("QGA: VM %d on node %s" % (self._agent.vmid, self._agent.node), host=self._play_context.remote_addr)
        self._connected = True
        return self

    @property
    def agent(self) -> GuestAgentTransport:
        if self._agent is None:  # pragma: no cover - ensure_connect connects first
            raise AnsibleConnectionFailure("[internal_error] The guest agent connection is not open.")
        return self._agent

    @ensure_connect  # type: ignore[arg-type]
    def exec_command(self, cmd: str, in_data: bytes | None = None, sudoable: bool = True) -> tuple[int, bytes, bytes]:
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        display.vvv("QGA EXEC %s" % cmd, host=self._play_context.remote_addr)
        stdin = in_data
        if stdin is None and sudoable and self.become and self.become.expect_prompt():
            # No terminal to answer a prompt on: sudo -S reads the password from stdin (the become plugin adds -S).
            password = self.become.get_option("become_pass", playcontext=self._play_context) or ""
            stdin = (password + "\n").encode("utf-8")
        try:
            result = self.agent.run(cmd, stdin)
        except VmanywareError as err:
            raise ansible_error(err) from None
        return result.rc, result.stdout, result.stderr

    @ensure_connect  # type: ignore[arg-type]
    def put_file(self, in_path: str, out_path: str) -> None:
        super().put_file(in_path, out_path)
        display.vvv("QGA PUT %s TO %s" % (in_path, out_path), host=self._play_context.remote_addr)
        try:
            size = os.path.getsize(in_path)
        except OSError:
            raise AnsibleError("[io_error] The file to transfer cannot be read on the controller.") from None
        try:
            self.agent.check_size(size)  # before reading it into memory
            with open(in_path, "rb") as handle:
                data = handle.read()
            self.agent.write_file(data, out_path)
        except OSError:
            raise AnsibleError("[io_error] The file to transfer cannot be read on the controller.") from None
        except VmanywareError as err:
            raise ansible_error(err) from None

    @ensure_connect  # type: ignore[arg-type]
    def fetch_file(self, in_path: str, out_path: str) -> None:
        super().fetch_file(in_path, out_path)
        display.vvv("QGA FETCH %s TO %s" % (in_path, out_path), host=self._play_context.remote_addr)
        try:
            data = self.agent.read_file(in_path)
        except VmanywareError as err:
            raise ansible_error(err) from None
        directory = os.path.dirname(os.path.abspath(out_path))
        try:  # the local file appears whole or not at all
            handle, tmp = tempfile.mkstemp(dir=directory, prefix=".vmanyware-qga-")
            try:
                with os.fdopen(handle, "wb") as out:
                    out.write(data)
                os.replace(tmp, out_path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            raise AnsibleError("[io_error] The fetched file cannot be written on the controller.") from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = None
        self._agent = None
        self._connected = False
