# SPDX-License-Identifier: GPL-3.0-or-later
"""The action plugin runs a module's code in Ansible's worker on the controller, and the module process otherwise.

The interpreter tells the two apart: in process, ``ansible_python_interpreter`` is never started; with ``-vvv`` each
task also says which path it took. Run on every ansible-core of the support matrix (tools/dev/core_lane.sh).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible import __version__ as ansible_version

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAN_HASH = "5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df"
PLAN_ARGS = {
    "catalog_path": str(REPO / "examples/catalog.yml"),
    "definition_path": str(REPO / "examples/definition.yml"),
    "target_vmid": 201,
}

pytestmark = pytest.mark.integration


# The support matrix (README.md, docs/development.md): on each of these the private ansible-core internals the in-process
# run reads are there, and it runs in process. A core outside it fails here until it is tested and added.
MATRIX = ("2.18", "2.19", "2.20", "2.21")
INTERNALS_MISSING_ON: dict[str, tuple[str, ...]] = {
    "ValidationResult._no_log_values": (),
    "Play._action_groups": (),
    "ActionBase._compute_environment_string(raw_environment_out)": (),
}
# ansible-playbook with ValidationResult._no_log_values renamed, as a future ansible-core might (workers fork from here).
WITHOUT_NO_LOG_VALUES = """
import sys
from ansible.module_utils.common import arg_spec
validate = arg_spec.ArgumentSpecValidator.validate
def renamed(self, *args, **kwargs):
    result = validate(self, *args, **kwargs)
    result._no_log_values_renamed = result.__dict__.pop("_no_log_values")
    return result
arg_spec.ArgumentSpecValidator.validate = renamed
from ansible.cli.playbook import main
sys.argv[0] = "ansible-playbook"
main()
"""


def _playbook(
    tmp_path: Path,
    interpreter: str,
    in_process: str | None,
    task_env: dict[str, str] | None = None,
    module: str = "vmanyware_plan",
    args: dict | None = None,
    command: list[str] | None = None,
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": interpreter},
            "tasks": [
                {
                    "name": "run",
                    f"vmanyware.proxmox.{module}": args or PLAN_ARGS,
                    "register": "out",
                    **({"environment": task_env} if task_env else {}),
                },
                {"name": "show", "ansible.builtin.debug": {"msg": "RESULT {{ out | to_json }}"}},
            ],
        }
    ]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VMANYWARE_", "PROXMOX_"))}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    if in_process is not None:
        env["VMANYWARE_IN_PROCESS"] = in_process
    env.update(env_extra or {})
    return subprocess.run(
        [*(command or [str(BIN / "ansible-playbook")]), "-vvv", str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _result(completed: subprocess.CompletedProcess[str]) -> dict:
    line = next(line for line in completed.stdout.splitlines() if '"msg": "RESULT ' in line)
    return json.loads(json.loads("{%s}" % line.strip())["msg"][len("RESULT ") :])


def test_in_process_on_the_controller_never_starts_the_interpreter(tmp_path: Path) -> None:
    completed = _playbook(tmp_path, "/nonexistent/python3", None)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = _result(completed)
    assert result["plan_hash"] == PLAN_HASH and result["changed"] is False
    assert "vmanyware: vmanyware_plan ran in process" in completed.stdout


def test_this_core_is_a_row_of_the_matrix_and_runs_in_process(tmp_path: Path) -> None:
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible.playbook.play import Play
    from ansible.plugins.action import ActionBase

    minor = ".".join(ansible_version.split(".")[:2])
    assert minor in MATRIX, (
        "ansible-core %s is not in the support matrix %s: test it, then add it here and to the docs" % (minor, MATRIX)
    )
    present = {
        "ValidationResult._no_log_values": isinstance(
            getattr(ArgumentSpecValidator({}).validate({}), "_no_log_values", None), set
        ),
        "Play._action_groups": isinstance(getattr(Play(), "_action_groups", None), dict),
        "ActionBase._compute_environment_string(raw_environment_out)": "raw_environment_out"
        in ActionBase._compute_environment_string.__code__.co_varnames,
    }  # pylint: disable=protected-access
    assert present == {name: minor not in cores for name, cores in INTERNALS_MISSING_ON.items()}
    completed = _playbook(
        tmp_path,
        "/nonexistent/python3",
        None,
        module="vmanyware_preflight",
        task_env={"VMANYWARE_PROVISIONING_ENABLED": "yes"},
        args=dict(PLAN_ARGS, api_host="127.0.0.1", api_token_id="u@pve!t", api_token_secret="canary-in-process-secret"),
    )
    expected = (
        "ran in process" if all(present.values()) else "ran as a module process (ansible-core internals unavailable"
    )
    assert "vmanyware: vmanyware_preflight %s" % expected in completed.stdout, completed.stdout
    assert (
        '"error_code": "configuration_error"' in completed.stdout
        and "canary-in-process-secret" not in completed.stdout + completed.stderr
    )


def test_without_the_no_log_values_the_module_process_runs_and_censors(tmp_path: Path) -> None:
    command = [sys.executable, "-c", WITHOUT_NO_LOG_VALUES]
    completed = _playbook(
        tmp_path,
        sys.executable,
        None,
        module="vmanyware_preflight",
        command=command,
        task_env={"VMANYWARE_PROVISIONING_ENABLED": "yes"},
        args=dict(PLAN_ARGS, api_host="127.0.0.1", api_token_id="u@pve!t", api_token_secret="canary-in-process-secret"),
    )
    assert (
        "vmanyware: vmanyware_preflight ran as a module process (ansible-core internals unavailable: ValidationResult._no_log_values)"
        in completed.stdout
    ), completed.stdout + completed.stderr
    assert '"error_code": "configuration_error"' in completed.stdout
    assert "canary-in-process-secret" not in completed.stdout + completed.stderr
    # The module process really ran: with an interpreter that does not exist the task fails on it.
    broken = _playbook(tmp_path, "/nonexistent/python3", None, command=command)
    assert broken.returncode != 0 and "/nonexistent/python3" in broken.stdout
    assert "vmanyware: vmanyware_plan ran as a module process (ansible-core internals unavailable" in broken.stdout


def test_switch_off_runs_the_module_process(tmp_path: Path) -> None:
    broken = _playbook(tmp_path, "/nonexistent/python3", "false")
    assert broken.returncode != 0 and "/nonexistent/python3" in broken.stdout
    remote_tmp = tmp_path / "remote-tmp"
    completed = _playbook(tmp_path, sys.executable, "false", env_extra={"ANSIBLE_REMOTE_TMP": str(remote_tmp)})
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert _result(completed)["plan_hash"] == PLAN_HASH
    assert "vmanyware: vmanyware_plan ran as a module process (VMANYWARE_IN_PROCESS=false)" in completed.stdout
    # The module's temporary directory was made there and removed after the task (ActionBase.cleanup()).
    assert remote_tmp.is_dir() and list(remote_tmp.iterdir()) == []


@pytest.mark.parametrize("in_process", ["true", "false"])
def test_task_environment_reaches_the_module_either_way(tmp_path: Path, in_process: str) -> None:
    # A gate value other than exactly true/false is a configuration_error raised before anything else.
    completed = _playbook(
        tmp_path,
        sys.executable,
        in_process,
        task_env={"VMANYWARE_PROVISIONING_ENABLED": "yes"},
        module="vmanyware_preflight",
        args=dict(PLAN_ARGS, api_host="127.0.0.1", api_token_id="u@pve!t", api_token_secret="canary-in-process-secret"),
    )
    assert completed.returncode != 0
    assert '"error_code": "configuration_error"' in completed.stdout, completed.stdout
    assert "canary-in-process-secret" not in completed.stdout + completed.stderr


@pytest.mark.parametrize("in_process", ["true", "false"])
def test_journal_package_reaches_the_module_either_way(tmp_path: Path, in_process: str) -> None:
    # The module process gets module_utils packaged by Ansible: the _journal package (re-exports in its __init__) must come along.
    journal = tmp_path / "journal"
    completed = _playbook(
        tmp_path,
        sys.executable,
        in_process,
        module="vmanyware_operation_info",
        args={"journal_dir": str(journal), "operation_id": "op-" + "a" * 26},
    )
    assert completed.returncode != 0
    assert '"error_code": "not_found"' in completed.stdout, completed.stdout + completed.stderr
    assert journal.is_dir()
