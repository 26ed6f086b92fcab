# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The optional real-guest backend: ``python -m pvesim serve --guests real --guest-image DIR``.

``status/start`` boots a real QEMU VM from the image ``tools/guest-image/build.sh`` makes (Debian 12,
real cloud-init, real qemu-guest-agent, real sshd); the agent endpoints talk to the real QEMU guest
agent over its unix socket. :class:`RealGuest` has the public interface of
:class:`pvesim.guest.SimulatedGuest` that the API uses (``ping``, ``network_get_interfaces``,
``exec``, ``exec_status``, ``file_read``, plus ``faults``/``timing`` for the admin knobs) and raises
the same :class:`~pvesim.guest.AgentNotRunning` / :class:`~pvesim.guest.AgentCommandError`.

Per VM (``<state-dir>/guests/vm-<vmid>/``): a copy-on-write qcow2 overlay of the image's disk, grown
to the ``scsi0`` size of the config (kept across stop/start like a real disk, removed with the VM),
the NoCloud seed ISO (volume ``cidata``) holding exactly the files of
:func:`pvesim.cloudinit.drive_files` (what ``cloudinit/dump`` shows), the QMP and QGA sockets and
QEMU's pidfile. The serial console goes to ``<state-dir>/vm-<vmid>.console.log``.

A VM whose boot disk holds an image of its own (imported with ``import-from``, a template made from
one, or a clone of such a template: ``disk_source``) boots that file instead of the image's
``disk.qcow2``: the overlay is created on it, and after the first boot the VM's disk *is* its overlay,
which is what a later conversion to a template and a clone of that template carry on (``guestlink``).
The kernel and initrd stay the image directory's, so an imported image must be one built with them
(``build.sh``'s ``disk-noagent.qcow2``); the firmware settings (``bios``, ``efidisk0``) are not emulated.

Networking is QEMU user-mode with the MAC of ``net0``: with ``ipconfig0`` DHCP (or none) the guest gets
10.0.2.15 from slirp's DHCP; with a static ``ipconfig0`` (``ip=A/P,gw=G``: the template build's
preparation boot) slirp's network becomes A's network, G its gateway and, when the first nameserver of
the network-config lies inside that network, slirp's DNS forwarder answers there, so the address,
gateway and resolver cloud-init configures work as they would on a bridge. Either way the guest's port
22 is forwarded from ``127.0.0.1:<ssh_forward_port>`` only (``admin_info``: ``guest_address``).

QEMU processes never outlive the simulator: they are children of one long-lived spawner thread
with ``PR_SET_PDEATHSIG`` = SIGKILL, are stopped on :meth:`RealGuestBackend.stop_all` (server stop,
SIGTERM via ``__main__``, ``atexit``), and a new backend kills whatever a pidfile in its state dir
still names (when that process's command line mentions the state dir).

PVE facts mirrored (qemu-server ``PVE/QemuServer/Agent.pm``, ``PVE/API2/Qemu/Agent.pm``,
``PVE/QMPClient.pm``): every agent session starts with ``guest-sync-delimited`` (a 0xFF byte
first, a random id, stale replies discarded); no sync reply within the timeout means
``QEMU guest agent is not running``; ``exec`` sends ``path``/``arg``/``capture-output``;
``exec-status`` base64-decodes ``out-data``/``err-data`` and turns booleans into 0/1; ``file-read``
reads 1 MiB chunks up to ``count`` (default 16 MiB) and adds ``truncated: 1`` when it stopped
before EOF; QGA errors read ``VM <vmid> qga command 'guest-<cmd>' failed - <desc>``.
"""

from __future__ import annotations

import atexit
import base64
import concurrent.futures
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import typing as t
from collections.abc import Mapping, Sequence

from . import guest
from .qemu_launch import (
    GuestImageError,
    _boot_disk,
    _cmdline,
    _free_port,
    _kv,
    _pid_alive,
    _set_pdeathsig,
    detect_accel,
    load_image,
    parse_size,
    slirp_network,
)
from .qga import _decode, _QgaSession

__all__ = [
    "GuestImageError",
    "RealGuest",
    "RealGuestBackend",
    "detect_accel",
    "load_image",
    "slirp_network",
]

AgentNotRunning = guest.AgentNotRunning
AgentCommandError = guest.AgentCommandError

QEMU_BINARY = "qemu-system-x86_64"
MAX_READ_SIZE = 16 * 1024 * 1024  # PVE's file-read limit
READ_CHUNK = 1024 * 1024
TCG_MEMORY_CAP_MIB = 1024
KVM_MEMORY_CAP_MIB = 2048
MIN_MEMORY_MIB = 512


def log(msg: str) -> None:
    sys.stderr.write(f"pvesim realguest: {msg}\n")
    sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# host checks


# ---------------------------------------------------------------------------------------------
# the agent socket


# ---------------------------------------------------------------------------------------------
# one VM


class RealGuest:
    """A running QEMU VM with a real guest agent; created by :meth:`RealGuestBackend.start`."""

    backend_name = "real"

    def __init__(
        self,
        backend: RealGuestBackend,
        vmid: int,
        config: Mapping[str, str],
        seed: Mapping[str, str],
        disk_source: str | None = None,
    ) -> None:
        self.backend = backend
        self.vmid = vmid
        self.config = dict(config)
        self.seed = dict(seed)
        self.disk_source = (
            disk_source  # the file the boot disk's volume holds (an imported image), else the image's disk
        )
        self.netdev_options, self.guest_address = slirp_network(self.config)
        self.faults = guest.GuestFaults()  # admin knobs: only exec_disabled and agent_never are honoured
        self.timing = guest.GuestTiming()  # accepted for the admin API, not used
        self.dir = backend.vm_dir(vmid)
        self.run_dir = backend.run_dir(vmid)
        self.console_log = os.path.join(backend.state_dir, f"vm-{vmid}.console.log")
        self.qemu_log = os.path.join(self.dir, "qemu.log")
        self.pidfile = os.path.join(self.dir, "qemu.pid")
        self.qga_socket = os.path.join(self.run_dir, "qga.sock")
        self.qmp_socket = os.path.join(self.run_dir, "qmp.sock")
        self.disk = os.path.join(self.dir, "disk.qcow2")
        self.seed_iso = os.path.join(self.dir, "cidata.iso")
        self.accel = backend.accel
        self.memory_mib = 0
        self.ssh_forward_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_monotonic = 0.0
        self.stopped = False
        self._qga_lock = threading.Lock()
        self._state_lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------

    def _prepare_disk(self) -> None:
        img = self.backend.image
        want = self._disk_size()
        if not os.path.exists(self.disk):
            if self.disk_source:
                base, base_format = (
                    self.disk_source,
                    str(json.loads(_run(["qemu-img", "info", "--output=json", "-U", self.disk_source]))["format"]),
                )
            else:
                base, base_format = img["disk_path"], str(img.get("disk_format", "qcow2"))
            _run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", base_format, "-b", base, self.disk])
        info = json.loads(_run(["qemu-img", "info", "--output=json", "-U", self.disk]))
        if want and want > int(info.get("virtual-size", 0)):
            _run(["qemu-img", "resize", "-q", self.disk, str(want)])

    def _disk_size(self) -> int:
        value = _boot_disk(self.config)
        size = _kv(value, "file").get("size") if value else None
        if size:
            try:
                return parse_size(size)
            except ValueError:
                return 0
        return 0

    def _build_seed(self) -> None:
        """The NoCloud ISO exactly as PVE writes it: the four files, volume id ``cidata``."""
        src = os.path.join(self.dir, "cidata")
        shutil.rmtree(src, ignore_errors=True)
        os.makedirs(src)
        names = {"user": "user-data", "network": "network-config", "meta": "meta-data", "vendor": "vendor-data"}
        for part, name in names.items():
            with open(os.path.join(src, name), "wb") as fh:
                fh.write(self.seed.get(part, "").encode("utf-8", errors="surrogateescape"))
        tool = shutil.which("genisoimage") or shutil.which("mkisofs") or shutil.which("xorrisofs")
        if tool is None:
            raise GuestImageError("genisoimage (or xorriso's xorrisofs) is needed to build the cloud-init seed ISO")
        _run(
            [
                tool,
                "-quiet",
                "-iso-level",
                "3",
                "-R",
                "-V",
                "cidata",
                "-input-charset",
                "utf-8",
                "-o",
                self.seed_iso,
                *[os.path.join(src, n) for n in names.values()],
            ]
        )

    def _memory(self) -> int:
        try:
            mem = int(self.config.get("memory", "2048"))
        except ValueError:
            mem = 2048
        cap = TCG_MEMORY_CAP_MIB if self.accel == "tcg" else KVM_MEMORY_CAP_MIB
        return max(MIN_MEMORY_MIB, min(mem, cap))

    def _mac(self) -> str:
        net0 = self.config.get("net0", "")
        mac = _kv(net0, "model").get("macaddr", "") if net0 else ""
        return (
            mac.lower()
            if re.fullmatch(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}", mac)
            else "bc:24:11:00:00:%02x" % (self.vmid % 256)
        )

    def argv(self) -> list[str]:
        img = self.backend.image
        accel = self.accel
        argv = [
            self.backend.qemu,
            "-name",
            f"pvesim-vm-{self.vmid},debug-threads=on",
            "-nodefaults",
            "-no-user-config",
            "-machine",
            f"q35,accel={accel}",
            "-cpu",
            "host" if accel == "kvm" else "max",
            "-smp",
            "1",
            "-m",
            str(self.memory_mib),
            "-display",
            "none",
            "-serial",
            f"file:{self.console_log}",
            "-qmp",
            f"unix:{self.qmp_socket},server=on,wait=off",
            "-pidfile",
            self.pidfile,
            "-kernel",
            img["kernel_path"],
            "-initrd",
            img["initrd_path"],
            "-append",
            str(img.get("cmdline", "root=/dev/vda rw console=ttyS0")),
            # root disk on virtio-blk (/dev/vda); the seed as a SCSI CD on virtio-scsi: q35's AHCI CD
            # is invisible to Debian's cloud kernel.
            "-drive",
            f"file={self.disk},format=qcow2,if=none,id=drive-scsi0,discard=unmap,cache=unsafe",
            "-device",
            "virtio-blk-pci,drive=drive-scsi0,id=scsi0",
            "-device",
            "virtio-scsi-pci,id=scsihw0",
            "-drive",
            f"file={self.seed_iso},format=raw,if=none,id=drive-ide2,media=cdrom,readonly=on",
            "-device",
            "scsi-cd,drive=drive-ide2,bus=scsihw0.0,id=ide2",
            "-netdev",
            ",".join(
                [
                    "user",
                    "id=net0",
                    *self.netdev_options,
                    f"hostfwd=tcp:127.0.0.1:{self.ssh_forward_port}-{self.guest_address}:22",
                ]
            ),
            "-device",
            f"virtio-net-pci,netdev=net0,mac={self._mac()},id=net0dev",
            "-chardev",
            f"socket,path={self.qga_socket},server=on,wait=off,id=qga0",
            "-device",
            "virtio-serial-pci,id=qgaserial0",
            "-device",
            "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
            "-object",
            "rng-random,filename=/dev/urandom,id=rng0",
            "-device",
            "virtio-rng-pci,rng=rng0",
        ]
        return argv

    def start(self) -> None:
        os.makedirs(self.dir, exist_ok=True)
        os.makedirs(self.run_dir, exist_ok=True)
        for path in (self.qga_socket, self.qmp_socket, self.pidfile):
            if os.path.exists(path):
                os.unlink(path)
        self._prepare_disk()
        self._build_seed()
        self.memory_mib = self._memory()
        last_error = ""
        for _attempt in range(3):
            self.ssh_forward_port = _free_port()
            with open(self.console_log, "ab") as fh:
                fh.write(
                    f"\n==== pvesim: starting VM {self.vmid} ({self.accel}) at {time.strftime('%Y-%m-%dT%H:%M:%S')} ====\n".encode()
                )
            self.proc = self.backend.spawn(self.argv(), self.qemu_log)
            self.started_monotonic = time.monotonic()
            err = self._wait_started()
            if err is None:
                log(
                    f"VM {self.vmid}: QEMU pid {self.proc.pid} ({self.accel}, {self.memory_mib} MiB), ssh 127.0.0.1:{self.ssh_forward_port}, "
                    f"console {self.console_log}"
                )
                return
            last_error = err
            if "hostfwd" not in err and "forwarding" not in err:
                break
        raise GuestImageError(f"QEMU failed to start VM {self.vmid}: {last_error}")

    def _wait_started(self) -> str | None:
        assert self.proc is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return self._qemu_log_tail() or f"exit code {self.proc.returncode}"
            if os.path.exists(self.qmp_socket) and os.path.exists(self.qga_socket):
                return None
            time.sleep(0.05)
        self.kill()
        return "no QMP socket after 30 s"

    def _qemu_log_tail(self) -> str:
        try:
            with open(self.qemu_log, encoding="utf-8", errors="replace") as fh:
                return fh.read()[-2000:].strip()
        except OSError:
            return ""

    def _qmp(self, command: str, timeout: float = 5.0) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(self.qmp_socket)
            fh = sock.makefile("rwb")
            fh.readline()  # greeting
            fh.write(b'{"execute": "qmp_capabilities"}\n')
            fh.flush()
            fh.readline()
            fh.write(json.dumps({"execute": command}).encode() + b"\n")
            fh.flush()
            try:
                fh.readline()
            except OSError:
                pass

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, graceful: bool = False, timeout: float | None = None) -> None:
        """``status/shutdown`` (graceful: ACPI ``system_powerdown``) or ``status/stop`` (QMP ``quit``); kill after the timeout."""
        with self._state_lock:
            if self.stopped:
                return
            self.stopped = True
        proc = self.proc
        if proc is None:
            return
        if graceful and self.running():
            try:
                self._qmp("system_powerdown")
                proc.wait(timeout=timeout if timeout is not None else self.backend.shutdown_timeout)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.running():
            try:
                self._qmp("quit")
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        log(f"VM {self.vmid}: QEMU pid {proc.pid} stopped ({'shutdown' if graceful else 'stop'})")

    def kill(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.stopped = True
        self.backend.forget_proc(self)
        for path in (self.pidfile, self.qga_socket, self.qmp_socket):
            try:
                os.unlink(path)
            except OSError:
                pass

    def admin_info(self) -> dict[str, t.Any]:
        return {
            "guest_backend": "real",
            "accel": self.accel,
            "qemu_pid": self.proc.pid if self.proc else None,
            "qemu_running": self.running(),
            "ssh_forward_port": self.ssh_forward_port,
            "guest_address": self.guest_address,
            "disk_source": self.disk_source,
            "memory_mib": self.memory_mib,
            "console_log": self.console_log,
            "qga_socket": self.qga_socket,
            "disk": self.disk,
            "seed_iso": self.seed_iso,
            "uptime": round(time.monotonic() - self.started_monotonic, 1) if self.started_monotonic else None,
        }

    # -- agent ---------------------------------------------------------------------------------

    def _session(self) -> _QgaSession:
        if self.faults.agent_never or not self.running():
            raise AgentNotRunning()
        return _QgaSession(self.qga_socket, self.vmid, self.backend.sync_timeout, self.backend.command_timeout)

    def _call(self, execute: str, arguments: Mapping[str, t.Any] | None = None) -> t.Any:
        with self._qga_lock, self._session() as session:
            return session.call(execute, arguments)

    def ping(self) -> dict[str, t.Any]:
        """``POST .../agent/ping``: the QGA result (``{}``); PVE wraps it as ``{"result": ...}``."""
        res = self._call("guest-ping")
        return res if isinstance(res, dict) else {}

    def network_get_interfaces(self) -> list[dict[str, t.Any]]:
        return list(self._call("guest-network-get-interfaces") or [])

    def get_osinfo(self) -> dict[str, t.Any]:
        return dict(self._call("guest-get-osinfo") or {})

    def get_info(self) -> dict[str, t.Any]:
        return dict(self._call("guest-info") or {})

    def exec(self, command: Sequence[str] | None, input_data: str | None = None) -> int:
        """``POST .../agent/exec``: PVE sends ``path`` = argv[0], ``arg`` = the rest, ``capture-output``."""
        argv = [str(a) for a in (command or [])]
        if not argv and input_data is None:
            raise AgentCommandError("command or input-data (or both) required")
        if self.faults.exec_disabled:
            with self._qga_lock, self._session():
                pass  # the agent must be up for this error, as in the simulated guest
            desc = "The command guest-exec has been disabled for this instance"
            raise AgentCommandError(
                f"VM {self.vmid} qga command 'guest-exec' failed - {desc}", desc=desc, command="guest-exec"
            )
        args: dict[str, t.Any] = {"path": argv[0] if argv else "", "arg": argv[1:], "capture-output": True}
        if input_data is not None:
            args["input-data"] = base64.b64encode(input_data.encode("utf-8")).decode()
        res = self._call("guest-exec", args)
        return int(res["pid"])

    def file_write(self, path: str, content: bytes) -> None:
        """``POST .../agent/file-write``: what PVE does (guest-file-open mode ``wb``, guest-file-write, guest-file-close)."""
        with self._qga_lock, self._session() as session:
            handle = session.call("guest-file-open", {"path": path, "mode": "wb"})
            try:
                session.call("guest-file-write", {"handle": handle, "buf-b64": base64.b64encode(content).decode()})
            finally:
                try:
                    session.call("guest-file-close", {"handle": handle})
                except AgentCommandError:
                    pass

    def exec_status(self, pid: int) -> dict[str, t.Any]:
        """``GET .../agent/exec-status``: base64 ``out-data``/``err-data`` decoded, booleans as 0/1 (like PVE)."""
        res = dict(self._call("guest-exec-status", {"pid": int(pid)}) or {})
        for key in ("out-data", "err-data"):
            if res.get(key):
                res[key] = _decode(res[key])
        return {k: (int(v) if isinstance(v, bool) else v) for k, v in res.items()}

    def file_read(self, path: str, count: int | None = None, offset: int = 0, decode: bool = True) -> dict[str, t.Any]:
        """``GET .../agent/file-read``: ``content``, ``bytes-read``, ``truncated: 1`` if it stopped before EOF."""
        with self._qga_lock, self._session() as session:
            handle = session.call("guest-file-open", {"path": path, "mode": "r"})
            data = bytearray()
            encoded: list[str] = []  # decode=0: PVE forwards each chunk's base64 as the agent sent it
            eof = False
            try:
                if offset:
                    session.call("guest-file-seek", {"handle": handle, "offset": int(offset), "whence": "set"})
                left = MAX_READ_SIZE if count is None else int(count)
                while left > 0 and not eof:
                    chunk = session.call("guest-file-read", {"handle": handle, "count": min(READ_CHUNK, left)})
                    encoded.append(str(chunk.get("buf-b64", "") or ""))
                    part = base64.b64decode(encoded[-1])
                    data += part
                    left -= len(part)
                    eof = bool(chunk.get("eof"))
                    if not part and not eof:
                        break
            finally:
                try:
                    session.call("guest-file-close", {"handle": handle})
                except AgentCommandError:
                    pass
        content = bytes(data).decode("utf-8", errors="replace") if decode else "".join(encoded)
        result: dict[str, t.Any] = {"content": content, "bytes-read": len(data)}
        if not eof:
            result["truncated"] = 1
        return result


def _run(argv: Sequence[str]) -> str:
    res = subprocess.run(list(argv), capture_output=True, check=False)
    if res.returncode != 0:
        raise GuestImageError(
            f"{argv[0]} failed ({res.returncode}): {res.stderr.decode(errors='replace').strip()[-500:]}"
        )
    return res.stdout.decode(errors="replace")


# ---------------------------------------------------------------------------------------------
# the backend


class RealGuestBackend:
    """Owns every QEMU process of one simulator; pass it to ``guestlink`` as ``sim.guest_backend``."""

    def __init__(
        self,
        image_dir: str,
        state_dir: str,
        accel: str = "auto",
        sync_timeout: float = 3.0,
        command_timeout: float = 30.0,
        shutdown_timeout: float = 60.0,
    ) -> None:
        self.image = load_image(image_dir)
        qemu = shutil.which(QEMU_BINARY)
        if qemu is None:
            raise GuestImageError(f"{QEMU_BINARY} not found (apt-get install qemu-system-x86 qemu-utils genisoimage)")
        for tool in ("qemu-img",):
            if shutil.which(tool) is None:
                raise GuestImageError(f"{tool} not found (apt-get install qemu-utils)")
        self.qemu = qemu
        self.state_dir = os.path.abspath(state_dir)
        self.guests_dir = os.path.join(self.state_dir, "guests")
        os.makedirs(self.guests_dir, exist_ok=True)
        self.accel, self.accel_reason = detect_accel(accel)
        self.sync_timeout = sync_timeout
        self.command_timeout = command_timeout
        self.shutdown_timeout = shutdown_timeout
        self._lock = threading.Lock()
        self._guests: dict[int, RealGuest] = {}
        self._short_run_root: str | None = None
        # QEMU is spawned by one long-lived thread: PR_SET_PDEATHSIG fires when the *thread* that
        # forked exits, so request/task threads must not be the parent.
        self._spawner = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pvesim-qemu-spawner")
        self.sweep_stale()
        atexit.register(self.stop_all)
        log(
            f"real guests from {self.image['dir']} (key {self.image.get('key')}); accel {self.accel.upper()} ({self.accel_reason})"
        )

    # paths
    def vm_dir(self, vmid: int) -> str:
        return os.path.join(self.guests_dir, f"vm-{vmid}")

    def run_dir(self, vmid: int) -> str:
        """Sockets live with the VM unless the path is too long for AF_UNIX (108 bytes)."""
        path = self.vm_dir(vmid)
        if len(os.path.join(path, "qga.sock")) < 100:
            return path
        if self._short_run_root is None:
            self._short_run_root = tempfile.mkdtemp(prefix="pvesim-qemu-")
        return os.path.join(self._short_run_root, f"vm-{vmid}")

    # processes
    def spawn(self, argv: list[str], log_file: str) -> subprocess.Popen[bytes]:
        def run() -> subprocess.Popen[bytes]:
            with open(log_file, "ab") as out:
                return subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,  # pylint: disable=consider-using-with
                    preexec_fn=_set_pdeathsig,
                    close_fds=True,
                )

        return self._spawner.submit(run).result()

    def sweep_stale(self) -> list[int]:
        """Kill QEMU processes a previous simulator on this state dir left behind (pidfiles)."""
        killed: list[int] = []
        if not os.path.isdir(self.guests_dir):
            return killed
        for name in sorted(os.listdir(self.guests_dir)):
            pidfile = os.path.join(self.guests_dir, name, "qemu.pid")
            try:
                with open(pidfile, encoding="utf-8") as fh:
                    pid = int(fh.read().strip() or "0")
            except (OSError, ValueError):
                continue
            if pid > 1 and _pid_alive(pid) and self.state_dir in _cmdline(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except OSError:
                    pass
            try:
                os.unlink(pidfile)
            except OSError:
                pass
        if killed:
            log(f"killed stale QEMU processes {killed} from {self.guests_dir}")
        return killed

    def start(
        self, vmid: int, config: Mapping[str, str], seed: Mapping[str, str], disk_source: str | None = None
    ) -> RealGuest:
        with self._lock:
            old = self._guests.pop(vmid, None)
        if old is not None:
            old.stop()
        g = RealGuest(self, vmid, config, seed, disk_source)
        with self._lock:
            self._guests[vmid] = g
        try:
            g.start()
        except Exception:
            g.kill()
            raise
        return g

    def forget_proc(self, g: RealGuest) -> None:
        with self._lock:
            if self._guests.get(g.vmid) is g:
                del self._guests[g.vmid]

    def guests(self) -> list[RealGuest]:
        with self._lock:
            return list(self._guests.values())

    def destroy_vm(self, vmid: int) -> None:
        """The VM is gone: stop its QEMU (if any) and remove its disk and seed."""
        with self._lock:
            g = self._guests.pop(vmid, None)
        if g is not None:
            g.stop()
        shutil.rmtree(self.vm_dir(vmid), ignore_errors=True)

    def reset(self) -> None:
        """Simulator reset: every guest stops and every VM disk goes."""
        self.stop_all()
        for name in os.listdir(self.guests_dir) if os.path.isdir(self.guests_dir) else []:
            shutil.rmtree(os.path.join(self.guests_dir, name), ignore_errors=True)

    def stop_all(self) -> None:
        for g in self.guests():
            try:
                g.stop()
            except Exception as exc:  # pylint: disable=broad-except
                log(f"VM {g.vmid}: stop failed ({exc}); killing")
                g.kill()
        if self._short_run_root:
            shutil.rmtree(self._short_run_root, ignore_errors=True)
            self._short_run_root = None
