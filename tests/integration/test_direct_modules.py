# SPDX-License-Identifier: GPL-3.0-or-later
"""README.md's direct-module playbook: unchanged under ``--check --diff`` (every stage previews) and for real.

The playbook is written for the normal mode (``vmanyware_operation``, then every stage with
``operation_id: "{{ op.operation_id }}"``). In check mode the operation is a preview: its id is the
preview document's, which the stage tasks of the same play get from the fact
``vmanyware_preview_operation``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MARKER = "<!-- direct-module-example"
STAGE_TASKS = (
    "Clone the template",
    "Set cores and memory",
    "Grow the disk",
    "Write the Cloud-Init settings",
    "Check the generated seed",
    "Start the VM",
    "Wait until the guest is ready",
    "Install the declared packages",
)


def readme_playbook() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    after = text[text.index(MARKER) :]
    return after[after.index("```yaml\n") + len("```yaml\n") : after.index("\n```", after.index("```yaml\n"))] + "\n"


def test_readme_playbook_previews_every_stage_then_applies(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    conn = pvesim.connection
    playbook = tmp_path / "direct.yml"
    playbook.write_text(readme_playbook(), encoding="utf-8")
    assert [task["name"] for task in yaml.safe_load(playbook.read_text())[0]["tasks"]][1:] == list(STAGE_TASKS)
    connection = {
        "PROXMOX_HOST": conn["host"],
        "PROXMOX_PORT": str(conn["port"]),
        "PROXMOX_TOKEN_ID": conn["tokens"]["full"]["id"],
        "PROXMOX_TOKEN_SECRET": conn["tokens"]["full"]["secret"],
        "PROXMOX_CA_PATH": conn["ca_file"],
    }
    settings = connection_settings(
        {
            "api_host": conn["host"],
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
        }
    )
    planned = build_plan(
        catalog_path=REPO / "examples/catalog.yml", definition_path=REPO / "examples/definition.yml", target_vmid=201
    )
    confirm = tmp_path / "confirm.yml"
    confirm.write_text(
        yaml.safe_dump(
            {
                "provision_confirmation": expected_confirmation(
                    planned.plan, t.cast(str, provider_scope_id(settings, certificate_fingerprint(settings)))
                )
            }
        ),
        encoding="utf-8",
    )
    journal = tmp_path / "journal"
    env = dict(
        os.environ,
        **connection,
        VMANYWARE_JOURNAL_DIR=str(journal),
        VMANYWARE_PROVISIONING_ENABLED="true",
        ANSIBLE_NOCOLOR="1",
    )
    command = [
        str(BIN / "ansible-playbook"),
        str(playbook),
        "-e",
        "catalog_path=%s" % (REPO / "examples/catalog.yml"),
        "-e",
        "definition_path=%s" % (REPO / "examples/definition.yml"),
        "-e",
        "@%s" % confirm,
    ]

    preview = subprocess.run(
        [*command, "--check", "--diff"], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert preview.returncode == 0, preview.stdout[-4000:]
    # Every stage previews what it would change.
    assert re.search(r"localhost\s+:\s+ok=9\s+changed=9\s+unreachable=0\s+failed=0", preview.stdout), preview.stdout[
        -2000:
    ]
    assert "preview_operation" not in preview.stdout
    for name in STAGE_TASKS:
        assert re.search(r"TASK \[%s\] \*+\n(?:[^\n]*\n)*?changed: \[localhost\]" % re.escape(name), preview.stdout), (
            name
        )
    assert "+++ after" in preview.stdout  # --diff shows what the stages would change
    assert {entry["method"] for entry in pvesim.requests()} == {"GET"}
    assert not list(journal.glob("op-*.json"))

    applied = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert applied.returncode == 0, applied.stdout[-4000:]
    assert re.search(r"localhost\s+:\s+ok=9\s+changed=\d\s+unreachable=0\s+failed=0", applied.stdout), applied.stdout[
        -2000:
    ]
    assert [e["path"] for e in pvesim.requests("POST", r"/clone$")] == ["/nodes/pve-test/qemu/9000/clone"]
    assert pvesim.vm(201)["status"] == "running"
    assert pvesim.schema_violations() == []
