# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container stage ``template``: the appliance template the container is created from, downloaded into its storage when
the node lacks it.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.tasks import parse_upid
from ..._checks.container import newest_match
from ..._core.errors import ProviderError
from ..common import TASK_SINCE_SLACK, dispatched_epoch, token_identity
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError, accept_task
from .common import require_container_plan


class ContainerTemplateStage(StageLogic):
    kind = "template"
    task_type = "download"
    default_timeout = 1800.0

    def _storage(self, ctx: StageContext) -> str:
        return str(ctx.mapping["appliance"]["storage"])

    def _present(self, ctx: StageContext) -> list[str]:
        storage = self._storage(ctx)
        content = ctx.client.get("/nodes/%s/storage/%s/content" % (ctx.node, storage), content="vztmpl")
        prefix = storage + ":vztmpl/"
        return (
            [
                str(e["volid"])[len(prefix) :]
                for e in content
                if isinstance(e, dict) and str(e.get("volid", "")).startswith(prefix)
            ]
            if isinstance(content, list)
            else []
        )

    def preconditions(self, ctx: StageContext) -> None:
        require_container_plan(ctx)
        recorded = ctx.record.get("request") or {}
        if (
            isinstance(recorded, dict)
            and isinstance(recorded.get("params"), dict)
            and recorded["params"].get("template")
        ):
            # a dispatch was journaled: stay with that template (a newer one appearing meanwhile changes nothing)
            ctx.facts["template"] = str(recorded["params"]["template"])
        present = self._present(ctx)
        if "template" not in ctx.facts:
            index = ctx.client.get("/nodes/%s/aplinfo" % ctx.node)
            offered = (
                [str(e["template"]) for e in index if isinstance(e, dict) and isinstance(e.get("template"), str)]
                if isinstance(index, list)
                else []
            )
            appliance = ctx.mapping["appliance"]
            chosen = newest_match(appliance["package"], appliance["version"], [*offered, *present])
            if chosen is None:
                raise StageError(
                    "No appliance version matches the catalog's package and version glob.",
                    code="template_not_found",
                    details={"stage": ctx.kind, "rule": "appliance_match"},
                )
            ctx.facts["template"] = chosen
        ctx.facts["present"] = ctx.facts["template"] in present

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("present"):
            return None
        return Request(
            "POST", "/nodes/%s/aplinfo" % ctx.node, {"storage": self._storage(ctx), "template": ctx.facts["template"]}
        )

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return accept_task(data, task_type="download", node=ctx.node, task_id=str(request.params["template"])), {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if "template" not in ctx.facts:
            self.preconditions(ctx)
        if ctx.facts["template"] not in self._present(ctx):
            raise StageError(
                "The template is not on the storage after the download.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "rule": "template_present"},
            )
        return {
            "ostemplate": "%s:vztmpl/%s" % (self._storage(ctx), ctx.facts["template"]),
            "template": ctx.facts["template"],
        }

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        self.preconditions(ctx)
        tasks = _download_tasks(ctx, ctx.facts["template"])
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        if ctx.facts["present"] and not tasks:
            return Resolution.applied(templateResolvedBy="storage_content")
        return Resolution.undecidable(
            "The download of %s may or may not have been accepted: check the node's download tasks and the "
            "storage's templates, then re-run or abandon the operation." % ctx.facts["template"]
        )

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        volid = "%s:vztmpl/%s" % (self._storage(ctx), ctx.facts.get("template"))
        return {
            "before": {"ostemplate": volid, "present": bool(ctx.facts.get("present"))},
            "after": {"ostemplate": volid, "present": True},
        }


def _download_tasks(ctx: StageContext, template: str) -> list[dict[str, t.Any]]:
    """``download`` tasks for ``template`` by exactly our token since the dispatch (the task list has no vmid for them)."""
    params: dict[str, t.Any] = {"typefilter": "download", "source": "all", "limit": 500}
    since = dispatched_epoch(ctx)
    if since is not None:
        params["since"] = max(0, since - TASK_SINCE_SLACK)
    user = token_identity(ctx.client)
    data = ctx.client.get("/nodes/%s/tasks" % ctx.node, **params)
    found = []
    for entry in data if isinstance(data, list) else []:
        try:
            upid = parse_upid(entry.get("upid") if isinstance(entry, dict) else None)
        except ProviderError:
            continue
        if upid.type == "download" and upid.id == template and (user is None or upid.user == user):
            found.append({"upid": upid.raw})
    return found
