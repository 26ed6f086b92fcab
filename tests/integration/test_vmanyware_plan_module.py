# SPDX-License-Identifier: GPL-3.0-or-later
"""Real ansible runs of vmanyware_plan and examples/plan.yml (about 2 s each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAN_HASH = "5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df"
DEFINITION_HASH = "109cb47497a9c1740f37adc432f0f14bd3fd31d43e2bf67d435a696a44345366"

pytestmark = pytest.mark.integration


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def _ad_hoc_result(output: str) -> dict:
    # default callback, ad hoc: "localhost | SUCCESS => {...json...}"
    return json.loads(output[output.index("=> {") + 3:])


@pytest.mark.parametrize("check", [False, True], ids=["normal", "check"])
def test_module_ad_hoc(check: bool) -> None:
    args = {"catalog_path": str(REPO / "examples/catalog.yml"), "definition_path": str(REPO / "examples/definition.yml"), "target_vmid": 201}
    command = [str(BIN / "ansible"), "localhost", "-m", "vmanyware.proxmox.vmanyware_plan", "-a", json.dumps(args)]
    completed = _run(*command, *(["--check"] if check else []))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = _ad_hoc_result(completed.stdout)
    assert result["changed"] is False
    assert result["plan_hash"] == result["plan"]["planHash"] == PLAN_HASH
    assert result["definition_hash"] == DEFINITION_HASH


@pytest.mark.parametrize("check", [False, True], ids=["normal", "check"])
def test_example_playbook(check: bool) -> None:
    completed = _run(str(BIN / "ansible-playbook"), "examples/plan.yml", *(["--check"] if check else []))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert '"msg": "plan_hash=%s"' % PLAN_HASH in completed.stdout
    assert "ok=2 " in completed.stdout and "changed=0 " in completed.stdout and "failed=0 " in completed.stdout


def test_module_failure_is_safe(tmp_path: Path) -> None:
    definition = (REPO / "examples/definition.yml").read_text().replace("diskGiB: 20", "diskGiB: 7").replace("alice@laptop", "PLANTEDcomment")
    args = {"catalog_path": str(REPO / "examples/catalog.yml"), "definition": definition, "target_vmid": 201}
    completed = _run(str(BIN / "ansible"), "localhost", "-m", "vmanyware.proxmox.vmanyware_plan", "-a", json.dumps(args))
    assert completed.returncode != 0
    result = _ad_hoc_result(completed.stdout)
    assert "FAILED!" in completed.stdout
    assert result["error_code"] == "disk_shrink_unsupported"
    assert result["error_path"] == "resources.diskGiB"
    assert "Traceback" not in completed.stdout + completed.stderr
    assert "exception" not in result and "module_stdout" not in result
    assert "msg" in result
    assert "PLANTED" not in completed.stdout + completed.stderr
