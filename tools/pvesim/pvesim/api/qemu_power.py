# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Power state: ``status/current`` and start, stop, shutdown, reboot (qemu-server); starting boots the guest."""

from __future__ import annotations

import typing as t

from .. import guestlink, vmnet
from ..state import DRIVE_RE, VM, is_cdrom, is_cloudinit_volume, parse_kv
from ..tasks import Task, TaskFailed
from .core import ApiError, Call, Sim, param_error, route
from .qemu_volumes import delete_key
from .resources import vm_resource


@route("GET", "/nodes/{node}/qemu/{vmid}/status")
def qemu_status_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    sim.vm(call)
    return [{"subdir": s} for s in ("current", "start", "stop", "reset", "shutdown", "suspend", "reboot")]


@route("GET", "/nodes/{node}/qemu/{vmid}/status/current")
def qemu_status_current(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    vm = sim.vm(call)
    r = vm_resource(sim, vm)
    res: dict[str, t.Any] = {
        "vmid": vm.vmid,
        "name": r["name"],
        "status": vm.status,
        "qmpstatus": vm.status,
        "cpus": r["maxcpu"],
        "maxmem": r["maxmem"],
        "maxdisk": r["maxdisk"],
        "mem": 0,
        "disk": 0,
        "cpu": r["cpu"],
        "uptime": r["uptime"],
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
        "ha": {"managed": 0},
    }
    agent = parse_kv(vm.config.get("agent", "0"), "enabled").get("enabled", "0")
    if agent in ("1", "on", "yes", "true"):
        res["agent"] = 1
    if vm.is_template:
        res["template"] = 1
    for k in ("tags", "lock"):
        if k in r:
            res[k] = r[k]
    if vm.config.get("serial0"):
        res["serial"] = 1
    if vm.status == "running":
        res["pid"] = 4000 + vm.vmid % 10000
        res["running-machine"] = "pc-i440fx-10.0+pve0"
        res["running-qemu"] = "10.0.2"
    return res


def _power(sim: Sim, call: Call, ttype: str) -> str:
    sim.check_node(call)
    st = sim.state
    with st.lock:
        vm = sim.vm(call)
        skiplock = call.bool("skiplock")
        if skiplock and call.userid != "root@pam":
            raise param_error({"skiplock": "Only root may use this option."})
        if ttype == "qmstart" and vm.is_template:
            raise ApiError(500, "you can't start a vm if it's a template")
        if vm.lock and not skiplock and not (ttype == "qmstop" and vm.lock == "backup"):
            raise ApiError(500, f"VM is locked ({vm.lock})")

    def body(task: Task) -> None:
        if ttype == "qmstart":
            with st.lock:
                if vm.status == "running":
                    raise TaskFailed(f"VM {vm.vmid} already running")
                for key, value in vm.config.items():
                    if (
                        DRIVE_RE.fullmatch(key)
                        and not is_cdrom(value)
                        or (DRIVE_RE.fullmatch(key) and is_cloudinit_volume(value))
                    ):
                        sid = value.split(":", 1)[0]
                        s = st.storages.get(sid)
                        if s is None:
                            raise TaskFailed(f"storage '{sid}' does not exist")
                        if not s.enabled or not s.active:
                            raise TaskFailed(f"storage '{sid}' is not available on node '{vm.node}'")
                vmnet.check_start(st, vm, vm.pending_config(), task)  # the NICs, as QEMU is started
            sim.sleep("qmstart")
            with st.lock:
                # apply pending changes (PVE applies [PENDING] on start) and regenerate cloud-init
                for d in vm.pending_delete:
                    delete_key(sim, vm, d.lstrip("!"), d.startswith("!"))
                vm.pending_delete = []
                vm.config.update(vm.pending)
                vm.pending = {}
                if any(is_cloudinit_volume(v) for k, v in vm.config.items() if DRIVE_RE.fullmatch(k)):
                    task.log("generating cloud-init ISO")
                vm.cloudinit_generated = guestlink.generated_snapshot(vm.config)
                vm.guest = guestlink.create_guest(sim, vm)  # a real guest's QEMU failing to start fails the task
                vm.status = "running"
                vm.started_at = sim.clock.now()
        elif ttype in ("qmstop", "qmshutdown"):
            if ttype == "qmshutdown" and vm.status == "running":
                sim.sleep("qmshutdown")
            else:
                sim.sleep("qmstop")
            guestlink.stop_guest(vm.guest, graceful=ttype == "qmshutdown")
            with st.lock:
                vm.status = "stopped"
                vm.started_at = None
                vm.guest = None
                _apply_pending_on_stop(sim, vm)
        elif ttype == "qmreboot":
            with st.lock:
                if vm.status != "running":
                    raise TaskFailed(f"VM {vm.vmid} not running")
            sim.sleep("qmreboot")
            with st.lock:
                _apply_pending_on_stop(sim, vm)
                vm.cloudinit_generated = guestlink.generated_snapshot(vm.config)
                vm.started_at = sim.clock.now()
                vm.guest = guestlink.create_guest(sim, vm)

    return sim.start_task(call, ttype, str(vm.vmid), body)


def _apply_pending_on_stop(sim: Sim, vm: VM) -> None:
    for d in vm.pending_delete:
        delete_key(sim, vm, d.lstrip("!"), d.startswith("!"))
    vm.pending_delete = []
    vm.config.update(vm.pending)
    vm.pending = {}


@route("POST", "/nodes/{node}/qemu/{vmid}/status/start")
def qemu_start(sim: Sim, call: Call) -> str:
    return _power(sim, call, "qmstart")


@route("POST", "/nodes/{node}/qemu/{vmid}/status/stop")
def qemu_stop(sim: Sim, call: Call) -> str:
    return _power(sim, call, "qmstop")


@route("POST", "/nodes/{node}/qemu/{vmid}/status/shutdown")
def qemu_shutdown(sim: Sim, call: Call) -> str:
    return _power(sim, call, "qmshutdown")


@route("POST", "/nodes/{node}/qemu/{vmid}/status/reboot")
def qemu_reboot(sim: Sim, call: Call) -> str:
    return _power(sim, call, "qmreboot")
