# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The connection plugin tests use the module_utils tests' fake client and fake guest (``pve_fake``, ``qga_guest_fake``)."""

from __future__ import annotations

import sys
from pathlib import Path

FAKES = Path(__file__).resolve().parents[1] / "module_utils"
for folder in (FAKES, FAKES / "_api"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
