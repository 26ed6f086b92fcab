# SPDX-License-Identifier: GPL-3.0-or-later
"""The provision playbook with a container plan: review, check-mode preview, apply, re-run (real ansible-playbook, simulator)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_provision_role import REPO, Operator, _mutations  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration


def test_container_plan_through_the_provision_playbook(pvesim: object, tmp_path: Path) -> None:
    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel

    pvesim.set_token(
        pvesim.connection["tokens"]["full"]["id"],  # type: ignore[attr-defined]
        privileges={**FULL_TOKEN_ACL, "/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]},
    )
    pvesim.set_speed(200)  # type: ignore[attr-defined]
    definition = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    definition.update({"image": "debian-12-ct", "packages": []})
    definition_path = tmp_path / "definition.yml"
    definition_path.write_text(yaml.safe_dump(definition), encoding="utf-8")
    operator = Operator(pvesim, tmp_path)

    def run(*extra: str) -> str:
        completed = operator.run(
            "-e",
            "vmanyware_catalog_path=%s" % (REPO / "examples/catalog-containers.yml"),
            *extra,
            definition=definition_path,
        )
        assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
        return completed.stdout

    review = run()
    assert "source      container debian-12-ct from debian-12-standard 12.* unprivileged on pve-test" in review
    assert "container_template" in review and _mutations(pvesim) == []
    preview = run("-e", "@%s" % operator.confirm, "--check", "--diff")
    assert "POST /nodes/pve-test/aplinfo" in preview and _mutations(pvesim) == []
    applied = run("-e", "@%s" % operator.confirm)
    assert _mutations(pvesim) == [
        "POST /nodes/pve-test/aplinfo",
        "POST /nodes/pve-test/lxc",
        "POST /nodes/pve-test/lxc/201/status/start",
    ]
    (document_path,) = operator.journal.glob("op-*.json")
    document = yaml.safe_load(document_path.read_text(encoding="utf-8"))
    assert document["status"] == "completed" and [item["status"] for item in document["stages"]] == ["completed"] * 4
    assert document["handoff"]["ipv4"] in applied  # the summary shows the recorded address
    pvesim.clear_requests()  # type: ignore[attr-defined]
    run("-e", "@%s" % operator.confirm)
    assert _mutations(pvesim) == []


# The shipped provision role in a play whose environment closes the provisioning gate once the readiness stage is
# recorded: an administrator's switch flipped mid-run. ``environment`` is templated for every task, so each module
# started after readiness sees VMANYWARE_PROVISIONING_ENABLED=false.
GATE_FLIP_PLAY = """
- name: Provision a container, closing the gate after readiness
  hosts: localhost
  gather_facts: false
  environment:
    VMANYWARE_PROVISIONING_ENABLED: "{{ 'false' if closes | bool and (provision_stage_result.stage.kind | default('')) == 'readiness' else 'true' }}"
  roles:
    - role: vmanyware.proxmox.provision
      provision_catalog_path: "%(catalog)s"
      provision_definition_path: "%(definition)s"
      provision_target_vmid: 201
      provision_confirmation_file: "%(confirm)s"
      provision_known_hosts_file: "%(known_hosts)s"
      provision_container_ssh_host: 127.0.0.1
      provision_container_ssh_port: %(port)d
"""


def test_the_gate_is_reread_right_before_each_package_write_over_ssh(pvesim: object, tmp_path: Path) -> None:
    import socket  # pylint: disable=import-outside-toplevel
    import subprocess  # pylint: disable=import-outside-toplevel

    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel
    from test_provision_role import BIN  # pylint: disable=import-outside-toplevel

    pvesim.set_token(
        pvesim.connection["tokens"]["full"]["id"],  # type: ignore[attr-defined]
        privileges={**FULL_TOKEN_ACL, "/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]},
    )
    pvesim.set_speed(200)  # type: ignore[attr-defined]
    definition = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    definition.update({"image": "debian-12-ct", "packages": [{"name": "jq"}], "snapshotAfterProvisioning": False})
    definition_path = tmp_path / "definition.yml"
    definition_path.write_text(yaml.safe_dump(definition), encoding="utf-8")
    operator = Operator(pvesim, tmp_path)
    with socket.socket() as probe:  # a loopback port nothing listens on: SSH there is unreachable
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    play = tmp_path / "gate-flip.yml"
    play.write_text(
        GATE_FLIP_PLAY
        % {
            "catalog": REPO / "examples/catalog-containers.yml",
            "definition": definition_path,
            "confirm": operator.confirm,
            "known_hosts": tmp_path / "known_hosts",
            "port": port,
        },
        encoding="utf-8",
    )

    def run(closes: bool, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "ansible-playbook"), str(play), "-e", "closes=%s" % closes, *extra],
            env=operator.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            cwd=str(tmp_path),
        )

    review = run(False)
    assert review.returncode == 0 and operator.confirm.exists(), review.stdout[-3000:]
    closed = run(True, "-e", "@%s" % operator.confirm)
    assert closed.returncode != 0
    assert _mutations(pvesim) == [
        "POST /nodes/pve-test/aplinfo",
        "POST /nodes/pve-test/lxc",
        "POST /nodes/pve-test/lxc/201/status/start",
    ]
    failed_task = closed.stdout.split("fatal:")[0].rsplit("TASK [", 1)[1].split("]", 1)[0]
    assert failed_task.endswith("Re-read the provisioning gate before updating the package lists"), closed.stdout[
        -3000:
    ]
    assert "provisioning_disabled" in closed.stdout and "Update the package lists with apt" not in closed.stdout
    (document_path,) = operator.journal.glob("op-*.json")
    stages = {
        item["kind"]: item["status"] for item in yaml.safe_load(document_path.read_text(encoding="utf-8"))["stages"]
    }
    assert stages == {
        "template": "completed",
        "create": "completed",
        "start": "completed",
        "readiness": "completed",
        "packages": "pending",
    }

    # the gate open again: the check passes and the write is attempted (here: SSH to a closed port, unreachable)
    reopened = run(False, "-e", "@%s" % operator.confirm)
    assert reopened.returncode != 0
    failed_task = reopened.stdout.split("UNREACHABLE!")[0].rsplit("TASK [", 1)[1].split("]", 1)[0]
    assert failed_task.endswith("Update the package lists with apt"), reopened.stdout[-3000:]
    assert "no SSH host key answered" in reopened.stdout
    assert _mutations(pvesim) == [
        "POST /nodes/pve-test/aplinfo",
        "POST /nodes/pve-test/lxc",
        "POST /nodes/pve-test/lxc/201/status/start",
    ]
