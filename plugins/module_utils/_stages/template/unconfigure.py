# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``unconfigure``: the preparation boot's Cloud-Init settings removed from the VM.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution
from .. import common
from .. import guest as _guest
from .common import observation_mismatch

BUILD_SETTINGS = ("ipconfig0", "sshkeys", "ciuser")


# -- unconfigure: remove the build settings -------------------------------------------------------------
class UnconfigureStage(StageLogic):
    """``PUT .../config`` with ``delete=ipconfig0,sshkeys,ciuser``: the template keeps no build address or key."""

    kind = "unconfigure"

    def preconditions(self, ctx: StageContext) -> None:
        config = common.require_clone_identity(ctx, stopped=True, no_pending=False)
        _guest.check_identity(ctx, config)
        ctx.facts["config"] = config

    def request(self, ctx: StageContext) -> Request | None:
        config = ctx.facts["config"]
        present = [key for key in BUILD_SETTINGS if key in config]
        if not present:
            return None
        return Request("PUT", ctx.vm_path + "/config", {"delete": ",".join(present), "digest": config["digest"]})

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return None, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or any(key in config for key in BUILD_SETTINGS):
            raise observation_mismatch(ctx, "build_settings_removed")
        return {"digest": config.get("digest"), "removed": list(BUILD_SETTINGS)}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        if config is not None and not any(key in config for key in BUILD_SETTINGS):
            return Resolution.applied()
        return Resolution.undecidable(
            "The reply to the removal of the build settings was lost; check VM %d's ipconfig0, sshkeys and "
            "ciuser before re-running." % ctx.vmid
        )
