# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Building operation documents: a new operation from its recorded inputs, an adopted one from what reads proved, and
the comparison of a replay's inputs with the recorded ones.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .._core.errors import InputError
from .._core.redaction import redact
from .document import (
    _HEX64,
    _MAX_KEY,
    _NODE,
    _SCOPE,
    _STAGE_KIND,
    _UPID,
    _VMID_MAX,
    _VMID_MIN,
    KIND,
    SCHEMA_VERSION,
    JournalError,
    _failure_code,
    _failure_message,
    _is_int,
    _mapping_arg,
    hash_idempotency_key,
    validate_document,
)


def new_operation_document(
    operation_id: str,
    key_hash: str | None,
    target: t.Mapping[str, t.Any],
    snapshots: t.Mapping[str, t.Any],
    stage_kinds: list[str],
    now: str,
) -> dict[str, t.Any]:
    """A fresh v1 operation document: what ``create_operation`` writes, and what check mode previews."""
    return {
        "schemaVersion": SCHEMA_VERSION,
        "kind": KIND,
        "operationId": operation_id,
        "revision": 1,
        "idempotencyKeyHash": key_hash,
        "providerScopeId": target["scope"],
        "createdAt": now,
        "updatedAt": now,
        "target": dict(target),
        "definition": snapshots["definition"],
        "mapping": snapshots["mapping"],
        "plan": snapshots["plan"],
        "confirmation": snapshots["confirmation"],
        "status": "open",
        "failure": None,
        "release": None,
        "stages": [_new_stage(position, kind) for position, kind in enumerate(stage_kinds, start=1)],
        "handoff": {},
    }


ADOPTED_REQUEST = {"adopted": True}


_ADOPTED_STATUSES = ("completed", "uncertain", "pending")


def adopted_operation_document(
    operation_id: str,
    key_hash: str | None,
    target: t.Mapping[str, t.Any],
    snapshots: t.Mapping[str, t.Any],
    stage_kinds: list[str],
    observed: list[t.Mapping[str, t.Any]],
    now: str,
) -> dict[str, t.Any]:
    """The document ``adopt_operation`` writes (and check mode previews): a fresh document whose stages carry what reads proved.

    ``observed``: one ``{status, evidence, upid, failure}`` per stage, in order; ``status`` is
    ``completed`` (evidence, optional ``upid``), ``uncertain`` (``failure`` {code, message}: the
    stage resolves its outcome by reads on its next run, as after a lost reply) or ``pending``.
    Adopted records carry ``request: {"adopted": true}``, one attempt and the adoption time as
    ``dispatchedAt`` (and ``completedAt``). The operation is ``uncertain`` when a stage is,
    ``completed`` when every stage is, else ``open``. The result passes ``validate_document``
    (stage order included) or ``internal_error`` is raised.
    """
    document = new_operation_document(operation_id, key_hash, target, snapshots, stage_kinds, now)
    if not isinstance(observed, (list, tuple)) or len(observed) != len(stage_kinds):
        raise InputError("observed must hold one entry per stage.", path="observed", details={"rule": "length"})
    for record, seen in zip(document["stages"], observed):
        status = seen.get("status") if isinstance(seen, t.Mapping) else None
        if status not in _ADOPTED_STATUSES:
            raise InputError(
                "An adopted stage is completed, uncertain or pending.", path="observed", details={"rule": "enum"}
            )
        if status == "pending":
            continue
        upid = seen.get("upid")
        if upid is not None and (not isinstance(upid, str) or not _UPID.match(upid)):
            raise InputError("The UPID is not well-formed.", path="upid", details={"rule": "upid_format"})
        record.update(
            status=status,
            submissionStarted=True,
            attempts=1,
            dispatchedAt=now,
            request=dict(ADOPTED_REQUEST),
            upid=upid if status == "completed" else None,
            evidence=redact(_mapping_arg(seen.get("evidence") or {}, "evidence")),
        )
        if status == "completed":
            record["completedAt"] = now
        else:
            failure = seen.get("failure") or {}
            record["failure"] = {
                "code": _failure_code(failure.get("code")),
                "message": _failure_message(failure.get("message")),
            }
            if document["status"] != "uncertain":
                document.update(status="uncertain", failure=dict(record["failure"], stage=record["kind"]))
    if all(item["status"] == "completed" for item in document["stages"]):
        document["status"] = "completed"
    try:
        validate_document(document, operation_id)
    except Exception:  # pylint: disable=broad-exception-caught
        raise JournalError("Refusing to build an invalid operation document.", code="internal_error") from None
    return document


def _operation_inputs(
    idempotency_key: str | None,
    provider_scope_id: str,
    definition: t.Mapping[str, t.Any],
    mapping: t.Mapping[str, t.Any],
    plan: t.Mapping[str, t.Any],
    confirmation: t.Mapping[str, t.Any],
    target_node: str,
    target_vmid: int,
    stage_kinds: list[str],
) -> tuple[str | None, dict[str, t.Any], list[str], dict[str, t.Any]]:
    """Checked arguments of a new operation: ``(key_hash, target, stage_kinds, snapshots)``."""
    key_hash = hash_idempotency_key(_check_key(idempotency_key)) if idempotency_key is not None else None
    scope = _check_scope(provider_scope_id)
    node = _check_node(target_node)
    vmid = _check_vmid(target_vmid)
    kinds = _check_stage_kinds(stage_kinds)
    snapshots = {
        name: _mapping_arg(value, name)
        for name, value in (
            ("definition", definition),
            ("mapping", mapping),
            ("plan", plan),
            ("confirmation", confirmation),
        )
    }
    for name in ("definitionHash", "planHash"):
        if not isinstance(snapshots["plan"].get(name), str) or not _HEX64.match(snapshots["plan"][name]):
            raise InputError(
                "The plan must carry definitionHash and planHash.", path="plan." + name, details={"rule": "sha256_hex"}
            )
    return key_hash, {"scope": scope, "node": node, "vmid": vmid}, kinds, snapshots


def _check_key(key: t.Any) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= _MAX_KEY or "\x00" in key:
        raise InputError(
            "The idempotency key must be 1-1024 characters.", path="idempotency_key", details={"rule": "length"}
        )
    return key


def _check_scope(scope: t.Any) -> str:
    if not isinstance(scope, str) or not _SCOPE.match(scope):
        raise InputError(
            "The provider scope id must be 1-256 printable ASCII characters without spaces.",
            path="provider_scope_id",
            details={"rule": "format"},
        )
    return scope


def _check_node(node: t.Any) -> str:
    if not isinstance(node, str) or not _NODE.match(node):
        raise InputError("The target node is not a valid node name.", path="target_node", details={"rule": "format"})
    return node


def _check_vmid(vmid: t.Any) -> int:
    if not _is_int(vmid) or not _VMID_MIN <= vmid <= _VMID_MAX:
        raise InputError(code="invalid_target_vmid", path="target_vmid", details={"rule": "range"})
    return int(vmid)


def _check_stage_kinds(kinds: t.Any) -> list[str]:
    if not isinstance(kinds, (list, tuple)) or not 0 < len(kinds) <= 64:
        raise InputError("stage_kinds must list 1-64 stage kinds.", path="stage_kinds", details={"rule": "length"})
    seen: set[str] = set()
    for index, kind in enumerate(kinds):
        if not isinstance(kind, str) or not _STAGE_KIND.match(kind) or kind == "operation" or kind in seen:
            raise InputError(
                "Stage kinds must be unique lowercase names (not 'operation').",
                path="stage_kinds[%d]" % index,
                details={"rule": "format"},
            )
        seen.add(kind)
    return list(kinds)


def _new_stage(position: int, kind: str) -> dict[str, t.Any]:
    return {
        "position": position,
        "kind": kind,
        "status": "pending",
        "submissionStarted": False,
        "attempts": 0,
        "dispatchedAt": None,
        "completedAt": None,
        "upid": None,
        "request": None,
        "evidence": {},
        "failure": None,
    }


def _same_inputs(
    existing: t.Mapping[str, t.Any], snapshots: t.Mapping[str, t.Any], target: t.Mapping[str, t.Any], kinds: list[str]
) -> bool:
    plan = existing["plan"]
    return (
        plan["definitionHash"] == snapshots["plan"]["definitionHash"]
        and plan["planHash"] == snapshots["plan"]["planHash"]
        and existing["providerScopeId"] == target["scope"]
        and existing["confirmation"] == snapshots["confirmation"]
        and existing["target"] == dict(target)
        and [item["kind"] for item in existing["stages"]] == kinds
    )
