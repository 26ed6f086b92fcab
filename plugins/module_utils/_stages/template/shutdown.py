# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``shutdown``: a clean shutdown of the build VM.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution
from .. import common
from .. import guest as _guest
from .common import observation_mismatch, require_build_vm, undecidable_task


# -- shutdown -----------------------------------------------------------------------------------------
class ShutdownStage(StageLogic):
    """``POST .../status/shutdown`` (ACPI); ``forceStop`` only when the operator asked for it."""

    kind = "shutdown"
    task_type = "qmshutdown"
    default_timeout = 600.0

    def __init__(self, force_stop: bool = False) -> None:
        self.force_stop = force_stop

    def preconditions(self, ctx: StageContext) -> None:
        require_build_vm(ctx, stopped=False)
        ctx.facts["power"] = _guest.read_power(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("power") == "stopped":
            return None
        params: dict[str, t.Any] = {"timeout": 300}
        if self.force_stop:
            params["forceStop"] = 1
        return Request("POST", ctx.vm_path + "/status/shutdown", params)

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if _guest.read_power(ctx) != "stopped":
            raise observation_mismatch(ctx, "stopped")
        return {"powerState": "stopped", "forceStop": self.force_stop}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = common.find_tasks(ctx, "qmshutdown", ctx.vmid)
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        if not tasks and _guest.read_power(ctx) == "stopped":
            return Resolution.applied()
        return undecidable_task(ctx, "qmshutdown")
