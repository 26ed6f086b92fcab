# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Both example profile roles run by ``vmanyware_profile`` through ``vmanyware.proxmox.qga`` on a VM whose agent commands
really run (pvesim ``--guests container``), with their changed counts in the journal, and a second operation on the same
guest showing 0 changed (the roles are idempotent).

The VM is provisioned by the provision role (readiness through the agent). The operation whose plan requests the
profiles is built here from that operation's plan, with the ``profiles`` list and ``profile:<name>`` steps of the shared
interface (docs/profiles-running.md), in a journal of its own: the plan half (declarations, the definition's
``profiles`` field) builds the same from a definition once both halves are merged. The controller's SSH client is
``/bin/false`` throughout. Opt-in with the real-container lane (``-m realcontainer`` or ``PVESIM_REALCONTAINER=1``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

from pvesim.testing import build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VMID = 202

DEFINITION = """\
apiVersion: vmanyware.dev/v1
kind: Environment
name: profiles-lab
image: debian-13
resources: {cores: 1, memoryMiB: 1024, diskGiB: 20}
access:
  sshPublicKeys:
    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop
"""
PROFILES = [
    {"name": "base", "version": 1, "role": "vmanyware.proxmox.profile_base",
     "vars": {"packages": ["hello"], "admin_group": "vmadmin", "motd": "profiles-lab\n", "update_cache": True},
     "requiredBy": [], "perGuest": False, "lockoutRisk": False, "baked": False, "run": True},
    {"name": "ssh-hardening", "version": 1, "role": "vmanyware.proxmox.profile_ssh_hardening", "vars": {},
     "requiredBy": [], "perGuest": False, "lockoutRisk": True, "baked": False, "run": True},
]  # fmt: skip


RUNNING = "profile 1/2 base: running role vmanyware.proxmox.profile_base through qga"
SKIPPED = "profile 1/2 base: completed earlier, skipped"


def _say(msg: str) -> None:
    sys.stdout.write(f"[profiles-run] {msg}\n")
    sys.stdout.flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=1800, check=False)


def _profile_operation(source: dict[str, t.Any], journal: Path) -> str:
    """An operation on the provisioned VM whose plan runs both profiles; every stage before them completed, as the
    provision role leaves them, with the readiness handoff."""
    plan = copy.deepcopy(source["plan"])
    plan["profiles"] = copy.deepcopy(PROFILES)
    steps = [step for step in plan["steps"] if step["kind"] != "snapshot"]
    steps += [{"position": 0, "kind": "profile", "name": "profile:" + entry["name"]} for entry in PROFILES]
    plan["steps"] = [dict(step, position=index) for index, step in enumerate(steps, start=1)]
    store = JournalStore(str(journal))
    scope = source["providerScopeId"]
    document, _created = store.create_operation(
        idempotency_key=None,
        provider_scope_id=scope,
        definition=source["definition"],
        mapping=source["mapping"],
        plan=plan,
        confirmation=expected_confirmation(plan, scope),
        target_node=source["target"]["node"],
        target_vmid=source["target"]["vmid"],
        stage_kinds=[step.get("name") or step["kind"] for step in plan["steps"]],
    )
    operation_id = t.cast(str, document["operationId"])
    for item in document["stages"]:
        if item["kind"].startswith("profile:"):
            break
        store.record_dispatch(operation_id, item["kind"], {"method": "TEST"})
        store.record_completed(operation_id, item["kind"], {})
    store.set_handoff(operation_id, source["handoff"])
    return operation_id


def _run_profiles(
    tmp_path: Path, env: dict[str, str], journal: Path, operation_id: str, name: str, line: str
) -> dict[str, t.Any]:
    play = [
        {
            "name": "Run the profiles",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Profile",
                    "vmanyware.proxmox.vmanyware_profile": {
                        "operation_id": operation_id,
                        "journal_dir": str(journal),
                        "profile": "{{ item }}",
                    },
                    "loop": [entry["name"] for entry in PROFILES],
                }
            ],
        }
    ]
    (tmp_path / f"{name}.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    t0 = time.monotonic()
    ran = _run([str(BIN / "ansible-playbook"), f"{name}.yml"], env, tmp_path)
    _say(f"{name}: {time.monotonic() - t0:.1f} s")
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
    assert env["PROXMOX_TOKEN_SECRET"] not in ran.stdout + ran.stderr
    assert line in ran.stdout  # the progress line of the first profile
    document = JournalStore(str(journal)).load(operation_id)
    assert env["PROXMOX_TOKEN_SECRET"] not in json.dumps(document)
    return {item["kind"]: item for item in document["stages"] if item["kind"].startswith("profile:")}


def test_example_profiles_through_the_guest_agent(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("real-container tests are opt-in: pytest -m realcontainer (or PVESIM_REALCONTAINER=1)")
    ensure_realcontainer_tools(_say)
    rootfs, _seconds = build_container_rootfs(str(REPO), _say)
    state = tmp_path / "sim"
    state.mkdir()
    proc, conn = start_server(str(state), speed=50, extra=["--guests", "container", "--container-rootfs", rootfs])
    try:
        (tmp_path / "definition.yml").write_text(DEFINITION)
        provision = {
            "name": "Provision",
            "hosts": "localhost",
            "gather_facts": False,
            "roles": [
                {
                    "role": "vmanyware.proxmox.provision",
                    "provision_catalog_path": str(REPO / "examples" / "catalog.yml"),
                    "provision_definition_path": str(tmp_path / "definition.yml"),
                    "provision_target_vmid": VMID,
                    "provision_confirmation_file": str(tmp_path / "confirm.yml"),
                    "provision_known_hosts_file": str(tmp_path / "known_hosts"),
                    "provision_guest_connection": "qga",
                }
            ],
        }
        (tmp_path / "provision.yml").write_text(yaml.safe_dump([provision], sort_keys=False))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")}
        env.update(
            PROXMOX_HOST=conn["host"],
            PROXMOX_PORT=str(conn["port"]),
            PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
            PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
            PROXMOX_CA_PATH=conn["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal"),
            VMANYWARE_PROVISIONING_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
            ANSIBLE_SSH_EXECUTABLE="/bin/false",  # no SSH: any attempt to use it fails the run
        )
        review = _run([str(BIN / "ansible-playbook"), "provision.yml"], env, tmp_path)
        assert review.returncode == 0 and (tmp_path / "confirm.yml").is_file(), review.stdout[-4000:]
        applied = _run([str(BIN / "ansible-playbook"), "provision.yml", "-e", "@confirm.yml"], env, tmp_path)
        assert applied.returncode == 0, applied.stdout[-6000:] + applied.stderr[-2000:]
        journal = tmp_path / "journal"
        source = JournalStore(str(journal)).load(_only_operation(journal))
        assert source["status"] == "completed"

        first_journal = tmp_path / "journal-profiles-1"
        first = _run_profiles(tmp_path, env, first_journal, _profile_operation(source, first_journal), "first", RUNNING)
        base, hardening = first["profile:base"], first["profile:ssh-hardening"]
        assert base["status"] == hardening["status"] == "completed"
        # base: motd, group, apt install of hello; hardening: the drop-in (its handler's reload counts as changed too)
        assert base["evidence"]["changed"] == 3 and base["evidence"]["failed"] == 0, base["evidence"]
        assert hardening["evidence"]["changed"] >= 1 and hardening["evidence"]["failed"] == 0, hardening["evidence"]
        _say(f"first: base {base['evidence']}, ssh-hardening {hardening['evidence']}")

        attach = ["lxc-attach", "-P", str(state / "guest-containers" / "lxc"), "-n", f"vm{VMID}", "--"]
        dropin = subprocess.run(
            [*attach, "cat", "/etc/ssh/sshd_config.d/50-vmanyware-hardening.conf"],
            capture_output=True, check=True, timeout=60, text=True,
        )  # fmt: skip
        assert "PasswordAuthentication no" in dropin.stdout and "PermitRootLogin prohibit-password" in dropin.stdout
        hello = subprocess.run([*attach, "hello"], capture_output=True, check=True, timeout=60, text=True)
        assert hello.stdout.strip() == "Hello, world!"

        # the completed stages are skipped: nothing runs again
        again = _run_profiles(tmp_path, env, first_journal, _only_operation(first_journal), "again", SKIPPED)
        assert again == first

        # a second operation on the same guest: both roles run again and change nothing
        second_journal = tmp_path / "journal-profiles-2"
        second = _run_profiles(
            tmp_path, env, second_journal, _profile_operation(source, second_journal), "second", RUNNING
        )
        assert [second[kind]["evidence"]["changed"] for kind in ("profile:base", "profile:ssh-hardening")] == [0, 0]
        assert all(item["status"] == "completed" and item["evidence"]["ok"] > 0 for item in second.values())
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        _say(f"cleaned up {lxc_cleanup(str(state / 'guest-containers' / 'lxc'))}")


def _only_operation(journal: Path) -> str:
    (path,) = list(journal.glob("op-*.json"))
    return t.cast(str, json.loads(path.read_text(encoding="utf-8"))["operationId"])
