# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the template-build stages share: the build document of the operation, the check that the VM is the build's,
the observation-mismatch error and the undecidable-task resolution, who prepared the guest.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .. import common
from .. import guest as _guest
from ..protocol import StageContext
from ..outcomes import Resolution, StageError

GIB = 1024**3
PREPARED_BY = ("ssh", "stand-in")


def observation_mismatch(ctx: StageContext, rule: str) -> StageError:
    return StageError(
        "Proxmox does not show the state the stage requested.",
        code="observation_mismatch",
        details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": rule},
    )


def build_of(ctx: StageContext) -> dict[str, t.Any]:
    """The validated TemplateBuild the operation recorded."""
    return ctx.definition


def require_build_vm(ctx: StageContext, *, stopped: bool) -> dict[str, t.Any]:
    """The VM is this build's: binding description and instance tag, unlocked (and stopped when asked), digest unchanged."""
    config = common.require_clone_identity(ctx, stopped=stopped, no_pending=stopped)
    _guest.check_identity(ctx, config)
    common.require_digest(ctx, config)
    return config


def undecidable_task(ctx: StageContext, task_type: str) -> Resolution:
    return Resolution.undecidable(
        "The reply to the %s request was lost and reads cannot show whether it applied; check the %s tasks "
        "and VM %d on node %s before re-running." % (ctx.kind, task_type, ctx.vmid, ctx.node)
    )


# The stages whose work the role does in the guest over SSH (docs/templates.md, "Preparing the guest"): right before each
# write there, the role runs the stage with ``write_check`` (the gates re-read, nothing sent or recorded).
GUEST_WRITE_STAGES = ("prepare", "generalize")
