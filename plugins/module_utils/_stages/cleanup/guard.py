# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What both cleanup steps check before they send: the gate, the token's privileges, the guest's binding to this
operation, no protection, no lock (docs/operations.md, "Lifecycle").

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import typing as t

from ..._api.pveconfig import read_status
from ..._checks.permissions import effective_privileges
from ..._core.errors import ProviderError
from ..._operation.create import LIFECYCLE_GATE, read_gate
from ..protocol import StageContext, StageLogic
from ..outcomes import StageError
from ..common import is_ours, read_config_or_none

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
    return (
        sorted(
            str(item["name"]) for item in data if isinstance(item, dict) and item.get("name") not in (None, "current")
        )
        if isinstance(data, list)
        else []
    )


class GuardedStep(StageLogic):
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
            raise StageError(
                "The %s is locked." % self.noun,
                code="locked",
                details={"stage": ctx.kind, "vmid": ctx.vmid, "lock": str(config["lock"])},
            )
        ctx.facts["config"] = config
        return config

    def require_privileges(self, ctx: StageContext) -> None:
        path = "/vms/%d" % ctx.vmid
        needed = self.privileges + (("VM.PowerMgmt",) if self.stop else ())
        data = ctx.client.get("/access/permissions", path=path)
        held = effective_privileges(data, path) if isinstance(data, dict) else set()
        missing = [name for name in needed if name not in held]
        if missing:
            raise StageError(
                "The token lacks privileges the cleanup needs; nothing was sent.",
                code="permission_denied",
                details={"stage": ctx.kind, "path": path, "missing": missing},
            )

    def power(self, ctx: StageContext) -> str:
        try:
            return str(read_status(ctx.client, ctx.vm_path).get("status"))
        except ProviderError as err:
            if err.code == "not_found":
                return "absent"
            raise
