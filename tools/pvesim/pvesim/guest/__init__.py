# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A deterministic simulated Debian 13 guest behind the QEMU guest agent, one per started VM.

Everything is a pure function of the VMID, the VM config, the cloud-init seed the guest booted
from (:func:`pvesim.cloudinit.drive_files`), and an injected clock (simulated seconds). Nothing
touches the host: commands run against a small in-memory model.

Parts: ``model`` (constants, errors, timing and fault knobs, the boot timeline), ``hostkeys``,
``network``, ``cloudinit_status``, ``files``, ``packages`` (the package database), ``commands``
(``guest-exec``), ``simulated`` (``SimulatedGuest``, the agent API) and ``protocol``
(``GuestBackend``, which the real guest of ``pvesim.realguest`` implements too).

Facts followed (see docs/simulator-guest.md for the sources):

- PVE (qemu-server ``PVE/QemuServer/Agent.pm``, ``PVE/API2/Qemu/Agent.pm``, ``PVE/QMPClient.pm``):
  agent errors read ``VM <vmid> qga command 'guest-<cmd>' failed - <QGA error>``; a missing agent
  is ``QEMU guest agent is not running``; ``exec-status`` has ``out-data``/``err-data`` already
  base64-decoded and booleans as 0/1; ``file-read`` returns ``content``, ``bytes-read`` and
  ``truncated: 1`` only when it stopped before EOF.
- QGA (qemu ``qga/commands.c``, ``qapi/qmp-dispatch.c``): an exited status is handed out once and
  then forgotten (``Invalid parameter 'pid'``); ``out-data`` only when there was output, then with
  ``out-truncated`` (QEMU >= 10.0.4); blocked commands fail with ``The command guest-exec has been
  disabled for this instance``; a missing binary fails the *exec* call itself with GLib's
  ``Failed to execute child process "x" (No such file or directory)``; file-open errors read
  ``failed to open file '<path>' (mode: 'r'): No such file or directory``.
- cloud-init 25.1 (``cloudinit/cmd/status.py``, ``cloudinit/cmd/main.py``): status.json layout,
  ``status --long`` text, exit codes 0 (done), 1 (error), 2 (degraded), ``--wait`` dots,
  ``last_update`` formatted from *uptime* seconds (hence 1970 dates).
"""

from __future__ import annotations

from .hostkeys import host_public_keys, key_fingerprint
from .model import (
    DEFAULT_PREINSTALLED,
    AgentCommandError,
    AgentNotRunning,
    GuestFaults,
    GuestTiming,
    agent_error,
    check_exec,
    read_content,
    spawn_failed,
)
from ..debversion import dpkg_version_compare
from .protocol import GuestBackend
from .simulated import OSINFO, SimulatedGuest

_fingerprint = key_fingerprint  # the name tests/unit/.../test_guest_stages.py imports

__all__ = [
    "DEFAULT_PREINSTALLED",
    "OSINFO",
    "AgentCommandError",
    "AgentNotRunning",
    "GuestBackend",
    "GuestFaults",
    "GuestTiming",
    "SimulatedGuest",
    "agent_error",
    "check_exec",
    "spawn_failed",
    "dpkg_version_compare",
    "key_fingerprint",
    "host_public_keys",
    "read_content",
]
