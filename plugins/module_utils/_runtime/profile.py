# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The profile stage (``vmanyware_profile``, docs/profiles.md, "Running profiles"): one journaled stage ``profile:<name>`` per profile
of the plan, run as a nested ``ansible-playbook`` of the profile's role against the guest (_runtime/nested_playbook.py).

The journal records the dispatch before the nested run starts and the evidence ``{changed, ok, failed, unreachable,
seconds}`` after it. The rules:

- a stage found ``completed`` is skipped (nothing runs); a plan entry with ``run: false`` (baked into the template, not
  per guest) has no stage and is skipped with its reason;
- a stage found ``dispatching`` (the controller died while its nested run went on) is recorded ``uncertain``: whether
  the role ran to its end is unknown, and an unknown mutation is never re-sent blindly. So is a nested run that failed
  (a failed or unreachable task, no recap) or was cancelled: the role may have applied part of its tasks;
- an ``uncertain`` profile stage runs again only with ``rerun_uncertain``: the journal records the re-run in the
  evidence (``reruns``) before it starts, and the stage goes ``uncertain`` -> ``completed`` when it succeeds (the
  journal allows no second dispatch; Ansible roles are meant to be idempotent, and the operator says so explicitly);
- the provisioning gate is read again right before the run (an environment ``false`` wins), as for every write.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import os
import time
import typing as t

from .._api.argspec import CONNECTION_OPTION_NAMES, connection_argument_spec, connection_settings
from .._core.cancel import Cancellation, RunCancelled, raise_if_cancelled
from .._core.errors import InputError
from .._journal.document import utc_now
from .._operation.create import PROVISIONING_GATE, read_gate, require_verified_tls
from .._stages.outcomes import StageError
from .._stages.registry import PROFILE, step_kind
from .._stages.runner import _require_not_ended
from .nested_playbook import GuestTarget, NestedResult, NestedRunner, cleanup, prepare, run_nested
from .module import ModuleEntry
from .progress import report as show
from .stage_module import _store_and_operation, journal_argument_spec

STAGE_PREFIX = PROFILE + ":"
TRANSPORTS = ("qga", "ssh")
DEFAULT_TIMEOUT = 3600.0
UNCERTAIN_TEXT = (
    "Whether the profile's role ran to its end is unknown. Check the guest, then run again with "
    "rerun_uncertain_profile: true (roles are meant to be idempotent) or abandon the operation."
)


@dataclasses.dataclass(frozen=True)
class ProfileSettings:
    """What one profile stage run needs besides the journal: transport, API connection (qga), the operator's choices."""

    transport: str = "qga"
    connection: t.Mapping[str, t.Any] = dataclasses.field(default_factory=dict)
    check_mode: bool = False
    rerun_uncertain: bool = False
    timeout: float = DEFAULT_TIMEOUT
    become: bool = False
    provisioning_option: bool | None = None
    environ: t.Mapping[str, str] | None = None
    cancel_check: t.Callable[[], str | None] = lambda: None
    temp_root: str | None = None


def stage_name(profile: str) -> str:
    """The journal stage of profile ``profile`` (the plan step's ``name``)."""
    return STAGE_PREFIX + profile


def is_profile_stage(kind: str) -> bool:
    return step_kind(kind) == PROFILE


def plan_profile(plan: t.Mapping[str, t.Any], profile: str) -> dict[str, t.Any]:
    """The plan's entry of ``profile``; ``invalid_option`` when the plan has none."""
    for entry in plan.get("profiles") or []:
        if isinstance(entry, t.Mapping) and entry.get("name") == profile:
            return dict(entry)
    raise InputError(
        "The operation's plan has no profile of this name.", path="profile", details={"rule": "profile_not_in_plan"}
    )


def preview(entry: t.Mapping[str, t.Any], transport: str) -> dict[str, t.Any]:
    """What a run would do: the role, its variables and the transport; nothing runs."""
    return {
        "profile": entry["name"],
        "version": entry.get("version"),
        "role": entry["role"],
        "vars": dict(entry.get("vars") or {}),
        "transport": transport,
    }


def preview_text(entry: t.Mapping[str, t.Any], transport: str = "qga") -> str:
    names = sorted((entry.get("vars") or {}).keys())
    return "would run role %s (vars: %s) through %s" % (entry["role"], ", ".join(names) or "none", transport)


def _target(document: t.Mapping[str, t.Any], transport: str) -> GuestTarget:
    target = document["target"]
    if transport == "qga":
        return GuestTarget("qga", int(target["vmid"]), str(target["node"]))
    handoff = document.get("handoff") or {}
    address = handoff.get("address") or handoff.get("ipv4")
    if not address or not handoff.get("knownHosts"):
        raise StageError(
            "The SSH transport needs the guest's address and agent-verified host keys from the readiness stage.",
            code="stage_precondition_failed",
            details={"rule": "handoff_required"},
        )
    return GuestTarget(
        "ssh",
        int(target["vmid"]),
        str(target["node"]),
        address=str(address),
        user=str(handoff.get("guestUser") or document["plan"].get("guestUser")),
        known_hosts=tuple(handoff["knownHosts"]),
    )


def _compact(record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {key: record[key] for key in ("kind", "position", "status", "attempts")}


def _evidence(entry: t.Mapping[str, t.Any], transport: str, result: NestedResult) -> dict[str, t.Any]:
    return {
        "changed": result.changed,
        "ok": result.ok,
        "failed": result.failed,
        "unreachable": result.unreachable,
        "seconds": result.seconds,
        "exitStatus": result.rc,
        "recapFound": result.recap_found,
        "role": entry["role"],
        "transport": transport,
    }


def _succeeded(result: NestedResult) -> bool:
    return result.recap_found and result.rc == 0 and result.failed == 0 and result.unreachable == 0


def run_profile(
    store: t.Any,
    operation_id: str,
    profile: str,
    settings: ProfileSettings,
    *,
    runner: NestedRunner = run_nested,
    report: t.Callable[[str], None] = show,
    clock: t.Callable[[], float] = time.monotonic,
) -> dict[str, t.Any]:
    """Run (or skip, or preview) the stage of ``profile``; the result names the stage and its evidence."""
    if settings.transport not in TRANSPORTS:
        raise InputError("guest_connection must be qga or ssh.", path="guest_connection", details={"rule": "enum"})
    document = store.load(operation_id)
    entry = plan_profile(document["plan"], profile)
    profiles = [item for item in document["stages"] if is_profile_stage(item["kind"])]
    result: dict[str, t.Any] = {"changed": False, "operation_id": operation_id, "profile": profile}
    if not entry.get("run", True):
        reason = "baked into the template (version %s) and not per guest" % entry.get("version")
        report("profile %s: skipped, %s" % (profile, reason))
        return dict(result, skipped=True, reason=reason)
    kind = stage_name(profile)
    record = next((item for item in document["stages"] if item["kind"] == kind), None)
    if record is None:
        raise InputError(
            "The operation has no stage for this profile.", path="profile", details={"rule": "profile_not_in_stages"}
        )
    line = "profile %d/%d %s" % (profiles.index(record) + 1, len(profiles), profile)
    _require_not_ended(document)
    if record["status"] == "completed":
        report("%s: completed earlier, skipped" % line)
        return dict(result, stage=_compact(record), evidence=dict(record["evidence"]))
    if record["status"] == "failed":
        raise StageError(
            "The stage failed earlier; the operation keeps the target for the operator.",
            code="stage_failed",
            details={"stage": kind},
        )
    if settings.check_mode:
        report("%s: %s" % (line, preview_text(entry, settings.transport)))
        return dict(result, stage=_compact(record), preview=preview(entry, settings.transport))
    for earlier in document["stages"][: record["position"] - 1]:
        if earlier["status"] != "completed":
            raise StageError(
                "An earlier stage has not completed.",
                code="stage_out_of_order",
                details={"stage": kind, "waiting_for": earlier["kind"]},
            )
    environ = os.environ if settings.environ is None else settings.environ
    if record["status"] == "dispatching":
        # The controller died while the nested run went on (or before it recorded the end): the outcome is unknown.
        store.record_uncertain(
            operation_id, kind, "profile_uncertain", "The profile's nested run did not record its end."
        )
        record = dict(record, status="uncertain")
    if record["status"] == "uncertain" and not settings.rerun_uncertain:
        report("%s: uncertain, not run again without rerun_uncertain_profile" % line)
        raise StageError(UNCERTAIN_TEXT, code="profile_uncertain", details={"stage": kind, "operationId": operation_id})
    raise_if_cancelled(settings.cancel_check)
    if not read_gate(environ, PROVISIONING_GATE, settings.provisioning_option):
        raise StageError(code="provisioning_disabled", details={"stage": kind, "gate": PROVISIONING_GATE})
    target = _target(document, settings.transport)
    rerun = record["status"] == "uncertain"
    if rerun:
        reruns = list(record["evidence"].get("reruns") or []) + [utc_now()]
        store.record_evidence(operation_id, kind, {"reruns": reruns})
    else:
        summary = {
            "profile": profile,
            "version": entry.get("version"),
            "role": entry["role"],
            "transport": settings.transport,
            "vars": sorted((entry.get("vars") or {}).keys()),
        }
        store.record_dispatch(operation_id, kind, summary)
    report(
        "%s: %s role %s through %s" % (line, "running again" if rerun else "running", entry["role"], settings.transport)
    )
    started = clock()
    nested = prepare(
        profile,
        entry["role"],
        entry.get("vars") or {},
        target,
        settings.connection,
        become=settings.become,
        base_env=environ,
        temp_root=settings.temp_root,
    )
    try:
        outcome = runner(nested, settings.cancel_check, settings.timeout)
    except RunCancelled as err:
        evidence = {"cancelled": err.code, "seconds": round(clock() - started, 2)}
        store.record_evidence(operation_id, kind, evidence)
        if not rerun:
            store.record_uncertain(operation_id, kind, err.code, "The profile's nested run was stopped by a cancel.")
        report("%s: cancelled (%s); the stage is uncertain" % (line, err.code))
        raise
    finally:
        cleanup(nested)
    evidence = _evidence(entry, settings.transport, outcome)
    if not _succeeded(outcome):
        store.record_evidence(operation_id, kind, evidence)
        if not rerun:
            store.record_uncertain(
                operation_id, kind, "profile_failed", "The profile's role did not run to a clean end."
            )
        report(
            "%s: failed (%d failed, %d unreachable, %d changed)"
            % (line, outcome.failed, outcome.unreachable, outcome.changed)
        )
        raise StageError(
            "The profile's role did not run to a clean end (a failed or unreachable task, or no recap); the stage is "
            "uncertain. " + UNCERTAIN_TEXT,
            code="profile_failed",
            details={
                "stage": kind,
                "operationId": operation_id,
                "failed": outcome.failed,
                "unreachable": outcome.unreachable,
            },
        )
    written = store.record_completed(operation_id, kind, evidence)
    if (
        written["status"] == "open"
        and written.get("release") is None
        and all(item["status"] == "completed" for item in written["stages"])
    ):
        written = store.update_operation_status(operation_id, "completed", expected_status="open")
    record = next(item for item in written["stages"] if item["kind"] == kind)
    report("%s: completed, %d changed (%d ok) in %.1f s" % (line, outcome.changed, outcome.ok, outcome.seconds))
    return dict(result, changed=outcome.changed > 0, stage=_compact(record), evidence=evidence)


def profile_argument_spec() -> dict[str, dict[str, t.Any]]:
    """``vmanyware_profile``'s options: the operation, the profile, the transport and the API connection (qga)."""
    spec: dict[str, dict[str, t.Any]] = {
        "operation_id": {"type": "str"},
        "preview_operation": {"type": "dict"},
        "profile": {"type": "str", "required": True},
        "guest_connection": {"type": "str", "choices": list(TRANSPORTS), "default": "qga"},
        "rerun_uncertain_profile": {"type": "bool", "default": False},
        "profile_timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
        "profile_become": {"type": "bool", "default": False},
        "provisioning_enabled": {"type": "bool"},
    }
    spec.update(journal_argument_spec())
    spec.update(connection_argument_spec())
    return spec


def profile_module(params: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """``vmanyware_profile``: run, skip or preview one profile stage; progress lines shown and returned in ``log``."""
    if params.get("profile_timeout") is not None and params["profile_timeout"] <= 0:
        raise InputError(
            "profile_timeout must be greater than 0.", path="profile_timeout", details={"rule": "positive"}
        )
    store, operation_id = _store_and_operation(params, check_mode)
    connection = {name: params.get(name) for name in CONNECTION_OPTION_NAMES}
    if params["guest_connection"] == "qga" and not check_mode:
        # the nested qga connection refuses unverified TLS too; refusing here keeps the journal untouched
        require_verified_tls(connection_settings(params))
    cancel = Cancellation.from_environment()
    settings = ProfileSettings(
        transport=params["guest_connection"],
        connection=connection,
        check_mode=check_mode,
        rerun_uncertain=bool(params.get("rerun_uncertain_profile")),
        timeout=params.get("profile_timeout") or DEFAULT_TIMEOUT,
        become=bool(params.get("profile_become")),
        provisioning_option=params.get("provisioning_enabled"),
        cancel_check=cancel,
    )
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        show(line)

    with cancel.signals():
        result = run_profile(store, operation_id, params["profile"], settings, report=say)
    result["log"] = lines
    return result


def profile_entry() -> ModuleEntry:
    return ModuleEntry(
        argument_spec=profile_argument_spec,
        action=lambda params, check_mode, diff: profile_module(params, check_mode),
        libraries=("requests",),
    )
