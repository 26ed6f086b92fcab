# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The operation document (docs/journal.md, "Document"): its rules, its builders and its readers.

``validate_document`` checks a whole v1 document on every load and before every write: shape,
key order, formats, and the state invariants between stages (order, dispatch records, failures,
the cleanup track). The checks are written by hand rather than as a JSON Schema beside the catalog
and definition schemas (``_schemas.py``): key order, 1-based positions, unique stage kinds and the
rules that relate one stage to the ones before it are not expressible in JSON Schema, a broken rule
is never shown to anyone (any violation is ``journal_corrupt``), and the history listing, the
inventory plugin and every stage load documents, which must stay fast and need no third-party library.

Builders: ``new_operation_document`` (what ``create_operation`` writes and check mode previews),
``adopted_operation_document`` (adoption); readers: ``stage``, ``cleanup_view``,
``lifecycle_status``, ``require_cleanup_eligible``. Nothing here touches the file system.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import copy
import datetime
import hashlib
import math
import os
import re
import typing as t

from .._core.errors import ERROR_CODES, InputError, VmanywareError
from .._core.protocols import StageRecord
from .._formats.hashing import definition_hash, plan_hash, template_build_mapping, template_plan_hash

SCHEMA_VERSION = 1
KIND = "vmanyware.dev/v1/Operation"

OPERATION_STATUSES = ("open", "completed", "failed", "uncertain")
STAGE_STATUSES = ("pending", "dispatching", "submitted", "completed", "failed", "uncertain")
RELEASE_REASONS = ("closed", "abandoned", "cleaned")
# The steps of a cleanup (``vmanyware_cleanup``), journaled like stages in the document's ``lifecycle.cleanup``.
CLEANUP_STEPS = ("stop", "destroy")
_MAX_DEPTH = 32

_OPERATION_ID = re.compile(r"\Aop-[a-z2-7]{26}\Z")
_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")
# A profile stage is ``profile:<profile name>`` (docs/profiles.md, "Running profiles"): one stage per profile of the plan.
_STAGE_KIND = re.compile(r"\A(?:[a-z][a-z0-9_-]{0,63}|profile:[a-z0-9][a-z0-9-]{0,63})\Z")
_NODE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_SCOPE = re.compile(r"\A[\x21-\x7e]{1,256}\Z")
_CODE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_TIMESTAMP = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
_UPID = re.compile(r"\AUPID:[\x21-\x7e]{1,512}\Z")
_MAX_MESSAGE = 1024
_MAX_KEY = 1024
_VMID_MIN = 100
_VMID_MAX = 999999999

_TOP_KEYS = (
    "schemaVersion",
    "kind",
    "operationId",
    "revision",
    "idempotencyKeyHash",
    "providerScopeId",
    "createdAt",
    "updatedAt",
    "target",
    "definition",
    "mapping",
    "plan",
    "confirmation",
    "status",
    "failure",
    "release",
    "stages",
    "handoff",
)
# Optional last key (absent in documents written before lifecycle actions existed).
LIFECYCLE_KEY = "lifecycle"
_LIFECYCLE_KEYS = ("abandonment", "cleanup")
_ABANDONMENT_KEYS = ("at", "reason")
_CLEANUP_KEYS = ("startedAt", "completedAt", "status", "failure", "steps")
_STAGE_KEYS = (
    "position",
    "kind",
    "status",
    "submissionStarted",
    "attempts",
    "dispatchedAt",
    "completedAt",
    "upid",
    "request",
    "evidence",
    "failure",
)

# Stage transitions: new status -> statuses it may be reached from.
_STAGE_FROM: dict[str, tuple[str, ...]] = {
    "dispatching": ("pending",),
    "pending": ("dispatching",),
    "submitted": ("dispatching",),
    "completed": ("dispatching", "submitted", "uncertain"),
    "failed": ("pending", "dispatching", "submitted", "uncertain"),
    "uncertain": ("dispatching", "submitted"),
}
_OPERATION_FROM: dict[str, tuple[str, ...]] = {
    "open": ("uncertain",),
    "completed": ("open", "uncertain"),
    "failed": ("open", "uncertain"),
    "uncertain": ("open",),
}


class JournalError(VmanywareError):
    """A journal failure: ``journal_corrupt``, ``journal_conflict``, ``journal_locked``, ``not_found``,
    ``conflicting_operation``, ``idempotency_key_conflict`` or ``io_error``."""

    default_code = "journal_corrupt"


def journal_conflict(operation_id: str, rule: str) -> JournalError:
    """``journal_conflict``: the operation is not in the state an update expects (compare-and-set lost)."""
    return JournalError(
        "Operation %s is not in the state this update expects (it may have been changed by another process)."
        % operation_id,
        code="journal_conflict",
        details={"operationId": operation_id, "rule": rule},
    )


TIMESTAMP_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def utc_now() -> str:
    """The current UTC time as ISO 8601 with microseconds and ``Z``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


def epoch_seconds(timestamp: str) -> float:
    """A journal timestamp (``utc_now`` format) as seconds since the epoch."""
    return datetime.datetime.strptime(timestamp, TIMESTAMP_FORMAT).replace(tzinfo=datetime.timezone.utc).timestamp()


def new_operation_id() -> str:
    """``op-`` + 26 lowercase base32 characters of 128 random bits."""
    return "op-" + base64.b32encode(os.urandom(16)).decode("ascii").rstrip("=").lower()


def validate_operation_id(value: t.Any, path: str = "operation_id") -> str:
    """Return ``value`` if it is a well-formed operation id; ``invalid_option`` (value never echoed) otherwise."""
    if not isinstance(value, str) or not _OPERATION_ID.match(value):
        raise InputError(
            "The operation id is not of the form op- followed by 26 base32 characters.",
            path=path,
            details={"rule": "operation_id_format"},
        )
    return value


def hash_idempotency_key(key: str) -> str:
    """SHA-256 (hex) of the UTF-8 key; only this hash is ever stored."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _json_copy(value: t.Any, path: str, depth: int = 0) -> t.Any:
    """A detached copy of a JSON value: mappings with string keys, lists, str, int, finite float, bool, None."""
    if depth > _MAX_DEPTH:
        raise InputError("The value is nested too deeply.", path=path, details={"rule": "depth"})
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError("The value is not JSON-compatible.", path=path, details={"rule": "finite_number"})
        return value
    if isinstance(value, t.Mapping):
        result: dict[str, t.Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError("The mapping keys must be strings.", path=path, details={"rule": "string_keys"})
            result[key] = _json_copy(item, path, depth + 1)
        return result
    if isinstance(value, (list, tuple)):
        return [_json_copy(item, path, depth + 1) for item in value]
    raise InputError("The value is not JSON-compatible.", path=path, details={"rule": "json"})


def _mapping_arg(value: t.Any, path: str) -> dict[str, t.Any]:
    if not isinstance(value, t.Mapping):
        raise InputError("The value must be a mapping.", path=path, details={"rule": "mapping"})
    return t.cast("dict[str, t.Any]", _json_copy(value, path))


def _failure_code(code: t.Any) -> str:
    if not isinstance(code, str) or code not in ERROR_CODES:
        raise InputError(
            "The failure code is not a registered error code.", path="code", details={"rule": "error_code"}
        )
    return code


def _failure_message(message: t.Any) -> str:
    if not isinstance(message, str) or not 0 < len(message) <= _MAX_MESSAGE:
        raise InputError(
            "The failure message must be 1-1024 characters of fixed text.", path="message", details={"rule": "length"}
        )
    return message


# ---------------------------------------------------------------------------------------------
# document validation (every load and every write)


class _Invalid(Exception):
    """Internal: the document broke a rule (the rule text is never shown to a user)."""


def _check(condition: bool, rule: str) -> None:
    if not condition:
        raise _Invalid(rule)


def _is_int(value: t.Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_timestamp(value: t.Any, rule: str, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    _check(isinstance(value, str) and bool(_TIMESTAMP.match(value)), rule)


def _check_json_object(value: t.Any, rule: str) -> None:
    _check(isinstance(value, dict), rule)


def _check_failure(value: t.Any, with_stage: bool, rule: str) -> None:
    if value is None:
        return
    keys = ("code", "message", "stage") if with_stage else ("code", "message")
    _check(isinstance(value, dict) and tuple(value) == keys, rule)
    _check(isinstance(value["code"], str) and bool(_CODE.match(value["code"])), rule)
    _check(isinstance(value["message"], str) and 0 < len(value["message"]) <= _MAX_MESSAGE, rule)
    if with_stage:
        _check(
            value["stage"] is None or (isinstance(value["stage"], str) and bool(_STAGE_KIND.match(value["stage"]))),
            rule,
        )


def _check_stage(stage: t.Any, index: int, previous_completed: bool) -> None:
    _check(isinstance(stage, dict) and tuple(stage) == _STAGE_KEYS, "stage_keys")
    # 1-based, like the plan's steps: stage N of the journal is step N of the plan (docs/journal.md).
    _check(stage["position"] == index + 1 and _is_int(stage["position"]), "stage_position")
    _check(isinstance(stage["kind"], str) and bool(_STAGE_KIND.match(stage["kind"])), "stage_kind")
    status = stage["status"]
    _check(status in STAGE_STATUSES, "stage_status")
    _check(isinstance(stage["submissionStarted"], bool), "stage_submission")
    _check(_is_int(stage["attempts"]) and 0 <= stage["attempts"] <= 1000, "stage_attempts")
    _check_timestamp(stage["dispatchedAt"], "stage_dispatched_at", nullable=True)
    _check_timestamp(stage["completedAt"], "stage_completed_at", nullable=True)
    _check(stage["upid"] is None or (isinstance(stage["upid"], str) and bool(_UPID.match(stage["upid"]))), "stage_upid")
    _check(stage["request"] is None or isinstance(stage["request"], dict), "stage_request")
    _check_json_object(stage["evidence"], "stage_evidence")
    _check_failure(stage["failure"], False, "stage_failure")
    # state invariants
    if status == "pending":
        # attempts may be > 0: a request that provably never took effect returns the stage to pending.
        _check(
            not stage["submissionStarted"]
            and stage["dispatchedAt"] is None
            and stage["upid"] is None
            and stage["request"] is None
            and stage["completedAt"] is None,
            "stage_pending",
        )
    else:
        _check(previous_completed, "stage_order")
    if status in ("dispatching", "submitted", "completed", "uncertain"):
        _check(
            stage["submissionStarted"] and stage["attempts"] >= 1 and stage["dispatchedAt"] is not None,
            "stage_dispatched",
        )
    if stage["submissionStarted"]:
        _check(stage["dispatchedAt"] is not None and stage["request"] is not None, "stage_submission_record")
    _check((stage["failure"] is not None) == (status in ("failed", "uncertain")), "stage_failure_presence")
    _check((stage["completedAt"] is not None) == (status in ("completed", "failed")), "stage_completed_presence")


def validate_document(document: t.Any, operation_id: str | None = None) -> None:
    """Raise ``_Invalid`` unless ``document`` is a complete, consistent v1 operation document."""
    _check(isinstance(document, dict), "object")
    _check(document.get("schemaVersion") == SCHEMA_VERSION and _is_int(document.get("schemaVersion")), "schema_version")
    _check(tuple(document) in (_TOP_KEYS, _TOP_KEYS + (LIFECYCLE_KEY,)), "top_keys")
    _check(document["kind"] == KIND, "kind")
    _check(
        isinstance(document["operationId"], str) and bool(_OPERATION_ID.match(document["operationId"])), "operation_id"
    )
    if operation_id is not None:
        _check(document["operationId"] == operation_id, "operation_id_matches_file")
    _check(_is_int(document["revision"]) and document["revision"] >= 1, "revision")
    key_hash = document["idempotencyKeyHash"]
    _check(key_hash is None or (isinstance(key_hash, str) and bool(_HEX64.match(key_hash))), "idempotency_key_hash")
    _check(
        isinstance(document["providerScopeId"], str) and bool(_SCOPE.match(document["providerScopeId"])),
        "provider_scope",
    )
    _check_timestamp(document["createdAt"], "created_at")
    _check_timestamp(document["updatedAt"], "updated_at")
    target = document["target"]
    _check(isinstance(target, dict) and tuple(target) == ("scope", "node", "vmid"), "target")
    _check(target["scope"] == document["providerScopeId"], "target_scope")
    _check(isinstance(target["node"], str) and bool(_NODE.match(target["node"])), "target_node")
    _check(_is_int(target["vmid"]) and _VMID_MIN <= target["vmid"] <= _VMID_MAX, "target_vmid")
    for name in ("definition", "mapping", "plan", "confirmation", "handoff"):
        _check_json_object(document[name], name)
    for name in ("definitionHash", "planHash"):
        _check(
            isinstance(document["plan"].get(name), str) and bool(_HEX64.match(document["plan"][name])), "plan_hashes"
        )
    status = document["status"]
    _check(status in OPERATION_STATUSES, "status")
    _check_failure(document["failure"], True, "failure")
    _check((document["failure"] is not None) == (status in ("failed", "uncertain")), "failure_presence")
    release = document["release"]
    if release is not None:
        _check(isinstance(release, dict) and tuple(release) == ("reason", "releasedAt"), "release")
        _check(release["reason"] in RELEASE_REASONS, "release_reason")
        _check_timestamp(release["releasedAt"], "released_at")
    stages = document["stages"]
    _check(isinstance(stages, list) and 0 < len(stages) <= 64, "stages")
    kinds: set[str] = set()
    previous_completed = True
    for index, stage in enumerate(stages):
        _check_stage(stage, index, previous_completed)
        _check(stage["kind"] not in kinds, "stage_kind_unique")
        kinds.add(stage["kind"])
        previous_completed = stage["status"] == "completed"
    statuses = [stage["status"] for stage in stages]
    if status == "completed":
        _check(all(item == "completed" for item in statuses), "completed_stages")
    if status == "open":
        _check(not any(item in ("failed", "uncertain") for item in statuses), "open_stages")
    _check_lifecycle(document)


TEMPLATE_PLAN_KIND = "TemplateBuildPlan"


def recorded_hashes_match(document: t.Mapping[str, t.Any]) -> bool:
    """Whether the hashes the document records are those of its own snapshots (a document that passed ``validate_document``).

    Recomputed with the code that computed them (``_hashing``): ``definitionHash`` over the definition snapshot;
    ``planHash`` over ``[definitionHash, mapping, target VMID]`` for a VM or container plan, over
    ``[templateBuildHash, templateVmid]`` for a template build (whose plan also carries ``templateBuildHash``, the
    same hash as ``definitionHash``: ``_template_operation.journal_snapshots``), whose mapping snapshot must be the one
    derived from the build (``_hashing.template_build_mapping``). The confirmation's copies of the
    hashes must be the plan's. An edited definition, mapping, VMID or hash is a mismatch; this is an integrity check
    (a hand edit, a bad restore, a bit flip), not an authentication: whoever can write the journal can recompute hashes.
    """
    plan, confirmation = document["plan"], document["confirmation"]
    vmid = document["target"]["vmid"]
    planned_target = plan.get("target")
    if isinstance(planned_target, dict) and planned_target.get("vmid", vmid) != vmid:
        return False
    try:
        recorded_definition = definition_hash(document["definition"])
        if plan.get("kind") == TEMPLATE_PLAN_KIND:
            if plan.get("templateBuildHash") != recorded_definition or document["mapping"] != template_build_mapping(
                document["definition"], vmid, plan.get("diskDevice")
            ):
                return False
            recorded_plan = template_plan_hash(recorded_definition, vmid)
        else:
            recorded_plan = plan_hash(recorded_definition, document["mapping"], vmid)
    except (
        TypeError,
        ValueError,
        KeyError,
        RecursionError,
    ):  # a value the formats never produce (a float, an unsafe integer, a lone surrogate)
        return False
    if plan["definitionHash"] != recorded_definition or plan["planHash"] != recorded_plan:
        return False
    return all(confirmation.get(name, plan[name]) == plan[name] for name in ("definitionHash", "planHash")) and (
        confirmation.get("templateBuildHash", recorded_definition) == recorded_definition
    )


def _check_lifecycle(document: t.Mapping[str, t.Any]) -> None:
    """``lifecycle``: the operator's abandonment and the cleanup track, consistent with the release."""
    lifecycle = document.get(LIFECYCLE_KEY)
    release = document["release"]
    if lifecycle is None:
        # (an abandonment released before reasons were recorded has no lifecycle)
        _check(LIFECYCLE_KEY not in document and (release is None or release["reason"] != "cleaned"), "lifecycle")
        return
    _check(isinstance(lifecycle, dict) and tuple(lifecycle) == _LIFECYCLE_KEYS, "lifecycle_keys")
    abandonment = lifecycle["abandonment"]
    if abandonment is not None:
        _check(isinstance(abandonment, dict) and tuple(abandonment) == _ABANDONMENT_KEYS, "abandonment")
        _check_timestamp(abandonment["at"], "abandoned_at")
        _check(
            isinstance(abandonment["reason"], str) and 0 < len(abandonment["reason"]) <= _MAX_MESSAGE,
            "abandonment_reason",
        )
        _check(release is not None and release["reason"] == "abandoned", "abandonment_release")
    cleanup = lifecycle["cleanup"]
    if cleanup is None:
        _check(release is None or release["reason"] != "cleaned", "cleanup_release")
        return
    _check(isinstance(cleanup, dict) and tuple(cleanup) == _CLEANUP_KEYS, "cleanup_keys")
    _check_timestamp(cleanup["startedAt"], "cleanup_started_at")
    _check_timestamp(cleanup["completedAt"], "cleanup_completed_at", nullable=True)
    _check((cleanup["completedAt"] is not None) == (cleanup["status"] == "completed"), "cleanup_completed_at")
    kinds = (
        tuple(item.get("kind") if isinstance(item, dict) else None for item in cleanup["steps"])
        if isinstance(cleanup["steps"], list)
        else ()
    )
    _check(kinds == CLEANUP_STEPS, "cleanup_steps")
    if release is not None and release["reason"] == "cleaned":
        _check(cleanup["status"] == "completed", "cleanup_release")
    validate_document(cleanup_view(document))


def cleanup_view(document: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The cleanup track of ``document`` as an operation document whose stages are the cleanup steps.

    The stage runner drives it exactly like provisioning stages (``JournalStore.cleanup_track``):
    status, failure and stages are the track's; identities and snapshots are the operation's.
    """
    cleanup = document[LIFECYCLE_KEY]["cleanup"]
    view = {key: copy.deepcopy(document[key]) for key in _TOP_KEYS if key not in ("stages", "handoff")}
    view.update(
        status=cleanup["status"],
        failure=copy.deepcopy(cleanup["failure"]),
        release=None,
        stages=copy.deepcopy(cleanup["steps"]),
        handoff={},
    )
    return {key: view[key] for key in _TOP_KEYS}


def operation_begun(document: t.Mapping[str, t.Any]) -> bool:
    """Whether anything of the operation was ever dispatched: a stage beyond ``pending``, or one that was sent before
    (``attempts``: a definite refusal returns a stage to ``pending``). An operation that has not begun was only recorded.

    The one rule of what a preflight that did not pass may do (docs/operations.md, "A failed preflight"): a recorded
    operation that has begun resumes (its VM may well exist: the preflight then reports the VMID taken, and each stage
    checks its own preconditions); one that has not is stopped before its first write, like a new one.
    """
    return any(item["status"] != "pending" or item["attempts"] > 0 for item in document["stages"])


def lifecycle_status(document: t.Mapping[str, t.Any]) -> str:
    """The operation's status as operators see it: ``cleaned`` once its cleanup completed, ``abandoned`` once
    the operator abandoned it, else the provisioning status (open, completed, failed, uncertain)."""
    lifecycle = document.get(LIFECYCLE_KEY) or {}
    cleanup = lifecycle.get("cleanup")
    if cleanup is not None and cleanup["status"] == "completed":
        return "cleaned"
    if lifecycle.get("abandonment") is not None:
        return "abandoned"
    return t.cast(str, document["status"])


def stage(document: t.Mapping[str, t.Any], kind: str) -> StageRecord:
    """The stage of ``kind`` in ``document`` (the same dict object); ``not_found`` if there is none."""
    for item in document["stages"]:
        if item["kind"] == kind:
            return t.cast(StageRecord, item)
    raise JournalError(
        "The operation has no stage of this kind.", code="not_found", path="kind", details={"rule": "unknown_stage"}
    )


def require_cleanup_eligible(document: t.Mapping[str, t.Any], allow_completed: bool) -> None:
    """``cleanup_not_eligible`` unless the operation is failed, uncertain or abandoned (completed with ``allow_completed``)."""
    status = lifecycle_status(document)
    if status in ("failed", "uncertain", "abandoned") or (status == "completed" and allow_completed):
        return
    raise VmanywareError(
        code="cleanup_not_eligible", details={"operationId": document["operationId"], "status": status}
    )


# ---------------------------------------------------------------------------------------------
# argument checks
