# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Run the remaining declared stages of an operation in one call (``vmanyware_provision``, docs/stages.md).

Each stage runs through the same ``StageRunner`` as its own module (journal protocol, gates re-read
before every write, lost replies resolved by reads only), one after another in declared order, in
one process. The run stops at the first stage that fails, with that stage's error code and the
results of the stages before it. A stage whose task runs long is followed in rounds of at most
``progress_interval`` seconds, each round reporting one progress line (``report``), like the
provision role's step-by-step path prints one line per follow-up.

Two things make it cheaper than one task per stage: no task, worker and template round per stage,
and the configuration and power state this process read moments ago serve the next stages'
preconditions (``_recent_reads``, whose docstring gives the rules).

With ``confirmation`` (and the plan inputs) the run records the confirmed operation, or finds it again, exactly
as ``vmanyware_operation`` does with the same options (``_operation_states.operation_from_params``): the same gates,
the same confirmation check (``confirmation_required``, ``plan_changed`` before anything is recorded or sent), the same
idempotency; only then does it run the operation's stages. The provision role's confirmed one-task path saves the
separate task that way. With ``preflight`` the preflight comes first: on the document the record would write (the same
call in check mode), before anything is recorded, so a preflight that stops a new operation leaves nothing in the
journal (no operation to abandon, its VMID lease not taken over); check mode previews the preflight as well.

With ``preflight`` the run first makes the preflight's read-only checks (``_preflight``, the same code as
``vmanyware_preflight``) of the operation's plan and mapping, on the same client as the stages, one
progress line per check: the clone stage then takes the template configuration and "VMID N is free" the preflight
read moments ago (``_recent_reads`` rules 7 and 8). Checks that do not pass (``preflight_fail_on``) stop an operation
that has not begun (or is not recorded yet) before anything is sent; one that has begun resumes (``preflight_verdict``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import os
import typing as t

from .._api.client import ProxmoxClient
from .._core.errors import InputError, VmanywareError
from .._journal import operation_begun
from .._journal.known_hosts import install_block
from .module import ModuleEntry
from .._operation.create import PROVISIONING_GATE, public_view
from .operation_states import operation_from_params
from .._formats.plan import PLAN_INPUT_MUTUALLY_EXCLUSIVE, plan_input_argument_spec
from .._checks.preflight import preflight_of_recorded
from .._checks.driver import FAIL_ON_CHOICES, PreflightFailed
from .profile import (
    STAGE_PREFIX,
    TRANSPORTS,
    ProfileSettings,
    equivalent_command,
    is_profile_stage,
    plan_profile,
    preview_text,
    resolve_transport,
)
from .progress import report, reporting
from .._api.recent_reads import ObservingClient, RecentReads
from .._stages.runner import StageRunner
from .._stages.protocol import StageLogic, StageSettings
from .._stages.outcomes import StageError
from .stage_module import cancel_scope, open_store, stage_argument_spec, stage_settings, with_stage_client
from .._stages.registry import VM, stage_spec
from .._stages.logic import build_logic
from .._core.text_table import aligned_lines, check_row

# At most this long between two progress lines of one long stage (seconds): each round of following it.
DEFAULT_PROGRESS_INTERVAL = 30.0
# A round that returned at once without finishing (nothing to wait on in it) is followed after this pause (seconds).
MIN_ROUND = 1.0


@dataclasses.dataclass(frozen=True)
class StageOptions:
    """The per-stage options of the stage modules that take one (``readiness_timeout``, ``packages_timeout``), and the
    profile stages' transport their check-mode preview names (``profile_connection``; None: the guest type's default)."""

    readiness_timeout: float = 300.0
    packages_timeout: float = 900.0
    profile_connection: str | None = None


def stage_logic(kind: str, options: StageOptions) -> StageLogic:
    """The logic of VM stage ``kind``, built from its row of the stage registry (``_stages``) as its own module builds it."""
    try:
        spec = stage_spec(kind, VM)
    except KeyError:
        raise InputError(
            "vmanyware_provision runs the stages of a VM operation; stage '%s' is run by its own module "
            "(containers: vmanyware_container)." % kind,
            code="invalid_option",
            path="operation_id",
            details={"stage": kind, "rule": "vm_stage"},
        ) from None
    return build_logic(spec, dataclasses.asdict(options))


class ProvisionStopped(VmanywareError):
    """A stage failed, or the preflight stopped an operation that has not begun: the error, plus the results of every
    stage this run reached (``stages``) and the preflight's result when it ran (``preflight``)."""

    def __init__(self, err: VmanywareError, stages: list[dict[str, t.Any]], message: str | None = None) -> None:
        super().__init__(message or err.message, code=err.code, path=err.path, details=err.details)
        self.stages = stages
        self.log: list[str] = []
        self.preflight: dict[str, t.Any] | None = None
        self.operation_id: str | None = None

    def to_result(self) -> dict[str, t.Any]:
        result = super().to_result()
        if self.operation_id is not None:
            result["operation_id"] = self.operation_id
        result["stages"] = self.stages
        result["log"] = self.log
        if self.preflight is not None:
            result["preflight"] = self.preflight
        return result


# Added to preflight_failed's message when the preflight stops a confirmed operation before it is recorded.
NOT_RECORDED_TEXT = "Nothing was recorded or sent: fix what the checks name, then run again with the same confirmation."
# Added to preflight_failed's message when the preflight stops an operation that has not begun.
NOT_BEGUN_TEXT = (
    "Nothing was sent: the operation stays recorded with every stage pending. A re-run resumes it and checks again; "
    "to plan differently, abandon it first (vmanyware_operation state=abandoned)."
)
# The warning (and progress line) when checks did not pass but the operation has begun.
BEGUN_TEXT = (
    "The preflight did not pass, but the operation has begun (a stage was dispatched), so it resumes: its VM may exist "
    "already, and each stage checks its own preconditions before it writes."
)


def preflight_verdict(document: t.Mapping[str, t.Any], failed: PreflightFailed | None) -> str:
    """What a preflight means for the run of ``document``'s stages: ``passed``; ``resume`` (it did not pass, but the
    operation has begun: ``operation_begun``, the rule the role's step-by-step path applies too); ``stop`` (it did not
    pass and nothing was ever dispatched: stop before the first write, as for a new operation)."""
    if failed is None:
        return "passed"
    return "resume" if operation_begun(document) else "stop"


def preflight_before_stages(
    store: t.Any,
    client: t.Any,
    operation_id: str,
    settings: StageSettings,
    fail_on: str,
    *,
    report: t.Callable[[str], None] = lambda line: None,
    recorded: bool = True,
) -> tuple[dict[str, t.Any] | None, list[str]]:
    """The preflight of ``operation_id``'s plan and mapping through ``client`` (GETs only), one ``report`` line per
    check; returns (its result, warnings), or (None, []) when no stage remains to run (completed or released).
    ``recorded``: false when ``store`` holds the document a confirmed run is about to record (not in the journal yet).

    Raises ``ProvisionStopped`` (``preflight_failed``, no stage reached) when the checks do not pass per ``fail_on`` and
    the operation has not begun (``preflight_verdict``).
    """
    document = store.load(operation_id)
    if document["release"] is not None or all(item["status"] == "completed" for item in document["stages"]):
        report("preflight: skipped, no stage of the operation remains to run")
        return None, []
    environ = os.environ if settings.environ is None else settings.environ
    failed: PreflightFailed | None = None
    try:
        result = preflight_of_recorded(
            client,
            document["plan"],
            document["mapping"],
            environ=environ,
            fail_on=fail_on,
            provisioning_option=settings.gate_options.get(PROVISIONING_GATE),
        )
    except PreflightFailed as err:
        failed, result = err, err.result
    result = {key: value for key, value in result.items() if key != "changed"}
    for line in aligned_lines([check_row(check) for check in result["checks"]]):
        report("preflight " + line)
    summary = result["summary"]
    report("preflight: %d passed, %d failed, %d unknown" % (summary["passed"], summary["failed"], summary["unknown"]))
    verdict = preflight_verdict(document, failed)
    if verdict == "stop" and failed is not None:
        stopped = ProvisionStopped(
            failed, [], message="%s %s" % (failed.message, NOT_BEGUN_TEXT if recorded else NOT_RECORDED_TEXT)
        )
        if recorded:
            stopped.details["operationId"] = operation_id
        stopped.preflight = result
        report(
            "preflight: stopped before the first stage; nothing was sent"
            if recorded
            else "preflight: stopped before the operation was recorded; nothing was recorded or sent"
        )
        raise stopped
    if verdict == "resume":
        report("preflight: " + BEGUN_TEXT)
        return result, [BEGUN_TEXT]
    return result, []


def _stage_summary(
    kind: str, position: int, result: dict[str, t.Any] | None, seconds: float, error: VmanywareError | None = None
) -> dict[str, t.Any]:
    summary: dict[str, t.Any] = {"kind": kind, "position": position, "seconds": round(seconds, 2)}
    if result is not None:
        stage = result["stage"]
        summary.update(
            status=stage["status"],
            changed=bool(result["changed"]),
            done=bool(result["done"]),
            upid=stage.get("upid"),
            requests=result.get("requests", []),
        )
        for key in ("preview", "task", "warnings", "diff"):
            if key in result:
                summary[key] = result[key]
    if error is not None:
        summary.update(status="failed", changed=False, done=False, error_code=error.code)
    return summary


def _line(kind: str, position: int, total: int, text: str) -> str:
    return "stage %d/%d %s: %s" % (position, total, kind, text)


def run_stages(
    store: t.Any,
    client: t.Any,
    operation_id: str,
    settings: StageSettings,
    options: StageOptions,
    *,
    progress_interval: float = DEFAULT_PROGRESS_INTERVAL,
    report: t.Callable[[str], None] = lambda line: None,
    recent_reads: RecentReads | None = None,
) -> dict[str, t.Any]:
    """Run every declared stage of ``operation_id`` in order until all are completed (check mode: one preview each).

    Raises ``ProvisionStopped`` (the failing stage's code, the stage results so far) at the first failure.
    """
    reads = recent_reads if recent_reads is not None else RecentReads(clock=settings.clock)
    observing = ObservingClient(client, reads)
    declared = sorted(store.load(operation_id)["stages"], key=lambda item: item["position"])
    total = len(declared)
    # Every stage's logic first: an undeclared kind (a container operation) fails before anything runs. A profile stage
    # has none: vmanyware_profile runs it (its nested ansible-playbook), the role hands it over (docs/profiles.md, "Running profiles").
    logics = [
        (item["kind"], item["position"], None if is_profile_stage(item["kind"]) else stage_logic(item["kind"], options))
        for item in declared
    ]
    summaries: list[dict[str, t.Any]] = []
    # wait_budget: this call returns done=false once it has followed the stages that long (a re-run continues).
    call_deadline = None if settings.wait_budget is None else settings.clock() + settings.wait_budget
    for kind, position, logic in logics:
        if logic is None:
            handed = _profile_stage(
                store.load(operation_id), kind, position, settings.check_mode, options.profile_connection
            )
            summaries.append(handed)
            report(_line(kind, position, total, handed["preview"] if settings.check_mode else handed["note"]))
            if handed["done"] or settings.check_mode:
                continue
            handed_over = _provision_result(store, operation_id, summaries, reads)
            handed_over["profiles_pending"] = [
                item["kind"][len(STAGE_PREFIX) :]
                for item in store.load(operation_id)["stages"]
                if is_profile_stage(item["kind"]) and item["status"] != "completed"
            ]
            return handed_over
        started = settings.clock()
        deadline = started + (settings.timeout if settings.timeout is not None else logic.default_timeout)
        result: dict[str, t.Any] | None = None
        try:
            while True:
                round_started = settings.clock()
                limit = deadline if call_deadline is None else min(deadline, call_deadline)
                budget = None if settings.check_mode else max(0.0, min(progress_interval, limit - round_started))
                round_settings = dataclasses.replace(settings, wait_budget=budget, recent_reads=reads)
                result = StageRunner(store, observing, logic, round_settings).run(operation_id)
                if settings.check_mode or result["done"]:
                    break
                if call_deadline is not None and settings.clock() >= call_deadline:
                    summaries.append(_stage_summary(kind, position, result, settings.clock() - started))
                    report(
                        _line(
                            kind,
                            position,
                            total,
                            "still running %s; re-run to keep following it" % _progress_text(result),
                        )
                    )
                    return _provision_result(store, operation_id, summaries, reads, result.get("progress"))
                if settings.clock() >= deadline:
                    raise StageError(
                        "The stage did not finish before its deadline; re-run to keep following it.",
                        code="task_timeout",
                        details={"stage": kind, "seconds": round(settings.clock() - started, 1)},
                    )
                report(
                    _line(
                        kind,
                        position,
                        total,
                        "still running after %d s %s" % (settings.clock() - started, _progress_text(result)),
                    )
                )
                spent = settings.clock() - round_started
                if spent < MIN_ROUND:
                    settings.sleep(MIN_ROUND - spent)
        except VmanywareError as err:
            summaries.append(_stage_summary(kind, position, None, settings.clock() - started, err))
            report(_line(kind, position, total, "failed (%s)" % err.code))
            raise ProvisionStopped(err, summaries) from None
        summary = _stage_summary(kind, position, result, settings.clock() - started)
        summaries.append(summary)
        report(_line(kind, position, total, _done_text(summary, settings.check_mode)))
    return _provision_result(store, operation_id, summaries, reads)


def _profile_stage(
    document: t.Mapping[str, t.Any], kind: str, position: int, check_mode: bool, transport: str | None = None
) -> dict[str, t.Any]:
    """A profile stage's summary: completed (skipped), the role's preview with its transport and the command each task
    becomes (check mode), or handed to vmanyware_profile."""
    record = next(item for item in document["stages"] if item["kind"] == kind)
    done = record["status"] == "completed"
    summary: dict[str, t.Any] = {
        "kind": kind,
        "position": position,
        "seconds": 0.0,
        "status": record["status"],
        "changed": False,
        "done": done,
        "upid": None,
        "requests": [],
        "note": "completed earlier" if done else "handed to vmanyware_profile (the provision role runs it next)",
    }
    if check_mode:
        entry = plan_profile(document["plan"], kind[len(STAGE_PREFIX) :])
        chosen = resolve_transport(document, transport)
        summary["preview"] = preview_text(entry, chosen, equivalent_command(document, chosen, ProfileSettings()))
    return summary


def _provision_result(
    store: t.Any,
    operation_id: str,
    summaries: list[dict[str, t.Any]],
    reads: RecentReads,
    progress: t.Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    document = store.load(operation_id)
    result: dict[str, t.Any] = {
        "changed": any(item["changed"] for item in summaries),
        "done": len(summaries) == len(document["stages"]) and all(item["done"] for item in summaries),
        "operation_id": operation_id,
        "status": document["status"],
        "stages": summaries,
        "requests": [request for item in summaries for request in item["requests"]],
        "reads_saved": reads.served,
    }
    diffs = [item.pop("diff") for item in summaries if "diff" in item]
    if diffs:
        result["diff"] = diffs[0]  # --diff: the first stage's that has one (the later ones depend on it)
    if progress:
        result["progress"] = dict(progress)
    return result


def _progress_text(result: t.Mapping[str, t.Any]) -> str:
    progress = result.get("progress") or {}
    return "(%s)" % ", ".join("%s=%s" % (key, progress[key]) for key in sorted(progress)) if progress else ""


def _done_text(summary: t.Mapping[str, t.Any], check_mode: bool) -> str:
    if check_mode:
        sent = ["%s %s" % (request["method"], request["path"]) for request in summary["requests"]]
        return "would send " + "; ".join(sent) if sent else str(summary.get("preview") or "nothing to send")
    if not summary["changed"]:
        return "completed, nothing to change"
    return "completed in %.1f s" % summary["seconds"]


def provision_argument_spec() -> dict[str, dict[str, t.Any]]:
    """The stage options plus the per-stage ones, ``progress_interval``, the preflight's and those recording the operation."""
    spec = stage_argument_spec()
    spec.update(
        {
            "readiness_timeout": {"type": "float", "default": 300.0},
            "packages_timeout": {"type": "float", "default": 900.0},
            # VM plans only (containers have no one-task path): the transport the check-mode preview of a profile names
            "profile_connection": {"type": "str", "choices": list(TRANSPORTS)},
            "snapshots_enabled": {"type": "bool"},
            "progress_interval": {"type": "float", "default": DEFAULT_PROGRESS_INTERVAL},
            "preflight": {"type": "bool", "default": False},
            "preflight_fail_on": {"type": "str", "choices": list(FAIL_ON_CHOICES), "default": "failed"},
        }
    )
    plan_inputs = plan_input_argument_spec()
    spec.update(
        {
            "definition_path": plan_inputs["definition_path"],
            "definition": plan_inputs["definition"],
            "target_vmid": dict(plan_inputs["target_vmid"], required=False),
            "target_node": plan_inputs["target_node"],
            "addresses": plan_inputs["addresses"],
            "presets_path": plan_inputs["presets_path"],
            "presets": plan_inputs["presets"],
            "profiles_path": plan_inputs["profiles_path"],
            "profiles": plan_inputs["profiles"],
            "ssh_key_sources": plan_inputs["ssh_key_sources"],
            "confirmation": {"type": "dict"},
            "idempotency_key": {"type": "str", "no_log": False},
        }
    )
    spec["known_hosts_path"] = {"type": "path"}
    return spec


def install_known_hosts(store: t.Any, operation_id: str, path: str, check_mode: bool) -> dict[str, t.Any] | None:
    """A completed operation's agent-verified SSH host keys (its hand-off) installed in the known_hosts file at ``path``,
    as ``vmanyware_known_hosts`` installs them (``_known_hosts.install_block``); None when there are none to install."""
    document = store.load(operation_id)
    known_hosts = (document.get("handoff") or {}).get("knownHosts")
    if document["status"] != "completed" or known_hosts is None:
        return None
    return install_block(path, operation_id, known_hosts, check_mode=check_mode, diff=False)


def record_confirmed(params: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """``vmanyware_operation`` (state ``present``) with this task's options: the confirmed operation recorded, or found
    again by its idempotency key; in check mode the document an apply run would record. Nothing is sent to Proxmox."""
    if (
        params.get("target_vmid") is None
        or not (params.get("definition") or params.get("definition_path"))
        or not (params.get("catalog") or params.get("catalog_path"))
    ):
        raise InputError(
            "With confirmation, target_vmid, definition_path or definition, and catalog_path or catalog are required "
            "(the plan the operation is recorded from).",
            path="confirmation",
            details={"rule": "plan_inputs_required"},
        )
    return operation_from_params(params, "present", check_mode=check_mode)


def provision(
    params: t.Mapping[str, t.Any],
    *,
    check_mode: bool,
    diff: bool,
    client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """``vmanyware_provision``: every remaining stage of ``params['operation_id']`` (or, with ``confirmation``, of the
    operation it records first); progress lines shown as they come (``_progress``) and returned in ``log``.

    With ``confirmation`` the order is: gates, plan, provider scope and confirmation checked (nothing recorded), the
    preflight on the document the record would write, then the record, then the stages: a preflight that stops a new
    operation leaves nothing recorded. Check mode previews the preflight and the stages and records nothing."""
    if params.get("progress_interval") is not None and params["progress_interval"] <= 0:
        raise InputError(
            "progress_interval must be greater than 0.", path="progress_interval", details={"rule": "positive"}
        )
    settings = stage_settings(params, check_mode=check_mode, diff=diff)
    options = StageOptions(
        readiness_timeout=params.get("readiness_timeout") or 300.0,
        packages_timeout=params.get("packages_timeout") or 900.0,
        profile_connection=params.get("profile_connection") or None,
    )
    record_params = params
    confirmed: dict[str, t.Any] | None = None
    if params.get("confirmation") is not None:
        # Everything the record checks, without recording: the document an apply run would record (never written), or
        # the operation found again by its idempotency key. The preflight and check mode's stages run on it.
        confirmed = record_confirmed(params, True)
        params = dict(
            params, operation_id=confirmed["operation_id"], preview_operation=confirmed.get("preview_document")
        )
    # A new operation (not in the journal yet): an apply run records it only once the preflight let it through (``run``).
    new_operation = confirmed is not None and confirmed.get("preview_document") is not None
    to_record = new_operation and not check_mode
    # The operation failures name from the record on (check mode: the preview's).
    recorded: dict[str, t.Any] | None = None
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        report(line)

    def run(store: t.Any, operation_id: str, client: t.Any) -> dict[str, t.Any]:
        nonlocal recorded
        # One RecentReads for the preflight and the stages: the clone takes what the preflight read (rules 7 and 8).
        reads = RecentReads(clock=settings.clock)
        preflight: dict[str, t.Any] | None = None
        warnings: list[str] = []
        try:
            if params.get("preflight"):
                preflight, warnings = preflight_before_stages(
                    store,
                    ObservingClient(client, reads),
                    operation_id,
                    settings,
                    params.get("preflight_fail_on") or "failed",
                    report=say,
                    recorded=not new_operation,
                )
            if confirmed is not None:
                # After the preflight: a stop above left nothing recorded. Found again (idempotent) when it exists.
                recorded = confirmed if check_mode else record_confirmed(record_params, False)
                if to_record:
                    store, operation_id = open_store(params.get("journal_dir")), recorded["operation_id"]
            with cancel_scope(settings):
                result = run_stages(
                    store,
                    client,
                    operation_id,
                    settings,
                    options,
                    report=say,
                    recent_reads=reads,
                    progress_interval=params.get("progress_interval") or DEFAULT_PROGRESS_INTERVAL,
                )
        except ProvisionStopped as stopped:
            stopped.log = lines
            if stopped.preflight is None:
                stopped.preflight = preflight
            raise
        result["log"] = lines
        result["log_shown"] = reporting()
        if preflight is not None:
            result["preflight"] = preflight
        if params.get("known_hosts_path"):
            installed = install_known_hosts(store, operation_id, params["known_hosts_path"], check_mode)
            if installed is not None:
                result["known_hosts"] = installed
                result["changed"] = result["changed"] or installed["changed"]
        if warnings:
            result["warnings"] = warnings
        if to_record and params.get("set_operation_fact"):
            result["ansible_facts"] = {"vmanyware_operation": public_view(store.load(operation_id))}
        return result

    try:
        # A new operation not recorded yet is read from its preview document (the store of check mode) until it is.
        result = with_stage_client(
            dict(params, set_operation_fact=False) if to_record else params,
            check_mode or to_record,
            run,
            client_factory,
        )
    except VmanywareError as err:
        if recorded is None:
            raise
        # Every failure after the operation was recorded names it, so the operator (or a rescue) can follow it up.
        stopped = err if isinstance(err, ProvisionStopped) else ProvisionStopped(err, [])
        stopped.operation_id = recorded["operation_id"]
        stopped.log = lines
        raise stopped from None
    if recorded is not None:
        result["created"] = recorded["created"]
        result["changed"] = result["changed"] or recorded["changed"]
    return result


def provision_entry() -> ModuleEntry:
    return ModuleEntry(
        argument_spec=provision_argument_spec,
        action=lambda params, check_mode, diff: provision(params, check_mode=check_mode, diff=diff),
        libraries=("PyYAML", "jsonschema", "requests"),
        mutually_exclusive=PLAN_INPUT_MUTUALLY_EXCLUSIVE
        + (("operation_id", "confirmation"), ("preview_operation", "confirmation")),
    )
