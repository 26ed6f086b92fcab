# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``readiness``: wait, through the QEMU guest agent, until the guest is usable (docs/stages.md).

Readiness sends no configuration change, so its ``request`` is always ``None`` and the work is
done by read-only probes inside ``preconditions``/``observe`` (the documented override of the
send-once protocol). Everything that must survive a crash is journaled in the stage evidence:

- the deadline (``readiness_timeout`` seconds, epoch), written when the stage first starts and
  never extended by re-runs;
- before each guest-agent exec a started marker (``submissionStarted: true``, no PID), then its
  PID, before ``exec-status`` is polled; a journaled PID resumes by GET, and a probe that completed
  (its exited status read, or consumed by a run that did not record it) may be issued afresh. An
  exec whose reply was lost (a marker without a PID) is never repeated: the stage is ``uncertain``.

Ready means: ``cloud-init status --long`` reports ``done`` (``error``/``degraded`` fail with
``cloudinit_failed``) and the interface whose MAC is net0's has a usable IPv4 (not loopback, not
link-local). The guest's SSH host public keys are then read with ``agent/file-read`` and
returned as ``known_hosts`` lines with SHA256 fingerprints; readiness never trusts them itself.
The handoff records them with the address and ``readinessObservedAt`` (historical, not current
reachability).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import ProviderError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import TIMESTAMP_FORMAT
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import (
    Request,
    Resolution,
    StageContext,
    StageError,
    StageInProgress,
    StageLogic,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import _guest
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages._adoption import AdoptionHook, Decision, Observations

DEFAULT_READINESS_TIMEOUT = 300.0
CLOUDINIT_PROBE = ("cloud-init", "status", "--long")
CLOUDINIT_PROBE_NAME = "cloud-init-status"
HOST_KEY_FILES = (
    ("ssh-ed25519", "/etc/ssh/ssh_host_ed25519_key.pub"),
    ("ecdsa-sha2-nistp256", "/etc/ssh/ssh_host_ecdsa_key.pub"),
    ("ssh-rsa", "/etc/ssh/ssh_host_rsa_key.pub"),
)
_STATUS_LINE = re.compile(r"^status: (\S+)\s*$", re.MULTILINE)
_EXTENDED_LINE = re.compile(r"^extended_status: (.+?)\s*$", re.MULTILINE)
_KEY_LINE = re.compile(r"\A(ssh-ed25519|ecdsa-sha2-nistp(?:256|384|521)|ssh-rsa) ([A-Za-z0-9+/]+={0,2})(?: [^\r\n]*)?\Z")
_POLL_MIN = 0.2
_POLL_MAX = 2.0


def parse_cloudinit_status(output: str) -> tuple[str | None, str | None]:
    """(status, extended_status) from ``cloud-init status --long`` text (``--wait`` dots tolerated)."""
    status = _STATUS_LINE.search(output.lstrip("."))
    extended = _EXTENDED_LINE.search(output)
    return (status.group(1) if status else None), (extended.group(1) if extended else None)


def cloudinit_verdict(output: str, exitcode: int) -> str:
    """``done`` | ``running`` | ``failed:<state>`` from the probe output and exit code (0 done/running, 1 error, 2 degraded)."""
    status, extended = parse_cloudinit_status(output)
    if status == "error" or exitcode == 1:
        return "failed:error"
    if exitcode == 2 or (extended or "").startswith("degraded"):
        return "failed:degraded"
    if status == "done":
        return "done"
    if status in ("running", "not started", "not_started"):
        return "running"
    return "failed:unknown"


def usable_ipv4(interfaces: t.Any, mac: str) -> str | None:
    """The first IPv4 of the interface whose hardware address is ``mac``, unless loopback or link-local."""
    if not isinstance(interfaces, list):
        return None
    for iface in interfaces:
        if not isinstance(iface, dict) or str(iface.get("hardware-address", "")).lower() != mac.lower():
            continue
        for address in iface.get("ip-addresses") or []:
            if not isinstance(address, dict) or address.get("ip-address-type") != "ipv4":
                continue
            try:
                ip = ipaddress.IPv4Address(str(address.get("ip-address")))
            except ValueError:
                continue
            if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast):
                return str(ip)
    return None


def host_keys(lines: t.Mapping[str, str], address: str) -> tuple[list[str], dict[str, str]]:
    """known_hosts lines and ``{keytype: SHA256:...}`` for the read host public keys."""
    known: list[str] = []
    fingerprints: dict[str, str] = {}
    for keytype, line in lines.items():
        known.append(_guest.known_hosts_line(address, line))
        fingerprints[keytype] = _guest.ssh_fingerprint(line)
    return known, fingerprints


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


class ReadinessStage(StageLogic, AdoptionHook):
    kind = "readiness"
    task_type = None
    gates = ()  # only fixed read-only probes: they may continue while VM writes are disabled
    final_codes = frozenset({"guest_agent_unavailable", "guest_network_unavailable", "guest_exec_unavailable", "cloudinit_failed",
                             "readiness_timeout"})

    def __init__(self, readiness_timeout: float = DEFAULT_READINESS_TIMEOUT) -> None:
        self.readiness_timeout = float(readiness_timeout)

    # -- helpers -----------------------------------------------------------------------------------
    def _budget_end(self, ctx: StageContext, started: float) -> float | None:
        budget = ctx.wait_budget
        return None if budget is None else started + float(budget)

    def _sleep(self, ctx: StageContext, seconds: float) -> None:
        ctx.sleep(seconds)

    def _deadline(self, ctx: StageContext) -> float:
        return float(ctx.evidence()["deadline"])

    def _wait(self, ctx: StageContext, phase: str, started: float, interval: float) -> float:
        """Sleep before the next poll; fail at the deadline, return done:false when the run's budget is spent."""
        now = _guest.wall_clock()
        deadline = self._deadline(ctx)
        if now >= deadline:
            raise self._timeout(ctx, phase)
        budget_end = self._budget_end(ctx, started)
        if budget_end is not None and now >= budget_end:
            raise StageInProgress({"phase": phase, "deadline": _iso(deadline), "secondsLeft": int(deadline - now)})
        self._sleep(ctx, min(interval, max(0.0, deadline - now)))
        return min(interval * 1.5, _POLL_MAX)

    @staticmethod
    def _timeout(ctx: StageContext, phase: str) -> StageError:
        codes = {
            "agent": ("guest_agent_unavailable", "The QEMU guest agent did not answer before the readiness deadline."),
            "cloud-init": ("readiness_timeout", "cloud-init in the guest did not finish before the readiness deadline."),
            "network": ("guest_network_unavailable", "The guest got no usable IPv4 address on net0 before the readiness deadline."),
        }
        code, message = codes[phase]
        return StageError(message, code=code, details={"stage": ctx.kind, "phase": phase})

    @staticmethod
    def _agent_down(err: ProviderError) -> bool:
        return _guest.agent_reason(err) in ("not_running", "vm_not_running") or err.code in ("reply_lost", "transport_lost")

    # -- protocol ----------------------------------------------------------------------------------
    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.read_config(ctx)
        _guest.check_identity(ctx, config)
        mac, _bridge = _guest.net0_mac_bridge(config)
        if mac is None or mac != _guest.clone_mac(ctx):
            raise StageError("The target's net0 MAC is not the one the clone stage recorded.", details={"stage": ctx.kind, "rule": "net0_mac"})
        if _guest.read_power(ctx) != "running":
            raise StageError("The target VM is not running; run the start stage first.", details={"stage": ctx.kind, "rule": "running"})
        if ctx.check_mode:
            raise StageInProgress({"phase": "check_mode", "note": "readiness probes run the guest agent and are skipped in check mode"})
        if "deadline" not in ctx.evidence():
            now = _guest.wall_clock()
            _guest.record(ctx, {"deadline": round(now + self.readiness_timeout, 3), "startedAt": _iso(now),
                                "timeoutSeconds": self.readiness_timeout})

    def request(self, ctx: StageContext) -> Request | None:
        return None  # readiness changes nothing; see the module docstring

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        request = ctx.record.get("request") or {}
        return Resolution.undecidable("The reply to the guest-agent exec of %s was lost, so whether it ran in the guest is unknown; "
                                      "it is not repeated. Check the guest, then abandon the operation." % request.get("probe", "a probe"), final=True)

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        started = _guest.wall_clock()
        mac = _guest.clone_mac(ctx)
        self._ping(ctx, started)
        if ctx.evidence().get("cloudinit") != "done":
            self._cloudinit(ctx, started)
        address = self._address(ctx, mac, started)
        lines = self._read_host_keys(ctx)
        if not lines:
            raise StageError("No SSH host public key could be read from the guest.", code="observation_mismatch",
                             details={"stage": ctx.kind, "rule": "host_keys"})
        known, fingerprints = host_keys(lines, address)
        observed = _iso(_guest.wall_clock())
        handoff = dict(ctx.operation.get("handoff") or {})
        handoff.update({"ipv4": address, "guestUser": ctx.plan["guestUser"], "knownHosts": known, "hostKeyFingerprints": fingerprints,
                        "readinessObservedAt": observed,
                        "readinessNote": "historical observation at readinessObservedAt; not proof of current reachability"})
        ctx.operation = ctx.require_store().set_handoff(ctx.operation["operationId"], handoff)
        return {"ipv4": address, "net0Mac": mac, "cloudinit": "done", "guestReady": True, "knownHosts": known,
                "hostKeyFingerprints": fingerprints, "readinessObservedAt": observed, "probe": None}

    # -- phases ------------------------------------------------------------------------------------
    def _ping(self, ctx: StageContext, started: float) -> None:
        interval = _POLL_MIN
        while True:
            try:
                ctx.client.post(ctx.vm_path + "/agent/ping")
                return
            except ProviderError as err:
                if not self._agent_down(err):
                    raise
            interval = self._wait(ctx, "agent", started, interval)

    def _cloudinit(self, ctx: StageContext, started: float) -> None:
        interval = _POLL_MIN
        while True:
            try:
                status = self._probe_once(ctx, started)
            except ProviderError as err:
                if not self._agent_down(err):
                    raise
                status = None
            if status is not None:
                verdict = cloudinit_verdict(status["out"], status["exitcode"])
                if verdict == "done":
                    _guest.record(ctx, {"cloudinit": "done"})
                    return
                if verdict.startswith("failed:"):
                    state = verdict.split(":", 1)[1]
                    raise StageError("cloud-init in the guest reported %s." % state, code="cloudinit_failed",
                                     details={"stage": ctx.kind, "cloudinitState": state})
            interval = self._wait(ctx, "cloud-init", started, interval)

    def _probe_once(self, ctx: StageContext, started: float) -> dict[str, t.Any] | None:
        """Resume the journaled probe by GET or issue one (started marker journaled first, then its PID); poll it until it
        exits or the budget ends. An exec whose reply was lost is not repeated: ``StageUncertain``."""
        interval = 0.1
        while True:
            pid = _guest.journaled_pid(ctx, "probe", CLOUDINIT_PROBE_NAME, CLOUDINIT_PROBE)
            if pid is None:
                pid = _guest.start_exec(ctx, CLOUDINIT_PROBE, "probe", CLOUDINIT_PROBE_NAME)
            try:
                status = _guest.exec_status(ctx, pid)
            except ProviderError as err:
                if _guest.agent_reason(err) != "unknown_pid":
                    raise
                _guest.record(ctx, {"probe": None})  # consumed by an earlier run or forgotten: re-issue (read-only)
                continue
            if status is not None:
                _guest.record(ctx, {"probe": None})
                return status
            interval = self._wait(ctx, "cloud-init", started, interval)

    def _address(self, ctx: StageContext, mac: str, started: float) -> str:
        interval = _POLL_MIN
        while True:
            interfaces = None
            try:
                data = ctx.client.get(ctx.vm_path + "/agent/network-get-interfaces")
                interfaces = data.get("result") if isinstance(data, dict) else None
            except ProviderError as err:
                if not self._agent_down(err):
                    raise
            address = usable_ipv4(interfaces, mac)
            if address is not None:
                return address
            interval = self._wait(ctx, "network", started, interval)

    def _read_host_keys(self, ctx: StageContext) -> dict[str, str]:
        lines: dict[str, str] = {}
        for keytype, path in HOST_KEY_FILES:
            try:
                data = ctx.client.get(ctx.vm_path + "/agent/file-read", file=path)
            except ProviderError as err:
                if err.code == "not_found":
                    continue
                raise
            content = data.get("content") if isinstance(data, dict) else None
            line = content.strip() if isinstance(content, str) else ""
            match = _KEY_LINE.match(line)
            if match and match.group(1) == keytype:
                lines[keytype] = line
        return lines

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        return Decision("pending", "Readiness probes run through the guest agent (exec), which adoption never uses; the readiness stage "
                        "re-runs its read-only probes.")
