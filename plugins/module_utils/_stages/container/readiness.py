# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container stage ``readiness``: wait until the container is running with a usable IPv4 address on its interface.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import ipaddress
import time
import typing as t

from ..._core.errors import ProviderError
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, StageError, StageInProgress
from .common import DEFAULT_READINESS_TIMEOUT, container_mac, power_state, require_ours

_POLL = 2.0


def usable_ipv4(entry: t.Mapping[str, t.Any]) -> str | None:
    """The first global unicast IPv4 of an ``interfaces`` entry (not loopback, link-local or unspecified)."""
    candidates = [
        a.get("ip-address")
        for a in entry.get("ip-addresses") or []
        if isinstance(a, dict) and a.get("ip-address-type") == "inet"
    ]
    if isinstance(entry.get("inet"), str):
        candidates.append(entry["inet"].split("/", 1)[0])
    for text in candidates:
        try:
            address = ipaddress.IPv4Address(str(text))
        except ValueError:
            continue
        if not (address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast):
            return str(address)
    return None


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ContainerReadinessStage(StageLogic):
    kind = "readiness"
    task_type = None
    final_codes = frozenset({"guest_network_unavailable"})

    def __init__(
        self, readiness_timeout: float = DEFAULT_READINESS_TIMEOUT, wall_clock: t.Callable[[], float] | None = None
    ) -> None:
        self.readiness_timeout = float(readiness_timeout)
        self.wall_clock = wall_clock or time.time

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        if power_state(ctx) != "running":
            raise StageError(
                "The container is not running; run the start stage first.",
                details={"stage": ctx.kind, "rule": "running"},
            )
        if ctx.check_mode:
            raise StageInProgress({"phase": "check_mode", "note": "readiness only reads; it is skipped in check mode"})

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """The deadline, journaled when the stage first starts; re-runs never extend it."""
        if "deadline" in ctx.evidence():
            return None
        now = self.wall_clock()
        return {
            "deadline": round(now + self.readiness_timeout, 3),
            "startedAt": _iso(now),
            "timeoutSeconds": self.readiness_timeout,
        }

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        mac = container_mac(ctx.operation).lower()
        deadline = float(ctx.evidence()["deadline"])
        budget = ctx.wait_budget
        started = self.wall_clock()
        while True:
            try:
                entries = ctx.client.get(ctx.vm_path + "/interfaces")
            except ProviderError as err:
                if err.code not in ("server_error", "reply_lost", "transport_lost"):
                    raise
                entries = []
            for entry in entries if isinstance(entries, list) else []:
                if (
                    isinstance(entry, dict)
                    and str(entry.get("hwaddr", entry.get("hardware-address", ""))).lower() == mac
                ):
                    address = usable_ipv4(entry)
                    if address is not None:
                        return {
                            "ipv4": address,
                            "net0Mac": container_mac(ctx.operation),
                            "guestReady": True,
                            "hostKeysVerified": False,
                            "readinessObservedAt": _iso(self.wall_clock()),
                        }
            now = self.wall_clock()
            if now >= deadline:
                raise StageError(
                    "The container got no usable IPv4 address on net0 before the readiness deadline.",
                    code="guest_network_unavailable",
                    details={"stage": ctx.kind, "phase": "network"},
                )
            if budget is not None and now >= started + float(budget):
                raise StageInProgress(
                    {"phase": "network", "deadline": _iso(deadline), "secondsLeft": int(deadline - now)}
                )
            # never past the deadline, nor past this run's wait budget
            limit = deadline if budget is None else min(deadline, started + float(budget))
            ctx.sleep(min(_POLL, max(0.0, limit - now)))

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        return dict(
            ctx.operation.get("handoff") or {},
            ipv4=evidence["ipv4"],
            guestUser=ctx.plan["guestUser"],
            readinessObservedAt=evidence["readinessObservedAt"],
            hostKeys="unverified: containers have no API to read SSH host keys (docs/containers.md)",
        )
