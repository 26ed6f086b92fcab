# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``generalize``: machine-specific state removed from the guest (machine-id, host keys, the build
user's password locked).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..protocol import StageContext, StageLogic
from ..outcomes import Request, StageError
from .common import require_build_vm


def parse_passwd_status(line: str, user: str) -> bool:
    """``passwd -S <user>`` (shadow-utils): ``<user> L|P|NP ...``; True only for a locked password of exactly ``user``."""
    fields = line.split()
    return len(fields) >= 2 and fields[0] == user and fields[1] == "L"


class GeneralizeStage(StageLogic):
    """Nothing is sent: the role generalized the guest over SSH (machine-id, SSH host keys, the provisioning key,
    ``cloud-init clean``, apt cache) and hands over ``passwd -S`` and the count of authorized keys left; the stage
    decides the attestation from them. A stand-in build records ``standIn: true`` and attests nothing."""

    kind = "generalize"

    def __init__(self, prepared_by: str | None, passwd_status: str | None, authorized_keys_left: int | None) -> None:
        self.prepared_by = prepared_by
        self.passwd_status = passwd_status
        self.authorized_keys_left = authorized_keys_left

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> GeneralizeStage:
        return cls(options.get("prepared_by"), options.get("passwd_status"), options.get("authorized_keys_left"))

    def preconditions(self, ctx: StageContext) -> None:
        recorded = ctx.evidence("prepare").get("preparedBy")
        if self.prepared_by != recorded:
            raise StageError(
                "prepared_by differs from the one the prepare stage recorded.",
                details={"stage": ctx.kind, "rule": "prepared_by"},
            )
        if recorded == "ssh" and (self.passwd_status is None or self.authorized_keys_left is None):
            raise StageError(
                "The generalize stage needs passwd_status and authorized_keys_left from the guest.",
                details={"stage": ctx.kind, "rule": "guest_report"},
            )
        require_build_vm(ctx, stopped=False)

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if self.prepared_by == "stand-in":
            return {"standIn": True, "passwordLocked": None, "noAuthorizedKeys": None}
        return {
            "standIn": False,
            "passwordLocked": parse_passwd_status(str(self.passwd_status), ctx.plan["guestUser"]),
            "noAuthorizedKeys": self.authorized_keys_left == 0,
        }
