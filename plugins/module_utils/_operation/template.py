# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A confirmed template build operation in the journal (docs/templates.md, "Confirmation and operation").

The template build uses the same journal, gates and confirmation discipline as the VM path
(``_operation``): ``VMANYWARE_PROVISIONING_ENABLED`` must be exactly ``true`` (or the module's
option), the operator passes back the exact confirmation block of the plan, and the operation is
recorded before any stage may talk to Proxmox. The journal snapshots are: ``definition`` = the
validated TemplateBuild, ``mapping`` = the catalog mapping the build will produce (without the
observed ``sourceDiskGiB``), ``plan`` = the TemplateBuildPlan plus ``definitionName`` and
``definitionHash`` (= ``templateBuildHash``), the two names every operation document carries.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .._core.errors import VmanywareError
from .._formats.hashing import template_build_mapping
from .._journal import JournalStore
from .create import (
    PROVISIONING_GATE,
    OperationInputs,
    check_confirmation,
    default_idempotency_key,
    read_gate,
    record_operation,
    verified_scope,
    with_operation_facts,
)
from .._formats.template_build import PlannedTemplateBuild

TEMPLATE_CONFIRMATION_FIELDS = (
    "templateBuildHash",
    "planHash",
    "providerScopeId",
    "targetNode",
    "templateVmid",
    "storage",
    "importStorage",
    "bridge",
    "imageUrl",
    "confirmed",
)


def expected_template_confirmation(plan: t.Mapping[str, t.Any], provider_scope_id: str) -> dict[str, t.Any]:
    """The exact confirmation block an operator passes back for a TemplateBuildPlan on this provider."""
    return {
        "templateBuildHash": plan["templateBuildHash"],
        "planHash": plan["planHash"],
        "providerScopeId": provider_scope_id,
        "targetNode": plan["target"]["node"],
        "templateVmid": plan["target"]["vmid"],
        "storage": plan["storage"],
        "importStorage": plan["importStorage"],
        "bridge": plan["bridge"],
        "imageUrl": plan["source"]["url"],
        "confirmed": True,
    }


def journal_snapshots(planned: PlannedTemplateBuild) -> tuple[dict[str, t.Any], dict[str, t.Any], dict[str, t.Any]]:
    """(definition, mapping, plan) as the journal records them for a ``PlannedTemplateBuild``."""
    build, plan = planned.build, planned.plan
    mapping = template_build_mapping(build, plan["target"]["vmid"], plan["diskDevice"])
    journal_plan = dict(plan, definitionName=plan["target"]["name"], definitionHash=planned.template_build_hash)
    return dict(build), mapping, journal_plan


def create_template_operation(
    store: JournalStore,
    *,
    planned: PlannedTemplateBuild,
    provider_scope_id: str,
    confirmation: t.Any,
    idempotency_key: str | None,
    environ: t.Mapping[str, str],
    provisioning_option: bool | None = None,
    check_mode: bool = False,
) -> dict[str, t.Any]:
    """Gate, confirm and record a template build operation; the module result (no provider request)."""
    if not read_gate(environ, PROVISIONING_GATE, provisioning_option):
        raise VmanywareError(code="provisioning_disabled")
    confirmed = check_confirmation(
        confirmation,
        expected_template_confirmation(planned.plan, provider_scope_id),
        fields=TEMPLATE_CONFIRMATION_FIELDS,
    )
    definition, mapping, plan = journal_snapshots(planned)
    key = idempotency_key if idempotency_key else default_idempotency_key(plan, provider_scope_id)
    snapshots = {"definition": definition, "mapping": mapping, "plan": plan, "confirmation": confirmed}
    return record_operation(
        store,
        key=key,
        provider_scope_id=provider_scope_id,
        snapshots=snapshots,
        stage_kinds=[step.get("name") or step["kind"] for step in plan["steps"]],  # a profile's stage: profile:<name>
        target=plan["target"],
        check_mode=check_mode,
    )


def run_template_operation(
    inputs: OperationInputs,
    *,
    confirmation: t.Any,
    idempotency_key: str | None,
    provisioning_option: bool | None,
    environ: t.Mapping[str, str],
    check_mode: bool,
) -> dict[str, t.Any]:
    """The whole of ``vmanyware_template_operation``; the result carries ``ansible_facts``.

    The gate first: a bad value is a configuration error before anything else; disabled means no connection at all.
    """
    if not read_gate(environ, PROVISIONING_GATE, provisioning_option):
        raise VmanywareError(code="provisioning_disabled")
    store = inputs.store()
    planned = inputs.planned()
    scope = verified_scope(inputs.connection())  # the confirmed provider is only known over verified TLS
    return with_operation_facts(
        create_template_operation(
            store,
            planned=planned,
            provider_scope_id=scope,
            confirmation=confirmation,
            idempotency_key=idempotency_key,
            environ=environ,
            provisioning_option=provisioning_option,
            check_mode=check_mode,
        )
    )
