# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``resources`` stage: cores, memory and the instance tag of the cloned VM (docs/stages.md).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._operation.create import instance_tag
from ..._api.pveconfig import int_value, memory_mib, read_config, tag_list
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from ..adoption import AdoptionHook, Decision, Observations
from ..common import is_ours, read_config_or_none, require_clone_identity, require_digest


def desired(ctx: StageContext) -> dict[str, t.Any]:
    """The values this stage sets: ``cores``, ``memory`` (MiB) and ``tags`` (the instance tag only)."""
    resources = ctx.plan["resources"]
    return {
        "cores": int(resources["cores"]),
        "memory": int(resources["memoryMiB"]),
        "tags": instance_tag(ctx.operation["operationId"]),
    }


def current(config: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The same keys as ``desired`` read from a configuration (``None`` when absent)."""
    tags = tag_list(config.get("tags"))
    return {
        "cores": int_value(config.get("cores")),
        "memory": memory_mib(config.get("memory")),
        "tags": ";".join(tags) if tags else None,
    }


def matches(ctx: StageContext, config: t.Mapping[str, t.Any]) -> bool:
    want = desired(ctx)
    have = current(config)
    return (
        have["cores"] == want["cores"]
        and have["memory"] == want["memory"]
        and tag_list(config.get("tags")) == [want["tags"]]
    )


class ResourcesStage(StageLogic, AdoptionHook):
    """Synchronous ``PUT {vm}/config`` with ``cores``, ``memory``, ``tags`` and the observed ``digest``.

    The request carries the digest of the configuration the earlier stages observed, so it cannot apply
    over a concurrent change. A lost reply is resolved by reads only (never re-sent): our values shown ->
    applied; otherwise the stage reads again within its wait budget, then stays ``uncertain``.
    """

    kind = "resources"
    task_type = None
    default_timeout = 60.0
    trusts_recent_config = True  # its write carries the digest
    # The power state is read here (docs/stages.md "Reads reused"): Proxmox does not refuse the write on a VM another
    # client started since, as it refuses it on a changed configuration (the digest).

    def preconditions(self, ctx: StageContext) -> None:
        config = require_clone_identity(ctx)
        ctx.facts["config"] = config
        ctx.facts["satisfied"] = matches(ctx, config)
        if not ctx.facts["satisfied"]:
            ctx.facts["digest"] = require_digest(ctx, config)

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("satisfied"):
            return None
        want = desired(ctx)
        params: dict[str, t.Any] = {"cores": want["cores"], "memory": str(want["memory"]), "tags": want["tags"]}
        digest = ctx.facts.get("digest") or ctx.earlier_evidence("digest")
        if digest:
            params["digest"] = digest
        return Request("PUT", ctx.vm_path + "/config", params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        if data is not None:
            raise StageError(
                "Proxmox answered the configuration update with an unexpected body.", code="unexpected_response"
            )
        return None, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = read_config(ctx.client, ctx.vm_path)
        if not is_ours(ctx, config) or not matches(ctx, config):
            raise StageError(
                "After the update, Proxmox does not show the requested cores, memory and tag.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "vmid": ctx.vmid},
            )
        want = desired(ctx)
        return {
            "digest": config.get("digest"),
            "cores": want["cores"],
            "memoryMiB": want["memory"],
            "tags": want["tags"],
        }

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Our values shown -> applied; digest still the observed one -> not applied; otherwise undecidable."""
        config = read_config_or_none(ctx)
        if config is None or not is_ours(ctx, config):
            return Resolution.undecidable(
                "VM %d is missing or no longer bound to this operation; check it before re-running." % ctx.vmid
            )
        if matches(ctx, config):
            return Resolution.applied()
        if config.get("digest") == ctx.earlier_evidence("digest"):
            return Resolution.not_applied()
        return Resolution.undecidable(
            "The configuration of VM %d changed but does not show the requested cores, memory and tag; "
            "check it before re-running." % ctx.vmid
        )

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        config = ctx.facts.get("config") or {}
        return {"before": current(config), "after": desired(ctx)}

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        ctx = obs.context(self.kind)
        if not matches(ctx, obs.config):
            return Decision(
                "pending",
                "Proxmox does not show the planned cores, memory and instance tag; the resources stage sets them "
                "(bound to the configuration digest observed now).",
            )
        want = desired(ctx)
        return Decision(
            "completed",
            "The planned cores, memory and instance tag are shown.",
            {
                "digest": obs.config.get("digest"),
                "cores": want["cores"],
                "memoryMiB": want["memory"],
                "tags": want["tags"],
            },
        )
