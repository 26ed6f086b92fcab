# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The simulated guest's data: constants, errors, timing and fault knobs, processes, and the boot timeline."""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml


AGENT_NOT_RUNNING = "QEMU guest agent is not running"


# What the Debian 13 "genericcloud" image has installed at first boot (name -> version).
DEFAULT_PREINSTALLED: dict[str, str] = {
    "apt": "3.0.3",
    "bash": "5.2.37-2+b5",
    "ca-certificates": "20250419",
    "cloud-init": "25.1.4-1",
    "coreutils": "9.7-3",
    "dpkg": "1.22.21",
    "openssh-server": "1:10.0p1-7",
    "qemu-guest-agent": "1:10.0.2+ds-2",
    "sudo": "1.9.16p2-3",
}

IMAGE_DEFAULT_USER = "debian"
IMAGE_DEFAULT_HOSTNAME = "localhost"
CLOUDINIT_APT_PID = 812

# cloud-init stages as fractions of the time until cloud-init is done (uptime based).
CLOUDINIT_STAGES: tuple[tuple[str, float, float], ...] = (
    ("init-local", 0.10, 0.15),
    ("init", 0.20, 0.35),
    ("modules-config", 0.40, 0.50),
    ("modules-final", 0.55, 1.00),
)


class AgentNotRunning(Exception):
    """The agent is not (yet) up: PVE answers HTTP 500 ``QEMU guest agent is not running``."""

    def __init__(self) -> None:
        super().__init__(AGENT_NOT_RUNNING)
        self.message = AGENT_NOT_RUNNING


class AgentCommandError(Exception):
    """A failed agent call; ``message`` is the text PVE returns (HTTP 500), ``desc`` the QGA part."""

    def __init__(self, message: str, *, desc: str = "", command: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.desc = desc or message
        self.command = command


def agent_error(vmid: int, command: str, desc: str) -> AgentCommandError:
    """qemu-server's text for a failed ``guest-<command>`` (HTTP 500): ``VM <vmid> qga command ... failed - <desc>``."""
    return AgentCommandError(
        f"VM {vmid} qga command 'guest-{command}' failed - {desc}", desc=desc, command=f"guest-{command}"
    )


def spawn_failed(program: str, reason: str = "No such file or directory") -> str:
    """GLib's ``g_spawn`` error for a program it cannot start, as qemu-ga reports it (typographic quotes included)."""
    return f"Guest agent command failed, error was 'Failed to execute child process \u201c{program}\u201d ({reason})'"


def check_exec(
    vmid: int, argv: Sequence[str], input_data: str | None, require_agent: Callable[[], None], exec_disabled: bool
) -> None:
    """The refusals of ``agent/exec`` before anything starts, in qemu-server's and qemu-ga's order (every backend)."""
    if not argv and input_data is None:
        raise AgentCommandError("command or input-data (or both) required")
    require_agent()
    if exec_disabled:
        raise agent_error(vmid, "exec", "The command guest-exec has been disabled for this instance")
    if not argv:
        raise agent_error(vmid, "exec", "Invalid parameter type for 'path', expected: string")


@dataclass(frozen=True)
class GuestTiming:
    """Simulated seconds (the server's clock is already scaled by its speed factor)."""

    agent_up_after: float = 8.0
    dhcp_after_agent: float = 2.0
    cloudinit_done_after_boot: float = 15.0
    exec_default: float = 0.2
    apt_install: float = 5.0
    apt_update: float = 3.0
    # cloud-init's own apt run (package_upgrade) holds the dpkg lock this long before it is done.
    cloudinit_apt_window: float = 5.0


@dataclass
class GuestFaults:
    """Fault injection and image contents for one guest."""

    agent_never: bool = False
    dhcp_never: bool = False
    cloudinit_error: bool = False
    cloudinit_error_message: str = (
        "('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))"
    )
    cloudinit_recoverable_error: bool = False
    exec_disabled: bool = False
    # Overrides of the package index (pvesim/packageindex.py: every package Debian 13 offers): a name listed here
    # offers exactly these versions instead (an empty tuple: the package does not exist).
    package_versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    preinstalled: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PREINSTALLED))
    # Debian cloud images ship without package lists: installs fail until an apt-get update ran
    # (cloud-init runs one itself when user-data has package_upgrade/package_update: true).
    apt_lists_empty_at_boot: bool = True


@dataclass
class Outcome:
    exitcode: int
    out: str = ""
    err: str = ""
    duration: float | None = None
    effect: Callable[[], None] | None = None
    apt_lock: bool = False
    # A command that blocks on the guest's state (``cloud-init status --wait``): asked with the uptime at every
    # exec-status, it answers the command's final outcome (``duration`` counted from the exec) once the command has
    # ended, None while it still runs. The state is read then, so knobs changed meanwhile (PUT .../guest) count.
    waits: Callable[[float], Outcome | None] | None = None


@dataclass
class Proc:
    start: float
    end: float
    exitcode: int
    out: str
    err: str
    effect: Callable[[], None] | None = None
    apt_lock: bool = False
    applied: bool = False
    waits: Callable[[float], Outcome | None] | None = None  # see Outcome.waits; ``end`` is ``inf`` until it answers


def load_yaml_text(text: str | None) -> Any:
    if not text:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


class GuestBase:
    """The state every part of the guest reads (set by ``SimulatedGuest.__init__``) and its boot timeline."""

    vmid: int
    config: dict[str, str]
    seed: dict[str, str]
    ipv6_prefixes: dict[str, str | None]
    timing: GuestTiming
    faults: GuestFaults
    boot_time: float
    installed: dict[str, str]
    cloud_config: dict[str, Any]
    meta: dict[str, Any]
    hostname: str
    fqdn: str
    _clock: Callable[[], float]
    _procs: dict[int, Proc]
    _next_pid: int
    _lists_fresh: bool
    _cloudinit_applied: bool

    def uptime(self) -> float:
        return max(0.0, self._clock() - self.boot_time)

    @property
    def agent_up_at(self) -> float:
        """Uptime at which the agent answers (``inf`` with ``agent_never``)."""
        return math.inf if self.faults.agent_never else self.timing.agent_up_after

    @property
    def dhcp_at(self) -> float:
        return math.inf if self.faults.dhcp_never else self.timing.agent_up_after + self.timing.dhcp_after_agent

    @property
    def cloudinit_done_at(self) -> float:
        return self.timing.cloudinit_done_after_boot

    def _package_upgrade(self) -> bool:
        cfg = self.cloud_config
        return any(cfg.get(k) is True for k in ("package_upgrade", "package_update", "package_reboot_if_required"))

    def _cloudinit_apt_window(self) -> tuple[float, float]:
        done = self.cloudinit_done_at
        if not self._package_upgrade():
            return (done, done)
        final_start = CLOUDINIT_STAGES[-1][1] * done
        return (max(final_start, done - self.timing.cloudinit_apt_window), done)

    def _advance(self) -> None:
        now = self.uptime()
        if not self._cloudinit_applied and now >= self.cloudinit_done_at:
            self._cloudinit_applied = True
            if self._package_upgrade():
                self._lists_fresh = True
        for proc in sorted(self._procs.values(), key=lambda p: p.end):
            if not proc.applied and proc.end <= now:
                proc.applied = True
                if proc.effect is not None:
                    proc.effect()

    def _require_agent(self) -> None:
        self._advance()
        if self.uptime() < self.agent_up_at:
            raise AgentNotRunning()

    def _error(self, command: str, desc: str) -> AgentCommandError:
        return agent_error(self.vmid, command, desc)


READ_CHUNK = 1024 * 1024  # PVE's file-read asks the agent for 1 MiB per guest-file-read


def read_content(data: bytes, decode: bool = True) -> str:
    """PVE's file-read ``content`` for ``data``: text (UTF-8, invalid bytes replaced), or with ``decode`` false the
    base64 of each 1 MiB chunk as the agent returned it, concatenated (each chunk padded on its own)."""
    if decode:
        return data.decode("utf-8", errors="replace")
    return "".join(
        base64.b64encode(data[start : start + READ_CHUNK]).decode("ascii") for start in range(0, len(data), READ_CHUNK)
    )
