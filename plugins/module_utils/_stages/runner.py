# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stage protocol: one runner that every stage module uses (docs/stages.md).

A stage knows *what* to read, send and observe (a ``StageLogic``); the runner owns *when*:

1. load the operation; a completed stage returns its evidence (``changed: false``), a failed one
   reports its recorded failure;
2. a recorded UPID is reconciled by GETs only (never re-posted);
3. a submission whose outcome is unknown (``submissionStarted`` without a UPID, or ``uncertain``) is
   resolved by reads only and never sent again: applied -> continue from there; otherwise the run
   reads again within its wait budget, and when reads still cannot prove the effect the stage is
   ``uncertain`` and the module fails telling the operator what to check (a later run reads again);
4. otherwise: preconditions by GET, the write checks (gates re-read, an environment ``false`` wins;
   the catalog's mapping, when given, equal to the operation's), (check mode: return the exact
   requests, write nothing), record the dispatch durably, send once, record the UPID, wait, observe
   independently, record.

Outcomes of a send (``proves_not_applied``): nothing reached Proxmox, or Proxmox's reply proves a pre-check
refusal (``_client.map_http_error`` sets ``details['precheck']``: authentication, permission, parameter, lock,
"already exists", the guest agent's availability checks) -> the stage goes back to ``pending`` (re-running
dispatches afresh); ``VM is locked`` -> waited out within the stage's lock budget; anything else (a lost reply,
a plain 500 such as ``guest-exec failed - got timeout``, 503, 596) -> read-only resolution, then ``uncertain``.
A guest command runs through the exec-marker wrapper (``EXEC_WRAPPER``), whose files in the guest prove whether
it started.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import time
import typing as t

from .._api import admission as _admission
from .._core.cancel import RunCancelled, cancellable_sleep, raise_if_cancelled
from .._api.cli import with_cli
from .._core.errors import InputError, ProviderError, VmanywareError
from .._journal import stage as journal_stage
from .._journal import utc_now
from .._operation.create import LIFECYCLE_GATE, PROVISIONING_GATE, SNAPSHOTS_GATE, read_gate
from .._formats.plan import select_mapping
from .._core.protocols import ApiClient, ApiVerbs, OperationStore, StageRecord
from .._api.recent_reads import RecentReads
from .._core.redaction import redact
from .._api.tasks import TaskOutcome, next_pause, parse_upid, poll_once, wait_task

# Codes with which Proxmox (or the transport) proves the request changed nothing. The transport's three are raised only
# when no byte of the request was written (``_client.transport_failure``); a failure after the first byte is ambiguous.
NOT_APPLIED_CODES = frozenset({"transport_lost", "tls_verification_failed", "certificate_changed", "auth_failed", "permission_denied",
                               "parameter_invalid", "conflict", "not_found", "locked"})
# Journaled as the "request" of a stage that needed none, so completing it never passes for a lost reply.
NOOP_REQUEST: dict[str, t.Any] = {"noop": True}
# Codes after which the request may or may not have been applied (``response_too_large``: the request ran, its reply
# was not read).
AMBIGUOUS_CODES = frozenset({"reply_lost", "server_error", "unexpected_response", "response_too_large"})
# The error code of each write gate when it is closed.
GATE_CODES = {PROVISIONING_GATE: "provisioning_disabled", SNAPSHOTS_GATE: "snapshot_disabled", LIFECYCLE_GATE: "lifecycle_disabled"}
# Without a wait budget, reads resolving an unknown outcome are repeated for at most this long (seconds).
DEFAULT_RESOLVE_WAIT = 30.0


class StageInProgress(Exception):
    """Raised by ``observe`` when the submitted work is still running (e.g. a guest exec): ``done: false``.

    ``evidence``: what the run established so far and a later run may rely on (readiness: ``cloudinit: done``);
    the runner journals it (never in check mode).
    """

    def __init__(self, progress: t.Mapping[str, t.Any] | None = None, evidence: t.Mapping[str, t.Any] | None = None) -> None:
        self.progress = dict(progress or {})
        self.evidence = dict(evidence or {})
        super().__init__("in progress")


class StageError(VmanywareError):
    """A stage cannot proceed: precondition, observation or resolution failure."""

    default_code = "stage_precondition_failed"


class StageUncertain(Exception):
    """Raised by the guest-exec helper when an exec it issued for a hook has an unknown outcome.

    ``request`` is the summary of that submission. The runner records it (``dispatching`` first when the stage
    was still ``pending``) and makes the stage ``uncertain``; the submission is never repeated.
    """

    def __init__(self, cause: str, message: str, request: t.Mapping[str, t.Any]) -> None:
        self.cause = cause
        self.message = message
        self.request = dict(request)
        super().__init__(message)


@dataclasses.dataclass(frozen=True)
class Request:
    """One mutating request, exactly as sent (``params`` never holds a credential)."""

    method: str
    path: str
    params: dict[str, t.Any]

    def summary(self) -> dict[str, t.Any]:
        return {"method": self.method, "path": self.path, "params": redact(dict(self.params))}


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What reads proved about a submission whose reply was lost.

    ``applied``: the request took effect (``upid`` is its task when the reads found one);
    ``not_applied``: reads show no effect (yet); ``undecidable``: they cannot tell, ``message`` says
    what the operator should check. ``final``: reading again cannot change the verdict (no waiting).
    """

    verdict: str
    upid: str | None = None
    evidence: dict[str, t.Any] = dataclasses.field(default_factory=dict)
    message: str = ""
    final: bool = False
    # ``not_applied`` proven for good (a guest command's marker shows it never started, and a late start is refused):
    # the stage may go back to ``pending`` and be sent again. A plain ``not_applied`` only says reads show no effect yet.
    proven: bool = False

    @classmethod
    def applied(cls, upid: str | None = None, **evidence: t.Any) -> Resolution:
        return cls("applied", upid, dict(evidence))

    @classmethod
    def not_applied(cls) -> Resolution:
        return cls("not_applied")

    @classmethod
    def undecidable(cls, message: str, final: bool = False) -> Resolution:
        return cls("undecidable", message=message, final=final)

    @classmethod
    def never_started(cls) -> Resolution:
        """Proven not applied (``exec_marker_state`` says ``never``): nothing happened and nothing can happen later."""
        return cls("not_applied", final=True, proven=True)


@dataclasses.dataclass(frozen=True)
class GuestCommand:
    """A command a stage runs in the guest through the QEMU guest agent (``agent/exec``): an argument array, run as the positional
    parameters of the fixed exec-marker wrapper (``EXEC_WRAPPER``), never interpolated.

    ``slot`` is the evidence key of its marker (``{probe, pid, submissionStarted, issuedAt}``), ``name`` the probe name
    recorded there. ``repeatable``: harmless to run again (read-only probes, ``apt-get update``), so its marker is
    cleared when it exited and a status QGA no longer knows is run afresh; otherwise (the package install) the exit
    code is recorded in the marker and the command is never issued again. ``write``: it changes the guest, so the
    write checks (gates, catalog) run before a new exec.
    """

    slot: str
    name: str
    argv: tuple[str, ...]
    repeatable: bool = True
    write: bool = False


@dataclasses.dataclass(frozen=True)
class GuestOutcome:
    """Where a guest command stands after ``StageContext.guest_exec``.

    ``state``: ``exited`` (``exitcode`` None when its status was consumed before it was recorded), ``running`` (this
    run's wait budget is spent; a later run resumes the journaled PID) or ``timeout`` (the deadline passed).
    """

    state: str
    pid: int | None
    exitcode: int | None = None
    out: str = ""
    err: str = ""


def guest_api_kind(operation: t.Mapping[str, t.Any]) -> str:
    """``lxc`` when the operation's plan is a container's (``guestType: container``), else ``qemu``: the guest's API path segment."""
    return "lxc" if (operation.get("plan") or {}).get("guestType") == "container" else "qemu"


@dataclasses.dataclass
class StageSettings:
    """Per-run knobs from the module's options."""

    check_mode: bool = False
    diff: bool = False
    # How long this invocation waits for a running task before returning ``done: false`` (progress).
    wait_budget: float | None = None
    timeout: float | None = None
    lock_wait: float = 60.0
    # At most this many allocating submissions in flight per storage (``_admission``); 0: no admission control.
    storage_concurrency: int = _admission.DEFAULT_STORAGE_CONCURRENCY
    # Where the gates are read (default: the process environment, read at each check) and the module options
    # that may open a gate the environment leaves unset (gate name -> bool or None).
    environ: t.Mapping[str, str] | None = None
    gate_options: t.Mapping[str, bool | None] = dataclasses.field(default_factory=dict)
    # The parsed catalog given to the stage (the roles pass it): its mapping for the image must equal the operation's.
    catalog: t.Mapping[str, t.Any] | None = None
    # ``_recent_reads.RecentReads`` of a run that chains stages in one process (vmanyware_provision); None: every stage reads.
    recent_reads: RecentReads | None = None
    clock: t.Callable[[], float] = time.monotonic
    sleep: t.Callable[[float], None] = time.sleep
    # The reason to stop, asked at each safe point (``_cancel``: ``controller_gone``, ``run_cancelled``); None: go on.
    cancel_check: t.Callable[[], str | None] | None = None


@dataclasses.dataclass
class StageContext:
    """What a stage may use: the journal's immutable snapshots, earlier evidence, the client."""

    operation: dict[str, t.Any]
    client: ApiClient
    kind: str
    check_mode: bool = False
    diff: dict[str, t.Any] | None = None
    facts: dict[str, t.Any] = dataclasses.field(default_factory=dict)  # scratch space of one run
    # The run's settings (the wait budget, ``sleep``). Hooks have no journal: only the runner writes it (guest commands
    # through ``guest_exec``; evidence from ``checkpoint``, ``observe``, ``handoff`` and ``StageInProgress``).
    # None outside a runner (adoption's reads, previews, unit tests): no wait budget, no sleeping.
    settings: StageSettings | None = None
    # The runner's guest-exec helper (``StageRunner.guest_exec``); None outside a runner (previews).
    guest_runner: t.Callable[[StageContext, GuestCommand, float, float | None], GuestOutcome] | None = None
    # Configurations this process read moments ago (``_recent_reads``), for a stage whose logic trusts them; None: read.
    recent_reads: RecentReads | None = None
    # Power states this process read moments ago (``_recent_reads``), for a stage whose logic trusts them; None: read.
    recent_power: RecentReads | None = None
    # The template configuration and "VMID N is free" this process read moments ago (``_recent_reads`` rules 7 and 8: the
    # preflight's, in the same process), for a stage whose logic trusts them (clone); None: read.
    recent_template: RecentReads | None = None
    recent_vmid: RecentReads | None = None

    @property
    def wait_budget(self) -> float | None:
        """How long this run may wait for the target (None: up to the stage's own deadline)."""
        return None if self.settings is None else self.settings.wait_budget

    def sleep(self, seconds: float) -> None:
        """Pause between polls with the run's sleep (none outside a runner)."""
        if self.settings is not None:
            self.settings.sleep(seconds)

    def guest_exec(self, command: GuestCommand, *, deadline: float, started: float | None = None) -> GuestOutcome:
        """Run ``command`` in the guest under the stage protocol and poll it until ``deadline`` (epoch seconds).

        The runner resumes a journaled PID by GET, else journals the started marker, execs, journals the PID, then
        polls within this run's wait budget (counted from ``started``, epoch; default now). An exec whose reply was
        lost is never issued again (``StageUncertain``: the stage becomes ``uncertain``).
        """
        if self.guest_runner is None:
            raise VmanywareError("A guest command was requested outside the stage runner.", code="internal_error")
        return self.guest_runner(self, command, deadline, started)

    @property
    def node(self) -> str:
        return t.cast(str, self.operation["target"]["node"])

    @property
    def vmid(self) -> int:
        return t.cast(int, self.operation["target"]["vmid"])

    @property
    def plan(self) -> dict[str, t.Any]:
        return t.cast("dict[str, t.Any]", self.operation["plan"])

    @property
    def mapping(self) -> dict[str, t.Any]:
        return t.cast("dict[str, t.Any]", self.operation["mapping"])

    @property
    def definition(self) -> dict[str, t.Any]:
        return t.cast("dict[str, t.Any]", self.operation["definition"])

    @property
    def record(self) -> StageRecord:
        return journal_stage(self.operation, self.kind)

    def evidence(self, kind: str | None = None) -> dict[str, t.Any]:
        """Recorded evidence of ``kind`` (default: this stage)."""
        return journal_stage(self.operation, kind or self.kind)["evidence"]

    def earlier_evidence(self, key: str) -> t.Any:
        """The latest value of ``key`` recorded by any earlier stage (e.g. the config digest)."""
        value = None
        for item in self.operation["stages"]:
            if item["kind"] == self.kind:
                break
            if key in item["evidence"]:
                value = item["evidence"][key]
        return value

    @property
    def vm_path(self) -> str:
        """The guest's API path: ``/nodes/{node}/lxc/{vmid}`` for a container operation, ``/nodes/{node}/qemu/{vmid}`` otherwise."""
        return "/nodes/%s/%s/%d" % (self.node, guest_api_kind(self.operation), self.vmid)


class StageLogic:
    """Base class of a stage: override the hooks; the runner calls them in protocol order."""

    # The stage kind of this instance: the class's by default; the stage registry (``_stages.build_logic``) sets its row's,
    # so two rows can share one class (a parametrised stage such as a second disk).
    kind: str = ""
    # UPID type of the task the request starts (``qmclone``); None for synchronous requests.
    task_type: t.ClassVar[str | None] = None
    # The gates re-read before every new write of the stage (docs/operations.md, "Gates").
    gates: t.ClassVar[tuple[str, ...]] = (PROVISIONING_GATE,)
    # Overall deadline for the stage's task, seconds from dispatch.
    default_timeout: t.ClassVar[float] = 600.0
    # Error codes that are a final verdict about the target: raised by ``preconditions`` or ``observe``, they fail the stage.
    final_codes: t.ClassVar[frozenset[str]] = frozenset()
    # Whether the preconditions may take the configuration this process read back moments ago instead of reading it
    # again (``_recent_reads``): only for stages whose write carries its digest (Proxmox refuses it on any change since).
    trusts_recent_config: t.ClassVar[bool] = False
    # Whether the preconditions may take the power state this process read moments ago (``_recent_reads``, rule 4): only
    # for a stage whose requests Proxmox refuses on a VM in another power state (readiness: the guest agent's).
    trusts_recent_power: t.ClassVar[bool] = False
    # Whether the preconditions may take the template configuration (rule 7) and the answer "VMID N is free" (rule 8) this
    # process read moments ago (the preflight's): for the clone, whose POST Proxmox re-checks against both.
    trusts_recent_template: t.ClassVar[bool] = False
    trusts_recent_vmid_free: t.ClassVar[bool] = False

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> StageLogic:
        """The stage built from its module's options (``_stages.build_logic``): the constructor's keyword parameters that
        ``options`` names and sets (``readiness_timeout=...``); a stage whose options need more overrides it."""
        parameters = inspect.signature(cls.__init__).parameters
        return cls(**{name: value for name, value in options.items() if name in parameters and name != "self" and value is not None})

    def preconditions(self, ctx: StageContext) -> None:
        """Read the current state (GETs) and raise ``StageError`` if the request must not be sent."""

    def request(self, ctx: StageContext) -> Request | None:
        """The mutation to send; ``None`` when the observed state already is the desired one."""
        raise NotImplementedError

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        """Validate the reply; return (UPID, evidence to record with the submission).

        Default: a task of the stage's own type (``task_type``: ``qmstart``, ``vzsnapshot`` ...) for the target VMID on its node
        (``accept_task``); a stage whose task names another id (the clone: the template) overrides it."""
        if self.task_type is None:
            return None, {}
        return accept_task(data, task_type=self.task_type, node=ctx.node, task_id=str(ctx.vmid)), {}

    def refused(self, ctx: StageContext, err: ProviderError) -> VmanywareError:
        """The error to report when Proxmox definitely refused the request (nothing applied; the stage is pending again)."""
        return err

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        """Independent read-back after success; raise ``StageError('observation_mismatch')`` when it differs."""
        return {}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Read-only resolution of a submission whose reply was lost. Default: undecidable."""
        return Resolution.undecidable("Check the target's task list and configuration in Proxmox before re-running.")

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """``{'before': ..., 'after': ...}`` for ``--diff`` (after preconditions have read the state)."""
        return None

    def progress(self, ctx: StageContext, upid: str) -> dict[str, t.Any]:
        """Progress of a running task for operators (e.g. parsed from the task log)."""
        return {}

    def allocates_on(self, ctx: StageContext) -> str | None:
        """The storage the request allocates on (admission control, ``_admission``); None: it allocates nothing."""
        return None

    def allocations(self, ctx: StageContext) -> int | None:
        """Volumes the task allocates (``allocated target volume`` log lines); None: it may allocate until it ends."""
        return None

    def task_error(self, ctx: StageContext, upid: str, outcome: TaskOutcome) -> StageError:
        """The failure recorded when the stage's task ended with an error (a stage may give it a more precise code)."""
        return StageError("The Proxmox task ended with an error.", code="task_failed",
                          details={"stage": ctx.kind, "upid": upid, "log_tail": list(outcome.log_tail)})

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """Evidence the runner journals once ``preconditions`` passed, before anything is sent or probed (never in check
        mode): what must survive a crash, e.g. a deadline that re-runs never extend, or what a destroy removes."""
        return None

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        """The operation's handoff after this stage's observation (the runner records it with the completion); None: unchanged."""
        return None


def _result(ctx: StageContext, *, changed: bool, done: bool, requests: list[dict[str, t.Any]] | None = None,
            **extra: t.Any) -> dict[str, t.Any]:
    record = ctx.record
    result: dict[str, t.Any] = {
        "changed": changed,
        "done": done,
        "operation_id": ctx.operation["operationId"],
        "stage": {"kind": ctx.kind, "position": record["position"], "status": record["status"], "upid": record["upid"],
                  "attempts": record["attempts"], "evidence": dict(record["evidence"])},
        "requests": [with_cli(summary) for summary in requests or []],  # each with its qm/pct equivalent (_cli.py)
    }
    if ctx.diff is not None:
        result["diff"] = ctx.diff
    result.update(extra)
    return result


def accept_task(data: t.Any, *, task_type: str, node: str, task_id: str) -> str:
    """The UPID of a reply, accepted only when it is a task of ``task_type`` for ``task_id`` on ``node`` (the one check every
    stage that starts a task uses); anything else is ``unexpected_response``, resolved by reads like a lost reply."""
    upid = parse_upid(data)
    if upid.type != task_type or upid.node != node or upid.id != task_id:
        raise StageError("Proxmox answered with a task of an unexpected type, node or id.", code="unexpected_response")
    return upid.raw


def wall_clock() -> float:
    """Epoch seconds: deadlines persisted in the journal must survive the process (monotonic clocks do not)."""
    return time.time()


def agent_reason(err: ProviderError) -> str | None:
    """The fixed token ``_client`` derived from a guest agent failure (``not_running``, ``exec_disabled``...)."""
    return t.cast("str | None", err.details.get("agent"))


def proves_not_applied(err: ProviderError) -> bool:
    """True when ``err`` proves the request changed nothing, so it may be sent again.

    Without an HTTP status it is the transport's verdict (``NOT_APPLIED_CODES``: nothing was sent); with one, only a reply
    ``_client.map_http_error`` classified as a pre-check refusal (``details['precheck']``, fixed tokens, never the text).
    Any other reply to a request that starts work (a plain 500, 503, 596, a reply over the size bound) leaves its
    outcome unknown: reads decide, else the stage is ``uncertain``.
    """
    if err.details.get("status") is None:
        return err.code in NOT_APPLIED_CODES
    return err.details.get("precheck") is True


# -- the guest-side exec marker (docs/stages.md, "Guest commands") ----------------------------------------------
# Every guest command runs as ``/bin/sh -c EXEC_WRAPPER vmanyware <marker> <argv...>`` (POSIX sh; the argv are positional
# parameters, never interpolated). The wrapper creates ``<marker>.started`` exclusively (noclobber: one run per marker,
# ever), then refuses to run when ``<marker>.superseded`` exists (written by a resolver before it sends the command again),
# else runs the command; it ends by writing the exit code (or ``superseded``) to ``<marker>.exit`` (through a rename).
# A resolver reads ``.started``; when absent it writes ``.superseded`` and reads ``.started`` again: still absent proves
# the command never started and never will (a queued exec finds the superseded file after creating ``.started``).
EXEC_MARKER_PREFIX = "/var/lib/vmanyware-exec-"
EXEC_WRAPPER_NAME = "vmanyware"
EXEC_WRAPPER = (
    'm=$1; shift\n'
    '(set -C; : >"$m.started") 2>/dev/null || exit 125\n'
    'if [ -e "$m.superseded" ]; then c=superseded; else "$@"; c=$?; fi\n'
    'printf \'%s\\n\' "$c" >"$m.exit.tmp" && mv -f "$m.exit.tmp" "$m.exit"\n'
    'if [ "$c" = superseded ]; then exit 125; fi\n'
    'exit "$c"\n'
)


def exec_marker_path(operation_id: str, slot: str, attempt: int) -> str:
    """The marker of one attempt of one guest command (``attempt``: unique per operation and slot, e.g. ms of its issue)."""
    return "%s%s-%s-%d" % (EXEC_MARKER_PREFIX, operation_id, slot, attempt)


def wrap_guest_argv(marker: str, argv: t.Sequence[str]) -> list[str]:
    """The argument array sent to ``agent/exec``: the fixed wrapper, the marker, then ``argv`` as positional parameters."""
    return ["/bin/sh", "-c", EXEC_WRAPPER, EXEC_WRAPPER_NAME, marker, *argv]


def marker_of_argv(argv: t.Any) -> str | None:
    """The marker of a wrapped argument array (``wrap_guest_argv``); None for any other."""
    if (isinstance(argv, (list, tuple)) and len(argv) >= 5 and list(argv[:4]) == ["/bin/sh", "-c", EXEC_WRAPPER, EXEC_WRAPPER_NAME]
            and isinstance(argv[4], str) and argv[4].startswith(EXEC_MARKER_PREFIX)):
        return argv[4]
    return None


class _MarkerUnreadable(Exception):
    """A marker file could not be read or written (agent down, a reply lost): the marker proves nothing."""


def _read_guest_file(ctx: StageContext, path: str) -> str | None:
    """``GET {vm}/agent/file-read``: the file's text; None when it does not exist; ``_MarkerUnreadable`` otherwise."""
    try:
        data = ctx.client.get(ctx.vm_path + "/agent/file-read", file=path)
    except ProviderError as err:
        if err.code == "not_found" or agent_reason(err) == "file_not_found":
            return None
        raise _MarkerUnreadable() from None
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, str):
        raise _MarkerUnreadable()
    return content


def _supersede(ctx: StageContext, path: str) -> None:
    """``POST {vm}/agent/file-write`` of ``<marker>.superseded``; repeatable, so a failed write is checked by reading it back."""
    try:
        ctx.client.post(ctx.vm_path + "/agent/file-write", file=path + ".superseded", content="superseded\n")
        return
    except ProviderError:
        pass
    if _read_guest_file(ctx, path + ".superseded") is None:
        raise _MarkerUnreadable()


def exec_marker_state(ctx: StageContext, path: str) -> tuple[str, int | None]:
    """Where the guest command of marker ``path`` stands, from its files in the guest (reads, and one supersede write).

    ``("never", None)``: it never started and never will (``.superseded`` written, ``.started`` still absent; or the
    wrapper found it superseded); ``("running", None)``: started, no exit code yet; ``("exited", code)``;
    ``("unreadable", None)``: the files could not be read, the outcome stays unknown.
    """
    try:
        if _read_guest_file(ctx, path + ".started") is None:
            _supersede(ctx, path)
            if _read_guest_file(ctx, path + ".started") is None:
                return "never", None
        text = _read_guest_file(ctx, path + ".exit")
    except _MarkerUnreadable:
        return "unreadable", None
    if text is None:
        return "running", None
    value = text.strip()
    if value == "superseded":
        return "never", None
    if value.isdigit():
        return "exited", int(value)
    return "unreadable", None


def _exec_lost(ctx: StageContext, command: GuestCommand, marker: str | None = None) -> StageUncertain:
    """The stage's uncertainty about an exec that may have started in the guest: it is never issued again."""
    request: dict[str, t.Any] = {"method": "POST", "path": ctx.vm_path + "/agent/exec", "params": {"command": list(command.argv)},
                                 "probe": command.name}
    if marker is not None:
        request["marker"] = marker
    return StageUncertain("reply_lost", "The reply to the guest-agent exec of %s was lost and its marker in the guest could not be read, "
                          "so whether it ran is unknown; it is not repeated. Check the guest (the files %s.*), then re-run, or abandon "
                          "the operation." % (command.name, marker or "vmanyware-exec"), request)


def _exec_status(ctx: StageContext, pid: int) -> dict[str, t.Any] | None:
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
            "err": str(data.get("err-data") or "")}


def _require_not_ended(operation: t.Mapping[str, t.Any]) -> None:
    """No stage runs on an operation the operator abandoned or whose guest cleanup started (docs/operations.md, "Lifecycle")."""
    if (operation.get("lifecycle") or {}).get("cleanup") is not None:
        raise StageError("The operation's guest is being or was removed; no stage runs on it.", code="operation_cleaned",
                         details={"operationId": operation["operationId"]})
    if (operation.get("release") or {}).get("reason") == "abandoned":
        raise StageError("The operation was abandoned; no stage runs on it.", code="operation_abandoned",
                         details={"operationId": operation["operationId"]})


@dataclasses.dataclass(frozen=True)
class _NoIdentity:
    user: str | None = None
    token_name: str | None = None


class OfflineClient(ApiVerbs):
    """The client of a run that sends nothing (``check_write_allowed``, before a write outside Proxmox): a request is a bug."""

    settings = _NoIdentity()
    provider_scope_id = None

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        raise VmanywareError("A run that sends nothing tried to send a request.", code="internal_error")


class StageRunner:
    """Runs one ``StageLogic`` against one operation (docs/stages.md)."""

    def __init__(self, store: OperationStore, client: ApiClient, logic: StageLogic, settings: StageSettings | None = None) -> None:
        self.store = store
        self.client = client
        self.logic = logic
        self.settings = settings or StageSettings()
        if self.settings.cancel_check is not None:  # every pause of the run (polls, lock waits) is a safe point to stop
            self.settings = dataclasses.replace(self.settings, sleep=cancellable_sleep(self.settings.sleep, self.settings.cancel_check))

    # -- helpers -------------------------------------------------------------------------------------
    def _context(self, operation_id: str) -> StageContext:
        operation = self.store.load(operation_id)
        return StageContext(operation=operation, client=self.client, kind=self.logic.kind, check_mode=self.settings.check_mode,
                            settings=self.settings, guest_runner=self.guest_exec,
                            recent_reads=self.settings.recent_reads if self.logic.trusts_recent_config else None,
                            recent_power=self.settings.recent_reads if self.logic.trusts_recent_power else None,
                            recent_template=self.settings.recent_reads if self.logic.trusts_recent_template else None,
                            recent_vmid=self.settings.recent_reads if self.logic.trusts_recent_vmid_free else None)

    def _require_write_allowed(self, ctx: StageContext) -> None:
        """Before every new mutating request: each gate of the stage re-read (an environment ``false`` wins over an
        option) and, when the stage was given the catalog, its mapping for the image equal to the operation's.

        Raised before the dispatch is recorded, so the stage stays ``pending`` and nothing is sent.
        """
        environ = os.environ if self.settings.environ is None else self.settings.environ
        for gate in self.logic.gates:
            if not read_gate(environ, gate, self.settings.gate_options.get(gate)):
                raise StageError(code=GATE_CODES[gate], details={"stage": ctx.kind, "gate": gate})
        if self.settings.catalog is not None:
            try:
                mapping: dict[str, t.Any] | None = select_mapping(self.settings.catalog, ctx.definition["image"])
            except InputError:
                mapping = None
            if mapping != ctx.mapping:
                raise StageError("The catalog's mapping for the image is not the one this operation was confirmed with; nothing was sent.",
                                 code="plan_changed", details={"stage": ctx.kind, "fields": ["mapping"]})

    def check_write_allowed(self, operation_id: str) -> dict[str, t.Any]:
        """Only the write checks, for a write the role makes outside Proxmox (the container's apt over SSH): the gates of
        the stage re-read and the catalog compared right before it. Records nothing; raises with the gate's code when closed."""
        ctx = self._context(operation_id)
        _require_not_ended(ctx.operation)
        if ctx.record["status"] == "completed":
            return _result(ctx, changed=False, done=True)
        self._require_write_allowed(ctx)
        return _result(ctx, changed=False, done=False, write_allowed=True)

    def _refresh(self, ctx: StageContext, document: dict[str, t.Any]) -> None:
        ctx.operation = document

    def _record_evidence(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> None:
        self._refresh(ctx, self.store.record_evidence(ctx.operation["operationId"], ctx.kind, dict(evidence)))

    def _record_handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> None:
        handoff = None if self.settings.check_mode else self.logic.handoff(ctx, evidence)
        if handoff is not None:
            self._refresh(ctx, self.store.set_handoff(ctx.operation["operationId"], handoff))

    def _in_progress(self, ctx: StageContext, running: StageInProgress, *, changed: bool,
                     requests: list[dict[str, t.Any]] | None = None) -> dict[str, t.Any]:
        """``done: false``: the work goes on; what the run established (``running.evidence``) is journaled for the next run."""
        if running.evidence and not self.settings.check_mode:
            self._record_evidence(ctx, running.evidence)
        return _result(ctx, changed=changed, done=False, requests=requests, progress=running.progress)

    @property
    def _timeout(self) -> float:
        return self.settings.timeout if self.settings.timeout is not None else self.logic.default_timeout

    def _fail(self, ctx: StageContext, err: VmanywareError) -> t.NoReturn:
        self._refresh(ctx, self.store.record_failed(ctx.operation["operationId"], ctx.kind, err.code, err.message))
        raise err

    def _fail_if_final(self, ctx: StageContext, err: VmanywareError) -> t.NoReturn:
        if err.code in self.logic.final_codes and not self.settings.check_mode:
            self._fail(ctx, err)
        raise err

    def _close_if_last(self, ctx: StageContext) -> None:
        """The operation is ``completed`` once every declared stage completed (whichever stage is last)."""
        document = ctx.operation
        if document["status"] == "open" and document.get("release") is None and all(
                item["status"] == "completed" for item in document["stages"]):
            self._refresh(ctx, self.store.update_operation_status(document["operationId"], "completed", expected_status="open"))

    def _uncertain(self, ctx: StageContext, code: str, message: str) -> t.NoReturn:
        if ctx.record["status"] != "uncertain":
            self._refresh(ctx, self.store.record_uncertain(ctx.operation["operationId"], ctx.kind, code, message))
        raise StageError(message, code="outcome_uncertain",
                         details={"stage": ctx.kind, "cause": code, "operationId": ctx.operation["operationId"]})

    # -- protocol ------------------------------------------------------------------------------------
    def run(self, operation_id: str) -> dict[str, t.Any]:
        ctx = self._context(operation_id)
        _require_not_ended(ctx.operation)
        try:
            return self._run(ctx)
        except RunCancelled as cancelled:
            self._record_cancel(ctx, cancelled)
            raise
        except StageUncertain as lost:
            if self.settings.check_mode:
                raise StageError(lost.message, code="outcome_uncertain", details={"stage": ctx.kind, "cause": lost.cause}) from None
            if ctx.record["status"] == "pending":
                self._refresh(ctx, self.store.record_dispatch(ctx.operation["operationId"], ctx.kind, lost.request))
            self._uncertain(ctx, lost.cause, lost.message)

    def _stop_if_cancelled(self) -> None:
        """A safe point (before a dispatch is recorded, before a guest exec, at a stage's start): ``RunCancelled``
        when the run's controller is gone or a signal asked it to stop (``_cancel``)."""
        raise_if_cancelled(self.settings.cancel_check)

    def _record_cancel(self, ctx: StageContext, cancelled: RunCancelled) -> None:
        """``evidence.cancelled`` of the stage where the run stopped (docs/journal.md): what a re-run resumes from."""
        if self.settings.check_mode:
            return
        record = {"code": cancelled.code, "at": utc_now()}
        if cancelled.details.get("signal"):
            record["signal"] = cancelled.details["signal"]
        try:
            self._record_evidence(ctx, {"cancelled": record})
        except VmanywareError:
            pass  # the journal refuses (released meanwhile...): the stop itself still stands

    def _run(self, ctx: StageContext) -> dict[str, t.Any]:
        record = ctx.record
        if record["status"] == "completed":
            if not self.settings.check_mode:
                self._close_if_last(ctx)
            return _result(ctx, changed=False, done=True)
        if record["status"] == "failed":
            failure = record["failure"]
            raise StageError("The stage failed earlier; the operation keeps the target for the operator.",
                             code="stage_failed", details={"stage": ctx.kind, "cause": failure["code"] if failure else None})
        for earlier in ctx.operation["stages"][:record["position"] - 1]:
            if earlier["status"] != "completed":
                if self.settings.check_mode:
                    return self._preview_from_plan(ctx)
                raise StageError("An earlier stage has not completed.", code="stage_out_of_order",
                                 details={"stage": ctx.kind, "waiting_for": earlier["kind"]})
        self._stop_if_cancelled()
        if record["upid"]:
            return self._reconcile(ctx, record["upid"])
        if record["submissionStarted"] and record["request"] == NOOP_REQUEST:
            # Nothing was sent (the state was already right, or the stage only reads): observe again.
            return self._complete(ctx)
        if record["status"] == "submitted":
            # Accepted without a task (sync request, or guest exec with its PID in the evidence): observe.
            return self._complete(ctx)
        if record["submissionStarted"]:
            return self._resolve(ctx)
        return self._dispatch(ctx)

    def _preview_from_plan(self, ctx: StageContext) -> dict[str, t.Any]:
        """Check mode before the earlier stages ran: nothing to read yet, say what would be sent (if the gates allow it)."""
        self._require_write_allowed(ctx)
        try:
            request = self.logic.request(ctx)
        except (VmanywareError, KeyError, TypeError):
            request = None
        requests = [dict(request.summary(), basis="plan")] if request is not None else []
        return _result(ctx, changed=True, done=False, requests=requests, preview="earlier stages pending")

    def _dispatch(self, ctx: StageContext) -> dict[str, t.Any]:
        """Dispatch, first taking an allocation slot of the storage when the stage allocates (``_admission``)."""
        storage = None if self.settings.check_mode or not self.settings.storage_concurrency else self.logic.allocates_on(ctx)
        if storage is None or ctx.facts.get("admission") is not None:
            return self._dispatch_admitted(ctx)
        budget = self.settings.wait_budget
        try:
            slot = _admission.acquire(self.store.journal_dir, ctx.operation["providerScopeId"], storage, self.settings.storage_concurrency,
                                      budget=self._timeout if budget is None else budget, clock=self.settings.clock, sleep=self.settings.sleep,
                                      holder={"operationId": ctx.operation["operationId"], "stage": ctx.kind})
        except _admission.AdmissionWaiting as waiting:
            return _result(ctx, changed=False, done=False, progress=waiting.progress)
        ctx.facts["admission"] = slot
        try:
            result = self._dispatch_admitted(ctx)
        finally:
            slot.release()
        if result.get("requests"):
            result["admission"] = slot.summary()
        return result

    def _dispatch_admitted(self, ctx: StageContext) -> dict[str, t.Any]:
        lock_deadline = self.settings.clock() + self.settings.lock_wait
        while True:
            try:
                self.logic.preconditions(ctx)
            except StageInProgress as waiting:
                # Still waiting for the target (e.g. a guest agent): nothing was sent; re-run to keep waiting.
                return self._in_progress(ctx, waiting, changed=False)
            except StageError as err:
                self._fail_if_final(ctx, err)
            checkpoint = None if self.settings.check_mode else self.logic.checkpoint(ctx)
            if checkpoint:
                self._record_evidence(ctx, checkpoint)
            if self.settings.diff:
                ctx.diff = self.logic.diff(ctx)
            request = self.logic.request(ctx)
            if request is None:
                # Already in the desired state (read back); nothing to send.
                if self.settings.check_mode:
                    return _result(ctx, changed=False, done=True)
                try:
                    evidence = self.logic.observe(ctx)
                except StageInProgress as running:
                    return self._in_progress(ctx, running, changed=False)
                except StageError as err:
                    self._fail_if_final(ctx, err)
                self._record_handoff(ctx, evidence)
                self._stop_if_cancelled()
                self._refresh(ctx, self.store.record_dispatch(ctx.operation["operationId"], ctx.kind, dict(NOOP_REQUEST)))
                self._refresh(ctx, self.store.record_completed(ctx.operation["operationId"], ctx.kind, evidence))
                self._close_if_last(ctx)
                return _result(ctx, changed=False, done=True)
            self._require_write_allowed(ctx)
            if self.settings.check_mode:
                return _result(ctx, changed=True, done=False, requests=[request.summary()])
            self._stop_if_cancelled()  # the last safe point: nothing may stop the run between the record and the send
            self._refresh(ctx, self.store.record_dispatch(ctx.operation["operationId"], ctx.kind, request.summary()))
            try:
                data = self.client.request(request.method, request.path, request.params).get("data")
            except ProviderError as err:
                if proves_not_applied(err):
                    self._refresh(ctx, self.store.record_not_sent(ctx.operation["operationId"], ctx.kind))
                    if err.code == "locked" and self.settings.clock() < lock_deadline:
                        self.settings.sleep(min(2.0, max(0.0, lock_deadline - self.settings.clock())))
                        continue
                    raise self.logic.refused(ctx, err) from None
                return self._resolve(ctx, cause=err.code, error=err)
            try:
                upid, evidence = self.logic.accept_reply(ctx, request, data)
            except VmanywareError:
                # The request was accepted but its reply is not what we sent for: resolve by reads.
                return self._resolve(ctx, cause="unexpected_response")
            self._refresh(ctx, self.store.record_submitted(ctx.operation["operationId"], ctx.kind, upid, evidence))
            if upid is None:
                return self._complete(ctx, requests=[request.summary()])
            return self._reconcile(ctx, upid, requests=[request.summary()], changed=True)

    def _reconcile(self, ctx: StageContext, upid: str, requests: list[dict[str, t.Any]] | None = None,
                   changed: bool = False) -> dict[str, t.Any]:
        """Follow a known task by GET only, within this run's wait budget and the stage deadline."""
        slot = ctx.facts.get("admission")
        holding = None
        if slot is not None and not slot.released:  # keep the storage slot while the new task may still allocate
            holding = _admission.Holding(slot, self.client, upid, self.logic.allocations(ctx), limit=self._timeout,
                                         clock=self.settings.clock, sleep=self.settings.sleep)
        budget = self.settings.wait_budget
        wait = self._timeout if budget is None else budget
        if self.settings.check_mode:
            outcome = poll_once(self.client, upid)
        else:
            outcome = wait_task(self.client, upid, timeout=wait, clock=self.settings.clock,
                                sleep=self.settings.sleep if holding is None else holding.sleep)
        if holding is not None:
            holding.finish(ended=outcome.status not in ("running", "timeout", "unobservable"))
        if outcome.status in ("running", "timeout"):
            dispatched = ctx.record["dispatchedAt"]
            if outcome.status == "timeout" and budget is None:
                raise StageError("The Proxmox task did not finish before the stage deadline; re-run to keep following it.",
                                 code="task_timeout", details={"stage": ctx.kind, "upid": upid, "dispatchedAt": dispatched})
            return _result(ctx, changed=changed, done=False, requests=requests, progress=self.logic.progress(ctx, upid))
        if outcome.status == "unobservable":
            raise StageError("The task status could not be polled; re-run to reconcile it by reads.", code="task_unobservable",
                             details={"stage": ctx.kind, "upid": upid})
        if not outcome.succeeded:
            self._fail(ctx, self.logic.task_error(ctx, upid, outcome))
        warnings = {"taskWarnings": outcome.warnings} if outcome.warnings else {}
        return self._complete(ctx, requests=requests, task=outcome, extra_evidence=warnings)

    def _complete(self, ctx: StageContext, *, requests: list[dict[str, t.Any]] | None = None, task: TaskOutcome | None = None,
                  extra_evidence: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        try:
            evidence = self.logic.observe(ctx)
        except StageInProgress as running:
            return self._in_progress(ctx, running, changed=requests is not None, requests=requests)
        except StageError as err:
            if err.code == "observation_mismatch":
                self._fail(ctx, err)
            self._fail_if_final(ctx, err)
        evidence.update(extra_evidence or {})
        self._record_handoff(ctx, evidence)
        self._refresh(ctx, self.store.record_completed(ctx.operation["operationId"], ctx.kind, evidence))
        self._close_if_last(ctx)
        extra: dict[str, t.Any] = {}
        if task is not None:
            extra["task"] = task.to_result()
            if task.warnings:
                extra["warnings"] = ["The Proxmox task ended with %d warning(s)." % task.warnings]
        return _result(ctx, changed=True, done=True, requests=requests, **extra)

    def _resolve(self, ctx: StageContext, cause: str = "reply_lost", error: ProviderError | None = None) -> dict[str, t.Any]:
        """A submission started but its outcome is unknown: decide by reads only."""
        if self.settings.check_mode:
            return _result(ctx, changed=False, done=False, preview="outcome of an earlier submission is being resolved")
        return self._resolve_by(ctx, self.logic.resolve_lost_reply(ctx), cause, error)

    def _resolve_by(self, ctx: StageContext, resolution: Resolution, cause: str, error: ProviderError | None = None) -> dict[str, t.Any]:
        """Reads only: applied -> follow/observe it; proven never started (``Resolution.never_started``) -> pending and sent
        once more in this run; otherwise read again within this run's wait budget, then ``uncertain`` (a later run reads
        again). An HTTP error alone never proves anything here: a pre-check refusal was handled before (``proves_not_applied``)."""
        wait = self.settings.wait_budget if self.settings.wait_budget is not None else min(self._timeout, DEFAULT_RESOLVE_WAIT)
        deadline = self.settings.clock() + max(0.0, wait)
        interval = 0.5
        while True:
            if resolution.verdict == "applied":
                return self._applied(ctx, resolution)
            if resolution.verdict == "not_applied" and resolution.proven and ctx.record["status"] == "dispatching":
                # The guest-side marker proves the command never started and never will (docs/stages.md, "Guest commands").
                self._refresh(ctx, self.store.record_not_sent(ctx.operation["operationId"], ctx.kind))
                if not ctx.facts.get("resent"):
                    ctx.facts["resent"] = True
                    return self._dispatch(ctx)
                if error is not None:
                    raise self.logic.refused(ctx, error) from None
                raise StageError("The request did not start; re-run to send it again.", code="outcome_uncertain",
                                 details={"stage": ctx.kind, "cause": cause})
            remaining = deadline - self.settings.clock()
            if remaining <= 0 or resolution.final:
                break
            self.settings.sleep(min(interval, remaining))
            interval = min(interval * 2, 5.0)
            resolution = self.logic.resolve_lost_reply(ctx)
        request = ctx.record.get("request") or {}
        message = resolution.message or (
            "Reads do not show the effect of %s %s, whose outcome is unknown; it is never sent again. Check the VM and the node's "
            "task list in Proxmox: re-run when the effect shows, or abandon the operation." % (request.get("method"), request.get("path")))
        if resolution.proven:
            message = resolution.message or (
                "The guest command of %s %s provably never started (its marker in the guest says so and a late start is refused), "
                "but the journal keeps the stage uncertain once it was; abandon the operation and provision again." % (
                    request.get("method"), request.get("path")))
        self._uncertain(ctx, cause if cause in AMBIGUOUS_CODES else "reply_lost", message)

    def _applied(self, ctx: StageContext, resolution: Resolution) -> dict[str, t.Any]:
        if ctx.record["status"] == "uncertain" and resolution.upid is None and resolution.evidence:
            self._refresh(ctx, self.store.record_evidence(ctx.operation["operationId"], ctx.kind, dict(resolution.evidence)))
        elif ctx.record["status"] == "dispatching" or resolution.upid is not None:
            if ctx.record["status"] == "uncertain":
                # The journal allows uncertain -> completed only; record the task through evidence.
                self._refresh(ctx, self.store.record_evidence(ctx.operation["operationId"], ctx.kind,
                                                              dict(resolution.evidence, resolvedUpid=resolution.upid)))
            else:
                self._refresh(ctx, self.store.record_submitted(ctx.operation["operationId"], ctx.kind, resolution.upid,
                                                               resolution.evidence))
        if resolution.upid is not None:
            return self._reconcile(ctx, resolution.upid, changed=True)
        return self._complete(ctx)

    # -- guest commands (docs/stages.md, "Guest commands") --------------------------------------------
    def guest_exec(self, ctx: StageContext, command: GuestCommand, deadline: float, started: float | None = None) -> GuestOutcome:
        """The one way a stage runs a command in the guest (``StageContext.guest_exec``).

        Resume the PID journaled in ``command.slot`` by GET; else (the write checks first for a ``write`` command) journal
        the started marker (with the path of its marker in the guest), exec the wrapped command, journal the PID; then poll
        ``exec-status`` until the command exits, ``deadline`` (epoch) passes, or this run's wait budget (from ``started``)
        is spent. A marker without a PID (an ambiguous exec reply, a crash between exec and PID) is resolved through the
        guest-side marker files (``exec_marker_state``): never started -> sent afresh; started -> its exit code is awaited
        through the files; unreadable -> ``StageUncertain`` (the exec is never issued again).
        """
        if self.settings.check_mode:
            raise StageError("A guest command was requested in check mode.", code="internal_error")
        budget = self.settings.wait_budget
        budget_end = None if budget is None else (wall_clock() if started is None else started) + float(budget)
        since = wall_clock()  # when a marker lacks ``issuedAt`` (journaled by an older version)
        sent = False
        while True:
            marker = self._journaled_marker(ctx, command)
            if marker is None:
                now = wall_clock()
                if sent and now >= deadline:  # sent afresh (never started) only within the deadline and the wait budget
                    return GuestOutcome("timeout", None)
                if sent and budget_end is not None and now >= budget_end:
                    return GuestOutcome("running", None)
                sent = True
                marker = self._start_exec(ctx, command)
                self._pause(marker, since, deadline, budget_end)  # it has hardly started: read its status after the first pause
            if marker.get("pid") is None:
                followed = self._follow_marker(ctx, command, marker, since, deadline, budget_end)
                if followed is None:
                    continue  # never started (or a repeatable command that exited): run it afresh
                return followed
            pid = t.cast(int, marker["pid"])
            try:
                status = _exec_status(ctx, pid)
            except ProviderError as err:
                if agent_reason(err) != "unknown_pid":
                    raise
                # Exited, its status consumed by a run that did not record it (or QGA forgot the PID).
                if command.repeatable:
                    self._record_evidence(ctx, {command.slot: None})
                    continue
                exitcode = None
                if isinstance(marker.get("file"), str):  # the wrapper recorded the exit code in the guest
                    state, code = exec_marker_state(ctx, marker["file"])
                    exitcode = code if state == "exited" else None
                self._record_evidence(ctx, {command.slot: dict(marker, exitcode=exitcode)})
                return GuestOutcome("exited", pid, exitcode)
            if status is not None:
                self._record_evidence(ctx, {command.slot: None if command.repeatable else dict(marker, exitcode=status["exitcode"])})
                return GuestOutcome("exited", pid, status["exitcode"], status["out"], status["err"])
            now = wall_clock()
            if now >= deadline:
                return GuestOutcome("timeout", pid)
            if budget_end is not None and now >= budget_end:
                return GuestOutcome("running", pid)
            self._pause(marker, since, deadline, budget_end)

    def _follow_marker(self, ctx: StageContext, command: GuestCommand, marker: dict[str, t.Any], since: float, deadline: float,
                       budget_end: float | None) -> GuestOutcome | None:
        """A command whose PID is unknown, followed through its marker files in the guest (``exec_marker_state``).

        None: it never started (its journaled marker is cleared, so the caller sends it afresh), or a repeatable command
        exited (cleared too: run again for its output). Otherwise its outcome (``pid`` None; no output for a command
        followed this way). Unreadable files raise ``StageUncertain``.
        """
        path = t.cast(str, marker["file"])
        unreadable_since: float | None = None
        while True:
            state, code = exec_marker_state(ctx, path)
            if state == "unreadable":
                # The agent may be back in a moment (a busy or restarting agent): read again for a while, never exec again.
                now = wall_clock()
                unreadable_since = now if unreadable_since is None else unreadable_since
                if now >= deadline or (budget_end is not None and now >= budget_end) or now - unreadable_since >= DEFAULT_RESOLVE_WAIT:
                    raise _exec_lost(ctx, command, path)
                self._pause(marker, since, deadline, budget_end)
                continue
            unreadable_since = None
            if state == "never" and not command.repeatable:
                # Only after ``.started`` was seen, in the race the wrapper settles by finding ``.superseded``: it did not
                # run. Never sent afresh from here (a non-repeatable command is the stage's request): the caller's reads decide.
                self._record_evidence(ctx, {command.slot: dict(marker, exitcode=None)})
                return GuestOutcome("exited", None)
            if state == "never" or (state == "exited" and command.repeatable):
                self._record_evidence(ctx, {command.slot: None})
                return None
            if state == "exited":
                self._record_evidence(ctx, {command.slot: dict(marker, exitcode=code)})
                return GuestOutcome("exited", None, code)
            now = wall_clock()
            if now >= deadline:
                return GuestOutcome("timeout", None)
            if budget_end is not None and now >= budget_end:
                return GuestOutcome("running", None)
            self._pause(marker, since, deadline, budget_end)

    def _pause(self, marker: t.Mapping[str, t.Any], since: float, deadline: float, budget_end: float | None) -> None:
        """Sleep before the next ``exec-status`` read, not past the deadline nor this run's wait budget (epoch).

        The schedule is the task polls' (``_tasks.next_pause``), counted from the command's journaled ``issuedAt``: the
        first read 0.25 s after the exec, then as long as the command has run, at most 0.5 s apart in its first minute and
        1 s after. A resumed PID (read at once) so goes on at the pace its running time gives, not from the start again."""
        now = wall_clock()
        issued = marker.get("issuedAt")
        ran = max(0.0, now - (float(issued) if isinstance(issued, (int, float)) and not isinstance(issued, bool) else since))
        interval = next_pause(ran, ran)
        until = deadline if budget_end is None else min(deadline, budget_end)
        self.settings.sleep(min(interval, max(0.0, until - now)))

    def _journaled_marker(self, ctx: StageContext, command: GuestCommand) -> dict[str, t.Any] | None:
        """The marker of ``command`` with its PID, or with its guest-side marker file when the PID is unknown; None when none
        is running. A started exec with neither (journaled by an older version, without the wrapper) is uncertain."""
        marker = ctx.evidence().get(command.slot)
        if not isinstance(marker, dict) or marker.get("probe") != command.name or "exitcode" in marker:
            return None
        pid = marker.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            return dict(marker)
        if marker.get("submissionStarted"):
            if isinstance(marker.get("file"), str):
                return dict(marker, pid=None)
            raise _exec_lost(ctx, command)
        return None

    def _start_exec(self, ctx: StageContext, command: GuestCommand) -> dict[str, t.Any]:
        """``POST {vm}/agent/exec`` of the wrapped command, between the started marker and the PID (both journaled).

        The marker names its file in the guest (unique to the operation, the slot and this attempt) before the exec is sent.
        A reply that proves a pre-check refusal (``proves_not_applied``) clears it; any other failure, or a reply without a
        PID, returns it without a PID: the caller resolves it through the guest-side files."""
        if command.write:
            self._require_write_allowed(ctx)
        self._stop_if_cancelled()
        issued = round(wall_clock(), 3)
        path = exec_marker_path(ctx.operation["operationId"], command.slot, int(issued * 1000))
        marker: dict[str, t.Any] = {"probe": command.name, "pid": None, "submissionStarted": True, "issuedAt": issued, "file": path}
        self._record_evidence(ctx, {command.slot: marker})
        try:
            data = self.client.post(ctx.vm_path + "/agent/exec", command=wrap_guest_argv(path, command.argv))
        except ProviderError as err:
            if not proves_not_applied(err):
                return marker  # it may run in the guest (``guest-exec failed - got timeout``): the marker decides
            self._record_evidence(ctx, {command.slot: None})  # a pre-check refusal: nothing started in the guest
            if agent_reason(err) == "exec_disabled":
                raise StageError("The guest agent refuses guest-exec; enable it in the guest's qemu-guest-agent configuration.",
                                 code="guest_exec_unavailable", details={"stage": ctx.kind}) from None
            raise
        pid = data.get("pid") if isinstance(data, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool):
            return marker
        marker["pid"] = pid
        self._record_evidence(ctx, {command.slot: marker})
        return marker
