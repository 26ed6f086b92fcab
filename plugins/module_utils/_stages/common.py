# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the stages of every family share (VM, container, template, cleanup): the description that binds a VM to its
operation, the identity check, and the read-only task lookup used to resolve a lost reply (docs/stages.md).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .._api.pveconfig import pending_keys, read_config, read_pending, read_status
from .._api.tasks import parse_upid
from .._core.errors import ProviderError, VmanywareError
from .._core.protocols import ApiClient
from .._journal import ADOPTED_REQUEST, epoch_seconds
from .protocol import StageContext
from .outcomes import StageError

# Tasks started up to this many seconds before the recorded dispatch still count (clock skew between
# the controller and the Proxmox node; the journal records controller time, tasks carry node time).
TASK_SINCE_SLACK = 300
TASK_LIST_LIMIT = 500


def binding_description(operation: t.Mapping[str, t.Any]) -> str:
    """The exact VM description that binds a VM to ``operation`` (the one place that builds it).

    It names the operation id (128 random bits), so no other operation can produce it; stages compare
    it exactly (PVE strips trailing whitespace from descriptions, so it has none).
    """
    plan = operation["plan"]
    return "vmanyware operation %s\ndefinitionHash %s\nplanHash %s" % (
        operation["operationId"],
        plan["definitionHash"],
        plan["planHash"],
    )


def adopted_operation(ctx: StageContext) -> bool:
    """The operation was made by ``vmanyware_adopt`` from an existing VM (its adopted stages carry ``ADOPTED_REQUEST``)."""
    return any(item.get("request") == ADOPTED_REQUEST for item in ctx.operation["stages"])


def read_config_or_none(ctx: StageContext) -> dict[str, t.Any] | None:
    """The target's configuration, or ``None`` when the VM does not exist."""
    try:
        return read_config(ctx.client, ctx.vm_path)
    except ProviderError as err:
        if err.code == "not_found":
            return None
        raise


def is_ours(ctx: StageContext, config: t.Mapping[str, t.Any] | None) -> bool:
    return config is not None and config.get("description") == binding_description(ctx.operation)


def nextid_refuses(ctx: StageContext) -> bool:
    """``GET /cluster/nextid?vmid=N`` reports N taken (it sees every guest, VMs and containers, even those the token cannot audit)."""
    try:
        ctx.client.get("/cluster/nextid", vmid=ctx.vmid)
    except ProviderError as err:
        if err.code == "conflict":
            return True
        raise
    return False


def refusal_for_taken_vmid(ctx: StageContext, err: ProviderError, rule: str) -> VmanywareError:
    """What a definite refusal of a request creating the guest means (clone, container create).

    Proxmox refuses with ``already exists`` (``conflict``) when another client took the VMID after the preconditions read it
    free: ``vmid_taken`` once a read shows a guest there that is not ours (a config of the operation's guest type without our
    description, or no such config while nextid refuses the VMID: a guest of the other type). Nothing was created.
    """
    if err.code != "conflict":
        return err
    try:
        existing = read_config_or_none(ctx)
        taken = (existing is not None and not is_ours(ctx, existing)) or (existing is None and nextid_refuses(ctx))
    except ProviderError:
        return err
    if taken:
        return StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": rule})
    return err


def precondition_power(ctx: StageContext) -> str:
    """The VM's power state for a precondition check: the one this process read moments ago when the stage trusts it
    (``_recent_reads``, rule 4), else ``GET {vm}/status/current``. Never for a read-back or a lost reply's resolution."""
    recent = ctx.recent_power.power(ctx.vm_path) if ctx.recent_power is not None else None
    return recent if recent is not None else str(read_status(ctx.client, ctx.vm_path).get("status"))


def require_clone_identity(ctx: StageContext, *, stopped: bool = True, no_pending: bool = True) -> dict[str, t.Any]:
    """Read the target and prove it is the VM this operation cloned: exists, description exactly ours,
    not locked; optionally stopped and without pending changes. Returns the configuration (with ``digest``).

    In a chained run (``_recent_reads``) a stage that trusts it takes the configuration the previous stage read back
    moments ago instead of reading it again. Only a stage whose write carries the digest trusts it (rule 3), and it then
    skips the pending read too: pending changes are in the configuration file, so any since that read change the digest
    and Proxmox refuses the write. The power state comes from ``precondition_power``.
    """
    recent = ctx.recent_reads.take(ctx.vm_path) if ctx.recent_reads is not None else None
    config = recent if recent is not None else read_config_or_none(ctx)
    if config is None:
        raise StageError(
            "The target VM does not exist.", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "exists"}
        )
    if not is_ours(ctx, config):
        raise StageError(
            "The target VM's description does not bind it to this operation.",
            details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "description"},
        )
    if config.get("lock"):
        raise StageError(
            "The target VM is locked.",
            code="locked",
            details={"stage": ctx.kind, "vmid": ctx.vmid, "lock": str(config["lock"])},
        )
    if stopped and precondition_power(ctx) != "stopped":
        raise StageError(
            "The target VM is not stopped.", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "stopped"}
        )
    if no_pending and recent is None:
        keys = pending_keys(read_pending(ctx.client, ctx.vm_path))
        if keys:
            raise StageError(
                "The target VM has pending configuration changes.",
                details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "no_pending", "keys": keys},
            )
    return config


def require_digest(ctx: StageContext, config: t.Mapping[str, t.Any]) -> str:
    """The digest the earlier stages recorded; ``conflict`` when the configuration changed since."""
    expected = ctx.earlier_evidence("digest")
    digest = config.get("digest")
    if not isinstance(expected, str) or digest != expected:
        raise StageError(
            "The VM configuration changed since the earlier stages observed it (digest differs); nothing was sent.",
            code="conflict",
            details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "digest_unchanged"},
        )
    return expected


def token_identity(client: ApiClient) -> str | None:
    """``user@realm!token`` (or ``user@realm`` for a ticket), as PVE writes it into the UPIDs of our tasks."""
    user = client.settings.user
    if not user:
        return None
    name = client.settings.token_name
    return "%s!%s" % (user, name) if name else user


def dispatched_epoch(ctx: StageContext) -> int | None:
    """The recorded dispatch time of this stage as epoch seconds."""
    value = ctx.record.get("dispatchedAt")
    if not value:
        return None
    return int(epoch_seconds(value))


def task_list_params(ctx: StageContext, task_type: str, task_vmid: int) -> dict[str, t.Any]:
    """The query of ``GET /nodes/{node}/tasks`` for our tasks of ``task_type`` on ``task_vmid`` since the dispatch."""
    params: dict[str, t.Any] = {
        "typefilter": task_type,
        "vmid": int(task_vmid),
        "source": "all",
        "limit": TASK_LIST_LIMIT,
    }
    since = dispatched_epoch(ctx)
    if since is not None:
        params["since"] = max(0, since - TASK_SINCE_SLACK)
    user = token_identity(ctx.client)
    if user:
        params["userfilter"] = user.split("!", 1)[0]
    return params


def find_tasks(ctx: StageContext, task_type: str, task_vmid: int, node: str | None = None) -> list[dict[str, t.Any]]:
    """Tasks of ``task_type`` with id ``task_vmid`` started by exactly our token since the dispatch (newest first), on
    ``node`` (default: the guest's; a clone to another node runs its task on the template's node).

    Each item: ``upid``, ``running`` (bool), ``ok`` (None while running, else whether it succeeded).
    """
    node = ctx.node if node is None else node
    data = ctx.client.get("/nodes/%s/tasks" % node, **task_list_params(ctx, task_type, task_vmid))
    user = token_identity(ctx.client)
    found: list[dict[str, t.Any]] = []
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, dict):
            continue
        try:
            upid = parse_upid(entry.get("upid"))
        except ProviderError:
            continue
        if upid.type != task_type or upid.id != str(task_vmid) or upid.node != node:
            continue
        if user is not None and upid.user != user:
            continue
        status = entry.get("status")
        running = entry.get("endtime") is None or status in (None, "RUNNING", "running")
        ok = None if running else (status == "OK" or str(status).startswith("WARNINGS"))
        found.append({"upid": upid.raw, "running": running, "ok": ok, "starttime": upid.starttime})
    found.sort(key=lambda item: item["starttime"], reverse=True)
    return found
