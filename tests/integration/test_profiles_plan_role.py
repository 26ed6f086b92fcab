# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan role with two profiles, one baked into one of two templates (docs/profiles.md): a real ansible-playbook run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

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


@pytest.mark.parametrize("step_by_step", [False, True], ids=["one-task", "step-by-step"])
def test_check_mode_previews_each_profile_and_sends_nothing(pvesim: t.Any, tmp_path: Path, step_by_step: bool) -> None:
    """The confirmed play in check mode, on both paths of the provision role (vmanyware_provision's handover and one
    task per step, which includes stages/profile.yml): each profile is previewed with its role, variable names and
    transport, and nothing is sent or recorded."""
    catalog = yaml.safe_load((REPO / "examples/catalog.yml").read_text(encoding="utf-8"))
    catalog["images"][0]["distroFamily"] = "debian"
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(catalog, sort_keys=False), encoding="utf-8")
    shutil.copytree(REPO / "examples/profiles", tmp_path / "profiles")  # the default: beside the catalog
    conn = pvesim.connection
    env = dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal"),
        VMANYWARE_PROVISIONING_ENABLED="true",
        ANSIBLE_NOCOLOR="1",
    )
    argv = [
        str(BIN / "ansible-playbook"),
        "vmanyware.proxmox.provision",
        "-e",
        "vmanyware_catalog_path=%s" % (tmp_path / "catalog.yml"),
        "-e",
        "vmanyware_definition_path=%s" % (REPO / "examples/definition-profiles.yml"),
        "-e",
        "vmanyware_target_vmid=201",
        "-e",
        "vmanyware_confirmation_file=%s" % (tmp_path / "confirm.yml"),
        "-e",
        "vmanyware_known_hosts_file=%s" % (tmp_path / "known_hosts"),
        "-e",
        "provision_step_by_step=%s" % step_by_step,
    ]
    review = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert review.returncode == 0, review.stdout[-3000:]
    preview = subprocess.run(
        [*argv, "-e", "@%s" % (tmp_path / "confirm.yml"), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert preview.returncode == 0, preview.stdout[-5000:]
    out = preview.stdout
    base = "would run role vmanyware.proxmox.profile_base (vars: admin_group, motd, packages, update_cache) through qga"
    hardening = (
        "would run role vmanyware.proxmox.profile_ssh_hardening "
        "(vars: password_authentication, permit_root_login, ssh_service) through qga"
    )
    assert base in out and hardening in out, out[-5000:]
    assert out.index(base) < out.index(hardening)
    assert [e for e in pvesim.requests() if e["method"] in ("POST", "PUT", "DELETE")] == []
    assert not list((tmp_path / "journal").glob("op-*.json"))
