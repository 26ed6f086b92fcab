# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The guest agent endpoints (qemu-server API2/Qemu/Agent.pm), answered by the VM's guest backend."""

from __future__ import annotations

import typing as t

from .. import guestlink
from ..state import VM, parse_kv
from .core import ApiError, Call, Sim, route


def _agent_vm(sim: Sim, call: Call) -> VM:
    sim.check_node(call)
    vm = sim.vm(call)
    if vm.status != "running":
        raise ApiError(500, f"VM {vm.vmid} is not running")
    agent = parse_kv(vm.config.get("agent", "0"), "enabled").get("enabled", "0")
    if agent not in ("1", "on", "yes", "true"):
        raise ApiError(500, "No QEMU guest agent configured")
    if call.fault("agent_not_running"):
        raise ApiError(500, "QEMU guest agent is not running")
    return vm


def _agent(sim: Sim, call: Call, fn: t.Callable[[t.Any], t.Any]) -> t.Any:
    vm = _agent_vm(sim, call)
    try:
        return fn(vm.guest)
    except guestlink.AgentNotRunning as exc:
        raise ApiError(500, "QEMU guest agent is not running") from exc
    except guestlink.AgentError as exc:
        raise ApiError(500, exc.message) from exc


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/ping")
def agent_ping(sim: Sim, call: Call) -> dict[str, t.Any]:
    res = _agent(sim, call, lambda g: g.ping())
    return res if isinstance(res, dict) and "result" in res else {"result": res or {}}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces")
def agent_ifaces(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, lambda g: g.network_get_interfaces())}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/get-osinfo")
def agent_osinfo(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, lambda g: g.get_osinfo())}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/info")
def agent_info(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, lambda g: g.get_info())}


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/exec")
def agent_exec(sim: Sim, call: Call) -> dict[str, t.Any]:
    raw = call.params.get("command")
    command = [str(x) for x in raw] if isinstance(raw, list) else [str(raw)]
    if len(command) == 1 and "\0" in command[0]:
        command = command[0].split("\0")
    input_data = call.str("input-data")
    if call.fault("exec_disabled"):
        vm = _agent_vm(sim, call)
        if vm.guest is not None:
            saved = vm.guest.faults.exec_disabled
            vm.guest.faults.exec_disabled = True
            try:
                return {"pid": _agent(sim, call, lambda g: g.exec(command, input_data))}
            finally:
                vm.guest.faults.exec_disabled = saved
    return {"pid": _agent(sim, call, lambda g: g.exec(command, input_data))}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status")
def agent_exec_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    pid = int(call.params["pid"])
    return _agent(sim, call, lambda g: g.exec_status(pid))


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/file-read")
def agent_file_read(sim: Sim, call: Call) -> dict[str, t.Any]:
    path = str(call.params["file"])
    count = call.int("count")
    offset = call.int("offset", 0) or 0
    return _agent(sim, call, lambda g: g.file_read(path, count, offset))
