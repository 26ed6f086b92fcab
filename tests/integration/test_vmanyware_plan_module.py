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
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def _ad_hoc_result(output: str) -> dict:
    # default callback, ad hoc: "localhost | SUCCESS => {...json...}"
    return json.loads(output[output.index("=> {") + 3 :])


@pytest.mark.parametrize("check", [False, True], ids=["normal", "check"])
def test_module_ad_hoc(check: bool) -> None:
    args = {
        "catalog_path": str(REPO / "examples/catalog.yml"),
        "definition_path": str(REPO / "examples/definition.yml"),
        "target_vmid": 201,
    }
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
    definition = (
        (REPO / "examples/definition.yml")
        .read_text()
        .replace("diskGiB: 20", "diskGiB: 7")
        .replace("alice@laptop", "PLANTEDcomment")
    )
    args = {"catalog_path": str(REPO / "examples/catalog.yml"), "definition": definition, "target_vmid": 201}
    completed = _run(
        str(BIN / "ansible"), "localhost", "-m", "vmanyware.proxmox.vmanyware_plan", "-a", json.dumps(args)
    )
    assert completed.returncode != 0
    result = _ad_hoc_result(completed.stdout)
    assert "FAILED!" in completed.stdout
    assert result["error_code"] == "disk_shrink_unsupported"
    assert result["error_path"] == "resources.diskGiB"
    assert "Traceback" not in completed.stdout + completed.stderr
    assert "exception" not in result and "module_stdout" not in result
    assert "msg" in result
    assert "PLANTED" not in completed.stdout + completed.stderr


DICT_PLAYBOOK = """\
- name: Plan from dictionaries (as group_vars would give them)
  hosts: localhost
  gather_facts: false
  vars:
    catalog_data: "{{ lookup('ansible.builtin.file', '%(catalog)s') | from_yaml }}"
    definition_data: "{{ lookup('ansible.builtin.file', '%(definition)s') | from_yaml }}"
  tasks:
    - name: Plan from dictionaries
      vmanyware.proxmox.vmanyware_plan:
        catalog: "{{ catalog_data }}"
        definition: "{{ definition_data }}"
        target_vmid: 201
      register: planned

    - name: A wrong type inside the dictionary is named by its field, the value is not echoed
      vmanyware.proxmox.vmanyware_plan:
        catalog: "{{ catalog_data }}"
        definition: "{{ definition_data | combine({'resources': {'cores': 'PLANTEDtwo'}}, recursive=true) }}"
        target_vmid: 201
      register: refused
      ignore_errors: true

    - name: Report
      ansible.builtin.debug:
        msg: "REPORT {{ {'plan_hash': planned.plan_hash, 'snapshot': planned.plan.snapshotAfterProvisioning,
                  'refused': [refused.error_code, refused.error_path, refused.error_details.rule]} | to_json }}"
"""


@pytest.mark.parametrize("in_process", ["true", "false"], ids=["in-process", "module-process"])
def test_catalog_and_definition_as_dicts(tmp_path: Path, in_process: str) -> None:
    """A dict (group_vars) is validated as data: same hashes as the YAML text, booleans stay booleans."""
    playbook = tmp_path / "dicts.yml"
    playbook.write_text(
        DICT_PLAYBOOK % {"catalog": REPO / "examples/catalog.yml", "definition": REPO / "examples/definition.yml"}
    )
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        VMANYWARE_IN_PROCESS=in_process,
    )
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    line = next(text for text in completed.stdout.splitlines() if '"msg": "REPORT ' in text)
    report = json.loads(json.loads(line.split('"msg": ', 1)[1])[len("REPORT ") :])
    assert report == {
        "plan_hash": PLAN_HASH,
        "snapshot": False,
        "refused": ["invalid_definition", "resources.cores", "type"],
    }
    assert "PLANTED" not in completed.stdout.replace("'PLANTEDtwo'", "")  # only the task's own text, never in a result
