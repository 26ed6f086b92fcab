# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container stage ``snapshot``: the one snapshot of the provisioned container.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._operation.create import PROVISIONING_GATE, SNAPSHOTS_GATE
from ..common import find_tasks
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from ..vm.snapshot import snapshot_name
from .common import require_ours


class ContainerSnapshotStage(StageLogic):
    kind = "snapshot"
    task_type = "vzsnapshot"
    gates = (PROVISIONING_GATE, SNAPSHOTS_GATE)  # re-read by the runner right before the write, like the VM snapshot
    default_timeout = 600.0

    def _snapshots(self, ctx: StageContext) -> dict[str, dict[str, t.Any]]:
        data = ctx.client.get(ctx.vm_path + "/snapshot")
        if not isinstance(data, list):
            raise StageError("Proxmox answered the snapshot list with an unexpected body.", code="unexpected_response")
        return {
            str(item["name"]): item for item in data if isinstance(item, dict) and isinstance(item.get("name"), str)
        }

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        ctx.facts["snapshots"] = self._snapshots(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        name = snapshot_name(ctx.operation["operationId"])
        if name in ctx.facts.get("snapshots", {}):
            return None
        return Request(
            "POST",
            ctx.vm_path + "/snapshot",
            {
                "snapname": name,
                "description": "vmanyware operation %s (%s)"
                % (ctx.operation["operationId"], ctx.plan["definitionName"]),
            },
        )

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        name = snapshot_name(ctx.operation["operationId"])
        found = self._snapshots(ctx).get(name)
        if found is None:
            raise StageError(
                "The snapshot task succeeded but the snapshot is not listed.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "snapname": name},
            )
        return {"snapname": name, "snaptime": found.get("snaptime")}

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        return dict(ctx.operation.get("handoff") or {}, snapshot=evidence["snapname"])

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        if snapshot_name(ctx.operation["operationId"]) in self._snapshots(ctx):
            return Resolution.applied()
        tasks = find_tasks(ctx, "vzsnapshot", ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        return Resolution(
            "not_applied",
            message="The snapshot is not listed and no vzsnapshot task is visible; check the container's "
            "snapshots and the node's task list before re-running.",
        )
