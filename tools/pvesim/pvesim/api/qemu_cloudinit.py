# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The cloud-init drive: dump, pending list, regenerate (qemu-server API2/Qemu.pm)."""

from __future__ import annotations

import typing as t

from .. import guestlink
from ..state import DRIVE_RE, is_cloudinit_volume
from .core import ApiError, Call, Sim, route


@route("GET", "/nodes/{node}/qemu/{vmid}/cloudinit/dump")
def cloudinit_dump(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    vm = sim.vm(call)
    if call.fault("cloudinit_error"):
        raise ApiError(
            500, str(call.fault("cloudinit_error").params.get("message", "unable to generate cloud-init config"))
        )  # type: ignore
    rendered = guestlink.render(vm.pending_config() if vm.status != "running" else vm.config, vm.vmid, sim.state.node)
    return rendered[str(call.params["type"])]


@route("GET", "/nodes/{node}/qemu/{vmid}/cloudinit")
def cloudinit_pending(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    vm = sim.vm(call)
    return guestlink.pending_items(vm.config, vm.cloudinit_generated)


@route("PUT", "/nodes/{node}/qemu/{vmid}/cloudinit")
def cloudinit_update(sim: Sim, call: Call) -> None:
    sim.check_node(call)
    with sim.state.lock:
        vm = sim.vm(call)
        if vm.lock:
            raise ApiError(500, f"VM is locked ({vm.lock})")
        if not any(is_cloudinit_volume(v) for k, v in vm.config.items() if DRIVE_RE.fullmatch(k)):
            raise ApiError(500, "no cloudinit drive found")
        if call.fault("cloudinit_error"):
            raise ApiError(500, "unable to generate cloud-init config")
        vm.cloudinit_generated = guestlink.generated_snapshot(vm.config)
    return None
