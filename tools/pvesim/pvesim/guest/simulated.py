# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``SimulatedGuest``: the agent API of one simulated guest, assembled from its parts (network, files, commands)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .commands import EXEC_WRAPPER, Commands
from .model import (
    IMAGE_DEFAULT_HOSTNAME,
    GuestFaults,
    GuestTiming,
    Outcome,
    Proc,
    check_exec,
    load_yaml_text,
    read_content,
    spawn_failed,
)
from .network import GuestNetwork

OSINFO = {
    "id": "debian",
    "name": "Debian GNU/Linux",
    "pretty-name": "Debian GNU/Linux 13 (trixie)",
    "version": "13 (trixie)",
    "version-id": "13",
    "kernel-release": "6.12.48+deb13-cloud-amd64",
    "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.12.48-1",
    "machine": "x86_64",
}


class SimulatedGuest(GuestNetwork, Commands):
    """The guest of one running VM; create it when the VM starts, drop it when it stops."""

    def __init__(
        self,
        vmid: int,
        config: Mapping[str, str],
        seed: Mapping[str, str],
        clock: Callable[[], float],
        timing: GuestTiming | None = None,
        faults: GuestFaults | None = None,
        ipv6_prefixes: Mapping[str, str | None] | None = None,
    ) -> None:
        """``ipv6_prefixes``: ``netN`` -> the IPv6 prefix routers announce where that NIC is plugged (None or absent:
        none, so SLAAC and DHCPv6 give no global address); ``pvesim.vmnet.nic_prefixes`` computes it."""
        self.vmid = vmid
        self.ipv6_prefixes = dict(ipv6_prefixes or {})
        self.config = dict(config)
        self.seed = dict(seed)
        self._clock = clock
        self.timing = timing or GuestTiming()
        self.faults = faults or GuestFaults()
        self.boot_time = clock()
        self._procs = {}
        self._next_pid = 1000 + vmid % 97
        self._written: dict[str, str] = {}  # files written in the guest (agent/file-write, the exec wrapper's markers)
        self._wrapped: dict[
            str, int
        ] = {}  # exec-marker -> pid of the command the wrapper runs (its ``.exit`` appears at its end)
        self._wrapper_runs: dict[
            str, str
        ] = {}  # exec-marker -> what the wrapper did: ran, superseded, refused (ran before)
        self.installed = dict(self.faults.preinstalled)
        self._lists_fresh = not self.faults.apt_lists_empty_at_boot
        self._cloudinit_applied = False
        user_text = self.seed.get("user", "")
        cfg = load_yaml_text(user_text) if user_text.startswith("#cloud-config") else None
        self.cloud_config = cfg if isinstance(cfg, dict) else {}
        meta = load_yaml_text(self.seed.get("meta"))
        self.meta = meta if isinstance(meta, dict) else {}
        self.hostname = str(
            self.cloud_config.get("hostname") or self.meta.get("local-hostname") or IMAGE_DEFAULT_HOSTNAME
        )
        self.fqdn = str(self.cloud_config.get("fqdn") or self.hostname)
        self._nics = self._build_nics()

    # -- agent API -----------------------------------------------------------------------------

    def ping(self) -> dict[str, Any]:
        """``POST .../agent/ping``: the QGA result (``{}``); PVE wraps it as ``{"result": {}}``."""
        self._require_agent()
        return {}

    def network_get_interfaces(self) -> list[dict[str, Any]]:
        """``GET .../agent/network-get-interfaces``: the QGA list; PVE wraps it as ``{"result": [...]}``."""
        self._require_agent()
        now = self.uptime()
        ticks = int(now * 10)
        result: list[dict[str, Any]] = [
            {
                "name": "lo",
                "hardware-address": "00:00:00:00:00:00",
                "ip-addresses": [
                    {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
                    {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
                ],
                "statistics": self._stats(ticks, 1, 120),
            }
        ]
        for nic in self._nics:
            result.append(
                {
                    "name": nic.name,
                    "hardware-address": nic.mac,
                    "ip-addresses": self._addresses(nic, now),
                    "statistics": self._stats(ticks, 3, 420),
                }
            )
        return result

    def exec(self, command: Sequence[str] | None, input_data: str | None = None) -> int:
        """``POST .../agent/exec``: start ``command`` (argv, no shell); returns the pid (PVE: ``{"pid": pid}``)."""
        argv = list(command or [])
        check_exec(self.vmid, argv, input_data, self._require_agent, self.faults.exec_disabled)
        if self._resolve(argv[0]) is None:
            raise self._error("exec", spawn_failed(argv[0]))
        now = self.uptime()
        marker = self._wrapper_marker(argv)
        if marker is None:
            outcome = self._run(argv, {}, input_data, now)
        else:
            outcome, marker = self._run_wrapper(marker, argv[5:], input_data, now)
        duration = self.timing.exec_default if outcome.duration is None else outcome.duration
        pid = self._next_pid
        self._next_pid += 1 + (pid * 7) % 5
        end = math.inf if outcome.waits is not None else now + duration
        self._procs[pid] = Proc(
            now, end, outcome.exitcode, outcome.out, outcome.err, outcome.effect, outcome.apt_lock, waits=outcome.waits
        )
        if marker is not None:
            self._wrapped[marker] = pid
        return pid

    def file_write(self, path: str, content: bytes) -> None:
        """``POST .../agent/file-write``: (re)write ``path`` with ``content`` (PVE opens it with mode ``wb``); kept as
        text with the undecodable bytes escaped, so a read gives back exactly these bytes."""
        self._require_agent()
        self._written[path] = bytes(content).decode("utf-8", errors="surrogateescape")

    # -- the exec-marker wrapper (``commands.EXEC_WRAPPER``), step by step on the guest's files ------------------

    def _wrapper_marker(self, argv: list[str]) -> str | None:
        if (
            len(argv) >= 5
            and self._resolve(argv[0]) == "sh"
            and argv[1] == "-c"
            and argv[2] == EXEC_WRAPPER
            and argv[3] == "vmanyware"
        ):
            return argv[4]
        return None

    def _run_wrapper(
        self, marker: str, argv: list[str], input_data: str | None, now: float
    ) -> tuple[Outcome, str | None]:
        """``(set -C; : >$m.started) || exit 125``; ``.superseded`` -> ``.exit`` says so, exit 125; else the command, whose exit
        code ``.exit`` holds once it ended (the marker returned: ``_wrapped`` maps it to the command's pid)."""
        if marker + ".started" in self._written:
            self._wrapper_runs.setdefault(marker, "refused")
            return Outcome(125), None
        self._written[marker + ".started"] = ""
        if marker + ".superseded" in self._written:
            self._written[marker + ".exit"] = "superseded\n"
            self._wrapper_runs[marker] = "superseded"
            return Outcome(125), None
        self._wrapper_runs[marker] = "ran"
        if not argv:
            return Outcome(0, duration=0.01), marker
        if self._resolve(argv[0]) is None:
            return Outcome(127, "", f"vmanyware: 1: {argv[0]}: not found\n", duration=0.01), marker
        return self._run(argv, {}, input_data, now), marker

    def _settled(self, pid: int) -> Proc | None:
        """The process ``pid`` with its end known once a waiting command answered (None: its status was consumed)."""
        proc = self._procs.get(pid)
        if proc is not None and proc.waits is not None:
            final = proc.waits(self.uptime())
            if final is not None:
                duration = self.timing.exec_default if final.duration is None else final.duration
                proc = self._procs[pid] = Proc(proc.start, proc.start + duration, final.exitcode, final.out, final.err)
        return proc

    def _wrapper_exit(self, marker: str) -> str | None:
        pid = self._wrapped.get(marker)
        proc = None if pid is None else self._settled(pid)
        if proc is None or proc.waits is not None or self.uptime() < proc.end:
            return None
        self._written[marker + ".exit"] = f"{proc.exitcode}\n"
        return self._written[marker + ".exit"]

    def _file(self, path: str) -> str | None:
        self._advance()
        if path in self._written:
            return self._written[path]
        if path.endswith(".exit"):
            text = self._wrapper_exit(path[: -len(".exit")])
            if text is not None:
                return text
        return super()._file(path)

    def exec_status(self, pid: int) -> dict[str, Any]:
        """``GET .../agent/exec-status``: PVE's shape; an exited status can be read exactly once."""
        self._require_agent()
        proc = self._settled(pid)
        if proc is None:
            raise self._error("exec-status", "Invalid parameter 'pid'")
        if proc.waits is not None or self.uptime() < proc.end:
            return {"exited": 0}
        for marker in [m for m, p in self._wrapped.items() if p == pid]:
            self._wrapper_exit(marker)  # the wrapper wrote its exit code when the command ended
            del self._wrapped[marker]
        del self._procs[pid]
        result: dict[str, Any] = {"exited": 1, "exitcode": proc.exitcode}
        if proc.out:
            result["out-data"] = proc.out
            result["out-truncated"] = 0
        if proc.err:
            result["err-data"] = proc.err
            result["err-truncated"] = 0
        return result

    def file_read(self, path: str, count: int | None = None, offset: int = 0, decode: bool = True) -> dict[str, Any]:
        """``GET .../agent/file-read``: ``{"content", "bytes-read"}`` plus ``"truncated": 1`` before EOF."""
        self._require_agent()
        text = self._file(path)
        if text is None:
            raise self._error("file-open", f"failed to open file '{path}' (mode: 'r'): No such file or directory")
        data = text.encode("utf-8", errors="surrogateescape")[offset:]
        limit = 16 * 1024 * 1024 if count is None else count
        chunk_size = 1024 * 1024
        read = 0
        eof = False
        while read < limit and not eof:
            want = min(chunk_size, limit - read)
            got = data[read : read + want]
            read += len(got)
            eof = len(got) < want
        result: dict[str, Any] = {"content": read_content(data[:read], decode), "bytes-read": read}
        if not eof:
            result["truncated"] = 1
        return result

    def get_osinfo(self) -> dict[str, Any]:
        """``GET .../agent/get-osinfo``: the image's os-release (PVE wraps it as ``{"result": ...}``)."""
        self.ping()
        return dict(OSINFO)

    def get_info(self) -> dict[str, Any]:
        """``GET .../agent/info``: the agent version and the commands it supports."""
        self.ping()
        cmds = [
            "guest-ping",
            "guest-exec",
            "guest-exec-status",
            "guest-file-read",
            "guest-file-write",
            "guest-network-get-interfaces",
            "guest-get-osinfo",
        ]
        return {
            "version": "9.2.0",
            "supported_commands": [{"name": c, "enabled": True, "success-response": True} for c in cmds],
        }

    # -- lifecycle and introspection (for the server and tests; not agent calls) -----------------

    def stop(self, graceful: bool = False) -> None:
        """The VM stops: nothing runs outside this object, so there is nothing to end."""
        del graceful

    def admin_info(self) -> dict[str, Any]:
        """Extra fields for ``GET /_pvesim/vms/{vmid}``: ``exec_wrapper``, what the exec-marker wrapper did per marker (``ran``,
        ``superseded``: a late start refused, ``refused``: a marker run before), the guest's own evidence of which commands ran."""
        return {"exec_wrapper": dict(self._wrapper_runs)}

    def cloudinit_status(self) -> dict[str, Any]:
        """Status details as ``cloud-init status --format json`` would compute them now."""
        self._advance()
        return self._ci_details(self.uptime())

    def installed_packages(self) -> dict[str, str]:
        self._advance()
        return dict(self.installed)
