# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A VM provisioned and configured with no SSH at all: ansible-core's own modules through ``vmanyware.proxmox.qga``.

pvesim ``--guests container`` gives each started VM a real LXC container whose agent commands really run (real
cloud-init, real apt against Debian's mirror, the guest's own Python), so Ansible modules run as they would in a VM.
The provision role runs every stage (readiness through the agent, the ``hello`` package installed by the packages
stage) and hands the VM over with ``provision_guest_connection: qga``; the configure play then runs command, copy (a
binary file), template, file, stat, slurp, apt, service and a ``become`` task in the guest. The controller's SSH client
is replaced by ``/bin/false`` for the whole run, so any SSH attempt would fail. A second run through the journal
inventory (``connection: qga``) changes nothing. Opt-in with the real-container lane (``-m realcontainer`` or
``PVESIM_REALCONTAINER=1``; ``tools/dev/acceptance.sh``).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pvesim.testing import build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VMID = 201

DEFINITION = """\
apiVersion: vmanyware.dev/v1
kind: Environment
name: qga-lab
image: debian-13
resources: {cores: 1, memoryMiB: 1024, diskGiB: 20}
access:
  sshPublicKeys:
    - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop
packages:
  - name: hello
"""

CONFIGURE_TASKS = """\
- name: The package the packages stage installed
  ansible.builtin.command: hello
  register: hello
  changed_when: false
- name: Copy a binary file
  ansible.builtin.copy:
    src: "{{ blob_src }}"
    dest: /root/blob.bin
    mode: "0600"
  register: copied
- name: Render a template
  ansible.builtin.template:
    src: "{{ motd_src }}"
    dest: /etc/motd.d-vmanyware
    mode: "0644"
  register: templated
- name: A directory
  ansible.builtin.file:
    path: /opt/vmanyware
    state: directory
    mode: "0750"
  register: directory
- name: Stat the copied file
  ansible.builtin.stat:
    path: /root/blob.bin
    checksum_algorithm: sha256
  register: blob
- name: Slurp it back
  ansible.builtin.slurp:
    src: /root/blob.bin
  register: slurped
- name: Install a package with apt
  ansible.builtin.apt:
    name: cowsay
    install_recommends: false
  register: installed
- name: Start sshd as a service
  ansible.builtin.service:
    name: ssh
    state: started
  register: service
- name: Become another user inside the guest
  ansible.builtin.command: id -un
  become: true
  become_user: nobody
  register: whoami
  changed_when: false
- name: Check
  ansible.builtin.assert:
    that:
      - hello.stdout == 'Hello, world!'
      - blob.stat.checksum == blob_sha256 and blob.stat.mode == '0600'
      - slurped.content == lookup('ansible.builtin.file', blob_b64)
      - whoami.stdout == 'nobody'
      - (copied is changed) == (first_run | bool)
      - (templated is changed) == (first_run | bool)
      - (directory is changed) == (first_run | bool)
      - (installed is changed) == (first_run | bool)
"""


def _say(msg: str) -> None:
    sys.stdout.write(f"[qga-modules] {msg}\n")
    sys.stdout.flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=1200, check=False)


def _recap(stdout: str, host: str) -> dict[str, int]:
    match = re.search(re.escape(host) + r"\s*: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", stdout)
    assert match, stdout[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), (int(x) for x in match.groups())))


def test_provision_and_configure_without_ssh(request: pytest.FixtureRequest, tmp_path: Path) -> None:
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
        blob = os.urandom(200_000) + bytes(range(256)) + b"\r\n\x00"
        (tmp_path / "blob.bin").write_bytes(blob)
        (tmp_path / "blob.b64").write_text(base64.b64encode(blob).decode())
        (tmp_path / "motd.j2").write_text("Configured through the guest agent: VM {{ vmanyware_vmid }}\n")
        (tmp_path / "definition.yml").write_text(DEFINITION)
        tasks = yaml.safe_load(CONFIGURE_TASKS)
        configure = {"name": "Configure through the guest agent", "gather_facts": False, "tasks": tasks}
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
        (tmp_path / "provision.yml").write_text(
            yaml.safe_dump([provision, dict(configure, hosts="vmanyware_provisioned")], sort_keys=False)
        )
        (tmp_path / "configure.yml").write_text(yaml.safe_dump([dict(configure, hosts="all")], sort_keys=False))
        (tmp_path / "inventory.vmanyware_journal.yml").write_text(
            yaml.safe_dump({"plugin": "vmanyware.proxmox.journal", "connection": "qga"})
        )
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
        extra = ["-e", f"blob_src={tmp_path / 'blob.bin'}", "-e", f"blob_b64={tmp_path / 'blob.b64'}"]
        extra += ["-e", f"blob_sha256={hashlib.sha256(blob).hexdigest()}", "-e", f"motd_src={tmp_path / 'motd.j2'}"]
        play = [str(BIN / "ansible-playbook"), "provision.yml", *extra, "-e", "first_run=true"]
        review = _run(play, env, tmp_path)
        assert review.returncode == 0 and (tmp_path / "confirm.yml").is_file(), review.stdout[-4000:]
        t0 = time.monotonic()
        applied = _run([*play, "-e", f"@{tmp_path / 'confirm.yml'}"], env, tmp_path)
        _say(f"provision and configure: {time.monotonic() - t0:.1f} s")
        assert applied.returncode == 0, applied.stdout[-6000:] + applied.stderr[-2000:]
        recap = _recap(applied.stdout, "qga-lab")  # the role's add_host names the VM
        assert (recap["failed"], recap["unreachable"], recap["ok"]) == (0, 0, len(tasks)), recap
        assert conn["tokens"]["full"]["secret"] not in applied.stdout + applied.stderr

        # the file as the guest has it, read without the plugin
        attach = ["lxc-attach", "-P", str(state / "guest-containers" / "lxc"), "-n", f"vm{VMID}", "--"]
        inside = subprocess.run([*attach, "cat", "/root/blob.bin"], capture_output=True, check=True, timeout=60)
        assert inside.stdout == blob
        motd = subprocess.run([*attach, "cat", "/etc/motd.d-vmanyware"], capture_output=True, check=True, timeout=60)
        assert motd.stdout.decode() == f"Configured through the guest agent: VM {VMID}\n"

        # again, the VM from the journal inventory: nothing changes
        t0 = time.monotonic()
        again = _run(
            [str(BIN / "ansible-playbook"), "-i", "inventory.vmanyware_journal.yml", "configure.yml", *extra]
            + ["-e", "first_run=false"],
            env,
            tmp_path,
        )
        _say(f"configure again: {time.monotonic() - t0:.1f} s")
        assert again.returncode == 0, again.stdout[-6000:]
        assert _recap(again.stdout, f"qga-lab-{VMID}") == {
            "ok": len(tasks),
            "changed": 0,
            "unreachable": 0,
            "failed": 0,
        }
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        _say(f"cleaned up {lxc_cleanup(str(state / 'guest-containers' / 'lxc'))}")
