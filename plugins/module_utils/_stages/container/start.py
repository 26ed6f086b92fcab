# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container stage ``start``: start the created container.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..common import find_tasks
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .common import power_state, require_ours


class ContainerStartStage(StageLogic):
    kind = "start"
    task_type = "vzstart"
    default_timeout = 300.0

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        state = power_state(ctx)
        ctx.facts["running"] = state == "running"

    def request(self, ctx: StageContext) -> Request | None:
        return None if ctx.facts.get("running") else Request("POST", ctx.vm_path + "/status/start", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        state = power_state(ctx)
        if state != "running":
            raise StageError(
                "The start task succeeded but the container is not running.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "powerState": state},
            )
        return {"powerState": "running"}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = find_tasks(ctx, "vzstart", ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if power_state(ctx) == "running":
            return Resolution.applied(startResolvedBy="power_state")
        return Resolution(
            "not_applied",
            message="No vzstart task for the container is visible and it is stopped: the start request may not "
            "have reached Proxmox. Check the node's task list, then start it or abandon the operation.",
        )

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        return {
            "before": {"powerState": "running" if ctx.facts.get("running") else "stopped"},
            "after": {"powerState": "running"},
        }
