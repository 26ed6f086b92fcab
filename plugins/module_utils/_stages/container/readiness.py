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
from .. import nic as _nic
from ..._formats.networks import NONE
from .common import DEFAULT_READINESS_TIMEOUT, container_mac, power_state, require_ours

_POLL = 2.0


def _candidates(entry: t.Mapping[str, t.Any], kind: str) -> list[str]:
    """The ``kind`` (``inet``, ``inet6``) addresses of an ``interfaces`` entry, without prefix."""
    found = [
        str(a.get("ip-address"))
        for a in entry.get("ip-addresses") or []
        if isinstance(a, dict) and a.get("ip-address-type") == kind
    ]
    if isinstance(entry.get(kind), str):
        found.append(entry[kind].split("/", 1)[0])
    return found


def usable_ipv4(entry: t.Mapping[str, t.Any], wanted: str | None = None) -> str | None:
    """The first global unicast IPv4 of an ``interfaces`` entry (not loopback, link-local or unspecified); with
    ``wanted`` (a static network's address), that address only."""
    for text in _candidates(entry, "inet"):
        try:
            address = ipaddress.IPv4Address(text)
        except ValueError:
            continue
        if wanted is not None and str(address) != wanted:
            continue
        if not (address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast):
            return str(address)
    return None


def usable_addresses(entry: t.Mapping[str, t.Any], nic: t.Mapping[str, t.Any]) -> dict[str, str | None] | None:
    """Every planned family's address on the entry (as the VM's readiness: ``usable_addresses``), or ``None``."""
    found: dict[str, str | None] = {"ipv4": None}
    if (nic.get("ipv4") or {}).get("mode") != NONE:
        found["ipv4"] = usable_ipv4(entry, _nic.wanted_address(nic))
        if found["ipv4"] is None:
            return None
    ipv6 = _nic.wanted_ipv6(nic)
    if ipv6 is not None:
        found["ipv6"] = _nic.pick_ipv6(_candidates(entry, "inet6"), ipv6)
        if found["ipv6"] is None:
            return None
    return found


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
                    addresses = usable_addresses(entry, _nic.planned(ctx))
                    if addresses is not None:
                        return {
                            "ipv4": addresses["ipv4"],
                            **(
                                {"ipv6": addresses["ipv6"], "address": addresses["ipv4"] or addresses["ipv6"]}
                                if "ipv6" in addresses
                                else {}
                            ),
                            "net0Mac": container_mac(ctx.operation),
                            "guestReady": True,
                            "hostKeysVerified": False,
                            "readinessObservedAt": _iso(self.wall_clock()),
                        }
            now = self.wall_clock()
            if now >= deadline:
                raise StageError(
                    "The container did not get its planned addresses on net0 (a usable IPv4, the planned IPv6) before "
                    "the readiness deadline.",
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
            **{key: evidence[key] for key in ("ipv6", "address") if key in evidence},
            guestUser=ctx.plan["guestUser"],
            readinessObservedAt=evidence["readinessObservedAt"],
            hostKeys="unverified: containers have no API to read SSH host keys (docs/containers.md)",
        )
