# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The QEMU guest agent as a command and file transport (the connection plugin ``vmanyware.proxmox.qga``,
docs/guest-agent-connection.md): one shell command per ``agent/exec``, polled through ``exec-status``; files written in
base64 parts and joined by one command; files read in base64 chunks.

Rules: an exec whose reply was lost is never sent again (``qga_exec_outcome_unknown``: no PID is known); a lost
``exec-status`` reply is re-read a bounded number of times, then ``qga_exec_status_lost`` names the PID; every failure
has a fixed code and text, never a provider body or a secret.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import secrets
import time
import typing as t

from .._core.errors import ProviderError, VmanywareError
from .._core.protocols import ApiClient
from .http_errors import agent_reason, proves_not_applied
from .tasks import next_pause

# ``/bin/sh -c EXEC_SCRIPT vmanyware-qga <command>``: the command is a positional parameter, never spliced into the script.
# qemu-ga spawns children with its own environment, which under systemd has no HOME (Ansible's remote_tmp is ``~/...``):
# HOME is set from the passwd entry of the agent's user (root: /root), else /root, PATH to the usual list when unset.
EXEC_SCRIPT = (
    '[ -n "${HOME:-}" ] || { HOME=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6); HOME=${HOME:-/root}; export HOME; }\n'
    "PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}; export PATH\n"
    'exec /bin/sh -c "$1"\n'
)
EXEC_NAME = "vmanyware-qga"

# ``/bin/sh -c JOIN_SCRIPT vmanyware-qga-join <dest> <tmp> <part>...``: the parts concatenated into a temporary name next to
# the destination, renamed over it (atomic within the directory), the parts and the temporary file removed in any case.
JOIN_SCRIPT = 'd=$1; t=$2; shift 2\nif cat -- "$@" >"$t" && mv -f -- "$t" "$d"; then c=0; else c=1; fi\nrm -f -- "$@" "$t"\nexit "$c"\n'
JOIN_NAME = "vmanyware-qga-join"

# agent/file-write takes at most 61440 characters of content; with encode=0 it is our base64: 46080 bytes per part.
WRITE_PART_BYTES = 61440 // 4 * 3
# agent/file-read returns at most ``count`` bytes (base64 with decode=0); 1 MiB is one guest-file-read of qemu-server.
READ_CHUNK_BYTES = 1024 * 1024
# The schema's limit of input-data (stdin of the command).
MAX_INPUT_BYTES = 65536

DEFAULT_COMMAND_TIMEOUT = 600.0
DEFAULT_FILE_SIZE_LIMIT = 64 * 1024 * 1024
DEFAULT_STATUS_REREADS = 3

_PRIVILEGES = {
    "exec": "VM.GuestAgent.Unrestricted",
    "exec-status": "VM.GuestAgent.Unrestricted",
    "file-write": "VM.GuestAgent.FileWrite",
    "file-read": "VM.GuestAgent.FileRead",
}
_AGENT_DOWN = {"not_running", "not_configured", "exec_disabled"}
# exec-status failures whose reply may come on a re-read (the client already retries GETs; these are re-read on top).
_REREAD_CODES = {"reply_lost", "transport_lost", "server_error", "unexpected_response", "response_too_large"}


@dataclasses.dataclass(frozen=True)
class AgentLimits:
    """``command_timeout`` seconds per command, ``file_size_limit`` bytes per file, ``status_rereads`` per lost status."""

    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    file_size_limit: int = DEFAULT_FILE_SIZE_LIMIT
    status_rereads: int = DEFAULT_STATUS_REREADS


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What a command ended with: exit code (128 + signal when killed), stdout and stderr as bytes, its PID."""

    rc: int
    stdout: bytes
    stderr: bytes
    pid: int


def _error(code: str, message: str, **details: t.Any) -> ProviderError:
    return ProviderError(message, code=code, details=details)


def command_argv(command: str) -> list[str]:
    """The argument array ``agent/exec`` gets for one shell command (``EXEC_SCRIPT`` with the command as ``$1``)."""
    return ["/bin/sh", "-c", EXEC_SCRIPT, EXEC_NAME, command]


def join_argv(dest: str, tmp: str, parts: t.Sequence[str]) -> list[str]:
    """The argument array of the command that joins ``parts`` into ``dest`` through ``tmp``."""
    return ["/bin/sh", "-c", JOIN_SCRIPT, JOIN_NAME, dest, tmp, *parts]


class GuestAgentTransport:
    """Commands and files in VM ``vmid`` on ``node`` through ``client`` (an ``ApiClient``: the collection's client or a fake)."""

    def __init__(
        self,
        client: ApiClient,
        node: str,
        vmid: int,
        limits: AgentLimits = AgentLimits(),
        *,
        sleep: t.Callable[[float], None] = time.sleep,
        clock: t.Callable[[], float] = time.monotonic,
        token: t.Callable[[], str] = lambda: secrets.token_hex(6),
    ) -> None:
        self.client = client
        self.node = node
        self.vmid = int(vmid)
        self.limits = limits
        self._sleep = sleep
        self._clock = clock
        self._token = token

    @property
    def agent_path(self) -> str:
        return "/nodes/%s/qemu/%d/agent" % (self.node, self.vmid)

    # -- commands ----------------------------------------------------------------------------------------------------
    def run(self, command: str, stdin: bytes | None = None) -> CommandResult:
        """Run one shell command (``/bin/sh -c``) in the guest and wait for it (``command_timeout``)."""
        return self.run_argv(command_argv(command), stdin)

    def run_argv(self, argv: t.Sequence[str], stdin: bytes | None = None) -> CommandResult:
        """``POST agent/exec`` once, then ``GET agent/exec-status`` until the command exited or the timeout passed."""
        params: dict[str, t.Any] = {"command": list(argv)}
        if stdin is not None:
            if len(stdin) > MAX_INPUT_BYTES:
                raise _error(
                    "qga_file_too_large",
                    "The command's input is larger than the 65536 bytes agent/exec accepts; nothing ran.",
                    limit=MAX_INPUT_BYTES,
                )
            params["input-data"] = stdin.decode("utf-8", errors="replace")
        started = self._clock()
        try:
            data = self.client.post(self.agent_path + "/exec", **params)
        except ProviderError as err:
            if proves_not_applied(err) or agent_reason(err) in _AGENT_DOWN or agent_reason(err) == "vm_not_running":
                raise self._mapped(err, "exec") from None
            raise self._exec_unknown() from None
        pid = data.get("pid") if isinstance(data, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool):
            raise self._exec_unknown()
        return self._wait(pid, started)

    def _exec_unknown(self) -> ProviderError:
        return _error(
            "qga_exec_outcome_unknown",
            "The reply to the guest-agent exec was lost: no PID is known and the command may be running in the guest; "
            "it is not sent again.",
            vmid=self.vmid,
        )

    def _wait(self, pid: int, started: float) -> CommandResult:
        """Poll ``exec-status`` on the task schedule (``next_pause``: 0.25 s first, at most 0.5 s apart in the first minute,
        1 s after) until the command exited or ``command_timeout`` passed."""
        while True:
            waited = self._clock() - started
            remaining = self.limits.command_timeout - waited
            if remaining <= 0:
                raise _error(
                    "qga_command_timeout",
                    "The command did not exit within command_timeout (%g s); it was not killed and may still run "
                    "in the guest as PID %d." % (self.limits.command_timeout, pid),
                    pid=pid,
                    vmid=self.vmid,
                )
            self._sleep(min(next_pause(waited, waited), remaining))
            status = self._status(pid)
            if status is not None:
                return status

    def _status(self, pid: int) -> CommandResult | None:
        """One ``exec-status`` read, re-read up to ``status_rereads`` times when its reply is lost; None while running."""
        for attempt in range(self.limits.status_rereads + 1):
            try:
                data = self.client.get(self.agent_path + "/exec-status", pid=pid)
            except ProviderError as err:
                if err.code == "permission_denied" or agent_reason(err) in _AGENT_DOWN | {"vm_not_running"}:
                    raise self._mapped(err, "exec-status") from None
                if (
                    agent_reason(err) != "unknown_pid"
                    and err.code in _REREAD_CODES
                    and attempt < self.limits.status_rereads
                ):
                    self._sleep(next_pause(0.0, 0.0))
                    continue
                raise self._status_lost(pid) from None
            if not isinstance(data, dict) or "exited" not in data:
                if attempt < self.limits.status_rereads:
                    continue
                raise self._status_lost(pid)
            return _result(data, pid) if data["exited"] else None
        raise self._status_lost(pid)  # pragma: no cover - the loop returns or raises

    def _status_lost(self, pid: int) -> ProviderError:
        return _error(
            "qga_exec_status_lost",
            "The exit status of the command started as PID %d could not be read (its reply was lost or its status was "
            "already consumed); whether and how it ended is unknown." % pid,
            pid=pid,
            vmid=self.vmid,
        )

    # -- files ---------------------------------------------------------------------------------------------------------
    def write_file(self, data: bytes, dest: str) -> None:
        """Write ``data`` to ``dest`` in the guest: base64 parts next to it, joined by one command (``JOIN_SCRIPT``), so
        ``dest`` appears whole (a rename) or not at all."""
        self.check_size(len(data))
        stem = "%s.vmanyware-qga-%s" % (dest, self._token())
        parts: list[str] = []
        for index, offset in enumerate(range(0, max(len(data), 1), WRITE_PART_BYTES)):
            part = "%s.%04d" % (stem, index)
            content = base64.b64encode(data[offset : offset + WRITE_PART_BYTES]).decode("ascii")
            try:
                self.client.post(self.agent_path + "/file-write", file=part, content=content, encode=False)
            except ProviderError as err:
                raise self._mapped(err, "file-write") from None
            parts.append(part)
        result = self.run_argv(join_argv(dest, stem + ".tmp", parts))
        if result.rc != 0:
            raise _error(
                "qga_transfer_failed",
                "Joining the uploaded parts into the destination file failed in the guest (exit code %d); the destination "
                "was not replaced." % result.rc,
                exit_code=result.rc,
                vmid=self.vmid,
            )

    def read_file(self, src: str) -> bytes:
        """The bytes of ``src`` in the guest: ``file-read`` with ``decode=0`` (base64), ``count``/``offset``, while truncated."""
        chunks: list[bytes] = []
        offset = 0
        while True:
            try:
                data = self.client.get(
                    self.agent_path + "/file-read", file=src, count=READ_CHUNK_BYTES, offset=offset, decode=False
                )
            except ProviderError as err:
                raise self._mapped(err, "file-read") from None
            content = data.get("content") if isinstance(data, dict) else None
            if not isinstance(content, str):
                raise _error("unexpected_response", "The guest agent answered file-read with an unexpected body.")
            try:
                chunk = base64.b64decode(content, validate=True)
            except (ValueError, binascii.Error):
                raise _error(
                    "unexpected_response", "The guest agent answered file-read with content that is not base64."
                ) from None
            offset += len(chunk)
            self.check_size(offset)
            chunks.append(chunk)
            if not data.get("truncated"):
                return b"".join(chunks)
            if not chunk:  # truncated without progress: never loop forever
                raise _error("unexpected_response", "The guest agent reported a truncated read without returning data.")

    def check_size(self, size: int) -> None:
        if size > self.limits.file_size_limit:
            raise _error(
                "qga_file_too_large",
                "The file is larger than file_size_limit (%d bytes); nothing was transferred."
                % self.limits.file_size_limit,
                limit=self.limits.file_size_limit,
            )

    # -- errors --------------------------------------------------------------------------------------------------------
    def _mapped(self, err: ProviderError, call: str) -> VmanywareError:
        """The fixed error of a refused agent request (``call``: exec, exec-status, file-write, file-read)."""
        reason = agent_reason(err)
        if reason in _AGENT_DOWN:
            return _error(
                "qga_agent_unavailable",
                "The VM's QEMU guest agent is not running, not configured (agent: 1) or refuses guest-exec; nothing ran.",
                reason=reason,
                vmid=self.vmid,
            )
        if reason == "vm_not_running":
            return _error(
                "qga_vm_not_running", "The VM is not running, so its guest agent cannot run anything.", vmid=self.vmid
            )
        if err.code == "permission_denied":
            return _error(
                "permission_denied",
                "The token lacks %s on /vms/%d (agent/%s)." % (_PRIVILEGES[call], self.vmid, call),
                privilege=_PRIVILEGES[call],
                path="/vms/%d" % self.vmid,
            )
        if reason == "file_not_found" or err.code == "not_found":
            return _error("not_found", "The file does not exist in the guest (agent/%s)." % call, vmid=self.vmid)
        return err


def _result(data: t.Mapping[str, t.Any], pid: int) -> CommandResult:
    """The ``CommandResult`` of an exited ``exec-status`` (``qga_output_truncated`` when the agent cut the output)."""
    if data.get("out-truncated") or data.get("err-truncated"):
        raise _error(
            "qga_output_truncated",
            "The guest agent truncated the output of PID %d at its capture limit; the result is refused." % pid,
            pid=pid,
        )
    exitcode = data.get("exitcode")
    signal = data.get("signal")
    if isinstance(exitcode, int) and not isinstance(exitcode, bool):
        rc = exitcode
    elif isinstance(signal, int) and not isinstance(signal, bool):
        rc = 128 + signal  # as a shell reports a killed child
    else:
        rc = -1
    return CommandResult(
        rc, str(data.get("out-data") or "").encode("utf-8"), str(data.get("err-data") or "").encode("utf-8"), pid
    )
