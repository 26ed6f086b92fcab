# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The route table and what every handler gets: ``Sim`` (state, tasks, clock, faults) and ``Call``."""

from __future__ import annotations

import threading
import typing as t
from dataclasses import dataclass, field

from ..clock import Clock
from ..faults import Fault, FaultSet
from ..state import VM, Member, State
from ..storagelock import StorageLocks
from ..tasks import Task, TaskFailed, TaskManager

PVE_VERSION = {"release": "9.1", "repoid": "b5d5c8d5e7f5c4a1", "version": "9.1.3"}

# simulated task durations (seconds of simulated time; divided by --speed)
DURATIONS: dict[str, float] = {
    "qmclone_full": 8.0,
    "qmclone_linked": 2.0,
    "qmstart": 2.0,
    "qmstop": 1.0,
    "qmshutdown": 4.0,
    "qmreboot": 4.0,
    "resize": 1.0,
    "qmsnapshot": 2.0,
    "qmsnapshot_vmstate": 5.0,
    "qmdelsnapshot": 1.5,
    "qmrollback": 2.0,
    "qmdestroy": 2.0,
    "qmconfig": 0.5,
    "download": 1.0,
    "qmcreate": 1.0,
    "qmtemplate": 1.0,
    "qmmove": 3.0,  # move_disk: copy to another storage, or reassign to another VM
    "imgcopy": 1.0,  # upload: copy the received file into the storage
    # per-storage lock hold times (pvesim.storagelock): one LVM-thin lvcreate, lvextend, lvremove
    "storage_alloc": 1.0,
    "storage_resize": 1.0,
    "storage_free": 1.0,
}


class ApiError(Exception):
    """An error reply: HTTP ``status``, PVE ``message`` (with trailing newline) and ``errors``."""

    def __init__(self, status: int, message: str, errors: dict[str, str] | None = None) -> None:
        if not message.endswith("\n"):
            message += "\n"
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def param_error(errors: dict[str, str]) -> ApiError:
    return ApiError(400, "Parameter verification failed.", errors)


def perm_error(what: str = "") -> ApiError:
    return ApiError(403, f"Permission check failed ({what})" if what else "Permission check failed")


@dataclass
class Call:
    """One authenticated, validated API call."""

    method: str
    path: str
    template: str
    params: dict[str, t.Any]
    subject: str  # user@realm or user@realm!token
    faults: list[Fault] = field(default_factory=list)
    extra: dict[str, t.Any] = field(default_factory=dict)  # e.g. {"total": n}

    @property
    def userid(self) -> str:
        return self.subject.split("!", 1)[0]

    def fault(self, action: str) -> Fault | None:
        for f in self.faults:
            if f.action == action:
                return f
        return None

    def str(self, key: str, default: str | None = None) -> str | None:
        v = self.params.get(key)
        if v is None:
            return default
        if isinstance(v, bool):
            return "1" if v else "0"
        if isinstance(v, list):
            return ",".join(str(x) for x in v)
        return str(v)

    def int(self, key: str, default: int | None = None) -> int | None:
        v = self.params.get(key)
        return default if v is None else int(v)

    def bool(self, key: str, default: bool = False) -> bool:
        v = self.params.get(key)
        if v is None:
            return default
        if isinstance(v, bool):
            return v
        return str(v) == "1"


Handler = t.Callable[["Sim", Call], t.Any]
ROUTE_ATTRIBUTE = "pvesim_route"


def route(method: str, template: str) -> t.Callable[[Handler], Handler]:
    """Mark ``fn`` as the handler of ``method template``; ``pvesim/routes.py`` collects the marked handlers of every
    endpoint module into the one route table (nothing registers itself at import)."""

    def deco(fn: Handler) -> Handler:
        setattr(fn, ROUTE_ATTRIBUTE, (method, template))
        return fn

    return deco


class Sim:
    """The simulated host: state + tasks + clock + faults."""

    def __init__(self, state: State, clock: Clock, faults: FaultSet) -> None:
        self.state = state
        self.clock = clock
        self.faults = faults
        self.tasks = TaskManager(state.node, clock)
        self.stop_event = threading.Event()
        self.guest_knobs: dict[int, dict[str, t.Any]] = {}
        # the time model (``--timings FILE`` / ``PUT /_pvesim/timings``): task durations and the
        # default GuestTiming of every new guest (per-VM guest knobs still override it)
        self.durations: dict[str, float] = dict(DURATIONS)
        self.guest_timing: dict[str, float] = {}
        self.storage_locks = StorageLocks(clock, self.stop_event, self.durations)

    # helpers ------------------------------------------------------------------------------
    def check_node(self, call: Call) -> None:
        """The path's node must be a cluster member; another member is served as pveproxy proxies to it (cluster.py)."""
        node = call.params.get("node")
        if node is not None and node != self.state.node:
            cluster_member(self, str(node))

    def call_node(self, call: Call) -> str:
        """The node a node-scoped request is served by (the path's ``{node}``, else the answering node)."""
        return str(call.params.get("node") or self.state.node)

    def vm(self, call: Call, key: str = "vmid") -> VM:
        vmid = int(call.params[key])
        vm = self.state.vms.get(vmid)
        node = self.call_node(call)
        if vm is None or vm.node != node:  # a VM's config lives in its own node's directory
            raise ApiError(500, f"Configuration file 'nodes/{node}/qemu-server/{vmid}.conf' does not exist")
        return vm

    def has(self, subject: str, path: str, privs: t.Iterable[str], any_of: bool = False) -> bool:
        perms = self.state.permissions(subject, path)
        privs = list(privs)
        return any(p in perms for p in privs) if any_of else all(p in perms for p in privs)

    def require(self, subject: str, path: str, privs: list[str], any_of: bool = False) -> None:
        perms = self.state.permissions(subject, path)
        if any_of:
            if not any(p in perms for p in privs):
                raise perm_error(f"{path}, {'|'.join(privs)}")
            return
        for p in privs:
            if p not in perms:
                raise perm_error(f"{path}, {p}")

    def require_vnet(self, subject: str, net: t.Mapping[str, str]) -> None:
        """pve-guest-common ``check_vnet_access`` for a NIC's ``bridge``, ``tag`` and ``trunks``: the zone is the SDN
        VNet's (``localnetwork`` for a plain bridge); a tag needs SDN.Use on ``/sdn/zones/<zone>/<bridge>/<tag>`` (or
        inherited from the bridge), so does every VLAN of the trunks; only an untagged NIC is checked on the bridge."""
        bridge = net.get("bridge")
        if not bridge:
            return
        zone = self.state.vnets.get(bridge, {}).get("zone", "localnetwork")
        path = f"/sdn/zones/{zone}/{bridge}"
        tag, trunks = net.get("tag"), net.get("trunks")
        if tag:
            self.require(subject, f"{path}/{tag}", ["SDN.Use"])
        vlans: set[int] = set()
        for part in (trunks or "").split(";"):  # get_tags_from_trunk: "10;20-30"
            low, _sep, high = part.partition("-")
            if low.strip().isdigit():
                vlans.update(range(int(low), int(high or low) + 1))
        for vlan in sorted(vlans, key=str):  # Perl: sort keys (string order)
            self.require(subject, f"{path}/{vlan}", ["SDN.Use"])
        if not (tag or trunks):
            self.require(subject, path, ["SDN.Use"])

    def sleep(self, key: str, factor: float = 1.0) -> None:
        self.clock.sleep(self.durations.get(key, 1.0) * factor, self.stop_event)

    def start_task(
        self,
        call: Call,
        ttype: str,
        tid: str,
        body: t.Callable[[Task], None],
        on_finish: t.Callable[[Task], None] | None = None,
    ) -> str:
        tf = call.fault("task_error")
        tw = call.fault("task_warnings")

        def wrapped(task: Task) -> None:
            body(task)
            if tw is not None:
                for i in range(int(tw.params.get("count", 1))):
                    task.warn(str(tw.params.get("message", f"simulated warning {i + 1}")))
            if tf is not None:
                raise TaskFailed(str(tf.params.get("message", "simulated failure")))

        return self.tasks.start(ttype, tid, call.subject, wrapped, on_finish, node=self.call_node(call)).upid


# pveproxy's answer when the member it proxies to cannot be reached.
PROXY_FAILURE = "Errors during connection establishment, proxy handshake: No route to host"


def cluster_member(sim: Sim, node: str) -> Member:
    """The cluster member ``node`` as the proxy finds it: unknown -> 500, offline -> 595 (proxy failure)."""
    found = sim.state.members.get(node)
    if found is None:
        raise ApiError(500, f"no such cluster node '{node}'")
    if not found.online:
        raise ApiError(595, PROXY_FAILURE)
    return found
