# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a real guest needs before QEMU starts: the accelerator, the image, sizes, the boot disk, the user-mode network,
and the process plumbing (free ports, parent-death signal, liveness)."""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import re
import signal
import socket
import typing as t
from collections.abc import Mapping

from . import cloudinit

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class GuestImageError(Exception):
    """The guest image directory is missing or incomplete, or QEMU cannot run."""


def detect_accel(requested: str = "auto") -> tuple[str, str]:
    """``(accel, reason)``: ``kvm`` only with a real KVM module (``kvm_intel``/``kvm_amd``) loaded.

    ``/dev/kvm`` alone is not enough: nested software hypervisors (e.g. ``kvm_pvm``) provide it,
    and stock guest kernels hang on them.
    """
    if requested == "tcg":
        return "tcg", "requested"
    modules = [m for m in ("kvm_intel", "kvm_amd") if os.path.isdir(f"/sys/module/{m}")]
    usable = os.path.exists("/dev/kvm") and os.access("/dev/kvm", os.R_OK | os.W_OK)
    if requested == "kvm":
        if not usable:
            raise GuestImageError("--guest-accel kvm: /dev/kvm is not usable")
        return "kvm", "requested"
    if usable and modules:
        return "kvm", f"/dev/kvm with {modules[0]}"
    if usable:
        others = (
            sorted(m for m in os.listdir("/sys/module") if m.startswith("kvm")) if os.path.isdir("/sys/module") else []
        )
        return "tcg", f"/dev/kvm present but no kvm_intel/kvm_amd module (found: {', '.join(others) or 'none'})"
    return "tcg", "no usable /dev/kvm"


def load_image(image_dir: str) -> dict[str, t.Any]:
    """Read and check ``image.json`` of a ``build.sh`` output directory."""
    path = os.path.abspath(image_dir)
    meta_file = os.path.join(path, "image.json")
    if not os.path.isfile(meta_file):
        raise GuestImageError(
            f"guest image directory {path} has no image.json; build it with tools/guest-image/build.sh"
        )
    with open(meta_file, encoding="utf-8") as fh:
        meta = json.load(fh)
    for key in ("disk", "kernel", "initrd"):
        file = os.path.join(path, str(meta.get(key, "")))
        if not meta.get(key) or not os.path.isfile(file):
            raise GuestImageError(
                f"guest image {path}: {key} file missing ({meta.get(key)!r}); rebuild with tools/guest-image/build.sh"
            )
        meta[f"{key}_path"] = file
    meta["dir"] = path
    return meta


def parse_size(value: str) -> int:
    """PVE disk size (``8G``, ``512M``, bare number = bytes... PVE: K by default in some places) to bytes."""
    m = _SIZE_RE.match(value.strip().upper())
    if not m:
        raise ValueError(f"bad size {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _kv(value: str, first: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, part in enumerate(value.split(",")):
        k, sep, v = part.partition("=")
        if not sep:
            out[first if i == 0 else k] = k
        elif i == 0 and first == "model" and k in ("virtio", "e1000", "e1000e", "rtl8139", "vmxnet3"):
            out["model"], out["macaddr"] = k, v
        else:
            out[k] = v
    return out


BOOT_DISK_KEYS = ("scsi0", "virtio0", "sata0", "ide0")


def _boot_disk(config: Mapping[str, str]) -> str | None:
    for key in BOOT_DISK_KEYS:
        value = config.get(key)
        if value and "media=cdrom" not in value:
            return value
    return None


def boot_volume(config: Mapping[str, str]) -> str | None:
    """The volume ID of the disk the guest boots from (the first of scsi0, virtio0, sata0, ide0 that is no CD)."""
    value = _boot_disk(config)
    return value.split(",", 1)[0] if value else None


def slirp_network(config: Mapping[str, str]) -> tuple[list[str], str]:
    """(slirp ``-netdev user`` options, the guest address SSH is forwarded to) for ``ipconfig0``.

    DHCP or none: slirp's defaults (10.0.2.0/24, the guest at 10.0.2.15). A static ``ip=A/P[,gw=G]``:
    ``net`` = A's network, ``host`` = G (when inside it), ``dns`` = the network-config's first nameserver
    (when inside it and not G), so the static configuration cloud-init writes is the one that works.
    """
    ipconfig = cloudinit.parse_ipconfig(config["ipconfig0"]) if config.get("ipconfig0") else None
    ip = (ipconfig or {}).get("ip")
    if not ip or ip == "dhcp":
        return [], "10.0.2.15"
    try:
        iface = ipaddress.IPv4Interface(ip)
    except ValueError:
        return [], "10.0.2.15"
    opts = [f"net={iface.network}"]
    gateway = (ipconfig or {}).get("gw")
    try:
        gw = ipaddress.IPv4Address(gateway) if gateway else None
    except ValueError:
        gw = None
    if gw is not None and gw in iface.network and gw != iface.ip:
        opts.append(f"host={gw}")
    for ns in cloudinit.nameservers(config)[:1]:
        try:
            dns = ipaddress.IPv4Address(ns)
        except ValueError:
            continue
        if dns in iface.network and dns not in (gw, iface.ip):
            opts.append(f"dns={dns}")
    return opts, str(iface.ip)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _set_pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setpgrp()  # keep terminal SIGINTs (Ctrl-C) away from QEMU: the server stops it itself


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
