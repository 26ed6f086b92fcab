# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read-only recovery of an operation whose journal was lost (``vmanyware_operation`` ``state: adopt``).

AWX jobs run in fresh containers: when the journal is gone, the VM still carries the binding
description (``_stages.common.binding_description``: operation id, definitionHash, planHash) and
the node still lists our tasks. Adoption recomputes the plan, requires the operator's
confirmation of exactly that plan (the same gates as creation), reads the VM and the node with
GETs only (the client is wrapped so that nothing else can be sent) and records, per stage, what
the reads prove:

- ``completed`` with the evidence the stage itself would record (digest, volid, MAC, sizes, seed
  hashes...), marked ``adopted: true``;
- ``pending`` when reads show the stage's effect is absent and running the stage is safe (its own
  preconditions read again and it sends at most its one request, bound to the digest observed now);
- ``uncertain`` when reads cannot tell: the stage resolves its outcome by reads on its next run,
  exactly as after a lost reply (never re-sending what it must not).

Each stage judges itself: its logic (built from the stage registry) carries an adoption hook
(``_stages._adoption.AdoptionHook.adopt``) that reads through the shared ``Observations``; a stage
without one runs again. Stages complete in order (the journal's rule): after the first stage that
is not completed, every later stage is ``pending``. Readiness (and so packages and snapshot) is always ``pending``: its
probes need the guest agent's ``exec``, which adoption never uses; the stage re-runs them, and
packages and snapshot find what is already there and send nothing. The per-stage rules are in
docs/operations.md ("Recovering a lost journal").

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import typing as t

from .._core.errors import VmanywareError
from .._journal import (
    JournalError,
    JournalStore,
    adopted_operation_document,
    hash_idempotency_key,
    new_operation_document,
    utc_now,
)
from .._operation.create import default_idempotency_key, gate_and_confirm, public_view, require_scope
from .._formats.plan import PlannedEnvironment
from .._core.protocols import ApiClient, ClientIdentity
from .._stages.protocol import StageContext
from .._stages.registry import CONTAINER, VM, stage_spec, step_kind
from .._stages.logic import build_logic
from .._stages.adoption import Decision, Observations, adoption_hook
from .._stages.common import binding_description, read_config_or_none

_BINDING = re.compile(
    r"\Avmanyware operation (op-[a-z2-7]{26})\ndefinitionHash ([0-9a-f]{64})\nplanHash ([0-9a-f]{64})\Z"
)


class ReadOnlyClient:
    """The collection's client restricted to GETs: adoption can send nothing else (``internal_error`` otherwise)."""

    def __init__(self, client: ApiClient) -> None:
        self._client = client

    @property
    def settings(self) -> ClientIdentity:
        return self._client.settings

    @property
    def provider_scope_id(self) -> str | None:
        return self._client.provider_scope_id

    def get(self, path: str, /, **params: t.Any) -> t.Any:
        return self._client.get(path, **params)

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        if method != "GET":
            _refuse()
        return self._client.request(method, path, params)

    def post(self, path: str, /, **params: t.Any) -> t.NoReturn:
        _refuse()

    def put(self, path: str, /, **params: t.Any) -> t.NoReturn:
        _refuse()

    def delete(self, path: str, /, **params: t.Any) -> t.NoReturn:
        _refuse()


def _refuse() -> t.NoReturn:
    raise VmanywareError("Adoption tried to send a request that is not a GET.", code="internal_error")


def parse_binding(description: t.Any) -> tuple[str, str, str] | None:
    """``(operationId, definitionHash, planHash)`` of a binding description, or ``None`` when it is not one."""
    match = _BINDING.match(description) if isinstance(description, str) else None
    return (match.group(1), match.group(2), match.group(3)) if match else None


def decide(obs: Observations, kinds: list[str], family: str = VM) -> list[tuple[str, Decision]]:
    """One decision per stage, in order, from each stage's adoption hook (``_stages._adoption``); after the first stage
    that is not completed every later one is pending."""
    decisions: list[tuple[str, Decision]] = []
    blocked: str | None = None
    for kind in kinds:
        spec = stage_spec(step_kind(kind), family)
        # A profile's effect is not in any API read: its stage is not judged and runs again (its role is idempotent).
        hook = adoption_hook(None if spec.nested_playbook else build_logic(spec))
        if blocked is not None:
            decisions.append(
                (
                    kind,
                    Decision(
                        "pending", "Stages complete in order: %s is not completed." % blocked + hook.adoption_note(obs)
                    ),
                )
            )
            continue
        decision = hook.adopt(obs)
        decisions.append((kind, decision))
        if decision.status != "completed":
            blocked = kind
    return decisions


# -- the whole adoption ------------------------------------------------------------------------------
def _load_existing(store: JournalStore, operation_id: str) -> dict[str, t.Any] | None:
    try:
        return store.load(operation_id)
    except JournalError as err:
        if err.code == "not_found":
            return None
        raise


def adopt_operation(
    store: JournalStore,
    client: ApiClient,
    *,
    planned: PlannedEnvironment,
    provider_scope_id: str,
    confirmation: t.Any,
    idempotency_key: str | None,
    environ: t.Mapping[str, str],
    provisioning_option: bool | None = None,
    check_mode: bool = False,
) -> dict[str, t.Any]:
    """Rebuild the journal entry of the operation bound to the plan's target VM; return the module result.

    Order: gates, attestation and confirmation (no request); the provider scope (``GET /version``);
    the target's configuration: no VM or no binding description -> ``not_found``, a binding to
    other hashes -> ``plan_changed``; an operation already in the journal is returned unchanged
    (``changed: false``); a locked VM -> ``locked``; then the reads and the per-stage decisions.
    Check mode returns what would be recorded (``preview_document``) and writes nothing.
    """
    confirmed = gate_and_confirm(planned, provider_scope_id, confirmation, environ, provisioning_option)
    plan = planned.plan
    key = idempotency_key if idempotency_key else default_idempotency_key(plan, provider_scope_id)
    kinds = [step.get("name") or step["kind"] for step in plan["steps"]]
    target = {"scope": provider_scope_id, "node": plan["target"]["node"], "vmid": plan["target"]["vmid"]}
    snapshots = {
        "definition": dict(planned.definition),
        "mapping": dict(planned.mapping),
        "plan": dict(plan),
        "confirmation": confirmed,
    }
    reader = ReadOnlyClient(client)
    # One cheap GET makes the client observe the certificate the scope id includes: the reads that
    # decide the stages must come from the provider the operator confirmed.
    reader.get("/version")
    require_scope(reader.provider_scope_id, provider_scope_id)

    now = utc_now()
    # A scratch document (never written) gives the stage helpers their context; its id is set from the binding.
    scratch = new_operation_document("op-" + "a" * 26, None, target, snapshots, kinds, now)
    config = read_config_or_none(StageContext(operation=scratch, client=reader, kind=kinds[0]))
    binding = parse_binding(config.get("description")) if config is not None else None
    if config is None or binding is None:
        raise VmanywareError(
            "No VM at the target carries an operation's binding description; there is nothing to adopt.",
            code="not_found",
            details={"vmid": target["vmid"], "node": target["node"]},
        )
    operation_id, definition_hash, plan_hash = binding
    fields = [
        name for name, seen in (("definitionHash", definition_hash), ("planHash", plan_hash)) if plan[name] != seen
    ]
    if fields:
        raise VmanywareError(code="plan_changed", details={"fields": fields, "operationId": operation_id})
    scratch["operationId"] = operation_id
    if binding_description(scratch) != config.get(
        "description"
    ):  # pragma: no cover - the pattern is the description's format
        raise VmanywareError(code="not_found", details={"vmid": target["vmid"], "node": target["node"]})

    existing = _load_existing(store, operation_id)
    if existing is not None:
        if not check_mode:
            # Returned unchanged; under the journal lock a target claim cut short by a crash is completed (no stage is decided).
            existing, _adopted = store.adopt_operation(
                operation_id=operation_id,
                idempotency_key=key,
                provider_scope_id=provider_scope_id,
                definition=planned.definition,
                mapping=planned.mapping,
                plan=plan,
                confirmation=confirmed,
                target_node=target["node"],
                target_vmid=target["vmid"],
                stage_kinds=kinds,
                observed=[],
            )
        return {
            "changed": False,
            "adopted": False,
            "created": False,
            "operation_id": operation_id,
            "operation": public_view(existing),
            "adoption": [],
        }
    if config.get("lock"):
        raise VmanywareError(
            "The VM bound to this operation is locked (a task is still running); re-run the adoption later.",
            code="locked",
            details={"vmid": target["vmid"], "lock": str(config["lock"]), "operationId": operation_id},
        )

    obs = Observations(scratch, reader, config)
    decisions = decide(obs, kinds, CONTAINER if plan.get("guestType") == "container" else VM)
    observed: list[t.Mapping[str, t.Any]] = [decision.observed() for _kind, decision in decisions]
    report = [{"kind": kind, "status": decision.status, "reason": decision.reason} for kind, decision in decisions]
    facts = {
        "powerState": obs.power,
        "pendingKeys": obs.pending_keys,
        "qmstartTasks": [item["upid"] for item in obs.tasks("start", "qmstart", target["vmid"])],
    }

    if check_mode:
        holder = store.target_holder(provider_scope_id, target["vmid"])
        if holder is not None and holder != operation_id:
            raise VmanywareError(code="conflicting_operation", details={"operationId": holder})
        key_holder = store.find_by_idempotency_key(key)
        if key_holder is not None and key_holder != operation_id:
            raise VmanywareError(
                code="idempotency_key_conflict", path="idempotency_key", details={"operationId": key_holder}
            )
        preview = adopted_operation_document(
            operation_id, hash_idempotency_key(key), target, snapshots, kinds, observed, now
        )
        return {
            "changed": True,
            "adopted": True,
            "created": False,
            "operation_id": operation_id,
            "operation": public_view(preview),
            "preview_document": preview,
            "adoption": report,
            "observed": facts,
        }

    document, adopted = store.adopt_operation(
        operation_id=operation_id,
        idempotency_key=key,
        provider_scope_id=provider_scope_id,
        definition=planned.definition,
        mapping=planned.mapping,
        plan=plan,
        confirmation=confirmed,
        target_node=target["node"],
        target_vmid=target["vmid"],
        stage_kinds=kinds,
        observed=observed,
    )
    if not adopted:  # another run adopted it meanwhile: returned unchanged
        return {
            "changed": False,
            "adopted": False,
            "created": False,
            "operation_id": operation_id,
            "operation": public_view(document),
            "adoption": [],
        }
    return {
        "changed": True,
        "adopted": True,
        "created": False,
        "operation_id": operation_id,
        "operation": public_view(document),
        "adoption": report,
        "observed": facts,
    }
