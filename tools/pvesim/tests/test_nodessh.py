# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pvesim ``--node-ssh-authorized-keys``: the node's sshd (host key verified) and its ``pct`` on a real container.

Opt-in with the real-container tests (root, lxc, sshd, the cached rootfs): ``-m realcontainer`` or
``PVESIM_REALCONTAINER=1``; ``tools/dev/acceptance.sh`` runs it. Every container is destroyed at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pvesim.nodessh import host_key_fingerprint
from pvesim.testing import (
    PvesimAdmin,
    api_container,
    api_task,
    build_container_rootfs,
    ensure_realcontainer_tools,
    lxc_cleanup,
    start_server,
)

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[3]
NODE = "pve-test"
CTID = 303


def _say(msg: str) -> None:
    sys.stdout.write(f"[nodessh] {msg}\n")
    sys.stdout.flush()


def test_node_ssh_endpoint_runs_pct_on_a_real_container(request: pytest.FixtureRequest, tmp_path: Path) -> None:
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
    try:
        endpoint = conn["node_ssh"][NODE]
        assert PvesimAdmin(conn)._call("GET", "/node-ssh") == conn["node_ssh"]  # pylint: disable=protected-access
        public = (state / "nodessh" / NODE / "ssh_host_ed25519_key.pub").read_text().split()
        assert endpoint["host_key"] == f"{public[0]} {public[1]}"
        keygen = subprocess.run(
            ["ssh-keygen", "-lf", str(state / "nodessh" / NODE / "ssh_host_ed25519_key.pub")],
            capture_output=True,
            text=True,
            check=True,
        )
        assert (
            keygen.stdout.split()[1] == endpoint["host_key_fingerprint"] == host_key_fingerprint(endpoint["host_key"])
        )
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(endpoint["known_hosts_line"] + "\n")

        def ssh(command: str, stdin: bytes = b"", known: Path = known_hosts) -> subprocess.CompletedProcess[bytes]:
            argv = ["ssh", "-F", "none", "-T", "-p", str(endpoint["port"]), "-i", str(key), "-o", "IdentitiesOnly=yes"]
            argv += ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}"]
            return subprocess.run(
                [*argv, "root@127.0.0.1", command], input=stdin, capture_output=True, timeout=120, check=False
            )

        # a wrong known_hosts: ssh refuses before anything runs on the node
        (tmp_path / "other").write_text(f"[127.0.0.1]:{endpoint['port']} ssh-ed25519 {public[1][:-8]}AAAAAAAA\n")
        refused = ssh("touch /tmp/should-not-exist-nodessh", known=tmp_path / "other")
        assert refused.returncode == 255 and b"Host key verification failed" in refused.stderr
        # pct help, unknown VMID (pct's die: exit 255 and its text)
        assert ssh("pct help").stdout.startswith(b"USAGE: pct")
        missing = ssh("pct status 999")
        assert missing.returncode == 255
        assert missing.stderr == f"Configuration file 'nodes/{NODE}/lxc/999.conf' does not exist\n".encode()

        api_container(conn, CTID, "nodessh", start=False)
        assert ssh(f"pct status {CTID}").stdout == b"status: stopped\n"
        assert ssh(f"pct exec {CTID} -- true").returncode != 0  # lxc-attach finds no running container
        stopped = ssh(f"pct push {CTID} /etc/hostname /tmp/x")
        assert (stopped.returncode, stopped.stderr) == (255, b"can only push files to a running CT\n")
        stopped = ssh(f"pct pull {CTID} /etc/hostname /tmp/x")
        assert (stopped.returncode, stopped.stderr) == (255, b"can only pull files from a running VM\n")
        api_task(conn, f"/lxc/{CTID}/status/start")
        assert ssh(f"pct status {CTID}").stdout == b"status: running\n"

        # exec: the container's hostname, exit code and stdin passed through
        assert ssh(f"pct exec {CTID} -- hostname").stdout == b"nodessh\n"
        assert ssh(f"pct exec {CTID} -- /bin/sh -c 'exit 7'").returncode == 7
        assert ssh(f"pct exec {CTID}").stderr == b"missing command\n"
        payload = bytes(range(256)) * 64
        assert ssh(f"pct exec {CTID} -- /bin/sh -c 'cat > /root/blob'", stdin=payload).returncode == 0
        assert ssh(f"pct exec {CTID} -- cat /root/blob").stdout == payload
        # push/pull: a node file into the container and back, with --perms
        (tmp_path / "node-file").write_bytes(payload)
        pushed = ssh(f"pct push {CTID} {tmp_path / 'node-file'} /root/pushed --perms 640")
        assert pushed.returncode == 0, pushed.stderr
        assert ssh(f"pct exec {CTID} -- stat -c %a /root/pushed").stdout == b"640\n"
        assert ssh(f"pct pull {CTID} /root/pushed {tmp_path / 'pulled'}").returncode == 0
        assert (tmp_path / "pulled").read_bytes() == payload
        absent = ssh(f"pct pull {CTID} /root/absent {tmp_path / 'absent'}")
        assert (absent.returncode, absent.stderr) == (255, b"failed to open /root/absent: No such file or directory\n")
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        _say(f"cleaned up {lxc_cleanup(str(state / 'lxc'))}")
    # the sshd of the node ended with the simulator
    assert subprocess.run(["pgrep", "-f", str(state / "nodessh")], capture_output=True, check=False).returncode == 1
