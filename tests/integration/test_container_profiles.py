# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Profiles on a real container (docs/profiles.md, "Profiles on containers"), over both transports a container takes.

pvesim ``--containers real --node-ssh-authorized-keys``: the node's SSH endpoint with ``pct`` (its host key from the
simulator's report, verified), and the container's own sshd on a loopback port. A container definition requesting the
example profiles (ssh-hardening and base, in the wrong order) provisions through the provision role:

1. review (plan, preflight, confirmation: the profile steps in run order), then check mode with the confirmation: each
   profile stage previewed with its transport and the command each task becomes, nothing recorded;
2. apply with ``provision_profile_connection: pct`` (the dedicated node key, the node's known_hosts): both roles run
   through ``vmanyware.proxmox.pct``, changed per profile, their effects read with ``lxc-attach``;
3. drift (the motd and the drop-in removed inside the container), then a second operation on the same container over
   ``ssh`` (into the container's address through its loopback port, its host key in the operator's known_hosts under
   the recorded address, strict checking): both roles change it back;
4. a third operation over ``pct``: nothing changes (changed 0 for both).

``VMANYWARE_MEASURE_PROFILE_TRANSPORTS=N`` then times N more runs of both profiles over each transport and prints the
medians. Opt-in with the real-container lane (``-m realcontainer`` or ``PVESIM_REALCONTAINER=1``).
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

import guest_support as gs

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

from pvesim.testing import PvesimAdmin, build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server


pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODE = "pve-test"
CTID = 377
SSH_PORT = 20000 + CTID % 10000  # pvesim.realcontainer: the container's sshd on 127.0.0.1:<20000 + vmid % 10000>
PROFILES = ("base", "ssh-hardening")
MOTD = "ct-profiles-lab"
DROPIN = "/etc/ssh/sshd_config.d/50-vmanyware-hardening.conf"

DEFINITION = {
    "apiVersion": "vmanyware.dev/v1",
    "kind": "Environment",
    "name": "ct-profiles",
    "image": "debian-12-ct",
    "resources": {"cores": 1, "memoryMiB": 512, "diskGiB": 4},
    "access": {"sshPublicKeys": ["replaced"]},
    # requested in the wrong order on purpose: base (required by ssh-hardening) runs first, the lockout risk last
    "profiles": [{"name": "ssh-hardening"}, {"name": "base", "vars": {"packages": ["hello"], "motd": MOTD}}],
}


def _say(msg: str) -> None:
    sys.stdout.write(f"[container-profiles] {msg}\n")
    sys.stdout.flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=1200, check=False)


def _profile_stages(journal: Path, operation_id: str) -> dict[str, t.Any]:
    document = JournalStore(str(journal)).load(operation_id)
    return {item["kind"]: item for item in document["stages"] if item["kind"].startswith("profile:")}


def _only_operation(journal: Path) -> str:
    (path,) = list(journal.glob("op-*.json"))
    return t.cast(str, json.loads(path.read_text(encoding="utf-8"))["operationId"])


class Lab:
    """The simulator, the operator's files and the commands the test runs against the one container."""

    def __init__(self, tmp: Path, state: Path, env: dict[str, str], transports: dict[str, t.Any]) -> None:
        self.tmp, self.state, self.env, self.transports = tmp, state, env, transports
        self.runs = 0

    def attach(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["lxc-attach", "-P", str(self.state / "lxc"), "-n", f"ct{CTID}", "--", *argv]
        return subprocess.run(command, capture_output=True, text=True, check=check, timeout=60)

    def profiles(self, source: dict[str, t.Any], transport: str) -> tuple[dict[str, t.Any], float]:
        """Both profiles of a new operation on the container over ``transport`` (vmanyware_profile, one task each)."""
        self.runs += 1
        journal = self.tmp / f"journal-{self.runs}"
        operation_id = gs.operation_before_profiles(source, journal)
        task = {"operation_id": operation_id, "journal_dir": str(journal), "profile": "{{ item }}"}
        task.update(self.transports[transport])
        play = [
            {
                "name": "Profiles over %s" % transport,
                "hosts": "localhost",
                "gather_facts": False,
                "tasks": [{"name": "Profile", "vmanyware.proxmox.vmanyware_profile": task, "loop": list(PROFILES)}],
            }
        ]
        name = f"profiles-{self.runs}.yml"
        (self.tmp / name).write_text(yaml.safe_dump(play, sort_keys=False))
        t0 = time.monotonic()
        ran = _run([str(BIN / "ansible-playbook"), name], self.env, self.tmp)
        seconds = time.monotonic() - t0
        assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-2000:]
        assert f"profile 1/2 base: running role vmanyware.proxmox.profile_base through {transport}" in ran.stdout
        stages = _profile_stages(journal, operation_id)
        assert all(item["status"] == "completed" for item in stages.values()), stages
        assert {item["evidence"]["transport"] for item in stages.values()} == {transport}
        return stages, seconds


def _changed(stages: dict[str, t.Any]) -> list[int]:
    return [stages["profile:" + name]["evidence"]["changed"] for name in PROFILES]


def test_profiles_on_a_real_container_over_pct_and_ssh(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # pylint: disable=too-many-locals,too-many-statements
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("real-container tests are opt-in: pytest -m realcontainer (or PVESIM_REALCONTAINER=1)")
    started = time.monotonic()
    ensure_realcontainer_tools(_say)
    rootfs, _seconds = build_container_rootfs(str(REPO), _say)
    key = tmp_path / "id_ed25519"  # the operator's key: root's authorized_keys in the container (create)
    node_key = tmp_path / "node_key"  # the dedicated key of the node SSH route
    for path in (key, node_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    state = tmp_path / "sim"
    state.mkdir()
    extra = ["--containers", "real", "--container-rootfs", rootfs, "--node-ssh-authorized-keys", f"{node_key}.pub"]
    proc, conn = start_server(str(state), speed=50, extra=extra)
    try:
        from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel
        from pvesim.lxc import TEMPLATE_STORAGE_ACL  # pylint: disable=import-outside-toplevel

        PvesimAdmin(conn).set_token(conn["tokens"]["full"]["id"], privileges={**FULL_TOKEN_ACL, **TEMPLATE_STORAGE_ACL})
        endpoint = conn["node_ssh"][NODE]
        node_known_hosts = tmp_path / "node_known_hosts"
        node_known_hosts.write_text(endpoint["known_hosts_line"] + "\n")
        known_hosts = tmp_path / "known_hosts"  # the operator's known_hosts for the containers (empty until step 3)
        known_hosts.write_text("")
        definition = copy.deepcopy(DEFINITION)
        definition["access"]["sshPublicKeys"] = [key.with_suffix(".pub").read_text(encoding="utf-8").strip()]
        (tmp_path / "definition.yml").write_text(yaml.safe_dump(definition, sort_keys=False))
        catalog = yaml.safe_load((REPO / "examples" / "catalog-containers.yml").read_text(encoding="utf-8"))
        catalog["images"][0]["distroFamily"] = "debian"  # profiles need the image's OS family
        (tmp_path / "catalog.yml").write_text(yaml.safe_dump(catalog, sort_keys=False))
        node_ssh = {
            "private_key_file": str(node_key),
            "known_hosts_file": str(node_known_hosts),
            "endpoints": {NODE: f"127.0.0.1:{endpoint['port']}"},
        }
        transports = {
            "pct": {"guest_connection": "pct", "node_ssh": node_ssh},
            "ssh": {
                "guest_connection": "ssh",
                "ssh_host": "127.0.0.1",
                "ssh_port": SSH_PORT,
                "ssh_private_key_file": str(key),
                "known_hosts_file": str(known_hosts),
            },
        }
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
                    "provision_target_vmid": CTID,
                    "provision_confirmation_file": str(tmp_path / "confirm.yml"),
                    "provision_known_hosts_file": str(known_hosts),
                    "provision_profile_connection": "pct",
                    "provision_node_ssh": node_ssh,
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
        )
        lab = Lab(tmp_path, state, env, transports)

        # 1. review: the profile steps in run order; then check mode: each profile previewed with its transport
        t0 = time.monotonic()
        review = _run([str(BIN / "ansible-playbook"), "provision.yml"], env, tmp_path)
        assert review.returncode == 0 and (tmp_path / "confirm.yml").is_file(), review.stdout[-4000:]
        assert review.stdout.index("profile:base") < review.stdout.index("profile:ssh-hardening"), review.stdout[-4000:]
        check = _run([str(BIN / "ansible-playbook"), "provision.yml", "-e", "@confirm.yml", "--check"], env, tmp_path)
        assert check.returncode == 0, check.stdout[-6000:] + check.stderr[-2000:]
        preview = (
            "profile 1/2 base: would run role vmanyware.proxmox.profile_base (vars: admin_group, motd, packages, "
            "update_cache) through pct; each task as: ssh -p %d -i %s -o StrictHostKeyChecking=yes "
            "-o UserKnownHostsFile=%s root@127.0.0.1 pct exec %d -- /bin/sh -c <task>"
            % (endpoint["port"], node_key, node_known_hosts, CTID)
        )
        assert preview in check.stdout, check.stdout[-6000:]
        assert "profile 2/2 ssh-hardening: would run role vmanyware.proxmox.profile_ssh_hardening" in check.stdout
        assert not list((tmp_path / "journal").glob("op-*.json"))  # check mode recorded nothing
        _say(f"review and check mode: {time.monotonic() - t0:.1f} s")

        # 2. apply over pct: both roles through vmanyware.proxmox.pct, their effects in the container
        t0 = time.monotonic()
        applied = _run([str(BIN / "ansible-playbook"), "provision.yml", "-e", "@confirm.yml"], env, tmp_path)
        _say(f"apply with two profiles over pct: {time.monotonic() - t0:.1f} s")
        assert applied.returncode == 0, applied.stdout[-6000:] + applied.stderr[-2000:]
        assert env["PROXMOX_TOKEN_SECRET"] not in applied.stdout + applied.stderr
        assert "profile 1/2 base: running role vmanyware.proxmox.profile_base through pct" in applied.stdout
        assert (
            "profile 2/2 ssh-hardening: running role vmanyware.proxmox.profile_ssh_hardening through pct"
            in applied.stdout
        )
        journal = tmp_path / "journal"
        source = JournalStore(str(journal)).load(_only_operation(journal))
        assert source["status"] == "completed"
        kinds = [item["kind"] for item in source["stages"]]
        assert kinds == ["template", "create", "start", "readiness", "profile:base", "profile:ssh-hardening"]
        first = _profile_stages(journal, source["operationId"])
        assert all(item["status"] == "completed" for item in first.values())
        assert {item["evidence"]["transport"] for item in first.values()} == {"pct"}
        # base: motd, group, apt install of hello; hardening: the drop-in and its handler's reload
        base, hardening = _changed(first)
        assert base == 3 and hardening >= 1, first
        assert all(item["evidence"]["failed"] == 0 for item in first.values())
        _say(f"pct: {[(k, v['evidence']['changed'], v['evidence']['seconds']) for k, v in first.items()]}")
        dropin = lab.attach("cat", DROPIN).stdout
        assert "PasswordAuthentication no" in dropin and "PermitRootLogin prohibit-password" in dropin
        assert lab.attach("hello").stdout.strip() == "Hello, world!"
        assert lab.attach("cat", "/etc/motd").stdout.strip() == MOTD
        assert lab.attach("getent", "group", "vmadmin").returncode == 0

        # 3. drift, then ssh into the container: its host key in the operator's known_hosts under the recorded address
        address = source["handoff"]["ipv4"]
        host_key = lab.attach("cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        known_hosts.write_text(f"{address} {host_key[0]} {host_key[1]}\n")
        lab.attach("rm", "-f", "/etc/motd", DROPIN)
        over_ssh, ssh_seconds = lab.profiles(source, "ssh")
        _say(f"drift repaired over ssh: {ssh_seconds:.1f} s, changed {_changed(over_ssh)}")
        assert _changed(over_ssh)[0] == 1 and _changed(over_ssh)[1] >= 1, over_ssh
        assert lab.attach("cat", "/etc/motd").stdout.strip() == MOTD
        assert "PasswordAuthentication no" in lab.attach("cat", DROPIN).stdout

        # 4. a second run over pct: nothing to change
        again, pct_seconds = lab.profiles(source, "pct")
        _say(f"second run over pct: {pct_seconds:.1f} s, changed {_changed(again)}")
        assert _changed(again) == [0, 0], again

        rounds = int(os.environ.get("VMANYWARE_MEASURE_PROFILE_TRANSPORTS") or 0)
        if rounds > 0:
            _measure(lab, source, rounds)
        _say(f"whole test: {time.monotonic() - started:.1f} s")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
        _say(f"cleaned up {lxc_cleanup(str(state / 'lxc'))}")


def _measure(lab: Lab, source: dict[str, t.Any], rounds: int) -> None:
    """Both profiles (nothing to change) over each transport, ``rounds`` times, alternating: the medians of the playbook
    (both profiles, one ansible-playbook) and of each profile's nested run as its evidence records it."""
    figures: dict[str, dict[str, list[float]]] = {
        transport: {"playbook": [], "base": [], "ssh-hardening": []} for transport in ("pct", "ssh")
    }
    for _round in range(rounds):
        for transport in ("pct", "ssh"):
            stages, seconds = lab.profiles(source, transport)
            assert _changed(stages) == [0, 0], stages
            figures[transport]["playbook"].append(seconds)
            for name in PROFILES:
                figures[transport][name].append(float(stages["profile:" + name]["evidence"]["seconds"]))
    for transport, values in figures.items():
        medians = {name: round(statistics.median(items), 1) for name, items in values.items()}
        _say(f"measure {transport} x{rounds}: median seconds {json.dumps(medians)}; all {json.dumps(values)}")
