# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``readiness``: wait, through the QEMU guest agent, until the guest is usable (docs/stages.md).

Readiness sends no configuration change, so its ``request`` is always ``None`` and the work is
done by read-only probes inside ``observe`` (the documented override of the send-once protocol).
Everything that must survive a crash is journaled in the stage evidence, by the runner:

- the deadline (``readiness_timeout`` seconds, epoch): the ``checkpoint`` when the stage first
  starts, never extended by re-runs;
- the cloud-init probe runs through ``StageContext.guest_exec`` (started marker, exec, PID, then
  ``exec-status``; a journaled PID resumes by GET; an exec with an unknown outcome is resolved by its
  marker in the guest (docs/stages.md, "Guest commands"): never started -> run afresh, started ->
  followed, unreadable -> the stage is ``uncertain`` and a later run reads the marker again). It is
  one ``cloud-init status --long --wait``: the guest waits for cloud-init to finish, the stage only polls
  the one PID (``_stage.EXEC_POLL_*``), instead of running a new probe (exec and status reads) every interval.

Ready means: the agent answers ``ping``, cloud-init reports ``done`` (``error``/``degraded``, exit
code 1/2, fail with ``cloudinit_failed``) and the interface whose MAC is net0's has a usable IPv4
(not loopback, not link-local; on a static network, the planned address itself). The guest's SSH host public keys are then read with ``agent/file-read`` and
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

from ..._api.http_errors import agent_reason
from ..._core.errors import ProviderError
from ..._journal import TIMESTAMP_FORMAT
from ..guest_exec import exec_marker_state
from ..protocol import StageContext, StageLogic
from ..outcomes import GuestCommand, Request, Resolution, StageError, StageInProgress, wall_clock
from .. import common
from .. import guest as _guest
from .. import nic as _nic
from ..._formats.networks import NONE
from ..adoption import AdoptionHook, Decision, Observations

DEFAULT_READINESS_TIMEOUT = 300.0
# ``--wait`` blocks in the guest until cloud-init is neither "not started" nor "running" (one dot per 0.25 s, then
# "\nstatus: ..."), exit code 0 done, 1 error, 2 degraded.
CLOUDINIT_PROBE = ("cloud-init", "status", "--long", "--wait")
# The marker's name stays the one of the earlier repeated probe, so a marker journaled by an older version is still
# resumed by its PID, or found uncertain, never silently re-issued.
CLOUDINIT_PROBE_NAME = "cloud-init-status"
# Read-only: a completed probe may run again; its marker lives in the evidence key ``probe``.
CLOUDINIT_COMMAND = GuestCommand("probe", CLOUDINIT_PROBE_NAME, CLOUDINIT_PROBE)
HOST_KEY_FILES = (
    ("ssh-ed25519", "/etc/ssh/ssh_host_ed25519_key.pub"),
    ("ecdsa-sha2-nistp256", "/etc/ssh/ssh_host_ecdsa_key.pub"),
    ("ssh-rsa", "/etc/ssh/ssh_host_rsa_key.pub"),
)
_STATUS_LINE = re.compile(r"^status: (\S+)\s*$", re.MULTILINE)
_EXTENDED_LINE = re.compile(r"^extended_status: (.+?)\s*$", re.MULTILINE)
_KEY_LINE = re.compile(
    r"\A(ssh-ed25519|ecdsa-sha2-nistp(?:256|384|521)|ssh-rsa) ([A-Za-z0-9+/]+={0,2})(?: [^\r\n]*)?\Z"
)
_POLL_MIN = 0.2
_POLL_MAX = 2.0
# The guest agent starts in the guest's userspace, seconds after power-on: a ping every 0.2 s while it boots would
# mostly be answered "not running". After the first ping (at once: a re-run finds it up) the next comes 0.5 s later.
_AGENT_POLL_FIRST = 0.5
T = t.TypeVar("T")


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


def _addresses_of(interfaces: t.Any, mac: str, kind: str) -> t.Iterator[t.Any]:
    """The parsed ``kind`` (ipv4/ipv6) addresses the agent reports on the interface whose hardware address is ``mac``."""
    if not isinstance(interfaces, list):
        return
    for iface in interfaces:
        if not isinstance(iface, dict) or str(iface.get("hardware-address", "")).lower() != mac.lower():
            continue
        for address in iface.get("ip-addresses") or []:
            if not isinstance(address, dict) or address.get("ip-address-type") != kind:
                continue
            try:
                yield ipaddress.ip_address(str(address.get("ip-address")))
            except ValueError:
                continue


def _usable(ip: t.Any) -> bool:
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def usable_ipv4(interfaces: t.Any, mac: str, wanted: str | None = None) -> str | None:
    """The first IPv4 of the interface whose hardware address is ``mac``, unless loopback or link-local; with
    ``wanted`` (a static network's address), that address only."""
    for ip in _addresses_of(interfaces, mac, "ipv4"):
        if ip.version == 4 and (wanted is None or str(ip) == wanted) and _usable(ip):
            return str(ip)
    return None


def usable_ipv6(interfaces: t.Any, mac: str, wanted: t.Mapping[str, str]) -> str | None:
    """The first global IPv6 of the interface whose hardware address is ``mac`` that readiness waits for
    (``nic.pick_ipv6``)."""
    return _nic.pick_ipv6((str(ip) for ip in _addresses_of(interfaces, mac, "ipv6")), wanted)


def usable_addresses(interfaces: t.Any, mac: str, nic: t.Mapping[str, t.Any]) -> dict[str, str | None] | None:
    """Every planned family's address on net0 (``ipv4``; ``ipv6`` when the plan configures IPv6), or ``None`` while
    one is missing. A network whose IPv4 is ``none`` waits for IPv6 only."""
    found: dict[str, str | None] = {"ipv4": None}
    if (nic.get("ipv4") or {}).get("mode") != NONE:
        found["ipv4"] = usable_ipv4(interfaces, mac, _nic.wanted_address(nic))
        if found["ipv4"] is None:
            return None
    ipv6 = _nic.wanted_ipv6(nic)
    if ipv6 is not None:
        found["ipv6"] = usable_ipv6(interfaces, mac, ipv6)
        if found["ipv6"] is None:
            return None
    return found


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
    # The start stage's read-back moments ago (``_recent_reads`` rule 4): its requests are guest agent calls, which Proxmox
    # refuses on a VM that is not running, and change no power state.
    trusts_recent_power = True
    final_codes = frozenset(
        {
            "guest_agent_unavailable",
            "guest_network_unavailable",
            "guest_exec_unavailable",
            "cloudinit_failed",
            "readiness_timeout",
        }
    )

    def __init__(self, readiness_timeout: float = DEFAULT_READINESS_TIMEOUT) -> None:
        self.readiness_timeout = float(readiness_timeout)

    # -- helpers -----------------------------------------------------------------------------------
    def _deadline(self, ctx: StageContext) -> float:
        return float(ctx.evidence()["deadline"])

    def _in_progress(self, ctx: StageContext, phase: str) -> StageInProgress:
        """``done: false`` when the run's budget is spent; what this run established goes to the journal with it."""
        deadline = self._deadline(ctx)
        return StageInProgress(
            {"phase": phase, "deadline": _iso(deadline), "secondsLeft": int(deadline - wall_clock())},
            evidence=ctx.facts.get("reached"),
        )

    def _until(
        self, ctx: StageContext, phase: str, started: float, attempt: t.Callable[[], T | None], first: float = _POLL_MIN
    ) -> T:
        """Repeat ``attempt`` (``None``: not yet) until it answers; fail at the deadline, ``done: false`` when the run's budget is spent."""
        interval = first
        while True:
            attempt_started = wall_clock()
            answer = attempt()
            if answer is not None:
                return answer
            now = wall_clock()
            deadline = self._deadline(ctx)
            if now >= deadline:
                raise self._timeout(ctx, phase)
            budget = ctx.wait_budget
            if budget is not None and now >= started + float(budget):
                raise self._in_progress(ctx, phase)
            # The interval runs from one attempt's start to the next: an attempt that waited itself is followed sooner
            # (Proxmox pings the agent for up to 3 s before it answers "not running", so a booting guest paces the pings).
            ctx.sleep(min(max(0.0, interval - (now - attempt_started)), max(0.0, deadline - now)))
            interval = min(interval * 1.5, _POLL_MAX)

    @staticmethod
    def _timeout(ctx: StageContext, phase: str) -> StageError:
        codes = {
            "agent": ("guest_agent_unavailable", "The QEMU guest agent did not answer before the readiness deadline."),
            "cloud-init": (
                "readiness_timeout",
                "cloud-init in the guest did not finish before the readiness deadline.",
            ),
            "network": (
                "guest_network_unavailable",
                "The guest did not get its planned addresses on net0 (a usable IPv4, the planned IPv6) before the "
                "readiness deadline.",
            ),
        }
        code, message = codes[phase]
        return StageError(message, code=code, details={"stage": ctx.kind, "phase": phase})

    @staticmethod
    def _agent_down(err: ProviderError) -> bool:
        return agent_reason(err) in ("not_running", "vm_not_running") or err.code in ("reply_lost", "transport_lost")

    # -- protocol ----------------------------------------------------------------------------------
    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.read_config(ctx)
        _guest.check_identity(ctx, config)
        mac, _bridge = _guest.net0_mac_bridge(config)
        if mac is None or mac != _guest.clone_mac(ctx):
            raise StageError(
                "The target's net0 MAC is not the one the clone stage recorded.",
                details={"stage": ctx.kind, "rule": "net0_mac"},
            )
        if common.precondition_power(ctx) != "running":
            raise StageError(
                "The target VM is not running; run the start stage first.",
                details={"stage": ctx.kind, "rule": "running"},
            )
        if ctx.check_mode:
            raise StageInProgress(
                {"phase": "check_mode", "note": "readiness probes run the guest agent and are skipped in check mode"}
            )

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """The deadline, journaled when the stage first starts; re-runs never extend it."""
        if "deadline" in ctx.evidence():
            return None
        now = wall_clock()
        return {
            "deadline": round(now + self.readiness_timeout, 3),
            "startedAt": _iso(now),
            "timeoutSeconds": self.readiness_timeout,
        }

    def request(self, ctx: StageContext) -> Request | None:
        return None  # readiness changes nothing; see the module docstring

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        request = ctx.record.get("request") or {}
        marker = request.get("marker")
        if isinstance(marker, str):
            # The probe's marker in the guest is readable now: observe's guest_exec follows it (started) or runs the
            # read-only probe afresh (never started, a late start refused), from the marker journaled in the evidence.
            if exec_marker_state(ctx, marker)[0] != "unreadable":
                return Resolution.applied()
            return Resolution.undecidable(
                "The guest-agent exec of %s had an unknown outcome and its marker in the guest (%s.*) cannot be "
                "read yet; re-run when the guest agent answers, or abandon the operation."
                % (request.get("probe", "a probe"), marker)
            )
        return Resolution.undecidable(
            "The reply to the guest-agent exec of %s was lost, so whether it ran in the guest is unknown; "
            "it is not repeated. Check the guest, then abandon the operation." % request.get("probe", "a probe"),
            final=True,
        )

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        started = wall_clock()
        mac = _guest.clone_mac(ctx)
        self._until(ctx, "agent", started, lambda: self._ping(ctx), first=_AGENT_POLL_FIRST)
        if ctx.evidence().get("cloudinit") != "done":
            self._until(ctx, "cloud-init", started, lambda: self._cloudinit(ctx, started))
            ctx.facts["reached"] = {"cloudinit": "done"}
        addresses = self._until(ctx, "network", started, lambda: self._address(ctx, mac))
        # SSH goes to IPv4 when the network has it; usable_addresses returns a dict only with a planned family's address.
        address = t.cast(str, addresses["ipv4"] or addresses["ipv6"])
        lines = self._read_host_keys(ctx)
        if not lines:
            raise StageError(
                "No SSH host public key could be read from the guest.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "rule": "host_keys"},
            )
        known, fingerprints = host_keys(lines, address)
        return {
            "ipv4": addresses["ipv4"],
            **({"ipv6": addresses["ipv6"], "address": address} if "ipv6" in addresses else {}),
            "net0Mac": mac,
            "cloudinit": "done",
            "guestReady": True,
            "knownHosts": known,
            "hostKeyFingerprints": fingerprints,
            "readinessObservedAt": _iso(wall_clock()),
            "probe": None,
        }

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        handoff = dict(ctx.operation.get("handoff") or {})
        handoff.update(
            {
                "ipv4": evidence["ipv4"],
                **{key: evidence[key] for key in ("ipv6", "address") if key in evidence},
                "guestUser": ctx.plan["guestUser"],
                "knownHosts": evidence["knownHosts"],
                "hostKeyFingerprints": evidence["hostKeyFingerprints"],
                "readinessObservedAt": evidence["readinessObservedAt"],
                "readinessNote": "historical observation at readinessObservedAt; not proof of current reachability",
            }
        )
        return handoff

    # -- attempts (None: not yet) --------------------------------------------------------------------
    def _ping(self, ctx: StageContext) -> bool | None:
        try:
            ctx.client.post(ctx.vm_path + "/agent/ping")
            return True
        except ProviderError as err:
            if not self._agent_down(err):
                raise
        return None

    def _cloudinit(self, ctx: StageContext, started: float) -> bool | None:
        """One ``cloud-init status --long --wait`` run to its exit: True when done; ``cloudinit_failed`` on error or degraded.

        ``running`` (a marker of the earlier probe without ``--wait`` resumed, or a guest whose cloud-init ignored it)
        returns None: the probe runs again after the interval.
        """
        try:
            outcome = ctx.guest_exec(CLOUDINIT_COMMAND, deadline=self._deadline(ctx), started=started)
        except ProviderError as err:
            if not self._agent_down(err):
                raise
            return None
        if outcome.state == "timeout":
            raise self._timeout(ctx, "cloud-init")
        if outcome.state == "running":
            raise self._in_progress(ctx, "cloud-init")
        verdict = cloudinit_verdict(outcome.out, -1 if outcome.exitcode is None else outcome.exitcode)
        if verdict == "done":
            return True
        if verdict.startswith("failed:"):
            state = verdict.split(":", 1)[1]
            raise StageError(
                "cloud-init in the guest reported %s." % state,
                code="cloudinit_failed",
                details={"stage": ctx.kind, "cloudinitState": state},
            )
        return None  # still running (see the docstring): probe afresh after the interval

    def _address(self, ctx: StageContext, mac: str) -> dict[str, str | None] | None:
        interfaces = None
        try:
            data = ctx.client.get(ctx.vm_path + "/agent/network-get-interfaces")
            interfaces = data.get("result") if isinstance(data, dict) else None
        except ProviderError as err:
            if not self._agent_down(err):
                raise
        return usable_addresses(interfaces, mac, _nic.planned(ctx))

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
        return Decision(
            "pending",
            "Readiness probes run through the guest agent (exec), which adoption never uses; the readiness stage "
            "re-runs its read-only probes.",
        )
