# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A deterministic simulated Debian 13 guest behind the QEMU guest agent, one per started VM.

Everything is a pure function of the VMID, the VM config, the cloud-init seed the guest booted
from (:func:`pvesim.cloudinit.drive_files`), and an injected clock (simulated seconds). Nothing
touches the host: commands run against a small in-memory model.

Facts followed (see docs/simulator-guest.md for the sources):

- PVE (qemu-server ``PVE/QemuServer/Agent.pm``, ``PVE/API2/Qemu/Agent.pm``, ``PVE/QMPClient.pm``):
  agent errors read ``VM <vmid> qga command 'guest-<cmd>' failed - <QGA error>``; a missing agent
  is ``QEMU guest agent is not running``; ``exec-status`` has ``out-data``/``err-data`` already
  base64-decoded and booleans as 0/1; ``file-read`` returns ``content``, ``bytes-read`` and
  ``truncated: 1`` only when it stopped before EOF.
- QGA (qemu ``qga/commands.c``, ``qapi/qmp-dispatch.c``): an exited status is handed out once and
  then forgotten (``Invalid parameter 'pid'``); ``out-data`` only when there was output, then with
  ``out-truncated`` (QEMU >= 10.0.4); blocked commands fail with ``The command guest-exec has been
  disabled for this instance``; a missing binary fails the *exec* call itself with GLib's
  ``Failed to execute child process "x" (No such file or directory)``; file-open errors read
  ``failed to open file '<path>' (mode: 'r'): No such file or directory``.
- cloud-init 25.1 (``cloudinit/cmd/status.py``, ``cloudinit/cmd/main.py``): status.json layout,
  ``status --long`` text, exit codes 0 (done), 1 (error), 2 (degraded), ``--wait`` dots,
  ``last_update`` formatted from *uptime* seconds (hence 1970 dates).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from .packageindex import load_index

__all__ = [
    "DEFAULT_PREINSTALLED",
    "AgentCommandError",
    "AgentNotRunning",
    "GuestFaults",
    "GuestTiming",
    "SimulatedGuest",
    "dpkg_version_compare",
    "host_public_keys",
]

AGENT_NOT_RUNNING = "QEMU guest agent is not running"


# What the Debian 13 "genericcloud" image has installed at first boot (name -> version).
DEFAULT_PREINSTALLED: dict[str, str] = {
    "apt": "3.0.3",
    "bash": "5.2.37-2+b5",
    "ca-certificates": "20250419",
    "cloud-init": "25.1.4-1",
    "coreutils": "9.7-3",
    "dpkg": "1.22.21",
    "openssh-server": "1:10.0p1-7",
    "qemu-guest-agent": "1:10.0.2+ds-2",
    "sudo": "1.9.16p2-3",
}

IMAGE_DEFAULT_USER = "debian"
IMAGE_DEFAULT_HOSTNAME = "localhost"
CLOUDINIT_APT_PID = 812

# cloud-init stages as fractions of the time until cloud-init is done (uptime based).
_STAGES: tuple[tuple[str, float, float], ...] = (
    ("init-local", 0.10, 0.15),
    ("init", 0.20, 0.35),
    ("modules-config", 0.40, 0.50),
    ("modules-final", 0.55, 1.00),
)


class AgentNotRunning(Exception):
    """The agent is not (yet) up: PVE answers HTTP 500 ``QEMU guest agent is not running``."""

    def __init__(self) -> None:
        super().__init__(AGENT_NOT_RUNNING)
        self.message = AGENT_NOT_RUNNING


class AgentCommandError(Exception):
    """A failed agent call; ``message`` is the text PVE returns (HTTP 500), ``desc`` the QGA part."""

    def __init__(self, message: str, *, desc: str = "", command: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.desc = desc or message
        self.command = command


@dataclass(frozen=True)
class GuestTiming:
    """Simulated seconds (the server's clock is already scaled by its speed factor)."""

    agent_up_after: float = 8.0
    dhcp_after_agent: float = 2.0
    cloudinit_done_after_boot: float = 15.0
    exec_default: float = 0.2
    apt_install: float = 5.0
    apt_update: float = 3.0
    # cloud-init's own apt run (package_upgrade) holds the dpkg lock this long before it is done.
    cloudinit_apt_window: float = 5.0


@dataclass
class GuestFaults:
    """Fault injection and image contents for one guest."""

    agent_never: bool = False
    dhcp_never: bool = False
    cloudinit_error: bool = False
    cloudinit_error_message: str = "('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))"
    cloudinit_recoverable_error: bool = False
    exec_disabled: bool = False
    # Overrides of the package index (pvesim/packageindex.py: every package Debian 13 offers): a name listed here
    # offers exactly these versions instead (an empty tuple: the package does not exist).
    package_versions: dict[str, tuple[str, ...]] = field(default_factory=dict)
    preinstalled: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PREINSTALLED))
    # Debian cloud images ship without package lists: installs fail until an apt-get update ran
    # (cloud-init runs one itself when user-data has package_upgrade/package_update: true).
    apt_lists_empty_at_boot: bool = True


# ---------------------------------------------------------------------------------------------
# Debian version comparison (deb-version(7))


def _order(ch: str) -> int:
    if ch == "~":
        return -1
    if ch.isdigit():
        return 0
    if ch.isalpha():
        return ord(ch)
    return ord(ch) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_version(version: str) -> tuple[int, str, str]:
    epoch, sep, rest = version.partition(":")
    if not sep:
        epoch, rest = "0", version
    upstream, sep, revision = rest.rpartition("-")
    if not sep:
        upstream, revision = rest, ""
    return int(epoch or "0"), upstream, revision


def dpkg_version_compare(a: str, b: str) -> int:
    """Negative, zero or positive like ``dpkg --compare-versions``."""
    ea, ua, ra = _split_version(a)
    eb, ub, rb = _split_version(b)
    if ea != eb:
        return ea - eb
    return _verrevcmp(ua, ub) or _verrevcmp(ra, rb)


# ---------------------------------------------------------------------------------------------
# Deterministic SSH host keys


def _seed_bytes(vmid: int, purpose: str) -> bytes:
    return hashlib.sha256(f"pvesim:{vmid}:{purpose}".encode()).digest()


@functools.lru_cache(maxsize=256)
def _rsa_public_openssh(vmid: int) -> str:
    """A well-formed 3072-bit RSA public key: e=65537 and a seeded odd modulus with the top bit set.

    Only the public half of a simulated guest's key is ever shown, and clients only parse it and
    fingerprint it, so the modulus is not made from two primes: generating real 3072-bit keys in
    Python took seconds of the simulator's CPU per guest and slowed every concurrent request.
    """
    stream = b"".join(_seed_bytes(vmid, "rsa:%d" % block) for block in range(12))  # 12 x 32 bytes = 3072 bits
    modulus = int.from_bytes(stream, "big") | (1 << 3071) | 1
    key = rsa.RSAPublicNumbers(65537, modulus).public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@functools.lru_cache(maxsize=256)
def _small_public_openssh(vmid: int, keytype: str) -> str:
    if keytype == "ed25519":
        pub: Any = ed25519.Ed25519PrivateKey.from_private_bytes(_seed_bytes(vmid, "ed25519")).public_key()
    else:
        order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
        secret = int.from_bytes(_seed_bytes(vmid, "ecdsa"), "big") % (order - 1) + 1
        pub = ec.derive_private_key(secret, ec.SECP256R1()).public_key()
    return pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


_KEY_INFO: dict[str, tuple[int, str]] = {"ed25519": (256, "ED25519"), "ecdsa": (256, "ECDSA"), "rsa": (3072, "RSA")}


def host_public_keys(vmid: int, types: Sequence[str] = ("ed25519", "ecdsa", "rsa")) -> dict[str, str]:
    """Deterministic OpenSSH host public keys (``type base64``, no comment) for a VMID."""
    return {t: (_rsa_public_openssh(vmid) if t == "rsa" else _small_public_openssh(vmid, t)) for t in types}


def _fingerprint(public_line: str) -> str:
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# ---------------------------------------------------------------------------------------------
# The guest


@dataclass
class _Proc:
    start: float
    end: float
    exitcode: int
    out: str
    err: str
    effect: Callable[[], None] | None = None
    apt_lock: bool = False
    applied: bool = False


@dataclass
class _Outcome:
    exitcode: int
    out: str = ""
    err: str = ""
    duration: float | None = None
    effect: Callable[[], None] | None = None
    apt_lock: bool = False


@dataclass(frozen=True)
class _Nic:
    key: str
    index: int
    name: str
    mac: str
    link_down: bool
    subnets: tuple[Mapping[str, Any], ...]


_PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
_BINARIES = {
    "apt-get": "/usr/bin/apt-get",
    "cat": "/usr/bin/cat",
    "cloud-init": "/usr/bin/cloud-init",
    "dpkg-query": "/usr/bin/dpkg-query",
    "env": "/usr/bin/env",
    "false": "/usr/bin/false",
    "hostname": "/usr/bin/hostname",
    "ssh-keygen": "/usr/bin/ssh-keygen",
    "true": "/usr/bin/true",
}


def _load_yaml(text: str | None) -> Any:
    if not text:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


class SimulatedGuest:
    """The guest of one running VM; create it when the VM starts, drop it when it stops."""

    def __init__(
        self,
        vmid: int,
        config: Mapping[str, str],
        seed: Mapping[str, str],
        clock: Callable[[], float],
        timing: GuestTiming | None = None,
        faults: GuestFaults | None = None,
    ) -> None:
        self.vmid = vmid
        self.config = dict(config)
        self.seed = dict(seed)
        self._clock = clock
        self.timing = timing or GuestTiming()
        self.faults = faults or GuestFaults()
        self.boot_time = clock()
        self._procs: dict[int, _Proc] = {}
        self._next_pid = 1000 + vmid % 97
        self.installed: dict[str, str] = dict(self.faults.preinstalled)
        self._lists_fresh = not self.faults.apt_lists_empty_at_boot
        self._cloudinit_applied = False
        user_text = self.seed.get("user", "")
        cfg = _load_yaml(user_text) if user_text.startswith("#cloud-config") else None
        self.cloud_config: dict[str, Any] = cfg if isinstance(cfg, dict) else {}
        meta = _load_yaml(self.seed.get("meta"))
        self.meta: dict[str, Any] = meta if isinstance(meta, dict) else {}
        self.hostname = str(self.cloud_config.get("hostname") or self.meta.get("local-hostname") or IMAGE_DEFAULT_HOSTNAME)
        self.fqdn = str(self.cloud_config.get("fqdn") or self.hostname)
        self._nics = self._build_nics()

    # -- timeline ------------------------------------------------------------------------------

    def uptime(self) -> float:
        return max(0.0, self._clock() - self.boot_time)

    @property
    def agent_up_at(self) -> float:
        """Uptime at which the agent answers (``inf`` with ``agent_never``)."""
        return math.inf if self.faults.agent_never else self.timing.agent_up_after

    @property
    def dhcp_at(self) -> float:
        return math.inf if self.faults.dhcp_never else self.timing.agent_up_after + self.timing.dhcp_after_agent

    @property
    def cloudinit_done_at(self) -> float:
        return self.timing.cloudinit_done_after_boot

    def _package_upgrade(self) -> bool:
        cfg = self.cloud_config
        return any(cfg.get(k) is True for k in ("package_upgrade", "package_update", "package_reboot_if_required"))

    def _cloudinit_apt_window(self) -> tuple[float, float]:
        done = self.cloudinit_done_at
        if not self._package_upgrade():
            return (done, done)
        final_start = _STAGES[-1][1] * done
        return (max(final_start, done - self.timing.cloudinit_apt_window), done)

    def _advance(self) -> None:
        now = self.uptime()
        if not self._cloudinit_applied and now >= self.cloudinit_done_at:
            self._cloudinit_applied = True
            if self._package_upgrade():
                self._lists_fresh = True
        for proc in sorted(self._procs.values(), key=lambda p: p.end):
            if not proc.applied and proc.end <= now:
                proc.applied = True
                if proc.effect is not None:
                    proc.effect()

    def _require_agent(self) -> None:
        self._advance()
        if self.uptime() < self.agent_up_at:
            raise AgentNotRunning()

    def _error(self, command: str, desc: str) -> AgentCommandError:
        return AgentCommandError(f"VM {self.vmid} qga command 'guest-{command}' failed - {desc}", desc=desc, command=f"guest-{command}")

    # -- agent API -----------------------------------------------------------------------------

    def ping(self) -> dict[str, Any]:
        """``POST .../agent/ping``: the QGA result (``{}``); PVE wraps it as ``{"result": {}}``."""
        self._require_agent()
        return {}

    def network_get_interfaces(self) -> list[dict[str, Any]]:
        """``GET .../agent/network-get-interfaces``: the QGA list; PVE wraps it as ``{"result": [...]}``."""
        self._require_agent()
        now = self.uptime()
        ticks = int(now * 10)
        result: list[dict[str, Any]] = [
            {
                "name": "lo",
                "hardware-address": "00:00:00:00:00:00",
                "ip-addresses": [
                    {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
                    {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
                ],
                "statistics": self._stats(ticks, 1, 120),
            }
        ]
        for nic in self._nics:
            result.append({
                "name": nic.name,
                "hardware-address": nic.mac,
                "ip-addresses": self._addresses(nic, now),
                "statistics": self._stats(ticks, 3, 420),
            })
        return result

    def exec(self, command: Sequence[str] | None, input_data: str | None = None) -> int:
        """``POST .../agent/exec``: start ``command`` (argv, no shell); returns the pid (PVE: ``{"pid": pid}``)."""
        argv = list(command or [])
        if not argv and input_data is None:
            raise AgentCommandError("command or input-data (or both) required")
        self._require_agent()
        if self.faults.exec_disabled:
            raise self._error("exec", "The command guest-exec has been disabled for this instance")
        if not argv:
            raise self._error("exec", "Invalid parameter type for 'path', expected: string")
        if self._resolve(argv[0]) is None:
            desc = f"Guest agent command failed, error was 'Failed to execute child process \u201c{argv[0]}\u201d (No such file or directory)'"
            raise self._error("exec", desc)
        now = self.uptime()
        outcome = self._run(argv, {}, input_data, now)
        duration = self.timing.exec_default if outcome.duration is None else outcome.duration
        pid = self._next_pid
        self._next_pid += 1 + (pid * 7) % 5
        self._procs[pid] = _Proc(now, now + duration, outcome.exitcode, outcome.out, outcome.err, outcome.effect, outcome.apt_lock)
        return pid

    def exec_status(self, pid: int) -> dict[str, Any]:
        """``GET .../agent/exec-status``: PVE's shape; an exited status can be read exactly once."""
        self._require_agent()
        proc = self._procs.get(pid)
        if proc is None:
            raise self._error("exec-status", "Invalid parameter 'pid'")
        if self.uptime() < proc.end:
            return {"exited": 0}
        del self._procs[pid]
        result: dict[str, Any] = {"exited": 1, "exitcode": proc.exitcode}
        if proc.out:
            result["out-data"] = proc.out
            result["out-truncated"] = 0
        if proc.err:
            result["err-data"] = proc.err
            result["err-truncated"] = 0
        return result

    def file_read(self, path: str, count: int | None = None, offset: int = 0) -> dict[str, Any]:
        """``GET .../agent/file-read``: ``{"content", "bytes-read"}`` plus ``"truncated": 1`` before EOF."""
        self._require_agent()
        text = self._file(path)
        if text is None:
            raise self._error("file-open", f"failed to open file '{path}' (mode: 'r'): No such file or directory")
        data = text.encode("utf-8")[offset:]
        limit = 16 * 1024 * 1024 if count is None else count
        chunk_size = 1024 * 1024
        read = 0
        eof = False
        while read < limit and not eof:
            want = min(chunk_size, limit - read)
            got = data[read:read + want]
            read += len(got)
            eof = len(got) < want
        result: dict[str, Any] = {"content": data[:read].decode("utf-8", errors="replace"), "bytes-read": read}
        if not eof:
            result["truncated"] = 1
        return result

    # -- introspection (for the server and tests; not agent calls) ------------------------------

    def users(self) -> list[dict[str, Any]]:
        """Accounts cloud-init configured from the seed's user-data (the default user first)."""
        cfg = self.cloud_config
        keys = [str(k) for k in cfg.get("ssh_authorized_keys") or [] if isinstance(k, str)]
        users_cfg = cfg.get("users", ["default"])
        if isinstance(users_cfg, (str, dict)):
            users_cfg = [users_cfg]
        if not isinstance(users_cfg, list):
            users_cfg = ["default"]
        result: list[dict[str, Any]] = []
        user_key = cfg.get("user")
        default_name = IMAGE_DEFAULT_USER
        if isinstance(user_key, str):
            default_name = user_key
        elif isinstance(user_key, dict) and isinstance(user_key.get("name"), str):
            default_name = user_key["name"]
        has_default = "default" in users_cfg or (user_key is not None and "users" not in cfg)
        if has_default or user_key is not None:
            result.append({
                "name": default_name,
                "default": True,
                "ssh_authorized_keys": keys,
                "password_set": "password" in cfg,
                "home": "/root" if default_name == "root" else f"/home/{default_name}",
            })
        for entry in users_cfg:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                own = [str(k) for k in entry.get("ssh_authorized_keys") or []]
                name = entry["name"]
                result.append({
                    "name": name,
                    "default": False,
                    "ssh_authorized_keys": own,
                    "password_set": any(k in entry for k in ("passwd", "hashed_passwd", "plain_text_passwd")),
                    "home": "/root" if name == "root" else f"/home/{name}",
                })
        return result

    def cloudinit_status(self) -> dict[str, Any]:
        """Status details as ``cloud-init status --format json`` would compute them now."""
        self._advance()
        return self._ci_details(self.uptime())

    def installed_packages(self) -> dict[str, str]:
        self._advance()
        return dict(self.installed)

    # -- network model -------------------------------------------------------------------------

    def _build_nics(self) -> list[_Nic]:
        from pvesim.cloudinit import parse_net

        netcfg = _load_yaml(self.seed.get("network"))
        physical: dict[str, Mapping[str, Any]] = {}
        if isinstance(netcfg, dict) and isinstance(netcfg.get("config"), list):
            for entry in netcfg["config"]:
                if isinstance(entry, dict) and entry.get("type") == "physical" and entry.get("mac_address"):
                    physical[str(entry["mac_address"]).lower()] = entry
        fallback = not isinstance(netcfg, dict)
        keys = sorted((k for k in self.config if re.fullmatch(r"net\d+", k)), key=lambda k: int(k[3:]))
        nics: list[_Nic] = []
        for key in keys:
            net = parse_net(key, self.config[key])
            if net is None:
                continue
            idx = int(key[3:])
            mac = net["macaddr"].lower()
            entry = physical.get(mac)
            link_down = net.get("link_down", "0") not in ("", "0")
            if entry is not None:
                subnets = tuple(s for s in entry.get("subnets") or [] if isinstance(s, dict))
                name = str(entry.get("name") or f"ens{18 + idx}")
            elif fallback and not nics:
                subnets, name = ({"type": "dhcp4"},), f"ens{18 + idx}"
            else:
                subnets, name = (), f"ens{18 + idx}"
            nics.append(_Nic(key, idx, name, mac, link_down, subnets))
        return nics

    def dhcp_address(self, index: int = 0) -> str:
        """The address the simulated DHCP server leases to NIC ``index`` of this VMID."""
        n = self.vmid % 62500
        return f"10.{10 + index}.{n // 250}.{n % 250 + 2}"

    @staticmethod
    def _eui64(prefix: str, mac: str) -> str:
        b = [int(x, 16) for x in mac.split(":")]
        iid = bytes([b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]])
        net = ipaddress.IPv6Network(prefix)
        return str(ipaddress.IPv6Address(int(net.network_address) | int.from_bytes(iid, "big")))

    def _addresses(self, nic: _Nic, now: float) -> list[dict[str, Any]]:
        v4: list[dict[str, Any]] = []
        v6: list[dict[str, Any]] = []
        leased = now >= self.dhcp_at and not nic.link_down
        for sub in nic.subnets:
            kind = sub.get("type")
            if kind == "static" and sub.get("address"):
                addr = str(sub["address"])
                prefix = ipaddress.IPv4Network(f"0.0.0.0/{sub.get('netmask', '255.255.255.0')}").prefixlen
                if "/" in addr:
                    addr, _sep, pfx = addr.partition("/")
                    prefix = int(pfx)
                v4.append({"ip-address-type": "ipv4", "ip-address": addr, "prefix": prefix})
            elif kind in ("dhcp", "dhcp4") and leased:
                v4.append({"ip-address-type": "ipv4", "ip-address": self.dhcp_address(nic.index), "prefix": 24})
            elif kind == "static6" and sub.get("address"):
                iface = ipaddress.IPv6Interface(str(sub["address"]))
                v6.append({"ip-address-type": "ipv6", "ip-address": str(iface.ip), "prefix": iface.network.prefixlen})
            elif kind == "dhcp6" and leased:
                addr = ipaddress.IPv6Address(f"fd00:10:{10 + nic.index}::{self.vmid % 65536:x}")
                v6.append({"ip-address-type": "ipv6", "ip-address": str(addr), "prefix": 128})
            elif kind == "ipv6_slaac" and leased:
                v6.append({"ip-address-type": "ipv6", "ip-address": self._eui64(f"fd00:10:{10 + nic.index}::/64", nic.mac), "prefix": 64})
        v6.append({"ip-address-type": "ipv6", "ip-address": self._eui64("fe80::/64", nic.mac), "prefix": 64})
        return v4 + v6

    @staticmethod
    def _stats(ticks: int, packets: int, size: int) -> dict[str, int]:
        rx = ticks * packets
        tx = ticks * max(1, packets - 1)
        return {
            "rx-bytes": rx * size, "rx-packets": rx, "rx-errs": 0, "rx-dropped": 0,
            "tx-bytes": tx * size // 2, "tx-packets": tx, "tx-errs": 0, "tx-dropped": 0,
        }

    # -- files ---------------------------------------------------------------------------------

    def _file(self, path: str) -> str | None:
        now = self.uptime()
        keys_at = _STAGES[1][2] * self.cloudinit_done_at
        for keytype in ("ed25519", "ecdsa", "rsa"):
            if path == f"/etc/ssh/ssh_host_{keytype}_key.pub":
                if now < keys_at:
                    return None
                return f"{host_public_keys(self.vmid, (keytype,))[keytype]} root@{self.hostname}\n"
        seed_names = {"user-data": "user", "meta-data": "meta", "network-config": "network", "vendor-data": "vendor"}
        if path.startswith("/var/lib/cloud/seed/nocloud/"):
            part = seed_names.get(path.rsplit("/", 1)[1])
            return self.seed.get(part) if part else None
        init_done = now >= keys_at
        if path == "/etc/hostname":
            return f"{self.hostname if init_done else IMAGE_DEFAULT_HOSTNAME}\n"
        if path == "/etc/hosts" and init_done and self.cloud_config.get("manage_etc_hosts") in (True, "template"):
            return _HOSTS_TMPL.format(fqdn=self.fqdn, hostname=self.hostname)
        if path in ("/var/lib/cloud/data/status.json", "/run/cloud-init/status.json"):
            v1 = self._status_v1(now)
            return None if v1 is None else json.dumps({"v1": v1}, indent=1, sort_keys=True, separators=(",", ": ")) + "\n"
        if path in ("/var/lib/cloud/data/result.json", "/run/cloud-init/result.json"):
            if now < self.cloudinit_done_at:
                return None
            v1 = self._status_v1(now) or {}
            errors = [e for stage in _STAGES for e in v1[stage[0]]["errors"]]
            body = {"v1": {"datasource": v1.get("datasource"), "errors": errors}}
            return json.dumps(body, indent=1, sort_keys=True, separators=(",", ": ")) + "\n"
        if path in ("/var/lib/cloud/data/instance-id", "/var/lib/cloud/instance/instance-id") and init_done:
            return f"{self.meta.get('instance-id', 'iid-datasource-none')}\n"
        if path == "/var/lib/cloud/instance/user-data.txt" and init_done:
            return self.seed.get("user", "")
        if path == "/var/lib/cloud/instance/vendor-data.txt" and init_done:
            return self.seed.get("vendor", "")
        if init_done and path.endswith("/.ssh/authorized_keys"):
            for user in self.users():
                if path == f"{user['home']}/.ssh/authorized_keys" and user["ssh_authorized_keys"]:
                    return "".join(f"{k}\n" for k in user["ssh_authorized_keys"])
        return None

    # -- cloud-init status ---------------------------------------------------------------------

    def _datasource(self) -> str:
        return "DataSourceNoCloud [seed=/dev/sr0]"

    def _status_v1(self, now: float) -> dict[str, Any] | None:
        done = self.cloudinit_done_at
        if now < _STAGES[0][1] * done:
            return None
        v1: dict[str, Any] = {"datasource": None, "stage": None}
        for name, start_frac, end_frac in _STAGES:
            start, end = round(start_frac * done, 2), round(end_frac * done, 2)
            stage: dict[str, Any] = {"errors": [], "recoverable_errors": {}, "start": None, "finished": None}
            if now >= start:
                stage["start"] = start
                if now >= end:
                    stage["finished"] = end
                    if name == "modules-final":
                        if self.faults.cloudinit_error:
                            stage["errors"] = [self.faults.cloudinit_error_message]
                        if self.faults.cloudinit_recoverable_error:
                            stage["recoverable_errors"] = {
                                "WARNING": ["Running module package_update_upgrade_install failed"]
                            }
                else:
                    v1["stage"] = name
            if name == "init" and stage["finished"] is not None:
                v1["datasource"] = self._datasource()
            v1[name] = stage
        return v1

    def _ci_details(self, now: float) -> dict[str, Any]:
        v1 = self._status_v1(now)
        done = now >= self.cloudinit_done_at
        if v1 is None:
            running = "not started"
            v1 = {}
        else:
            running = "done" if done else "running"
        errors: list[str] = []
        recoverable: dict[str, list[str]] = {}
        latest = 0.0
        for key in sorted(v1):
            info = v1[key]
            if isinstance(info, dict):
                errors.extend(info.get("errors", []))
                for kind, msgs in info.get("recoverable_errors", {}).items():
                    recoverable.setdefault(kind, []).extend(msgs)
                latest = max(latest, info.get("start") or 0, info.get("finished") or 0)
        condition = "error" if errors else ("degraded" if recoverable else "healthy")
        if condition == "error":
            status, extended = "error", f"error - {running}"
        elif condition == "degraded" and running in ("done", "running"):
            status, extended = running, f"degraded {running}"
        else:
            status, extended = running, running
        if v1.get("datasource"):
            detail = str(v1["datasource"])
        elif v1.get("stage"):
            detail = f"Running in stage: {v1['stage']}"
        else:
            detail = "Cloud-init enabled by systemd cloud-init-generator"
        last_update = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(latest)) if latest else ""
        exitcode = 1 if condition == "error" else (2 if condition == "degraded" else 0)
        return {
            "status": status, "extended_status": extended, "boot_status_code": "enabled-by-generator",
            "detail": detail, "errors": errors, "recoverable_errors": recoverable, "last_update": last_update,
            "running": running, "exitcode": exitcode,
        }

    @staticmethod
    def _ci_text(details: Mapping[str, Any], long: bool) -> str:
        out = f"status: {details['status']}\n"
        if not long:
            return out
        errors = "".join(f"\n\t- {e}" for e in details["errors"]) if details["errors"] else " []"
        if details["recoverable_errors"]:
            parts = [f"{k}:\n\t- " + "\n\t- ".join(m.replace("\n", " ") for m in v) for k, v in details["recoverable_errors"].items()]
            recoverable = "\n" + "\n".join(parts)
        else:
            recoverable = " {}"
        last = f"last_update: {details['last_update']}\n" if details["last_update"] else ""
        return (
            out + f"extended_status: {details['extended_status']}\nboot_status_code: {details['boot_status_code']}\n"
            f"{last}detail: {details['detail']}\nerrors:{errors}\nrecoverable_errors:{recoverable}\n"
        )

    # -- commands ------------------------------------------------------------------------------

    @staticmethod
    def _resolve(name: str) -> str | None:
        if "/" in name:
            base = name.rsplit("/", 1)[1]
            if name.rsplit("/", 1)[0] in _PATH_DIRS and base in _BINARIES:
                return base
            return None
        return name if name in _BINARIES else None

    def _run(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        prog = self._resolve(argv[0])
        handlers: dict[str, Callable[[list[str], dict[str, str], str | None, float], _Outcome]] = {
            "apt-get": self._cmd_apt_get,
            "cat": self._cmd_cat,
            "cloud-init": self._cmd_cloud_init,
            "dpkg-query": self._cmd_dpkg_query,
            "env": self._cmd_env,
            "false": lambda a, e, s, n: _Outcome(1),
            "hostname": lambda a, e, s, n: _Outcome(0, f"{self.hostname}\n"),
            "ssh-keygen": self._cmd_ssh_keygen,
            "true": lambda a, e, s, n: _Outcome(0),
        }
        if prog is None:
            return _Outcome(127, "", f"{argv[0]}: command not found\n")
        return handlers[prog](argv, env, stdin, now)

    def _cmd_env(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        new_env = dict(env)
        rest = argv[1:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        while rest and "=" in rest[0] and not rest[0].startswith("="):
            name, _sep, value = rest[0].partition("=")
            new_env[name] = value
            rest = rest[1:]
        if not rest:
            return _Outcome(0, "".join(f"{k}={v}\n" for k, v in new_env.items()))
        if self._resolve(rest[0]) is None:
            return _Outcome(127, "", f"{argv[0]}: \u2018{rest[0]}\u2019: No such file or directory\n")
        return self._run(rest, new_env, stdin, now)

    def _cmd_cat(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        files = [a for a in argv[1:] if a != "--"]
        if not files:
            return _Outcome(0, stdin or "")
        out, err, code = [], [], 0
        for path in files:
            text = stdin or "" if path == "-" else self._file(path)
            if text is None:
                err.append(f"cat: {path}: No such file or directory\n")
                code = 1
            else:
                out.append(text)
        return _Outcome(code, "".join(out), "".join(err))

    def _cmd_ssh_keygen(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        args = argv[1:]
        path: str | None = None
        fingerprint = False
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-l":
                fingerprint = True
            elif arg == "-f" and i + 1 < len(args):
                path = args[i + 1]
                i += 1
            elif arg.startswith("-f") and len(arg) > 2:
                path = arg[2:]
            elif arg == "-lf" and i + 1 < len(args):
                fingerprint, path = True, args[i + 1]
                i += 1
            elif arg == "-E" and i + 1 < len(args):
                if args[i + 1] != "sha256":
                    return _Outcome(255, "", "Invalid hash algorithm\n")
                i += 1
            else:
                return _Outcome(1, "", f"unknown option -- {arg.lstrip('-')[:1]}\n")
            i += 1
        if not fingerprint or path is None:
            return _Outcome(1, "", "usage: ssh-keygen -l [-v] [-E fingerprint_hash] [-f input_keyfile]\n")
        keypath = path if path.endswith(".pub") else f"{path}.pub"
        text = self._file(keypath)
        if text is None:
            return _Outcome(255, "", f"{path}: No such file or directory\n")
        out = []
        for line in text.splitlines():
            parts = line.split()
            ktype = {"ssh-ed25519": "ed25519", "ecdsa-sha2-nistp256": "ecdsa", "ssh-rsa": "rsa"}.get(parts[0] if parts else "")
            if ktype is None or len(parts) < 2:
                continue
            bits, label = _KEY_INFO[ktype]
            comment = " ".join(parts[2:]) or "no comment"
            out.append(f"{bits} {_fingerprint(line)} {comment} ({label})\n")
        if not out:
            return _Outcome(255, "", f"{path} is not a public key file.\n")
        return _Outcome(0, "".join(out))

    def _cmd_cloud_init(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        args = argv[1:]
        if not args or args[0] != "status":
            return _Outcome(2, "", "usage: /usr/bin/cloud-init [-h] [--version] [--debug] [--force] [--all-stages] {status,...} ...\n")
        long = wait = False
        i = 1
        while i < len(args):
            arg = args[i]
            if arg in ("-l", "--long"):
                long = True
            elif arg in ("-w", "--wait"):
                wait = True
            elif arg in ("-lw", "-wl"):
                long = wait = True
            elif arg == "--format" and i + 1 < len(args) and args[i + 1] == "tabular":
                i += 1
            elif arg == "--format=tabular":
                pass
            else:
                return _Outcome(2, "", f"usage: /usr/bin/cloud-init status [-h] [--format {{json,tabular,yaml}}] [-l] [-w]\n"
                                f"/usr/bin/cloud-init status: error: unrecognized arguments: {arg}\n")
            i += 1
        dots = ""
        at = now
        if wait:
            done = self.cloudinit_done_at
            polls = max(0, math.ceil((done - now) / 0.25)) if now < done else 0
            dots = "." * polls
            at = now + polls * 0.25
        details = self._ci_details(at)
        return _Outcome(details["exitcode"], dots + self._ci_text(details, long), duration=(at - now) + self.timing.exec_default)

    # dpkg-query -------------------------------------------------------------------------------

    def _dpkg_field(self, name: str, field_name: str) -> str:
        version = self.installed[name]
        values = {
            "Package": name, "binary:Package": name, "Version": version, "Architecture": "amd64",
            "db:Status-Abbrev": "ii ", "Status": "install ok installed", "db:Status-Want": "install",
            "db:Status-Status": "installed", "db:Status-Eflag": "ok",
        }
        return values.get(field_name, "")

    def _dpkg_format(self, fmt: str, name: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(fmt):
            ch = fmt[i]
            if ch == "\\" and i + 1 < len(fmt):
                out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}.get(fmt[i + 1], fmt[i + 1]))
                i += 2
            elif fmt.startswith("${", i) and "}" in fmt[i:]:
                end = fmt.index("}", i)
                spec = fmt[i + 2:end]
                fname, _sep, width = spec.partition(";")
                value = self._dpkg_field(name, fname)
                if width.lstrip("-").isdigit():
                    w = int(width)
                    value = value.ljust(-w) if w < 0 else value.rjust(w)
                out.append(value)
                i = end + 1
            else:
                out.append(ch)
                i += 1
        return "".join(out)

    def _cmd_dpkg_query(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        args = argv[1:]
        fmt = "${binary:Package}\t${Version}\n"
        show = False
        names: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                names.extend(args[i + 1:])
                break
            if arg in ("-W", "--show"):
                show = True
            elif arg in ("-f", "--showformat"):
                if i + 1 >= len(args):
                    return _Outcome(2, "", "dpkg-query: error: --showformat needs a value\n")
                fmt = args[i + 1]
                i += 1
            elif arg.startswith("--showformat="):
                fmt = arg[len("--showformat="):]
            elif arg.startswith("-f"):
                fmt = arg[2:]  # dpkg's short options take the rest of the word: -f=X means "=X"
            elif arg.startswith("-W") and arg[2:].startswith("f"):
                show, fmt = True, arg[3:]
            elif arg.startswith("-"):
                return _Outcome(2, "", f"dpkg-query: error: unknown option {arg}\n\nUse --help for help about querying packages.\n")
            else:
                names.append(arg)
            i += 1
        if not show:
            return _Outcome(2, "", "dpkg-query: error: need an action option\n\nUse --help for help about querying packages.\n")
        matched: set[str] = set()
        unmatched: list[str] = []
        for pattern in names:
            found = {n for n in self.installed if re.fullmatch(_glob_to_re(pattern), n)}
            if not found:
                unmatched.append(pattern)
            matched |= found
        if not names:
            matched = set(self.installed)
        out = "".join(self._dpkg_format(fmt, n) for n in sorted(matched))
        err = "".join(f"dpkg-query: no packages found matching {p}\n" for p in unmatched)
        return _Outcome(1 if unmatched else 0, out, err)

    # apt-get ----------------------------------------------------------------------------------

    def _apt_lock_holder(self, now: float) -> int | None:
        start, end = self._cloudinit_apt_window()
        if start <= now < end:
            return CLOUDINIT_APT_PID
        for pid, proc in self._procs.items():
            if proc.apt_lock and proc.start <= now < proc.end:
                return pid
        return None

    def _available(self, name: str) -> list[str]:
        offered = self.faults.package_versions[name] if name in self.faults.package_versions else load_index().get(name, ())
        versions = list(offered) if self._lists_fresh else []
        if name in self.installed and self.installed[name] not in versions:
            versions.append(self.installed[name])
        return sorted(set(versions), key=functools.cmp_to_key(dpkg_version_compare))

    def _cmd_apt_get(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> _Outcome:
        args = argv[1:]
        action: str | None = None
        names: list[str] = []
        quiet = 0
        allow_downgrades = False
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                names.extend(args[i + 1:])
                break
            if arg in ("-y", "--yes", "--assume-yes", "--no-install-recommends", "--no-install-suggests", "-m", "--fix-missing"):
                pass
            elif arg in ("-q", "--quiet"):
                quiet += 1
            elif arg == "-qq":
                quiet += 2
            elif arg == "--allow-downgrades":
                allow_downgrades = True
            elif arg == "-o" and i + 1 < len(args):
                i += 1
            elif arg.startswith("-o") or arg.startswith("--option="):
                pass
            elif arg.startswith("-"):
                return _Outcome(100, "", f"E: Command line option '{arg}' is not understood in combination with the other options\n")
            elif action is None:
                action = arg
            else:
                names.append(arg)
            i += 1
        reading = "" if quiet >= 2 else "Reading package lists...\n"
        if action == "update":
            holder = self._apt_lock_holder(now)
            if holder is not None:
                return _Outcome(100, "", f"E: Could not get lock /var/lib/apt/lists/lock. It is held by process {holder} (apt-get)\n"
                                "E: Unable to lock directory /var/lib/apt/lists/\n", duration=0.3)
            out = "" if quiet >= 2 else (
                "Hit:1 http://deb.debian.org/debian trixie InRelease\n"
                "Hit:2 http://deb.debian.org/debian trixie-updates InRelease\n"
                "Hit:3 http://deb.debian.org/debian-security trixie-security InRelease\n" + reading
            )

            def refreshed() -> None:
                self._lists_fresh = True

            return _Outcome(0, out, duration=self.timing.apt_update, effect=refreshed, apt_lock=True)
        if action != "install":
            if action is None:
                return _Outcome(1, "apt 3.0.3 (amd64)\nUsage: apt-get [options] command\n", duration=0.1)
            return _Outcome(100, "", f"E: Invalid operation {action}\n", duration=0.1)
        holder = self._apt_lock_holder(now)
        if holder is not None:
            return _Outcome(100, "", f"E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process {holder} (apt-get)\n"
                            "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?\n",
                            duration=0.3)
        header = "" if quiet >= 2 else reading + "Building dependency tree...\nReading state information...\n"
        errors: list[str] = []
        plan: list[tuple[str, str, str | None]] = []  # (name, target version, old version)
        for spec in names:
            name, sep, version = spec.partition("=")
            available = self._available(name)
            if not available:
                errors.append(f"E: Unable to locate package {name}\n")
                continue
            if sep:
                if version not in available:
                    errors.append(f"E: Version '{version}' for '{name}' was not found\n")
                    continue
                target = version
            else:
                target = available[-1]
            plan.append((name, target, self.installed.get(name)))
        if errors:
            return _Outcome(100, header, "".join(errors), duration=0.5)
        new = [(n, v) for n, v, old in plan if old is None]
        up = [(n, v) for n, v, old in plan if old is not None and dpkg_version_compare(v, old) > 0]
        down = [(n, v) for n, v, old in plan if old is not None and dpkg_version_compare(v, old) < 0]
        same = [(n, v) for n, v, old in plan if old is not None and dpkg_version_compare(v, old) == 0]
        lines = [header] if header else []
        lines += [f"{n} is already the newest version ({v}).\n" for n, v in same]
        if up:
            lines.append("The following packages will be upgraded:\n  " + " ".join(n for n, _version in up) + "\n")
        if new:
            lines.append("The following NEW packages will be installed:\n  " + " ".join(n for n, _version in new) + "\n")
        if down:
            lines.append("The following packages will be DOWNGRADED:\n  " + " ".join(n for n, _version in down) + "\n")
        lines.append(f"{len(up)} upgraded, {len(new)} newly installed, {len(down)} downgraded, 0 to remove and 0 not upgraded.\n")
        if down and not allow_downgrades:
            return _Outcome(100, "".join(lines) if quiet < 2 else "", "E: Packages were downgraded and -y was used without --allow-downgrades.\n",
                            duration=0.5)
        changes = new + up + down
        if not changes:
            return _Outcome(0, "".join(lines) if quiet < 2 else "", duration=0.5)
        for n, v in changes:
            lines.append(f"Unpacking {n} ({v}) ...\n")
        for n, v in changes:
            lines.append(f"Setting up {n} ({v}) ...\n")

        def install() -> None:
            for n, v in changes:
                self.installed[n] = v

        return _Outcome(0, "".join(lines) if quiet < 2 else "", duration=self.timing.apt_install, effect=install, apt_lock=True)


def _glob_to_re(pattern: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


_HOSTS_TMPL = """# Your system has configured 'manage_etc_hosts' as True.
# As a result, if you wish for changes to this file to persist
# then you will need to either
# a.) make changes to the master file in /etc/cloud/templates/hosts.debian.tmpl
# b.) change or remove the value of 'manage_etc_hosts' in
#     /etc/cloud/cloud.cfg or cloud-config from user-data
#
127.0.1.1 {fqdn} {hostname}
127.0.0.1 localhost

# The following lines are desirable for IPv6 capable hosts
::1 localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters
"""
