# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan role with two profiles, one baked into one of two templates (docs/profiles.md): a real ansible-playbook run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.integration


def test_plan_role_shows_the_template_choice_and_the_skip(tmp_path: Path) -> None:
    playbook = tmp_path / "plan.yml"
    playbook.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "roles": [
                        {
                            "role": "vmanyware.proxmox.plan",
                            # the profiles directory beside the catalog (examples/profiles) is read by default
                            "plan_catalog_path": str(REPO / "examples/catalog-profiles.yml"),
                            "plan_definition_path": str(REPO / "examples/definition-profiles.yml"),
                            "plan_target_vmid": 201,
                        }
                    ],
                    "post_tasks": [{"name": "plan document", "ansible.builtin.debug": {"var": "plan_document"}}],
                }
            ]
        ),
        encoding="utf-8",
    )
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
    )
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-5000:] + completed.stderr[-2000:]
    plan = build_plan(
        catalog_path=REPO / "examples/catalog-profiles.yml",
        definition_path=REPO / "examples/definition-profiles.yml",
        target_vmid=201,
    ).plan
    # base is required by ssh-hardening and baked into template 9010 (not 9000): that template, base skipped
    assert plan["templateChoice"]["templateVmid"] == 9010 and plan["source"]["templateVmid"] == 9010
    out = completed.stdout
    assert (
        "template    9010 chosen (most_requested_baked): 1 requested profile(s) baked in, 2 candidate template(s)"
        in out
    )
    assert "profile     base version 1 skip: baked into template 9010, required by ssh-hardening" in out
    assert "profile     ssh-hardening version 1 run: not baked into the template, lockout risk: runs last" in out
    assert out.index("profile     base version 1") < out.index("profile     ssh-hardening version 1")
    assert "readiness -> profile:ssh-hardening" in out
    at = out.index('"plan_document": {')
    shown = json.loads(out[out.rindex("{", 0, at) : out.index("\n}", at) + 2])
    assert shown["plan_document"] == plan
