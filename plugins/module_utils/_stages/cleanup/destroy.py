# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The cleanup step ``destroy``: a guarded DELETE of the operation's VM or container, with its volumes.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .guard import DESTROY_PARAMS, GuardedStep, owned_volumes, snapshot_names
from ..protocol import StageContext
from ..outcomes import Request, Resolution, StageError
from ..common import find_tasks, read_config_or_none


class DestroyStep(GuardedStep):
    """``destroy``: ``DELETE {guest}`` (purge, destroy unreferenced disks) once the guest is stopped."""

    kind = "destroy"
    task_type = "qmdestroy"
    default_timeout = 600.0

    def preconditions(self, ctx: StageContext) -> None:
        config = self.guard(ctx)
        if config is None:
            ctx.facts["absent"] = True
            return
        state = self.power(ctx)
        if state != "stopped":
            raise StageError(code="cleanup_running", details={"stage": ctx.kind, "vmid": ctx.vmid, "powerState": state})
        inventory = {"vmid": ctx.vmid, "volumes": owned_volumes(config, ctx.vmid), "snapshots": snapshot_names(ctx)}
        ctx.facts["inventory"] = inventory

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        # Recorded before the DELETE is dispatched: once the guest is gone, nothing can be read back.
        inventory = ctx.facts.get("inventory")
        return None if inventory is None else {"inventory": inventory}

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("absent"):
            return None
        return Request("DELETE", ctx.vm_path, dict(DESTROY_PARAMS))

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if read_config_or_none(ctx) is not None:
            raise StageError(
                "The destroy task succeeded but the %s still exists." % self.noun,
                code="observation_mismatch",
                details={"stage": ctx.kind, "vmid": ctx.vmid},
            )
        inventory = ctx.evidence().get("inventory") or ctx.facts.get("inventory")
        return {"removed": inventory or {"vmid": None, "volumes": [], "snapshots": []}}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = find_tasks(ctx, self.task_type, ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if read_config_or_none(ctx) is None:
            return Resolution.applied(destroyResolvedBy="vm_gone")
        return Resolution.undecidable(
            "The %s still exists and no %s task for it is visible: the DELETE may not have reached Proxmox. "
            "Check the node's task list; the DELETE is never sent again automatically." % (self.noun, self.task_type)
        )


class ContainerDestroyStep(DestroyStep):
    """``destroy`` of a container operation's guest: ``DELETE /nodes/{node}/lxc/{vmid}``, the same parameters."""

    task_type = "vzdestroy"
    noun = "container"
