# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pvesim with ``--guests real``: a real QEMU VM, real cloud-init, real qemu-guest-agent, real sshd.

Opt-in (several minutes, builds or reuses the guest image): run with ``-m realguest`` or with
``PVESIM_REALGUEST=1``, e.g.::

    .venv/bin/python -m pytest -m realguest tools/pvesim/tests/test_realguest.py -s

Otherwise the ``realguest`` tests are skipped, so ``make pytest`` is unchanged. The tests skip
only when QEMU cannot run at all (``qemu-system-x86_64`` still missing after an install attempt).
Timings are printed (``-s``) and written to ``<tmp>/realguest-timings.json``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import typing as t
import urllib.parse
from pathlib import Path

import pytest
import requests
from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin, ensure_realguest_tools

REPO = Path(__file__).resolve().parents[3]
BUILD_SH = REPO / "tools" / "guest-image" / "build.sh"
NODE = "pve-test"
VMID = 301
TIMINGS: dict[str, float] = {}


def _opted_in(config: pytest.Config) -> bool:
    return os.environ.get("PVESIM_REALGUEST") == "1" or "realguest" in (config.getoption("markexpr") or "")


@pytest.fixture(autouse=True)
def _realguest_opt_in(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("realguest") and not _opted_in(request.config):
        pytest.skip("real-guest tests are opt-in: pytest -m realguest (or PVESIM_REALGUEST=1)")


def _say(msg: str) -> None:
    sys.stdout.write(f"[realguest] {msg}\n")
    sys.stdout.flush()


@pytest.fixture(scope="module")
def guest_image(request: pytest.FixtureRequest) -> str:
    if not _opted_in(request.config):
        pytest.skip("real-guest tests are opt-in: pytest -m realguest (or PVESIM_REALGUEST=1)")
    ensure_realguest_tools(_say)
    t0 = time.monotonic()
    res = subprocess.run([str(BUILD_SH)], capture_output=True, text=True, check=False, timeout=1800)
    TIMINGS["image_build_or_cache_s"] = round(time.monotonic() - t0, 1)
    assert res.returncode == 0, f"build.sh failed:\n{res.stderr[-4000:]}"
    image_dir = res.stdout.strip().splitlines()[-1]
    meta = json.loads(Path(image_dir, "image.json").read_text(encoding="utf-8"))
    _say(
        f"guest image {image_dir} (key {meta['key']}, built in {meta['timings_s']['total']} s; this run {TIMINGS['image_build_or_cache_s']} s)"
    )
    return image_dir


class Server:
    def __init__(self, proc: subprocess.Popen[bytes], conn: dict[str, t.Any], state_dir: Path, log: Path) -> None:
        self.proc, self.conn, self.state_dir, self.log = proc, conn, state_dir, log
        self.admin = PvesimAdmin(conn)
        user, name = conn["tokens"]["full"]["id"].split("!")
        self.prox = ProxmoxAPI(
            conn["host"],
            port=conn["port"],
            user=user,
            token_name=name,
            token_value=conn["tokens"]["full"]["secret"],
            verify_ssl=conn["ca_file"],
            timeout=60,
        )
        self.session = requests.Session()
        self.session.headers["Authorization"] = (
            f"PVEAPIToken={conn['tokens']['full']['id']}={conn['tokens']['full']['secret']}"
        )

    def raw(self, method: str, path: str, **kw: t.Any) -> requests.Response:
        return self.session.request(method, self.conn["url"] + path, verify=self.conn["ca_file"], timeout=90, **kw)

    def wait_task(self, upid: str, timeout: float = 120) -> dict[str, t.Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.prox.nodes(NODE).tasks(upid).status.get()
            if st["status"] == "stopped":
                return dict(st)
            time.sleep(0.2)
        raise AssertionError(f"task {upid} did not finish")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode)


def _start_server(state_dir: Path, image_dir: str) -> Server:
    state_dir.mkdir(parents=True, exist_ok=True)
    log = state_dir / "pvesim.log"
    conn_file = state_dir / "connection.json"
    with open(log, "ab") as err:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "pvesim",
                "serve",
                "--port",
                "0",
                "--state-dir",
                str(state_dir),
                "--speed",
                "50",
                "--guests",
                "real",
                "--guest-image",
                image_dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if conn_file.exists():
            return Server(proc, json.loads(conn_file.read_text(encoding="utf-8")), state_dir, log)
        if proc.poll() is not None:
            raise AssertionError(f"pvesim exited with {proc.returncode}: {log.read_text(errors='replace')}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("pvesim did not write connection.json")


def _qemu_pids(state_dir: Path) -> list[int]:
    res = subprocess.run(["pgrep", "-f", f"qemu-system.*{state_dir}"], capture_output=True, text=True, check=False)
    return [int(p) for p in res.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def _clone_and_configure(srv: Server, pubkey: str) -> None:
    upid = srv.prox.nodes(NODE).qemu(9000).clone.post(newid=VMID, name=f"rg-{VMID}", full=1)
    assert srv.wait_task(upid)["exitstatus"] == "OK"
    # the collection's attested-default-user configuration: no ciuser, exact keys, DHCP, ciupgrade 0
    srv.prox.nodes(NODE).qemu(VMID).config.put(
        sshkeys=urllib.parse.quote(pubkey + "\n", safe=""), ipconfig0="ip=dhcp", ciupgrade=0, delete="cipassword"
    )
    srv.prox.nodes(NODE).qemu(VMID).cloudinit.put()


def _agent(srv: Server, method: str, cmd: str, **params: t.Any) -> tuple[int, t.Any]:
    path = f"/nodes/{NODE}/qemu/{VMID}/agent/{cmd}"
    resp = srv.raw(method, path, params=params) if method == "GET" else srv.raw(method, path, data=params)
    body = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else {}
    return resp.status_code, (body.get("data") if resp.status_code == 200 else resp.reason)


def _exec(srv: Server, argv: list[str], timeout: float = 300) -> dict[str, t.Any]:
    code, data = _agent(srv, "POST", "exec", command=argv)
    assert code == 200, (argv, code, data)
    pid = data["pid"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, status = _agent(srv, "GET", "exec-status", pid=pid)
        assert code == 200, (argv, code, status)
        if status["exited"]:
            return dict(status)
        time.sleep(1)
    raise AssertionError(f"{argv} did not finish in {timeout} s")


@pytest.mark.slow
@pytest.mark.realguest
def test_real_guest_end_to_end(guest_image: str, tmp_path: Path) -> None:  # pylint: disable=redefined-outer-name,too-many-locals,too-many-statements
    key = tmp_path / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "realguest-test", "-f", str(key)], check=True)
    pubkey = key.with_suffix(".pub").read_text(encoding="utf-8").strip()
    state = tmp_path / "state"
    srv = _start_server(state, guest_image)
    qemu_pid = None
    try:
        _clone_and_configure(srv, pubkey)
        dump = {
            part: srv.raw("GET", f"/nodes/{NODE}/qemu/{VMID}/cloudinit/dump", params={"type": part}).json()["data"]
            for part in ("user", "network", "meta")
        }
        assert "user: " not in dump["user"] and "package_upgrade" not in dump["user"]

        t_start = time.monotonic()
        assert srv.wait_task(srv.prox.nodes(NODE).qemu(VMID).status.start.post())["exitstatus"] == "OK"
        info = srv.admin.vm(VMID)
        qemu_pid, port, accel = info["qemu_pid"], info["ssh_forward_port"], info["accel"]
        _say(f"VM {VMID}: QEMU pid {qemu_pid}, accel {accel.upper()}, ssh forward 127.0.0.1:{port}")
        assert info["guest_backend"] == "real" and accel in ("kvm", "tcg") and port > 0 and _alive(qemu_pid)
        # the seed ISO holds exactly the dump's bytes
        iso = subprocess.run(
            ["isoinfo", "-R", "-i", info["seed_iso"], "-x", "/user-data"], capture_output=True, check=False
        )
        if iso.returncode == 0 and iso.stdout:
            assert iso.stdout.decode() == dump["user"]

        # 1. the agent comes up (HTTP 500 "QEMU guest agent is not running" until then)
        saw_not_running = False
        deadline = time.monotonic() + 600
        while True:
            code, data = _agent(srv, "POST", "ping")
            if code == 200:
                assert data == {"result": {}}
                break
            assert code == 500 and data == "QEMU guest agent is not running", (code, data)
            saw_not_running = True
            assert time.monotonic() < deadline, "agent did not come up in 600 s"
            time.sleep(2)
        TIMINGS["boot_to_agent_s"] = round(time.monotonic() - t_start, 1)
        assert saw_not_running
        _say(f"agent ping after {TIMINGS['boot_to_agent_s']} s")

        # 2. the real DHCP address on net0's MAC
        mac = srv.prox.nodes(NODE).qemu(VMID).config.get()["net0"].split(",")[0].split("=")[1].lower()
        deadline = time.monotonic() + 300
        ipv4 = None
        while ipv4 is None:
            code, data = _agent(srv, "GET", "network-get-interfaces")
            assert code == 200, data
            nics = {n.get("hardware-address"): n for n in data["result"]}
            assert "00:00:00:00:00:00" in nics and mac in nics, nics
            ipv4 = next(
                (a["ip-address"] for a in nics[mac].get("ip-addresses", []) if a["ip-address-type"] == "ipv4"), None
            )
            if ipv4 is None:
                assert time.monotonic() < deadline, "no IPv4 lease"
                time.sleep(2)
        assert ipv4 == "10.0.2.15" and nics[mac]["name"] == "eth0"
        TIMINGS["boot_to_dhcp_s"] = round(time.monotonic() - t_start, 1)

        # 3. cloud-init finishes (status --wait through the agent)
        while True:
            st = _exec(srv, ["cloud-init", "status", "--wait"], timeout=600)
            if "status: done" in st.get("out-data", "") or st.get("exitcode") not in (0, None):
                break
        TIMINGS["boot_to_cloudinit_done_s"] = round(time.monotonic() - t_start, 1)
        assert st["exitcode"] == 0 and st["out-data"].rstrip().endswith("status: done"), st
        _say(f"cloud-init done after {TIMINGS['boot_to_cloudinit_done_s']} s")
        long_status = _exec(srv, ["cloud-init", "status", "--long"])
        assert "DataSourceNoCloud" in long_status["out-data"], long_status

        # 4. real cloud-init consumed the exact seed: raw user-data, and the instance-id (sha1 of user + network)
        user_txt = _agent(srv, "GET", "file-read", file="/var/lib/cloud/instance/user-data.txt")
        assert user_txt[0] == 200 and user_txt[1]["content"] == dump["user"], user_txt
        iid = _agent(srv, "GET", "file-read", file="/var/lib/cloud/data/instance-id")[1]["content"].strip()
        assert f"instance-id: {iid}\n" == dump["meta"]
        missing = _agent(srv, "GET", "file-read", file="/nonexistent")
        assert missing[0] == 500 and "No such file or directory" in str(missing[1]), missing
        partial = _agent(srv, "GET", "file-read", file="/etc/hosts", count=5)[1]
        assert partial["bytes-read"] == 5 and partial["truncated"] == 1
        failing = _exec(srv, ["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (failing["exitcode"], failing["out-data"], failing["err-data"]) == (3, "out\n", "err\n")

        # 5. the real SSH host keys, read through the agent
        known_hosts = tmp_path / "known_hosts"
        lines = []
        for ktype in ("ed25519", "ecdsa", "rsa"):
            code, data = _agent(srv, "GET", "file-read", file=f"/etc/ssh/ssh_host_{ktype}_key.pub")
            assert code == 200, data
            fields = data["content"].split()
            lines.append(f"[127.0.0.1]:{port} {fields[0]} {fields[1]}\n")
        known_hosts.write_text("".join(lines), encoding="utf-8")

        # 6. SSH in through the loopback forward with strict host key checking, as the image's default user
        def ssh(known: Path, *extra: str) -> list[str]:
            # ssh keeps the first value of an option: build each command line afresh
            return [
                "ssh",
                "-p",
                str(port),
                "-i",
                str(key),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                f"UserKnownHostsFile={known}",
                "-o",
                "GlobalKnownHostsFile=/dev/null",
                "-o",
                "ConnectTimeout=20",
                *extra,
                "debian@127.0.0.1",
            ]

        deadline = time.monotonic() + 120
        while True:
            res = subprocess.run(
                [*ssh(known_hosts), "id -un; hostname; sudo -n true && echo sudo-ok"],
                capture_output=True,
                text=True,
                check=False,
                timeout=120,
            )
            if res.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(3)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == ["debian", f"rg-{VMID}", "sudo-ok"], res.stdout
        TIMINGS["boot_to_ssh_s"] = round(time.monotonic() - t_start, 1)
        # a wrong host key is refused (strict checking is really in force)
        bad = tmp_path / "bad_known_hosts"
        bad.write_text(f"[127.0.0.1]:{port} {pubkey.split()[0]} {pubkey.split()[1]}\n", encoding="utf-8")
        res = subprocess.run(
            [*ssh(bad, "-o", "HostKeyAlgorithms=ssh-ed25519"), "true"],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert res.returncode == 255 and "HOST IDENTIFICATION HAS CHANGED" in res.stderr, res.stderr

        # 7. stop: QEMU ends and nothing is left behind
        t_stop = time.monotonic()
        assert srv.wait_task(srv.prox.nodes(NODE).qemu(VMID).status.stop.post())["exitstatus"] == "OK"
        TIMINGS["stop_s"] = round(time.monotonic() - t_stop, 1)
        assert _wait_gone(qemu_pid, 15), f"QEMU {qemu_pid} survived status/stop"
        assert _qemu_pids(state) == []
        assert srv.admin.vm(VMID)["status"] == "stopped"
        code, data = _agent(srv, "POST", "ping")
        assert code == 500 and data == f"VM {VMID} is not running"
    finally:
        srv.stop()
        _say(f"timings: {json.dumps(TIMINGS)}")
        (tmp_path / "realguest-timings.json").write_text(json.dumps(TIMINGS, indent=1), encoding="utf-8")
        leftovers = _qemu_pids(state)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
    assert leftovers == []
    assert qemu_pid is None or not _alive(qemu_pid)


@pytest.mark.slow
@pytest.mark.realguest
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_simulator_exit_kills_running_guest(guest_image: str, tmp_path: Path, sig: int) -> None:  # pylint: disable=redefined-outer-name
    """SIGTERM stops every QEMU; even SIGKILL does not leave one behind (PR_SET_PDEATHSIG)."""
    state = tmp_path / "state"
    srv = _start_server(state, guest_image)
    try:
        _clone_and_configure(
            srv, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBnl0JvsLnIQpRXAVDdvXQ/gs2+M8Hzz5mpMhH2sTuKP test"
        )
        assert srv.wait_task(srv.prox.nodes(NODE).qemu(VMID).status.start.post())["exitstatus"] == "OK"
        qemu_pid = srv.admin.vm(VMID)["qemu_pid"]
        assert _alive(qemu_pid) and _qemu_pids(state) == [qemu_pid]
        time.sleep(2)  # let the guest get going
        rc = srv.stop(sig)
        if sig == signal.SIGTERM:
            assert rc == 0, srv.log.read_text(errors="replace")
        assert _wait_gone(qemu_pid, 20), f"QEMU {qemu_pid} survived the simulator's {signal.Signals(sig).name}"
        assert _qemu_pids(state) == []
    finally:
        srv.stop(signal.SIGKILL)
        for pid in _qemu_pids(state):
            os.kill(pid, signal.SIGKILL)


def test_guests_real_needs_an_image(tmp_path: Path) -> None:
    """Fails at start with a clear message (no QEMU needed): missing option, missing directory."""
    base = [
        sys.executable,
        "-m",
        "pvesim",
        "serve",
        "--port",
        "0",
        "--state-dir",
        str(tmp_path / "s"),
        "--guests",
        "real",
    ]
    res = subprocess.run(base, capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode == 2 and "--guests real needs --guest-image DIR" in res.stderr
    res = subprocess.run(
        [*base, "--guest-image", str(tmp_path / "nope")], capture_output=True, text=True, check=False, timeout=60
    )
    assert res.returncode == 2 and "has no image.json" in res.stderr and "build.sh" in res.stderr, res.stderr
    assert not (tmp_path / "s" / "connection.json").exists()


def test_accel_detection_never_trusts_dev_kvm_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from pvesim import qemu_launch  # pylint: disable=import-outside-toplevel

    accel, reason = qemu_launch.detect_accel("auto")
    has_module = any(os.path.isdir(f"/sys/module/{m}") for m in ("kvm_intel", "kvm_amd"))
    assert accel == ("kvm" if has_module and os.access("/dev/kvm", os.R_OK | os.W_OK) else "tcg"), reason
    assert qemu_launch.detect_accel("tcg")[0] == "tcg"
    monkeypatch.setattr(qemu_launch.os.path, "isdir", lambda p: False)
    assert qemu_launch.detect_accel("auto")[0] == "tcg"


def test_startup_sweep_kills_only_stale_qemu_of_this_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new backend kills what a leftover pidfile names, but only if its command line mentions the state dir."""
    from pvesim import realguest  # pylint: disable=import-outside-toplevel

    image = tmp_path / "image"
    image.mkdir()
    for name in ("disk.qcow2", "vmlinuz", "initrd.img"):
        (image / name).write_bytes(b"")
    (image / "image.json").write_text(
        json.dumps({"key": "test", "disk": "disk.qcow2", "kernel": "vmlinuz", "initrd": "initrd.img"}), encoding="utf-8"
    )
    state = tmp_path / "state"
    monkeypatch.setattr(realguest.shutil, "which", lambda name: f"/usr/bin/{name}")
    stale = subprocess.Popen(["sh", "-c", "sleep 300", str(state)])  # pylint: disable=consider-using-with
    other = subprocess.Popen(["sh", "-c", "sleep 300", "unrelated"])  # pylint: disable=consider-using-with
    try:
        for vmid, proc in ((101, stale), (102, other)):
            (state / "guests" / f"vm-{vmid}").mkdir(parents=True)
            (state / "guests" / f"vm-{vmid}" / "qemu.pid").write_text(f"{proc.pid}\n", encoding="utf-8")
        backend = realguest.RealGuestBackend(str(image), str(state), accel="tcg")
        assert stale.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None
        assert not (state / "guests" / "vm-101" / "qemu.pid").exists()
        backend.stop_all()
    finally:
        for proc in (stale, other):
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def test_a_static_ipconfig0_shapes_the_user_mode_network() -> None:
    """The template build's preparation boot: the address, gateway and resolver cloud-init configures must work in slirp."""
    from pvesim import qemu_launch  # pylint: disable=import-outside-toplevel

    assert qemu_launch.slirp_network({}) == ([], "10.0.2.15")
    assert qemu_launch.slirp_network({"ipconfig0": "ip=dhcp"}) == ([], "10.0.2.15")
    # the node's resolver (pvesim: 10.10.0.1) inside the build network: slirp's DNS forwarder answers there
    assert qemu_launch.slirp_network({"ipconfig0": "ip=10.10.0.50/24,gw=10.10.0.254"}) == (
        ["net=10.10.0.0/24", "host=10.10.0.254", "dns=10.10.0.1"],
        "10.10.0.50",
    )
    # the acceptance's static run (issue 34): an address in slirp's own subnet, with its gateway and DNS forwarder;
    # SSH is forwarded to the static address, not to 10.0.2.15 (slirp's DHCP address, which this guest does not take)
    assert qemu_launch.slirp_network(
        {"ipconfig0": "ip=10.0.2.50/24,gw=10.0.2.2", "nameserver": "10.0.2.3", "searchdomain": "acceptance.test"}
    ) == (["net=10.0.2.0/24", "host=10.0.2.2", "dns=10.0.2.3"], "10.0.2.50")
    # a resolver outside the network, or a gateway outside it, keeps slirp's default there
    assert qemu_launch.slirp_network({"ipconfig0": "ip=192.0.2.50/24,gw=192.0.2.1"}) == (
        ["net=192.0.2.0/24", "host=192.0.2.1"],
        "192.0.2.50",
    )
    assert qemu_launch.slirp_network({"ipconfig0": "ip=192.0.2.50/24,gw=198.51.100.1", "nameserver": "192.0.2.53"}) == (
        ["net=192.0.2.0/24", "dns=192.0.2.53"],
        "192.0.2.50",
    )
    assert (
        qemu_launch.boot_volume(
            {"ide2": "local-lvm:vm-1-cloudinit,media=cdrom", "scsi0": "local-lvm:vm-1-disk-0,size=8G"}
        )
        == "local-lvm:vm-1-disk-0"
    )


def test_a_vm_boots_the_image_its_disk_was_imported_from(tmp_path: Path) -> None:
    """guestlink hands the imported file to the backend, then the volume's content is the guest's own disk (no QEMU needed)."""
    import types  # pylint: disable=import-outside-toplevel

    from pvesim import guestlink, imagebuild  # pylint: disable=import-outside-toplevel

    started: list[tuple[int, str | None]] = []

    class Backend:
        def start(
            self, vmid: int, config: t.Mapping[str, str], seed: t.Mapping[str, str], disk_source: str | None = None
        ) -> t.Any:
            started.append((vmid, disk_source))
            return types.SimpleNamespace(
                disk=str(tmp_path / f"vm-{vmid}.qcow2"),
                faults=types.SimpleNamespace(),
                timing=types.SimpleNamespace(),
                stop=lambda graceful=False: None,
            )

    sim = types.SimpleNamespace(guest_backend=Backend(), guest_knobs={}, state=types.SimpleNamespace(node="pve-test"))
    imagebuild.set_image_file(sim, "local:import/debian.qcow2", "/images/debian.qcow2")  # type: ignore[arg-type]
    imagebuild.clone_image_file(sim, "local:import/debian.qcow2", "local-lvm:vm-9001-disk-1")  # type: ignore[arg-type]
    config = {
        "scsi0": "local-lvm:vm-9001-disk-1,size=8G",
        "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
        "ipconfig0": "ip=10.10.0.50/24,gw=10.10.0.254",
        "ide2": "local-lvm:vm-9001-cloudinit,media=cdrom",
    }
    guestlink.create_guest(sim, types.SimpleNamespace(vmid=9001, config=config, guest=None))
    assert started == [(9001, "/images/debian.qcow2")]
    assert imagebuild.image_file(sim, "local-lvm:vm-9001-disk-1") == str(tmp_path / "vm-9001.qcow2")  # type: ignore[arg-type]
    # a clone of it starts from what the guest left on that disk; a VM from the demo template boots the image's own disk
    imagebuild.clone_image_file(sim, "local-lvm:vm-9001-disk-1", "local-lvm:vm-201-disk-0")  # type: ignore[arg-type]
    guestlink.create_guest(
        sim, types.SimpleNamespace(vmid=201, config=dict(config, scsi0="local-lvm:vm-201-disk-0,size=10G"), guest=None)
    )
    guestlink.create_guest(
        sim, types.SimpleNamespace(vmid=202, config=dict(config, scsi0="local-lvm:vm-202-disk-0,size=10G"), guest=None)
    )
    assert started[1:] == [(201, str(tmp_path / "vm-9001.qcow2")), (202, None)]
