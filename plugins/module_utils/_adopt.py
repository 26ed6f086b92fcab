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

Stages complete in order (the journal's rule): after the first stage that is not completed, every
later stage is ``pending``. Readiness (and so packages and snapshot) is always ``pending``: its
probes need the guest agent's ``exec``, which adoption never uses; the stage re-runs them, and
packages and snapshot find what is already there and send nothing. The per-stage rules are in
docs/operations.md ("Recovering a lost journal").

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    JournalError,
    JournalStore,
    adopted_operation_document,
    hash_idempotency_key,
    new_operation_document,
    utc_now,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import default_idempotency_key, gate_and_confirm, public_view
from ansible_collections.vmanyware.proxmox.plugins.module_utils._plan import PlannedEnvironment
from ansible_collections.vmanyware.proxmox.plugins.module_utils._protocols import ApiClient, ClientIdentity
from ansible_collections.vmanyware.proxmox.plugins.module_utils._pveconfig import disk_volume, net_macaddr, pending_keys, read_pending, read_status
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import StageContext, StageError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage_module import require_scope
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import _guest
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.cloudinit import attested, mismatches
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import binding_description, find_tasks, read_config_or_none
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.disk import requested_bytes
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.resources import desired, matches
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.seed import dump_hashes, read_dumps, validate_meta, validate_network, validate_user_data
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.snapshot import list_snapshots, snapshot_name

_BINDING = re.compile(r"\Avmanyware operation (op-[a-z2-7]{26})\ndefinitionHash ([0-9a-f]{64})\nplanHash ([0-9a-f]{64})\Z")
UNCERTAIN_CODE = "outcome_uncertain"


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


@dataclasses.dataclass
class Decision:
    """What reads prove about one stage: ``completed`` (evidence, upid), ``pending`` or ``uncertain`` (message)."""

    status: str
    reason: str
    evidence: dict[str, t.Any] = dataclasses.field(default_factory=dict)
    upid: str | None = None

    def observed(self) -> dict[str, t.Any]:
        """The entry ``adopted_operation_document`` takes."""
        entry: dict[str, t.Any] = {"status": self.status, "evidence": dict(self.evidence, adopted=True) if self.status == "completed" else {},
                                   "upid": self.upid}
        if self.status == "uncertain":
            entry["failure"] = {"code": UNCERTAIN_CODE, "message": self.reason}
        return entry


class Observations:
    """The reads of one adoption (GET only, each made at most once)."""

    def __init__(self, document: dict[str, t.Any], client: ReadOnlyClient, config: dict[str, t.Any]) -> None:
        self.document = document
        self.client = client
        self.config = config
        self._cache: dict[t.Any, t.Any] = {}

    def context(self, kind: str) -> StageContext:
        """A context on the scratch document (no stage dispatched: task lookups are not bounded by a dispatch time)."""
        return StageContext(operation=self.document, client=self.client, kind=kind)

    def _once(self, key: t.Any, read: t.Callable[[], t.Any]) -> t.Any:
        if key not in self._cache:
            self._cache[key] = read()
        return self._cache[key]

    @property
    def power(self) -> str:
        ctx = self.context("start")
        return t.cast(str, self._once("status", lambda: str(read_status(ctx.client, ctx.vm_path).get("status"))))

    @property
    def pending_keys(self) -> list[str]:
        ctx = self.context("resources")
        return t.cast("list[str]", self._once("pending", lambda: pending_keys(read_pending(ctx.client, ctx.vm_path))))

    def tasks(self, kind: str, task_type: str, task_vmid: int) -> list[dict[str, t.Any]]:
        """Our tasks (exactly our token) of ``task_type`` on ``task_vmid``, newest first."""
        return t.cast("list[dict[str, t.Any]]", self._once(("tasks", task_type, task_vmid), lambda: find_tasks(self.context(kind), task_type, task_vmid)))

    def dumps(self) -> dict[str, str]:
        return t.cast("dict[str, str]", self._once("dumps", lambda: read_dumps(self.context("seed"))))

    def snapshots(self) -> dict[str, t.Any]:
        return t.cast("dict[str, t.Any]", self._once("snapshots", lambda: list_snapshots(self.context("snapshot"))))

    @property
    def start_evidenced(self) -> bool:
        """The VM runs, or a ``qmstart`` task of our token for it is listed."""
        return self.power == "running" or bool(self.tasks("start", "qmstart", self.context("start").vmid))


def _single_ok(tasks: list[dict[str, t.Any]]) -> str | None:
    """The UPID of the one listed task when exactly one exists and it succeeded (optional evidence)."""
    return t.cast(str, tasks[0]["upid"]) if len(tasks) == 1 and tasks[0]["ok"] is True else None


# -- one decision per stage kind ------------------------------------------------------------------------
def decide_clone(obs: Observations) -> Decision:
    ctx = obs.context("clone")
    config = obs.config
    disk = disk_volume(config, ctx.mapping["diskDevice"])
    if disk is None or disk.is_cdrom or disk.storage != ctx.plan["storage"]:
        return Decision("uncertain", "VM %d carries this operation's description but its %s is not a volume on storage %s; the clone "
                        "stage checks it again on its next run." % (ctx.vmid, ctx.mapping["diskDevice"], ctx.plan["storage"]))
    upid = _single_ok(obs.tasks("clone", "qmclone", int(ctx.mapping["templateVmid"])))
    evidence = {"volid": disk.volid, "digest": config.get("digest"), "macaddr": net_macaddr(config.get("net0")), "diskSizeBytes": disk.size_bytes}
    return Decision("completed", "The VM exists, carries this operation's description, is unlocked and its disk is on the planned storage.",
                    evidence, upid)


def decide_resources(obs: Observations) -> Decision:
    ctx = obs.context("resources")
    if not matches(ctx, obs.config):
        return Decision("pending", "Proxmox does not show the planned cores, memory and instance tag; the resources stage sets them "
                        "(bound to the configuration digest observed now).")
    want = desired(ctx)
    return Decision("completed", "The planned cores, memory and instance tag are shown.",
                    {"digest": obs.config.get("digest"), "cores": want["cores"], "memoryMiB": want["memory"], "tags": want["tags"]})


def decide_disk(obs: Observations) -> Decision:
    ctx = obs.context("disk")
    disk = disk_volume(obs.config, ctx.mapping["diskDevice"])
    size = disk.size_bytes if disk is not None else None
    if size == requested_bytes(ctx):
        upid = _single_ok(obs.tasks("disk", "resize", ctx.vmid))
        return Decision("completed", "The disk shows the planned size.",
                        {"digest": obs.config.get("digest"), "diskSizeBytes": size, "volid": disk.volid if disk else None}, upid)
    return Decision("pending", "The disk does not show the planned size; the disk stage re-checks it and resizes to the absolute size "
                    "(bound to the digest observed now), or refuses to shrink.")


def decide_cloudinit(obs: Observations) -> Decision:
    ctx = obs.context("cloudinit")
    config = obs.config
    mac = net_macaddr(config.get("net0"))
    if mac is None or _guest.cloudinit_drive(config, ctx.vmid) is None or mismatches(ctx, config, mac):
        return Decision("pending", "Proxmox does not show exactly the planned Cloud-Init settings; the cloudinit stage sets them "
                        "(bound to the digest observed now).")
    return Decision("completed", "Every planned Cloud-Init setting is shown exactly.",
                    {"digest": config["digest"], "net0Mac": mac, "bridge": ctx.plan["bridge"], "guestReady": False,
                     "attested": attested(ctx), "sshKeyCount": len(ctx.definition["access"]["sshPublicKeys"])})


def decide_seed(obs: Observations) -> Decision:
    ctx = obs.context("seed")
    if not obs.start_evidenced:
        return Decision("pending", "Regenerating the Cloud-Init drive leaves nothing a read can tell apart and is harmless to repeat; "
                        "the seed stage regenerates and validates it again.")
    mac = net_macaddr(obs.config.get("net0")) or ""
    dumps = obs.dumps()
    try:
        validate_user_data(dumps["user"], ctx.definition["access"]["sshPublicKeys"], attested=attested(ctx), guest_user=ctx.plan["guestUser"])
        validate_network(dumps["network"], mac)
        validate_meta(dumps["meta"])
    except StageError:
        return Decision("uncertain", "The VM was started but its Cloud-Init seed does not validate now; check the VM's Cloud-Init "
                        "settings in Proxmox before re-running the seed stage.")
    digest = obs.config["digest"]
    return Decision("completed", "The VM was started (the start stage runs only after the seed stage completed) and the seed validates.",
                    {"seedHashes": dump_hashes(dumps), "seedDigest": digest, "digest": digest, "seedVerdict": "valid"})


def decide_start(obs: Observations) -> Decision:
    ctx = obs.context("start")
    power = obs.power
    if power == "running":
        return Decision("completed", "The VM is running.", {"powerState": "running", "guestReady": False, "startResolvedBy": "power_state"},
                        _single_ok(obs.tasks("start", "qmstart", ctx.vmid)))
    if power == "stopped" and not obs.tasks("start", "qmstart", ctx.vmid):
        return Decision("pending", "The VM is stopped and no qmstart task of this token for it is listed: it was not started.")
    return Decision("uncertain", "VM %d is %s and a qmstart task of this token for it is listed (of this operation, or of an earlier VM "
                    "with this id); check the node's task list, then start the VM or abandon the operation." % (ctx.vmid, power))


def decide_readiness(obs: Observations) -> Decision:
    return Decision("pending", "Readiness probes run through the guest agent (exec), which adoption never uses; the readiness stage "
                    "re-runs its read-only probes.")


DECIDERS: dict[str, t.Callable[[Observations], Decision]] = {
    "clone": decide_clone,
    "resources": decide_resources,
    "disk": decide_disk,
    "cloudinit": decide_cloudinit,
    "seed": decide_seed,
    "start": decide_start,
    "readiness": decide_readiness,
}


def decide(obs: Observations, kinds: list[str]) -> list[tuple[str, Decision]]:
    """One decision per stage, in order; after the first stage that is not completed every later one is pending."""
    decisions: list[tuple[str, Decision]] = []
    blocked: str | None = None
    for kind in kinds:
        if blocked is not None:
            reason = "Stages complete in order: %s is not completed." % blocked
            if kind == "snapshot" and snapshot_name(obs.document["operationId"]) in obs.snapshots():
                reason += " The snapshot is listed: the snapshot stage will find it and send nothing."
            decisions.append((kind, Decision("pending", reason)))
            continue
        decider = DECIDERS.get(kind)
        decision = decider(obs) if decider is not None else Decision("pending", "Adoption does not judge this stage; it runs again.")
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
    kinds = [step["kind"] for step in plan["steps"]]
    target = {"scope": provider_scope_id, "node": plan["target"]["node"], "vmid": plan["target"]["vmid"]}
    snapshots = {"definition": dict(planned.definition), "mapping": dict(planned.mapping), "plan": dict(plan), "confirmation": confirmed}
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
        raise VmanywareError("No VM at the target carries an operation's binding description; there is nothing to adopt.", code="not_found",
                             details={"vmid": target["vmid"], "node": target["node"]})
    operation_id, definition_hash, plan_hash = binding
    fields = [name for name, seen in (("definitionHash", definition_hash), ("planHash", plan_hash)) if plan[name] != seen]
    if fields:
        raise VmanywareError(code="plan_changed", details={"fields": fields, "operationId": operation_id})
    scratch["operationId"] = operation_id
    if binding_description(scratch) != config.get("description"):  # pragma: no cover - the pattern is the description's format
        raise VmanywareError(code="not_found", details={"vmid": target["vmid"], "node": target["node"]})

    existing = _load_existing(store, operation_id)
    if existing is not None:
        if not check_mode:
            # Returned unchanged; under the journal lock a target claim cut short by a crash is completed (no stage is decided).
            existing, _adopted = store.adopt_operation(
                operation_id=operation_id, idempotency_key=key, provider_scope_id=provider_scope_id, definition=planned.definition,
                mapping=planned.mapping, plan=plan, confirmation=confirmed, target_node=target["node"], target_vmid=target["vmid"],
                stage_kinds=kinds, observed=[])
        return {"changed": False, "adopted": False, "created": False, "operation_id": operation_id, "operation": public_view(existing),
                "adoption": []}
    if config.get("lock"):
        raise VmanywareError("The VM bound to this operation is locked (a task is still running); re-run the adoption later.", code="locked",
                             details={"vmid": target["vmid"], "lock": str(config["lock"]), "operationId": operation_id})

    obs = Observations(scratch, reader, config)
    decisions = decide(obs, kinds)
    observed: list[t.Mapping[str, t.Any]] = [decision.observed() for _kind, decision in decisions]
    report = [{"kind": kind, "status": decision.status, "reason": decision.reason} for kind, decision in decisions]
    facts = {"powerState": obs.power, "pendingKeys": obs.pending_keys,
             "qmstartTasks": [item["upid"] for item in obs.tasks("start", "qmstart", target["vmid"])]}

    if check_mode:
        holder = store.target_holder(provider_scope_id, target["vmid"])
        if holder is not None and holder != operation_id:
            raise VmanywareError(code="conflicting_operation", details={"operationId": holder})
        key_holder = store.find_by_idempotency_key(key)
        if key_holder is not None and key_holder != operation_id:
            raise VmanywareError(code="idempotency_key_conflict", path="idempotency_key", details={"operationId": key_holder})
        preview = adopted_operation_document(operation_id, hash_idempotency_key(key), target, snapshots, kinds, observed, now)
        return {"changed": True, "adopted": True, "created": False, "operation_id": operation_id, "operation": public_view(preview),
                "preview_document": preview, "adoption": report, "observed": facts}

    document, adopted = store.adopt_operation(
        operation_id=operation_id, idempotency_key=key, provider_scope_id=provider_scope_id, definition=planned.definition,
        mapping=planned.mapping, plan=plan, confirmation=confirmed, target_node=target["node"], target_vmid=target["vmid"],
        stage_kinds=kinds, observed=observed)
    if not adopted:  # another run adopted it meanwhile: returned unchanged
        return {"changed": False, "adopted": False, "created": False, "operation_id": operation_id, "operation": public_view(document),
                "adoption": []}
    return {"changed": True, "adopted": True, "created": False, "operation_id": operation_id, "operation": public_view(document),
            "adoption": report, "observed": facts}
