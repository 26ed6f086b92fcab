# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one reader of the simulator's input files (``--faults FILE``, ``--timings FILE``): YAML or JSON."""

from __future__ import annotations

import json
import typing as t

import yaml


def load_data_file(path: str) -> t.Any:
    """The parsed content of ``path``: YAML when it ends in ``.yml``/``.yaml``, else JSON; the caller checks the shape."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if path.endswith((".yml", ".yaml")):
        return yaml.safe_load(text)
    return json.loads(text)
