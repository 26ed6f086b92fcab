# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A QEMU guest agent session over the guest's virtio-serial socket: one JSON command at a time, with its reply."""

from __future__ import annotations

import base64
import json
import secrets
import socket
import time
import typing as t
from collections.abc import Mapping

from .guest import AgentCommandError, AgentNotRunning


class _QgaSession:
    """One connection to the QGA chardev socket (QEMU serves one client at a time)."""

    def __init__(self, path: str, vmid: int, sync_timeout: float, timeout: float) -> None:
        self.path = path
        self.vmid = vmid
        self.sync_timeout = sync_timeout
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.buf = b""

    def __enter__(self) -> _QgaSession:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.sync_timeout)
            sock.connect(self.path)
        except OSError as exc:
            sock.close()
            raise AgentNotRunning() from exc
        self.sock = sock
        sync_id = secrets.randbelow(1 << 31) + 1
        try:
            # 0xFF resets the agent's JSON parser; the reply to -delimited starts with 0xFF too.
            self._send(
                b"\xff" + json.dumps({"execute": "guest-sync-delimited", "arguments": {"id": sync_id}}).encode() + b"\n"
            )
            deadline = time.monotonic() + self.sync_timeout
            while True:
                reply = self._read_reply(deadline)
                if reply is None:
                    raise AgentNotRunning()
                if reply.get("return") == sync_id:
                    return self
                # anything else is a stale reply to an earlier session's command: discard it
        except (OSError, AgentNotRunning) as exc:
            self.close()
            raise AgentNotRunning() from exc

    def __exit__(self, *exc: t.Any) -> None:
        self.close()

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None

    def _send(self, data: bytes) -> None:
        assert self.sock is not None
        self.sock.sendall(data)

    def _read_reply(self, deadline: float) -> dict[str, t.Any] | None:
        """The next JSON object line (0xFF bytes dropped), or None at the deadline."""
        assert self.sock is not None
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                line = line.replace(b"\xff", b"").strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    return obj
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not data:
                return None
            self.buf += data

    def call(self, execute: str, arguments: Mapping[str, t.Any] | None = None, timeout: float | None = None) -> t.Any:
        msg: dict[str, t.Any] = {"execute": execute}
        if arguments:
            msg["arguments"] = dict(arguments)
        self._send(json.dumps(msg).encode() + b"\n")
        reply = self._read_reply(time.monotonic() + (timeout or self.timeout))
        if reply is None:
            raise AgentCommandError(
                f"VM {self.vmid} qga command '{execute}' failed - got timeout", desc="got timeout", command=execute
            )
        if "error" in reply:
            err = reply["error"] if isinstance(reply["error"], dict) else {}
            desc = str(err.get("desc", "unknown error"))
            raise AgentCommandError(
                f"VM {self.vmid} qga command '{execute}' failed - {desc}", desc=desc, command=execute
            )
        return reply.get("return")


def _decode(data: t.Any) -> str:
    return base64.b64decode(str(data)).decode("utf-8", errors="replace")
