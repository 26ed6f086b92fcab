# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Confirmed creation of an operation, its gates, and the public view of a journal entry.

An operation exists only when the operator confirmed the exact plan (its hashes, scope and
target); it is then recorded in the journal before any stage may talk to Proxmox. Creating it
makes no API request. See docs/operations.md.
"""

from __future__ import annotations

import copy
import dataclasses
import typing as t

from .._api.tls import bind_certificate, certificate_fingerprint, provider_scope_id, require_verified_connection
from .._core.errors import ConfigurationError, InputError, VmanywareError, snake_keys
from .._journal import (
    LIFECYCLE_KEY,
    JournalStore,
    hash_idempotency_key,
    lifecycle_status,
    new_operation_document,
    new_operation_id,
    operation_begun,
    utc_now,
    validate_operation_id,
)
from .._formats.networks import static_families
from .._formats.plan import PlannedEnvironment

# The fact vmanyware_operation sets in check mode: the document an apply run would record (never written). A check-mode
# stage task whose operation_id is that document's gets it as preview_operation (plugins/plugin_utils/_in_process.py).
PREVIEW_FACT = "vmanyware_preview_operation"
PROVISIONING_GATE = "VMANYWARE_PROVISIONING_ENABLED"
SNAPSHOTS_GATE = "VMANYWARE_SNAPSHOTS_ENABLED"
# Removing what an operation created is gated separately from creating it (docs/operations.md, "Lifecycle").
LIFECYCLE_GATE = "VMANYWARE_LIFECYCLE_ENABLED"

CONFIRMATION_FIELDS = (
    "definitionName",
    "definitionHash",
    "providerScopeId",
    "planHash",
    "targetNode",
    "targetVmid",
    "sourceVmid",
    "storage",
    "bridge",
    "confirmed",
)


def read_gate(environ: t.Mapping[str, str], name: str, option: bool | None = None) -> bool:
    """A gate: an environment value of exactly ``false`` wins; else the module option, when set; else the variable.

    The variable must be exactly ``true`` or ``false``; empty or unset means "not set" (closed unless the
    option opens it). Any other value is a configuration error, raised before anything else happens. An
    option can open a gate the environment leaves unset, never one it closes: that is what lets an
    administrator stop every job at once (docs/operations.md, "Gates").
    """
    value = environ.get(name) or None
    if value not in (None, "true", "false"):
        raise ConfigurationError(
            "%s must be exactly true or false." % name, path=name, details={"rule": "exact_boolean"}
        )
    if value == "false":
        return False
    if option is not None:
        return bool(option)
    return value == "true"


def creation_blockers(
    plan: t.Mapping[str, t.Any],
    mapping: t.Mapping[str, t.Any],
    environ: t.Mapping[str, str],
    provisioning_option: bool | None = None,
) -> list[str]:
    """Why an operation for ``plan`` cannot be created now (error codes, in the order they are raised); empty when it can.

    Reads both gates (a bad value raises first) and the mapping's attestation; never the network.
    """
    blockers: list[str] = []
    provisioning = read_gate(environ, PROVISIONING_GATE, provisioning_option)
    snapshots = read_gate(environ, SNAPSHOTS_GATE)
    if not provisioning:
        blockers.append("provisioning_disabled")
    if plan["snapshotAfterProvisioning"] and not snapshots:
        blockers.append("snapshot_disabled")
    # The attestation is about a VM image's cloud-init default user; a container's create request itself writes
    # root's authorized_keys and sends no password (docs/containers.md).
    if plan.get("guestType") != "container" and not isinstance(mapping.get("imageDefaultUser"), t.Mapping):
        blockers.append("attestation_required")
    return blockers


def require_verified_tls(settings: t.Any) -> None:
    """``tls_unverified`` unless the connection is verified by a CA (``validate_certs``) or a SHA-256 pin.

    Creating an operation, running a stage, a cleanup and a VMID lease act on the provider that was confirmed;
    without verified TLS that identity means nothing, and no credential is sent. The read-only opt-in
    (``unverified_tls_read_only``) never counts here (``_client.require_verified_connection``).
    """
    require_verified_connection(settings)


def require_scope(observed: str | None, expected: str) -> None:
    """``plan_changed`` unless the provider actually reached is the one the operation was confirmed for."""
    if observed != expected:
        raise VmanywareError(
            "The configured Proxmox provider is not the one this operation was confirmed for.",
            code="plan_changed",
            details={"fields": ["providerScopeId"]},
        )


def verified_scope(settings: t.Any) -> str:
    """The provider scope id of the configured connection, known only over verified TLS (``tls_unverified`` otherwise).

    The scope id includes the server certificate: with a pin it is known without connecting; otherwise one verified TLS
    handshake reads it (no HTTP request, no credential sent).
    """
    return verified_binding(settings)[0]


def verified_binding(settings: t.Any) -> tuple[str, t.Any]:
    """``verified_scope`` and ``settings`` bound to the certificate it was computed from (``bind_certificate``): a client
    built from them refuses a connection presenting another leaf (``certificate_changed``) before any byte is written."""
    require_verified_tls(settings)
    fingerprint = certificate_fingerprint(settings)
    scope = provider_scope_id(settings, fingerprint)
    if scope is None:  # a verified handshake always yields a certificate fingerprint
        raise VmanywareError("The server certificate could not be read.", code="tls_verification_failed")
    return scope, bind_certificate(settings, fingerprint)


def bind_scope(settings: t.Any, operation: t.Mapping[str, t.Any]) -> t.Any:
    """Refuse to act unless the configured provider is the one the operation was confirmed for (see ``verified_scope``);
    return ``settings`` bound to the certificate that scope was computed from: the client built from them refuses any
    connection presenting another leaf (``certificate_changed``), so a certificate that changes after this check is
    caught on the connection actually used, before any byte is written."""
    fingerprint = certificate_fingerprint(settings)
    require_scope(provider_scope_id(settings, fingerprint), operation["providerScopeId"])
    return bind_certificate(settings, fingerprint)


@dataclasses.dataclass(frozen=True)
class OperationInputs:
    """What creating an operation reads, each when it is needed: the gates are checked before any of them is parsed
    (a closed gate is reported before a bad input), then the journal, the plan inputs and the connection, in that order."""

    store: t.Callable[[], JournalStore]
    planned: t.Callable[[], t.Any]
    connection: t.Callable[[], t.Any]


def with_operation_facts(result: dict[str, t.Any]) -> dict[str, t.Any]:
    """``ansible_facts`` of a created (or previewed, or adopted) operation: the operation, and in check mode the preview document
    the stages of the same play preview against (plugin_utils/_in_process.py)."""
    result["ansible_facts"] = {"vmanyware_operation": result["operation"], PREVIEW_FACT: result.get("preview_document")}
    return result


def instance_tag(operation_id: str) -> str:
    """The VM tag that binds a VM to its operation (a valid ``pve-tag``)."""
    return "vmanyware-" + operation_id


def expected_confirmation(plan: t.Mapping[str, t.Any], provider_scope_id: str) -> dict[str, t.Any]:
    """The exact confirmation block an operator passes back for ``plan`` on this provider."""
    return {
        "definitionName": plan["definitionName"],
        "definitionHash": plan["definitionHash"],
        "providerScopeId": provider_scope_id,
        "planHash": plan["planHash"],
        "targetNode": plan["target"]["node"],
        "targetVmid": plan["target"]["vmid"],
        "sourceVmid": plan["source"].get("templateVmid"),  # None for a container (planHash binds its template)
        "storage": plan["storage"],
        "bridge": plan["bridge"],
        **_leased_addresses(plan),
        "confirmed": True,
    }


def _leased_addresses(plan: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``addresses`` for a plan whose static addresses came from a pool (``address: auto``), else nothing: the apply
    run passes them back to ``vmanyware_address``, which then finds them leased or claimed rather than leasing others
    (the planHash binds them too). Every other confirmation block is exactly as before."""
    nic = plan.get("nic")
    if not isinstance(nic, dict):
        return {}
    leased = {f: str(nic[f]["address"]).split("/", 1)[0] for f in ("ipv4", "ipv6") if (nic.get(f) or {}).get("leased")}
    return {"addresses": leased} if leased else {}


def confirmation_complete(given: t.Any, fields: t.Sequence[str] = CONFIRMATION_FIELDS) -> bool:
    """Whether ``given`` is a complete confirmation with ``confirmed: true`` (an apply run), matching or not."""
    return isinstance(given, t.Mapping) and all(name in given for name in fields) and given.get("confirmed") is True


def check_confirmation(
    given: t.Any, expected: t.Mapping[str, t.Any], fields: t.Sequence[str] = CONFIRMATION_FIELDS
) -> dict[str, t.Any]:
    """``confirmation_required`` when missing/incomplete, ``plan_changed`` when it confirms something else.

    Both failures carry the expected block (hashes, names and ids: nothing secret) so the operator
    can review and pass it back. ``fields``: the block's fields (the template build has its own).
    """
    if not confirmation_complete(given, fields):
        raise VmanywareError(code="confirmation_required", details={"expected_confirmation": dict(expected)})
    unknown = sorted(str(name) for name in given if name not in fields)
    if unknown:
        # Not named: the block is copied from the printout, not typed, so a stray key is no misspelling to point at.
        raise InputError(
            "The confirmation holds fields that are not part of it.",
            path="confirmation",
            details={"rule": "unknown_field"},
        )
    changed = [
        name for name in fields if given[name] != expected[name] or type(given[name]) is not type(expected[name])
    ]
    if changed:
        raise VmanywareError(code="plan_changed", details={"fields": changed, "expected_confirmation": dict(expected)})
    return dict(given)


def gate_and_confirm(
    planned: PlannedEnvironment,
    provider_scope_id: str,
    confirmation: t.Any,
    environ: t.Mapping[str, str],
    provisioning_option: bool | None = None,
) -> dict[str, t.Any]:
    """The gates, the attestation and the operator's confirmation of exactly this plan; returns the confirmation.

    Shared by creating an operation and adopting one (``_adopt``): both record an operation that stages
    then act on, so both need the same gates and the same confirmation. A review run (no complete
    confirmation) gets the block to confirm whatever the gates say: building it records nothing, so
    a read-only credential can review; ``error_details`` then says which gates an apply run would find
    closed. Only an apply run (a complete confirmation) needs the gates open.
    """
    plan = planned.plan
    blockers = creation_blockers(plan, planned.mapping, environ, provisioning_option)
    if "attestation_required" in blockers:
        raise VmanywareError(code="attestation_required")
    expected = expected_confirmation(plan, provider_scope_id)
    if not confirmation_complete(confirmation):
        # A review run gets the block it must confirm whatever the gates say; only the apply run needs them open.
        raise VmanywareError(
            code="confirmation_required",
            details={
                "expected_confirmation": expected,
                "provisioning_enabled": "provisioning_disabled" not in blockers,
                "snapshots_enabled": "snapshot_disabled" not in blockers,
            },
        )
    if blockers:
        raise VmanywareError(code=blockers[0])
    return check_confirmation(
        confirmation, expected, CONFIRMATION_FIELDS + (("addresses",) if "addresses" in expected else ())
    )


def default_idempotency_key(plan: t.Mapping[str, t.Any], provider_scope_id: str) -> str:
    """``<planHash>@<providerScopeId>``: the idempotency key when none is given."""
    return "%s@%s" % (plan["planHash"], provider_scope_id)


def create_operation(
    store: JournalStore,
    *,
    planned: PlannedEnvironment,
    provider_scope_id: str,
    confirmation: t.Any,
    idempotency_key: str | None,
    environ: t.Mapping[str, str],
    provisioning_option: bool | None = None,
    check_mode: bool = False,
) -> dict[str, t.Any]:
    """Gate, confirm and record an operation; return the module result (no provider request)."""
    confirmed = gate_and_confirm(planned, provider_scope_id, confirmation, environ, provisioning_option)
    plan = planned.plan
    key = idempotency_key if idempotency_key else default_idempotency_key(plan, provider_scope_id)
    snapshots = {
        "definition": dict(planned.definition),
        "mapping": dict(planned.mapping),
        "plan": dict(plan),
        "confirmation": confirmed,
    }
    return record_operation(
        store,
        key=key,
        provider_scope_id=provider_scope_id,
        snapshots=snapshots,
        # a profile step's journal stage is its name (profile:<name>), one per profile
        stage_kinds=[step.get("name") or step["kind"] for step in plan["steps"]],
        target=plan["target"],
        check_mode=check_mode,
    )


def record_operation(
    store: JournalStore,
    *,
    key: str,
    provider_scope_id: str,
    snapshots: t.Mapping[str, t.Any],
    stage_kinds: list[str],
    target: t.Mapping[str, t.Any],
    check_mode: bool,
) -> dict[str, t.Any]:
    """Record a confirmed operation (or, in check mode, return the document an apply run would record); the module result.

    Shared by the VM path and the template build (``_template_operation``); ``snapshots``: definition, mapping, plan, confirmation.
    """
    if check_mode:
        existing_id = store.find_by_idempotency_key(key)
        if existing_id is not None:
            existing = store.load(existing_id)
            return {"changed": False, "operation_id": existing_id, "created": False, "operation": public_view(existing)}
        holder = store.target_holder(provider_scope_id, target["vmid"])
        if holder is not None:
            raise VmanywareError(code="conflicting_operation", details={"operationId": holder})
        # The document an apply run would record, never written: stage modules preview against it.
        preview = new_operation_document(
            new_operation_id(),
            hash_idempotency_key(key),
            {"scope": provider_scope_id, "node": target["node"], "vmid": target["vmid"]},
            dict(snapshots),
            stage_kinds,
            utc_now(),
        )
        # operation_id is the preview's own id, so a playbook that passes it on to the stages previews them unchanged.
        return {
            "changed": True,
            "operation_id": preview["operationId"],
            "created": False,
            "operation": public_view(preview),
            "preview_document": preview,
        }
    document, created = store.create_operation(
        idempotency_key=key,
        provider_scope_id=provider_scope_id,
        definition=snapshots["definition"],
        mapping=snapshots["mapping"],
        plan=snapshots["plan"],
        confirmation=snapshots["confirmation"],
        target_node=target["node"],
        target_vmid=target["vmid"],
        stage_kinds=stage_kinds,
    )
    return {
        "changed": created,
        "operation_id": document["operationId"],
        "created": created,
        "operation": public_view(document),
    }


def public_view(document: t.Mapping[str, t.Any], evidence: bool = False) -> dict[str, t.Any]:
    """What may leave the journal: identities, hashes, status and stage progress; each stage's evidence only when asked.

    Keys in snake_case, as every module return key (the journal document itself keeps its camelCase).
    """
    return t.cast("dict[str, t.Any]", snake_keys(_public_fields(document, evidence)))


def _public_fields(document: t.Mapping[str, t.Any], evidence: bool) -> dict[str, t.Any]:
    plan = document["plan"]
    mapping = document["mapping"]
    handoff = dict(document.get("handoff") or {})
    lifecycle = document.get(LIFECYCLE_KEY) or {}
    cleanup = lifecycle.get("cleanup")
    return {
        "operationId": document["operationId"],
        "status": lifecycle_status(document),
        "provisioningStatus": document["status"],
        # Whether anything was ever dispatched (``operation_begun``): the provision role's step-by-step path lets a failed
        # preflight resume only such an operation, as vmanyware_provision's preflight does.
        "begun": operation_begun(document),
        "failure": document["failure"],
        "released": document["release"] is not None,
        "release": dict(document["release"]) if document["release"] is not None else None,
        "abandonment": dict(lifecycle["abandonment"]) if lifecycle.get("abandonment") else None,
        "cleanup": cleanup_summary(cleanup) if cleanup is not None else None,
        "providerScopeId": document["providerScopeId"],
        "createdAt": document["createdAt"],
        "updatedAt": document["updatedAt"],
        "definitionName": plan["definitionName"],
        "definitionHash": plan["definitionHash"],
        "planHash": plan["planHash"],
        "source": {
            "image": mapping["image"],
            "node": mapping["node"],
            "templateVmid": mapping.get("templateVmid"),
            "templateVersion": mapping.get("templateVersion"),
        },  # None for a container mapping
        "instance": {
            "node": document["target"]["node"],
            "vmid": document["target"]["vmid"],
            "name": plan["target"]["name"],
            "tag": instance_tag(document["operationId"]),
            "guestType": plan.get("guestType", "vm"),
        },
        "guestUser": plan["guestUser"],
        "network": _network_fields(document),
        "stages": [
            dict(
                {
                    "position": item["position"],
                    "kind": item["kind"],
                    "status": item["status"],
                    "submissionStarted": item["submissionStarted"],
                    "upid": item["upid"],
                    "failure": item["failure"],
                },
                **({"evidence": dict(item["evidence"])} if evidence else {}),
            )
            for item in document["stages"]
        ],
        "handoff": handoff,
    }


def _network_fields(document: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
    """The planned NIC of a named network (``None`` without one) and whether its static addresses are still held: an
    unreleased operation holds them (its address claims, docs/networks.md), a released one no longer does."""
    nic = document["mapping"].get("network")
    if not isinstance(nic, dict):
        return None
    return dict(copy.deepcopy(nic), addressesHeld=document["release"] is None and bool(static_families(nic)))


def cleanup_summary(cleanup: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The public part of a cleanup track: status, times, steps and what was removed."""
    steps = cleanup["steps"]
    removed = next((item["evidence"].get("removed") for item in steps if item["kind"] == "destroy"), None)
    return {
        "status": cleanup["status"],
        "startedAt": cleanup["startedAt"],
        "completedAt": cleanup["completedAt"],
        "failure": cleanup["failure"],
        "steps": [
            {"kind": item["kind"], "status": item["status"], "upid": item["upid"], "failure": item["failure"]}
            for item in steps
        ],
        "removed": removed,
    }


def abandon_operation(
    store: JournalStore, operation_id: str, reason: t.Any, *, check_mode: bool = False
) -> dict[str, t.Any]:
    """The operator abandons ``operation_id``: record when and why, release its target; no provider request.

    Idempotent: an operation already abandoned is returned unchanged (``changed: false``). One that
    was closed or cleaned is not abandoned (``journal_conflict``). Stages refuse it afterwards
    (``operation_abandoned``); its guest, if any, is left alone (``vmanyware_cleanup`` removes it).
    """
    validate_operation_id(operation_id)
    if not isinstance(reason, str) or not reason.strip():
        raise InputError(
            "state=abandoned needs a reason (why the operation is abandoned).",
            path="reason",
            details={"rule": "required"},
        )
    document = store.load(operation_id)
    release = document["release"]
    if release is not None and release["reason"] == "abandoned":
        return {"changed": False, "operation_id": operation_id, "operation": public_view(document)}
    if release is not None:
        raise VmanywareError(
            "The operation already released its target (%s); there is nothing to abandon." % release["reason"],
            code="journal_conflict",
            details={"operationId": operation_id, "rule": "released"},
        )
    if check_mode:
        return {"changed": True, "operation_id": operation_id, "operation": public_view(document)}
    return {
        "changed": True,
        "operation_id": operation_id,
        "operation": public_view(store.abandon_operation(operation_id, reason)),
    }


def snapshots_view(document: t.Mapping[str, t.Any], with_public_keys: bool = False) -> dict[str, t.Any]:
    """The operation's immutable snapshots as created: the validated definition, the catalog mapping and the plan.

    The definition's SSH public keys are shown as the plan shows them, as a count (``access.sshPublicKeyCount``),
    unless ``with_public_keys`` (planning the same definition again needs them; they are public, not secrets).
    The journal holds no secret, so nothing else needs hiding.
    """
    definition = copy.deepcopy(dict(document["definition"]))
    access = definition.get("access")
    if not with_public_keys and isinstance(access, dict) and "sshPublicKeys" in access:
        keys = access.pop("sshPublicKeys")
        access["sshPublicKeyCount"] = len(keys) if isinstance(keys, list) else 0
    return {
        "definition": definition,
        "mapping": copy.deepcopy(dict(document["mapping"])),
        "plan": copy.deepcopy(dict(document["plan"])),
    }
