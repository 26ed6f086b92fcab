# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The ``clone`` stage: a full clone of the catalog template to the operation's VMID (docs/stages.md).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import typing as t

from ..._core.errors import ProviderError, VmanywareError
from ..._api.pveconfig import disk_volume, int_value, net_macaddr, read_config, read_status, vm_path
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError, accept_task
from ..adoption import AdoptionHook, Decision, Observations, single_ok
from ..common import binding_description, find_tasks, is_ours, read_config_or_none, refusal_for_taken_vmid
from ..._api.tasks import parse_upid, read_log_tail
from ..._checks.clone_source import shared_flags, source_shared, target_storage_shared

_TRANSFERRED = re.compile(r"transferred .* \((\d+(?:\.\d+)?)%\)")
_DRIVE = re.compile(r"(ide|sata|scsi|virtio)\d+|efidisk0|tpmstate0")


def cloned_volumes(template: t.Mapping[str, t.Any]) -> int:
    """How many volumes a full clone of ``template`` allocates: every drive but CD-ROMs, plus Cloud-Init drives (clone_disk)."""
    count = 0
    for key in template:
        disk = disk_volume(template, key) if _DRIVE.fullmatch(key) else None
        if disk is not None and ":" in disk.volid and (disk.is_cloudinit or not disk.is_cdrom):
            count += 1
    return count


def _mismatch(ctx: StageContext, rule: str) -> StageError:
    return StageError(
        "After the clone, Proxmox does not show the VM the stage requested.",
        code="observation_mismatch",
        details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": rule},
    )


class CloneStage(StageLogic, AdoptionHook):
    """``POST /nodes/{node}/qemu/{template}/clone`` with ``newid``, ``name``, ``full=1``, ``storage``, ``description``
    (and ``pool`` when the catalog mapping names one).

    A lost reply is resolved by reads only, never by a second POST: the target's configuration and our
    ``qmclone`` tasks decide; while they show nothing the run reads again within its wait budget, then the
    stage is ``uncertain`` (a later run reads again and continues once the clone appears).

    The VM's ``description`` binds it to the operation (operation id, definitionHash, planHash) and is
    compared exactly by every later read. When ``cluster/nextid`` reports the VMID taken, the existing
    VM is adopted only if it carries exactly that description (only this operation can have created
    it, for example from a journal restored from a backup); the stage then completes without a
    request (``changed: false``, evidence ``adopted: true``). Any other VM there is ``vmid_taken``.
    """

    kind = "clone"
    task_type = "qmclone"
    # The preflight's reads of the template and of the VMID moments ago in the same process (``_recent_reads`` rules 7, 8):
    # Proxmox decides both again when it clones (no digest; "config file already exists" refused under the VMID's lock).
    trusts_recent_template = True
    trusts_recent_vmid_free = True

    # -- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def template_vmid(ctx: StageContext) -> int:
        return int(ctx.mapping["templateVmid"])

    def template_path(self, ctx: StageContext) -> str:
        return vm_path(ctx.mapping["node"], self.template_vmid(ctx))

    # -- hooks ---------------------------------------------------------------------------------------
    def preconditions(self, ctx: StageContext) -> None:
        ctx.facts["adopt"] = False
        recent = (
            ctx.recent_template.take(self.template_path(ctx), "template") if ctx.recent_template is not None else None
        )
        try:
            template = recent if recent is not None else read_config(ctx.client, self.template_path(ctx))
        except ProviderError as err:
            if err.code != "not_found":
                raise
            raise StageError(
                "The template does not exist on the mapped node.",
                details={"stage": ctx.kind, "templateVmid": self.template_vmid(ctx), "rule": "template_exists"},
            ) from None
        if int_value(template.get("template")) != 1:
            raise StageError(
                "The source VM is not a template.",
                details={"stage": ctx.kind, "templateVmid": self.template_vmid(ctx), "rule": "is_template"},
            )
        ctx.facts["allocations"] = cloned_volumes(template)
        if ctx.node != ctx.mapping["node"]:
            self.require_shared_source(ctx, template)
        if ctx.recent_vmid is not None and ctx.recent_vmid.vmid_free(ctx.vmid):
            return  # "free" read moments ago (rule 8); a "taken" answer is never recorded, so adoption always reads
        try:
            ctx.client.get("/cluster/nextid", vmid=ctx.vmid)
        except ProviderError as err:
            if err.code != "conflict":
                raise
            existing = read_config_or_none(ctx)
            if not is_ours(ctx, existing):
                raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid}) from None
            if existing is not None and existing.get("lock"):
                raise StageError(
                    "The VM bound to this operation is locked (a clone is still running); re-run later.",
                    code="locked",
                    details={"stage": ctx.kind, "vmid": ctx.vmid, "lock": str(existing["lock"])},
                ) from None
            ctx.facts["adopt"] = True

    def require_shared_source(self, ctx: StageContext, template: t.Mapping[str, t.Any]) -> None:
        """A clone to another node (Proxmox's ``target``) needs every template volume on shared storage: read again right
        before the write (the preflight's ``clone_source_shared``), so a refusal Proxmox would give is ours, nothing sent."""
        status, _message = source_shared(template, shared_flags(ctx.client, ctx.mapping["node"]))
        if status == "passed":
            status, _message = target_storage_shared(ctx.plan["storage"], shared_flags(ctx.client, ctx.node))
        if status != "passed":
            raise StageError(
                "The template cannot be cloned to the target node: its volumes, or the plan's storage, are not all on "
                "shared storage, or the storages could not be read; nothing was sent.",
                details={"stage": ctx.kind, "templateVmid": self.template_vmid(ctx), "rule": "clone_source_shared"},
            )

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("adopt"):
            return None
        params: dict[str, t.Any] = {
            "newid": ctx.vmid,
            "name": ctx.plan["target"]["name"],
            "full": 1,
            "storage": ctx.plan["storage"],
            "description": binding_description(ctx.operation),
        }
        if ctx.node != ctx.mapping["node"]:
            params["target"] = ctx.node
        if ctx.mapping.get("pool"):
            # The VM is a pool member from its creation: the pool's ACL (/pool/<pool>) then covers every later stage.
            params["pool"] = ctx.mapping["pool"]
        return Request("POST", self.template_path(ctx) + "/clone", params)

    def refused(self, ctx: StageContext, err: ProviderError) -> VmanywareError:
        """Proxmox refused the clone because the VMID exists (another client took it after the preconditions read it free):
        ``vmid_taken`` once a read shows a guest there that is not ours. Nothing was created; the stage is pending again."""
        return refusal_for_taken_vmid(ctx, err, "taken_before_clone")

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        # The id field of a qmclone UPID is the SOURCE VMID (fork_worker('qmclone', $vmid, ...)).
        return accept_task(
            data, task_type="qmclone", node=ctx.mapping["node"], task_id=str(self.template_vmid(ctx))
        ), {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = read_config_or_none(ctx)
        if config is None:
            raise _mismatch(ctx, "exists")
        if not is_ours(ctx, config):
            raise _mismatch(ctx, "description")
        if config.get("lock"):
            raise _mismatch(ctx, "unlocked")
        if read_status(ctx.client, ctx.vm_path).get("status") != "stopped":
            raise _mismatch(ctx, "stopped")
        disk = disk_volume(config, ctx.mapping["diskDevice"])
        if disk is None or disk.is_cdrom or disk.storage != ctx.plan["storage"]:
            raise _mismatch(ctx, "disk_on_storage")
        evidence: dict[str, t.Any] = {
            "volid": disk.volid,
            "digest": config.get("digest"),
            "macaddr": net_macaddr(config.get("net0")),
            "diskSizeBytes": disk.size_bytes,
        }
        if ctx.facts.get("adopt"):
            evidence["adopted"] = True
        return evidence

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Reads only: the target's configuration and the node's qmclone tasks of the template by our token.

        - VM with our description: applied (following its task when exactly one candidate task exists;
          without a task only once the clone lock is gone);
        - VM in its first moments (only ``lock: clone``) with exactly one running candidate: applied;
        - no VM and no task: not applied (yet): the runner reads again, then leaves the stage uncertain;
        - no VM and exactly one failed task: applied (followed, so the stage reports ``task_failed``);
        - anything else (a VM with another description, tasks that cannot be singled out): undecidable.
        """
        config = read_config_or_none(ctx)
        tasks = find_tasks(ctx, "qmclone", self.template_vmid(ctx), ctx.mapping["node"])
        template = self.template_vmid(ctx)
        if config is not None:
            if is_ours(ctx, config):
                if len(tasks) == 1:
                    return Resolution.applied(tasks[0]["upid"])
                if not config.get("lock"):
                    return Resolution.applied()
                return Resolution.undecidable(
                    "VM %d carries this operation's description but its clone is still running; re-run when "
                    "the qmclone task of template %d has finished." % (ctx.vmid, template)
                )
            if (
                config.get("lock") == "clone"
                and not config.get("description")
                and len(tasks) == 1
                and tasks[0]["running"]
            ):
                return Resolution.applied(tasks[0]["upid"])
            return Resolution.undecidable(
                "VM %d exists but its description does not bind it to this operation; check VM %d and the "
                "qmclone tasks of template %d on node %s before re-running." % (ctx.vmid, ctx.vmid, template, ctx.node)
            )
        if not tasks:
            return Resolution.not_applied()
        if len(tasks) == 1 and tasks[0]["ok"] is False:
            return Resolution.applied(tasks[0]["upid"])
        return Resolution.undecidable(
            "A qmclone task of template %d by this token exists since the dispatch but VM %d does not; check "
            "the task log on node %s before re-running." % (template, ctx.vmid, ctx.node)
        )

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        before: dict[str, t.Any] = {"vmid": ctx.vmid, "exists": bool(ctx.facts.get("adopt"))}
        after = {
            "vmid": ctx.vmid,
            "exists": True,
            "name": ctx.plan["target"]["name"],
            "storage": ctx.plan["storage"],
            "description": binding_description(ctx.operation),
            "source": {"node": ctx.mapping["node"], "templateVmid": self.template_vmid(ctx)},
        }
        if ctx.facts.get("adopt"):
            before = dict(after)
        return {"before": before, "after": after}

    def allocates_on(self, ctx: StageContext) -> str | None:
        return t.cast(str, ctx.plan["storage"])

    def allocations(self, ctx: StageContext) -> int | None:
        return t.cast("int | None", ctx.facts.get("allocations"))

    def progress(self, ctx: StageContext, upid: str) -> dict[str, t.Any]:
        for line in reversed(read_log_tail(ctx.client, parse_upid(upid), lines=5)):
            match = _TRANSFERRED.search(line)
            if match:
                return {"percent": float(match.group(1)), "line": line}
        return {}

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        ctx = obs.context(self.kind)
        config = obs.config
        disk = disk_volume(config, ctx.mapping["diskDevice"])
        if disk is None or disk.is_cdrom or disk.storage != ctx.plan["storage"]:
            return Decision(
                "uncertain",
                "VM %d carries this operation's description but its %s is not a volume on storage %s; the clone "
                "stage checks it again on its next run." % (ctx.vmid, ctx.mapping["diskDevice"], ctx.plan["storage"]),
            )
        upid = single_ok(obs.tasks(self.kind, "qmclone", int(ctx.mapping["templateVmid"])))
        evidence = {
            "volid": disk.volid,
            "digest": config.get("digest"),
            "macaddr": net_macaddr(config.get("net0")),
            "diskSizeBytes": disk.size_bytes,
        }
        return Decision(
            "completed",
            "The VM exists, carries this operation's description, is unlocked and its disk is on the planned storage.",
            evidence,
            upid,
        )
