# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stage runner: the one loop every stage module uses (docs/stages.md).

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
A guest command runs through the exec-marker wrapper (``guest_exec.py``), whose files in the guest prove whether
it started. The hooks and what they use are in ``protocol.py``; what they return or raise in ``outcomes.py``.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import os
import typing as t

from .._api import admission as _admission
from .._api.cli import with_cli
from .._api.http_errors import proves_not_applied
from .._api.tasks import TaskOutcome, poll_once, wait_task
from .._core.cancel import RunCancelled, cancellable_sleep, raise_if_cancelled
from .._core.errors import InputError, ProviderError, VmanywareError
from .._core.protocols import ApiClient, ApiVerbs, OperationStore
from .._formats.plan import recorded_leases, resolve_mapping
from .._journal import utc_now
from .._operation.create import read_gate
from .guest_exec import GuestExecution
from .outcomes import (
    AMBIGUOUS_CODES,
    DEFAULT_RESOLVE_WAIT,
    GATE_CODES,
    NOOP_REQUEST,
    Resolution,
    StageError,
    StageInProgress,
    StageUncertain,
)
from .protocol import StageContext, StageLogic, StageSettings

# Without a wait budget, reads resolving an unknown outcome are repeated for at most this long (seconds).


def _result(
    ctx: StageContext, *, changed: bool, done: bool, requests: list[dict[str, t.Any]] | None = None, **extra: t.Any
) -> dict[str, t.Any]:
    record = ctx.record
    result: dict[str, t.Any] = {
        "changed": changed,
        "done": done,
        "operation_id": ctx.operation["operationId"],
        "stage": {
            "kind": ctx.kind,
            "position": record["position"],
            "status": record["status"],
            "upid": record["upid"],
            "attempts": record["attempts"],
            "evidence": dict(record["evidence"]),
        },
        "requests": [with_cli(summary) for summary in requests or []],  # each with its qm/pct equivalent (_cli.py)
    }
    if ctx.diff is not None:
        result["diff"] = ctx.diff
    result.update(extra)
    return result


def _require_not_ended(operation: t.Mapping[str, t.Any]) -> None:
    """No stage runs on an operation the operator abandoned or whose guest cleanup started (docs/operations.md, "Lifecycle")."""
    if (operation.get("lifecycle") or {}).get("cleanup") is not None:
        raise StageError(
            "The operation's guest is being or was removed; no stage runs on it.",
            code="operation_cleaned",
            details={"operationId": operation["operationId"]},
        )
    if (operation.get("release") or {}).get("reason") == "abandoned":
        raise StageError(
            "The operation was abandoned; no stage runs on it.",
            code="operation_abandoned",
            details={"operationId": operation["operationId"]},
        )


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


class StageRunner(GuestExecution):
    """Runs one ``StageLogic`` against one operation (docs/stages.md)."""

    def __init__(
        self, store: OperationStore, client: ApiClient, logic: StageLogic, settings: StageSettings | None = None
    ) -> None:
        self.store = store
        self.client = client
        self.logic = logic
        self.settings = settings or StageSettings()
        if self.settings.cancel_check is not None:  # every pause of the run (polls, lock waits) is a safe point to stop
            self.settings = dataclasses.replace(
                self.settings, sleep=cancellable_sleep(self.settings.sleep, self.settings.cancel_check)
            )

    # -- helpers -------------------------------------------------------------------------------------
    def _context(self, operation_id: str) -> StageContext:
        operation = self.store.load(operation_id)
        return StageContext(
            operation=operation,
            client=self.client,
            kind=self.logic.kind,
            check_mode=self.settings.check_mode,
            settings=self.settings,
            guest_runner=self.guest_exec,
            recent_reads=self.settings.recent_reads if self.logic.trusts_recent_config else None,
            recent_power=self.settings.recent_reads if self.logic.trusts_recent_power else None,
            recent_template=self.settings.recent_reads if self.logic.trusts_recent_template else None,
            recent_vmid=self.settings.recent_reads if self.logic.trusts_recent_vmid_free else None,
        )

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
                mapping: dict[str, t.Any] | None = resolve_mapping(
                    self.settings.catalog, ctx.definition, ctx.node, recorded_leases(ctx.mapping)
                )
            except InputError:
                mapping = None
            if mapping != ctx.mapping:
                raise StageError(
                    "The catalog's mapping for the image (or its network) is not the one this operation was confirmed with; nothing was sent.",
                    code="plan_changed",
                    details={"stage": ctx.kind, "fields": ["mapping"]},
                )

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

    def _in_progress(
        self,
        ctx: StageContext,
        running: StageInProgress,
        *,
        changed: bool,
        requests: list[dict[str, t.Any]] | None = None,
    ) -> dict[str, t.Any]:
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
        if (
            document["status"] == "open"
            and document.get("release") is None
            and all(item["status"] == "completed" for item in document["stages"])
        ):
            self._refresh(
                ctx, self.store.update_operation_status(document["operationId"], "completed", expected_status="open")
            )

    def _uncertain(self, ctx: StageContext, code: str, message: str) -> t.NoReturn:
        if ctx.record["status"] != "uncertain":
            self._refresh(ctx, self.store.record_uncertain(ctx.operation["operationId"], ctx.kind, code, message))
        raise StageError(
            message,
            code="outcome_uncertain",
            details={"stage": ctx.kind, "cause": code, "operationId": ctx.operation["operationId"]},
        )

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
                raise StageError(
                    lost.message, code="outcome_uncertain", details={"stage": ctx.kind, "cause": lost.cause}
                ) from None
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
            raise StageError(
                "The stage failed earlier; the operation keeps the target for the operator.",
                code="stage_failed",
                details={"stage": ctx.kind, "cause": failure["code"] if failure else None},
            )
        for earlier in ctx.operation["stages"][: record["position"] - 1]:
            if earlier["status"] != "completed":
                if self.settings.check_mode:
                    return self._preview_from_plan(ctx)
                raise StageError(
                    "An earlier stage has not completed.",
                    code="stage_out_of_order",
                    details={"stage": ctx.kind, "waiting_for": earlier["kind"]},
                )
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
        storage = (
            None if self.settings.check_mode or not self.settings.storage_concurrency else self.logic.allocates_on(ctx)
        )
        if storage is None or ctx.facts.get("admission") is not None:
            return self._dispatch_admitted(ctx)
        budget = self.settings.wait_budget
        try:
            slot = _admission.acquire(
                self.store.journal_dir,
                ctx.operation["providerScopeId"],
                storage,
                self.settings.storage_concurrency,
                budget=self._timeout if budget is None else budget,
                clock=self.settings.clock,
                sleep=self.settings.sleep,
                holder={"operationId": ctx.operation["operationId"], "stage": ctx.kind},
            )
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
                self._refresh(
                    ctx, self.store.record_dispatch(ctx.operation["operationId"], ctx.kind, dict(NOOP_REQUEST))
                )
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

    def _reconcile(
        self, ctx: StageContext, upid: str, requests: list[dict[str, t.Any]] | None = None, changed: bool = False
    ) -> dict[str, t.Any]:
        """Follow a known task by GET only, within this run's wait budget and the stage deadline."""
        slot = ctx.facts.get("admission")
        holding = None
        if slot is not None and not slot.released:  # keep the storage slot while the new task may still allocate
            holding = _admission.Holding(
                slot,
                self.client,
                upid,
                self.logic.allocations(ctx),
                limit=self._timeout,
                clock=self.settings.clock,
                sleep=self.settings.sleep,
            )
        budget = self.settings.wait_budget
        wait = self._timeout if budget is None else budget
        if self.settings.check_mode:
            outcome = poll_once(self.client, upid)
        else:
            outcome = wait_task(
                self.client,
                upid,
                timeout=wait,
                clock=self.settings.clock,
                sleep=self.settings.sleep if holding is None else holding.sleep,
            )
        if holding is not None:
            holding.finish(ended=outcome.status not in ("running", "timeout", "unobservable"))
        if outcome.status in ("running", "timeout"):
            dispatched = ctx.record["dispatchedAt"]
            if outcome.status == "timeout" and budget is None:
                raise StageError(
                    "The Proxmox task did not finish before the stage deadline; re-run to keep following it.",
                    code="task_timeout",
                    details={"stage": ctx.kind, "upid": upid, "dispatchedAt": dispatched},
                )
            return _result(ctx, changed=changed, done=False, requests=requests, progress=self.logic.progress(ctx, upid))
        if outcome.status == "unobservable":
            raise StageError(
                "The task status could not be polled; re-run to reconcile it by reads.",
                code="task_unobservable",
                details={"stage": ctx.kind, "upid": upid},
            )
        if not outcome.succeeded:
            self._fail(ctx, self.logic.task_error(ctx, upid, outcome))
        warnings = {"taskWarnings": outcome.warnings} if outcome.warnings else {}
        return self._complete(ctx, requests=requests, task=outcome, extra_evidence=warnings)

    def _complete(
        self,
        ctx: StageContext,
        *,
        requests: list[dict[str, t.Any]] | None = None,
        task: TaskOutcome | None = None,
        extra_evidence: dict[str, t.Any] | None = None,
    ) -> dict[str, t.Any]:
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

    def _resolve(
        self, ctx: StageContext, cause: str = "reply_lost", error: ProviderError | None = None
    ) -> dict[str, t.Any]:
        """A submission started but its outcome is unknown: decide by reads only."""
        if self.settings.check_mode:
            return _result(ctx, changed=False, done=False, preview="outcome of an earlier submission is being resolved")
        return self._resolve_by(ctx, self.logic.resolve_lost_reply(ctx), cause, error)

    def _resolve_by(
        self, ctx: StageContext, resolution: Resolution, cause: str, error: ProviderError | None = None
    ) -> dict[str, t.Any]:
        """Reads only: applied -> follow/observe it; proven never started (``Resolution.never_started``) -> pending and sent
        once more in this run; otherwise read again within this run's wait budget, then ``uncertain`` (a later run reads
        again). An HTTP error alone never proves anything here: a pre-check refusal was handled before (``proves_not_applied``)."""
        wait = (
            self.settings.wait_budget
            if self.settings.wait_budget is not None
            else min(self._timeout, DEFAULT_RESOLVE_WAIT)
        )
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
                raise StageError(
                    "The request did not start; re-run to send it again.",
                    code="outcome_uncertain",
                    details={"stage": ctx.kind, "cause": cause},
                )
            remaining = deadline - self.settings.clock()
            if remaining <= 0 or resolution.final:
                break
            self.settings.sleep(min(interval, remaining))
            interval = min(interval * 2, 5.0)
            resolution = self.logic.resolve_lost_reply(ctx)
        request = ctx.record.get("request") or {}
        message = resolution.message or (
            "Reads do not show the effect of %s %s, whose outcome is unknown; it is never sent again. Check the VM and the node's "
            "task list in Proxmox: re-run when the effect shows, or abandon the operation."
            % (request.get("method"), request.get("path"))
        )
        if resolution.proven:
            message = resolution.message or (
                "The guest command of %s %s provably never started (its marker in the guest says so and a late start is refused), "
                "but the journal keeps the stage uncertain once it was; abandon the operation and provision again."
                % (request.get("method"), request.get("path"))
            )
        self._uncertain(ctx, cause if cause in AMBIGUOUS_CODES else "reply_lost", message)

    def _applied(self, ctx: StageContext, resolution: Resolution) -> dict[str, t.Any]:
        if ctx.record["status"] == "uncertain" and resolution.upid is None and resolution.evidence:
            self._refresh(
                ctx, self.store.record_evidence(ctx.operation["operationId"], ctx.kind, dict(resolution.evidence))
            )
        elif ctx.record["status"] == "dispatching" or resolution.upid is not None:
            if ctx.record["status"] == "uncertain":
                # The journal allows uncertain -> completed only; record the task through evidence.
                self._refresh(
                    ctx,
                    self.store.record_evidence(
                        ctx.operation["operationId"], ctx.kind, dict(resolution.evidence, resolvedUpid=resolution.upid)
                    ),
                )
            else:
                self._refresh(
                    ctx,
                    self.store.record_submitted(
                        ctx.operation["operationId"], ctx.kind, resolution.upid, resolution.evidence
                    ),
                )
        if resolution.upid is not None:
            return self._reconcile(ctx, resolution.upid, changed=True)
        return self._complete(ctx)
