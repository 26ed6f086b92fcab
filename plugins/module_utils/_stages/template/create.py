# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``create``: the build VM, its disk imported from the downloaded image.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.pveconfig import disk_volume
from ..._api.tasks import parse_upid
from ..._core.errors import ProviderError
from ..._operation.create import instance_tag
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import common
from .common import observation_mismatch, undecidable_task


# -- create -----------------------------------------------------------------------------------------
class CreateStage(StageLogic):
    """``POST /nodes/{node}/qemu``: q35, OVMF with efidisk0, virtio-scsi-single, the disk imported with ``import-from``,
    a Cloud-Init drive, serial0, the guest agent enabled; bound to the operation by description and instance tag."""

    kind = "create"
    task_type = "qmcreate"

    def preconditions(self, ctx: StageContext) -> None:
        try:
            ctx.client.get("/cluster/nextid", vmid=ctx.vmid)
        except ProviderError as err:
            if err.code != "conflict":
                raise
            raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid}) from None

    def request(self, ctx: StageContext) -> Request | None:
        plan, storage = ctx.plan, ctx.plan["storage"]
        machine = plan["machine"]
        params: dict[str, t.Any] = {
            "vmid": ctx.vmid,
            "name": plan["target"]["name"],
            "description": common.binding_description(ctx.operation),
            "tags": instance_tag(ctx.operation["operationId"]),
            "machine": machine["type"],
            "bios": machine["bios"],
            "efidisk0": "%s:1,efitype=4m,pre-enrolled-keys=0" % storage,
            "scsihw": machine["scsihw"],
            plan["diskDevice"]: "%s:0,import-from=%s,discard=on" % (storage, plan["source"]["importVolume"]),
            "ide2": "%s:cloudinit" % storage,
            "boot": "order=%s" % plan["diskDevice"],
            "agent": "enabled=1",
            "net0": "virtio,bridge=%s" % plan["bridge"],
            "cores": machine["cores"],
            "memory": machine["memoryMiB"],
            "ostype": "l26",
        }
        if machine["serialConsole"]:
            params.update({"serial0": "socket", "vga": "serial0"})
        return Request("POST", "/nodes/%s/qemu" % ctx.node, params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        upid = parse_upid(data)
        if upid.type != self.task_type or upid.node != ctx.node or upid.id != str(ctx.vmid):
            raise StageError(
                "Proxmox answered with a task of an unexpected type, node or id.", code="unexpected_response"
            )
        return upid.raw, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or not common.is_ours(ctx, config):
            raise observation_mismatch(ctx, "exists_and_bound")
        if config.get("lock"):
            raise observation_mismatch(ctx, "unlocked")
        disk = disk_volume(config, ctx.plan["diskDevice"])
        if disk is None or disk.is_cdrom or disk.storage != ctx.plan["storage"] or not disk.size_bytes:
            raise observation_mismatch(ctx, "imported_disk")
        if "efidisk0" not in config or (ctx.plan["machine"]["serialConsole"] and config.get("serial0") != "socket"):
            raise observation_mismatch(ctx, "machine")
        return {"volid": disk.volid, "diskSizeBytes": disk.size_bytes, "digest": config.get("digest")}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        tasks = common.find_tasks(ctx, "qmcreate", ctx.vmid)
        if len(tasks) == 1 and (config is None or common.is_ours(ctx, config) or config.get("lock") == "create"):
            return Resolution.applied(tasks[0]["upid"])
        if config is not None and common.is_ours(ctx, config) and not config.get("lock"):
            return Resolution.applied()
        return undecidable_task(ctx, "qmcreate")
