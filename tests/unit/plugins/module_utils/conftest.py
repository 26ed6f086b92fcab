# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module_utils tests mirror the packages; their shared fakes (here and in ``_stages/``) and the fixtures one test
module lends another are importable from every folder (the file names are unique across the folders)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
for folder in [HERE] + sorted(
    path for path in HERE.rglob("*") if path.is_dir() and not path.name.startswith(".") and path.name != "__pycache__"
):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
