# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""PVE's named string formats (pve-configid, pve-volume-id, ip, CIDR, ...) and the named property-string formats, as
pve-common's JSONSchema defines them: what the request validator checks a format against.
"""

from __future__ import annotations

import ipaddress
import re
import typing as t

# Upper bounds (exclusive) of indexed properties, from qemu-server / pve-container / pve-manager.
INDEX_MAX: dict[str, int] = {
    "net": 32,
    "ipconfig": 32,
    "hostpci": 16,
    "usb": 14,
    "numa": 8,
    "unused": 256,
    "virtiofs": 10,
    "mp": 256,
    "dev": 256,
    "link": 8,
    "acmedomain": 5,
    "ide": 4,
    "sata": 6,
    "scsi": 31,
    "virtio": 16,
    "serial": 4,
    "parallel": 3,
}


_CONFIGID_RE = re.compile(r"[a-z][a-z0-9_-]+", re.I)


_TAG_RE = re.compile(r"[a-z0-9_][a-z0-9_\-+.]*", re.I)


_DNS_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)"


_DNS_RE = re.compile(rf"({_DNS_LABEL}\.)*{_DNS_LABEL}")


_EMAIL_USER = r"[\w+\-~]+(\.[\w+\-~]+)*"


_EMAIL_RE = re.compile(rf"{_EMAIL_USER}@[a-zA-Z0-9\-]+(\.[a-zA-Z0-9\-]+)*")


_DRIVE_RE = re.compile(r"(ide[0-3]|sata[0-5]|scsi([0-9]|[12][0-9]|30)|virtio([0-9]|1[0-5])|efidisk0|tpmstate0)")


class FormatError(ValueError):
    """A value does not satisfy a named format (message is PVE's ``die`` text)."""


def _parse_size(value: str) -> int | None:
    m = re.fullmatch(r"(\d+(\.\d+)?)([KMGT](?:iB)?)?", value)
    if not m:
        return None
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    unit = (m.group(3) or "")[:1]
    return int(float(m.group(1)) * mult.get(unit, 1))


def _fail(msg: str) -> t.NoReturn:
    raise FormatError(msg + "\n")


def _is_ipv4(v: str) -> bool:
    try:
        ipaddress.IPv4Address(v)
        return True
    except ValueError:
        return False


def _is_ipv6(v: str) -> bool:
    try:
        ipaddress.IPv6Address(v)
        return "%" not in v
    except ValueError:
        return False


def _cidr(v: str, version: int) -> bool:
    addr, sep, bits = v.partition("/")
    if not sep or not bits.isdigit():
        return False
    n = int(bits)
    if version == 4:
        return _is_ipv4(addr) and 7 < n <= 32
    return _is_ipv6(addr) and 7 < n <= 128


def _id_check(kind: str) -> t.Callable[[str], None]:
    def check(v: str) -> None:
        if len(v) < 2:
            _fail(f"{kind} ID '{v}' cannot be shorter than 2 characters")
        if not re.fullmatch(r"[a-z][a-z0-9\-_.]*[a-z0-9]", v, re.I):
            _fail(f"{kind} ID '{v}' contains illegal characters")

    return check


def _re_check(regex: str, msg: str, flags: int = 0) -> t.Callable[[str], None]:
    compiled = re.compile(regex, flags)

    def check(v: str) -> None:
        if not compiled.fullmatch(v):
            _fail(msg.replace("{v}", v))

    return check


def _pred_check(pred: t.Callable[[str], bool], msg: str) -> t.Callable[[str], None]:
    def check(v: str) -> None:
        if not pred(v):
            _fail(msg.replace("{v}", v))

    return check


def _check_volume_id(v: str) -> None:
    if not re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)", v, re.I):
        _fail(f"unable to parse volume ID '{v}'")


def _check_volume_or_path(v: str) -> None:
    if v.startswith("/") or v in ("none", "cdrom"):
        return
    if re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(.+)", v, re.I):
        return
    _fail(f"invalid drive path '{v}'")


def _check_bootdev(v: str) -> None:
    if _DRIVE_RE.fullmatch(v) and not v.startswith(("efidisk", "tpmstate")):
        return
    m = re.fullmatch(r"(net|usb|hostpci)(\d+)", v)
    if m and int(m.group(2)) < INDEX_MAX[m.group(1)]:
        return
    _fail(f"invalid boot device '{v}'")


def _check_userid(v: str) -> None:
    if len(v) > 64 or not re.fullmatch(r"[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+", v):
        _fail("value does not look like a valid user ID")


def _check_tokenid(v: str) -> None:
    if not re.fullmatch(r"[^\s:/]+@[A-Za-z][A-Za-z0-9.\-_]+![A-Za-z][A-Za-z0-9.\-_]+", v):
        _fail("value does not look like a valid token ID")


FORMAT_CHECKS: dict[str, t.Callable[[str], None]] = {
    "string": lambda v: None,
    "urlencoded": _re_check(r"[-%a-zA-Z0-9_.!~*'()]*", "invalid urlencoded string: {v}"),
    "pve-configid": _re_check(_CONFIGID_RE.pattern, "invalid configuration ID '{v}'", re.I),
    "pve-storage-id": _id_check("storage"),
    "pve-bridge-id": _re_check(r"[-_.\w\d]+", "invalid bridge ID '{v}'"),
    "pve-vmid": _re_check(r"[1-9][0-9]{2,8}", "value does not look like a valid VM ID"),
    "pve-node": _re_check(r"([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?)", "value does not look like a valid node name"),
    "pve-poolid": _re_check(r"[A-Za-z0-9_\-]+(/[A-Za-z0-9_\-]+){0,2}", "invalid pool ID '{v}'"),
    "pve-tag": _re_check(_TAG_RE.pattern, "invalid characters in tag", re.I),
    "pve-realm": _re_check(r"[A-Za-z][A-Za-z0-9.\-_]+", "value '{v}' does not look like a valid realm"),
    "pve-userid": _check_userid,
    "pve-tokenid": _check_tokenid,
    "pve-roleid": _re_check(r"[A-Za-z0-9.\-_]+", "role name '{v}' contains invalid characters"),
    "pve-groupid": _re_check(r"[-_.a-zA-Z0-9]+", "group name '{v}' contains invalid characters"),
    "pve-priv": _re_check(r"[A-Za-z.]+", "invalid privilege name '{v}'"),
    "pve-sdn-zone-id": _id_check("zone"),
    "pve-sdn-vnet-id": _id_check("vnet"),
    "pve-iface": _re_check(r"[a-zA-Z][a-zA-Z0-9_]{1,20}([:.]\d+)?", "invalid network interface name '{v}'"),
    "mac-addr": _re_check(
        r"[a-f0-9][02468ace](?::[a-f0-9]{2}){5}", "value does not look like a valid unicast MAC address", re.I
    ),
    "ipv4": _pred_check(_is_ipv4, "value does not look like a valid IPv4 address"),
    "ipv6": _pred_check(_is_ipv6, "value does not look like a valid IPv6 address"),
    "ip": _pred_check(lambda v: _is_ipv4(v) or _is_ipv6(v), "value does not look like a valid IP address"),
    "CIDRv4": _pred_check(lambda v: _cidr(v, 4), "value does not look like a valid IPv4 CIDR network"),
    "CIDRv6": _pred_check(lambda v: _cidr(v, 6), "value does not look like a valid IPv6 CIDR network"),
    "CIDR": _pred_check(lambda v: _cidr(v, 4) or _cidr(v, 6), "value does not look like a valid CIDR network"),
    "IPorCIDR": _pred_check(
        lambda v: _is_ipv4(v) or _is_ipv6(v) or _cidr(v, 4) or _cidr(v, 6),
        "value does not look like a valid IP address or CIDR network",
    ),
    "pve-ipv4-config": _pred_check(
        lambda v: v in ("dhcp", "manual") or _cidr(v, 4), "value does not look like a valid ipv4 network configuration"
    ),
    "pve-ipv6-config": _pred_check(
        lambda v: v in ("auto", "dhcp", "manual") or _cidr(v, 6),
        "value does not look like a valid ipv6 network configuration",
    ),
    "email": _re_check(_EMAIL_RE.pattern, "value does not look like a valid email address"),
    "email-or-username": _pred_check(
        lambda v: bool(_EMAIL_RE.fullmatch(v) or re.fullmatch(_EMAIL_USER, v)),
        "value does not look like a valid email address or user name",
    ),
    "dns-name": _re_check(_DNS_RE.pattern, "value does not look like a valid DNS name"),
    "address": _pred_check(
        lambda v: _is_ipv4(v) or _is_ipv6(v) or bool(_DNS_RE.fullmatch(v)),
        "value does not look like a valid address: {v}",
    ),
    "disk-size": _pred_check(lambda v: _parse_size(v) is not None, "value does not look like a valid disk size: {v}"),
    "pve-volume-id": _check_volume_id,
    "pve-volume-id-or-qm-path": _check_volume_or_path,
    "pve-volume-id-or-absolute-path": _check_volume_or_path,
    "pve-qm-bootdev": _check_bootdev,
    "pve-qm-bootdisk": _pred_check(lambda v: bool(_DRIVE_RE.fullmatch(v)), "invalid drive name '{v}'"),
    "pve-storage-content": _re_check(
        r"images|rootdir|vztmpl|iso|backup|snippets|import|none", "invalid content type '{v}'"
    ),
    "pve-task-status-type": _re_check(r"ok|error|warning|unknown", "invalid status '{v}'"),
}


# property-string ("hash") formats that the schema only names
NAMED_HASH_FORMATS: dict[str, dict[str, dict[str, t.Any]]] = {
    "pve-qm-ipconfig": {
        "ip": {"type": "string", "format": "pve-ipv4-config", "optional": 1},
        "gw": {"type": "string", "format": "ipv4", "optional": 1},
        "ip6": {"type": "string", "format": "pve-ipv6-config", "optional": 1},
        "gw6": {"type": "string", "format": "ipv6", "optional": 1},
    },
    "pve-qm-boot": {
        "legacy": {"type": "string", "pattern": "[acdn]{1,4}", "default_key": 1, "optional": 1},
        "order": {"type": "string", "format": "pve-qm-bootdev-list", "optional": 1},
    },
    "pve-qm-cicustom": {
        key: {"type": "string", "format": "pve-volume-id", "optional": 1}
        for key in ("meta", "network", "user", "vendor")
    },
    "pve-vm-cpu-conf": {
        "cputype": {"type": "string", "default_key": 1, "optional": 1, "pattern": r"[\w\-.+]+"},
        "flags": {"type": "string", "optional": 1, "pattern": r"(?:[+-][a-zA-Z0-9\-_.]+;)*[+-][a-zA-Z0-9\-_.]+"},
        "hidden": {"type": "boolean", "optional": 1},
        "hv-vendor-id": {"type": "string", "optional": 1, "pattern": r"[a-zA-Z0-9]{1,12}"},
        "phys-bits": {"type": "string", "optional": 1, "pattern": r"(\d+|host)"},
        "guest-phys-bits": {"type": "integer", "optional": 1, "minimum": 32, "maximum": 64},
        "reported-model": {"type": "string", "optional": 1},
    },
}
