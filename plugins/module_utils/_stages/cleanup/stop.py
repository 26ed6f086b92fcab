# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The cleanup step ``stop``: a guarded stop of the operation's VM or container.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .guard import GuardedStep
from ..protocol import StageContext
from ..outcomes import Request, Resolution, StageError
from ..common import find_tasks


class StopStep(GuardedStep):
    """``stop``: power off a running guest, only when the operator asked (``stop: true``)."""

    kind = "stop"
    task_type = "qmstop"
    default_timeout = 120.0

    def preconditions(self, ctx: StageContext) -> None:
        config = self.guard(ctx)
        ctx.facts["power"] = "absent" if config is None else self.power(ctx)
        if ctx.facts["power"] not in ("stopped", "absent") and not self.stop:
            raise StageError(
                code="cleanup_running", details={"stage": ctx.kind, "vmid": ctx.vmid, "powerState": ctx.facts["power"]}
            )

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("power") in ("stopped", "absent"):
            return None
        return Request("POST", ctx.vm_path + "/status/stop", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        state = self.power(ctx)
        if state not in ("stopped", "absent"):
            raise StageError(
                "The stop task succeeded but the %s is not stopped." % self.noun,
                code="observation_mismatch",
                details={"stage": ctx.kind, "powerState": state},
            )
        return {"powerState": state}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = find_tasks(ctx, self.task_type, ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if self.power(ctx) in ("stopped", "absent"):
            return Resolution.applied(stopResolvedBy="power_state")
        return Resolution.undecidable(
            "No %s task for the %s is visible and it still runs: the stop may not have reached Proxmox. "
            "Check the node's task list; the stop is never sent again automatically." % (self.task_type, self.noun)
        )


class ContainerStopStep(StopStep):
    """``stop`` of a container operation's guest: ``POST /nodes/{node}/lxc/{vmid}/status/stop`` (path from ``ctx.vm_path``)."""

    task_type = "vzstop"
    noun = "container"
