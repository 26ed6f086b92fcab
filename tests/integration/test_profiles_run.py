# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A definition with two profiles provisions end to end through the provision role, on a VM whose agent commands really
run (pvesim ``--guests container``), with no SSH from the controller: plan (run order, the profile steps), preflight,
confirmation, every stage, then each profile's role in its own journaled stage through ``vmanyware.proxmox.qga``, with
its progress line and changed count. A re-run of the confirmed play runs nothing again; a second operation on the same
guest runs both roles again and they change nothing (the roles are idempotent).

The controller's SSH client is ``/bin/false`` throughout. Opt-in with the real-container lane (``-m realcontainer`` or
``PVESIM_REALCONTAINER=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

import guest_support as gs

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

from pvesim.testing import build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server


pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VMID = 202

# Requested in the "wrong" order on purpose: the plan runs base first (ssh-hardening requires it) and the lockout-risk
# profile last.
DEFINITION = """\
apiVersion: vmanyware.dev/v1
kind: Environment
name: profiles-lab
image: debian-13
resources: {cores: 1, memoryMiB: 1024, diskGiB: 20}
access:
  sshPublicKeys:
    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop
profiles:
  - name: ssh-hardening
  - name: base
    vars: {packages: [hello], motd: "profiles-lab"}
"""


RUNNING = "profile 1/2 base: running role vmanyware.proxmox.profile_base through qga"
HARDENING = "profile 2/2 ssh-hardening: running role vmanyware.proxmox.profile_ssh_hardening through qga"


def _say(msg: str) -> None:
    sys.stdout.write(f"[profiles-run] {msg}\n")
    sys.stdout.flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=1800, check=False)


def _profile_stages(journal: Path, operation_id: str, env: dict[str, str]) -> dict[str, t.Any]:
    document = JournalStore(str(journal)).load(operation_id)
    assert env["PROXMOX_TOKEN_SECRET"] not in json.dumps(document)
    return {item["kind"]: item for item in document["stages"] if item["kind"].startswith("profile:")}


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
                    "loop": ["base", "ssh-hardening"],
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
    return _profile_stages(journal, operation_id, env)


def test_a_definition_with_two_profiles_provisions_without_ssh(request: pytest.FixtureRequest, tmp_path: Path) -> None:
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
        catalog = yaml.safe_load((REPO / "examples" / "catalog.yml").read_text(encoding="utf-8"))
        catalog["images"][0]["distroFamily"] = "debian"  # profiles need the image's OS family
        (tmp_path / "catalog.yml").write_text(yaml.safe_dump(catalog, sort_keys=False))
        provision = {
            "name": "Provision",
            "hosts": "localhost",
            "gather_facts": False,
            "roles": [
                {
                    "role": "vmanyware.proxmox.provision",
                    "provision_catalog_path": str(tmp_path / "catalog.yml"),
                    "provision_profiles_path": str(REPO / "examples" / "profiles"),
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
        # the review shows the run order: base (required by ssh-hardening) first, the lockout-risk profile last
        assert review.stdout.index("profile:base") < review.stdout.index("profile:ssh-hardening"), review.stdout[-4000:]
        t0 = time.monotonic()
        applied = _run([str(BIN / "ansible-playbook"), "provision.yml", "-e", "@confirm.yml"], env, tmp_path)
        _say(f"apply with two profiles: {time.monotonic() - t0:.1f} s")
        assert applied.returncode == 0, applied.stdout[-6000:] + applied.stderr[-2000:]
        assert env["PROXMOX_TOKEN_SECRET"] not in applied.stdout + applied.stderr
        assert RUNNING in applied.stdout and HARDENING in applied.stdout
        journal = tmp_path / "journal"
        operation_id = _only_operation(journal)
        source = JournalStore(str(journal)).load(operation_id)
        assert source["status"] == "completed"
        kinds = [item["kind"] for item in source["stages"]]
        assert [kind for kind in kinds if kind.startswith("profile:")] == ["profile:base", "profile:ssh-hardening"]
        assert kinds.index("profile:base") == kinds.index("readiness") + 1  # no packages: right after readiness
        first = _profile_stages(journal, operation_id, env)
        base, hardening = first["profile:base"], first["profile:ssh-hardening"]
        assert base["status"] == hardening["status"] == "completed"
        # base: motd, group, apt install of hello; hardening: the drop-in (its handler's reload counts as changed too)
        assert base["evidence"]["changed"] == 3 and base["evidence"]["failed"] == 0, base["evidence"]
        assert hardening["evidence"]["changed"] >= 1 and hardening["evidence"]["failed"] == 0, hardening["evidence"]
        assert base["evidence"]["transport"] == "qga", base["evidence"]
        _say(f"first: base {base['evidence']}, ssh-hardening {hardening['evidence']}")

        attach = ["lxc-attach", "-P", str(state / "guest-containers" / "lxc"), "-n", f"vm{VMID}", "--"]
        dropin = subprocess.run(
            [*attach, "cat", "/etc/ssh/sshd_config.d/50-vmanyware-hardening.conf"],
            capture_output=True, check=True, timeout=60, text=True,
        )  # fmt: skip
        assert "PasswordAuthentication no" in dropin.stdout and "PermitRootLogin prohibit-password" in dropin.stdout
        hello = subprocess.run([*attach, "hello"], capture_output=True, check=True, timeout=60, text=True)
        assert hello.stdout.strip() == "Hello, world!"
        motd = subprocess.run([*attach, "cat", "/etc/motd"], capture_output=True, check=True, timeout=60, text=True)
        assert motd.stdout.strip() == "profiles-lab"

        # the confirmed play again: the operation is completed, nothing runs again
        again = _run([str(BIN / "ansible-playbook"), "provision.yml", "-e", "@confirm.yml"], env, tmp_path)
        assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-2000:]
        assert RUNNING not in again.stdout
        assert _profile_stages(journal, operation_id, env) == first

        # a second operation on the same guest: both roles run again and change nothing
        second_journal = tmp_path / "journal-profiles-2"
        second = _run_profiles(
            tmp_path, env, second_journal, gs.operation_before_profiles(source, second_journal), "second", RUNNING
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
