# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``start``: the VM's start stage, for the build VM.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

from ..protocol import StageContext
from ..vm.start import StartStage
from .common import require_build_vm


# -- start --------------------------------------------------------------------------------------------
class TemplateStartStage(StartStage):
    """``POST .../status/start`` of the preparation boot (no seed stage: identity, stopped, digest unchanged).

    A lost reply is resolved as for the VM's start (the ``qmstart`` task or the power state); it is never sent again."""

    def preconditions(self, ctx: StageContext) -> None:
        require_build_vm(ctx, stopped=True)
