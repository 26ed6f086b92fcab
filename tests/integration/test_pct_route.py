# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""ansible-playbook in a real container through ``vmanyware.proxmox.pct``: SSH to the node, ``pct exec`` inside.

pvesim ``--containers real --node-ssh-authorized-keys``: the node's host key comes from the simulator's report and is
written to a known_hosts file (verified, no trust on first use). The playbook runs command, copy of a binary file,
slurp, stat and apt (Debian's mirror) in the container; the test then reads the file with ``lxc-attach`` itself. A
known_hosts with another key fails with ``node_ssh_host_key_not_verified`` and nothing runs. Then
``vmanyware_capabilities`` probes the node SSH route per node (the module, then the capabilities playbook's line per
node). Opt-in with the real-container lane (``-m realcontainer`` or ``PVESIM_REALCONTAINER=1``;
``tools/dev/acceptance.sh``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pvesim.testing import api_container, build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODE = "pve-test"
CTID = 304

PLAYBOOK = """
- name: A container over its node
  hosts: ct
  gather_facts: false
  tasks:
    - name: Command
      ansible.builtin.command: hostname
      register: hostname
      changed_when: false
    - name: Copy a binary file
      ansible.builtin.copy:
        src: "{{ blob_src }}"
        dest: /root/blob.bin
        mode: "0600"
      register: copied
    - name: Copy it again (idempotent)
      ansible.builtin.copy:
        src: "{{ blob_src }}"
        dest: /root/blob.bin
        mode: "0600"
      register: copied_again
    - name: Slurp it back
      ansible.builtin.slurp:
        src: /root/blob.bin
      register: slurped
    - name: Stat it
      ansible.builtin.stat:
        path: /root/blob.bin
        checksum_algorithm: sha256
      register: blob
    - name: Install a package with apt
      ansible.builtin.apt:
        name: hello
        update_cache: true
    - name: Run it
      ansible.builtin.command: hello
      register: hello
      changed_when: false
    - name: Check
      ansible.builtin.assert:
        that:
          - hostname.stdout == 'pctroute'
          - (copied is changed) == (first_run | bool) and copied_again is not changed
          - slurped.content == lookup('ansible.builtin.file', blob_b64)
          - blob.stat.checksum == blob_sha256 and blob.stat.mode == '0600'
          - hello.stdout == 'Hello, world!'
"""


def _say(msg: str) -> None:
    sys.stdout.write(f"[pct-route] {msg}\n")
    sys.stdout.flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=900, check=False)


def test_playbook_in_a_real_container_over_the_node(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("real-container tests are opt-in: pytest -m realcontainer (or PVESIM_REALCONTAINER=1)")
    ensure_realcontainer_tools(_say)
    rootfs, _seconds = build_container_rootfs(str(REPO), _say)
    key = tmp_path / "node_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    state = tmp_path / "sim"
    state.mkdir()
    extra = ["--containers", "real", "--container-rootfs", rootfs, "--node-ssh-authorized-keys", f"{key}.pub"]
    proc, conn = start_server(str(state), speed=50, extra=extra)
    started = time.monotonic()
    try:
        endpoint = conn["node_ssh"][NODE]
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(endpoint["known_hosts_line"] + "\n")
        other = tmp_path / "other_known_hosts"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
        other_key = (tmp_path / "other.pub").read_text().split()
        other.write_text(f"[127.0.0.1]:{endpoint['port']} {other_key[0]} {other_key[1]}\n")
        api_container(conn, CTID, "pctroute")

        blob = os.urandom(300_000) + bytes(range(256)) + b"\r\n\x00\x1b[0m"
        (tmp_path / "blob.bin").write_bytes(blob)
        (tmp_path / "blob.b64").write_text(base64.b64encode(blob).decode())
        (tmp_path / "playbook.yml").write_text(PLAYBOOK)
        (tmp_path / "inventory.ini").write_text(
            "[ct]\n"
            f"pctroute ansible_host=127.0.0.1 ansible_port={endpoint['port']} proxmox_vmid={CTID}\n"
            "[ct:vars]\n"
            "ansible_connection=vmanyware.proxmox.pct\n"
            f"ansible_private_key_file={key}\n"
            f"vmanyware_pct_known_hosts_file={known_hosts}\n"
            "ansible_python_interpreter=/usr/bin/python3\n"
        )
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_HOST_KEY_CHECKING="True")
        play = [str(BIN / "ansible-playbook"), "-i", "inventory.ini", "playbook.yml"]
        play += ["-e", f"blob_src={tmp_path / 'blob.bin'}", "-e", f"blob_b64={tmp_path / 'blob.b64'}"]
        play += ["-e", f"blob_sha256={hashlib.sha256(blob).hexdigest()}"]
        t0 = time.monotonic()
        res = _run([*play, "-e", "first_run=true"], env, tmp_path)
        _say(f"playbook: {time.monotonic() - t0:.1f} s")
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
        assert "failed=0" in res.stdout and "unreachable=0" in res.stdout
        # the same playbook pipelined (the module on stdin through ssh and lxc-attach)
        res = _run([*play, "-e", "first_run=false"], dict(env, ANSIBLE_PIPELINING="1"), tmp_path)
        assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]

        # the file as the container has it, read without the plugin
        attach = ["lxc-attach", "-P", str(state / "lxc"), "-n", f"ct{CTID}", "--"]
        inside = subprocess.run([*attach, "cat", "/root/blob.bin"], capture_output=True, check=True, timeout=60)
        assert inside.stdout == blob

        # another host key for the node: refused before anything ran (no pct, no file)
        wrong = [str(BIN / "ansible"), "-i", "inventory.ini", "ct", "-m", "ansible.builtin.command"]
        wrong += ["-a", "touch /root/wrong-known-hosts", "-e", f"vmanyware_pct_known_hosts_file={other}"]
        res = _run(wrong, env, tmp_path)
        assert res.returncode == 4 and "node_ssh_host_key_not_verified" in res.stdout + res.stderr, res.stdout
        assert "Host key verification failed" not in res.stdout + res.stderr  # ssh's own text is not echoed
        absent = subprocess.run([*attach, "test", "-e", "/root/wrong-known-hosts"], check=False, timeout=60)
        assert absent.returncode == 1

        # the capability report's probe of the node SSH route
        caps = {
            "api_host": conn["host"],
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
        }
        for known, expected in (
            (known_hosts, ("usable", None)),
            (other, ("unusable", "node_ssh_host_key_not_verified")),
        ):
            args = dict(
                caps,
                node_ssh={
                    "private_key_file": str(key),
                    "known_hosts_file": str(known),
                    "endpoints": {NODE: f"127.0.0.1:{endpoint['port']}"},
                },
            )
            res = _run(
                [
                    str(BIN / "ansible"),
                    "localhost",
                    "-m",
                    "vmanyware.proxmox.vmanyware_capabilities",
                    "-a",
                    json.dumps(args),
                ],
                env,
                tmp_path,
            )
            assert res.returncode == 0, res.stdout[-4000:]
            report = json.loads(res.stdout.split("=>", 1)[1])
            row = next(item for item in report["node_ssh"]["nodes"] if item["node"] == NODE)
            assert (row["status"], row["reason"]) == expected, report["node_ssh"]
        # the capabilities playbook (its role) prints the route per node when given the settings
        (tmp_path / "node_ssh.json").write_text(
            json.dumps({"vmanyware_node_ssh": args["node_ssh"], "vmanyware_connection": caps})
        )
        res = _run(
            [str(BIN / "ansible-playbook"), "vmanyware.proxmox.capabilities", "-e", "@node_ssh.json"], env, tmp_path
        )
        assert res.returncode == 0, res.stdout[-4000:]
        assert (
            f"{NODE} node SSH route: unusable (node_ssh_host_key_not_verified) at 127.0.0.1:{endpoint['port']}"
            in res.stdout
        )
        _say(f"lane part: {time.monotonic() - started:.1f} s")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        _say(f"cleaned up {lxc_cleanup(str(state / 'lxc'))}")
