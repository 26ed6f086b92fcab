# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The protocol between the runner and a stage: the hooks a stage implements (``StageLogic``), what they may use
(``StageContext``: the journal's snapshots, earlier evidence, the client, guest commands through the runner) and the
per-run settings (``StageSettings``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import typing as t

from .._api import admission as _admission
from .._api.recent_reads import RecentReads
from .._api.tasks import TaskOutcome
from .._core.errors import ProviderError, VmanywareError
from .._core.protocols import ApiClient, StageRecord
from .._journal import stage as journal_stage
from .._operation.create import PROVISIONING_GATE
from .outcomes import (
    GuestCommand,
    GuestOutcome,
    Request,
    Resolution,
    StageError,
    accept_task,
)


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
        return cls(
            **{
                name: value
                for name, value in options.items()
                if name in parameters and name != "self" and value is not None
            }
        )

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
        return StageError(
            "The Proxmox task ended with an error.",
            code="task_failed",
            details={"stage": ctx.kind, "upid": upid, "log_tail": list(outcome.log_tail)},
        )

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """Evidence the runner journals once ``preconditions`` passed, before anything is sent or probed (never in check
        mode): what must survive a crash, e.g. a deadline that re-runs never extend, or what a destroy removes."""
        return None

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        """The operation's handoff after this stage's observation (the runner records it with the completion); None: unchanged."""
        return None
