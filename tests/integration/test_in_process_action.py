# SPDX-License-Identifier: GPL-3.0-or-later
"""The action plugin runs a module's code in Ansible's worker on the controller, and the module process otherwise.

The interpreter tells the two apart: in process, ``ansible_python_interpreter`` is never started.
"""

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
PLAN_ARGS = {"catalog_path": str(REPO / "examples/catalog.yml"), "definition_path": str(REPO / "examples/definition.yml"), "target_vmid": 201}

pytestmark = pytest.mark.integration


def _playbook(tmp_path: Path, interpreter: str, in_process: str | None, task_env: dict[str, str] | None = None,
              module: str = "vmanyware_plan", args: dict | None = None) -> subprocess.CompletedProcess[str]:
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {"ansible_python_interpreter": interpreter},
             "tasks": [{"name": "run", f"vmanyware.proxmox.{module}": args or PLAN_ARGS, "register": "out",
                        **({"environment": task_env} if task_env else {})},
                       {"name": "show", "ansible.builtin.debug": {"msg": "RESULT {{ out | to_json }}"}}]}]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VMANYWARE_", "PROXMOX_"))}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    if in_process is not None:
        env["VMANYWARE_IN_PROCESS"] = in_process
    return subprocess.run([str(BIN / "ansible-playbook"), str(path)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _result(completed: subprocess.CompletedProcess[str]) -> dict:
    line = next(line for line in completed.stdout.splitlines() if '"msg": "RESULT ' in line)
    return json.loads(json.loads("{%s}" % line.strip())["msg"][len("RESULT "):])


def test_in_process_on_the_controller_never_starts_the_interpreter(tmp_path: Path) -> None:
    completed = _playbook(tmp_path, "/nonexistent/python3", None)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = _result(completed)
    assert result["plan_hash"] == PLAN_HASH and result["changed"] is False


def test_switch_off_runs_the_module_process(tmp_path: Path) -> None:
    broken = _playbook(tmp_path, "/nonexistent/python3", "false")
    assert broken.returncode != 0 and "/nonexistent/python3" in broken.stdout
    completed = _playbook(tmp_path, sys.executable, "false")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert _result(completed)["plan_hash"] == PLAN_HASH


@pytest.mark.parametrize("in_process", ["true", "false"])
def test_task_environment_reaches_the_module_either_way(tmp_path: Path, in_process: str) -> None:
    # A gate value other than exactly true/false is a configuration_error raised before anything else.
    completed = _playbook(tmp_path, sys.executable, in_process, task_env={"VMANYWARE_PROVISIONING_ENABLED": "yes"},
                          module="vmanyware_preflight", args=dict(PLAN_ARGS, api_host="127.0.0.1", api_token_id="u@pve!t",
                                                                  api_token_secret="canary-in-process-secret"))
    assert completed.returncode != 0
    assert '"error_code": "configuration_error"' in completed.stdout, completed.stdout
    assert "canary-in-process-secret" not in completed.stdout + completed.stderr


@pytest.mark.parametrize("in_process", ["true", "false"])
def test_journal_package_reaches_the_module_either_way(tmp_path: Path, in_process: str) -> None:
    # The module process gets module_utils packaged by Ansible: the _journal package (re-exports in its __init__) must come along.
    journal = tmp_path / "journal"
    completed = _playbook(tmp_path, sys.executable, in_process, module="vmanyware_operation_info",
                          args={"journal_dir": str(journal), "operation_id": "op-" + "a" * 26})
    assert completed.returncode != 0
    assert '"error_code": "not_found"' in completed.stdout, completed.stdout + completed.stderr
    assert journal.is_dir()
