# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``pvesim.datafile.load_data_file``: the one reader behind ``--faults FILE`` and ``--timings FILE``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pvesim.datafile import load_data_file
from pvesim.faults import FaultSpecError, load_fault_file
from pvesim.server import load_timings_file

TIMINGS = {"tasks": {"qmclone_full": 3, "qmstart": 0.5}, "guest": {"agent_up_after": 2}}
FAULTS = [{"action": "task_error", "path": "/nodes/.*/qemu/.*/clone"}]


@pytest.mark.parametrize("name", ["model.yml", "model.yaml", "model.json"])
def test_yaml_and_json_give_the_same_data(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    # JSON is valid YAML, so the YAML files carry YAML block syntax to show they are parsed as YAML
    path.write_text(
        json.dumps(TIMINGS)
        if name.endswith(".json")
        else "tasks:\n  qmclone_full: 3\n  qmstart: 0.5\nguest:\n  agent_up_after: 2\n",
        encoding="utf-8",
    )
    assert load_data_file(str(path)) == TIMINGS
    assert load_timings_file(str(path)) == TIMINGS


def test_a_json_file_is_not_read_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    path.write_text("- action: task_error\n", encoding="utf-8")
    with pytest.raises(ValueError):
        load_data_file(str(path))


def test_both_loaders_check_the_shape_they_need(tmp_path: Path) -> None:
    faults = tmp_path / "faults.yml"
    faults.write_text("faults:\n  - action: task_error\n    path: /nodes/.*/qemu/.*/clone\n", encoding="utf-8")
    assert load_fault_file(str(faults)) == FAULTS
    faults.write_text("just text\n", encoding="utf-8")
    with pytest.raises(FaultSpecError, match="must hold a list of rules"):
        load_fault_file(str(faults))
    timings = tmp_path / "timings.json"
    timings.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="must hold a mapping"):
        load_timings_file(str(timings))
