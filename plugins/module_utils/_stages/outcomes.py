# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a stage's hooks return or raise, and how the runner reads a provider error: the request to send (``Request``),
how reads resolved a lost reply (``Resolution``), the stage errors, a guest command and its outcome, the error-code
sets that tell a refusal proven not applied from an ambiguous failure.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import time
import typing as t

from .._api.tasks import parse_upid
from .._core.errors import VmanywareError
from .._core.redaction import redact
from .._operation.create import LIFECYCLE_GATE, PROVISIONING_GATE, SNAPSHOTS_GATE

# How long reads may go on resolving a lost reply (or an unreadable exec marker) before the stage says ``uncertain``.
DEFAULT_RESOLVE_WAIT = 30.0

# Journaled as the "request" of a stage that needed none, so completing it never passes for a lost reply.
NOOP_REQUEST: dict[str, t.Any] = {"noop": True}


# Codes after which the request may or may not have been applied (``response_too_large``: the request ran, its reply
# was not read).
AMBIGUOUS_CODES = frozenset({"reply_lost", "server_error", "unexpected_response", "response_too_large"})


# The error code of each write gate when it is closed.
GATE_CODES = {
    PROVISIONING_GATE: "provisioning_disabled",
    SNAPSHOTS_GATE: "snapshot_disabled",
    LIFECYCLE_GATE: "lifecycle_disabled",
}


class StageInProgress(Exception):
    """Raised by ``observe`` when the submitted work is still running (e.g. a guest exec): ``done: false``.

    ``evidence``: what the run established so far and a later run may rely on (readiness: ``cloudinit: done``);
    the runner journals it (never in check mode).
    """

    def __init__(
        self, progress: t.Mapping[str, t.Any] | None = None, evidence: t.Mapping[str, t.Any] | None = None
    ) -> None:
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
