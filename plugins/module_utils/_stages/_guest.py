# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Helpers shared by the guest stages (cloudinit, seed, start, readiness, packages, snapshot).

Reads of the target (config with digest, power state, pending changes), the identity check that
binds the VM to its operation, the ``sshkeys`` encoding PVE expects, and the guest agent's
``exec``/``exec-status`` pair with every PID journaled before it is polled.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
import typing as t
from urllib.parse import quote, unquote

from ansible_collections.vmanyware.proxmox.plugins.module_utils import _pveconfig
from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import ProviderError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import instance_tag
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import StageContext, StageError, StageInProgress, StageUncertain
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import common

# The clone stage records the clone's net0 MAC (upper-cased) as ``macaddr``.
MAC_EVIDENCE_KEY = "macaddr"
_MAC = re.compile(r"\A[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}\Z")
_DRIVE_KEY = re.compile(r"\A(ide|sata|scsi|virtio)\d+\Z")


def wall_clock() -> float:
    """Epoch seconds: deadlines persisted in the journal must survive the process (monotonic clocks do not)."""
    return time.time()


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
    if not common.is_ours(ctx, config) or instance_tag(ctx.operation["operationId"]) not in _pveconfig.tag_list(config.get("tags")):
        raise StageError("The target VM is not the clone of this operation (description or tag differs); nothing was sent.",
                         details={"stage": ctx.kind, "rule": "clone_identity"})


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


# -- guest agent ------------------------------------------------------------------------------------
def agent_reason(err: ProviderError) -> str | None:
    """The fixed token ``_client`` derived from a guest agent failure (``not_running``, ``exec_disabled``...)."""
    return t.cast("str | None", err.details.get("agent"))


def exec_unavailable(ctx: StageContext) -> StageError:
    return StageError("The guest agent refuses guest-exec; enable it in the guest's qemu-guest-agent configuration.",
                      code="guest_exec_unavailable", details={"stage": ctx.kind})


# Codes after which an exec may or may not have started in the guest (a 500 is Proxmox's definite answer).
_EXEC_AMBIGUOUS = frozenset({"reply_lost", "unexpected_response"})


def _exec_summary(ctx: StageContext, probe: str, argv: t.Sequence[str]) -> dict[str, t.Any]:
    return {"method": "POST", "path": ctx.vm_path + "/agent/exec", "params": {"command": list(argv)}, "probe": probe}


def exec_lost(ctx: StageContext, probe: str, argv: t.Sequence[str]) -> StageUncertain:
    """The stage's uncertainty about an exec that may have started in the guest: it is never issued again."""
    return StageUncertain("reply_lost", "The reply to the guest-agent exec of %s was lost, so whether it ran in the guest is unknown; "
                          "it is not repeated. Check the guest, then abandon the operation or record the outcome." % probe,
                          _exec_summary(ctx, probe, argv))


def start_exec(ctx: StageContext, argv: t.Sequence[str], slot: str, probe: str) -> int:
    """``POST {vm}/agent/exec`` with ``command`` as an argument array (no shell); returns the guest PID.

    The started marker ``{slot: {probe, pid: null, submissionStarted: true}}`` is journaled before the exec and
    the PID right after it, so a reply lost in between (or a crash) is seen by the next run and never re-issued.
    """
    marker = {"probe": probe, "pid": None, "submissionStarted": True, "issuedAt": round(wall_clock(), 3)}
    record(ctx, {slot: marker})
    try:
        data = ctx.client.post(ctx.vm_path + "/agent/exec", command=list(argv))
    except ProviderError as err:
        if err.code in _EXEC_AMBIGUOUS or (err.code == "server_error" and err.details.get("status") != 500 and agent_reason(err) is None):
            raise exec_lost(ctx, probe, argv) from None
        record(ctx, {slot: None})  # a definite answer: nothing started in the guest
        if agent_reason(err) == "exec_disabled":
            raise exec_unavailable(ctx) from None
        raise
    if not isinstance(data, dict) or not isinstance(data.get("pid"), int) or isinstance(data.get("pid"), bool):
        raise exec_lost(ctx, probe, argv)
    pid = t.cast(int, data["pid"])
    record(ctx, {slot: dict(marker, pid=pid)})
    return pid


def journaled_pid(ctx: StageContext, slot: str, probe: str, argv: t.Sequence[str]) -> int | None:
    """The PID of the exec journaled in ``slot``; ``None`` when none was started; an exec started without a PID is uncertain."""
    marker = ctx.evidence().get(slot)
    if not isinstance(marker, dict) or marker.get("probe") != probe:
        return None
    pid = marker.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        return pid
    if marker.get("submissionStarted"):
        raise exec_lost(ctx, probe, argv)
    return None


def exec_status(ctx: StageContext, pid: int) -> dict[str, t.Any] | None:
    """One ``GET {vm}/agent/exec-status``: None while running, else ``{exitcode, out, err}``.

    An exited status can be read once (QGA forgets it); ``ProviderError`` with ``agent=unknown_pid``
    tells the caller it was consumed (or never existed).
    """
    data = ctx.client.get(ctx.vm_path + "/agent/exec-status", pid=pid)
    if not isinstance(data, dict) or "exited" not in data:
        raise StageError("The guest agent answered exec-status with an unexpected body.", code="unexpected_response")
    if not data["exited"]:
        return None
    exitcode = data.get("exitcode")
    return {"exitcode": exitcode if isinstance(exitcode, int) else -1, "out": str(data.get("out-data") or ""),
            "err": str(data.get("err-data") or ""), "signal": data.get("signal")}


def record(ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> None:
    ctx.operation = ctx.require_store().record_evidence(ctx.operation["operationId"], ctx.kind, dict(evidence))


def run_probe(ctx: StageContext, slot: str, probe: str, argv: t.Sequence[str], *, deadline: float,
              sleep: t.Callable[[float], None] = time.sleep, budget_end: float | None = None) -> dict[str, t.Any]:
    """Run a guest command to completion: resume a journaled PID by GET, else exec it (marker journaled first), then poll.

    A command whose exited status was read (or consumed before it was recorded) is complete: the slot is cleared
    and a later call may issue it afresh. An exec whose reply was lost is never re-issued (``StageUncertain``).
    Raises ``StageInProgress`` when ``budget_end`` (epoch) passes; returns ``{'timeout': True}`` at ``deadline``.
    """
    interval = 0.1
    while True:
        pid = journaled_pid(ctx, slot, probe, argv)
        if pid is None:
            pid = start_exec(ctx, argv, slot, probe)
        try:
            status = exec_status(ctx, pid)
        except ProviderError as err:
            if agent_reason(err) != "unknown_pid":
                raise
            record(ctx, {slot: None})  # completed, its status consumed by a run that did not record it: refresh the probe
            continue
        if status is not None:
            record(ctx, {slot: None})
            return status
        now = wall_clock()
        if now >= deadline:
            return {"timeout": True}
        if budget_end is not None and now >= budget_end:
            raise StageInProgress({"probe": probe, "pid": pid})
        sleep(min(interval, max(0.0, deadline - now)))
        interval = min(interval * 1.5, 2.0)
