# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""VM guests whose agent commands really run: ``python -m pvesim serve --guests container --container-rootfs DIR``.

Every started VM gets a privileged LXC container (the machinery of :mod:`pvesim.realcontainer`: the Debian 12 tree
of ``tools/container-rootfs/build.sh``, ``lxc-start -F`` under ``PR_SET_PDEATHSIG``, ``stop_all``), and the agent
endpoints act on it as qemu-ga would inside a VM: ``exec`` runs argv with ``lxc-attach`` (no shell), ``file-read``
and ``file-write`` run a few lines of the container's own ``python3``. So Ansible modules (which need Python in the
guest) really run, through ``agent/exec`` and ``agent/file-*`` only.

Tree: the rootfs tar is unpacked once per rootfs directory (``<rootfs>/tree``, shared and never written) and each VM
gets an overlayfs upper directory of its own (``<state-dir>/guest-containers/lxc/vm<vmid>/upper``, LXC's ``overlay:``
rootfs): starting a VM copies nothing, VMs are isolated, and the upper directory survives stop/start like a disk and
goes with the VM (destroy, reset).

qemu-ga facts mirrored (QEMU ``qga/commands.c``, ``qga/commands-posix.c``; qemu-server ``PVE/API2/Qemu/Agent.pm``):
the command inherits qemu-ga's environment, which systemd gives a system service without ``User=``: ``PATH`` only
(no ``HOME``, ``USER``, ``SHELL``), cwd ``/``, umask 022; stdin is ``input-data`` (then closed) or ``/dev/null``;
each of stdout and stderr is captured up to 16 MiB (``GUEST_EXEC_MAX_OUTPUT``), the rest read and dropped with
``out-truncated``/``err-truncated``; the status counts as exited once the process ended *and* both pipes closed; an
exited status is handed out once. A missing program fails the exec call itself (GLib's spawn error). ``file-write``
opens with mode ``wb`` (PVE), ``file-read`` reads 1 MiB chunks up to ``count`` and is ``truncated`` unless a chunk
came back short (so a read of exactly the remaining size is ``truncated``, as on PVE).

Not a VM: no kernel of its own (``get-osinfo`` reports the host's), the container shares the host's network
namespace (``network-get-interfaces`` reports the simulated bridge's view, :mod:`pvesim.guest.network`), its init
is a small reaper, not systemd. With ``cloud-init`` in the tree, the init runs cloud-init's four stages on the NoCloud
seed pvesim renders for the VM (network configuration disabled: the network is the host's).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
import typing as t
from collections.abc import Mapping, Sequence

from . import guest
from .qemu_launch import _set_pdeathsig
from .realcontainer import RealContainerBackend, _run, _write

__all__ = ["ContainerGuest", "ContainerGuestBackend"]

AgentNotRunning = guest.AgentNotRunning
AgentCommandError = guest.AgentCommandError

# systemd's default PATH for system services (Debian 12, systemd 252): qemu-ga's, so every command's
QGA_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EXEC_MAX_OUTPUT = 16 * 1024 * 1024  # QEMU qga/commands.c GUEST_EXEC_MAX_OUTPUT, per stream
EXEC_IO_SIZE = 4096
MAX_READ_SIZE = 16 * 1024 * 1024  # PVE's file-read limit
INIT_PATH = "usr/local/sbin/pvesim-vm-init"
SEED_DIR = "var/lib/cloud/seed/nocloud"

# The container's init (LXC splits lxc.init.cmd on spaces: a script). cloud-init's stages run in the background,
# as systemd would order them; the loop reaps orphans (daemons started through exec) until SIGTERM (halt).
_INIT = """#!/bin/sh
# pvesim VM container init (pvesim/containerguest.py): cloud-init's stages when installed, then reap until SIGTERM
trap 'exit 0' TERM INT
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
mkdir -p /run/sshd
if [ -x /usr/bin/cloud-init ]; then
  ( cloud-init init --local && cloud-init init; cloud-init modules --mode=config; cloud-init modules --mode=final ) \\
    >/var/log/pvesim-cloud-init.log 2>&1 </dev/null &
fi
while :; do sleep 1 & wait; done
"""

# cloud-init in a container that shares the host's network namespace: the seed is the only datasource, and it
# must never configure the (host's) network; C.UTF-8 needs no locale-gen (the tree has no generated locales).
_CLOUD_CFG = """# pvesim (pvesim/containerguest.py): NoCloud seed only; the network is the host's, never configured
datasource_list: [NoCloud, None]
network: {config: disabled}
locale: C.UTF-8
"""

# file-read / file-write inside the container, with the container's view of paths and symlinks; errors as
# qemu-ga words them (error_setg_errno: "<what>: <strerror>").
_FILE_HELPER = r"""
import os, sys
op, path = sys.argv[1], sys.argv[2]
os.umask(0o022)
def fail(what, exc):
    sys.stderr.write("%s: %s" % (what, os.strerror(exc.errno)))
    sys.exit(3)
if op == "write":
    data = sys.stdin.buffer.read()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except OSError as exc:
        fail("failed to open file '%s' (mode: 'wb')" % path, exc)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        fail("failed to write to file", exc)
    os.close(fd)
else:
    offset, count = int(sys.argv[3]), int(sys.argv[4])
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        fail("failed to open file '%s' (mode: 'r')" % path, exc)
    try:
        if offset:
            os.lseek(fd, offset, os.SEEK_SET)
    except OSError as exc:
        fail("failed to seek file", exc)
    out, left = sys.stdout.buffer, count
    try:
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
    except OSError as exc:
        fail("failed to read file", exc)
    out.flush()
"""


def _child_setup() -> None:
    _set_pdeathsig()
    os.umask(0o022)  # systemd's default UMask= for qemu-ga


def resolve_in_root(root: str, path: str, max_links: int = 40) -> str | None:
    """``path`` as the container sees it, under ``root`` (``/proc/<init>/root``): symlinks, absolute ones too, stay
    inside ``root``. The host path, or None when a component is missing."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    links = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        host = os.path.join(root, *done, part)
        try:
            target = os.readlink(host)
        except FileNotFoundError:
            return None
        except OSError:  # not a symlink (EINVAL), or not a directory on the way (ENOTDIR)
            if not os.path.lexists(host):
                return None
            done.append(part)
            continue
        links += 1
        if links > max_links:
            return None
        if target.startswith("/"):
            done = []
        parts = [p for p in target.split("/") if p not in ("", ".")] + parts
    return os.path.join(root, *done)


class _Exec:
    """One ``guest-exec`` process: lxc-attach, with stdin fed and stdout/stderr captured as qemu-ga does."""

    def __init__(self, proc: subprocess.Popen[bytes], input_data: bytes | None) -> None:
        self.proc = proc
        self.out = bytearray()
        self.err = bytearray()
        self.truncated = {"out": False, "err": False}
        self.threads = [
            threading.Thread(target=self._capture, args=(proc.stdout, self.out, "out"), daemon=True),
            threading.Thread(target=self._capture, args=(proc.stderr, self.err, "err"), daemon=True),
        ]
        if input_data is not None:
            self.threads.append(threading.Thread(target=self._feed, args=(input_data,), daemon=True))
        for thread in self.threads:
            thread.start()

    def _feed(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except OSError:
            pass  # the command closed its stdin early: qemu-ga stops writing too
        finally:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _capture(self, stream: t.IO[bytes] | None, buf: bytearray, name: str) -> None:
        assert stream is not None
        with stream:
            while True:
                chunk = stream.read1(EXEC_IO_SIZE)  # type: ignore[attr-defined]
                if not chunk:
                    return
                room = EXEC_MAX_OUTPUT - len(buf)
                if len(chunk) > room:
                    self.truncated[name] = True  # read on and drop the rest, so the command never blocks
                buf += chunk[: max(room, 0)]

    def exited(self) -> bool:
        return self.proc.poll() is not None and not any(th.is_alive() for th in self.threads[:2])


class ContainerGuest:
    """The guest of one running VM: its LXC container; created by :meth:`ContainerGuestBackend.start`."""

    backend_name = "container"

    def __init__(
        self,
        backend: ContainerGuestBackend,
        vmid: int,
        config: Mapping[str, str],
        seed: Mapping[str, str],
        ipv6_prefixes: Mapping[str, str | None] | None = None,
    ) -> None:
        self.backend = backend
        self.vmid = vmid
        self.config = dict(config)
        self.seed = dict(seed)
        self.faults = guest.GuestFaults()  # admin knobs: exec_disabled, agent_never and dhcp_never have an effect
        self.timing = guest.GuestTiming()  # accepted for the admin API; only the network model reads it
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._procs: dict[int, _Exec] = {}
        self._next_pid = 1000 + vmid % 97
        # the addresses a bridge would hand out: the simulated guest's network model, up from the start
        self._net = guest.SimulatedGuest(
            vmid,
            config,
            seed,
            time.monotonic,
            timing=guest.GuestTiming(agent_up_after=0.0, dhcp_after_agent=0.0),
            faults=self.faults,
            ipv6_prefixes=ipv6_prefixes,
        )
        self._init_pid = 0

    # -- helpers -------------------------------------------------------------------------------

    def _error(self, command: str, desc: str) -> AgentCommandError:
        return guest.agent_error(self.vmid, command, desc)

    def _require_agent(self) -> None:
        if self.faults.agent_never or self.backend.state(self.vmid) != "RUNNING":
            raise AgentNotRunning()

    def _root(self) -> str:
        """The container's root as the host sees it (``/proc/<init pid>/root``)."""
        if not self._init_pid or not os.path.exists(f"/proc/{self._init_pid}/root"):
            res = subprocess.run(
                self.backend._lxc("lxc-info", self.vmid, "-p", "-H"),  # pylint: disable=protected-access
                capture_output=True,
                text=True,
                check=False,
                timeout=30,
            )
            self._init_pid = int(res.stdout.strip() or "0")
        return f"/proc/{self._init_pid}/root"

    def _spawn(self, argv: list[str], stdin: int) -> subprocess.Popen[bytes]:
        cmd = self.backend._lxc(  # pylint: disable=protected-access
            "lxc-attach", self.vmid, "--clear-env", "-v", f"PATH={QGA_PATH}", "--", "/usr/bin/env", "-u", "container"
        )
        cmd += ["--", *argv]

        def run() -> subprocess.Popen[bytes]:
            return subprocess.Popen(  # pylint: disable=consider-using-with
                cmd,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd="/",
                preexec_fn=_child_setup,
                close_fds=True,
            )

        return self.backend.spawner.submit(run).result()

    def _file_helper(self, command: str, args: list[str], data: bytes | None = None) -> bytes:
        proc = self._spawn(
            ["python3", "-I", "-S", "-c", _FILE_HELPER, *args],
            subprocess.PIPE if data is not None else subprocess.DEVNULL,
        )
        try:
            out, err = proc.communicate(data, timeout=self.backend.command_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise self._error(command, "got timeout") from None  # what qemu-server says when the agent is silent
        if proc.returncode != 0:
            raise self._error(command, err.decode("utf-8", errors="replace").strip() or f"exit {proc.returncode}")
        return out

    # -- agent API -----------------------------------------------------------------------------

    def ping(self) -> dict[str, t.Any]:
        """``POST .../agent/ping``: ``{}`` while the container runs."""
        self._require_agent()
        return {}

    def network_get_interfaces(self) -> list[dict[str, t.Any]]:
        self._require_agent()
        return self._net.network_get_interfaces()

    def get_osinfo(self) -> dict[str, t.Any]:
        """``GET .../agent/get-osinfo``: the tree's ``/etc/os-release``; the kernel is the host's (a container)."""
        self._require_agent()
        fields: dict[str, str] = {}
        text = self._file_helper("get-osinfo", ["read", "/etc/os-release", "0", "65536"]).decode("utf-8", "replace")
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip().strip('"')
        uname = os.uname()
        result = {"kernel-release": uname.release, "kernel-version": uname.version, "machine": uname.machine}
        names = {"ID": "id", "NAME": "name", "PRETTY_NAME": "pretty-name", "VERSION": "version"}
        names.update({"VERSION_ID": "version-id", "VARIANT": "variant", "VARIANT_ID": "variant-id"})
        result.update({qga: fields[key] for key, qga in names.items() if key in fields})
        return result

    def get_info(self) -> dict[str, t.Any]:
        self._require_agent()
        cmds = [
            "guest-ping",
            "guest-exec",
            "guest-exec-status",
            "guest-file-open",
            "guest-file-read",
            "guest-file-write",
            "guest-file-seek",
            "guest-file-close",
            "guest-network-get-interfaces",
            "guest-get-osinfo",
            "guest-info",
        ]
        return {
            "version": "7.2.0",  # Debian 12's qemu-guest-agent
            "supported_commands": [
                {"name": c, "enabled": not (c == "guest-exec" and self.faults.exec_disabled), "success-response": True}
                for c in cmds
            ],
        }

    def _find_program(self, program: str) -> str | None:
        """Why GLib's spawn (``G_SPAWN_SEARCH_PATH``) cannot start ``program`` (strerror text); None when it runs."""
        root = self._root()
        candidates = [program] if "/" in program else [f"{d}/{program}" for d in QGA_PATH.split(":")]
        denied = False
        for cand in candidates:
            host = resolve_in_root(root, cand if cand.startswith("/") else "/" + cand)
            if host is None or not os.path.isfile(host):
                continue
            if os.access(host, os.X_OK):
                return None
            denied = True
        return os.strerror(errno.EACCES if denied else errno.ENOENT)

    def exec(self, command: Sequence[str] | None, input_data: str | None = None) -> int:
        """``POST .../agent/exec``: start argv (no shell) in the container; the pid at once, the command runs on."""
        argv = [str(a) for a in (command or [])]
        guest.check_exec(self.vmid, argv, input_data, self._require_agent, self.faults.exec_disabled)
        problem = self._find_program(argv[0])
        if problem is not None:
            raise self._error("exec", guest.spawn_failed(argv[0], problem))
        data = None if input_data is None else input_data.encode("utf-8", errors="surrogateescape")
        proc = self._spawn(argv, subprocess.PIPE if data is not None else subprocess.DEVNULL)
        with self._lock:
            pid = self._next_pid
            self._next_pid += 1
            self._procs[pid] = _Exec(proc, data)
        return pid

    def exec_status(self, pid: int) -> dict[str, t.Any]:
        """``GET .../agent/exec-status``: ``exited: 0`` while it runs; then, once, the exit code and the output."""
        self._require_agent()
        with self._lock:
            run = self._procs.get(pid)
            if run is None:
                raise self._error("exec-status", "Invalid parameter 'pid'")
            if not run.exited():
                return {"exited": 0}
            del self._procs[pid]
        result: dict[str, t.Any] = {"exited": 1, "exitcode": run.proc.returncode}
        for name, buf in (("out", run.out), ("err", run.err)):
            if buf:
                result[f"{name}-data"] = bytes(buf).decode("utf-8", errors="replace")
                result[f"{name}-truncated"] = int(run.truncated[name])
        return result

    def file_read(self, path: str, count: int | None = None, offset: int = 0, decode: bool = True) -> dict[str, t.Any]:
        """``GET .../agent/file-read``: ``content`` (text, or with ``decode`` false each 1 MiB chunk's base64, as PVE
        concatenates them), ``bytes-read``, ``truncated: 1`` unless a chunk came back short."""
        self._require_agent()
        want = MAX_READ_SIZE if count is None else int(count)
        data = self._file_helper("file-open", ["read", path, str(int(offset)), str(want)])
        result: dict[str, t.Any] = {"content": guest.read_content(data, decode), "bytes-read": len(data)}
        if len(data) >= want:
            result["truncated"] = 1
        return result

    def file_write(self, path: str, content: bytes) -> None:
        """``POST .../agent/file-write``: ``path`` replaced by exactly these bytes."""
        self._require_agent()
        self._file_helper("file-open", ["write", path], data=bytes(content))

    # -- lifecycle -----------------------------------------------------------------------------

    def stop(self, graceful: bool = False) -> None:
        """The VM stopped: its container stops (``graceful``: SIGTERM to init first); running commands end with it."""
        self.backend.stop_vm(self, graceful)

    def admin_info(self) -> dict[str, t.Any]:
        """Extra fields for ``GET /_pvesim/vms/{vmid}``: the LXC container and its overlay (``upper``: this VM's
        changes; ``ssh_forward_port``: where a sshd started in the guest, ``service ssh start``, listens)."""
        info = self.backend.admin_info(self.vmid)
        info.pop("container_backend", None)
        info.update(guest_backend="container", running_execs=len(self._procs))
        info["rootfs"] = f"{self.backend.ct_dir(self.vmid)}/upper"
        info["lower"] = self.backend.lower
        return info


class ContainerGuestBackend(RealContainerBackend):
    """Owns the VM containers of one simulator; ``pvesim.guestlink`` calls it as ``sim.guest_backend``."""

    PREFIX = "vm"
    LABEL = "VM"
    accel = "container"  # the connection file's guest_accel
    simulated_network = True  # guestlink passes the IPv6 prefixes of the simulated network

    def __init__(self, rootfs_dir: str, state_dir: str, command_timeout: float = 300.0) -> None:
        super().__init__(rootfs_dir, os.path.join(os.path.abspath(state_dir), "guest-containers"))
        self.command_timeout = command_timeout
        self.spawner = self._spawner
        self._guests: dict[int, ContainerGuest] = {}
        self.lower = self._unpack_once()

    def _unpack_once(self) -> str:
        """The rootfs tree, unpacked once next to its tar and shared read-only by every VM's overlay."""
        tree = os.path.join(self.rootfs["dir"], "tree")
        if not os.path.isdir(tree):
            tmp = f"{tree}.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            _run(
                ["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", self.rootfs["tar_path"], "-C", tmp]
            )
            try:
                os.rename(tmp, tree)
            except OSError:  # another simulator got there first
                shutil.rmtree(tmp, ignore_errors=True)
        return tree

    def _prepare(self, vmid: int, config: Mapping[str, str], seed: Mapping[str, str]) -> None:
        """The container's config, and what the VM's boot brings into its tree: init, the seed, hostname."""
        ct_dir = self.ct_dir(vmid)
        upper = os.path.join(ct_dir, "upper")
        os.makedirs(upper, exist_ok=True)
        os.makedirs(os.path.join(ct_dir, "work"), exist_ok=True)
        _write(os.path.join(upper, INIT_PATH), _INIT, 0o755)
        names = {"user": "user-data", "meta": "meta-data", "network": "network-config", "vendor": "vendor-data"}
        for part, name in names.items():  # the cloud-init drive, as the VM's boot sees it
            _write(os.path.join(upper, SEED_DIR, name), seed.get(part, ""), 0o600)
        _write(os.path.join(upper, "etc/cloud/cloud.cfg.d/99-pvesim.cfg"), _CLOUD_CFG, 0o644)
        # a sshd started in the guest (service ssh start) listens on the host's loopback only, as real containers'
        _write(
            os.path.join(upper, "etc/default/ssh"),
            f'SSHD_OPTS="-p {self.ssh_port(vmid)} -o ListenAddress=127.0.0.1"\n',
            0o644,
        )
        if os.path.isfile("/etc/resolv.conf"):
            shutil.copyfile("/etc/resolv.conf", os.path.join(upper, "etc", "resolv.conf"))
        name = str(config.get("name") or f"vm{vmid}")
        lines = [
            "# pvesim VM container (pvesim/containerguest.py)",
            "lxc.include = /usr/share/lxc/config/common.conf",
            "lxc.arch = linux64",
            f"lxc.uts.name = {name}",
            f"lxc.rootfs.path = overlay:{self.lower}:{upper}",
            "lxc.net.0.type = none",
            "lxc.apparmor.profile = unconfined",
            f"lxc.init.cmd = /{INIT_PATH}",
            "lxc.signal.halt = SIGTERM",
            "lxc.console.path = none",
            "lxc.tty.max = 0",
            "",
        ]
        _write(os.path.join(ct_dir, "config"), "\n".join(lines), 0o644)

    def _running_note(self, vmid: int) -> str:
        return f", guest agent via lxc-attach, overlay {self.ct_dir(vmid)}/upper"

    def start(  # type: ignore[override]  # guestlink's interface: RealGuestBackend.start
        self,
        vmid: int,
        config: Mapping[str, str],
        seed: Mapping[str, str],
        disk_source: str | None = None,
        ipv6_prefixes: Mapping[str, str | None] | None = None,
    ) -> ContainerGuest:
        """``status/start``: the VM's container runs (a disk image of its own, ``disk_source``, is not used)."""
        del disk_source
        with self._lock:
            old = self._guests.pop(vmid, None)
        if old is not None or self.state(vmid) != "STOPPED":
            RealContainerBackend.stop(self, vmid, graceful=False)
        self._prepare(vmid, config, seed)
        g = ContainerGuest(self, vmid, config, seed, ipv6_prefixes)
        RealContainerBackend.start(self, vmid)
        with self._lock:
            self._guests[vmid] = g
        return g

    def stop_vm(self, g: ContainerGuest, graceful: bool) -> None:
        with self._lock:
            if self._guests.get(g.vmid) is g:
                del self._guests[g.vmid]
        RealContainerBackend.stop(self, g.vmid, graceful)

    def guests(self) -> list[ContainerGuest]:
        with self._lock:
            return list(self._guests.values())

    def destroy_vm(self, vmid: int) -> None:
        """The VM is gone: its container stops and its upper directory (its disk) goes."""
        with self._lock:
            self._guests.pop(vmid, None)
        self.destroy(vmid)

    def reset(self) -> None:
        with self._lock:
            self._guests.clear()
        super().reset()
