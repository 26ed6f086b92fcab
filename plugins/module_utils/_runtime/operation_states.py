# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What ``vmanyware_operation`` does for each ``state`` (docs/operations.md); the module only passes its options in.

- ``abandoned``: the operator abandons an operation (no provider request, no plan inputs, no gate);
- ``present`` and ``adopt``: the gates first (a bad value is a configuration error before anything else; an apply run,
  i.e. a complete confirmation, with the provisioning gate closed stops there without any connection), then the
  journal, the plan, the provider scope over verified TLS, and the operation created from the confirmed plan or
  adopted from reads of Proxmox (``_adopt``).

A sibling of ``_operation`` because adoption (``_adopt``) itself builds on ``_operation``.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import os
import typing as t

from .._runtime.adopt import adopt_operation
from .._api.argspec import connection_settings
from .._api.client import ProxmoxClient
from .._core.errors import VmanywareError
from .._operation.create import (
    PROVISIONING_GATE,
    SNAPSHOTS_GATE,
    OperationInputs,
    abandon_operation,
    confirmation_complete,
    create_operation,
    read_gate,
    verified_binding,
    with_operation_facts,
)
from .._formats.plan import plan_from_params
from .._runtime.stage_module import open_store

STATES = ("present", "adopt", "abandoned")


def run_operation(
    state: str,
    inputs: OperationInputs,
    *,
    confirmation: t.Any,
    idempotency_key: str | None,
    provisioning_option: bool | None,
    operation_id: str | None,
    reason: t.Any,
    environ: t.Mapping[str, str],
    check_mode: bool,
    client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """The whole of ``vmanyware_operation`` for ``state``; the result carries ``ansible_facts``."""
    if state == "abandoned":
        result = abandon_operation(inputs.store(), t.cast(str, operation_id), reason, check_mode=check_mode)
        result["ansible_facts"] = {"vmanyware_operation": result["operation"]}
        return result
    # An apply run (a complete confirmation) with the gate closed stops here, without any connection; a review run goes
    # on to build the block to confirm.
    if not read_gate(environ, PROVISIONING_GATE, provisioning_option) and confirmation_complete(confirmation):
        raise VmanywareError(code="provisioning_disabled")
    read_gate(environ, SNAPSHOTS_GATE)
    store = inputs.store()
    planned = inputs.planned()
    settings = inputs.connection()
    # The confirmed provider is only known over verified TLS; adoption's reads go over connections bound to that certificate.
    scope, settings = verified_binding(settings)
    if state == "adopt":
        with client_factory(settings) as client:
            result = adopt_operation(
                store,
                client,
                planned=planned,
                provider_scope_id=scope,
                confirmation=confirmation,
                idempotency_key=idempotency_key,
                environ=environ,
                provisioning_option=provisioning_option,
                check_mode=check_mode,
            )
    else:
        result = create_operation(
            store,
            planned=planned,
            provider_scope_id=scope,
            confirmation=confirmation,
            idempotency_key=idempotency_key,
            environ=environ,
            provisioning_option=provisioning_option,
            check_mode=check_mode,
        )
    return with_operation_facts(result)


def operation_from_params(
    params: t.Mapping[str, t.Any], state: str, *, check_mode: bool, environ: t.Mapping[str, str] | None = None
) -> dict[str, t.Any]:
    """``run_operation`` with a module's options: ``vmanyware_operation``'s, and ``vmanyware_provision``'s when it records
    the confirmed operation itself (state ``present``; the plan inputs, ``confirmation``, ``idempotency_key``,
    ``provisioning_enabled``, the journal and the connection, all of the same names); ``environ``: the gates' (default
    ``os.environ`` as it is at the call: the in-process action applies the task's ``environment`` to it)."""
    inputs = OperationInputs(
        store=lambda: open_store(params["journal_dir"]),
        planned=lambda: plan_from_params(params),
        connection=lambda: connection_settings(params),
    )
    return run_operation(
        state,
        inputs,
        confirmation=params["confirmation"],
        idempotency_key=params["idempotency_key"],
        provisioning_option=params["provisioning_enabled"],
        operation_id=params.get("operation_id"),
        reason=params.get("reason"),
        environ=os.environ if environ is None else environ,
        check_mode=check_mode,
    )
