# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``disk`` stage: grow the cloned VM's disk to the definition's size (docs/stages.md).

Present only when the plan expands the disk (``diskGiB`` > the catalog's ``sourceDiskGiB``).
This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.pveconfig import GIB, disk_volume, gib_size_string, read_config
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from ..adoption import AdoptionHook, Decision, Observations, single_ok
from ..common import find_tasks, is_ours, read_config_or_none, require_clone_identity, require_digest


def requested_bytes(ctx: StageContext) -> int:
    return int(ctx.plan["resources"]["diskGiB"]) * GIB


class DiskStage(StageLogic, AdoptionHook):
    """``PUT {vm}/resize`` with ``disk`` (the mapping's ``diskDevice``), an absolute ``size`` (``"20G"``) and ``digest``.

    PVE 8 and 9 run the resize as a ``resize`` task (UPID id = the VM). The size is absolute, never
    relative (``+N``), and a disk larger than requested is refused (never shrunk). The digest binds the
    request to the configuration the earlier stages observed. A lost reply is resolved by reads only
    (never re-sent): the requested size or our resize task -> applied; otherwise ``uncertain``.
    """

    kind = "disk"
    task_type = "resize"
    default_timeout = 600.0
    trusts_recent_config = True  # its write carries the digest
    # The power state is read here (docs/stages.md "Reads reused"): Proxmox does not refuse the write on a VM another
    # client started since, as it refuses it on a changed configuration (the digest).

    def preconditions(self, ctx: StageContext) -> None:
        config = require_clone_identity(ctx)
        disk = disk_volume(config, ctx.mapping["diskDevice"])
        if disk is None or disk.is_cdrom or disk.is_cloudinit:
            raise StageError(
                "The VM has no disk on the mapping's device.", details={"stage": ctx.kind, "rule": "disk_exists"}
            )
        if disk.size_bytes is None:
            raise StageError(
                "The VM's disk does not record a size the collection understands.",
                details={"stage": ctx.kind, "rule": "size_known"},
            )
        if disk.size_bytes > requested_bytes(ctx):
            raise StageError(code="disk_shrink_unsupported", details={"stage": ctx.kind, "rule": "never_shrink"})
        ctx.facts["sizeBytes"] = disk.size_bytes
        ctx.facts["satisfied"] = disk.size_bytes == requested_bytes(ctx)
        if not ctx.facts["satisfied"]:
            ctx.facts["digest"] = require_digest(ctx, config)

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("satisfied"):
            return None
        params: dict[str, t.Any] = {
            "disk": ctx.mapping["diskDevice"],
            "size": gib_size_string(ctx.plan["resources"]["diskGiB"]),
        }
        digest = ctx.facts.get("digest") or ctx.earlier_evidence("digest")
        if digest:
            params["digest"] = digest
        return Request("PUT", ctx.vm_path + "/resize", params)

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = read_config(ctx.client, ctx.vm_path)
        disk = disk_volume(config, ctx.mapping["diskDevice"])
        if not is_ours(ctx, config) or disk is None or disk.size_bytes != requested_bytes(ctx):
            raise StageError(
                "After the resize, Proxmox does not show the requested disk size.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "vmid": ctx.vmid},
            )
        return {"digest": config.get("digest"), "diskSizeBytes": disk.size_bytes, "volid": disk.volid}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Requested size shown -> applied; a resize task of ours since the dispatch -> applied (followed);
        size and digest unchanged and no task -> not applied; otherwise undecidable."""
        config = read_config_or_none(ctx)
        if config is None or not is_ours(ctx, config):
            return Resolution.undecidable(
                "VM %d is missing or no longer bound to this operation; check it before re-running." % ctx.vmid
            )
        disk = disk_volume(config, ctx.mapping["diskDevice"])
        tasks = find_tasks(ctx, "resize", ctx.vmid)
        if disk is not None and disk.size_bytes == requested_bytes(ctx):
            return Resolution.applied(tasks[0]["upid"] if len(tasks) == 1 else None)
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        if not tasks and config.get("digest") == ctx.earlier_evidence("digest"):
            return Resolution.not_applied()
        return Resolution.undecidable(
            "The disk of VM %d does not show the requested size and the resize cannot be proven not to have "
            "run; check the node's resize tasks for VM %d before re-running." % (ctx.vmid, ctx.vmid)
        )

    def allocates_on(self, ctx: StageContext) -> str | None:
        # lvextend runs under the storage lock on LVM and LVM-thin (LVMPlugin::volume_resize); the slot is kept until the task ends
        return t.cast(str, ctx.plan["storage"])

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        device = ctx.mapping["diskDevice"]
        return {
            "before": {device: {"sizeBytes": ctx.facts.get("sizeBytes")}},
            "after": {device: {"sizeBytes": requested_bytes(ctx)}},
        }

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        ctx = obs.context(self.kind)
        disk = disk_volume(obs.config, ctx.mapping["diskDevice"])
        size = disk.size_bytes if disk is not None else None
        if size == requested_bytes(ctx):
            upid = single_ok(obs.tasks(self.kind, "resize", ctx.vmid))
            return Decision(
                "completed",
                "The disk shows the planned size.",
                {"digest": obs.config.get("digest"), "diskSizeBytes": size, "volid": disk.volid if disk else None},
                upid,
            )
        return Decision(
            "pending",
            "The disk does not show the planned size; the disk stage re-checks it and resizes to the absolute size "
            "(bound to the digest observed now), or refuses to shrink.",
        )
