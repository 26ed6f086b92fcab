# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pvesim with ``--guests container``: a VM's agent endpoints act on a real LXC container (real processes, files,
cloud-init), as qemu-ga would inside the VM.

Opt-in like the real-container tests (builds or reuses the root file system, needs root): ``-m realcontainer`` or
``PVESIM_REALCONTAINER=1``; ``tools/dev/acceptance.sh`` (``make acceptance-container``) runs it. One simulator and
one VM for the module; every container is stopped and destroyed at the end, also on failure.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import requests

from pvesim.testing import PvesimAdmin, build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[3]
NODE = "pve-test"
VMID = 411
MAC = "BC:24:11:00:04:11"
QGA_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MIB = 1024 * 1024


def _say(msg: str) -> None:
    sys.stdout.write(f"[containerguest] {msg}\n")
    sys.stdout.flush()


class Sim:
    def __init__(self, proc: subprocess.Popen[bytes], conn: dict[str, t.Any], lxcpath: Path) -> None:
        self.proc, self.conn, self.lxcpath = proc, conn, lxcpath
        self.admin = PvesimAdmin(conn)
        self.session = requests.Session()
        token = conn["tokens"]["full"]
        self.session.headers["Authorization"] = f"PVEAPIToken={token['id']}={token['secret']}"

    def call(self, method: str, path: str, **params: t.Any) -> requests.Response:
        url = f"{self.conn['url']}/nodes/{NODE}{path}"
        kw: dict[str, t.Any] = {"params": params} if method == "GET" else {"json": params}
        return self.session.request(method, url, verify=self.conn["ca_file"], timeout=120, **kw)

    def data(self, method: str, path: str, **params: t.Any) -> t.Any:
        resp = self.call(method, path, **params)
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:500])
        return resp.json()["data"]

    def task(self, method: str, path: str, **params: t.Any) -> None:
        upid = self.data(method, path, **params)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = self.data("GET", f"/tasks/{upid}/status")
            if status["status"] == "stopped":
                assert status["exitstatus"] == "OK", status
                return
            time.sleep(0.2)
        raise AssertionError(f"task {upid} did not finish")

    def agent(self, method: str, cmd: str, **params: t.Any) -> requests.Response:
        return self.call(method, f"/qemu/{VMID}/agent/{cmd}", **params)

    def start_exec(self, argv: list[str], stdin: str | None = None) -> int:
        params: dict[str, t.Any] = {"command": argv}
        if stdin is not None:
            params["input-data"] = stdin
        return int(self.data("POST", f"/qemu/{VMID}/agent/exec", **params)["pid"])

    def status(self, pid: int) -> dict[str, t.Any]:
        return dict(self.data("GET", f"/qemu/{VMID}/agent/exec-status", pid=pid))

    def run(self, argv: list[str], stdin: str | None = None, timeout: float = 120) -> dict[str, t.Any]:
        pid = self.start_exec(argv, stdin)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status(pid)
            if status["exited"]:
                return status
            time.sleep(0.1)
        raise AssertionError(f"{argv} did not finish in {timeout} s")

    def lxc_state(self) -> str:
        res = subprocess.run(
            ["lxc-info", "-P", str(self.lxcpath), "-n", f"vm{VMID}", "-s", "-H"],
            capture_output=True,
            text=True,
            check=False,
        )
        return res.stdout.strip() or "STOPPED"


@pytest.fixture(scope="module")
def sim(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[Sim]:
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("container-guest tests are opt-in: pytest -m realcontainer (or PVESIM_REALCONTAINER=1)")
    ensure_realcontainer_tools(_say)
    rootfs, _seconds = build_container_rootfs(str(REPO), _say)
    state = tmp_path_factory.mktemp("containerguest")
    lxcpath = state / "guest-containers" / "lxc"
    proc, conn = start_server(str(state), speed=50, extra=["--guests", "container", "--container-rootfs", rootfs])
    s = Sim(proc, conn, lxcpath)
    try:
        assert conn["guests"] == "container"
        s.task("POST", "/qemu/9000/clone", newid=VMID, name="cg-web", full=1)
        s.data(
            "PUT",
            f"/qemu/{VMID}/config",
            net0=f"virtio={MAC},bridge=vmbr0",
            ipconfig0="ip=dhcp",
            agent="1",
            ciupgrade=0,
        )
        t0 = time.monotonic()
        s.task("POST", f"/qemu/{VMID}/status/start")
        _say(f"VM {VMID} started in {time.monotonic() - t0:.1f} s")
        yield s
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        _say(f"cleaned up {lxc_cleanup(str(lxcpath))}")


def test_exec_stdin_stdout_stderr_and_exit_codes(sim: Sim) -> None:
    res = sim.run(["sh", "-c", 'read line; echo "got $line"; echo oops >&2; exit 3'], stdin="hello\n")
    assert res == {
        "exited": 1,
        "exitcode": 3,
        "out-data": "got hello\n",
        "out-truncated": 0,
        "err-data": "oops\n",
        "err-truncated": 0,
    }
    assert sim.run(["false"]) == {"exited": 1, "exitcode": 1}  # no output: no out-data (qemu-ga)
    assert sim.run(["cat"]) == {"exited": 1, "exitcode": 0}  # no input-data: stdin is /dev/null
    # argv, not a shell line: one argument with spaces and quotes stays one
    assert sim.run(["printf", "%s|", "a b", "'c'"])["out-data"] == "a b|'c'|"
    resp = sim.agent("POST", "exec", command=["no-such-program"])
    assert resp.status_code == 500 and resp.json()["message"] == (
        f"VM {VMID} qga command 'guest-exec' failed - Guest agent command failed, error was "
        "'Failed to execute child process \u201cno-such-program\u201d (No such file or directory)'\n"
    )


def test_exec_runs_asynchronously_and_its_status_is_read_once(sim: Sim) -> None:
    t0 = time.monotonic()
    pid = sim.start_exec(["sh", "-c", "sleep 2; echo done"])
    assert time.monotonic() - t0 < 1.5  # the pid comes back at once
    assert sim.status(pid) == {"exited": 0}
    deadline = time.monotonic() + 30
    status = sim.status(pid)
    while not status["exited"] and time.monotonic() < deadline:
        time.sleep(0.2)
        status = sim.status(pid)
    assert status["exitcode"] == 0 and status["out-data"] == "done\n" and time.monotonic() - t0 >= 2
    resp = sim.agent("GET", "exec-status", pid=pid)  # handed out once, then forgotten
    assert resp.status_code == 500 and "Invalid parameter 'pid'" in resp.json()["message"]


def test_commands_get_qemu_gas_environment(sim: Sim) -> None:
    """qemu-ga is a systemd system service without User=: PATH only (no HOME), cwd /, root, umask 022."""
    assert sim.run(["env"])["out-data"] == f"PATH={QGA_PATH}\n"
    out = sim.run(["sh", "-c", 'pwd; id -u; umask; echo "home=${HOME-unset}"'])["out-data"]
    assert out.split() == ["/", "0", "0022", "home=unset"]


def test_python_runs_in_the_guest(sim: Sim) -> None:
    """What an Ansible module needs: the guest's own python3, with apt's bindings."""
    res = sim.run(["python3", "-c", "import apt, json, platform; print(json.dumps([platform.python_version(), 6*7]))"])
    assert res["exitcode"] == 0 and res["out-data"].startswith('["3.11.') and res["out-data"].endswith(", 42]\n")


def test_output_beyond_16_mib_is_truncated(sim: Sim) -> None:
    res = sim.run(["python3", "-c", f"import sys; sys.stdout.write('a' * {16 * MIB + 5}); sys.stderr.write('e')"])
    assert res["exitcode"] == 0 and res["out-truncated"] == 1 and res["err-truncated"] == 0
    assert len(res["out-data"]) == 16 * MIB and res["err-data"] == "e"


def test_file_write_and_read_are_binary_safe(sim: Sim) -> None:
    raw = (bytes(range(256)) * 180)[: 61440 // 4 * 3]  # the largest file-write: 61440 base64 characters
    content = base64.b64encode(raw).decode()
    assert len(content) == 61440
    assert sim.agent("POST", "file-write", file="/root/blob.bin", content=content, encode=0).status_code == 200
    assert sim.agent("POST", "file-write", file="/root/x", content=content + "A", encode=0).status_code == 400
    read = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/blob.bin", decode=0)
    assert base64.b64decode(read["content"]) == raw and read["bytes-read"] == len(raw) and "truncated" not in read
    digest = sim.run(["sha256sum", "/root/blob.bin"])["out-data"].split()[0]
    assert digest == hashlib.sha256(raw).hexdigest()
    # encode=1 (default): the text's UTF-8, replacing the file (mode wb): the longer content is gone
    assert sim.agent("POST", "file-write", file="/root/blob.bin", content="grüße\n").status_code == 200
    assert sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/blob.bin") == {
        "content": "grüße\n",
        "bytes-read": 8,
    }
    assert sim.run(["stat", "-c", "%s %a %U", "/root/blob.bin"])["out-data"] == "8 644 root\n"
    resp = sim.agent("POST", "file-write", file="/no/such/dir/f", content="x")
    assert resp.status_code == 500 and "failed to open file '/no/such/dir/f' (mode: 'wb')" in resp.json()["message"]


def test_file_read_count_offset_and_truncated(sim: Sim) -> None:
    sim.run(["sh", "-c", f"head -c {3 * MIB + 7} /dev/urandom > /root/big"])
    raw = base64.b64decode(sim.run(["base64", "-w0", "/root/big"])["out-data"])
    assert len(raw) == 3 * MIB + 7
    whole = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/big", decode=0)
    # decode=0: PVE concatenates each 1 MiB chunk's own base64 (padding included)
    chunks = [whole["content"][i : i + 1398104] for i in range(0, len(whole["content"]), 1398104)]
    assert b"".join(base64.b64decode(c) for c in chunks) == raw and "truncated" not in whole
    part = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/big", decode=0, offset=MIB - 3, count=10)
    assert base64.b64decode(part["content"]) == raw[MIB - 3 : MIB + 7]
    assert part["bytes-read"] == 10 and part["truncated"] == 1
    # exactly the remaining bytes: no short chunk, so still truncated (as on PVE); one more: EOF seen
    tail = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/big", decode=0, offset=3 * MIB, count=7)
    assert base64.b64decode(tail["content"]) == raw[3 * MIB :] and tail["truncated"] == 1
    tail = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/big", decode=0, offset=3 * MIB, count=8)
    assert tail["bytes-read"] == 7 and "truncated" not in tail
    resp = sim.agent("GET", "file-read", file="/root/missing")
    assert resp.status_code == 500 and resp.json()["message"] == (
        f"VM {VMID} qga command 'guest-file-open' failed - failed to open file '/root/missing' (mode: 'r'): "
        "No such file or directory\n"
    )


def test_osinfo_interfaces_and_cloud_init_readiness(sim: Sim) -> None:
    osinfo = sim.data("GET", f"/qemu/{VMID}/agent/get-osinfo")["result"]
    assert osinfo["id"] == "debian" and osinfo["version-id"] == "12" and osinfo["kernel-release"] == os.uname().release
    ifaces = sim.data("GET", f"/qemu/{VMID}/agent/network-get-interfaces")["result"]
    nic = next(i for i in ifaces if i["hardware-address"] == MAC.lower())
    assert any(a["ip-address-type"] == "ipv4" for a in nic["ip-addresses"])
    # what the collection's readiness stage does: real cloud-init on the VM's NoCloud seed
    res = sim.run(["cloud-init", "status", "--long", "--wait"], timeout=180)
    assert res["exitcode"] in (0, 2) and "status: done" in res["out-data"], res
    assert sim.run(["hostname"])["out-data"] == "cg-web\n"
    meta = sim.data("GET", f"/qemu/{VMID}/cloudinit/dump", type="meta")
    iid = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/var/lib/cloud/data/instance-id")["content"]
    assert iid.strip() in meta
    key = sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/etc/ssh/ssh_host_ed25519_key.pub")["content"]
    assert key.startswith("ssh-ed25519 ")


def test_faults_still_apply(sim: Sim) -> None:
    sim.admin.set_guest(VMID, exec_disabled=True)
    try:
        resp = sim.agent("POST", "exec", command=["true"])
        assert resp.status_code == 500 and "The command guest-exec has been disabled" in resp.json()["message"]
    finally:
        sim.admin.set_guest(VMID, exec_disabled=False)
    sim.admin.add_fault(method="POST", path="/agent/exec", action="exec_disabled", occurrence=1)
    assert sim.agent("POST", "exec", command=["true"]).status_code == 500
    sim.admin.add_fault(method="GET", path="/agent/file-read", action="agent_not_running", occurrence=1)
    resp = sim.agent("GET", "file-read", file="/etc/hostname")
    assert resp.status_code == 500 and resp.json()["message"] == "QEMU guest agent is not running\n"
    assert sim.run(["true"])["exitcode"] == 0
    rejected = [(e["path"], e["params"]["file"]) for e in sim.admin.requests() if e.get("schema_errors")]
    assert rejected == [(f"/nodes/{NODE}/qemu/{VMID}/agent/file-write", "/root/x")]  # the one over maxLength


def test_vm_stop_ends_the_container_and_the_simulator_takes_it_along(sim: Sim) -> None:
    assert sim.lxc_state() == "RUNNING"
    sim.agent("POST", "file-write", file="/root/kept", content="disk\n")
    sim.task("POST", f"/qemu/{VMID}/status/stop")
    assert sim.lxc_state() == "STOPPED"
    resp = sim.agent("POST", "ping")
    assert resp.status_code == 500 and resp.json()["message"] == f"VM {VMID} is not running\n"
    sim.task("POST", f"/qemu/{VMID}/status/start")  # the overlay is the VM's disk: it survives stop/start
    assert sim.data("GET", f"/qemu/{VMID}/agent/file-read", file="/root/kept")["content"] == "disk\n"
    sim.task("POST", f"/qemu/{VMID}/status/shutdown")
    assert sim.lxc_state() == "STOPPED"
    sim.task("DELETE", f"/qemu/{VMID}")  # destroyed: its container and overlay go
    assert not (sim.lxcpath / f"vm{VMID}").exists()
    sim.task("POST", "/qemu/9000/clone", newid=VMID, name="cg-web", full=1)
    sim.data("PUT", f"/qemu/{VMID}/config", agent="1")
    sim.task("POST", f"/qemu/{VMID}/status/start")
    assert sim.run(["test", "-e", "/root/kept"])["exitcode"] == 1  # a new VM: a fresh tree
    sim.proc.send_signal(signal.SIGKILL)  # killed outright: PR_SET_PDEATHSIG takes the container along
    sim.proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and sim.lxc_state() != "STOPPED":
        time.sleep(0.3)
    assert sim.lxc_state() == "STOPPED"
