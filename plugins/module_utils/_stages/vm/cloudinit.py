# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``cloudinit``: one digest-bound ``PUT {vm}/config`` with the Cloud-Init settings (docs/stages.md).

Sets ``net0`` (the clone's MAC kept, the planned bridge, and a named network's VLAN tag and MTU), ``ipconfig0``
(``ip=dhcp``, or a static network's address and gateway, with its ``nameserver`` and ``searchdomain``), ``citype:
nocloud``, ``sshkeys`` (the definition's exact public keys, URL-encoded as PVE expects) and
``ciupgrade: 0``; deletes ``cipassword``. With a validated ``imageDefaultUser`` attestation on the
mapping it also deletes ``ciuser`` and ``cicustom`` (the image's default user gets the keys);
without one it sets ``ciuser`` to the mapping's ``guestUser``. A target with more than one network
device (``net1``...) is refused before any write (``stage_precondition_failed``, rule
``single_network_device``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import typing as t

from ..._api.pveconfig import net_macaddr
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import guest as _guest
from .. import nic as _nic
from ..adoption import AdoptionHook, Decision, Observations

_NET_KEY = re.compile(r"\Anet\d+\Z")
_COMPARED = (
    "net0",
    "ipconfig0",
    "nameserver",
    "searchdomain",
    "citype",
    "sshkeys",
    "ciupgrade",
    "ciuser",
    "cipassword",
    "cicustom",
)


def attested(ctx: StageContext) -> bool:
    """True when the mapping carries a validated ``imageDefaultUser`` attestation."""
    return isinstance(ctx.mapping.get("imageDefaultUser"), dict)


def desired_settings(ctx: StageContext, mac: str) -> dict[str, t.Any]:
    """The values the stage sets (``None`` = must be absent)."""
    nic = _nic.planned(ctx)
    settings: dict[str, t.Any] = {
        "net0": _nic.net0_value(nic, mac),
        "ipconfig0": _nic.ipconfig0_value(nic),
    }
    if _nic.named(ctx):  # a plan without a named network leaves the DNS settings as they are (as it always did)
        settings.update(_nic.dns_settings(nic))
    settings.update(
        {
            "citype": "nocloud",
            "sshkeys": _guest.encode_sshkeys(ctx.definition["access"]["sshPublicKeys"]),
            "ciupgrade": 0,
            "cipassword": None,
        }
    )
    if attested(ctx):
        settings.update(ciuser=None, cicustom=None)
    else:
        settings["ciuser"] = ctx.plan["guestUser"]
    return settings


def mismatches(ctx: StageContext, config: t.Mapping[str, t.Any], mac: str) -> list[str]:
    """Names of settings whose current value differs from the desired one (exact comparison)."""
    wrong: list[str] = []
    for key, want in desired_settings(ctx, mac).items():
        have = config.get(key)
        if want is None:
            if key in config:
                wrong.append(key)
        elif key == "net0":
            if not _nic.net0_matches(have, _nic.planned(ctx), mac, with_options=_nic.named(ctx)):
                wrong.append(key)
        elif key == "sshkeys":
            try:
                decoded = _guest.decode_sshkeys(str(have)) if have is not None else None
            except UnicodeDecodeError:
                decoded = None
            if decoded != list(ctx.definition["access"]["sshPublicKeys"]):
                wrong.append(key)
        elif key == "ciupgrade":
            if str(have) != "0":
                wrong.append(key)
        elif have != want:
            wrong.append(key)
    return wrong


class CloudinitStage(StageLogic, AdoptionHook):
    kind = "cloudinit"
    task_type = None
    default_timeout = 60.0
    trusts_recent_config = True  # its write carries the digest
    # The power state is read here (docs/stages.md "Reads reused"): Proxmox does not refuse the write on a VM another
    # client started since, as it refuses it on a changed configuration (the digest).

    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.require_stopped_settled(ctx)
        extra = sorted((key for key in config if _NET_KEY.match(key) and key != "net0"), key=lambda key: int(key[3:]))
        if extra:
            # One DHCP NIC is what the plan describes and what readiness checks; a second one would get an
            # unplanned Cloud-Init network configuration.
            raise StageError(
                "The target has more than one network device; the collection provisions exactly one (net0). Nothing was sent.",
                details={"stage": ctx.kind, "rule": "single_network_device", "devices": ["net0"] + extra},
            )
        if _guest.cloudinit_drive(config, ctx.vmid) is None:
            raise StageError(
                "The target has no Cloud-Init drive of its own (vm-<vmid>-cloudinit); nothing was sent.",
                details={"stage": ctx.kind, "rule": "cloudinit_drive"},
            )
        mac, _bridge = _guest.net0_mac_bridge(config)
        if mac is None or mac != _guest.clone_mac(ctx):
            raise StageError(
                "The target's net0 MAC is not the one the clone stage recorded; nothing was sent.",
                details={"stage": ctx.kind, "rule": "net0_mac"},
            )
        ctx.facts["config"] = config

    def request(self, ctx: StageContext) -> Request | None:
        mac = _guest.clone_mac(ctx)
        config = ctx.facts.get("config")
        if config is not None and not mismatches(ctx, config, mac):
            return None
        settings = desired_settings(ctx, mac)
        digest = config["digest"] if config is not None else _guest.latest_digest(ctx)
        if digest is None:
            raise KeyError("digest")
        params: dict[str, t.Any] = {"digest": digest}
        params.update({key: value for key, value in settings.items() if value is not None})
        params["delete"] = ",".join(key for key, value in settings.items() if value is None)
        return Request("PUT", ctx.vm_path + "/config", params)

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = _guest.read_config(ctx)
        mac = _guest.clone_mac(ctx)
        wrong = mismatches(ctx, config, mac)
        if wrong:
            raise StageError(
                "After the update Proxmox does not show the requested Cloud-Init settings.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "fields": wrong},
            )
        return {
            "digest": config["digest"],
            "net0Mac": mac,
            "bridge": ctx.plan["bridge"],
            "guestReady": False,
            "attested": attested(ctx),
            "sshKeyCount": len(ctx.definition["access"]["sshPublicKeys"]),
        }

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = _guest.read_config(ctx)
        mac = _guest.clone_mac(ctx)
        if not mismatches(ctx, config, mac):
            return Resolution.applied()
        if config.get("digest") == _guest.latest_digest(ctx):
            return Resolution.not_applied()
        return Resolution.undecidable(
            "The configuration changed but does not show the requested Cloud-Init settings; "
            "inspect the VM's configuration in Proxmox before re-running."
        )

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        config = ctx.facts.get("config") or {}
        try:
            mac = _guest.clone_mac(ctx)
        except KeyError:
            return None
        before = {key: config[key] for key in _COMPARED if key in config}
        after = {key: value for key, value in desired_settings(ctx, mac).items() if value is not None}
        return {"before": before, "after": after}

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        ctx = obs.context(self.kind)
        config = obs.config
        mac = net_macaddr(config.get("net0"))
        if mac is None or _guest.cloudinit_drive(config, ctx.vmid) is None or mismatches(ctx, config, mac):
            return Decision(
                "pending",
                "Proxmox does not show exactly the planned Cloud-Init settings; the cloudinit stage sets them "
                "(bound to the digest observed now).",
            )
        return Decision(
            "completed",
            "Every planned Cloud-Init setting is shown exactly.",
            {
                "digest": config["digest"],
                "net0Mac": mac,
                "bridge": ctx.plan["bridge"],
                "guestReady": False,
                "attested": attested(ctx),
                "sshKeyCount": len(ctx.definition["access"]["sshPublicKeys"]),
            },
        )
