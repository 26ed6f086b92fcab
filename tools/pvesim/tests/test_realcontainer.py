# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pvesim with ``--containers real``: the ``lxc`` endpoints backed by a real LXC container with a real sshd.

Opt-in (builds or reuses the root file system, needs root): ``-m realcontainer`` or ``PVESIM_REALCONTAINER=1``;
``tools/dev/acceptance.sh`` runs it. Every container is stopped and destroyed at the end, also on failure.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin, build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[3]
NODE = "pve-test"
CTID = 302
TEMPLATE = "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst"
MAC = "BC:24:11:00:03:02"


def _say(msg: str) -> None:
    sys.stdout.write(f"[realcontainer] {msg}\n")
    sys.stdout.flush()


def _lxc_state(lxcpath: Path) -> str:
    res = subprocess.run(
        ["lxc-info", "-P", str(lxcpath), "-n", f"ct{CTID}", "-s", "-H"], capture_output=True, text=True, check=False
    )
    return res.stdout.strip()


def test_lxc_endpoints_drive_a_real_container(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip(
            "real-container tests are opt-in: pytest -m realcontainer (or PVESIM_REALCONTAINER=1); tools/dev/acceptance.sh"
        )
    ensure_realcontainer_tools(_say)
    rootfs, _seconds = build_container_rootfs(str(REPO), _say)
    key = tmp_path / "id"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    state = tmp_path / "sim"
    state.mkdir()
    lxcpath = state / "lxc"
    proc, conn = start_server(str(state), speed=50, extra=["--containers", "real", "--container-rootfs", rootfs])
    try:
        assert conn["containers"] == "real"
        api = ProxmoxAPI(
            conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"]
        )
        node = api.nodes(NODE)

        def wait(upid: str) -> dict[str, t.Any]:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                status = node.tasks(upid).status.get()
                if status["status"] == "stopped":
                    return dict(status)
                time.sleep(0.3)
            raise AssertionError(f"task {upid} did not finish")

        assert wait(node.aplinfo.post(storage="local", template=TEMPLATE.split("/", 1)[1]))["exitstatus"] == "OK"
        upid = node.lxc.post(
            vmid=CTID,
            ostemplate=TEMPLATE,
            hostname="realct",
            rootfs="local-lvm:4",
            net0=f"name=eth0,bridge=vmbr0,hwaddr={MAC},ip=dhcp",
            **{"ssh-public-keys": key.with_suffix(".pub").read_text()},
        )
        assert wait(upid)["exitstatus"] == "OK"
        assert (
            _lxc_state(lxcpath) == "STOPPED"
            and (lxcpath / f"ct{CTID}" / "rootfs" / "root" / ".ssh" / "authorized_keys").read_text()
            == key.with_suffix(".pub").read_text()
        )
        with pytest.raises(Exception, match="is not running"):
            node.lxc(CTID).interfaces.get()
        assert wait(node.lxc(CTID).status.start.post())["exitstatus"] == "OK"
        assert _lxc_state(lxcpath) == "RUNNING"
        info = PvesimAdmin(conn)._call("GET", f"/containers/{CTID}")  # pylint: disable=protected-access
        assert info["container_backend"] == "real" and info["ssh_host"] == "127.0.0.1"

        # the address appears on the recorded MAC once the container's sshd answers
        eth0: dict[str, t.Any] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not eth0.get("inet"):
            eth0 = next(i for i in node.lxc(CTID).interfaces.get() if i["name"] == "eth0")
            time.sleep(0.3)
        assert eth0["hwaddr"] == MAC.lower() and eth0["inet"].startswith("192.0.2."), eth0
        ssh = [
            "ssh",
            "-p",
            str(info["ssh_forward_port"]),
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={tmp_path / 'known_hosts'}",
        ]
        # the host key pvesim generated for this container, trusted explicitly from its file (no trust on first use)
        host_key = (lxcpath / f"ct{CTID}" / "rootfs" / "etc" / "ssh" / "ssh_host_ed25519_key.pub").read_text().split()
        (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{info['ssh_forward_port']} {host_key[0]} {host_key[1]}\n")
        res = subprocess.run(
            [*ssh, "root@127.0.0.1", "hostname; id -un; python3 -c 'import apt'"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert res.returncode == 0 and res.stdout.split() == ["realct", "root"], res.stderr

        assert wait(node.lxc(CTID).status.shutdown.post())["exitstatus"] == "OK"
        assert _lxc_state(lxcpath) == "STOPPED" and node.lxc(CTID).status.current.get()["status"] == "stopped"
        assert wait(node.lxc(CTID).status.start.post())["exitstatus"] == "OK"
        assert wait(node.lxc(CTID).status.stop.post())["exitstatus"] == "OK"
        assert _lxc_state(lxcpath) == "STOPPED"
        assert wait(node.lxc(CTID).status.start.post())["exitstatus"] == "OK"
        assert (
            PvesimAdmin(conn).requests() and [e for e in PvesimAdmin(conn).requests() if e.get("schema_errors")] == []
        )

        # the simulator killed outright: the running container dies with it (PR_SET_PDEATHSIG on lxc-start and its init)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _lxc_state(lxcpath) != "STOPPED":
            time.sleep(0.3)
        assert _lxc_state(lxcpath) == "STOPPED"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        found = lxc_cleanup(str(lxcpath))
        _say(f"cleaned up {found}")
    assert not (lxcpath / f"ct{CTID}").exists()
