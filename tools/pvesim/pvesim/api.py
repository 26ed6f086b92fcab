# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The implemented ``/api2/json`` endpoints (PVE semantics, simulated state).

Every handler gets the ``Sim`` (state, tasks, clock, faults) and a ``Call`` (validated wire
parameters merged with path parameters, the authenticated subject, the faults that fired) and
returns the ``data`` value, or raises ``ApiError``. Messages are copied from qemu-server,
pve-manager, pve-common and pve-access-control.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
import typing as t
import urllib.parse
from dataclasses import dataclass, field

from . import guestlink
from .clock import Clock
from .faults import Fault, FaultSet
from .state import (DRIVE_RE, FAST_PLUG, GIB, VM, Pool, Snapshot, State, format_size, is_cdrom,
                    is_cloudinit_volume, parse_kv, print_kv, size_to_bytes)
from .storagelock import StorageLocks
from .tasks import Task, TaskFailed, TaskManager

PVE_VERSION = {"release": "9.1", "repoid": "b5d5c8d5e7f5c4a1", "version": "9.1.3"}

# simulated task durations (seconds of simulated time; divided by --speed)
DURATIONS: dict[str, float] = {
    "qmclone_full": 8.0, "qmclone_linked": 2.0, "qmstart": 2.0, "qmstop": 1.0, "qmshutdown": 4.0, "qmreboot": 4.0,
    "resize": 1.0, "qmsnapshot": 2.0, "qmsnapshot_vmstate": 5.0, "qmdelsnapshot": 1.5, "qmrollback": 2.0, "qmdestroy": 2.0,
    "qmconfig": 0.5, "download": 1.0, "qmcreate": 1.0, "qmtemplate": 1.0,
    # per-storage lock hold times (pvesim.storagelock): one LVM-thin lvcreate, lvextend, lvremove
    "storage_alloc": 1.0, "storage_resize": 1.0, "storage_free": 1.0,
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
HANDLERS: dict[tuple[str, str], Handler] = {}


def route(method: str, template: str) -> t.Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        HANDLERS[(method, template)] = fn
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
            cluster.member(self, str(node))

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

    def sleep(self, key: str, factor: float = 1.0) -> None:
        self.clock.sleep(self.durations.get(key, 1.0) * factor, self.stop_event)

    def start_task(self, call: Call, ttype: str, tid: str, body: t.Callable[[Task], None],
                   on_finish: t.Callable[[Task], None] | None = None) -> str:
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


# ------------------------------------------------------------------------------------------
# generic permission evaluation of the schema's "permissions" object

def check_permissions(sim: Sim, ep_perms: dict[str, t.Any], subject: str, params: dict[str, t.Any]) -> None:
    """Evaluate a schema ``permissions`` object; raises ``ApiError(403)``.

    Supported: ``user: all|world``, ``check: [perm, path, privs, (any, 1)?, (require_param, p)?]``,
    ``and``/``or``, ``userid-param``/``userid-group`` (approximated: self or Sys.Audit/User.Modify on /access).
    Without ``check``/``user`` only root@pam passes (PVE semantics).
    """
    if not ep_perms:
        if subject != "root@pam":
            raise perm_error("user != root@pam")
        return
    user = ep_perms.get("user")
    check = ep_perms.get("check")
    if user in ("all", "world"):
        # PVE's check_api2_permissions returns before ``check`` (then only a hint, e.g. GET /cluster/options filters itself).
        return
    if check is None:
        if subject != "root@pam":
            raise perm_error("user != root@pam")
        return
    _eval_check(sim, check, subject, params, noerr=False)


def _subst(path: str, params: dict[str, t.Any]) -> str | None:
    missing = False

    def rep(m: re.Match[str]) -> str:
        nonlocal missing
        v = params.get(m.group(1))
        if v is None:
            missing = True
            return ""
        return str(v)
    res = re.sub(r"\{([^}]+)\}", rep, path)
    return None if missing else res


def _eval_check(sim: Sim, check: list[t.Any], subject: str, params: dict[str, t.Any], noerr: bool) -> bool:
    kind = check[0]
    if kind == "perm":
        path = _subst(check[1], params)
        privs = list(check[2])
        opts = dict(zip(check[3::2], check[4::2]))
        req = opts.get("require_param")
        if req is not None and params.get(req) is None:
            if noerr:
                return False
            raise ApiError(400, "Parameter verification failed.", {req: "parameter is required"})
        if path is None:
            if noerr:
                return False
            raise perm_error()
        ok = sim.has(subject, path, privs, any_of=bool(opts.get("any")))
        if ok or noerr:
            return ok
        sim.require(subject, path, privs, any_of=bool(opts.get("any")))
        return True
    if kind == "and":
        for sub in check[1:]:
            if not _eval_check(sim, sub, subject, params, noerr):
                return False
        return True
    if kind == "or":
        for sub in check[1:]:
            if _eval_check(sim, sub, subject, params, True):
                return True
        if noerr:
            return False
        raise perm_error()
    if kind in ("userid-param", "userid-group", "perm-modify"):
        userid = params.get("userid")
        if userid is None or userid == subject.split("!")[0] or sim.has(subject, "/access", ["User.Modify"]) \
                or sim.has(subject, "/access", ["Sys.Audit"]):
            return True
        if noerr:
            return False
        raise perm_error()
    return True  # unknown check kinds: allowed (documented approximation)


# ------------------------------------------------------------------------------------------
# access

@route("GET", "/access/ticket")
def get_ticket(sim: Sim, call: Call) -> None:
    del sim, call


@route("POST", "/access/ticket")
def create_ticket(sim: Sim, call: Call) -> dict[str, t.Any]:
    username = str(call.params["username"])
    realm = call.str("realm")
    if realm and "@" not in username:
        username = f"{username}@{realm}"
    password = str(call.params["password"])
    st = sim.state
    user = st.users.get(username)
    ok = False
    if user is not None and user.enable:
        if user.password is not None and secrets.compare_digest(user.password, password):
            ok = True
        elif password.startswith("PVE:") and st.tickets.get(password, ("", 0.0))[0] == username \
                and st.tickets[password][1] > time.time():
            ok = True
    if not ok:
        raise ApiError(401, "authentication failure")
    ticket = f"PVE:{username}:{int(time.time()):08X}::{secrets.token_urlsafe(64)}"
    csrf = f"{int(time.time()):08X}:{secrets.token_urlsafe(32)}"
    st.tickets[ticket] = (username, time.time() + 7200)
    st.csrf[ticket] = csrf
    return {"ticket": ticket, "CSRFPreventionToken": csrf, "username": username,
            "cap": {"vms": {p: 1 for p in sorted(st.permissions(username, "/vms"))}}}


@route("GET", "/access/permissions")
def get_permissions(sim: Sim, call: Call) -> dict[str, dict[str, int]]:
    st = sim.state
    target = call.str("userid") or call.subject
    if target != call.subject:
        own_token = target.startswith(call.subject + "!") and "!" not in call.subject
        if not own_token:
            sim.require(call.subject, "/access", ["Sys.Audit"])
    path = call.str("path")
    paths = [path] if path else sorted(set(st.acl_paths(target)) | {"/", "/access", "/nodes", "/storage", "/vms", "/sdn", "/pool"})
    res: dict[str, dict[str, int]] = {}
    for p in paths:
        privs = st.permissions(target, p)
        if privs or path:
            res[p] = {priv: 1 for priv in sorted(privs)}
    return res


# ------------------------------------------------------------------------------------------
# version, nodes, cluster

@route("GET", "/version")
def version(sim: Sim, call: Call) -> dict[str, str]:
    del sim, call
    return dict(PVE_VERSION)


@route("GET", "/nodes")
def nodes(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    del call
    return [cluster.node_entry(sim, sim.state.members[name]) for name in sorted(sim.state.members)]


@route("GET", "/nodes/{node}")
def node_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    return [{"name": n} for n in ("qemu", "storage", "network", "tasks", "status", "version")]


@route("GET", "/nodes/{node}/version")
def node_version(sim: Sim, call: Call) -> dict[str, str]:
    sim.check_node(call)
    return dict(PVE_VERSION)


@route("GET", "/nodes/{node}/status")
def node_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    return {"uptime": int(time.monotonic()), "cpu": 0.03, "pveversion": "pve-manager/9.1.3/b5d5c8d5e7f5c4a1",
            "kversion": "Linux 6.14.11-4-pve", "memory": {"total": 64 * GIB, "used": 8 * GIB, "free": 56 * GIB},
            "cpuinfo": {"cpus": 16, "sockets": 1, "cores": 8, "model": "Simulated CPU"}, "loadavg": ["0.10", "0.08", "0.05"]}


@route("GET", "/cluster/nextid")
def nextid(sim: Sim, call: Call) -> int:
    """PVE's ``nextid``: a given VMID is returned when no guest (VM, template, container) has it; else the lowest free
    one in the datacenter's ``next-id`` range (``lower`` inclusive, default 100; ``upper`` exclusive, default 1000000)."""
    st = sim.state
    vmid = call.int("vmid")
    with st.lock:
        if vmid is not None:
            if not st.vmid_used(vmid):
                return vmid
            raise param_error({"vmid": f"VM {vmid} already exists"})
        next_id = st.datacenter.get("next-id") or {}
        lower = int(next_id.get("lower", 100))
        upper = int(next_id.get("upper", 1000 * 1000))
        for i in range(lower, upper):
            if not st.vmid_used(i):
                return i
    raise ApiError(500, f"unable to get any free VMID in range [{lower}, {upper}]")


NEXT_ID_KEYS = ("lower", "upper")


def parse_next_id(text: str) -> dict[str, int]:
    """``[lower=<int>][,upper=<int>]`` (schema-validated already) as datacenter.cfg's parser returns it."""
    result: dict[str, int] = {}
    for part in text.split(","):
        if not part:
            continue
        key, value = part.split("=", 1) if "=" in part else (part, "")
        if key not in NEXT_ID_KEYS or key in result:
            raise param_error({"next-id": f"invalid format - unknown or duplicate key '{key}'"})
        result[key] = int(value)
    return result


@route("GET", "/cluster/options")
def cluster_options(sim: Sim, call: Call) -> dict[str, t.Any]:
    """datacenter.cfg; without Sys.Audit on / only ``console`` and ``tag-style`` (plus ``allowed-tags``), as in PVE."""
    st = sim.state
    with st.lock:
        config = {key: (dict(value) if isinstance(value, dict) else value) for key, value in st.datacenter.items()}
    if not sim.has(call.subject, "/", ["Sys.Audit"]):
        config = {key: value for key, value in config.items() if key in ("console", "tag-style")}
    config["allowed-tags"] = []
    return config


@route("PUT", "/cluster/options")
def set_cluster_options(sim: Sim, call: Call) -> None:
    """Set (or ``delete``) datacenter options; ``next-id`` is parsed, other options are kept as given."""
    st = sim.state
    with st.lock:
        for key in (call.str("delete") or "").replace(";", ",").split(","):
            if key.strip():
                st.datacenter.pop(key.strip(), None)
        for key, value in call.params.items():
            if key == "delete":
                continue
            st.datacenter[key] = parse_next_id(str(value)) if key == "next-id" else value
    return None


def _ct_resource(vmid: int, ct: t.Mapping[str, t.Any], node: str) -> dict[str, t.Any]:
    conf = ct.get("config") or {}
    res = {"id": f"lxc/{vmid}", "type": "lxc", "vmid": vmid, "node": ct.get("node", node), "status": ct.get("status", "stopped"),
           "name": ct.get("name", f"CT{vmid}"), "template": 1 if ct.get("template") else 0, "maxcpu": int(conf.get("cores", 1)),
           "maxmem": int(conf.get("memory", 512)) << 20, "maxdisk": 8 << 30, "cpu": 0, "mem": 0, "disk": 0, "uptime": 0, "netin": 0,
           "netout": 0, "diskread": 0, "diskwrite": 0}
    for key in ("tags", "lock"):  # the container's config (lxc.py), as for VMs
        if conf.get(key):
            res[key] = conf[key]
    if ct.get("pool"):
        res["pool"] = ct["pool"]
    return res


def _vm_resource(sim: Sim, vm: VM) -> dict[str, t.Any]:
    conf = vm.config
    res: dict[str, t.Any] = {
        "id": f"qemu/{vm.vmid}", "type": "qemu", "vmid": vm.vmid, "node": vm.node, "status": vm.status,
        "name": conf.get("name", f"VM {vm.vmid}"), "template": 1 if vm.is_template else 0,
        "maxcpu": int(conf.get("cores", "1")) * int(conf.get("sockets", "1")),
        "maxmem": int(parse_kv(conf.get("memory", "512"), "current").get("current", "512")) << 20,
        "maxdisk": _boot_disk_size(sim, vm), "cpu": 0.01 if vm.status == "running" else 0, "mem": 0, "disk": 0,
        "uptime": _uptime(sim, vm), "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0,
    }
    if conf.get("tags"):
        res["tags"] = conf["tags"]
    if conf.get("lock"):
        res["lock"] = conf["lock"]
    if vm.pool:
        res["pool"] = vm.pool
    return res


def _uptime(sim: Sim, vm: VM) -> int:
    if vm.status != "running" or vm.started_at is None:
        return 0
    return int(sim.clock.now() - vm.started_at)


def _boot_disk_size(sim: Sim, vm: VM) -> int:
    for key in sorted(vm.disks()):
        value = vm.config[key]
        if is_cdrom(value):
            continue
        m = re.search(r"(?:^|,)size=([^,]+)", value)
        if m:
            try:
                return size_to_bytes(m.group(1))
            except ValueError:
                return 0
        size = sim.state.volume_size(value.split(",")[0])
        return size or 0
    return 0


def _storage_entry(st_obj: t.Any, with_type: bool = True) -> dict[str, t.Any]:
    total = st_obj.total
    avail = st_obj.avail
    used = max(0, total - avail)
    res = {"storage": st_obj.storage, "type": st_obj.type, "content": ",".join(sorted(st_obj.content)),
           "total": total if st_obj.active else 0, "used": used if st_obj.active else 0, "avail": avail if st_obj.active else 0,
           "used_fraction": (used / total) if total and st_obj.active else 0, "shared": st_obj.shared,
           "enabled": st_obj.enabled, "active": st_obj.active}
    if not with_type:
        del res["type"]
    return res


# ------------------------------------------------------------------------------------------
# resource pools (PVE API2/Pool.pm; a VM's membership is its ``pool``)

def _pool_members(sim: Sim, poolid: str, call: Call) -> list[dict[str, t.Any]]:
    vms = [vm for vmid, vm in sorted(sim.state.vms.items()) if vm.pool == poolid]
    return [_vm_resource(sim, vm) for vm in vms if call.str("type") in (None, "qemu")]


@route("GET", "/pools")
def pools_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    st = sim.state
    poolid = call.str("poolid")
    res: list[dict[str, t.Any]] = []
    with st.lock:
        for name in sorted(st.pools):
            if (poolid is not None and name != poolid) or not sim.has(call.subject, f"/pool/{name}", ["Pool.Audit"]):
                continue
            entry: dict[str, t.Any] = {"poolid": name}
            if st.pools[name].comment:
                entry["comment"] = st.pools[name].comment
            if poolid is not None:
                entry["members"] = _pool_members(sim, name, call)
            res.append(entry)
    return res


@route("POST", "/pools")
def pools_create(sim: Sim, call: Call) -> None:
    st = sim.state
    poolid = str(call.params["poolid"])
    with st.lock:
        if poolid in st.pools:
            raise ApiError(500, f"pool '{poolid}' already exists")
        st.pools[poolid] = Pool(poolid, call.str("comment") or "")


@route("GET", "/pools/{poolid}")
def pools_get(sim: Sim, call: Call) -> dict[str, t.Any]:
    st = sim.state
    poolid = str(call.params["poolid"])
    with st.lock:
        pool = st.pools.get(poolid)
        if pool is None:
            raise ApiError(500, f"pool '{poolid}' does not exist")
        res: dict[str, t.Any] = {"members": _pool_members(sim, poolid, call)}
        if pool.comment:
            res["comment"] = pool.comment
        return res


@route("GET", "/cluster/resources")
def cluster_resources(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    st = sim.state
    rtype = call.str("type")
    res: list[dict[str, t.Any]] = []
    if rtype in (None, "vm"):
        guests = {vmid: "qemu" for vmid in st.vms}
        guests.update({vmid: "lxc" for vmid in st.containers})
        for vmid in sorted(guests):
            if sim.has(call.subject, f"/vms/{vmid}", ["VM.Audit"]):
                if guests[vmid] == "qemu":
                    res.append(_vm_resource(sim, st.vms[vmid]))
                else:
                    res.append(_ct_resource(vmid, st.containers[vmid], st.node))
    members = [st.members[name] for name in sorted(st.members)]
    if rtype in (None, "node"):
        for node in members:
            if sim.has(call.subject, f"/nodes/{node.name}", ["Sys.Audit"]):
                res.append(cluster.node_entry(sim, node))
    if rtype in (None, "storage"):
        for node in members:
            for sid in sorted(st.storages):
                s = st.storages[sid]
                if s.on_node(node.name) and sim.has(call.subject, f"/storage/{sid}", ["Datastore.Audit", "Datastore.AllocateSpace"],
                                                    any_of=True):
                    res.append({"id": f"storage/{node.name}/{sid}", "type": "storage", "storage": sid, "node": node.name,
                                "status": "available" if s.active and s.enabled and node.online else "unknown", "plugintype": s.type,
                                "content": ",".join(sorted(s.content)), "shared": s.shared, "disk": s.used_bytes(),
                                "maxdisk": s.total})
    if rtype in (None, "sdn"):
        for node in members:
            res.append({"id": f"sdn/{node.name}/localnetwork", "type": "sdn", "sdn": "localnetwork", "node": node.name,
                        "status": "ok" if node.online else "unknown"})
    return res


@route("GET", "/nodes/{node}/storage")
def node_storage(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    st = sim.state
    content = call.str("content")
    only = call.str("storage")
    enabled = call.bool("enabled")
    res = []
    for sid in sorted(st.storages):
        s = st.storages[sid]
        if only and sid != only:
            continue
        if not s.on_node(sim.call_node(call)):
            continue
        if content and not set(content.split(",")) & set(s.content):
            continue
        if enabled and not s.enabled:
            continue
        if not sim.has(call.subject, f"/storage/{sid}", ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True):
            continue
        res.append(_storage_entry(s))
    return res


@route("GET", "/nodes/{node}/storage/{storage}/status")
def storage_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    sid = str(call.params["storage"])
    s = sim.state.storages.get(sid)
    if s is None:
        raise ApiError(500, f"storage '{sid}' does not exist")
    if not s.enabled:
        raise ApiError(500, f"storage '{sid}' is disabled")
    res = _storage_entry(s)
    del res["storage"]
    return res


@route("GET", "/nodes/{node}/network")
def node_network(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    ntype = call.str("type")
    res = []
    bridges = sim.state.members[sim.call_node(call)].bridges
    for name in sorted(bridges):
        b = dict(bridges[name])
        if ntype and ntype not in (b["type"], "any_bridge"):
            continue
        res.append(b)
    return res


@route("GET", "/nodes/{node}/network/{iface}")
def node_network_iface(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    b = sim.state.members[sim.call_node(call)].bridges.get(str(call.params["iface"]))
    if b is None:
        raise ApiError(500, f"network interface '{call.params['iface']}' does not exist")
    return dict(b)


# ------------------------------------------------------------------------------------------
# qemu: listing, config, status

@route("GET", "/nodes/{node}/qemu")
def qemu_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    res = []
    for vmid in sorted(sim.state.vms):
        if sim.state.vms[vmid].node != sim.call_node(call) or not sim.has(call.subject, f"/vms/{vmid}", ["VM.Audit"]):
            continue
        vm = sim.state.vms[vmid]
        r = _vm_resource(sim, vm)
        entry = {"vmid": vmid, "name": r["name"], "status": vm.status, "cpus": r["maxcpu"], "maxmem": r["maxmem"],
                 "maxdisk": r["maxdisk"], "mem": 0, "disk": 0, "cpu": r["cpu"], "uptime": r["uptime"], "netin": 0, "netout": 0,
                 "diskread": 0, "diskwrite": 0}
        if vm.is_template:
            entry["template"] = 1
        for k in ("tags", "lock"):
            if k in r:
                entry[k] = r[k]
        if vm.status == "running":
            entry["pid"] = 4000 + vmid % 10000
        res.append(entry)
    return res


@route("GET", "/nodes/{node}/qemu/{vmid}")
def qemu_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    sim.vm(call)
    return [{"subdir": s} for s in ("config", "pending", "status", "snapshot", "agent", "cloudinit", "resize", "clone")]


@route("GET", "/nodes/{node}/qemu/{vmid}/config")
def qemu_config(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    vm = sim.vm(call)
    snap = call.str("snapshot")
    if snap:
        if snap not in vm.snapshots:
            raise ApiError(500, f"snapshot '{snap}' does not exist")
        s = vm.snapshots[snap]
        conf: dict[str, t.Any] = dict(s.conf)
        conf["snaptime"] = s.snaptime
        if s.description:
            conf["description"] = s.description
        if s.parent:
            conf["parent"] = s.parent
        conf["digest"] = vm.digest()
        return _typed(conf)
    conf = dict(vm.config) if call.bool("current") else vm.pending_config()
    conf["digest"] = vm.digest()
    if "cipassword" in conf:
        conf["cipassword"] = "**********"
    return _typed(conf)


_INT_KEYS = frozenset({"cores", "sockets", "vcpus", "balloon", "cpuunits", "shares", "migrate_speed", "template", "acpi", "kvm",
                       "onboot", "protection", "tablet", "localtime", "numa", "reboot", "freeze", "autostart", "ciupgrade", "snaptime",
                       "vmstate", "keephugepages", "allow-ksm"})


def _typed(conf: dict[str, t.Any]) -> dict[str, t.Any]:
    """PVE returns integer/boolean config values as JSON numbers."""
    res: dict[str, t.Any] = {}
    for k, v in conf.items():
        if k in _INT_KEYS and isinstance(v, str) and re.fullmatch(r"-?\d+", v):
            res[k] = int(v)
        else:
            res[k] = v
    return res


@route("GET", "/nodes/{node}/qemu/{vmid}/pending")
def qemu_pending(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    vm = sim.vm(call)
    res: list[dict[str, t.Any]] = []
    keys = sorted(set(vm.config) | set(vm.pending) | {k.lstrip("!") for k in vm.pending_delete})
    for key in keys:
        if key in ("digest",):
            continue
        item: dict[str, t.Any] = {"key": key}
        if key in vm.config:
            item["value"] = _typed({key: vm.config[key]})[key]
        if key in vm.pending:
            item["pending"] = _typed({key: vm.pending[key]})[key]
        for d in vm.pending_delete:
            if d.lstrip("!") == key:
                item["delete"] = 2 if d.startswith("!") else 1
        if key == "cipassword":
            for k in ("value", "pending"):
                if k in item:
                    item[k] = "**********"
        res.append(item)
    return res


@route("GET", "/nodes/{node}/qemu/{vmid}/status")
def qemu_status_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    sim.vm(call)
    return [{"subdir": s} for s in ("current", "start", "stop", "reset", "shutdown", "suspend", "reboot")]


@route("GET", "/nodes/{node}/qemu/{vmid}/status/current")
def qemu_status_current(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    vm = sim.vm(call)
    r = _vm_resource(sim, vm)
    res: dict[str, t.Any] = {
        "vmid": vm.vmid, "name": r["name"], "status": vm.status, "qmpstatus": vm.status, "cpus": r["maxcpu"],
        "maxmem": r["maxmem"], "maxdisk": r["maxdisk"], "mem": 0, "disk": 0, "cpu": r["cpu"], "uptime": r["uptime"],
        "netin": 0, "netout": 0, "diskread": 0, "diskwrite": 0, "ha": {"managed": 0},
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


# ------------------------------------------------------------------------------------------
# config updates

_PRIV_FOR_KEY = [
    (re.compile(r"(ide|sata|scsi|virtio)\d+|efidisk0|tpmstate0|unused\d+"), "VM.Config.Disk"),
    (re.compile(r"net\d+"), "VM.Config.Network"),
    (re.compile(r"memory|balloon|shares"), "VM.Config.Memory"),
    (re.compile(r"cores|sockets|cpu|vcpus|cpulimit|cpuunits|affinity|numa\d*"), "VM.Config.CPU"),
    (re.compile(r"ipconfig\d+|cicustom|cipassword|citype|ciupgrade|ciuser|nameserver|searchdomain|sshkeys"), "VM.Config.Cloudinit"),
    (re.compile(r"name|description|onboot|tags|protection|boot|bootdisk|agent|startup|ostype|hookscript|lock|"
                r"migrate_downtime|migrate_speed|localtime|tablet|kvm|acpi|autostart|freeze|reboot|startdate|vmstatestorage|"
                r"keyboard|template"), "VM.Config.Options"),
]


def _priv_for(key: str, value: str | None) -> str:
    if value is not None and DRIVE_RE.fullmatch(key):
        if is_cloudinit_volume(value) or value.split(",")[0].endswith(":cloudinit"):
            return "VM.Config.Cloudinit"
        if is_cdrom(value):
            return "VM.Config.CDROM"
    for regex, priv in _PRIV_FOR_KEY:
        if regex.fullmatch(key):
            return priv
    return "VM.Config.HWType"


def _sshkeys_check(value: str) -> None:
    keys = urllib.parse.unquote(value)
    for line in keys.split("\n"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not re.match(r"((sk-)?(ssh|ecdsa)-[\w@.-]+)\s+[A-Za-z0-9+/=]+", line) and not re.match(r"\S+\s+(ssh|ecdsa|sk-)", line):
            raise param_error({"sshkeys": f"invalid format - invalid ssh key '{line[:40]}'\n"})


class _ConfigChange:
    """A validated set of changes: ``sets`` (key -> value) and ``deletes``."""

    def __init__(self, call: Call) -> None:
        skip = {"node", "vmid", "digest", "delete", "revert", "skiplock", "background_delay", "force", "skip_cloud_init",
                "import-working-storage"}
        self.sets: dict[str, str] = {k: call.str(k) or "" for k in call.params if k not in skip}
        self.deletes: list[str] = [d for d in re.split(r"[,;\s\0]+", call.str("delete") or "") if d]
        self.revert: list[str] = [d for d in re.split(r"[,;\s\0]+", call.str("revert") or "") if d]
        self.digest = call.str("digest")
        self.skiplock = call.bool("skiplock")
        self.force = call.bool("force")


def _prepare_update(sim: Sim, call: Call) -> tuple[VM, _ConfigChange]:
    sim.check_node(call)
    vm = sim.vm(call)
    ch = _ConfigChange(call)
    if ch.skiplock and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    if "sshkeys" in ch.sets:
        _sshkeys_check(ch.sets["sshkeys"])
    if not ch.sets and not ch.deletes and not ch.revert:
        raise ApiError(500, "no options specified")
    for key in ch.deletes:
        if key in ch.sets:
            raise param_error({"delete": f"you can't use '-{key}' and -delete {key}' at the same time"})
    for key in ch.deletes:
        sim.require(call.subject, f"/vms/{vm.vmid}", [_priv_for(key, vm.pending_config().get(key))])
    for key, value in ch.sets.items():
        sim.require(call.subject, f"/vms/{vm.vmid}", [_priv_for(key, value)])
        if DRIVE_RE.fullmatch(key):
            vol = value.split(",")[0]
            m = re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?|cloudinit)", vol, re.I)
            if m:
                sid = m.group(1)
                if sid not in sim.state.storages:
                    raise ApiError(500, f"storage '{sid}' does not exist")
                sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace"])
        if re.fullmatch(r"net\d+", key):
            bridge = parse_kv(value, "model").get("bridge")
            if bridge:
                sim.require(call.subject, f"/sdn/zones/localnetwork/{bridge}", ["SDN.Use"])
    _early_checks(sim, vm, ch)
    return vm, ch


def _early_checks(sim: Sim, vm: VM, ch: _ConfigChange) -> None:
    del sim
    if ch.digest and ch.digest != vm.digest():
        raise ApiError(500, "checksum mismatch (file change by other user?)")
    if vm.lock and not ch.skiplock:
        raise ApiError(500, f"VM is locked ({vm.lock})")


def _hotplug_features(vm: VM) -> set[str]:
    value = vm.config.get("hotplug", "1")
    if value in ("1",):
        return {"network", "disk", "usb"}
    if value in ("0", ""):
        return set()
    return set(value.split(","))


def _hotpluggable(vm: VM, key: str) -> bool:
    feats = _hotplug_features(vm)
    if key in FAST_PLUG or re.fullmatch(r"ipconfig\d+", key):
        return True
    if re.fullmatch(r"net\d+", key):
        return "network" in feats
    if re.fullmatch(r"(scsi|virtio)\d+", key):
        return "disk" in feats
    if key in ("memory",):
        return "memory" in feats
    if key == "vcpus":
        return "cpu" in feats
    if key in ("cpuunits", "cpulimit", "balloon", "agent"):
        return key != "agent"
    return False


def _materialize(sim: Sim, vm: VM, key: str, value: str) -> str:
    """Allocate new volumes (``storage:SIZE``), cloud-init drives and MACs like qemu-server."""
    st = sim.state
    if DRIVE_RE.fullmatch(key):
        parts = value.split(",")
        m = re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?|cloudinit)", parts[0], re.I)
        if m:
            sid, size = m.group(1), m.group(2)
            storage = st.storages[sid]
            if not storage.enabled or not storage.active:
                raise TaskFailed(f"storage '{sid}' is not available on node '{vm.node}'")
            if size == "cloudinit":
                volid = f"{sid}:vm-{vm.vmid}-cloudinit"
                storage.volumes[volid] = 4 << 20
                rest = [p for p in parts[1:] if not p.startswith("media=")]
                return ",".join([volid, "media=cdrom", *rest])
            if "images" not in storage.content:
                raise TaskFailed(f"storage '{sid}' does not support vm images")
            nbytes = int(float(size) * GIB)
            if nbytes > storage.avail:
                raise TaskFailed(f"lvcreate 'pve/{st.next_disk_name(sid, vm.vmid)}' error:   Volume group \"pve\" has insufficient "
                                 f"free space ({storage.avail >> 22} extents): {nbytes >> 22} required.")
            volid = f"{sid}:{st.next_disk_name(sid, vm.vmid)}"
            storage.volumes[volid] = nbytes
            rest = [p for p in parts[1:] if not p.startswith("size=")]
            return ",".join([volid, *rest, f"size={format_size(nbytes)}"])
    if re.fullmatch(r"net\d+", key):
        parts = value.split(",")
        first = parts[0]
        if "=" in first and first.split("=", 1)[0] not in ("model", "macaddr", "bridge"):
            model, mac = first.split("=", 1)  # virtio=MAC shorthand (keyAlias)
            rest = parts[1:]
        else:
            data = parse_kv(value, "model")
            model, mac = data.pop("model", "virtio"), data.pop("macaddr", None)
            rest = [f"{k}={v}" for k, v in data.items()]
        return ",".join([f"{model}={(mac or st.new_mac()).upper()}", *rest])
    return value


def _delete_key(sim: Sim, vm: VM, key: str, force: bool) -> None:
    value = vm.config.pop(key, None)
    if value is None:
        return
    if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
        volid = value.split(",")[0]
        _unused_or_free(sim, vm, volid, force)
    elif DRIVE_RE.fullmatch(key) and is_cloudinit_volume(value):
        _free_volume(sim, value.split(",")[0])
    elif re.fullmatch(r"unused\d+", key):
        _free_volume(sim, value)


def _unused_or_free(sim: Sim, vm: VM, volid: str, force: bool) -> None:
    if force:
        _free_volume(sim, volid)
        return
    n = 0
    while f"unused{n}" in vm.config:
        n += 1
    vm.config[f"unused{n}"] = volid


def _free_volume(sim: Sim, volid: str) -> None:
    storage = sim.state.storages.get(volid.split(":", 1)[0])
    if storage is not None:
        storage.volumes.pop(volid, None)


def _apply_update(sim: Sim, vm: VM, ch: _ConfigChange, task: Task | None) -> None:
    """vmconfig changes: write to pending, then apply (stopped) or hotplug (running)."""
    st = sim.state
    with st.lock:
        _early_checks(sim, vm, ch)
        for key in ch.revert:
            vm.pending.pop(key, None)
            vm.pending_delete = [d for d in vm.pending_delete if d.lstrip("!") != key]
        if task is not None:
            params = " ".join(f"-{k} {'<hidden>' if k == 'cipassword' else v}" for k, v in sorted(ch.sets.items()))
            if ch.deletes:
                params = f"-delete {','.join(ch.deletes)} " + params
            task.log(f"update VM {vm.vmid}: {params.strip()}")
        for key in ch.deletes:
            current = vm.pending_config()
            if key not in current:
                if task is not None:
                    task.warn(f"cannot delete '{key}' - not set in current configuration!")
                continue
            if vm.status == "running" and not _hotpluggable(vm, key):
                vm.pending.pop(key, None)
                if key in vm.config:
                    marker = ("!" if ch.force else "") + key
                    vm.pending_delete = [d for d in vm.pending_delete if d.lstrip("!") != key] + [marker]
                continue
            vm.pending.pop(key, None)
            _delete_key(sim, vm, key, ch.force)
        for key, value in ch.sets.items():
            new_value = _materialize(sim, vm, key, value)
            if vm.status == "running" and not _hotpluggable(vm, key):
                vm.pending[key] = new_value
                vm.pending_delete = [d for d in vm.pending_delete if d.lstrip("!") != key]
                continue
            old = vm.config.get(key)
            if old is not None and DRIVE_RE.fullmatch(key) and not is_cdrom(old) and old.split(",")[0] != new_value.split(",")[0]:
                _unused_or_free(sim, vm, old.split(",")[0], False)
            vm.config[key] = new_value
            vm.pending.pop(key, None)
        if vm.status != "running":
            vm.cloudinit_generated = guestlink.generated_snapshot(vm.config)


@route("PUT", "/nodes/{node}/qemu/{vmid}/config")
def qemu_config_put(sim: Sim, call: Call) -> None:
    with sim.state.lock:
        vm, ch = _prepare_update(sim, call)
        try:
            _apply_update(sim, vm, ch, None)
        except TaskFailed as exc:
            raise ApiError(500, str(exc)) from exc
    return None


@route("POST", "/nodes/{node}/qemu/{vmid}/config")
def qemu_config_post(sim: Sim, call: Call) -> str | None:
    with sim.state.lock:
        vm, ch = _prepare_update(sim, call)

    def body(task: Task) -> None:
        sim.sleep("qmconfig")
        if call.fault("checksum_mismatch"):
            raise TaskFailed("checksum mismatch (file change by other user?)")
        _apply_update(sim, vm, ch, task)

    upid = sim.start_task(call, "qmconfig", str(vm.vmid), body)
    delay = call.int("background_delay")
    if delay:
        def wait() -> str | None:
            task = sim.tasks.get(upid)
            if task is not None and task.done.wait(sim.clock.real_seconds(delay)):
                if task.exitstatus == "OK" or (task.exitstatus or "").startswith("WARNINGS"):
                    return None
                raise ApiError(500, f"failed to update VM {vm.vmid}: {task.exitstatus}")
            return upid
        call.extra["wait_task"] = wait
    return upid


# ------------------------------------------------------------------------------------------
# clone

@route("POST", "/nodes/{node}/qemu/{vmid}/clone")
def qemu_clone(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    newid = int(call.params["newid"])
    storage = call.str("storage")
    fmt = call.str("format")
    snapname = call.str("snapname")
    target = call.str("target")
    pool = call.str("pool")
    if target == "localhost":
        target = sim.call_node(call)
    if target:
        cluster.member(sim, target)
    with st.lock:
        if pool is not None and pool not in st.pools:  # RPCEnvironment::check_pool_exist
            raise perm_error(f"pool '{pool}' does not exist")
        src = sim.vm(call)
        if storage:
            s = st.storages.get(storage)
            if s is None:
                raise ApiError(500, f"storage '{storage}' does not exist")
            if not s.enabled:
                raise ApiError(500, f"storage '{storage}' is disabled")
            if "images" not in s.content:
                raise param_error({"storage": f"storage '{storage}' does not support vm images"})
        if src.lock:
            raise ApiError(500, f"VM is locked ({src.lock})")
        if snapname and snapname not in src.snapshots:
            raise ApiError(500, f"snapshot '{snapname}' does not exist")
        full = call.bool("full", not src.is_template) if call.params.get("full") is not None else not src.is_template
        if storage and not full:
            raise ApiError(500, "parameter 'storage' not allowed for linked clones")
        if fmt and not full:
            raise ApiError(500, "parameter 'format' not allowed for linked clones")
        oldconf = dict(src.snapshots[snapname].conf) if snapname else dict(src.config)
        for key, value in sorted(oldconf.items()):  # check_storage_access_clone, then check_bridge_access
            if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
                sid = value.split(":", 1)[0]
                sim.require(call.subject, f"/storage/{storage if (storage and full) else sid}", ["Datastore.AllocateSpace"])
        for key, value in sorted(oldconf.items()):
            if re.fullmatch(r"net\d+", key):
                bridge = parse_kv(value, "model").get("bridge")
                if bridge:
                    sim.require(call.subject, f"/sdn/zones/localnetwork/{bridge}", ["SDN.Use"])
        if call.fault("lock_timeout"):
            raise ApiError(500, f"can't lock file '/var/lock/qemu-server/lock-{newid}.conf' - got timeout")
        if newid in st.vms:
            raise ApiError(500, f"unable to create VM {newid}: config file already exists")
        if newid in st.containers:
            # PVE finds no qemu config file, then check_vmid_unused refuses the ID held by the container.
            raise ApiError(500, f"CT {newid} already exists on node '{st.node}'")
        # create the target config with the clone lock right away (atomic under the state lock)
        target_vm = VM(newid, target or sim.call_node(call), {"lock": "clone"}, pool=pool)  # add_vm_to_pool: a member from the start
        st.vms[newid] = target_vm
        src_name = oldconf.get("name")

    # the storages the clone allocates on, counted as in flight from now until its last allocation
    alloc_storages = sorted({storage if (storage and full and not is_cloudinit_volume(v)) else v.split(":", 1)[0]
                             for k, v in oldconf.items() if DRIVE_RE.fullmatch(k) and (not is_cdrom(v) or is_cloudinit_volume(v))})
    phases = [sim.storage_locks.begin_allocating(sid) for sid in alloc_storages]

    def end_allocating() -> None:
        for phase in phases:
            phase.end()

    def body(task: Task) -> None:
        task.log(f"create {'full' if full else 'linked'} clone of VM {src.vmid} ({src_name or src.vmid})")
        newconf: dict[str, str] = {}
        allocated: list[str] = []
        drives: list[tuple[str, str]] = []
        try:
            with st.lock:
                for key in sorted(oldconf):
                    value = oldconf[key]
                    if key in ("parent", "snaptime", "vmstate", "snapstate", "runningcpu", "runningmachine", "lock", "template"):
                        continue
                    if re.fullmatch(r"unused\d+", key):
                        continue
                    if re.fullmatch(r"net\d+", key):
                        first = value.split(",")[0]
                        model = first.split("=", 1)[0] if "=" in first else first
                        rest = [p for p in value.split(",")[1:] if not p.startswith("macaddr=")]
                        newconf[key] = ",".join([f"{model}={st.new_mac()}", *rest])
                    elif DRIVE_RE.fullmatch(key) and (not is_cdrom(value) or is_cloudinit_volume(value)):
                        drives.append((key, value))
                    else:
                        newconf[key] = value
            # clone_disk per drive (sorted, like qemu-server): vdisk_alloc / vdisk_clone under the storage lock
            for index, (key, value) in enumerate(drives):
                volid = value.split(",")[0]
                if is_cloudinit_volume(value):
                    sid = volid.split(":", 1)[0]
                    task.log(f"create full clone of drive {key} ({volid})")
                    with sim.storage_locks.hold(sid, "alloc", f"{sid}:vm-{newid}-cloudinit"), st.lock:
                        new_vol = f"{sid}:vm-{newid}-cloudinit"
                        st.storages[sid].volumes[new_vol] = 4 << 20
                        allocated.append(new_vol)
                    newconf[key] = ",".join([new_vol, *value.split(",")[1:]])
                else:
                    tsid = storage if (storage and full) else volid.split(":", 1)[0]
                    task.log(f"create {'full' if full else 'linked'} clone of drive {key} ({volid})")
                    with sim.storage_locks.hold(tsid, "alloc", volid), st.lock:
                        tstore = st.storages[tsid]
                        size = st.volume_size(volid) or 0
                        if full:
                            if call.fault("disk_full") or size > tstore.avail:
                                name = st.next_disk_name(tsid, newid)
                                raise TaskFailed(f"lvcreate 'pve/{name}' error:   Volume group \"pve\" has "
                                                 f"insufficient free space ({tstore.avail >> 22} extents): {size >> 22} required.")
                            new_vol = f"{tsid}:{st.next_disk_name(tsid, newid)}"
                        else:
                            base = volid.split(":", 1)[1].split("/")[0]
                            new_vol = f"{tsid}:{base}/{st.next_disk_name(tsid, newid)}"
                        tstore.volumes[new_vol] = size
                        allocated.append(new_vol)
                        imagebuild.clone_image_file(sim, volid, new_vol)  # --guests real: the clone boots the source's content
                    newconf[key] = ",".join([new_vol, *value.split(",")[1:]])
                if index == len(drives) - 1:
                    end_allocating()  # before the last line a client could read as "allocations done"
                if full or is_cloudinit_volume(value):
                    task.log(f"allocated target volume '{new_vol}'")  # qemu-server clone_disk (commit 473b6774)
            end_allocating()
            with st.lock:
                smbios = parse_kv(newconf.get("smbios1", ""), "uuid")
                smbios["uuid"] = st.new_uuid()
                newconf["smbios1"] = print_kv(smbios, "")
                if newconf.get("vmgenid"):
                    newconf["vmgenid"] = st.new_uuid()
                newconf["name"] = call.str("name") or f"Copy-of-VM-{src_name or src.vmid}"
                if call.str("description"):
                    newconf["description"] = call.str("description") or ""
                newconf["lock"] = "clone"
                target_vm.config = newconf
            if full:
                for vol in allocated:
                    gib = (st.volume_size(vol) or 0) / GIB
                    task.log(f"transferred {gib:.1f} GiB of {gib:.1f} GiB (100.00%)")
            sim.sleep("qmclone_full" if full else "qmclone_linked")
            with st.lock:
                target_vm.config.pop("lock", None)
                target_vm.cloudinit_generated = guestlink.generated_snapshot(target_vm.config)
        except BaseException as err:
            end_allocating()
            # qemu-server clone_vm: vdisk_free every new volume (each under the storage lock; a failure only
            # warns and leaves the volume), then unlink the new config file, then die "clone failed: ..."
            for vol in allocated:
                try:
                    with sim.storage_locks.hold(vol.split(":", 1)[0], "free", vol), st.lock:
                        _free_volume(sim, vol)
                except TaskFailed as free_err:
                    task.log(str(free_err))
            with st.lock:
                if st.vms.get(newid) is target_vm:
                    del st.vms[newid]
            if isinstance(err, TaskFailed):
                raise TaskFailed(f"clone failed: {err}") from err
            raise

    def on_finish(task: Task) -> None:
        end_allocating()
        if task.lines and task.lines[-1].startswith("TASK ERROR"):
            with st.lock:
                vm2 = st.vms.get(newid)
                if vm2 is target_vm:
                    for key, value in list(vm2.config.items()):
                        if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
                            _free_volume(sim, value.split(",")[0])
                    del st.vms[newid]

    return sim.start_task(call, "qmclone", str(src.vmid), body, on_finish)


# ------------------------------------------------------------------------------------------
# resize

@route("PUT", "/nodes/{node}/qemu/{vmid}/resize")
def qemu_resize(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    with st.lock:
        vm = sim.vm(call)
        current = vm.config.get(str(call.params["disk"]))
    disk = str(call.params["disk"])
    sizestr = str(call.params["size"])
    digest = call.str("digest")
    skiplock = call.bool("skiplock")
    if skiplock and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    # LVMPlugin::volume_resize runs lvextend under the storage lock (LVM and LVM-thin)
    lock_sid = current.split(":", 1)[0] if current and not is_cdrom(current) and ":" in current else None
    if lock_sid not in st.storages or st.storages[lock_sid].type not in ("lvm", "lvmthin"):
        lock_sid = None
    phase = sim.storage_locks.begin_allocating(lock_sid) if lock_sid else None

    def grow(task: Task) -> None:
        with st.lock:
            if digest and digest != vm.digest() or call.fault("checksum_mismatch"):
                raise TaskFailed("checksum mismatch (file change by other user?)")
            if vm.lock and not skiplock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            value = vm.config.get(disk)
            if value is None:
                raise TaskFailed(f"disk '{disk}' does not exist")
            if is_cdrom(value):
                raise TaskFailed("you can't resize a cdrom")
            volid = value.split(",")[0]
            sid = volid.split(":", 1)[0]
            sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace"])
            size = st.volume_size(volid)
            if size is None:
                raise TaskFailed(f"Could not determine current size of volume '{volid}'")
            m = re.fullmatch(r"(\+)?(\d+(?:\.\d+)?)([KMGT])?", sizestr)
            if not m:
                raise TaskFailed("internal error")
            newsize = float(m.group(2)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(m.group(3) or "", 1)
            if m.group(1):
                newsize += size
            new = int(newsize)
            if new < size:
                raise TaskFailed("shrinking disks is not supported")
            if new == size:
                return
            storage = st.storages[sid]
            if call.fault("disk_full") or new - size > storage.avail:
                raise TaskFailed(f"lvextend 'pve/{volid.split(':', 1)[1]}' error:   Insufficient free space: "
                                 f"{(new - size) >> 22} extents needed, but only {storage.avail >> 22} available")
            task.log(f"  Size of logical volume pve/{volid.split(':', 1)[1].split('/')[-1]} changed from "
                     f"{format_size(size)} to {format_size(new)}.")
            storage.volumes[volid] = new
            parts = [p for p in value.split(",")[1:] if not p.startswith("size=")]
            vm.config[disk] = ",".join([volid, *parts, f"size={format_size(new)}"])

    def body(task: Task) -> None:
        if lock_sid is None:
            grow(task)
        else:
            with sim.storage_locks.hold(lock_sid, "resize", current.split(",")[0] if current else ""):
                grow(task)
        sim.sleep("resize")

    def on_finish(task: Task) -> None:
        if phase is not None:
            phase.end()

    return sim.start_task(call, "resize", str(vm.vmid), body, on_finish)


# ------------------------------------------------------------------------------------------
# power state

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
                    if re.fullmatch(r"net\d+", key):
                        bridge = parse_kv(value, "model").get("bridge")
                        if bridge and bridge not in st.members[vm.node].bridges:
                            raise TaskFailed(f"bridge '{bridge}' does not exist")
                    if DRIVE_RE.fullmatch(key) and not is_cdrom(value) or (DRIVE_RE.fullmatch(key) and is_cloudinit_volume(value)):
                        sid = value.split(":", 1)[0]
                        s = st.storages.get(sid)
                        if s is None:
                            raise TaskFailed(f"storage '{sid}' does not exist")
                        if not s.enabled or not s.active:
                            raise TaskFailed(f"storage '{sid}' is not available on node '{vm.node}'")
            sim.sleep("qmstart")
            with st.lock:
                # apply pending changes (PVE applies [PENDING] on start) and regenerate cloud-init
                for d in vm.pending_delete:
                    _delete_key(sim, vm, d.lstrip("!"), d.startswith("!"))
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
        _delete_key(sim, vm, d.lstrip("!"), d.startswith("!"))
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


# ------------------------------------------------------------------------------------------
# destroy

@route("DELETE", "/nodes/{node}/qemu/{vmid}")
def qemu_destroy(sim: Sim, call: Call) -> str:
    """PVE's destroy_vm: early checks (protection, running) in the request and again under the config lock in the
    ``qmdestroy`` worker, which then refuses a locked VM, frees the VM's volumes (with ``destroy-unreferenced-disks``
    also its volumes on enabled storages that the config does not reference) and removes the config last."""
    sim.check_node(call)
    st = sim.state
    skiplock = call.bool("skiplock")
    if skiplock and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    unreferenced = call.bool("destroy-unreferenced-disks")

    def early_checks(vm: VM, fail: t.Callable[[str], Exception]) -> None:
        if vm.config.get("protection") == "1":
            raise fail(f"can't remove VM {vm.vmid} - protection mode enabled")
        if vm.status == "running":
            raise fail(f"VM {vm.vmid} is running - destroy failed")

    with st.lock:
        vm = sim.vm(call)
        early_checks(vm, lambda message: ApiError(500, message))

    def body(task: Task) -> None:
        with st.lock:
            if st.vms.get(vm.vmid) is not vm:
                raise TaskFailed(f"Configuration file 'nodes/{st.node}/qemu-server/{vm.vmid}.conf' does not exist")
            early_checks(vm, TaskFailed)
            if vm.lock and not skiplock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            linked = [v for v in st.vms.values() for val in v.config.values()
                      if v is not vm and vm.is_template and f"base-{vm.vmid}-disk" in val and "/" in val.split(",")[0]]
            if linked:
                raise TaskFailed(f"base volume of template {vm.vmid} is used by linked clones")
            vm.config["lock"] = "destroyed"
        sim.sleep("qmdestroy")
        with st.lock:
            volids = [value.split(",")[0] for key, value in vm.config.items()
                      if (DRIVE_RE.fullmatch(key) or re.fullmatch(r"unused\d+", key)) and (not is_cdrom(value) or is_cloudinit_volume(value))]
            for snap in vm.snapshots.values():
                volids += [value.split(",")[0] for key, value in snap.conf.items() if DRIVE_RE.fullmatch(key)]
            referenced = set(volids)
            if unreferenced:
                owned = re.compile(rf"(^|/)(vm|base)-{vm.vmid}-")
                for storage in st.storages.values():
                    volids += [v for v in storage.volumes if storage.enabled and owned.search(v.split(":", 1)[-1])]
        # destroy_vm: vdisk_free per volume (under the storage lock); a failure warns and leaves the volume
        for volid in dict.fromkeys(volids):
            try:
                with sim.storage_locks.hold(volid.split(":", 1)[0], "free", volid), st.lock:
                    if volid not in referenced:
                        task.log(f"  Removed unreferenced volume '{volid}'")
                    elif sim.state.volume_size(volid) is not None:
                        task.log(f"  Logical volume \"{volid.split(':', 1)[-1].split('/')[-1]}\" successfully removed.")
                    _free_volume(sim, volid)
            except TaskFailed as err:
                task.warn(f"Could not remove disk '{volid}', check manually: {err}")
        with st.lock:
            st.vms.pop(vm.vmid, None)
        guestlink.forget_vm(sim, vm.vmid)

    return sim.start_task(call, "qmdestroy", str(vm.vmid), body)


# ------------------------------------------------------------------------------------------
# snapshots

RESERVED_SNAPNAMES = ("current", "pending")


@route("GET", "/nodes/{node}/qemu/{vmid}/snapshot")
def snapshot_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    vm = sim.vm(call)
    res: list[dict[str, t.Any]] = []
    for name, s in sorted(vm.snapshots.items()):
        entry: dict[str, t.Any] = {"name": name, "snaptime": s.snaptime, "description": s.description}
        if s.vmstate:
            entry["vmstate"] = 1
        if s.parent:
            entry["parent"] = s.parent
        res.append(entry)
    current: dict[str, t.Any] = {"name": "current", "digest": vm.digest(), "description": "You are here!",
                                 "running": 1 if vm.status == "running" else 0}
    if vm.config.get("parent"):
        current["parent"] = vm.config["parent"]
    res.append(current)
    return res


@route("POST", "/nodes/{node}/qemu/{vmid}/snapshot")
def snapshot_create(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    snapname = str(call.params["snapname"])
    with st.lock:
        vm = sim.vm(call)
    if snapname.lower() in RESERVED_SNAPNAMES:
        raise ApiError(500, f"unable to use snapshot name '{snapname.lower()}' (reserved name)")
    vmstate = call.bool("vmstate")
    description = call.str("description") or ""

    def body(task: Task) -> None:
        with st.lock:
            if vm.lock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            if snapname in vm.snapshots:
                raise TaskFailed(f"snapshot name '{snapname}' already used")
            vm.config["lock"] = "snapshot"
        try:
            with_state = vmstate and vm.status == "running"
            if with_state:
                task.log("saving VM state and RAM using storage 'local-lvm'")
            sim.sleep("qmsnapshot_vmstate" if with_state else "qmsnapshot")
            with st.lock:
                conf = {k: v for k, v in vm.config.items() if k not in ("lock", "parent", "description")}
                for key, value in list(conf.items()):
                    if DRIVE_RE.fullmatch(key) and not is_cdrom(value):
                        task.log(f"snapshotting '{key}' ({value.split(',')[0]})")
                vm.snapshots[snapname] = Snapshot(snapname, conf, int(time.time()), description, with_state, vm.config.get("parent"))
                vm.config["parent"] = snapname
        finally:
            with st.lock:
                if vm.config.get("lock") == "snapshot":
                    del vm.config["lock"]

    return sim.start_task(call, "qmsnapshot", str(vm.vmid), body)


@route("GET", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}")
def snapshot_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    vm = sim.vm(call)
    sim.require(call.subject, f"/vms/{vm.vmid}", ["VM.Audit"])
    if str(call.params["snapname"]) not in vm.snapshots:
        raise ApiError(500, f"snapshot '{call.params['snapname']}' does not exist")
    return [{"subdir": "rollback"}, {"subdir": "config"}]


@route("GET", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/config")
def snapshot_config(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    vm = sim.vm(call)
    name = str(call.params["snapname"])
    s = vm.snapshots.get(name)
    if s is None:
        raise ApiError(500, f"snapshot '{name}' does not exist")
    conf: dict[str, t.Any] = dict(s.conf)
    conf["snaptime"] = s.snaptime
    if s.description:
        conf["description"] = s.description
    if s.parent:
        conf["parent"] = s.parent
    conf["digest"] = vm.digest()
    return _typed(conf)


@route("DELETE", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}")
def snapshot_delete(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    name = str(call.params["snapname"])
    with st.lock:
        vm = sim.vm(call)
    force = call.bool("force")

    def body(task: Task) -> None:
        with st.lock:
            if name not in vm.snapshots:
                raise TaskFailed(f"snapshot '{name}' does not exist")
            if vm.lock and not force:
                raise TaskFailed(f"VM is locked ({vm.lock})")
        sim.sleep("qmdelsnapshot")
        with st.lock:
            snap = vm.snapshots.pop(name)
            task.log(f"delete snapshot '{name}'")
            for other in vm.snapshots.values():
                if other.parent == name:
                    other.parent = snap.parent
            if vm.config.get("parent") == name:
                if snap.parent:
                    vm.config["parent"] = snap.parent
                else:
                    vm.config.pop("parent", None)

    return sim.start_task(call, "qmdelsnapshot", str(vm.vmid), body)


@route("POST", "/nodes/{node}/qemu/{vmid}/snapshot/{snapname}/rollback")
def snapshot_rollback(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    name = str(call.params["snapname"])
    with st.lock:
        vm = sim.vm(call)
        if name not in vm.snapshots:
            raise ApiError(500, f"snapshot '{name}' does not exist")
    start = call.bool("start")

    def body(task: Task) -> None:
        with st.lock:
            if vm.lock:
                raise TaskFailed(f"VM is locked ({vm.lock})")
            snap = vm.snapshots[name]
            if vm.status == "running" and not snap.vmstate:
                guestlink.stop_guest(vm.guest)
                vm.status, vm.guest, vm.started_at = "stopped", None, None
            desc = vm.config.get("description")
            vm.config = dict(snap.conf)
            if desc is not None:
                vm.config["description"] = desc
            vm.config["parent"] = name
            vm.pending, vm.pending_delete = {}, []
            task.log(f"rollback to snapshot '{name}'")
        sim.sleep("qmrollback")
        if start or snap.vmstate:
            with st.lock:
                vm.status = "running"
                vm.started_at = sim.clock.now()
                vm.guest = guestlink.create_guest(sim, vm)

    return sim.start_task(call, "qmrollback", str(vm.vmid), body)


# ------------------------------------------------------------------------------------------
# cloud-init

@route("GET", "/nodes/{node}/qemu/{vmid}/cloudinit/dump")
def cloudinit_dump(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    vm = sim.vm(call)
    if call.fault("cloudinit_error"):
        raise ApiError(500, str(call.fault("cloudinit_error").params.get("message", "unable to generate cloud-init config")))  # type: ignore
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


# ------------------------------------------------------------------------------------------
# guest agent

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
    return {"result": _agent(sim, call, guestlink.get_osinfo)}


@route("GET", "/nodes/{node}/qemu/{vmid}/agent/info")
def agent_info(sim: Sim, call: Call) -> dict[str, t.Any]:
    return {"result": _agent(sim, call, guestlink.get_info)}


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


# ------------------------------------------------------------------------------------------
# tasks

def _task_visible(sim: Sim, subject: str, task: Task) -> bool:
    if sim.has(subject, f"/nodes/{task.node}", ["Sys.Audit"]):
        return True
    if "!" in task.user:
        return subject in (task.user, task.user.split("!")[0])
    return subject == task.user


def _get_task(sim: Sim, call: Call, audit: bool = True) -> Task:
    sim.check_node(call)
    upid = str(call.params["upid"])
    if not re.fullmatch(r"UPID:[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:(-?[0-9A-Fa-f]{8}):"
                        r"[^:\s]+:[^:\s]*:[^:\s]+:", upid):
        raise ApiError(500, "unable to parse worker upid")
    task = sim.tasks.get(upid)
    if task is None or task.node != sim.call_node(call):  # each node keeps its own task log
        raise ApiError(500, f"unable to open file '/var/log/pve/tasks/{upid[-3:-1]}/{upid}' - No such file or directory")
    if audit and not _task_visible(sim, call.subject, task):
        raise perm_error(f"/nodes/{task.node}, Sys.Audit")
    return task


@route("GET", "/nodes/{node}/tasks")
def task_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    node = sim.call_node(call)
    res, total = sim.tasks.list(call.params, lambda task: task.node == node and _task_visible(sim, call.subject, task))
    call.extra["total"] = total
    return res


@route("GET", "/nodes/{node}/tasks/{upid}")
def task_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    _get_task(sim, call)
    return [{"name": "log"}, {"name": "status"}]


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def task_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    return _get_task(sim, call).status_dict()


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def task_log(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    task = _get_task(sim, call)
    if call.bool("download") and (call.params.get("start") is not None or call.params.get("limit") is not None):
        raise ApiError(500, "'download' cannot be used together with 'start' or 'limit' parameters")
    start = call.int("start", 0) or 0
    limit = call.int("limit", 50)
    limit = 50 if limit is None else limit
    lines = list(task.lines) or ["no content"]
    total = len(lines)
    res = [{"n": i + 1, "t": line} for i, line in enumerate(lines)][start:start + limit]
    call.extra["total"] = total
    return res


@route("DELETE", "/nodes/{node}/tasks/{upid}")
def task_stop(sim: Sim, call: Call) -> None:
    task = _get_task(sim, call, audit=False)
    if call.subject not in (task.user, task.user.split("!")[0]):
        sim.require(call.subject, f"/nodes/{task.node}", ["Sys.Modify"])
    return None


# Several cluster nodes (the ``cluster`` seed, /cluster/status, the SDN VNet list) register here too.
from . import cluster  # noqa: E402  pylint: disable=wrong-import-position,cyclic-import
from . import imagebuild  # noqa: E402,F401  pylint: disable=wrong-import-position,cyclic-import,unused-import
from . import lxc  # noqa: E402,F401  pylint: disable=wrong-import-position,cyclic-import,unused-import
