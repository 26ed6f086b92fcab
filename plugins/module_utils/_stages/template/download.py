# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``download``: the build's cloud image on the node's storage, fetched by Proxmox
(``download-url``) and verified by its checksum.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.tasks import TaskOutcome, parse_upid
from ..._core.errors import ProviderError
from ..._formats.template_build import import_file_name
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import common
from .common import build_of, observation_mismatch


# -- download ---------------------------------------------------------------------------------------
class DownloadStage(StageLogic):
    """``POST /nodes/{node}/storage/{importStorage}/download-url`` with the image's checksum (content ``import``).

    Proxmox verifies the checksum before it keeps the file; an existing file with the expected
    checksum is kept without downloading again, so the request is always sent while the stage is
    open. A checksum mismatch fails the stage with ``image_checksum_mismatch``.
    """

    kind = "download"
    task_type = "download"
    default_timeout = 3600.0

    @staticmethod
    def volid(ctx: StageContext) -> str:
        return str(ctx.plan["source"]["importVolume"])

    def request(self, ctx: StageContext) -> Request | None:
        source = ctx.plan["source"]
        params = {
            "url": source["url"],
            "content": "import",
            "filename": import_file_name(build_of(ctx)),
            "checksum": source["checksum"],
            "checksum-algorithm": source["checksumAlgorithm"],
        }
        return Request("POST", "/nodes/%s/storage/%s/download-url" % (ctx.node, ctx.plan["importStorage"]), params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        upid = parse_upid(data)
        if upid.type != self.task_type or upid.node != ctx.node or upid.id != import_file_name(build_of(ctx)):
            raise StageError(
                "Proxmox answered with a task of an unexpected type, node or id.", code="unexpected_response"
            )
        return upid.raw, {}

    def _listed(self, ctx: StageContext) -> dict[str, t.Any] | None:
        entries = ctx.client.get(
            "/nodes/%s/storage/%s/content" % (ctx.node, ctx.plan["importStorage"]), content="import"
        )
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("volid") == self.volid(ctx):
                return entry
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        entry = self._listed(ctx)
        if entry is None:
            raise observation_mismatch(ctx, "import_volume_listed")
        size = entry.get("size")
        return {
            "volid": self.volid(ctx),
            "sizeBytes": size if isinstance(size, int) and not isinstance(size, bool) else None,
            "checksumAlgorithm": ctx.plan["source"]["checksumAlgorithm"],
            "checksum": ctx.plan["source"]["checksum"],
        }

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Our ``download`` task with the file name since the dispatch: applied (followed); none: undecidable."""
        params = common.task_list_params(ctx, "download", 0)
        params.pop("vmid", None)
        data = ctx.client.get("/nodes/%s/tasks" % ctx.node, **params)
        user = common.token_identity(ctx.client)
        candidates = []
        for entry in data if isinstance(data, list) else []:
            try:
                upid = parse_upid(entry.get("upid") if isinstance(entry, dict) else None)
            except ProviderError:
                continue
            if (
                upid.type == "download"
                and upid.id == import_file_name(build_of(ctx))
                and (user is None or upid.user == user)
            ):
                candidates.append(upid.raw)
        if len(candidates) == 1:
            return Resolution.applied(candidates[0])
        return Resolution.undecidable(
            "The reply to download-url was lost and the node's download tasks do not single out this "
            "build's; check the import storage %s and the task list of node %s." % (ctx.plan["importStorage"], ctx.node)
        )

    def task_error(self, ctx: StageContext, upid: str, outcome: TaskOutcome) -> StageError:
        if (outcome.exitstatus or "").startswith("checksum mismatch"):
            return StageError(code="image_checksum_mismatch", details={"stage": ctx.kind, "upid": upid})
        return super().task_error(ctx, upid, outcome)
