# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Guarded cleanup: remove the guest an operation created (``vmanyware_cleanup``, docs/operations.md, "Lifecycle").

The guest is a VM (``/nodes/{node}/qemu/{vmid}``, ``qm*`` tasks) or, for a container operation
(``guestType: container``), a container (``/nodes/{node}/lxc/{vmid}``, ``vz*`` tasks): the path comes from
``StageContext.vm_path``, the task types from the step classes (``STEPS``); guards and steps are the same.

Two steps, journaled in the operation's ``lifecycle.cleanup`` track and run by the same
``StageRunner`` as the provisioning stages (dispatch recorded before sending, a known task followed by
GET, a lost reply resolved by reads and never re-sent):

- ``stop``: ``POST {guest}/status/stop`` when the guest runs and the operator asked for it (``stop: true``);
  nothing when it is stopped or gone;
- ``destroy``: ``DELETE {guest}`` with ``purge=1`` and ``destroy-unreferenced-disks=1`` (never ``force``); a lost
  reply is resolved by the node's task list (a ``qmdestroy``/``vzdestroy`` task for the VMID) and by whether the guest
  is gone.

Before each send, reads must show: the gate ``VMANYWARE_LIFECYCLE_ENABLED``; the token's ``VM.Allocate``
(and ``VM.PowerMgmt`` to stop) on ``/vms/{vmid}``; the guest's description binding exactly this operation (id,
definitionHash and planHash); not a template; no ``protection``; no lock. The provider scope is bound
before any connection. Each guard that fails has its own error code and nothing is sent.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import os
import typing as t

from .._api.argspec import connection_settings
from .._api.cli import with_cli
from .._api.client import ProxmoxClient
from .._core.cancel import Cancellation
from .._core.errors import VmanywareError
from .._core.protocols import ApiClient
from .._journal import LIFECYCLE_KEY, require_cleanup_eligible, validate_operation_id
from .._operation.create import LIFECYCLE_GATE, bind_scope, public_view, read_gate, require_verified_tls
from .._stages.cleanup.destroy import ContainerDestroyStep, DestroyStep
from .._stages.cleanup.guard import DESTROY_PARAMS, owned_volumes, snapshot_names
from .._stages.cleanup.stop import ContainerStopStep, StopStep
from .._stages.runner import StageRunner
from .._stages.protocol import StageContext, StageSettings, guest_api_kind
from .._stages.outcomes import Request, StageError
from .stage_module import cancel_scope, open_store

# The two steps per guest API kind (``_stage.guest_api_kind``: the operation's guest type).
STEPS: dict[str, tuple[type[StopStep], type[DestroyStep]]] = {
    "qemu": (StopStep, DestroyStep),
    "lxc": (ContainerStopStep, ContainerDestroyStep),
}


def _steps(
    params: t.Mapping[str, t.Any], environ: t.Mapping[str, str], document: t.Mapping[str, t.Any]
) -> tuple[StopStep, DestroyStep]:
    stop, destroy = STEPS[guest_api_kind(document)]
    return (
        stop(environ, params.get("lifecycle_enabled"), bool(params.get("stop"))),
        destroy(environ, params.get("lifecycle_enabled"), bool(params.get("stop"))),
    )


def _preview(document: dict[str, t.Any], client: ApiClient, stop: StopStep) -> dict[str, t.Any]:
    """Every guard read, and the exact requests the cleanup would send; nothing is written or sent."""
    ctx = StageContext(operation=document, client=client, kind="stop", check_mode=True)
    stop.preconditions(ctx)
    requests = []
    request = stop.request(ctx)
    if request is not None:
        requests.append(with_cli(request.summary()))
    inventory = None
    if ctx.facts["power"] != "absent":
        # The destroy step's guards are the stop step's, read once above; the guest is (or will then be) stopped.
        config = ctx.facts["config"]
        inventory = {"vmid": ctx.vmid, "volumes": owned_volumes(config, ctx.vmid), "snapshots": snapshot_names(ctx)}
        requests.append(with_cli(Request("DELETE", ctx.vm_path, dict(DESTROY_PARAMS)).summary()))
    return {"requests": requests, "removed": inventory or {"vmid": None, "volumes": [], "snapshots": []}}


def run_cleanup(
    params: t.Mapping[str, t.Any],
    *,
    check_mode: bool,
    environ: t.Mapping[str, str] | None = None,
    client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """The whole of ``vmanyware_cleanup``: eligibility, gate, scope, guards, then the two steps (module docstring)."""
    environ = os.environ if environ is None else environ
    store = open_store(params.get("journal_dir"))
    operation_id = validate_operation_id(params.get("operation_id"))
    document = store.load(operation_id)
    cleanup = (document.get(LIFECYCLE_KEY) or {}).get("cleanup")
    if cleanup is not None and cleanup["status"] == "completed":
        if not check_mode:
            document = store.finish_cleanup(operation_id)
        return _result(document, changed=False, requests=[])
    if cleanup is None:
        require_cleanup_eligible(document, bool(params.get("allow_completed")))
    elif cleanup["status"] == "failed":
        failure = cleanup["failure"] or {}
        raise StageError(
            "The cleanup failed earlier; the guest was kept. Inspect it in Proxmox.",
            code="stage_failed",
            details={"stage": failure.get("stage"), "cause": failure.get("code")},
        )
    if not read_gate(environ, LIFECYCLE_GATE, params.get("lifecycle_enabled")):
        raise VmanywareError(code="lifecycle_disabled")
    connection = connection_settings(params)
    require_verified_tls(connection)  # as every stage: no credential over unverified TLS, before the scope handshake
    connection = bind_scope(
        connection, document
    )  # every connection of the client: the certificate the scope was computed from
    steps = _steps(params, environ, document)
    client = client_factory(connection)
    try:
        if check_mode:
            if cleanup is not None:
                return _result(
                    document,
                    changed=True,
                    requests=[],
                    done=False,
                    preview="a cleanup is in progress; run without check mode to continue it",
                )
            preview = _preview(document, client, steps[0])
            return _result(document, changed=True, requests=preview["requests"], done=False, removed=preview["removed"])
        if cleanup is None:
            _preview(document, client, steps[0])  # every guard holds before the journal records a cleanup
            store.begin_cleanup(operation_id, allow_completed=bool(params.get("allow_completed")))
        # The cancel check of the stages (_cancel): a cleanup whose controller is gone, or that got SIGTERM/SIGINT, stops
        # at the next safe point (never between its DELETE's dispatch record and the send), as provisioning does.
        settings = StageSettings(
            wait_budget=params.get("wait_budget"),
            timeout=params.get("timeout"),
            lock_wait=params.get("lock_wait") or 0.0,
            environ=environ,
            gate_options={LIFECYCLE_GATE: params.get("lifecycle_enabled")},
            cancel_check=Cancellation.from_environment(),
        )
        track = store.cleanup_track()
        requests: list[dict[str, t.Any]] = []
        with cancel_scope(settings):
            for logic in steps:
                outcome = StageRunner(track, client, logic, settings).run(operation_id)
                requests.extend(outcome["requests"])
                if not outcome["done"]:
                    return _result(
                        store.load(operation_id),
                        changed=True,
                        requests=requests,
                        done=False,
                        progress=dict(outcome.get("progress") or {}, step=logic.kind),
                    )
    finally:
        client.close()
    return _result(store.finish_cleanup(operation_id), changed=True, requests=requests)


def _result(
    document: dict[str, t.Any],
    *,
    changed: bool,
    requests: list[dict[str, t.Any]],
    done: bool = True,
    removed: dict[str, t.Any] | None = None,
    **extra: t.Any,
) -> dict[str, t.Any]:
    view = public_view(document)
    if removed is None:
        removed = (view["cleanup"] or {}).get("removed") or {"vmid": None, "volumes": [], "snapshots": []}
    result = {
        "changed": changed,
        "done": done,
        "operation_id": document["operationId"],
        "requests": requests,
        "removed": removed,
        "operation": view,
        "ansible_facts": {"vmanyware_operation": view},
    }
    result.update(extra)
    return result
