# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The node SSH route: commands in a container by ``pct exec`` over SSH to its Proxmox node (docs/containers.md).

Proxmox has no exec API for containers; on the node, ``pct exec <vmid> -- <argv>`` runs ``lxc-attach`` into the
container and passes stdin, stdout, stderr and the exit code through (pve-container ``PVE::CLI::pct``). This file
builds the node's command lines (``shlex`` quoting: the node's login shell parses the line once, ``/bin/sh -c`` in
the container parses the task's command once more) and the OpenSSH client's argv, and turns the client's own
failures into fixed codes. The transport is the system's ``ssh`` (no new dependency, the operator's OpenSSH):
the node's host key must be in the given known_hosts file (``StrictHostKeyChecking=yes``, no trust on first use),
only the given key is offered (``IdentitiesOnly``, no agent), nothing prompts (``BatchMode``) and no ssh_config is
read (``-F none``), so what the options say is what runs.

ssh's own diagnostics are never put into an error (they name hosts, users and files); they are classified by
pattern into a code. The task's command output is the task's own and is returned as it is.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import typing as t

from .._core.errors import ConfigurationError, NodeSshError

__all__ = [
    "NodeSshRoute",
    "NodeSshSettings",
    "RunResult",
    "exec_command",
    "fetch_command",
    "node_endpoint",
    "node_settings",
    "node_ssh_argument_spec",
    "probe_command",
    "put_command",
    "ssh_argv",
    "validate_settings",
]

PROBE_MARK = "vmanyware-node-ssh-ok"
# pct's VMID (pve-vmid): 100-999999999
VMID_MIN, VMID_MAX = 100, 999_999_999
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.:_-]{0,252})$|^\[[0-9A-Fa-f:.]+\]$")
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")


@dataclasses.dataclass(frozen=True)
class RunResult:
    """One ssh run: its exit code and the bytes of its stdout and stderr."""

    rc: int
    stdout: bytes
    stderr: bytes


class Runner(t.Protocol):
    def __call__(self, argv: t.Sequence[str], stdin: bytes | None, timeout: float) -> RunResult: ...


@dataclasses.dataclass(frozen=True)
class NodeSshSettings:
    """Where and how to reach one node: host and port, the login user, the dedicated key, the known_hosts file."""

    host: str
    private_key_file: str
    known_hosts_file: str
    port: int = 22
    user: str = "root"
    connect_timeout: int = 10
    command_timeout: float = 600.0
    ssh_executable: str = "ssh"


def validate_settings(settings: NodeSshSettings, vmid: t.Any = None, *, need_vmid: bool = False) -> int | None:
    """Check the options (the path of the first bad one in the error, never its value); the VMID as an int."""
    if not isinstance(settings.host, str) or not _HOST.match(settings.host or ""):
        raise ConfigurationError("The node SSH host is missing or not a host name or address.", path="remote_addr")
    if not isinstance(settings.port, int) or isinstance(settings.port, bool) or not 1 <= settings.port <= 65535:
        raise ConfigurationError("The node SSH port is not 1-65535.", path="port")
    if not _USER.match(settings.user or ""):
        raise ConfigurationError("The node SSH user is not a user name.", path="remote_user")
    for path, value in (
        ("private_key_file", settings.private_key_file),
        ("known_hosts_file", settings.known_hosts_file),
    ):
        if not value:
            raise ConfigurationError(
                "The node SSH route needs a dedicated private key and a known_hosts file with the node's host key.",
                path=path,
            )
        if not os.path.isfile(os.path.expanduser(value)):
            raise ConfigurationError("The file does not exist or is not a regular file.", path=path)
    if settings.connect_timeout < 1 or settings.command_timeout <= 0:
        raise ConfigurationError("Timeouts must be positive.", path="connect_timeout/command_timeout")
    if vmid is None:
        if need_vmid:
            raise ConfigurationError("The container's VMID is not set.", path="vmid")
        return None
    try:
        number = int(str(vmid).strip())
    except ValueError:
        number = 0
    if not VMID_MIN <= number <= VMID_MAX:
        raise ConfigurationError("The container's VMID is not 100-999999999.", path="vmid")
    return number


def node_ssh_argument_spec() -> dict[str, t.Any]:
    """The ``node_ssh`` option of the modules that reach nodes over SSH (``vmanyware_capabilities``, ``vmanyware_profile``)."""
    return {
        "type": "dict",
        "options": {
            "private_key_file": {"type": "path", "required": True},
            "known_hosts_file": {"type": "path", "required": True},
            "user": {"type": "str", "default": "root"},
            "port": {"type": "int", "default": 22},
            "endpoints": {"type": "dict"},
            "connect_timeout": {"type": "int", "default": 10},
        },
    }


def node_endpoint(node: str, value: t.Any, path: str = "node_ssh") -> tuple[str, int | None]:
    """``host``, ``host:port`` or ``[v6]:port`` of a node's SSH endpoint (the node's name when not given)."""
    text = str(value if value is not None else node).strip()
    match = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:\[\]]+)(?::(\d+))?", text)
    if match is None:
        raise ConfigurationError(
            "A node SSH endpoint is not host, host:port or [address]:port.", path=f"{path}.endpoints.{node}"
        )
    host, port = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    return host, int(port) if port else None


def node_settings(
    options: t.Mapping[str, t.Any], node: str, path: str = "node_ssh", command_timeout: float | None = None
) -> NodeSshSettings:
    """The settings of ``node`` from a ``node_ssh`` option (``endpoints``: node -> host[:port], else the node's name
    and ``port``), validated; a bad field is named ``<path>.<field>``, never its value."""
    endpoints = options.get("endpoints") or {}
    if not isinstance(endpoints, t.Mapping):
        raise ConfigurationError(
            "%s.endpoints must map node names to host or host:port." % path, path=path + ".endpoints"
        )
    host, port = node_endpoint(node, endpoints.get(node), path)
    settings = NodeSshSettings(
        host=host,
        port=port or int(options.get("port") or 22),
        user=str(options.get("user") or "root"),
        private_key_file=str(options.get("private_key_file") or ""),
        known_hosts_file=str(options.get("known_hosts_file") or ""),
        connect_timeout=int(options.get("connect_timeout") or 10),
    )
    if command_timeout is not None:
        settings = dataclasses.replace(settings, command_timeout=command_timeout)
    try:
        validate_settings(settings)
    except ConfigurationError as err:
        raise ConfigurationError(err.message, path=f"{path}.{err.path}") from None
    return settings


def ssh_argv(settings: NodeSshSettings, remote_command: str) -> list[str]:
    """The OpenSSH client's argv for one command on the node (no tty: stdin and stdout stay binary-clean)."""
    options = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": os.path.expanduser(settings.known_hosts_file),
        "GlobalKnownHostsFile": "/dev/null",
        "UpdateHostKeys": "no",
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "ForwardAgent": "no",
        "ClearAllForwardings": "yes",
        "ConnectTimeout": str(settings.connect_timeout),
        "ServerAliveInterval": "15",
        "LogLevel": "ERROR",
    }
    argv = [settings.ssh_executable, "-F", "none", "-T", "-p", str(settings.port), "-l", settings.user]
    argv += ["-i", os.path.expanduser(settings.private_key_file)]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return [*argv, "--", settings.host, remote_command]


def exec_command(vmid: int, command: str) -> str:
    """``pct exec`` of a shell command line in the container (``/bin/sh -c``, as Ansible's shell plugin expects)."""
    return f"pct exec {int(vmid)} -- /bin/sh -c {shlex.quote(command)}"


def put_command(vmid: int, dest: str) -> str:
    """Write stdin to ``dest`` in the container: one SSH round trip, no copy on the node, binary-clean (no tty)."""
    return exec_command(vmid, f"cat > {shlex.quote(dest)}")


def fetch_command(vmid: int, src: str) -> str:
    """Print ``src`` of the container on stdout (binary-clean)."""
    return f"pct exec {int(vmid)} -- cat -- {shlex.quote(src)}"


def probe_command(vmid: int | None) -> str:
    """Read-only: the mark proves the SSH login worked; 127 says pct is missing; then ``pct status`` (or ``pct help``)."""
    check = f"pct status {int(vmid)}" if vmid is not None else "pct help >/dev/null"
    return f"echo {PROBE_MARK}; command -v pct >/dev/null 2>&1 || exit 127; {check}"


# ssh's own failures (exit 255 before the command ran), by the client's own line formats (a command's stderr that
# merely mentions "connection refused" is not one of them); the text itself is never reported
_SSH_FAILURES = (
    (
        "node_ssh_host_key_not_verified",
        re.compile(r"^Host key verification failed\.|REMOTE HOST IDENTIFICATION HAS CHANGED", re.MULTILINE),
    ),
    (
        "node_ssh_auth_failed",
        re.compile(
            r"^\S+: Permission denied \(|^Received disconnect from .*Too many authentication failures", re.MULTILINE
        ),
    ),
    (
        "node_ssh_unreachable",
        re.compile(
            r"^ssh: (?:connect to host|Could not resolve hostname)|^kex_exchange_identification:|"
            r"^Connection (?:closed|reset|timed out) by |^ssh_exchange_identification:",
            re.MULTILINE,
        ),
    ),
)


def classify_ssh_failure(rc: int, stderr: bytes) -> str | None:
    """The code of an ssh failure that happened before the remote command ran, None when the command ran."""
    if rc != 255:
        return None
    text = stderr.decode("utf-8", "replace")
    for code, pattern in _SSH_FAILURES:
        if pattern.search(text):
            return code
    return None


def subprocess_runner(argv: t.Sequence[str], stdin: bytes | None, timeout: float) -> RunResult:
    """Run the ssh client; ``subprocess.TimeoutExpired`` propagates (the caller maps it)."""
    res = subprocess.run(
        list(argv), input=stdin if stdin is not None else b"", capture_output=True, timeout=timeout, check=False
    )
    return RunResult(res.returncode, res.stdout, res.stderr)


class NodeSshRoute:
    """Commands on one node over SSH, with ssh's own failures raised as ``NodeSshError`` with a fixed code."""

    def __init__(self, settings: NodeSshSettings, runner: Runner = subprocess_runner) -> None:
        self.settings = settings
        self.runner = runner

    def run(
        self, remote_command: str, stdin: bytes | None = None, timeout: float | None = None, *, classify: bool = True
    ) -> RunResult:
        limit = self.settings.command_timeout if timeout is None else timeout
        try:
            result = self.runner(ssh_argv(self.settings, remote_command), stdin, limit)
        except subprocess.TimeoutExpired:
            raise NodeSshError(
                "The command on the node did not finish before the command timeout; the ssh client was stopped.",
                code="node_ssh_command_timeout",
                details={"timeout": limit},
            ) from None
        except OSError:
            raise NodeSshError(
                "The ssh client could not be started (is OpenSSH installed?).", code="node_ssh_unreachable"
            ) from None
        code = classify_ssh_failure(result.rc, result.stderr) if classify else None
        if code is not None:
            raise NodeSshError(code=code)
        return result

    def probe(self, vmid: int | None = None) -> None:
        """Read-only check of the route (login with the verified host key, pct present, and the container running)."""
        result = self.run(probe_command(vmid), timeout=self.settings.connect_timeout + 30, classify=False)
        if not result.stdout.startswith(PROBE_MARK.encode()):
            # no mark: the login did not happen; ssh's diagnostic says why (unknown ones count as unreachable)
            raise NodeSshError(code=classify_ssh_failure(255, result.stderr) or "node_ssh_unreachable")
        if result.rc == 127:
            raise NodeSshError("The node has no pct command (is it a Proxmox VE node?).", code="node_ssh_pct_missing")
        if vmid is None:
            if result.rc != 0:
                raise NodeSshError(
                    "pct help failed on the node.", code="node_ssh_pct_failed", details={"exit_code": result.rc}
                )
            return
        status = result.stdout[len(PROBE_MARK) :].decode("utf-8", "replace").strip()
        if result.rc != 0 and b"does not exist" in result.stderr:
            # pve-container: "Configuration file 'nodes/<node>/lxc/<vmid>.conf' does not exist"
            raise NodeSshError(
                "The container does not exist on this node.",
                code="node_ssh_container_not_found",
                details={"vmid": vmid},
            )
        if result.rc != 0:
            raise NodeSshError(
                "pct status failed on the node.",
                code="node_ssh_pct_failed",
                details={"vmid": vmid, "exit_code": result.rc},
            )
        if status != "status: running":
            raise NodeSshError(
                "The container is not running.", code="node_ssh_container_not_running", details={"vmid": vmid}
            )
