# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the container stages share: the MAC derived from the operation, ``net0``, the checks that the container is
the operation's and the plan a container plan, its power state, the template volume the plan resolved.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import hashlib
import typing as t

from ..._api.pveconfig import parse_property_string, read_status
from ..common import is_ours, read_config_or_none
from ..protocol import StageContext
from ..outcomes import StageError

DEFAULT_READINESS_TIMEOUT = 300.0


def container_mac(operation: t.Mapping[str, t.Any]) -> str:
    """The net0 MAC of the operation's container: Proxmox's OUI ``BC:24:11`` plus three bytes of the operation id's SHA-256."""
    digest = hashlib.sha256(str(operation["operationId"]).encode("utf-8")).digest()
    return "BC:24:11:%02X:%02X:%02X" % (digest[0], digest[1], digest[2])


def net0(config: t.Mapping[str, t.Any]) -> dict[str, str]:
    value = config.get("net0")
    return parse_property_string(value, "name") if isinstance(value, str) else {}


def require_ours(ctx: StageContext) -> dict[str, t.Any]:
    """The container exists, carries this operation's description, is not locked and has the recorded MAC."""
    require_container_plan(ctx)
    config = read_config_or_none(ctx)
    if config is None:
        raise StageError(
            "The target container does not exist.", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "exists"}
        )
    if not is_ours(ctx, config):
        raise StageError(
            "The target container's description does not bind it to this operation.",
            details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "description"},
        )
    if config.get("lock"):
        raise StageError(
            "The target container is locked.", code="locked", details={"stage": ctx.kind, "vmid": ctx.vmid}
        )
    if net0(config).get("hwaddr", "").upper() != container_mac(ctx.operation):
        raise StageError(
            "The container's net0 MAC is not the one the create stage sent.",
            details={"stage": ctx.kind, "rule": "net0_mac"},
        )
    return config


def require_container_plan(ctx: StageContext) -> None:
    """Container stages run only for operations whose plan is a container's (nothing is read or sent otherwise)."""
    if ctx.plan.get("guestType") != "container":
        raise StageError(
            "The operation's plan is not a container plan (guestType: container).",
            details={"stage": ctx.kind, "rule": "container_plan"},
        )


def power_state(ctx: StageContext) -> str | None:
    state = read_status(ctx.client, ctx.vm_path).get("status")
    return state if isinstance(state, str) else None


def template_volume(ctx: StageContext) -> str:
    """The ostemplate volume: the catalog's, or the one the template stage resolved (and recorded)."""
    if "ostemplate" in ctx.mapping:
        return str(ctx.mapping["ostemplate"])
    volid = ctx.earlier_evidence("ostemplate")
    if not isinstance(volid, str):
        raise StageError(
            "The template stage has not recorded the container template.",
            code="stage_out_of_order",
            details={"stage": ctx.kind, "waiting_for": "template"},
        )
    return volid


# ---------------------------------------------------------------------------------------------------
# template


# ---------------------------------------------------------------------------------------------------
# create


# ---------------------------------------------------------------------------------------------------
# start


# ---------------------------------------------------------------------------------------------------
# readiness


# ---------------------------------------------------------------------------------------------------
# packages (installed over SSH by the role, the Ansible way; this stage verifies and records)


# ---------------------------------------------------------------------------------------------------
# snapshot (gated like the VM snapshot: both gates re-read before the write)
