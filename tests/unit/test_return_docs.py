# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The RETURN documentation of the stage modules, cleanup and the preflights comes from one source
(tools/dev/return_docs.yml, written by tools/dev/gen_return_docs.py): every module's RETURN equals the generated text."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
import types
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import STAGES

REPO = Path(__file__).resolve().parents[2]


def load_generator() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("gen_return_docs", REPO / "tools" / "dev" / "gen_return_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = load_generator()
SOURCE = GEN.load_source()
MODULES = GEN.modules(SOURCE)


def test_every_module_running_registry_stages_takes_its_return_from_the_source() -> None:
    assert {spec.module for spec in STAGES if not spec.nested_playbook} <= set(MODULES)
    assert {"vmanyware_preflight", "vmanyware_template_preflight"} <= set(MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_return_is_the_generated_text(module: str) -> None:
    generated = GEN.render(SOURCE, module)
    assert GEN.current(module) == generated, "run: python tools/dev/gen_return_docs.py"
    assert "${" not in generated
    document = yaml.safe_load(generated)
    assert list(document) == [
        (item if isinstance(item, str) else next(iter(item))).split("@")[0] for item in MODULES[module]["return"]
    ]
    assert all("description" in entry and "returned" in entry and "type" in entry for entry in document.values())


def test_a_shared_entry_is_one_edit_for_every_stage_module() -> None:
    """Changing the source's stage entry changes every stage module's RETURN (nothing is copied per module)."""
    changed = copy.deepcopy(SOURCE)
    changed["entries"]["operation_id@stage"]["description"] = "The operation (edited once)."
    stage_modules = {spec.module for spec in STAGES if spec.family != "cleanup" and not spec.nested_playbook}
    for module in stage_modules:
        assert "The operation (edited once)." in GEN.render(changed, module)
        assert "The operation (edited once)." not in GEN.render(SOURCE, module)


def test_generator_check_mode() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "dev" / "gen_return_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
