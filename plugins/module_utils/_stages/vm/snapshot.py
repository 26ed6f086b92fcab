# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``snapshot`` (only when the definition asks for it): one disk-only snapshot of the provisioned VM.

Its write needs both gates open, re-read right before it (``provisioning_disabled`` /
``snapshot_disabled`` otherwise: nothing is sent, the stage stays pending; an environment ``false`` wins over
the ``snapshots_enabled`` option). ``POST {vm}/snapshot`` with a name unique to the operation (``vmanyware-<last 12
characters of the operation id>``: a ``pve-configid``, at most 40 characters), ``vmstate: 0``
(no RAM) and a description naming the operation; the ``qmsnapshot`` task is reconciled by GET and
the snapshot verified in ``GET {vm}/snapshot``. A lost reply is resolved by that list: present ->
applied; absent with no ``qmsnapshot`` task since the dispatch -> no effect yet (the runner reads again, then
keeps the stage uncertain: a lost submission is never re-sent; a refused request goes back to pending).

The list is not read before the write (``preconditions``), except for an adopted operation. The runner dispatches only
a stage that never sent its write, or whose write was refused with no effect, so the operation's own name cannot be
listed unless the snapshot was made outside the collection; Proxmox refuses a name already used, under the VM's config
lock, and that refusal is resolved by the same list as a lost reply: listed -> applied. An adopted operation's VM may
already carry the snapshot (``adoption_note``): its stage reads the list first and sends nothing then.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._operation.create import PROVISIONING_GATE, SNAPSHOTS_GATE
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import common
from .. import guest as _guest
from ..adoption import AdoptionHook, Observations


def snapshot_name(operation_id: str) -> str:
    """``vmanyware-`` + the last 12 characters of the operation id (``[a-z2-7]``): a valid ``pve-configid``."""
    return "vmanyware-" + operation_id[-12:]


def list_snapshots(ctx: StageContext) -> dict[str, dict[str, t.Any]]:
    data = ctx.client.get(ctx.vm_path + "/snapshot")
    if not isinstance(data, list):
        raise StageError("Proxmox answered the snapshot list with an unexpected body.", code="unexpected_response")
    return {str(item["name"]): item for item in data if isinstance(item, dict) and isinstance(item.get("name"), str)}


class SnapshotStage(StageLogic, AdoptionHook):
    kind = "snapshot"
    task_type = "qmsnapshot"
    gates = (PROVISIONING_GATE, SNAPSHOTS_GATE)
    default_timeout = 600.0

    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.read_config(ctx)
        _guest.check_identity(ctx, config)
        if config.get("lock"):
            raise StageError("The target VM is locked; nothing was sent.", code="locked", details={"stage": ctx.kind})
        if common.adopted_operation(ctx):
            ctx.facts["snapshots"] = list_snapshots(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        name = snapshot_name(ctx.operation["operationId"])
        if name in ctx.facts.get("snapshots", {}):
            return None
        return Request(
            "POST",
            ctx.vm_path + "/snapshot",
            {
                "snapname": name,
                "vmstate": 0,
                "description": "vmanyware operation %s (%s)"
                % (ctx.operation["operationId"], ctx.plan["definitionName"]),
            },
        )

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        name = snapshot_name(ctx.operation["operationId"])
        found = list_snapshots(ctx).get(name)
        if found is None:
            raise StageError(
                "The snapshot task succeeded but the snapshot is not listed.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "snapname": name},
            )
        if found.get("vmstate"):
            raise StageError(
                "The snapshot includes RAM state, which was not requested.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "snapname": name},
            )
        return {"snapname": name, "snaptime": found.get("snaptime")}

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        return dict(ctx.operation.get("handoff") or {}, snapshot=evidence["snapname"])

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        if snapshot_name(ctx.operation["operationId"]) in list_snapshots(ctx):
            return Resolution.applied()
        tasks = common.find_tasks(ctx, "qmsnapshot", ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        return Resolution(
            "not_applied",
            message=(
                "The snapshot is not listed and no qmsnapshot task is visible; check the VM's snapshots and "
                "the node's task list in Proxmox before re-running."
            ),
        )

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adoption_note(self, obs: Observations) -> str:
        snapshots = obs.once("snapshots", lambda: list_snapshots(obs.context(self.kind)))
        return (
            " The snapshot is listed: the snapshot stage will find it and send nothing."
            if snapshot_name(obs.document["operationId"]) in snapshots
            else ""
        )
