# SPDX-License-Identifier: GPL-3.0-or-later
"""A guest behind the fake client's agent endpoints, for the guest agent transport and the qga connection plugin tests.

Files are bytes (``file-write`` with ``encode=0`` decodes our base64; ``file-read`` with ``decode=0`` answers base64 of at
most ``count`` bytes from ``offset``, ``truncated`` before the end). ``exec`` records the argv and answers a PID; the join
command (``JOIN_SCRIPT``) is carried out on the files as /bin/sh would; any other command exits with ``results``' next
entry (default: exit 0, no output) after ``polls`` running reads.
"""

from __future__ import annotations

import base64
import typing as t

from pve_fake import FakeClient

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.guest_agent import JOIN_SCRIPT

NODE = "pve-test"
VMID = 201
AGENT = "/nodes/%s/qemu/%d/agent" % (NODE, VMID)


class FakeGuest:
    def __init__(self, polls: int = 1, read_limit: int | None = None) -> None:
        self.files: dict[str, bytes] = {}
        self.commands: list[list[str]] = []
        self.stdin: list[str | None] = []
        self.results: list[dict[str, t.Any]] = []
        self.polls = polls
        self.read_limit = read_limit  # at most this many bytes per file-read (a short read, as qemu-ga may give)
        self._running: dict[int, int] = {}
        self._final: dict[int, dict[str, t.Any]] = {}
        self._next_pid = 1000
        self.client = FakeClient(
            {
                "POST %s/exec" % AGENT: self.exec,
                "%s/exec-status" % AGENT: self.exec_status,
                "POST %s/file-write" % AGENT: self.file_write,
                "%s/file-read" % AGENT: self.file_read,
            }
        )

    def exec(self, params: dict[str, t.Any]) -> dict[str, t.Any]:
        argv = list(params["command"])
        self.commands.append(argv)
        self.stdin.append(params.get("input-data"))
        pid = self._next_pid
        self._next_pid += 1
        if argv[2] == JOIN_SCRIPT:
            dest, tmp, parts = argv[4], argv[5], argv[6:]
            code = 0
            if all(part in self.files for part in parts) and "/missing/" not in dest:
                self.files[dest] = b"".join(self.files[part] for part in parts)
            else:
                code = 1
            for name in parts + [tmp]:
                self.files.pop(name, None)
            self._final[pid] = {"exited": 1, "exitcode": code}
        else:
            self._final[pid] = dict(self.results.pop(0)) if self.results else {"exited": 1, "exitcode": 0}
        self._running[pid] = self.polls
        return {"pid": pid}

    def exec_status(self, params: dict[str, t.Any]) -> dict[str, t.Any]:
        pid = int(params["pid"])
        if self._running.get(pid, 0) > 0:
            self._running[pid] -= 1
            return {"exited": 0}
        return self._final.pop(pid)  # read once, as qemu-ga forgets an exited status

    def file_write(self, params: dict[str, t.Any]) -> None:
        assert params["encode"] in (0, False) and len(params["content"]) <= 61440
        self.files[params["file"]] = base64.b64decode(params["content"], validate=True)

    def file_read(self, params: dict[str, t.Any]) -> dict[str, t.Any]:
        assert params["decode"] in (0, False)
        data = self.files[params["file"]]
        offset = int(params.get("offset", 0))
        count = int(params.get("count", 16 * 1024 * 1024))
        if self.read_limit is not None:
            count = min(count, self.read_limit)
        chunk = data[offset : offset + count]
        answer: dict[str, t.Any] = {"content": base64.b64encode(chunk).decode("ascii"), "bytes-read": len(chunk)}
        if offset + len(chunk) < len(data):
            answer["truncated"] = 1
        return answer
