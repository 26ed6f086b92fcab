# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The durable per-operation journal (docs/journal.md).

One JSON file per operation records what was decided (immutable snapshots of definition,
mapping, plan, confirmation, target) and, stage by stage, what was sent and what came back.
A stage is marked ``dispatching`` durably *before* its request is sent, so a lost reply can
never turn into a second VM: the next run finds ``submissionStarted: true`` and reconciles
instead of re-sending.

Guarantees:
- every write is atomic and durable (``_io.atomic_write_json``); every mutation takes the
  operation's lock, re-reads the file, checks the expected state (compare-and-set) and writes;
- the whole document is validated on every load and before every write; a file that does not
  validate raises ``journal_corrupt`` and is never repaired, rewritten or removed;
- a target (provider scope + VMID) and an idempotency key are each held by at most one
  operation (``targets/`` and ``keys/`` claim files created exclusively under the journal lock);
- no secret, no idempotency key in clear and no guest output is stored.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import hashlib
import json
import math
import os
import re
import stat
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import (
    ERROR_CODES,
    ConfigurationError,
    InputError,
    VmanywareError,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._io import (
    DEFAULT_LOCK_TIMEOUT,
    FileLock,
    LocalFileError,
    atomic_write_json,
    create_json_exclusive,
    read_json_strict,
    remove_file_durable,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._protocols import StageRecord

SCHEMA_VERSION = 1
KIND = "vmanyware.dev/v1/Operation"
CLAIM_KIND = "vmanyware.dev/v1/Claim"
ENV_JOURNAL_DIR = "VMANYWARE_JOURNAL_DIR"
# Test-only: names a crash point (docs/journal.md, "Crash testing"); never set it in production.
ENV_CRASH_AT = "VMANYWARE_TEST_CRASH_AT"
CRASH_EXIT_CODE = 137
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
MAX_CLAIM_BYTES = 4096
REDACTED = "<redacted>"

OPERATION_STATUSES = ("open", "completed", "failed", "uncertain")
STAGE_STATUSES = ("pending", "dispatching", "submitted", "completed", "failed", "uncertain")
RELEASE_REASONS = ("closed", "abandoned", "cleaned")
# The steps of a cleanup (``vmanyware_cleanup``), journaled like stages in the document's ``lifecycle.cleanup``.
CLEANUP_STEPS = ("stop", "destroy")
_MAX_DEPTH = 32

_OPERATION_ID = re.compile(r"\Aop-[a-z2-7]{26}\Z")
_OPERATION_FILE = re.compile(r"\Aop-[a-z2-7]{26}\.json\Z")
_HEX64 = re.compile(r"\A[0-9a-f]{64}\Z")
_STAGE_KIND = re.compile(r"\A[a-z][a-z0-9_-]{0,63}\Z")
_NODE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,62}\Z")
_SCOPE = re.compile(r"\A[\x21-\x7e]{1,256}\Z")
_CODE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_TIMESTAMP = re.compile(r"\A\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z\Z")
_UPID = re.compile(r"\AUPID:[\x21-\x7e]{1,512}\Z")
_MAX_MESSAGE = 1024
_MAX_KEY = 1024
_VMID_MIN = 100
_VMID_MAX = 999999999

# Key names whose values never reach the journal (matched case-insensitively).
SECRET_KEY_MARKERS = ("password", "passwd", "passphrase", "secret", "ticket", "token", "csrf", "cookie", "authorization",
                      "private_key", "privatekey", "private-key")
SECRET_KEY_NAMES = frozenset({"otp", "tfa", "totp", "input-data", "out-data", "err-data", "content", "stdin", "stdout", "stderr"})

_TOP_KEYS = (
    "schemaVersion", "kind", "operationId", "revision", "idempotencyKeyHash", "providerScopeId", "createdAt", "updatedAt",
    "target", "definition", "mapping", "plan", "confirmation", "status", "failure", "release", "stages", "handoff",
)
# Optional last key (absent in documents written before lifecycle actions existed).
LIFECYCLE_KEY = "lifecycle"
_LIFECYCLE_KEYS = ("abandonment", "cleanup")
_ABANDONMENT_KEYS = ("at", "reason")
_CLEANUP_KEYS = ("startedAt", "completedAt", "status", "failure", "steps")
_STAGE_KEYS = (
    "position", "kind", "status", "submissionStarted", "attempts", "dispatchedAt", "completedAt", "upid", "request",
    "evidence", "failure",
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


# ---------------------------------------------------------------------------------------------
# helpers


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
        raise InputError("The operation id is not of the form op- followed by 26 base32 characters.", path=path,
                         details={"rule": "operation_id_format"})
    return value


def hash_idempotency_key(key: str) -> str:
    """SHA-256 (hex) of the UTF-8 key; only this hash is ever stored."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def target_key(scope: str, vmid: int) -> str:
    """Claim file name stem of a target: SHA-256 of compact JSON ``[scope, vmid]``.

    VMIDs are unique per Proxmox cluster, so the node is recorded in the claim but is not part
    of the key: two operations can never hold the same VMID in one provider scope, whatever node.
    """
    return hashlib.sha256(json.dumps([scope, int(vmid)], separators=(",", ":")).encode("utf-8")).hexdigest()


def redact(value: t.Any) -> t.Any:
    """A deep copy of ``value`` where every value under a secret-looking key is ``"<redacted>"``.

    Keys match case-insensitively: any containing a ``SECRET_KEY_MARKERS`` entry (``password``,
    ``api_token_secret``, ``ticket``, ``CSRFPreventionToken``...) or equal to a
    ``SECRET_KEY_NAMES`` entry (guest ``input-data``/``out-data``/``err-data``, ``otp``...).
    Public keys (``sshkeys``) are not secrets and are kept.
    """
    if isinstance(value, t.Mapping):
        result: dict[t.Any, t.Any] = {}
        for key, item in value.items():
            lowered = str(key).lower()
            if lowered in SECRET_KEY_NAMES or any(marker in lowered for marker in SECRET_KEY_MARKERS):
                result[key] = REDACTED
            else:
                result[key] = redact(item)
        return result
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    return copy.deepcopy(value)


def resolve_journal_dir(option: str | None, environ: t.Mapping[str, str]) -> str:
    """The journal directory: ``option`` > ``$VMANYWARE_JOURNAL_DIR`` > ``$XDG_STATE_HOME/vmanyware/journal``
    > ``~/.local/state/vmanyware/journal``. Explicit paths must be absolute; a relative
    ``XDG_STATE_HOME`` is ignored, as the XDG specification requires.
    """
    if option:
        if "\x00" in option or not os.path.isabs(option):
            raise InputError("journal_dir must be an absolute path.", path="journal_dir", details={"rule": "absolute_path"})
        return os.path.normpath(option)
    from_env = environ.get(ENV_JOURNAL_DIR)
    if from_env:
        if "\x00" in from_env or not os.path.isabs(from_env):
            raise ConfigurationError("VMANYWARE_JOURNAL_DIR must be an absolute path.", path=ENV_JOURNAL_DIR,
                                     details={"rule": "absolute_path"})
        return os.path.normpath(from_env)
    state_home = environ.get("XDG_STATE_HOME")
    if state_home and "\x00" not in state_home and os.path.isabs(state_home):
        return os.path.join(os.path.normpath(state_home), "vmanyware", "journal")
    home = environ.get("HOME") or os.path.expanduser("~")
    if not home or "\x00" in home or not os.path.isabs(home):
        raise ConfigurationError("No journal directory: set journal_dir or VMANYWARE_JOURNAL_DIR.", path="journal_dir",
                                 details={"rule": "no_home"})
    return os.path.join(os.path.normpath(home), ".local", "state", "vmanyware", "journal")


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
        raise InputError("The failure code is not a registered error code.", path="code", details={"rule": "error_code"})
    return code


def _failure_message(message: t.Any) -> str:
    if not isinstance(message, str) or not 0 < len(message) <= _MAX_MESSAGE:
        raise InputError("The failure message must be 1-1024 characters of fixed text.", path="message", details={"rule": "length"})
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
        _check(value["stage"] is None or (isinstance(value["stage"], str) and bool(_STAGE_KIND.match(value["stage"]))), rule)


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
        _check(not stage["submissionStarted"] and stage["dispatchedAt"] is None
               and stage["upid"] is None and stage["request"] is None and stage["completedAt"] is None, "stage_pending")
    else:
        _check(previous_completed, "stage_order")
    if status in ("dispatching", "submitted", "completed", "uncertain"):
        _check(stage["submissionStarted"] and stage["attempts"] >= 1 and stage["dispatchedAt"] is not None, "stage_dispatched")
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
    _check(isinstance(document["operationId"], str) and bool(_OPERATION_ID.match(document["operationId"])), "operation_id")
    if operation_id is not None:
        _check(document["operationId"] == operation_id, "operation_id_matches_file")
    _check(_is_int(document["revision"]) and document["revision"] >= 1, "revision")
    key_hash = document["idempotencyKeyHash"]
    _check(key_hash is None or (isinstance(key_hash, str) and bool(_HEX64.match(key_hash))), "idempotency_key_hash")
    _check(isinstance(document["providerScopeId"], str) and bool(_SCOPE.match(document["providerScopeId"])), "provider_scope")
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
        _check(isinstance(document["plan"].get(name), str) and bool(_HEX64.match(document["plan"][name])), "plan_hashes")
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
        _check(isinstance(abandonment["reason"], str) and 0 < len(abandonment["reason"]) <= _MAX_MESSAGE, "abandonment_reason")
        _check(release is not None and release["reason"] == "abandoned", "abandonment_release")
    cleanup = lifecycle["cleanup"]
    if cleanup is None:
        _check(release is None or release["reason"] != "cleaned", "cleanup_release")
        return
    _check(isinstance(cleanup, dict) and tuple(cleanup) == _CLEANUP_KEYS, "cleanup_keys")
    _check_timestamp(cleanup["startedAt"], "cleanup_started_at")
    _check_timestamp(cleanup["completedAt"], "cleanup_completed_at", nullable=True)
    _check((cleanup["completedAt"] is not None) == (cleanup["status"] == "completed"), "cleanup_completed_at")
    kinds = tuple(item.get("kind") if isinstance(item, dict) else None for item in cleanup["steps"]) if isinstance(cleanup["steps"], list) else ()
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
    view.update(status=cleanup["status"], failure=copy.deepcopy(cleanup["failure"]), release=None,
                stages=copy.deepcopy(cleanup["steps"]), handoff={})
    return {key: view[key] for key in _TOP_KEYS}


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


def _corrupt(operation_id: str) -> JournalError:
    return JournalError(
        "The journal file of operation %s is not a valid operation document; it was left untouched." % operation_id,
        code="journal_corrupt",
        details={"operationId": operation_id},
    )


def _conflict(operation_id: str, rule: str) -> JournalError:
    return JournalError(
        "Operation %s is not in the state this update expects (it may have been changed by another process)." % operation_id,
        code="journal_conflict",
        details={"operationId": operation_id, "rule": rule},
    )


def new_operation_document(operation_id: str, key_hash: str | None, target: t.Mapping[str, t.Any], snapshots: t.Mapping[str, t.Any],
                           stage_kinds: list[str], now: str) -> dict[str, t.Any]:
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


def adopted_operation_document(operation_id: str, key_hash: str | None, target: t.Mapping[str, t.Any], snapshots: t.Mapping[str, t.Any],
                               stage_kinds: list[str], observed: list[t.Mapping[str, t.Any]], now: str) -> dict[str, t.Any]:
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
            raise InputError("An adopted stage is completed, uncertain or pending.", path="observed", details={"rule": "enum"})
        if status == "pending":
            continue
        upid = seen.get("upid")
        if upid is not None and (not isinstance(upid, str) or not _UPID.match(upid)):
            raise InputError("The UPID is not well-formed.", path="upid", details={"rule": "upid_format"})
        record.update(status=status, submissionStarted=True, attempts=1, dispatchedAt=now, request=dict(ADOPTED_REQUEST),
                      upid=upid if status == "completed" else None,
                      evidence=redact(_mapping_arg(seen.get("evidence") or {}, "evidence")))
        if status == "completed":
            record["completedAt"] = now
        else:
            failure = seen.get("failure") or {}
            record["failure"] = {"code": _failure_code(failure.get("code")), "message": _failure_message(failure.get("message"))}
            if document["status"] != "uncertain":
                document.update(status="uncertain", failure=dict(record["failure"], stage=record["kind"]))
    if all(item["status"] == "completed" for item in document["stages"]):
        document["status"] = "completed"
    try:
        validate_document(document, operation_id)
    except Exception:  # pylint: disable=broad-exception-caught
        raise JournalError("Refusing to build an invalid operation document.", code="internal_error") from None
    return document


def _operation_inputs(idempotency_key: str | None, provider_scope_id: str, definition: t.Mapping[str, t.Any], mapping: t.Mapping[str, t.Any],
                      plan: t.Mapping[str, t.Any], confirmation: t.Mapping[str, t.Any], target_node: str, target_vmid: int,
                      stage_kinds: list[str]) -> tuple[str | None, dict[str, t.Any], list[str], dict[str, t.Any]]:
    """Checked arguments of a new operation: ``(key_hash, target, stage_kinds, snapshots)``."""
    key_hash = hash_idempotency_key(_check_key(idempotency_key)) if idempotency_key is not None else None
    scope = _check_scope(provider_scope_id)
    node = _check_node(target_node)
    vmid = _check_vmid(target_vmid)
    kinds = _check_stage_kinds(stage_kinds)
    snapshots = {name: _mapping_arg(value, name) for name, value in
                 (("definition", definition), ("mapping", mapping), ("plan", plan), ("confirmation", confirmation))}
    for name in ("definitionHash", "planHash"):
        if not isinstance(snapshots["plan"].get(name), str) or not _HEX64.match(snapshots["plan"][name]):
            raise InputError("The plan must carry definitionHash and planHash.", path="plan." + name, details={"rule": "sha256_hex"})
    return key_hash, {"scope": scope, "node": node, "vmid": vmid}, kinds, snapshots


def stage(document: t.Mapping[str, t.Any], kind: str) -> StageRecord:
    """The stage of ``kind`` in ``document`` (the same dict object); ``not_found`` if there is none."""
    for item in document["stages"]:
        if item["kind"] == kind:
            return t.cast(StageRecord, item)
    raise JournalError("The operation has no stage of this kind.", code="not_found", path="kind", details={"rule": "unknown_stage"})


# ---------------------------------------------------------------------------------------------
# the store


class JournalStore:
    """A journal directory (docs/journal.md, "File layout").

    ``journal_dir`` is created (mode 0700, parents too) if missing; an existing directory must be
    owned by the current user and not writable by group or others (``configuration_error``).
    """

    def __init__(self, journal_dir: str, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        if not isinstance(journal_dir, str) or "\x00" in journal_dir or not os.path.isabs(journal_dir):
            raise InputError("journal_dir must be an absolute path.", path="journal_dir", details={"rule": "absolute_path"})
        self.journal_dir = os.path.normpath(journal_dir)
        self.lock_timeout = float(lock_timeout)
        self._targets_dir = os.path.join(self.journal_dir, "targets")
        self._keys_dir = os.path.join(self.journal_dir, "keys")
        self._locks_dir = os.path.join(self.journal_dir, "locks")
        self.leases_dir = os.path.join(self.journal_dir, "leases")  # created by the first lease (_vmid)
        for directory in (self.journal_dir, self._targets_dir, self._keys_dir, self._locks_dir):
            self._ensure_directory(directory)
        # Read once: the crash hook costs one ``is None`` test per write when unset.
        self._crash_at: str | None = os.environ.get(ENV_CRASH_AT) or None

    stage = staticmethod(stage)

    # -- paths and locks ------------------------------------------------------------------------

    @staticmethod
    def _ensure_directory(directory: str) -> None:
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            info = os.lstat(directory)
        except OSError:
            raise ConfigurationError("The journal directory cannot be created or read.", path="journal_dir",
                                     details={"rule": "usable_directory"}) from None
        if not stat.S_ISDIR(info.st_mode):
            raise ConfigurationError("The journal path is not a directory.", path="journal_dir", details={"rule": "directory"})
        if info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise ConfigurationError("The journal directory must be owned by the current user and not writable by others.",
                                     path="journal_dir", details={"rule": "private_directory"})

    def operation_path(self, operation_id: str) -> str:
        return os.path.join(self.journal_dir, validate_operation_id(operation_id) + ".json")

    def _target_path(self, scope: str, vmid: int) -> str:
        return os.path.join(self._targets_dir, target_key(scope, vmid) + ".json")

    def lease_path(self, scope: str, vmid: int) -> str:
        """The VMID lease file of a target (``_vmid``): same key as its claim, so creating the operation can supersede it."""
        return os.path.join(self.leases_dir, target_key(scope, vmid) + ".json")

    def _key_path(self, key_hash: str) -> str:
        return os.path.join(self._keys_dir, key_hash + ".json")

    @contextlib.contextmanager
    def _locked(self, path: str) -> t.Iterator[None]:
        lock = FileLock(path, timeout=self.lock_timeout)
        try:
            lock.acquire()
        except LocalFileError as err:
            raise JournalError("A journal lock could not be acquired in time; another run may be using this operation.",
                               code=err.code if err.code == "journal_locked" else "io_error") from None
        try:
            yield
        finally:
            lock.release()

    def _journal_lock(self) -> t.ContextManager[None]:
        return self._locked(os.path.join(self.journal_dir, ".lock"))

    def journal_lock(self) -> t.ContextManager[None]:
        """The journal-wide lock that claims are made under (VMID leases are made under it too)."""
        return self._journal_lock()

    def _operation_lock(self, operation_id: str) -> t.ContextManager[None]:
        return self._locked(os.path.join(self._locks_dir, operation_id + ".lock"))

    # -- crash hook (test only) -----------------------------------------------------------------

    def _hooks(self, kind: str, status: str) -> tuple[t.Callable[[], None] | None, t.Callable[[], None] | None]:
        crash_at = self._crash_at
        if crash_at is None:
            return None, None

        def point(name: str) -> t.Callable[[], None] | None:
            if crash_at != "journal:%s:%s:%s" % (name, kind, status):
                return None
            return lambda: os._exit(CRASH_EXIT_CODE)  # pylint: disable=protected-access

        return point("before_replace"), point("after_replace")

    # -- reading --------------------------------------------------------------------------------

    def list_operations(self) -> list[str]:
        """Operation ids present in the journal, sorted; one directory scan, no file is parsed.

        Temp files of interrupted writes, lock files and claim files are not listed.
        """
        try:
            with os.scandir(self.journal_dir) as entries:
                names = [entry.name[:-5] for entry in entries if _OPERATION_FILE.match(entry.name)]
        except OSError:
            raise JournalError("The journal directory cannot be read.", code="io_error") from None
        return sorted(names)

    def load(self, operation_id: str) -> dict[str, t.Any]:
        """The validated document of ``operation_id``: ``not_found``, ``journal_corrupt`` or ``io_error`` otherwise."""
        path = self.operation_path(operation_id)
        try:
            document = read_json_strict(path, MAX_DOCUMENT_BYTES, follow_symlinks=False)
        except LocalFileError as err:
            if err.code == "not_found":
                raise JournalError("The operation does not exist in the journal.", code="not_found",
                                   details={"operationId": operation_id}) from None
            if err.code == "io_error":
                raise JournalError("The journal file of an operation cannot be read.", code="io_error",
                                   details={"operationId": operation_id}) from None
            raise _corrupt(operation_id) from None
        try:
            validate_document(document, operation_id)
        except Exception:  # pylint: disable=broad-exception-caught  # any rule violation is corruption
            raise _corrupt(operation_id) from None
        return t.cast("dict[str, t.Any]", document)

    def _read_claim(self, path: str) -> str | None:
        """The operation id a claim file points at, ``None`` if there is no claim."""
        try:
            claim = read_json_strict(path, MAX_CLAIM_BYTES, follow_symlinks=False)
        except LocalFileError as err:
            if err.code == "not_found":
                return None
            raise JournalError("A journal claim file is not valid; it was left untouched.", code="journal_corrupt",
                               details={"claim": os.path.basename(os.path.dirname(path))}) from None
        if (not isinstance(claim, dict) or tuple(claim) != ("kind", "operationId") or claim["kind"] != CLAIM_KIND
                or not isinstance(claim["operationId"], str) or not _OPERATION_ID.match(claim["operationId"])):
            raise JournalError("A journal claim file is not valid; it was left untouched.", code="journal_corrupt",
                               details={"claim": os.path.basename(os.path.dirname(path))})
        return claim["operationId"]

    def _claim(self, path: str, operation_id: str) -> bool:
        return create_json_exclusive(path, {"kind": CLAIM_KIND, "operationId": operation_id})

    def _load_or_none(self, operation_id: str) -> dict[str, t.Any] | None:
        try:
            return self.load(operation_id)
        except JournalError as err:
            if err.code == "not_found":
                return None
            raise

    def target_holder(self, provider_scope_id: str, target_vmid: int) -> str | None:
        """The id of the operation that holds the target, or ``None``."""
        scope, vmid = _check_scope(provider_scope_id), _check_vmid(target_vmid)
        holder = self._read_claim(self._target_path(scope, vmid))
        if holder is None:
            return None
        document = self._load_or_none(holder)
        return None if document is None or document["release"] is not None else holder

    def find_by_idempotency_key(self, idempotency_key: str) -> str | None:
        """The id of the operation created with this key, or ``None``."""
        holder = self._read_claim(self._key_path(hash_idempotency_key(_check_key(idempotency_key))))
        return holder if holder is not None and self._load_or_none(holder) is not None else None

    # -- writing --------------------------------------------------------------------------------

    def _write(self, document: dict[str, t.Any], hook_kind: str, hook_status: str) -> None:
        try:
            validate_document(document, document.get("operationId"))
        except Exception:  # pylint: disable=broad-exception-caught
            raise JournalError("Refusing to write an invalid operation document.", code="internal_error") from None
        before, after = self._hooks(hook_kind, hook_status)
        try:
            atomic_write_json(self.operation_path(document["operationId"]), document, 0o600, before_replace=before, after_replace=after)
        except LocalFileError:
            raise JournalError("The journal file of an operation cannot be written.", code="io_error",
                               details={"operationId": document["operationId"]}) from None

    def create_operation(
        self,
        *,
        idempotency_key: str | None,
        provider_scope_id: str,
        definition: t.Mapping[str, t.Any],
        mapping: t.Mapping[str, t.Any],
        plan: t.Mapping[str, t.Any],
        confirmation: t.Mapping[str, t.Any],
        target_node: str,
        target_vmid: int,
        stage_kinds: list[str],
    ) -> tuple[dict[str, t.Any], bool]:
        """Create an operation and claim its target (and key); return ``(document, created)``.

        With an ``idempotency_key`` already used: identical inputs return the existing operation
        with ``created=False``; different inputs raise ``idempotency_key_conflict``. A target
        held by another unreleased operation raises ``conflicting_operation`` (its id in details).
        """
        key_hash, target, kinds, snapshots = _operation_inputs(idempotency_key, provider_scope_id, definition, mapping, plan,
                                                               confirmation, target_node, target_vmid, stage_kinds)
        target_path = self._target_path(target["scope"], target["vmid"])

        with self._journal_lock():
            if key_hash is not None:
                existing = self._key_holder(key_hash)
                if existing is not None:
                    if not _same_inputs(existing, snapshots, target, kinds):
                        raise JournalError(code="idempotency_key_conflict", path="idempotency_key",
                                           details={"operationId": existing["operationId"]})
                    self._complete_target_claim(existing, target_path)
                    return existing, False
            self._free_target(target_path)
            operation_id = new_operation_id()
            while os.path.lexists(self.operation_path(operation_id)):  # pragma: no cover - 128 random bits
                operation_id = new_operation_id()
            document = new_operation_document(operation_id, key_hash, target, snapshots, kinds, utc_now())
            self._write_new(document, key_hash, target_path, "open")
            return document, True

    def adopt_operation(
        self,
        *,
        operation_id: str,
        idempotency_key: str | None,
        provider_scope_id: str,
        definition: t.Mapping[str, t.Any],
        mapping: t.Mapping[str, t.Any],
        plan: t.Mapping[str, t.Any],
        confirmation: t.Mapping[str, t.Any],
        target_node: str,
        target_vmid: int,
        stage_kinds: list[str],
        observed: list[t.Mapping[str, t.Any]],
    ) -> tuple[dict[str, t.Any], bool]:
        """Record an operation whose journal was lost, rebuilt from reads of Proxmox; return ``(document, adopted)``.

        ``operation_id`` is the id the VM's description names; ``observed`` has one entry per stage
        (``adopted_operation_document``). Same locks, claims and validation as ``create_operation``:
        under the journal lock, an operation file that already exists is returned unchanged
        (``adopted=False``, never overwritten; like an idempotent creation replay, a target claim
        that a crash cut short is completed when the target is the same); a key held by another operation raises
        ``idempotency_key_conflict``, a target held by another unreleased operation
        ``conflicting_operation``. Then the operation file, the key claim and the target claim are
        written in that order (crash points ``journal:*:operation:adopted``).
        """
        validate_operation_id(operation_id)
        key_hash, target, kinds, snapshots = _operation_inputs(idempotency_key, provider_scope_id, definition, mapping, plan,
                                                               confirmation, target_node, target_vmid, stage_kinds)
        target_path = self._target_path(target["scope"], target["vmid"])
        with self._journal_lock():
            existing = self._load_or_none(operation_id)
            if existing is not None:
                if existing["target"] == target:
                    self._complete_target_claim(existing, target_path)
                return existing, False
            if key_hash is not None:
                holder = self._key_holder(key_hash)
                if holder is not None:
                    raise JournalError(code="idempotency_key_conflict", path="idempotency_key",
                                       details={"operationId": holder["operationId"]})
            self._free_target(target_path)
            document = adopted_operation_document(operation_id, key_hash, target, snapshots, kinds, observed, utc_now())
            self._write_new(document, key_hash, target_path, "adopted")
            return document, True

    def _key_holder(self, key_hash: str) -> dict[str, t.Any] | None:
        """The operation an idempotency key is bound to; a claim whose operation file is gone is stale and removed."""
        holder = self._read_claim(self._key_path(key_hash))
        if holder is None:
            return None
        existing = self._load_or_none(holder)
        if existing is None:
            remove_file_durable(self._key_path(key_hash))  # stale: its operation file is gone
        return existing

    def _free_target(self, target_path: str) -> None:
        """``conflicting_operation`` when another unreleased operation holds the target; a stale claim is removed."""
        holder = self._read_claim(target_path)
        if holder is not None:
            held_by = self._load_or_none(holder)
            if held_by is not None and held_by["release"] is None:
                raise JournalError(code="conflicting_operation", details={"operationId": holder})
            remove_file_durable(target_path)  # stale: released, or its operation file is gone

    def _write_new(self, document: dict[str, t.Any], key_hash: str | None, target_path: str, hook_status: str) -> None:
        """Write a new operation file, then its key claim, then its target claim (under the journal lock).

        A crash in between leaves either an operation nobody refers to (nothing was dispatched), or
        a key claim whose retry completes the target claim (``_complete_target_claim``).
        """
        operation_id = document["operationId"]
        self._write(document, "operation", hook_status)
        if key_hash is not None and not self._claim(self._key_path(key_hash), operation_id):  # pragma: no cover - under lock
            raise _conflict(operation_id, "key_claim_exists")
        if not self._claim(target_path, operation_id):  # pragma: no cover - checked under the lock
            raise _conflict(operation_id, "target_claim_exists")
        self._supersede_lease(document["target"])

    def _complete_target_claim(self, document: dict[str, t.Any], target_path: str) -> None:
        """Idempotent replay: make sure the operation still holds its target (a crash may have cut creation short)."""
        if document["release"] is not None:
            return
        holder = self._read_claim(target_path)
        if holder == document["operationId"]:
            self._supersede_lease(document["target"])  # a crash may have come between the claim and the lease's removal
            return
        if holder is not None:
            other = self._load_or_none(holder)
            if other is not None and other["release"] is None:
                raise JournalError(code="conflicting_operation", details={"operationId": holder})
            remove_file_durable(target_path)
        self._claim(target_path, document["operationId"])
        self._supersede_lease(document["target"])

    def _supersede_lease(self, target: t.Mapping[str, t.Any]) -> None:
        """The target's VMID lease (if any) has become this claim: remove it, so releasing the claim frees the VMID."""
        remove_file_durable(self.lease_path(target["scope"], target["vmid"]))

    def _mutate(
        self,
        operation_id: str,
        apply: t.Callable[[dict[str, t.Any]], tuple[str, str]],
        expected_revision: int | None,
    ) -> dict[str, t.Any]:
        """Lock, re-read, check, apply (which returns the crash-hook kind and status), write."""
        validate_operation_id(operation_id)
        if expected_revision is not None and not _is_int(expected_revision):
            raise InputError("expected_revision must be an integer.", path="expected_revision", details={"rule": "integer"})
        with self._operation_lock(operation_id):
            document = self.load(operation_id)
            if expected_revision is not None and document["revision"] != expected_revision:
                raise _conflict(operation_id, "revision")
            if document["release"] is not None:
                raise _conflict(operation_id, "released")
            if (document.get(LIFECYCLE_KEY) or {}).get("cleanup") is not None:
                raise _conflict(operation_id, "cleanup")  # the guest is being removed: provisioning is over
            hook_kind, hook_status = apply(document)
            document["revision"] += 1
            document["updatedAt"] = utc_now()
            self._write(document, hook_kind, hook_status)
            return document

    def _stage_transition(self, document: dict[str, t.Any], kind: str, new_status: str,
                          expected_status: str | None) -> dict[str, t.Any]:
        current = stage(document, kind)
        if expected_status is not None and current["status"] != expected_status:
            raise _conflict(document["operationId"], "expected_status")
        if current["status"] not in _STAGE_FROM[new_status]:
            raise _conflict(document["operationId"], "stage_transition")
        if current["status"] == "pending":
            for earlier in document["stages"][:current["position"] - 1]:
                if earlier["status"] != "completed":
                    raise _conflict(document["operationId"], "stage_order")
        if document["status"] in ("completed", "failed"):
            raise _conflict(document["operationId"], "operation_finished")
        return t.cast("dict[str, t.Any]", current)  # the transitions update several keys at once

    def record_dispatch(self, operation_id: str, kind: str, request_summary: t.Mapping[str, t.Any], *,
                        expected_revision: int | None = None) -> dict[str, t.Any]:
        """pending -> dispatching, ``submissionStarted: true``: durable before the caller sends the request.

        Only from ``pending``: a submission whose outcome is unknown (``dispatching``, ``uncertain``) is never
        dispatched again; reads resolve it. ``request_summary`` is stored redacted (``redact``).
        """
        summary = redact(_mapping_arg(request_summary, "request_summary"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "dispatching", None)
            if document["status"] != "open":
                raise _conflict(operation_id, "operation_not_open")
            current.update(status="dispatching", submissionStarted=True, attempts=current["attempts"] + 1,
                           dispatchedAt=utc_now(), request=summary)
            return kind, "dispatching"

        return self._mutate(operation_id, apply, expected_revision)

    def record_not_sent(self, operation_id: str, kind: str, *, expected_revision: int | None = None) -> dict[str, t.Any]:
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

    def record_submitted(self, operation_id: str, kind: str, upid: str | None, evidence: t.Mapping[str, t.Any] | None = None, *,
                         expected_revision: int | None = None) -> dict[str, t.Any]:
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

    def record_evidence(self, operation_id: str, kind: str, evidence: t.Mapping[str, t.Any], *,
                        expected_status: str | None = None, expected_revision: int | None = None) -> dict[str, t.Any]:
        """Merge ``evidence`` (redacted) into the stage's evidence; the status does not change.

        With ``expected_revision`` (the ``revision`` of the document the caller read) this is a
        compare-and-set: ``journal_conflict`` if any other write happened in between.
        """
        extra = redact(_mapping_arg(evidence, "evidence"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = stage(document, kind)
            if expected_status is not None and current["status"] != expected_status:
                raise _conflict(operation_id, "expected_status")
            current["evidence"].update(extra)
            return kind, current["status"]

        return self._mutate(operation_id, apply, expected_revision)

    def record_completed(self, operation_id: str, kind: str, evidence: t.Mapping[str, t.Any] | None = None, *,
                         expected_status: str | None = None, expected_revision: int | None = None) -> dict[str, t.Any]:
        """dispatching/submitted/uncertain -> completed. Completing the last uncertain stage reopens an uncertain operation."""
        extra = redact(_mapping_arg(evidence or {}, "evidence"))

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "completed", expected_status)
            current.update(status="completed", completedAt=utc_now(), failure=None)
            current["evidence"].update(extra)
            if document["status"] == "uncertain" and not any(item["status"] == "uncertain" for item in document["stages"]):
                document.update(status="open", failure=None)
            return kind, "completed"

        return self._mutate(operation_id, apply, expected_revision)

    def record_failed(self, operation_id: str, kind: str, code: str, message: str, *,
                      expected_status: str | None = None, expected_revision: int | None = None) -> dict[str, t.Any]:
        """-> failed; the operation becomes ``failed`` in the same write. The target stays claimed."""
        failure = {"code": _failure_code(code), "message": _failure_message(message)}

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "failed", expected_status)
            current.update(status="failed", completedAt=utc_now(), failure=dict(failure))
            document.update(status="failed", failure={"code": failure["code"], "message": failure["message"], "stage": kind})
            return kind, "failed"

        return self._mutate(operation_id, apply, expected_revision)

    def record_uncertain(self, operation_id: str, kind: str, code: str, message: str, *,
                         expected_status: str | None = None, expected_revision: int | None = None) -> dict[str, t.Any]:
        """dispatching/submitted -> uncertain (outcome unknown, e.g. ``reply_lost``); the operation becomes ``uncertain``."""
        failure = {"code": _failure_code(code), "message": _failure_message(message)}

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = self._stage_transition(document, kind, "uncertain", expected_status)
            current.update(status="uncertain", failure=dict(failure))
            document.update(status="uncertain", failure={"code": failure["code"], "message": failure["message"], "stage": kind})
            return kind, "uncertain"

        return self._mutate(operation_id, apply, expected_revision)

    def set_handoff(self, operation_id: str, handoff: t.Mapping[str, t.Any], *,
                    expected_revision: int | None = None) -> dict[str, t.Any]:
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
            raise InputError("The operation status is not one of open, completed, failed, uncertain.", path="status",
                             details={"rule": "enum"})
        record: dict[str, t.Any] | None = None
        if status in ("failed", "uncertain"):
            if not isinstance(failure, t.Mapping):
                raise InputError("A failed or uncertain operation needs a failure code and message.", path="failure",
                                 details={"rule": "required"})
            stage_kind = failure.get("stage")
            if stage_kind is not None and (not isinstance(stage_kind, str) or not _STAGE_KIND.match(stage_kind)):
                raise InputError("failure.stage must be a stage kind.", path="failure.stage", details={"rule": "stage_kind"})
            record = {"code": _failure_code(failure.get("code")), "message": _failure_message(failure.get("message")), "stage": stage_kind}

        def apply(document: dict[str, t.Any]) -> tuple[str, str]:
            current = document["status"]
            if expected_status is not None and current != expected_status:
                raise _conflict(operation_id, "expected_status")
            if current not in _OPERATION_FROM[status]:
                raise _conflict(operation_id, "operation_transition")
            statuses = [item["status"] for item in document["stages"]]
            if status == "completed" and any(item != "completed" for item in statuses):
                raise _conflict(operation_id, "stages_not_completed")
            if status == "open" and any(item in ("failed", "uncertain") for item in statuses):
                raise _conflict(operation_id, "stages_not_settled")
            if record is not None and record["stage"] is not None:
                stage(document, record["stage"])
            document.update(status=status, failure=copy.deepcopy(record))
            return "operation", status

        return self._mutate(operation_id, apply, expected_revision)

    def release_target(self, operation_id: str, reason: str, *, note: str | None = None) -> dict[str, t.Any]:
        """Release the operation's target (and end the operation's life in the journal).

        ``closed`` requires a ``completed`` operation; ``abandoned`` is the operator's explicit
        decision for any status (the VM, if any, is left alone), recorded with the operator's
        ``note`` (why) in ``lifecycle.abandonment``; ``cleaned`` is written by ``finish_cleanup``
        only. The document records the release first, then the claim file is removed; a crash in
        between leaves a claim that the next ``create_operation`` recognizes as released. Failures
        never release a target.
        """
        validate_operation_id(operation_id)
        if reason not in ("closed", "abandoned"):
            raise InputError("The release reason is not closed or abandoned.", path="reason", details={"rule": "enum"})
        if note is not None and (not isinstance(note, str) or not 0 < len(note.strip()) <= _MAX_MESSAGE or "\x00" in note):
            raise InputError("The reason must be 1-1024 characters.", path="reason", details={"rule": "length"})
        with self._journal_lock():
            with self._operation_lock(operation_id):
                document = self.load(operation_id)
                if document["release"] is not None:
                    raise _conflict(operation_id, "released")
                if reason == "closed" and document["status"] != "completed":
                    raise _conflict(operation_id, "not_completed")
                if note is not None:
                    document.setdefault(LIFECYCLE_KEY, {"abandonment": None, "cleanup": None})
                    document[LIFECYCLE_KEY]["abandonment"] = {"at": utc_now(), "reason": note}
                return self._release(document, reason)

    def _release(self, document: dict[str, t.Any], reason: str) -> dict[str, t.Any]:
        """Record the release (under the journal and operation locks), then remove the target claim."""
        document["release"] = {"reason": reason, "releasedAt": utc_now()}
        document["revision"] += 1
        document["updatedAt"] = document["release"]["releasedAt"]
        self._write(document, "operation", reason)
        target_path = self._target_path(document["target"]["scope"], document["target"]["vmid"])
        if self._read_claim(target_path) == document["operationId"]:
            remove_file_durable(target_path)
        return document

    def close_operation(self, operation_id: str) -> dict[str, t.Any]:
        """Release the target of a completed operation."""
        return self.release_target(operation_id, "closed")

    def abandon_operation(self, operation_id: str, reason: str | None = None) -> dict[str, t.Any]:
        """Operator decision: release the target whatever the status (the VM is not touched); ``reason`` says why."""
        return self.release_target(operation_id, "abandoned", note=reason)

    # -- cleanup (vmanyware_cleanup) -----------------------------------------------------------------

    def begin_cleanup(self, operation_id: str, *, allow_completed: bool = False) -> dict[str, t.Any]:
        """Start the cleanup track of an eligible operation (``cleanup_not_eligible`` otherwise); idempotent.

        The track holds one pending step per ``CLEANUP_STEPS`` kind; ``cleanup_track`` drives it.
        """
        validate_operation_id(operation_id)
        with self._operation_lock(operation_id):
            document = self.load(operation_id)
            if (document.get(LIFECYCLE_KEY) or {}).get("cleanup") is not None:
                return document
            require_cleanup_eligible(document, allow_completed)
            now = utc_now()
            document.setdefault(LIFECYCLE_KEY, {"abandonment": None, "cleanup": None})
            document[LIFECYCLE_KEY]["cleanup"] = {"startedAt": now, "completedAt": None, "status": "open", "failure": None,
                                                  "steps": [_new_stage(index, kind) for index, kind in enumerate(CLEANUP_STEPS, start=1)]}
            document["revision"] += 1
            document["updatedAt"] = now
            self._write(document, "cleanup", "open")
            return document

    def cleanup_track(self) -> JournalStore:
        """A store over the cleanup tracks: ``load`` returns ``cleanup_view`` and every stage record method
        (``record_dispatch`` ... ``update_operation_status``) writes the track, under the same lock and rules."""
        return _CleanupTrack(self)

    def finish_cleanup(self, operation_id: str) -> dict[str, t.Any]:
        """After a completed cleanup: release the target as ``cleaned`` unless it was released already; idempotent."""
        validate_operation_id(operation_id)
        with self._journal_lock():
            with self._operation_lock(operation_id):
                document = self.load(operation_id)
                cleanup = (document.get(LIFECYCLE_KEY) or {}).get("cleanup")
                if cleanup is None or cleanup["status"] != "completed":
                    raise _conflict(operation_id, "cleanup_not_completed")
                if document["release"] is not None:
                    return document
                return self._release(document, "cleaned")


def require_cleanup_eligible(document: t.Mapping[str, t.Any], allow_completed: bool) -> None:
    """``cleanup_not_eligible`` unless the operation is failed, uncertain or abandoned (completed with ``allow_completed``)."""
    status = lifecycle_status(document)
    if status in ("failed", "uncertain", "abandoned") or (status == "completed" and allow_completed):
        return
    raise VmanywareError(code="cleanup_not_eligible", details={"operationId": document["operationId"], "status": status})


class _CleanupTrack(JournalStore):
    """``JournalStore.cleanup_track``: the stage record methods, applied to ``lifecycle.cleanup``."""

    def __init__(self, store: JournalStore) -> None:  # pylint: disable=super-init-not-called  # shares the store's directory
        self.__dict__.update(store.__dict__)

    def load(self, operation_id: str) -> dict[str, t.Any]:
        document = JournalStore.load(self, operation_id)
        if (document.get(LIFECYCLE_KEY) or {}).get("cleanup") is None:
            raise JournalError("The operation has no cleanup in progress.", code="not_found", details={"operationId": operation_id})
        return cleanup_view(document)

    def _mutate(self, operation_id: str, apply: t.Callable[[dict[str, t.Any]], tuple[str, str]],
                expected_revision: int | None) -> dict[str, t.Any]:
        validate_operation_id(operation_id)
        with self._operation_lock(operation_id):
            document = JournalStore.load(self, operation_id)
            if expected_revision is not None and document["revision"] != expected_revision:
                raise _conflict(operation_id, "revision")
            cleanup = (document.get(LIFECYCLE_KEY) or {}).get("cleanup")
            if cleanup is None:
                raise _conflict(operation_id, "no_cleanup")
            view = cleanup_view(document)
            hook_kind, hook_status = apply(view)
            now = utc_now()
            cleanup.update(status=view["status"], failure=view["failure"], steps=view["stages"],
                           completedAt=now if view["status"] == "completed" else None)
            document["revision"] += 1
            document["updatedAt"] = now
            self._write(document, hook_kind, hook_status)
            return cleanup_view(document)


# ---------------------------------------------------------------------------------------------
# argument checks


def _check_key(key: t.Any) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= _MAX_KEY or "\x00" in key:
        raise InputError("The idempotency key must be 1-1024 characters.", path="idempotency_key", details={"rule": "length"})
    return key


def _check_scope(scope: t.Any) -> str:
    if not isinstance(scope, str) or not _SCOPE.match(scope):
        raise InputError("The provider scope id must be 1-256 printable ASCII characters without spaces.", path="provider_scope_id",
                         details={"rule": "format"})
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
            raise InputError("Stage kinds must be unique lowercase names (not 'operation').", path="stage_kinds[%d]" % index,
                             details={"rule": "format"})
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


def _same_inputs(existing: t.Mapping[str, t.Any], snapshots: t.Mapping[str, t.Any], target: t.Mapping[str, t.Any],
                 kinds: list[str]) -> bool:
    plan = existing["plan"]
    return (
        plan["definitionHash"] == snapshots["plan"]["definitionHash"]
        and plan["planHash"] == snapshots["plan"]["planHash"]
        and existing["providerScopeId"] == target["scope"]
        and existing["confirmation"] == snapshots["confirmation"]
        and existing["target"] == dict(target)
        and [item["kind"] for item in existing["stages"]] == kinds
    )
