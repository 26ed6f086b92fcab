# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Helpers shared by the guest stages (cloudinit, seed, start, readiness, packages, snapshot).

Reads of the target (config with digest, power state, pending changes), the identity check that
binds the VM to its operation, the ``sshkeys`` encoding PVE expects, and host key lines. Guest
commands (``agent/exec``) run through the runner's helper, ``StageContext.guest_exec`` (``_stage.py``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import typing as t
from urllib.parse import quote, unquote

from .._api import pveconfig as _pveconfig
from .._operation.create import instance_tag
from . import common
from .protocol import StageContext
from .outcomes import StageError

# The clone stage records the clone's net0 MAC (upper-cased) as ``macaddr``.
MAC_EVIDENCE_KEY = "macaddr"
_MAC = re.compile(r"\A[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}\Z")
_DRIVE_KEY = re.compile(r"\A(ide|sata|scsi|virtio)\d+\Z")


# -- reads ------------------------------------------------------------------------------------------
def read_config(ctx: StageContext) -> dict[str, t.Any]:
    """``GET {vm}/config`` (the current values, with ``digest``)."""
    data = _pveconfig.read_config(ctx.client, ctx.vm_path)
    if not isinstance(data.get("digest"), str):
        raise StageError("Proxmox answered the VM configuration with an unexpected body.", code="unexpected_response")
    return data


def read_power(ctx: StageContext) -> str:
    """``GET {vm}/status/current`` -> ``running`` / ``stopped`` / ..."""
    return str(_pveconfig.read_status(ctx.client, ctx.vm_path).get("status"))


def latest_digest(ctx: StageContext) -> str | None:
    """The config digest recorded last by an earlier stage."""
    value = ctx.earlier_evidence("digest")
    return value if isinstance(value, str) else None


def parse_property_string(value: str, default_key: str = "model") -> dict[str, str]:
    return _pveconfig.parse_property_string(value, default_key)


def net0_mac_bridge(config: t.Mapping[str, t.Any]) -> tuple[str | None, str | None]:
    """(MAC upper-cased, bridge) of ``net0``."""
    return _pveconfig.net_macaddr(config.get("net0")), _pveconfig.net_bridge(config.get("net0"))


def clone_mac(ctx: StageContext) -> str:
    """The clone's net0 MAC as the clone stage recorded it (``KeyError`` when not recorded yet)."""
    value = ctx.earlier_evidence(MAC_EVIDENCE_KEY)
    if isinstance(value, str) and _MAC.match(value):
        return value.upper()
    raise KeyError("net0 MAC")


def cloudinit_drive(config: t.Mapping[str, t.Any], vmid: int) -> str | None:
    """The key of the target's own Cloud-Init drive (a volume named ``vm-<vmid>-cloudinit``), if any."""
    pattern = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*:(?:%d/)?vm-%d-cloudinit(?:\.[a-z0-9]+)?\Z" % (vmid, vmid))
    for key in sorted(config):
        value = config[key]
        if _DRIVE_KEY.match(key) and isinstance(value, str):
            volume = value.split(",", 1)[0]
            if pattern.match(volume) and "media=cdrom" in value.split(","):
                return key
    return None


def check_identity(ctx: StageContext, config: t.Mapping[str, t.Any]) -> None:
    """The VM is the clone of this operation: its description binds it exactly and it carries the instance tag."""
    if not common.is_ours(ctx, config) or instance_tag(ctx.operation["operationId"]) not in _pveconfig.tag_list(
        config.get("tags")
    ):
        raise StageError(
            "The target VM is not the clone of this operation (description or tag differs); nothing was sent.",
            details={"stage": ctx.kind, "rule": "clone_identity"},
        )


def require_stopped_settled(ctx: StageContext) -> dict[str, t.Any]:
    """Identity (description and tag), unlocked, ``stopped``, no pending change and the digest recorded last."""
    config = common.require_clone_identity(ctx, stopped=True, no_pending=True)
    check_identity(ctx, config)
    common.require_digest(ctx, config)
    if not isinstance(config.get("digest"), str):  # pragma: no cover - require_digest compared it with a string
        raise StageError("Proxmox answered the VM configuration with an unexpected body.", code="unexpected_response")
    return config


# -- sshkeys ----------------------------------------------------------------------------------------
def encode_sshkeys(keys: t.Sequence[str]) -> str:
    """The keys joined by newlines, percent-encoded except RFC 3986 unreserved characters.

    PVE decodes ``sshkeys`` with ``uri_unescape`` (``%XX`` only; a literal ``+`` stays ``+``), so
    ``+`` (frequent in base64) and space are encoded too.
    """
    return quote("\n".join(keys), safe="")


def decode_sshkeys(value: str) -> list[str]:
    """What PVE writes into the seed: ``%XX`` decoded, lines without a non-blank character dropped."""
    text = unquote(value, errors="strict")
    return [line for line in text.split("\n") if line.strip()]


# -- hashes and keys --------------------------------------------------------------------------------
def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ssh_fingerprint(key_line: str) -> str:
    """``SHA256:<base64 of sha256(blob), no padding>`` like ``ssh-keygen -l``."""
    parts = key_line.split()
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (IndexError, binascii.Error, ValueError):
        raise ValueError("not an OpenSSH public key line") from None
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def known_hosts_line(address: str, key_line: str) -> str:
    """``<ip> <keytype> <base64>`` (the key's comment is dropped)."""
    parts = key_line.split()
    if len(parts) < 2:
        raise ValueError("not an OpenSSH public key line")
    return "%s %s %s" % (address, parts[0], parts[1])
