# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``configure``: Cloud-Init for the preparation boot (the build user, its one-time key, DHCP).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import common
from .. import guest as _guest
from .common import observation_mismatch, require_build_vm


# -- configure: the preparation boot's Cloud-Init settings ---------------------------------------------
class _KeyRequest(Request):
    """A request whose ``sshkeys`` is summarized (journal, previews) by the key's fingerprint only."""

    def summary(self) -> dict[str, t.Any]:
        summary = super().summary()
        keys = _guest.decode_sshkeys(str(self.params.get("sshkeys") or ""))
        # A preview before the key exists (check mode: the role generates it only when it builds) names no key.
        summary["params"]["sshkeys"] = (
            "<ephemeral key %s>" % _guest.ssh_fingerprint(keys[0]) if keys else "<ephemeral key of the run>"
        )
        return summary


class ConfigureStage(StageLogic):
    """``PUT .../config``: ``ciuser``, the ephemeral ``sshkeys`` and the static ``ipconfig0`` of the preparation boot, and
    ``ciupgrade=0``: Proxmox's default (1) has cloud-init upgrade every package on that boot, unplanned and racing the
    role's own apt run for the package lock.

    The public key comes from the role (a fresh key pair per run); the journal and the previews hold
    only its fingerprint, the private key never leaves the controller's temporary directory.
    """

    kind = "configure"

    def __init__(self, build_public_key: str | None) -> None:
        self.public_key = build_public_key

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> ConfigureStage:
        return cls(options.get("build_ssh_public_key"))

    def _wanted(self, ctx: StageContext) -> dict[str, str]:
        build = ctx.plan["buildAddress"]
        return {
            "ciuser": ctx.plan["guestUser"],
            "ipconfig0": "ip=%s,gw=%s" % (build["address"], build["gateway"]),
            "ciupgrade": "0",
        }

    def preconditions(self, ctx: StageContext) -> None:
        if not self.public_key:
            raise StageError(
                "The configure stage needs build_ssh_public_key (the ephemeral key of this run).",
                details={"stage": ctx.kind, "rule": "build_ssh_public_key"},
            )
        ctx.facts["config"] = require_build_vm(ctx, stopped=True)

    def request(self, ctx: StageContext) -> Request | None:
        params: dict[str, t.Any] = dict(
            self._wanted(ctx), sshkeys=_guest.encode_sshkeys([self.public_key]) if self.public_key else ""
        )
        digest = ctx.facts.get("config", {}).get("digest") or ctx.earlier_evidence("digest")
        if digest:
            params["digest"] = digest
        return _KeyRequest("PUT", ctx.vm_path + "/config", params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return None, {}

    def _applied(self, ctx: StageContext, config: t.Mapping[str, t.Any]) -> bool:
        keys = _guest.decode_sshkeys(str(config.get("sshkeys") or ""))
        wanted_key = _guest.ssh_fingerprint(str(self.public_key)) if self.public_key else None
        return all(str(config.get(k)) == v for k, v in self._wanted(ctx).items()) and [
            _guest.ssh_fingerprint(k) for k in keys
        ] == [wanted_key]

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or not self._applied(ctx, config):
            raise observation_mismatch(ctx, "build_settings")
        return {"digest": config.get("digest"), "buildKeyFingerprint": _guest.ssh_fingerprint(str(self.public_key))}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        if config is not None and self.public_key and self._applied(ctx, config):
            return Resolution.applied()
        return Resolution.undecidable(
            "The reply to the configuration update was lost; check VM %d's ciuser, sshkeys and ipconfig0 "
            "before re-running." % ctx.vmid
        )
