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

import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import ConfigurationError, InputError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    JournalStore,
    hash_idempotency_key,
    new_operation_document,
    new_operation_id,
    utc_now,
)

PROVISIONING_GATE = "VMANYWARE_PROVISIONING_ENABLED"
SNAPSHOTS_GATE = "VMANYWARE_SNAPSHOTS_ENABLED"

CONFIRMATION_FIELDS = (
    "definitionName", "definitionHash", "providerScopeId", "planHash", "targetNode", "targetVmid", "sourceVmid", "storage", "bridge",
    "confirmed",
)


def read_gate(environ: t.Mapping[str, str], name: str, option: bool | None = None) -> bool:
    """A gate: the module option wins when set; else the variable must be exactly ``true``/``false`` (unset: false).

    Any other value is a configuration error, raised before anything else happens.
    """
    if option is not None:
        return bool(option)
    value = environ.get(name)
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    raise ConfigurationError("%s must be exactly true or false." % name, path=name, details={"rule": "exact_boolean"})


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
        "confirmed": True,
    }


def check_confirmation(given: t.Any, expected: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``confirmation_required`` when missing/incomplete, ``plan_changed`` when it confirms something else.

    Both failures carry the expected block (hashes, names and ids: nothing secret) so the operator
    can review and pass it back.
    """
    if not isinstance(given, t.Mapping) or any(name not in given for name in CONFIRMATION_FIELDS) or given.get("confirmed") is not True:
        raise VmanywareError(code="confirmation_required", details={"expected_confirmation": dict(expected)})
    unknown = sorted(str(name) for name in given if name not in CONFIRMATION_FIELDS)
    if unknown:
        raise InputError("The confirmation holds fields that are not part of it.", path="confirmation",
                         details={"rule": "unknown_field"})
    changed = [name for name in CONFIRMATION_FIELDS if given[name] != expected[name] or type(given[name]) is not type(expected[name])]
    if changed:
        raise VmanywareError(code="plan_changed", details={"fields": changed, "expected_confirmation": dict(expected)})
    return dict(given)


def gate_and_confirm(planned: t.Any, provider_scope_id: str, confirmation: t.Any, environ: t.Mapping[str, str],
                     provisioning_option: bool | None = None) -> dict[str, t.Any]:
    """The gates, the attestation and the operator's confirmation of exactly this plan; returns the confirmation.

    Shared by creating an operation and adopting one (``_adopt``): both record an operation that stages
    then act on, so both need the same gates and the same confirmation.
    """
    provisioning = read_gate(environ, PROVISIONING_GATE, provisioning_option)
    snapshots = read_gate(environ, SNAPSHOTS_GATE)
    if not provisioning:
        raise VmanywareError(code="provisioning_disabled")
    plan = planned.plan
    if plan["snapshotAfterProvisioning"] and not snapshots:
        raise VmanywareError(code="snapshot_disabled")
    # The attestation is about a VM image's cloud-init default user; a container's create request itself writes
    # root's authorized_keys and sends no password (docs/containers.md).
    if "imageDefaultUser" not in planned.mapping and plan.get("guestType") != "container":
        raise VmanywareError(code="attestation_required")
    return check_confirmation(confirmation, expected_confirmation(plan, provider_scope_id))


def default_idempotency_key(plan: t.Mapping[str, t.Any], provider_scope_id: str) -> str:
    """``<planHash>@<providerScopeId>``: the idempotency key when none is given."""
    return "%s@%s" % (plan["planHash"], provider_scope_id)


def create_operation(
    store: JournalStore,
    *,
    planned: t.Any,
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
    stage_kinds = [step["kind"] for step in plan["steps"]]
    target = plan["target"]
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
            new_operation_id(), hash_idempotency_key(key),
            {"scope": provider_scope_id, "node": target["node"], "vmid": target["vmid"]},
            {"definition": dict(planned.definition), "mapping": dict(planned.mapping), "plan": dict(plan), "confirmation": confirmed},
            stage_kinds, utc_now())
        return {"changed": True, "operation_id": None, "created": False, "operation": public_view(preview), "preview_document": preview}
    document, created = store.create_operation(
        idempotency_key=key,
        provider_scope_id=provider_scope_id,
        definition=planned.definition,
        mapping=planned.mapping,
        plan=plan,
        confirmation=confirmed,
        target_node=target["node"],
        target_vmid=target["vmid"],
        stage_kinds=stage_kinds,
    )
    return {"changed": created, "operation_id": document["operationId"], "created": created, "operation": public_view(document)}


def public_view(document: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What may leave the journal: identities, hashes, status and stage progress; no private evidence."""
    plan = document["plan"]
    mapping = document["mapping"]
    handoff = dict(document.get("handoff") or {})
    return {
        "operationId": document["operationId"],
        "status": document["status"],
        "failure": document["failure"],
        "released": document["release"] is not None,
        "providerScopeId": document["providerScopeId"],
        "createdAt": document["createdAt"],
        "updatedAt": document["updatedAt"],
        "definitionName": plan["definitionName"],
        "definitionHash": plan["definitionHash"],
        "planHash": plan["planHash"],
        "source": {"image": mapping["image"], "node": mapping["node"], "templateVmid": mapping.get("templateVmid"),
                   "templateVersion": mapping.get("templateVersion")},  # None for a container mapping
        "instance": {"node": document["target"]["node"], "vmid": document["target"]["vmid"], "name": plan["target"]["name"],
                     "tag": instance_tag(document["operationId"])},
        "guestUser": plan["guestUser"],
        "stages": [{"position": item["position"], "kind": item["kind"], "status": item["status"],
                    "submissionStarted": item["submissionStarted"], "upid": item["upid"],
                    "failure": item["failure"]} for item in document["stages"]],
        "handoff": handoff,
    }
