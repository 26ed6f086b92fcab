# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The guest agent endpoints (qemu-server API2/Qemu/Agent.pm), answered by the VM's guest backend."""

from __future__ import annotations

import base64
import binascii
import functools
import typing as t

from .. import guestlink
from ..state import VM, parse_kv
from .core import ApiError, Call, Sim, route

# qemu-server's assert_agent_available pings the agent (guest-ping, ``timeout => 3``) before every agent command; an
# agent that is not up makes the request take those 3 s before it fails. Simulated seconds.
AGENT_PING_TIMEOUT = 3.0


class _AgentStarting(Exception):
    """The agent did not answer the availability ping yet: the request waits ``seconds`` (then its handler runs again)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(seconds)
        self.seconds = seconds


def _agent_vm(sim: Sim, call: Call) -> VM:
    sim.check_node(call)
    vm = sim.vm(call)
    if vm.status != "running":
        raise ApiError(500, f"VM {vm.vmid} is not running")
    agent = parse_kv(vm.config.get("agent", "0"), "enabled").get("enabled", "0")
    if agent not in ("1", "on", "yes", "true"):
        raise ApiError(500, "No QEMU guest agent configured")
    if call.fault("agent_not_running"):
        _agent_not_up(call, AGENT_PING_TIMEOUT)
    return vm


def _agent_not_up(call: Call, seconds: float) -> t.NoReturn:
    """The ping timed out: wait for it (once, outside the state lock), then PVE's ``QEMU guest agent is not running``."""
    if seconds <= 0 or call.extra.get("agent_waited"):
        raise ApiError(500, "QEMU guest agent is not running")
    raise _AgentStarting(min(seconds, AGENT_PING_TIMEOUT))


def _agent(sim: Sim, call: Call, fn: t.Callable[[t.Any], t.Any]) -> t.Any:
    vm = _agent_vm(sim, call)
    try:
        return fn(vm.guest)
    except guestlink.AgentNotRunning as exc:
        # A simulated guest knows when its agent comes up: the ping answers then, or times out after 3 s.
        # Another backend (a real QEMU guest) has already waited on its own socket.
        up_at = getattr(vm.guest, "agent_up_at", None)
        if up_at is None:
            raise ApiError(500, "QEMU guest agent is not running") from exc
        _agent_not_up(call, min(AGENT_PING_TIMEOUT, up_at - vm.guest.uptime()) + 1e-6)
    except guestlink.AgentError as exc:
        raise ApiError(500, exc.message) from exc


def _waits_for_agent(handler: t.Callable[[Sim, Call], t.Any]) -> t.Callable[[Sim, Call], t.Any]:
    """Run an agent handler; while the agent is starting, answer after the availability ping's wait instead."""

    @functools.wraps(handler)
    def wrapped(sim: Sim, call: Call) -> t.Any:
        try:
            return handler(sim, call)
        except _AgentStarting as starting:
            seconds = starting.seconds

            def after_ping() -> t.Any:
                sim.clock.sleep(seconds, sim.stop_event)
                call.extra["agent_waited"] = True
                with sim.state.lock:
                    return handler(sim, call)

            call.extra["wait_task"] = after_ping
            return None

    return wrapped


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/ping")
@_waits_for_agent
def agent_ping(sim: Sim, call: Call) -> dict[str, t.Any]:
    res = _agent(sim, call, lambda g: g.ping())
    return res if isinstance(res, dict) and "result" in res else {"result": res or {}}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces")
@_waits_for_agent
def agent_ifaces(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, lambda g: g.network_get_interfaces())}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/get-osinfo")
@_waits_for_agent
def agent_osinfo(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, lambda g: g.get_osinfo())}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/info")
@_waits_for_agent
def agent_info(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, lambda g: g.get_info())}


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/exec")
@_waits_for_agent
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
@_waits_for_agent
def agent_exec_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    pid = int(call.params["pid"])
    return _agent(sim, call, lambda g: g.exec_status(pid))


@route("POST", "/nodes/{node}/qemu/{vmid}/agent/file-write")
@_waits_for_agent
def agent_file_write(sim: Sim, call: Call) -> None:
    """PVE base64-encodes ``content`` for QEMU unless ``encode`` is 0 (then it already is base64): the guest gets
    exactly those bytes (binary-safe), or the text's UTF-8."""
    path = str(call.params["file"])
    text = str(call.params.get("content", ""))
    content = text.encode("utf-8", errors="surrogateescape")
    if call.params.get("encode") in (0, "0", False):
        try:
            content = base64.b64decode(text, validate=True)
        except (ValueError, binascii.Error):
            raise ApiError(
                500, f"VM {call.params['vmid']} qga command 'guest-file-write' failed - invalid base64 content"
            ) from None
    _agent(sim, call, lambda g: g.file_write(path, content))
    return None


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/file-read")
@_waits_for_agent
def agent_file_read(sim: Sim, call: Call) -> dict[str, t.Any]:
    """With ``decode`` 0, ``content`` is the base64 of the bytes read, as qemu-server forwards the agent's buffer."""
    path = str(call.params["file"])
    count = call.int("count")
    offset = call.int("offset", 0) or 0
    decode = str(call.params.get("decode", 1)).lower() not in (
        "0",
        "false",
        "no",
        "off",
    )  # decode=0: each chunk's base64, as the agent sent it
    return _agent(sim, call, lambda g: g.file_read(path, count, offset, decode))
