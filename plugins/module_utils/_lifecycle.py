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
import re
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._cancel import Cancellation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._cli import with_cli
from ansible_collections.vmanyware.proxmox.plugins.module_utils._client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import LIFECYCLE_KEY, require_cleanup_eligible, validate_operation_id
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import (
    LIFECYCLE_GATE,
    bind_scope,
    public_view,
    read_gate,
    require_verified_tls,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._permissions import effective_privileges
from ansible_collections.vmanyware.proxmox.plugins.module_utils._protocols import ApiClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._pveconfig import read_status
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import (
    Request,
    Resolution,
    StageContext,
    StageError,
    StageLogic,
    StageRunner,
    StageSettings,
    guest_api_kind,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage_module import cancel_scope, open_store
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import find_tasks, is_ours, read_config_or_none

# VM drives, and a container's root file system and mount points (``unused`` is both's).
_DRIVE_KEY = re.compile(r"\A((ide|sata|scsi|virtio|efidisk|tpmstate|unused|mp)\d+|rootfs)\Z")
# Accepted by both DELETE /nodes/{node}/qemu/{vmid} and .../lxc/{vmid}; ``force`` (destroy a running container) is never sent.
DESTROY_PARAMS = {"purge": 1, "destroy-unreferenced-disks": 1}


def owned_volumes(config: t.Mapping[str, t.Any], vmid: int) -> list[str]:
    """Volume ids in ``config`` that the guest owns (``vm-``/``base-``/``subvol-<vmid>-...``): what its destruction frees.

    Shared images (an installer ISO, a bind mount point) are referenced but not owned, and Proxmox leaves them alone.
    """
    owner = re.compile(r"(\A|[:/])(vm|base|subvol|basevol)-%d-" % vmid)
    volumes = []
    for key in sorted(config):
        if _DRIVE_KEY.match(key):
            volid = str(config[key]).split(",", 1)[0]
            if owner.search(volid) and volid not in volumes:
                volumes.append(volid)
    return volumes


def snapshot_names(ctx: StageContext) -> list[str]:
    data = ctx.client.get(ctx.vm_path + "/snapshot")
    return sorted(str(item["name"]) for item in data if isinstance(item, dict) and item.get("name") not in (None, "current")) \
        if isinstance(data, list) else []


class _Guarded(StageLogic):
    """The guards both cleanup steps check before they send (module docstring)."""

    privileges: t.ClassVar[tuple[str, ...]] = ("VM.Allocate",)
    # Removing is gated by the lifecycle gate, not the provisioning one (the runner re-reads it before each send).
    gates: t.ClassVar[tuple[str, ...]] = (LIFECYCLE_GATE,)

    # What the guest is called in messages; the container steps below say "container" (and expect vz* tasks).
    noun: t.ClassVar[str] = "VM"

    def __init__(self, environ: t.Mapping[str, str], gate_option: bool | None, stop: bool = False) -> None:
        self.environ = environ
        self.gate_option = gate_option
        self.stop = stop

    def guard(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """The target's configuration once every guard holds; ``None`` when no guest exists at the target."""
        if not read_gate(self.environ, LIFECYCLE_GATE, self.gate_option):
            raise StageError(code="lifecycle_disabled", details={"stage": ctx.kind})
        self.require_privileges(ctx)
        config = read_config_or_none(ctx)
        if config is None:
            return None
        if not is_ours(ctx, config):
            raise StageError(code="cleanup_binding_mismatch", details={"stage": ctx.kind, "vmid": ctx.vmid})
        if str(config.get("template", "0")) not in ("0", "False", "false"):
            raise StageError(code="cleanup_template", details={"stage": ctx.kind, "vmid": ctx.vmid})
        if str(config.get("protection", "0")) not in ("0", "False", "false"):
            raise StageError(code="cleanup_protected", details={"stage": ctx.kind, "vmid": ctx.vmid})
        if config.get("lock"):
            raise StageError("The %s is locked." % self.noun, code="locked", details={"stage": ctx.kind, "vmid": ctx.vmid, "lock": str(config["lock"])})
        ctx.facts["config"] = config
        return config

    def require_privileges(self, ctx: StageContext) -> None:
        path = "/vms/%d" % ctx.vmid
        needed = self.privileges + (("VM.PowerMgmt",) if self.stop else ())
        data = ctx.client.get("/access/permissions", path=path)
        held = effective_privileges(data, path) if isinstance(data, dict) else set()
        missing = [name for name in needed if name not in held]
        if missing:
            raise StageError("The token lacks privileges the cleanup needs; nothing was sent.", code="permission_denied",
                             details={"stage": ctx.kind, "path": path, "missing": missing})

    def power(self, ctx: StageContext) -> str:
        try:
            return str(read_status(ctx.client, ctx.vm_path).get("status"))
        except ProviderError as err:
            if err.code == "not_found":
                return "absent"
            raise


class StopStep(_Guarded):
    """``stop``: power off a running guest, only when the operator asked (``stop: true``)."""

    kind = "stop"
    task_type = "qmstop"
    default_timeout = 120.0

    def preconditions(self, ctx: StageContext) -> None:
        config = self.guard(ctx)
        ctx.facts["power"] = "absent" if config is None else self.power(ctx)
        if ctx.facts["power"] not in ("stopped", "absent") and not self.stop:
            raise StageError(code="cleanup_running", details={"stage": ctx.kind, "vmid": ctx.vmid, "powerState": ctx.facts["power"]})

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("power") in ("stopped", "absent"):
            return None
        return Request("POST", ctx.vm_path + "/status/stop", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        state = self.power(ctx)
        if state not in ("stopped", "absent"):
            raise StageError("The stop task succeeded but the %s is not stopped." % self.noun, code="observation_mismatch",
                             details={"stage": ctx.kind, "powerState": state})
        return {"powerState": state}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = find_tasks(ctx, self.task_type, ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if self.power(ctx) in ("stopped", "absent"):
            return Resolution.applied(stopResolvedBy="power_state")
        return Resolution.undecidable("No %s task for the %s is visible and it still runs: the stop may not have reached Proxmox. "
                                      "Check the node's task list; the stop is never sent again automatically." % (self.task_type, self.noun))


class DestroyStep(_Guarded):
    """``destroy``: ``DELETE {guest}`` (purge, destroy unreferenced disks) once the guest is stopped."""

    kind = "destroy"
    task_type = "qmdestroy"
    default_timeout = 600.0

    def preconditions(self, ctx: StageContext) -> None:
        config = self.guard(ctx)
        if config is None:
            ctx.facts["absent"] = True
            return
        state = self.power(ctx)
        if state != "stopped":
            raise StageError(code="cleanup_running", details={"stage": ctx.kind, "vmid": ctx.vmid, "powerState": state})
        inventory = {"vmid": ctx.vmid, "volumes": owned_volumes(config, ctx.vmid), "snapshots": snapshot_names(ctx)}
        ctx.facts["inventory"] = inventory

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        # Recorded before the DELETE is dispatched: once the guest is gone, nothing can be read back.
        inventory = ctx.facts.get("inventory")
        return None if inventory is None else {"inventory": inventory}

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("absent"):
            return None
        return Request("DELETE", ctx.vm_path, dict(DESTROY_PARAMS))

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if read_config_or_none(ctx) is not None:
            raise StageError("The destroy task succeeded but the %s still exists." % self.noun, code="observation_mismatch",
                             details={"stage": ctx.kind, "vmid": ctx.vmid})
        inventory = ctx.evidence().get("inventory") or ctx.facts.get("inventory")
        return {"removed": inventory or {"vmid": None, "volumes": [], "snapshots": []}}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = find_tasks(ctx, self.task_type, ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if read_config_or_none(ctx) is None:
            return Resolution.applied(destroyResolvedBy="vm_gone")
        return Resolution.undecidable("The %s still exists and no %s task for it is visible: the DELETE may not have reached Proxmox. "
                                      "Check the node's task list; the DELETE is never sent again automatically." % (self.noun, self.task_type))


class ContainerStopStep(StopStep):
    """``stop`` of a container operation's guest: ``POST /nodes/{node}/lxc/{vmid}/status/stop`` (path from ``ctx.vm_path``)."""

    task_type = "vzstop"
    noun = "container"


class ContainerDestroyStep(DestroyStep):
    """``destroy`` of a container operation's guest: ``DELETE /nodes/{node}/lxc/{vmid}``, the same parameters."""

    task_type = "vzdestroy"
    noun = "container"


# The two steps per guest API kind (``_stage.guest_api_kind``: the operation's guest type).
STEPS: dict[str, tuple[type[StopStep], type[DestroyStep]]] = {"qemu": (StopStep, DestroyStep), "lxc": (ContainerStopStep, ContainerDestroyStep)}


def _steps(params: t.Mapping[str, t.Any], environ: t.Mapping[str, str], document: t.Mapping[str, t.Any]) -> tuple[StopStep, DestroyStep]:
    stop, destroy = STEPS[guest_api_kind(document)]
    return (stop(environ, params.get("lifecycle_enabled"), bool(params.get("stop"))),
            destroy(environ, params.get("lifecycle_enabled"), bool(params.get("stop"))))


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


def run_cleanup(params: t.Mapping[str, t.Any], *, check_mode: bool, environ: t.Mapping[str, str] | None = None,
                client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient) -> dict[str, t.Any]:
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
        raise StageError("The cleanup failed earlier; the guest was kept. Inspect it in Proxmox.", code="stage_failed",
                         details={"stage": failure.get("stage"), "cause": failure.get("code")})
    if not read_gate(environ, LIFECYCLE_GATE, params.get("lifecycle_enabled")):
        raise VmanywareError(code="lifecycle_disabled")
    connection = connection_settings(params)
    require_verified_tls(connection)  # as every stage: no credential over unverified TLS, before the scope handshake
    connection = bind_scope(connection, document)  # every connection of the client: the certificate the scope was computed from
    steps = _steps(params, environ, document)
    client = client_factory(connection)
    try:
        if check_mode:
            if cleanup is not None:
                return _result(document, changed=True, requests=[], done=False,
                               preview="a cleanup is in progress; run without check mode to continue it")
            preview = _preview(document, client, steps[0])
            return _result(document, changed=True, requests=preview["requests"], done=False, removed=preview["removed"])
        if cleanup is None:
            _preview(document, client, steps[0])  # every guard holds before the journal records a cleanup
            store.begin_cleanup(operation_id, allow_completed=bool(params.get("allow_completed")))
        # The cancel check of the stages (_cancel): a cleanup whose controller is gone, or that got SIGTERM/SIGINT, stops
        # at the next safe point (never between its DELETE's dispatch record and the send), as provisioning does.
        settings = StageSettings(wait_budget=params.get("wait_budget"), timeout=params.get("timeout"),
                                 lock_wait=params.get("lock_wait") or 0.0, environ=environ,
                                 gate_options={LIFECYCLE_GATE: params.get("lifecycle_enabled")},
                                 cancel_check=Cancellation.from_environment())
        track = store.cleanup_track()
        requests: list[dict[str, t.Any]] = []
        with cancel_scope(settings):
            for logic in steps:
                outcome = StageRunner(track, client, logic, settings).run(operation_id)
                requests.extend(outcome["requests"])
                if not outcome["done"]:
                    return _result(store.load(operation_id), changed=True, requests=requests, done=False,
                                   progress=dict(outcome.get("progress") or {}, step=logic.kind))
    finally:
        client.close()
    return _result(store.finish_cleanup(operation_id), changed=True, requests=requests)


def _result(document: dict[str, t.Any], *, changed: bool, requests: list[dict[str, t.Any]], done: bool = True,
            removed: dict[str, t.Any] | None = None, **extra: t.Any) -> dict[str, t.Any]:
    view = public_view(document)
    if removed is None:
        removed = (view["cleanup"] or {}).get("removed") or {"vmid": None, "volumes": [], "snapshots": []}
    result = {"changed": changed, "done": done, "operation_id": document["operationId"], "requests": requests, "removed": removed,
              "operation": view, "ansible_facts": {"vmanyware_operation": view}}
    result.update(extra)
    return result
