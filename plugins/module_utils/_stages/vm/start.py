# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``start``: power on the prepared target once (docs/stages.md).

Before sending, the stage repeats the checks the earlier stages made: the clone's identity,
``stopped``, no pending change, the config digest the seed check recorded, and the three
cloud-init dumps hashing exactly as recorded. ``POST {vm}/status/start`` starts a ``qmstart``
task; the stage completes on the task's success plus an observed ``running`` power state (not
guest readiness). A lost reply is never re-posted: the node's task list (``qmstart`` for this
VMID since the dispatch) and the power state decide; no task and still stopped is undecidable.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import common
from .. import guest as _guest
from ..adoption import AdoptionHook, Decision, Observations, single_ok
from .seed import dump_hashes, read_dumps


class StartStage(StageLogic, AdoptionHook):
    kind = "start"
    task_type = "qmstart"
    default_timeout = 120.0
    # No recent read serves its preconditions (``_recent_reads`` rule 3, docs/stages.md "Reads reused"): its POST carries
    # no digest, would apply any pending change and boots whatever seed the configuration holds, so the configuration,
    # the pending list and the power state are read here, right before the POST. Another client's change since the seed
    # stage (``sshkeys``, a pending key, a start) stops the stage before anything is sent.

    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.require_stopped_settled(ctx)
        recorded = ctx.earlier_evidence("seedHashes")
        if config["digest"] == ctx.earlier_evidence("seedDigest") and isinstance(recorded, dict):
            # The dumps are generated from the configuration: the digest the seed stage validated them at
            # proves they are unchanged, without reading all three again.
            return
        if not isinstance(recorded, dict) or dump_hashes(read_dumps(ctx)) != recorded:
            raise StageError(
                "The cloud-init seed differs from the one the seed stage validated; nothing was sent.",
                details={"stage": ctx.kind, "rule": "seed_unchanged"},
            )

    def request(self, ctx: StageContext) -> Request | None:
        return Request("POST", ctx.vm_path + "/status/start", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        state = _guest.read_power(ctx)
        if state != "running":
            raise StageError(
                "The start task succeeded but the VM is not running.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "powerState": state},
            )
        return {"powerState": "running", "guestReady": False}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = common.find_tasks(ctx, "qmstart", ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if _guest.read_power(ctx) == "running":
            return Resolution.applied(startResolvedBy="power_state")
        return Resolution(
            "not_applied",
            message="No qmstart task for the VM is visible and it is stopped: the start request may not have "
            "reached Proxmox. Check the node's task list, then start the VM or abandon the operation.",
        )

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        ctx = obs.context(self.kind)
        power = obs.power
        if power == "running":
            return Decision(
                "completed",
                "The VM is running.",
                {"powerState": "running", "guestReady": False, "startResolvedBy": "power_state"},
                single_ok(obs.tasks(self.kind, "qmstart", ctx.vmid)),
            )
        if power == "stopped" and not obs.tasks(self.kind, "qmstart", ctx.vmid):
            return Decision(
                "pending", "The VM is stopped and no qmstart task of this token for it is listed: it was not started."
            )
        return Decision(
            "uncertain",
            "VM %d is %s and a qmstart task of this token for it is listed (of this operation, or of an earlier VM "
            "with this id); check the node's task list, then start the VM or abandon the operation."
            % (ctx.vmid, power),
        )
