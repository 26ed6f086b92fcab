# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``prepare``: the guest prepared for templating (packages, the guest agent), by the role over
SSH; the stage checks the agent answers.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.http_errors import agent_reason
from ..._api.pveconfig import read_status
from ..._core.errors import ProviderError
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, StageError, StageInProgress
from .. import guest as _guest
from .common import PREPARED_BY, require_build_vm


# -- prepare / generalize: evidence from the guest, the agent checked through the API --------------------
def _agent_answers(ctx: StageContext) -> dict[str, t.Any]:
    try:
        info = ctx.client.get(ctx.vm_path + "/agent/info")
    except ProviderError as err:
        if agent_reason(err) in ("not_running", "not_configured") or err.code == "server_error":
            raise StageInProgress({"waiting": "the guest agent to answer through the API"}) from None
        raise
    version = (
        info.get("result", {}).get("version")
        if isinstance(info, dict) and isinstance(info.get("result"), dict)
        else None
    )
    return {"agentAnswered": True, "agentVersion": version if isinstance(version, str) else None}


class PrepareStage(StageLogic):
    """Nothing is sent: the role installed the packages over SSH (or ran the stand-in); the stage waits until the guest
    agent answers through the API and records how the guest was prepared."""

    kind = "prepare"

    def __init__(self, prepared_by: str | None) -> None:
        self.prepared_by = prepared_by

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> PrepareStage:
        return cls(options.get("prepared_by"))

    def preconditions(self, ctx: StageContext) -> None:
        if self.prepared_by not in PREPARED_BY:
            raise StageError(
                "The prepare stage needs prepared_by (ssh, or stand-in on a simulated guest).",
                details={"stage": ctx.kind, "rule": "prepared_by"},
            )
        if read_status(ctx.client, ctx.vm_path).get("status") != "running":
            raise StageError("The template VM is not running.", details={"stage": ctx.kind, "rule": "running"})
        _guest.check_identity(ctx, require_build_vm(ctx, stopped=False))
        ctx.facts["agent"] = _agent_answers(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        agent = ctx.facts.get("agent") or _agent_answers(ctx)
        return dict(agent, preparedBy=self.prepared_by, packages=[p["name"] for p in ctx.plan["packages"]])
