# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``GuestBackend``: what the API layer and the admin API use of a running VM's guest.

Implemented by :class:`pvesim.guest.SimulatedGuest` (the default), :class:`pvesim.realguest.RealGuest`
(``--guests real``) and :class:`pvesim.containerguest.ContainerGuest` (``--guests container``);
``tools/pvesim/tests/test_guest_backend.py`` checks them against it.
Agent calls raise :class:`AgentNotRunning` (PVE: ``QEMU guest agent is not running``) or
:class:`AgentCommandError` (``.message`` is PVE's error text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .model import GuestFaults, GuestTiming


@runtime_checkable
class GuestBackend(Protocol):
    """The guest of one running VM, as ``pvesim.api`` and ``pvesim.guestlink`` use it."""

    vmid: int
    faults: GuestFaults  # admin knobs (PUT /_pvesim/vms/{vmid}/guest); the agent endpoints read exec_disabled
    timing: GuestTiming

    def ping(self) -> dict[str, Any]:
        """``POST .../agent/ping``: the QGA result."""

    def network_get_interfaces(self) -> list[dict[str, Any]]:
        """``GET .../agent/network-get-interfaces``: the QGA interface list."""

    def get_osinfo(self) -> dict[str, Any]:
        """``GET .../agent/get-osinfo``: the QGA os-release fields."""

    def get_info(self) -> dict[str, Any]:
        """``GET .../agent/info``: the agent version and its supported commands."""

    def exec(self, command: Sequence[str] | None, input_data: str | None = None) -> int:
        """``POST .../agent/exec``: start argv (no shell); the pid."""

    def exec_status(self, pid: int) -> dict[str, Any]:
        """``GET .../agent/exec-status``: PVE's shape (out-data/err-data decoded, booleans as 0/1)."""

    def file_read(self, path: str, count: int | None = None, offset: int = 0, decode: bool = True) -> dict[str, Any]:
        """``GET .../agent/file-read``: ``content``, ``bytes-read`` and ``truncated: 1`` before EOF; ``decode`` false:
        ``content`` is the base64 of each 1 MiB chunk read, concatenated (PVE's ``decode=0``; ``read_content``)."""

    def file_write(self, path: str, content: bytes) -> None:
        """``POST .../agent/file-write``: write exactly ``content`` to ``path``, replacing it (the API layer decodes
        PVE's ``encode=0`` base64, or encodes text as UTF-8)."""

    def stop(self, graceful: bool = False) -> None:
        """The VM stopped (``graceful``: shut down): end whatever runs the guest."""

    def admin_info(self) -> dict[str, Any]:
        """Extra fields for ``GET /_pvesim/vms/{vmid}``."""
