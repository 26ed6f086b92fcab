# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pytest plugin: ``pytest_plugins = ["pvesim.testing"]``.

Fixtures:

- ``pvesim_server`` (session): runs ``python -m pvesim serve --port 0 --state-dir <tmp> --seed demo
  --speed 50`` as a subprocess, waits for ``connection.json``, stops it with SIGTERM at the end.
  Returns the connection dict.
- ``pvesim`` (function): resets the simulator (fresh demo state, no faults, empty log) and
  returns a ``PvesimAdmin``.

``PvesimAdmin`` talks to the admin API and always verifies TLS with the simulator's CA
(``verify=ca_file`` per request: ``REQUESTS_CA_BUNDLE`` would override ``session.verify``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing as t

import pytest
import requests

DEFAULT_SPEED = 50.0


class PvesimAdmin:
    """Client of the ``/_pvesim`` admin API."""

    def __init__(self, connection: dict[str, t.Any]) -> None:
        self.connection = connection
        self.base = f"https://{connection['host']}:{connection['port']}/_pvesim"
        self.session = requests.Session()
        self.session.headers["X-Pvesim-Admin"] = connection["admin_token"]

    def _call(self, method: str, path: str, body: t.Any = None) -> t.Any:
        resp = self.session.request(method, self.base + path, json=body, verify=self.connection["ca_file"], timeout=30)
        if resp.status_code != 200:
            raise RuntimeError(f"pvesim admin {method} {path}: HTTP {resp.status_code} {resp.text}")
        return resp.json()["data"]

    # state
    def reset(self, seed: str = "demo") -> None:
        self._call("POST", "/reset", {"seed": seed})

    def requests(self, method: str | None = None, path_regex: str | None = None) -> list[dict[str, t.Any]]:
        entries = self._call("GET", "/requests")
        if method:
            entries = [e for e in entries if e["method"] == method.upper()]
        if path_regex:
            rx = re.compile(path_regex)
            entries = [e for e in entries if rx.search(e["path"])]
        return entries

    def clear_requests(self) -> None:
        self._call("DELETE", "/requests")

    def timings(self) -> dict[str, t.Any]:
        """The effective time model: ``{"tasks": {type: s}, "guest": {GuestTiming field: s}}``."""
        return dict(self._call("GET", "/timings"))

    def set_timings(
        self, tasks: dict[str, float] | None = None, guest: dict[str, float] | None = None
    ) -> dict[str, t.Any]:
        """Change task durations / default guest timing until the next reset (simulated seconds)."""
        return dict(self._call("PUT", "/timings", {"tasks": tasks or {}, "guest": guest or {}}))

    def tasks(self) -> list[dict[str, t.Any]]:
        """Every task, oldest first: upid, type, id, status, exitstatus, created/ended (real epoch, float)."""
        return list(self._call("GET", "/tasks"))

    def storage_locks(self) -> dict[str, t.Any]:
        """Per-storage lock statistics (``pvesim.storagelock``): inflight, maxInflight, acquired, timeouts, maxWait, history."""
        return dict(self._call("GET", "/storage-locks"))

    def set_storage_lock(self, enabled: bool) -> dict[str, t.Any]:
        """Switch the storage lock model on or off until the next reset."""
        return dict(self._call("PUT", "/storage-locks", {"enabled": enabled}))

    def schema_violations(self) -> list[dict[str, t.Any]]:
        return [e for e in self.requests() if e.get("schema_errors")]

    def add_fault(
        self,
        method: str = "*",
        path: str = ".*",
        action: str = "http_error",
        occurrence: int | str = "every",
        **params: t.Any,
    ) -> str:
        spec = {"method": method, "path": path, "occurrence": occurrence, "action": action, **params}
        return str(self._call("POST", "/faults", spec)["id"])

    def faults(self) -> list[dict[str, t.Any]]:
        return list(self._call("GET", "/faults"))

    def clear_faults(self) -> None:
        self._call("DELETE", "/faults")

    def set_speed(self, speed: float) -> None:
        self._call("POST", "/clock", {"speed": speed})

    def set_vm_config(
        self,
        vmid: int,
        set: dict[str, t.Any] | None = None,  # pylint: disable=redefined-builtin
        delete: list[str] | None = None,
    ) -> dict[str, t.Any]:
        return dict(self._call("PUT", f"/vms/{vmid}/config", {"set": set or {}, "delete": delete or []}))

    def vm(self, vmid: int) -> dict[str, t.Any]:
        return dict(self._call("GET", f"/vms/{vmid}"))

    def delete_vm(self, vmid: int) -> None:
        self._call("DELETE", f"/vms/{vmid}")

    def set_storage(self, storage: str, **fields: t.Any) -> dict[str, t.Any]:
        return dict(self._call("PUT", f"/storage/{storage}", fields))

    def root_call(self, method: str, path: str, **params: t.Any) -> t.Any:
        """One API call as root@pam (ticket and CSRF token), for what the test tokens may not do (``PUT /cluster/options``)."""
        conn = self.connection
        login = requests.post(
            conn["url"] + "/access/ticket",
            data={"username": "root@pam", "password": conn["root_password"]},
            verify=conn["ca_file"],
            timeout=30,
        )
        login.raise_for_status()
        ticket = login.json()["data"]
        resp = requests.request(
            method,
            conn["url"] + path,
            data=params if method != "GET" else None,
            params=params if method == "GET" else None,
            cookies={"PVEAuthCookie": ticket["ticket"]},
            headers={"CSRFPreventionToken": ticket["CSRFPreventionToken"]},
            verify=conn["ca_file"],
            timeout=30,
        )
        if resp.status_code != 200:
            raise RuntimeError(f"pvesim {method} {path} as root: HTTP {resp.status_code} {resp.reason}")
        return resp.json()["data"]

    def add_container(self, vmid: int, name: str | None = None, template: bool = False) -> dict[str, t.Any]:
        """An LXC container (or container template) holding ``vmid``: listed by /cluster/resources, counted by nextid."""
        body: dict[str, t.Any] = {"template": template}
        if name is not None:
            body["name"] = name
        return dict(self._call("PUT", f"/containers/{vmid}", body))

    def set_container_config(
        self,
        vmid: int,
        set: dict[str, t.Any] | None = None,  # pylint: disable=redefined-builtin
        delete: list[str] | None = None,
    ) -> dict[str, t.Any]:
        """Change a container's config by hand (``protection``, ``lock``, ``template``, ``description``): what an operator might do."""
        return dict(self._call("PUT", f"/containers/{vmid}/config", {"set": set or {}, "delete": delete or []}))

    def delete_container(self, vmid: int) -> None:
        self._call("DELETE", f"/containers/{vmid}")

    def delete_bridge(self, name: str) -> None:
        self._call("DELETE", f"/bridges/{name}")

    def set_node_online(self, node: str, online: bool) -> dict[str, t.Any]:
        """Take a cluster member offline (requests for it then fail like a failed proxy connection) or back online."""
        return dict(self._call("PUT", f"/nodes/{node}", {"online": online}))

    def set_node_maintenance(self, node: str, maintenance: bool) -> dict[str, t.Any]:
        """Put a cluster member into HA maintenance mode (``ha-manager crm-command node-maintenance``) or take it out."""
        return dict(self._call("PUT", f"/ha/nodes/{node}", {"maintenance": maintenance}))

    def set_token(
        self, tokenid: str, expire: int | None = None, privileges: dict[str, list[str]] | None = None, **fields: t.Any
    ) -> dict[str, t.Any]:
        body: dict[str, t.Any] = dict(fields)
        if expire is not None:
            body["expire"] = expire
        if privileges is not None:
            body["privileges"] = privileges
        return dict(self._call("PUT", f"/tokens/{tokenid}", body))

    def set_guest(self, vmid: int, **knobs: t.Any) -> dict[str, t.Any]:
        return dict(self._call("PUT", f"/vms/{vmid}/guest", knobs))


# tool -> Debian package, for the real-guest tests (pvesim --guests real and the acceptance test).
REALGUEST_TOOLS = {
    "qemu-system-x86_64": "qemu-system-x86",
    "qemu-img": "qemu-utils",
    "genisoimage": "genisoimage",
    "mmdebstrap": "mmdebstrap",
    "mkfs.ext4": "e2fsprogs",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}


def apt_install_missing(tools: t.Mapping[str, str], say: t.Callable[[str], None]) -> None:
    """Install the Debian packages of the ``tools`` (tool -> package) not on PATH, with apt (root only)."""
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    with _apt_lock():
        # looked up under the lock: the other acceptance lane may have installed them meanwhile
        missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool) is None})
        if not missing:
            return
        say(f"installing {' '.join(missing)}")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
        if subprocess.run(install, env=env, check=False, stdout=subprocess.DEVNULL, timeout=900).returncode != 0:
            # a fresh machine may have no package lists yet
            subprocess.run(["apt-get", "update", "-q"], env=env, check=False, stdout=subprocess.DEVNULL, timeout=600)
            subprocess.run(install, env=env, check=False, stdout=subprocess.DEVNULL, timeout=900)


@contextlib.contextmanager
def _apt_lock() -> t.Iterator[None]:
    # `make test` runs the real-guest and the real-container acceptance in two lanes at once, and apt-get fails
    # while another apt-get holds its lock: the installers take turns on this lock file.
    with open(os.path.join(tempfile.gettempdir(), "vmanyware-apt.lock"), "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure_realguest_tools(say: t.Callable[[str], None]) -> None:
    """Install QEMU, the image tools and ssh with apt when missing (root only); skip only if QEMU cannot run at all."""
    apt_install_missing(REALGUEST_TOOLS, say)
    reason = None
    if shutil.which("qemu-system-x86_64") is None:
        reason = "qemu-system-x86_64 is not installed and could not be installed (apt-get install qemu-system-x86)"
    else:
        probe = subprocess.run(
            ["qemu-system-x86_64", "--version"], capture_output=True, text=True, check=False, timeout=60
        )
        if probe.returncode != 0:
            reason = f"qemu-system-x86_64 cannot run here: {(probe.stderr or probe.stdout).strip()[:300]}"
    if reason is not None:
        say(f"SKIP: {reason}")
        pytest.skip(reason)
    for tool, package in REALGUEST_TOOLS.items():
        assert shutil.which(tool), f"{tool} is missing (apt-get install {package})"


# tool -> Debian package, for the real-container tests (pvesim --containers real and the container acceptance).
REALCONTAINER_TOOLS = {
    "lxc-start": "lxc",
    "lxc-attach": "lxc",
    "mmdebstrap": "mmdebstrap",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "ssh-keyscan": "openssh-client",
    "sshd": "openssh-server",  # the node SSH endpoints (pvesim.nodessh)
}


def ensure_realcontainer_tools(say: t.Callable[[str], None]) -> None:
    """Install LXC, mmdebstrap and ssh with apt when missing; skip (reason printed) only where no privileged container can run."""
    apt_install_missing(REALCONTAINER_TOOLS, say)
    reason = None
    if os.geteuid() != 0:
        reason = "real containers need root (privileged LXC containers, mmdebstrap --mode=root)"
    elif shutil.which("lxc-start") is None:
        reason = "lxc-start is not installed and could not be installed (apt-get install lxc)"
    if reason is not None:
        say(f"SKIP: {reason}")
        pytest.skip(reason)
    for tool, package in REALCONTAINER_TOOLS.items():
        assert shutil.which(tool), f"{tool} is missing (apt-get install {package})"


def build_container_rootfs(repo: str, say: t.Callable[[str], None]) -> tuple[str, float]:
    """``tools/container-rootfs/build.sh`` (a cache hit when built before): (its output directory, seconds it took)."""
    t0 = time.monotonic()
    res = subprocess.run(
        [os.path.join(repo, "tools", "container-rootfs", "build.sh")],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    seconds = round(time.monotonic() - t0, 1)
    assert res.returncode == 0, f"tools/container-rootfs/build.sh failed:\n{res.stderr[-4000:]}"
    rootfs = res.stdout.strip().splitlines()[-1]
    say(f"container rootfs {rootfs} ({'cache hit' if seconds < 5 else 'built'} in {seconds} s)")
    return rootfs, seconds


def api_task(conn: dict[str, t.Any], path: str, node: str = "pve-test", **data: t.Any) -> None:
    """POST ``/nodes/{node}{path}`` as root@pam and wait for its task to end OK."""
    api = f"https://{conn['host']}:{conn['port']}/api2/json"
    base = f"{api}/nodes/{node}"
    login = requests.post(
        f"{api}/access/ticket",
        data={"username": "root@pam", "password": conn["root_password"]},
        verify=conn["ca_file"],
        timeout=60,
    ).json()["data"]
    headers = {"Cookie": f"PVEAuthCookie={login['ticket']}", "CSRFPreventionToken": login["CSRFPreventionToken"]}
    resp = requests.post(base + path, data=data, headers=headers, verify=conn["ca_file"], timeout=60)
    assert resp.status_code == 200, f"POST {path}: {resp.status_code} {resp.text}"
    upid, deadline = resp.json()["data"], time.monotonic() + 300
    while time.monotonic() < deadline:
        reply = requests.get(f"{base}/tasks/{upid}/status", headers=headers, verify=conn["ca_file"], timeout=60)
        status = reply.json()["data"]
        if status["status"] == "stopped":
            assert status["exitstatus"] == "OK", f"{path}: {status}"
            return
        time.sleep(0.3)
    raise AssertionError(f"task {upid} did not finish")


def api_container(conn: dict[str, t.Any], vmid: int, hostname: str, start: bool = True, node: str = "pve-test") -> None:
    """Create container ``vmid`` from the simulator's appliance index through the API (as root@pam), and start it."""
    template = "debian-12-standard_12.12-1_amd64.tar.zst"
    api_task(conn, "/aplinfo", node, storage="local", template=template)
    api_task(
        conn, "/lxc", node, vmid=vmid, ostemplate=f"local:vztmpl/{template}", hostname=hostname, rootfs="local-lvm:4"
    )
    if start:
        api_task(conn, f"/lxc/{vmid}/status/start", node)


def lxc_cleanup(lxcpath: str) -> list[str]:
    """Stop (kill) and destroy every container under ``lxcpath``; the names found (tests call it in ``finally``)."""
    names = sorted(os.listdir(lxcpath)) if os.path.isdir(lxcpath) else []
    for name in names:
        subprocess.run(["lxc-stop", "-P", lxcpath, "-n", name, "-k"], capture_output=True, check=False, timeout=60)
        subprocess.run(["lxc-destroy", "-P", lxcpath, "-n", name], capture_output=True, check=False, timeout=300)
    return names


def start_server(
    state_dir: str, speed: float = DEFAULT_SPEED, extra: t.Sequence[str] = (), timeout: float = 20.0
) -> tuple[subprocess.Popen[bytes], dict[str, t.Any]]:
    """Start ``python -m pvesim serve`` and wait for its ``connection.json``."""
    conn_file = os.path.join(state_dir, "connection.json")
    if os.path.exists(conn_file):
        os.unlink(conn_file)
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [
            sys.executable,
            "-m",
            "pvesim",
            "serve",
            "--port",
            "0",
            "--state-dir",
            state_dir,
            "--seed",
            "demo",
            "--speed",
            str(speed),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(conn_file):
            with open(conn_file, encoding="utf-8") as fh:
                return proc, json.load(fh)
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"pvesim exited with {proc.returncode}: {err}")
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError("pvesim did not write connection.json in time")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr:
        proc.stderr.close()


@pytest.fixture(scope="session")
def pvesim_server() -> t.Iterator[dict[str, t.Any]]:
    with tempfile.TemporaryDirectory(prefix="pvesim-") as tmp:
        proc, conn = start_server(tmp)
        try:
            yield conn
        finally:
            stop_server(proc)


@pytest.fixture()
def pvesim(pvesim_server: dict[str, t.Any]) -> PvesimAdmin:  # pylint: disable=redefined-outer-name
    admin = PvesimAdmin(pvesim_server)
    admin.reset()
    admin.set_speed(DEFAULT_SPEED)
    return admin
