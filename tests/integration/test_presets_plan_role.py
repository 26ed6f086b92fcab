# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan role with a preset and an SSH key source (docs/profiles.md): a real ansible-playbook run, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.integration


def test_plan_role_shows_the_merged_definition_and_the_keys(tmp_path: Path) -> None:
    team = tmp_path / "team"
    team.mkdir()
    bob = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    (team / "bob.pub").write_text(bob + " bob@team\n", encoding="utf-8")
    sources = [{"name": "team", "path": str(team)}]
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
                            # the presets directory beside the catalog (examples/presets) is read by default
                            "plan_catalog_path": str(REPO / "examples/catalog.yml"),
                            "plan_definition_path": str(REPO / "examples/definition-preset.yml"),
                            "plan_target_vmid": 201,
                            "plan_ssh_key_sources": sources,
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
    expected = build_plan(
        catalog_path=REPO / "examples/catalog.yml",
        definition_path=REPO / "examples/definition-preset.yml",
        target_vmid=201,
        ssh_key_sources=sources,
    )
    plan = expected.plan
    # the merged definition: the preset's image, cores and memory, the definition's own disk
    assert plan["preset"]["name"] == "build-box" and plan["preset"]["version"] == 1
    assert plan["preset"]["fields"] == ["image", "resources.cores", "resources.memoryMiB"]
    assert plan["resources"] == {"cores": 4, "memoryMiB": 4096, "diskGiB": 40}
    assert [key["sources"] for key in plan["access"]["sshPublicKeys"]] == [["definition"], ["team"]]
    out = completed.stdout
    assert (
        "preset      build-box version 1 hash %s, gave image, resources.cores, resources.memoryMiB"
        % plan["preset"]["hash"]
        in out
    )
    for key in plan["access"]["sshPublicKeys"]:
        assert "ssh key     %s ssh-ed25519 %s" % (key["fingerprint"], ", ".join(key["sources"])) in out
    assert "resources   4 cores, 4096 MiB, disk 40 GiB" in out
    at = out.index('"plan_document": {')
    shown = json.loads(out[out.rindex("{", 0, at) : out.index("\n}", at) + 2])
    assert shown["plan_document"] == plan
    assert bob.split()[1] not in out  # the keys are listed by fingerprint, never echoed
