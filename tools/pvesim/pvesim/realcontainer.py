# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The optional real-container backend: ``python -m pvesim serve --containers real --container-rootfs DIR``.

``POST /nodes/{node}/lxc`` creates a real LXC container (Debian's ``lxc``) from the root file system
``tools/container-rootfs/build.sh`` makes (Debian 12 minbase, openssh-server, python3, python3-apt);
``status/start``, ``status/shutdown``, ``status/stop`` and ``DELETE`` start, stop and destroy it. The
API behaviour, schema validation and journal-visible records stay those of :mod:`pvesim.lxc`; this
module only adds the real process behind them.

What the create task does to the tree, as ``pct create`` does (pve-container ``PVE::LXC::Create``,
``PVE::LXC::Setup``): new SSH host keys, the ``ssh-public-keys`` in root's ``authorized_keys``, the
hostname. The host's ``/etc/resolv.conf`` is copied in, so apt in the container resolves Debian's mirror.

Networking, loopback only: the container shares the host's network namespace (``lxc.net.0.type =
none``), and its init is sshd listening on ``127.0.0.1:<ssh_port>`` only (``ssh_port`` =
``ssh_port_base + vmid % 10000``, default base 20000, below Linux's ephemeral port range). The
``interfaces`` endpoint still reports ``eth0`` with the recorded ``hwaddr`` and the address a Proxmox
bridge would hand out (as the simulated containers do, :func:`pvesim.lxc._address`), but only once that
sshd answers with its banner: readiness observes a real daemon. The SSH transport to it is the loopback
port; the ``provision`` role reaches it with ``provision_container_ssh_host``/``_port`` and keeps the
reported address as the host key alias (docs/containers.md).

Not Proxmox's: the container is privileged (no ``lxc.idmap``; ``unprivileged: 1`` stays in the config
the API shows); ``rootfs`` size, ``cores``, ``memory`` are not enforced; snapshots stay records of the
simulator (the tree is not copied).

Processes: ``lxc-start -F`` runs as a child of one long-lived spawner thread with ``PR_SET_PDEATHSIG``
= SIGKILL (LXC sets the same on the container's init), so no container outlives the simulator; every
container is stopped on :meth:`RealContainerBackend.stop_all` (server stop, SIGTERM, ``atexit``), and a
new backend stops whatever its lxcpath (``<state-dir>/lxc``) still runs.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import typing as t

from .qemu_launch import _set_pdeathsig

__all__ = ["ContainerRootfsError", "RealContainerBackend", "load_rootfs"]

LXC_TOOLS = ("lxc-start", "lxc-stop", "lxc-info", "lxc-attach", "lxc-destroy")
DEFAULT_SSH_PORT_BASE = 20000
INIT_PATH = "usr/local/sbin/vmanyware-init"


class ContainerRootfsError(Exception):
    """The root file system is missing, LXC is not installed, or a container cannot be created or started."""


def log(msg: str) -> None:
    sys.stderr.write(f"pvesim realcontainer: {msg}\n")
    sys.stderr.flush()


def load_rootfs(rootfs_dir: str) -> dict[str, t.Any]:
    """Read and check ``rootfs.json`` of a ``tools/container-rootfs/build.sh`` output directory."""
    path = os.path.abspath(rootfs_dir)
    meta_file = os.path.join(path, "rootfs.json")
    if not os.path.isfile(meta_file):
        raise ContainerRootfsError(
            f"container rootfs directory {path} has no rootfs.json; build it with tools/container-rootfs/build.sh"
        )
    with open(meta_file, encoding="utf-8") as fh:
        meta = dict(json.load(fh))
    tar = os.path.join(path, str(meta.get("tar", "rootfs.tar")))
    if not os.path.isfile(tar):
        raise ContainerRootfsError(
            f"container rootfs {path}: {tar} missing; rebuild with tools/container-rootfs/build.sh"
        )
    meta["dir"], meta["tar_path"] = path, tar
    return meta


def _run(argv: t.Sequence[str], timeout: float = 120) -> str:
    res = subprocess.run(list(argv), capture_output=True, check=False, timeout=timeout)
    if res.returncode != 0:
        raise ContainerRootfsError(
            f"{argv[0]} failed ({res.returncode}): {res.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return res.stdout.decode(errors="replace")


def _write(path: str, text: str, mode: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, mode)


class RealContainerBackend:
    """Owns every LXC container of one simulator; ``pvesim.lxc`` calls it as ``sim.container_backend``."""

    PREFIX = "ct"  # LXC names: ct<vmid> (pvesim.containerguest's VM containers: vm<vmid>)
    LABEL = "CT"  # in log lines and errors

    def __init__(
        self,
        rootfs_dir: str,
        state_dir: str,
        ssh_port_base: int = DEFAULT_SSH_PORT_BASE,
        shutdown_timeout: float = 30.0,
        start_timeout: float = 60.0,
    ) -> None:
        self.rootfs = load_rootfs(rootfs_dir)
        missing = [tool for tool in LXC_TOOLS if shutil.which(tool) is None]
        if missing:
            raise ContainerRootfsError(f"{', '.join(missing)} not found (apt-get install lxc)")
        if not os.path.isfile("/usr/share/lxc/config/common.conf"):
            raise ContainerRootfsError("/usr/share/lxc/config/common.conf not found (apt-get install lxc)")
        self.lxcpath = os.path.join(os.path.abspath(state_dir), "lxc")
        os.makedirs(self.lxcpath, exist_ok=True)
        self.ssh_port_base = ssh_port_base
        self.shutdown_timeout = shutdown_timeout
        self.start_timeout = start_timeout
        self._lock = threading.Lock()
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        # lxc-start is spawned by one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that forked exits
        self._spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pvesim-lxc-spawner")
        self.sweep_stale()
        atexit.register(self.stop_all)
        log(f"real containers from {self.rootfs['dir']} (key {self.rootfs.get('key')}), lxcpath {self.lxcpath}")

    # names and paths
    def name(self, vmid: int) -> str:
        return f"{self.PREFIX}{vmid}"

    def ct_dir(self, vmid: int) -> str:
        return os.path.join(self.lxcpath, self.name(vmid))

    def ssh_port(self, vmid: int) -> int:
        return self.ssh_port_base + vmid % 10000

    def _lxc(self, tool: str, vmid: int, *args: str) -> list[str]:
        return [tool, "-P", self.lxcpath, "-n", self.name(vmid), *args]

    def exists(self, vmid: int) -> bool:
        return os.path.isfile(os.path.join(self.ct_dir(vmid), "config"))

    def state(self, vmid: int) -> str:
        """``RUNNING``, ``STOPPED`` ... as ``lxc-info -s`` says (``STOPPED`` for an unknown container)."""
        if not self.exists(vmid):
            return "STOPPED"
        res = subprocess.run(
            self._lxc("lxc-info", vmid, "-s", "-H"), capture_output=True, text=True, check=False, timeout=30
        )
        return res.stdout.strip() or "STOPPED"

    # create
    def create(self, vmid: int, hostname: str, ssh_public_keys: str) -> None:
        """Unpack the tree, then what ``pct create`` writes into it: host keys, authorized_keys, hostname, DNS."""
        ct_dir = self.ct_dir(vmid)
        if os.path.exists(ct_dir):
            raise ContainerRootfsError(f"{self.LABEL} {vmid}: {ct_dir} already exists")
        rootfs = os.path.join(ct_dir, "rootfs")
        os.makedirs(rootfs)
        try:
            # GNU tar: several times faster than tarfile for the ~20,000 files; owners, modes and capabilities as built
            _run(
                [
                    "tar",
                    "--numeric-owner",
                    "--xattrs",
                    "--xattrs-include=*",
                    "-xpf",
                    self.rootfs["tar_path"],
                    "-C",
                    rootfs,
                ],
                timeout=600,
            )
            _run(["ssh-keygen", "-q", "-A", "-f", rootfs])  # new host keys for this container only
            ssh_dir = os.path.join(rootfs, "root", ".ssh")
            os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
            os.chmod(ssh_dir, 0o700)
            _write(
                os.path.join(ssh_dir, "authorized_keys"),
                ssh_public_keys.strip() + "\n" if ssh_public_keys.strip() else "",
                0o600,
            )
            _write(os.path.join(rootfs, "etc", "hostname"), hostname + "\n", 0o644)
            if os.path.isfile("/etc/resolv.conf"):
                shutil.copyfile("/etc/resolv.conf", os.path.join(rootfs, "etc", "resolv.conf"))
            # LXC splits lxc.init.cmd on spaces without shell quoting: a script in the tree
            _write(
                os.path.join(rootfs, INIT_PATH),
                "#!/bin/sh\n# pvesim real container: sshd on the host's loopback only (shared network namespace)\n"
                f"mkdir -p /run/sshd\nexec /usr/sbin/sshd -D -e -p {self.ssh_port(vmid)} -o ListenAddress=127.0.0.1\n",
                0o755,
            )
            _write(
                os.path.join(ct_dir, "config"),
                "\n".join(
                    [
                        "# pvesim real container (pvesim/realcontainer.py)",
                        "lxc.include = /usr/share/lxc/config/common.conf",
                        "lxc.arch = linux64",
                        f"lxc.uts.name = {hostname}",
                        f"lxc.rootfs.path = dir:{rootfs}",
                        "lxc.net.0.type = none",
                        "lxc.apparmor.profile = unconfined",
                        f"lxc.init.cmd = /{INIT_PATH}",
                        "lxc.signal.halt = SIGTERM",  # sshd as init handles SIGTERM; the default SIGPWR would be ignored
                        "lxc.console.path = none",
                        "lxc.tty.max = 0",
                        "",
                    ]
                ),
                0o644,
            )
        except BaseException:
            shutil.rmtree(ct_dir, ignore_errors=True)
            raise
        log(f"{self.LABEL} {vmid}: created {ct_dir} (sshd 127.0.0.1:{self.ssh_port(vmid)})")

    # power state
    def start(self, vmid: int) -> None:
        if not self.exists(vmid):
            raise ContainerRootfsError(f"{self.LABEL} {vmid}: no real container in {self.lxcpath}")
        log_file = os.path.join(self.ct_dir(vmid), "lxc.log")

        def spawn() -> subprocess.Popen[bytes]:
            with open(log_file, "ab") as out:
                return subprocess.Popen(
                    self._lxc("lxc-start", vmid, "-F", "-o", log_file, "-l", "INFO"),  # pylint: disable=consider-using-with
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    preexec_fn=_set_pdeathsig,
                    close_fds=True,
                )

        proc = self._spawner.submit(spawn).result()
        with self._lock:
            self._procs[vmid] = proc
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ContainerRootfsError(
                    f"{self.LABEL} {vmid}: lxc-start exited with {proc.returncode}: {self._log_tail(log_file)}"
                )
            if self.state(vmid) == "RUNNING":
                log(f"{self.LABEL} {vmid}: running (lxc-start pid {proc.pid}){self._running_note(vmid)}")
                return
            time.sleep(0.2)
        self.stop(vmid, graceful=False)
        raise ContainerRootfsError(
            f"{self.LABEL} {vmid}: not RUNNING after {self.start_timeout:.0f} s: {self._log_tail(log_file)}"
        )

    def _running_note(self, vmid: int) -> str:
        return f", sshd 127.0.0.1:{self.ssh_port(vmid)}"

    @staticmethod
    def _log_tail(path: str) -> str:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return " | ".join(line.strip() for line in fh.read().splitlines()[-6:])
        except OSError:
            return ""

    def stop(self, vmid: int, graceful: bool) -> None:
        """``status/shutdown`` (SIGTERM to init, killed after the timeout) or ``status/stop`` (killed at once)."""
        if self.exists(vmid) and self.state(vmid) != "STOPPED":
            args = ["-t", str(int(self.shutdown_timeout))] if graceful else ["-k"]
            subprocess.run(
                self._lxc("lxc-stop", vmid, *args), capture_output=True, check=False, timeout=self.shutdown_timeout + 30
            )
        with self._lock:
            proc = self._procs.pop(vmid, None)
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log(f"{self.LABEL} {vmid}: stopped ({'shutdown' if graceful else 'stop'})")

    def destroy(self, vmid: int) -> None:
        """The container is gone: stop it and remove its tree."""
        if self.exists(vmid):
            self.stop(vmid, graceful=False)
            subprocess.run(self._lxc("lxc-destroy", vmid), capture_output=True, check=False, timeout=300)
        shutil.rmtree(self.ct_dir(vmid), ignore_errors=True)

    def ssh_ready(self, vmid: int) -> bool:
        """The container's sshd accepts a connection and sends its banner."""
        if not self.exists(vmid):
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.ssh_port(vmid)), timeout=2) as sock:
                sock.settimeout(2)
                return sock.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def admin_info(self, vmid: int) -> dict[str, t.Any]:
        return {
            "container_backend": "real",
            "lxc_name": self.name(vmid),
            "lxcpath": self.lxcpath,
            "lxc_state": self.state(vmid),
            "ssh_host": "127.0.0.1",
            "ssh_forward_port": self.ssh_port(vmid),
            "rootfs": os.path.join(self.ct_dir(vmid), "rootfs"),
        }

    # lifecycle of the backend
    def vmids(self) -> list[int]:
        return sorted(
            int(name[len(self.PREFIX) :])
            for name in os.listdir(self.lxcpath)
            if name.startswith(self.PREFIX) and name[len(self.PREFIX) :].isdigit()
        )

    def sweep_stale(self) -> None:
        """Stop containers that a previous simulator on this state dir left running."""
        for vmid in self.vmids():
            if self.state(vmid) != "STOPPED":
                log(f"{self.LABEL} {vmid}: left running by an earlier simulator; stopping it")
                self.stop(vmid, graceful=False)

    def reset(self) -> None:
        """Simulator reset: every container stops and is removed."""
        for vmid in self.vmids():
            self.destroy(vmid)

    def stop_all(self) -> None:
        for vmid in self.vmids():
            try:
                self.stop(vmid, graceful=False)
            except (OSError, subprocess.SubprocessError) as exc:
                log(f"{self.LABEL} {vmid}: stop failed ({exc})")
