# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The journal's stage transitions (pending -> dispatching -> submitted -> completed, failed, uncertain), the evidence,
the handoff and the operation's status, as compare-and-set mutations of one operation file.

``StageRecords`` is mixed into ``JournalStore`` (store.py), which provides the locked mutation (``_mutate``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import copy
import typing as t

from .._core.errors import InputError
from .._core.redaction import redact
from .document import (
    _OPERATION_FROM,
    _STAGE_FROM,
    _STAGE_KIND,
    _UPID,
    _failure_code,
    _failure_message,
    _mapping_arg,
    journal_conflict,
    stage,
    utc_now,
)

CLAIM_KIND = "vmanyware.dev/v1/Claim"

MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
MAX_CLAIM_BYTES = 4096


class StageRecords:
    """The stage and operation-status mutations of ``JournalStore``."""

    def _mutate(
        self, operation_id: str, apply: t.Callable[[dict[str, t.Any]], tuple[str, str]], expected_revision: int | None
    ) -> dict[str, t.Any]:
        raise NotImplementedError  # JournalStore's: lock, re-read, check, apply, write

    def _stage_transition(
        self, document: dict[str, t.Any], kind: str, new_status: str, expected_status: str | None
    ) -> dict[str, t.Any]:
        current = stage(document, kind)
        if expected_status is not None and current["status"] != expected_status:
            raise journal_conflict(document["operationId"], "expected_status")
        if current["status"] not in _STAGE_FROM[new_status]:
            raise journal_conflict(document["operationId"], "stage_transition")
        if current["status"] == "pending":
            for earlier in document["stages"][: current["position"] - 1]:
                if earlier["status"] != "completed":
                    raise journal_conflict(document["operationId"], "stage_order")
        if document["status"] in ("completed", "failed"):
            raise journal_conflict(document["operationId"], "operation_finished")
        return t.cast("dict[str, t.Any]", current)  # the transitions update several keys at once

    def record_dispatch(
        self,
        operation_id: str,
        kind: str,
        request_summary: t.Mapping[str, t.Any],
        *,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """pending -> dispatching, ``submissionStarted: true``: durable before the caller sends the request.

        Only from ``pending``: a submission whose outcome is unknown (``dispatching``, ``uncertain``) is never
        dispatched again; reads resolve it. ``request_summary`` is stored redacted (``redact``).
        """
        summary = redact(_mapping_arg(request_summary, "request_summary"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "dispatching", None)
            if document["status"] != "open":
                raise journal_conflict(operation_id, "operation_not_open")
            current.update(
                status="dispatching",
                submissionStarted=True,
                attempts=current["attempts"] + 1,
                dispatchedAt=utc_now(),
                request=summary,
            )
            return kind, "dispatching"

        return self._mutate(operation_id, apply, expected_revision)

    def record_not_sent(
        self, operation_id: str, kind: str, *, expected_revision: int | None = None
    ) -> dict[str, t.Any]:
        """dispatching -> pending: the request provably did not take effect.

        Used when nothing reached Proxmox (connection refused, TLS refused) or Proxmox answered with
        a definite rejection before changing anything (401/403/400, ``VM is locked``, digest
        mismatch). The attempt count is kept; re-running the stage dispatches afresh.
        """

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "pending", "dispatching")
            current.update(status="pending", submissionStarted=False, dispatchedAt=None, request=None, upid=None)
            return kind, "pending"

        return self._mutate(operation_id, apply, expected_revision)

    def record_submitted(
        self,
        operation_id: str,
        kind: str,
        upid: str | None,
        evidence: t.Mapping[str, t.Any] | None = None,
        *,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """dispatching -> submitted: Proxmox accepted the request (``upid`` of its task, if any)."""
        if upid is not None and (not isinstance(upid, str) or not _UPID.match(upid)):
            raise InputError("The UPID is not well-formed.", path="upid", details={"rule": "upid_format"})
        extra = redact(_mapping_arg(evidence or {}, "evidence"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "submitted", None)
            current.update(status="submitted", upid=upid)
            current["evidence"].update(extra)
            return kind, "submitted"

        return self._mutate(operation_id, apply, expected_revision)

    def record_evidence(
        self,
        operation_id: str,
        kind: str,
        evidence: t.Mapping[str, t.Any],
        *,
        expected_status: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """Merge ``evidence`` (redacted) into the stage's evidence; the status does not change.

        With ``expected_revision`` (the ``revision`` of the document the caller read) this is a
        compare-and-set: ``journal_conflict`` if any other write happened in between.
        """
        extra = redact(_mapping_arg(evidence, "evidence"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = stage(document, kind)
            if expected_status is not None and current["status"] != expected_status:
                raise journal_conflict(operation_id, "expected_status")
            current["evidence"].update(extra)
            return kind, current["status"]

        return self._mutate(operation_id, apply, expected_revision)

    def record_completed(
        self,
        operation_id: str,
        kind: str,
        evidence: t.Mapping[str, t.Any] | None = None,
        *,
        expected_status: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """dispatching/submitted/uncertain -> completed. Completing the last uncertain stage reopens an uncertain operation."""
        extra = redact(_mapping_arg(evidence or {}, "evidence"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "completed", expected_status)
            current.update(status="completed", completedAt=utc_now(), failure=None)
            current["evidence"].update(extra)
            if document["status"] == "uncertain" and not any(
                item["status"] == "uncertain" for item in document["stages"]
            ):
                document.update(status="open", failure=None)
            return kind, "completed"

        return self._mutate(operation_id, apply, expected_revision)

    def record_failed(
        self,
        operation_id: str,
        kind: str,
        code: str,
        message: str,
        *,
        expected_status: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """-> failed; the operation becomes ``failed`` in the same write. The target stays claimed."""
        failure = {"code": _failure_code(code), "message": _failure_message(message)}

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "failed", expected_status)
            current.update(status="failed", completedAt=utc_now(), failure=dict(failure))
            document.update(
                status="failed", failure={"code": failure["code"], "message": failure["message"], "stage": kind}
            )
            return kind, "failed"

        return self._mutate(operation_id, apply, expected_revision)

    def record_uncertain(
        self,
        operation_id: str,
        kind: str,
        code: str,
        message: str,
        *,
        expected_status: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """dispatching/submitted -> uncertain (outcome unknown, e.g. ``reply_lost``); the operation becomes ``uncertain``."""
        failure = {"code": _failure_code(code), "message": _failure_message(message)}

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "uncertain", expected_status)
            current.update(status="uncertain", failure=dict(failure))
            document.update(
                status="uncertain", failure={"code": failure["code"], "message": failure["message"], "stage": kind}
            )
            return kind, "uncertain"

        return self._mutate(operation_id, apply, expected_revision)

    def set_handoff(
        self, operation_id: str, handoff: t.Mapping[str, t.Any], *, expected_revision: int | None = None
    ) -> dict[str, t.Any]:
        """Replace the operation's ``handoff`` (the end result: VM id, addresses, snapshot...), redacted."""
        value = redact(_mapping_arg(handoff, "handoff"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            document["handoff"] = value
            return "operation", document["status"]

        return self._mutate(operation_id, apply, expected_revision)

    def update_operation_status(
        self,
        operation_id: str,
        status: str,
        *,
        failure: t.Mapping[str, t.Any] | None = None,
        expected_status: str | None = None,
        expected_revision: int | None = None,
    ) -> dict[str, t.Any]:
        """Move the operation to ``status`` (compare-and-set on ``expected_status``).

        Allowed: open -> completed (every stage completed), open -> failed/uncertain (``failure``
        {code, message[, stage]} required), uncertain -> completed/failed, uncertain -> open (no
        stage uncertain). ``completed`` and ``failed`` are final.
        """
        if status not in _OPERATION_FROM:
            raise InputError(
                "The operation status is not one of open, completed, failed, uncertain.",
                path="status",
                details={"rule": "enum"},
            )
        record: dict[str, t.Any] | None = None
        if status in ("failed", "uncertain"):
            if not isinstance(failure, t.Mapping):
                raise InputError(
                    "A failed or uncertain operation needs a failure code and message.",
                    path="failure",
                    details={"rule": "required"},
                )
            stage_kind = failure.get("stage")
            if stage_kind is not None and (not isinstance(stage_kind, str) or not _STAGE_KIND.match(stage_kind)):
                raise InputError(
                    "failure.stage must be a stage kind.", path="failure.stage", details={"rule": "stage_kind"}
                )
            record = {
                "code": _failure_code(failure.get("code")),
                "message": _failure_message(failure.get("message")),
                "stage": stage_kind,
            }

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = document["status"]
            if expected_status is not None and current != expected_status:
                raise journal_conflict(operation_id, "expected_status")
            if current not in _OPERATION_FROM[status]:
                raise journal_conflict(operation_id, "operation_transition")
            statuses = [item["status"] for item in document["stages"]]
            if status == "completed" and any(item != "completed" for item in statuses):
                raise journal_conflict(operation_id, "stages_not_completed")
            if status == "open" and any(item in ("failed", "uncertain") for item in statuses):
                raise journal_conflict(operation_id, "stages_not_settled")
            if record is not None and record["stage"] is not None:
                stage(document, record["stage"])
            document.update(status=status, failure=copy.deepcopy(record))
            return "operation", status

        return self._mutate(operation_id, apply, expected_revision)
