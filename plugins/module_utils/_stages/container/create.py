# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container stage ``create``: ``POST /nodes/{node}/lxc`` from the plan's template, resources, network and keys.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.pveconfig import parse_property_string
from ..._core.errors import ProviderError, VmanywareError
from ..common import binding_description, find_tasks, is_ours, read_config_or_none, refusal_for_taken_vmid
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import nic as _nic
from .common import container_mac, require_container_plan, require_ours, template_volume

TAG = "vmanyware"


SWAP_MIB = 512  # PVE's default; the definition has no swap field


class ContainerCreateStage(StageLogic):
    kind = "create"
    task_type = "vzcreate"
    default_timeout = 1800.0
    final_codes = frozenset({"vmid_taken"})

    def preconditions(self, ctx: StageContext) -> None:
        require_container_plan(ctx)
        config = read_config_or_none(ctx)
        if config is not None:
            if not is_ours(ctx, config):
                raise StageError(
                    code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "container_exists"}
                )
            if config.get("lock"):
                raise StageError(
                    "The container bound to this operation is locked (its creation is still running); re-run later.",
                    code="locked",
                    details={"stage": ctx.kind, "vmid": ctx.vmid},
                )
            ctx.facts["adopt"] = True
            return
        try:
            free = ctx.client.get("/cluster/nextid", vmid=ctx.vmid)
        except ProviderError as err:
            if err.code in ("conflict", "parameter_invalid"):
                raise StageError(
                    code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "nextid"}
                ) from None
            raise
        if str(free) != str(ctx.vmid):
            raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "nextid"})

    def params(self, ctx: StageContext) -> dict[str, t.Any]:
        resources = ctx.plan["resources"]
        keys = "\n".join(ctx.definition["access"]["sshPublicKeys"])
        if ctx.check_mode and "appliance" in ctx.mapping and not isinstance(ctx.earlier_evidence("ostemplate"), str):
            # a preview before the template stage ran: name what it will resolve, not a volume that may not exist
            appliance = ctx.mapping["appliance"]
            ostemplate = "%s:vztmpl/<newest %s %s>" % (appliance["storage"], appliance["package"], appliance["version"])
        else:
            ostemplate = template_volume(ctx)
        params: dict[str, t.Any] = {
            "vmid": ctx.vmid,
            "ostemplate": ostemplate,
            "hostname": ctx.plan["target"]["name"],
            "unprivileged": 1 if ctx.mapping.get("unprivileged", True) else 0,
            "rootfs": "%s:%d" % (ctx.plan["storage"], int(resources["diskGiB"])),
            "cores": int(resources["cores"]),
            "memory": int(resources["memoryMiB"]),
            "swap": SWAP_MIB,
            "net0": _nic.container_net0_value(_nic.planned(ctx), container_mac(ctx.operation)),
            "ssh-public-keys": keys,
            "description": binding_description(ctx.operation),
            "tags": TAG,
        }
        if (ctx.mapping.get("features") or {}).get("nesting"):
            params["features"] = "nesting=1"
        if _nic.named(ctx):  # a named network's DNS settings; without them the container gets the host's
            dns = _nic.dns_settings(_nic.planned(ctx))
            params.update({key: value for key, value in dns.items() if value is not None})
        return params

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("adopt"):
            return None
        return Request("POST", "/nodes/%s/lxc" % ctx.node, self.params(ctx))

    def refused(self, ctx: StageContext, err: ProviderError) -> VmanywareError:
        """``CT N already exists`` / ``VM N already exists``: another client took the VMID after the preconditions read it free."""
        return refusal_for_taken_vmid(ctx, err, "taken_before_create")

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        try:
            config = require_ours(ctx)
        except StageError as err:
            raise StageError(err.message, code="observation_mismatch", details=err.details) from None
        rootfs = (
            parse_property_string(config.get("rootfs", ""), "volume") if isinstance(config.get("rootfs"), str) else {}
        )
        if not str(rootfs.get("volume", "")).startswith(ctx.plan["storage"] + ":"):
            raise StageError(
                "The container's root disk is not on the planned storage.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "rule": "rootfs_storage"},
            )
        if _nic.named(ctx):
            wrong = _nic.container_net0_mismatch(config.get("net0"), _nic.planned(ctx))
            if wrong is not None:
                raise StageError(
                    "The container's net0 is not the planned network's (%s)." % wrong,
                    code="observation_mismatch",
                    details={"stage": ctx.kind, "rule": "net0_" + wrong},
                )
        unprivileged = str(config.get("unprivileged", "0")) in ("1", "True", "true")
        if unprivileged != bool(ctx.mapping.get("unprivileged", True)):
            raise StageError(
                "The container's privilege mode is not the planned one.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "rule": "unprivileged"},
            )
        evidence = {
            "macaddr": container_mac(ctx.operation),
            "rootfs": rootfs.get("volume"),
            "digest": config.get("digest"),
            "ostemplate": template_volume(ctx),
            "unprivileged": unprivileged,
        }
        if ctx.facts.get("adopt"):
            evidence["adopted"] = True
        return evidence

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Reads only: the container's config (the description binds it) and our ``vzcreate`` tasks for the VMID."""
        config = read_config_or_none(ctx)
        tasks = find_tasks(ctx, "vzcreate", ctx.vmid)
        if config is not None:
            if is_ours(ctx, config):
                if len(tasks) == 1:
                    return Resolution.applied(tasks[0]["upid"])
                if not config.get("lock"):
                    return Resolution.applied()
            elif (
                config.get("lock") == "create"
                and not config.get("description")
                and len(tasks) == 1
                and tasks[0]["running"]
            ):
                # PVE reserves the ID with an empty config under lock "create" while the task extracts the template
                return Resolution.applied(tasks[0]["upid"])
            return Resolution.undecidable(
                "CT %d exists but cannot be tied to this operation's create request yet; check CT %d and the "
                "vzcreate tasks on node %s before re-running." % (ctx.vmid, ctx.vmid, ctx.node)
            )
        if len(tasks) == 1 and tasks[0]["ok"] is False:
            return Resolution.applied(tasks[0]["upid"])  # followed, so the stage reports task_failed
        return Resolution(
            "not_applied",
            message="No container %d and no vzcreate task of this token since the dispatch are visible: the "
            "create request may not have reached Proxmox, or may still be queued. It is never sent "
            "again automatically; check the node's tasks, then re-run to read again or abandon the "
            "operation." % ctx.vmid,
        )

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        after = {
            "vmid": ctx.vmid,
            "exists": True,
            "type": "lxc",
            "hostname": ctx.plan["target"]["name"],
            "ostemplate": _safe_template(ctx),
            "rootfs": "%s:%d" % (ctx.plan["storage"], ctx.plan["resources"]["diskGiB"]),
            "net0Mac": container_mac(ctx.operation),
            **(
                {"net0": _nic.container_net0_value(_nic.planned(ctx), container_mac(ctx.operation))}
                if _nic.named(ctx)
                else {}
            ),
            "unprivileged": bool(ctx.mapping.get("unprivileged", True)),
            "description": binding_description(ctx.operation),
        }
        before = dict(after) if ctx.facts.get("adopt") else {"vmid": ctx.vmid, "exists": False}
        return {"before": before, "after": after}


def _safe_template(ctx: StageContext) -> str | None:
    try:
        return template_volume(ctx)
    except StageError:
        return None
