# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``convert``: the build VM converted into a template.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.pveconfig import disk_volume, int_value
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution
from .. import common
from .common import observation_mismatch, require_build_vm, undecidable_task


# -- convert -----------------------------------------------------------------------------------------
class ConvertStage(StageLogic):
    """``POST .../template``: Proxmox renames the disks to ``base-...`` and sets ``template: 1``."""

    kind = "convert"
    task_type = "qmtemplate"

    def preconditions(self, ctx: StageContext) -> None:
        config = require_build_vm(ctx, stopped=True)
        ctx.facts["template"] = int_value(config.get("template")) == 1

    def request(self, ctx: StageContext) -> Request | None:
        return None if ctx.facts.get("template") else Request("POST", ctx.vm_path + "/template", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or int_value(config.get("template")) != 1:
            raise observation_mismatch(ctx, "template")
        disk = disk_volume(config, ctx.plan["diskDevice"])
        if disk is None or ":base-" not in disk.volid:
            raise observation_mismatch(ctx, "base_volume")
        return {"volid": disk.volid, "diskSizeBytes": disk.size_bytes, "digest": config.get("digest")}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = common.find_tasks(ctx, "qmtemplate", ctx.vmid)
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        config = common.read_config_or_none(ctx)
        if not tasks and config is not None and int_value(config.get("template")) == 1:
            return Resolution.applied()
        return undecidable_task(ctx, "qmtemplate")
