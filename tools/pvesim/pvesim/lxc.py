# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Containers (``/nodes/{node}/lxc``), appliance templates (``aplinfo``) and storage content.

Listed in the route table (``routes.py``) like every other endpoint module. Behaviour and messages follow
pve-container (``PVE::API2::LXC``, ``::Status``, ``::Snapshot``, ``PVE::LXC::Config``) and
pve-manager (``PVE::API2::Nodes`` ``aplinfo``/``apl_download``, ``PVE::API2::Storage::Content``):

* create is a ``vzcreate`` task whose id is the new VMID; the config is reserved at once with
  ``lock: create`` (so ``/cluster/resources`` and ``nextid`` see the ID while the task runs) and
  removed again, with its volumes, when the task fails;
* containers are unprivileged unless ``unprivileged=0`` is given, which needs ``Sys.Modify`` on ``/``;
  a user other than root@pam may set only the ``nesting`` feature;
* ``rootfs`` ``STORAGE:SIZE_GIB`` (or a bare size on ``storage``, default 4 GiB) allocates
  ``vm-<vmid>-disk-<n>`` on a storage with ``rootdir`` content; ``net[n]`` gets ``hwaddr`` (the Proxmox
  OUI) and ``type=veth`` when not given;
* ``ssh-public-keys`` and ``password`` go into the root file system, never into the config;
* ``interfaces`` lists ``lo`` and every ``net[n]`` of a running container by its ``hwaddr``; a DHCP
  address appears ``ct_dhcp`` simulated seconds after the start (never with the ``dhcp_never`` knob),
  a static ``ip=`` at once;
* the appliance index is a small fixed catalogue (``APPLIANCES``); ``POST aplinfo`` is a ``download``
  task (id = the template file name) that adds ``STORAGE:vztmpl/<template>`` to a storage with
  ``vztmpl`` content.

With ``--containers real`` (``sim.container_backend``, :mod:`pvesim.realcontainer`) create, start,
shutdown/stop and delete also act on a real LXC container, and ``interfaces`` shows the address only
once the container's sshd answers; the API behaviour is otherwise the same.

Container records live in ``State.containers`` (a dict per VMID) so the VM paths (``nextid``, clone
target refusal, ``/cluster/resources``) keep seeing them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
import typing as t

from .api.core import DURATIONS, ApiError, Call, Sim, param_error, perm_error, route
from .state import GIB, format_size, parse_kv
from .tasks import Task, TaskFailed
from .vmnet import ipv6_prefix

# simulated task durations (seconds of simulated time), tunable like the qemu ones (PUT /_pvesim/timings)
DURATIONS.update(
    {
        "vzcreate": 6.0,
        "vzstart": 1.5,
        "vzstop": 1.0,
        "vzshutdown": 2.0,
        "vzdestroy": 1.5,
        "vzsnapshot": 1.0,
        "vzdelsnapshot": 1.0,
        "download": 4.0,
        "ct_dhcp": 3.0,
    }
)

TEMPLATE_CACHE = "/var/lib/vz/template/cache"
# What the demo ``full`` token lacks for containers: the template storage ``local`` (list its ``vztmpl``
# content, read the template, download from the appliance index). Not in the seed, so the VM-only
# views (capabilities, onboarding) stay as they are; tests grant it with ``PvesimAdmin.set_token``.
TEMPLATE_STORAGE_ACL: dict[str, list[str]] = {"/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]}
MB = 1 << 20


_FORMATS = {".tar.zst": "tzst", ".tar.gz": "tgz", ".tar.xz": "txz", ".tar.bz2": "tbz2"}
_INT_KEYS = frozenset(
    {"cores", "memory", "swap", "cpuunits", "onboot", "unprivileged", "protection", "template", "tty", "snaptime"}
)
# create parameters that are not config keys (pve-container extracts them first)
_NOT_CONFIG = frozenset(
    {
        "node",
        "vmid",
        "ostemplate",
        "password",
        "ssh-public-keys",
        "storage",
        "pool",
        "start",
        "force",
        "restore",
        "unique",
        "bwlimit",
        "ignore-unpack-errors",
        "ha-managed",
        "unprivileged",
    }
)


# ------------------------------------------------------------------------------------------
# the record


def _backend(sim: Sim) -> t.Any:
    """The real container runtime (``--containers real``) or None."""
    return getattr(sim, "container_backend", None)


def _real(what: str, action: t.Callable[[], None]) -> None:
    """Run a real-container action inside a task; its failure fails the task as a Proxmox error would."""
    try:
        action()
    except Exception as exc:  # pylint: disable=broad-exception-caught  # ContainerRootfsError, OSError, subprocess errors
        raise TaskFailed(f"{what} failed: {exc}") from exc


def new_record(vmid: int, node: str, config: dict[str, str], status: str = "stopped") -> dict[str, t.Any]:
    return {
        "name": config.get("hostname", f"CT{vmid}"),
        "template": config.get("template") == "1",
        "status": status,
        "node": node,
        "config": config,
        "snapshots": {},
        "started_at": None,
        "ssh_keys": "",
        "pool": None,
    }


def record(sim: Sim, call: Call) -> dict[str, t.Any]:
    """The container of the call's ``{vmid}`` on the call's node (PVE: its config file in the node's directory)."""
    vmid = int(call.params["vmid"])
    node = sim.call_node(call)
    ct = sim.state.containers.get(vmid)
    if ct is None or ct.get("node", sim.state.node) != node:
        raise ApiError(500, f"Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist")
    return complete(vmid, ct, node)


def complete(vmid: int, ct: dict[str, t.Any], node: str) -> dict[str, t.Any]:
    """Records made by the admin API (``PUT /_pvesim/containers/{vmid}``) carry only name/template/status: fill in a config."""
    if "config" not in ct:
        ct.update(
            new_record(
                vmid,
                node,
                {
                    "hostname": ct.get("name", f"CT{vmid}"),
                    "arch": "amd64",
                    "ostype": "debian",
                    "memory": "512",
                    "swap": "512",
                    **({"template": "1"} if ct.get("template") else {}),
                },
                ct.get("status", "stopped"),
            )
        )
    return ct


def raw_config(ct: dict[str, t.Any]) -> str:
    def section(conf: dict[str, str]) -> str:
        text = "".join(f"#{line}\n" for line in conf["description"].split("\n")) if conf.get("description") else ""
        return text + "".join(f"{key}: {conf[key]}\n" for key in sorted(conf) if key != "description")

    raw = section(ct["config"])
    for name in sorted(ct["snapshots"]):
        snap = ct["snapshots"][name]
        raw += f"\n[{name}]\n" + section({**snap.conf, "snaptime": str(snap.snaptime)})
    return raw


def digest(ct: dict[str, t.Any]) -> str:
    return hashlib.sha1(raw_config(ct).encode()).hexdigest()


def _typed(conf: dict[str, t.Any]) -> dict[str, t.Any]:
    return {
        k: int(v) if k in _INT_KEYS and isinstance(v, str) and re.fullmatch(r"-?\d+", v) else v for k, v in conf.items()
    }


def _volume_size(ct: dict[str, t.Any]) -> int:
    size = parse_kv(ct["config"].get("rootfs", ""), "volume").get("size")
    m = re.fullmatch(r"(\d+)([KMGT])?", size or "")
    if not m:
        return 0
    return int(m.group(1)) * {"K": 1 << 10, "M": MB, "G": GIB, "T": 1 << 40}.get(m.group(2) or "", 1)


def _uptime(sim: Sim, ct: dict[str, t.Any]) -> int:
    return int(sim.clock.now() - ct["started_at"]) if ct["status"] == "running" and ct["started_at"] is not None else 0


def _status_entry(sim: Sim, vmid: int, ct: dict[str, t.Any]) -> dict[str, t.Any]:
    conf = ct["config"]
    res: dict[str, t.Any] = {
        "vmid": vmid,
        "name": conf.get("hostname", f"CT{vmid}"),
        "status": ct["status"],
        "type": "lxc",
        "cpus": int(conf.get("cores", "1")),
        "maxmem": int(conf.get("memory", "512")) * MB,
        "maxswap": int(conf.get("swap", "512")) * MB,
        "maxdisk": _volume_size(ct),
        "mem": 0,
        "swap": 0,
        "disk": 0,
        "cpu": 0.01 if ct["status"] == "running" else 0,
        "uptime": _uptime(sim, ct),
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    }
    for key in ("tags", "lock"):
        if conf.get(key):
            res[key] = conf[key]
    if conf.get("template") == "1":
        res["template"] = 1
    if ct["status"] == "running":
        res["pid"] = 5000 + vmid % 10000
    return res


# ------------------------------------------------------------------------------------------
# listing, config, status


@route("GET", "/nodes/{node}/lxc")
def lxc_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    node = sim.call_node(call)
    return [
        _status_entry(sim, vmid, complete(vmid, ct, node))
        for vmid, ct in sorted(sim.state.containers.items())
        if ct.get("node", sim.state.node) == node and sim.has(call.subject, f"/vms/{vmid}", ["VM.Audit"])
    ]


@route("GET", "/nodes/{node}/lxc/{vmid}")
def lxc_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    record(sim, call)
    return [
        {"subdir": s}
        for s in (
            "config",
            "status",
            "snapshot",
            "interfaces",
            "pending",
            "rrd",
            "rrddata",
            "firewall",
            "clone",
            "migrate",
            "resize",
        )
    ]


@route("GET", "/nodes/{node}/lxc/{vmid}/config")
def lxc_config(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    ct = record(sim, call)
    snapname = call.str("snapshot")
    if snapname:
        snap = ct["snapshots"].get(snapname)
        if snap is None:
            raise ApiError(500, f"snapshot '{snapname}' does not exist")
        conf: dict[str, t.Any] = {**snap.conf, "snaptime": snap.snaptime}
        if snap.description:
            conf["description"] = snap.description
    else:
        conf = dict(ct["config"])
    conf["digest"] = digest(ct)
    return _typed(conf)


@route("GET", "/nodes/{node}/lxc/{vmid}/status")
def lxc_status_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    record(sim, call)
    return [{"subdir": s} for s in ("current", "start", "stop", "shutdown", "reboot", "suspend", "resume")]


@route("GET", "/nodes/{node}/lxc/{vmid}/status/current")
def lxc_status_current(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    ct = record(sim, call)
    return {**_status_entry(sim, int(call.params["vmid"]), ct), "ha": {"managed": 0}}


# ------------------------------------------------------------------------------------------
# create


def _check_modify_perm(sim: Sim, call: Call, vmid: int, unprivileged: bool) -> None:
    """``PVE::LXC::check_ct_modify_config_perm`` for the create parameters."""
    path = f"/vms/{vmid}"
    for key in sorted(call.params):
        if key in _NOT_CONFIG:
            continue
        if key == "rootfs" or re.fullmatch(r"mp\d+", key):
            sim.require(call.subject, path, ["VM.Config.Disk"])
        elif re.fullmatch(r"net\d+", key):
            sim.require(call.subject, path, ["VM.Config.Network"])
            sim.require_vnet(call.subject, parse_kv(call.str(key) or "", "name"))
        elif key in ("cores", "cpulimit", "cpuunits"):
            sim.require(call.subject, path, ["VM.Config.CPU"])
        elif key in ("memory", "swap"):
            sim.require(call.subject, path, ["VM.Config.Memory"])
        elif key == "features":
            features = parse_kv(call.str(key) or "", "")
            if call.userid != "root@pam" and (not unprivileged or set(features) - {"nesting"}):
                raise perm_error("changing feature flags (except nesting) is only allowed for root@pam")
            sim.require(call.subject, path, ["VM.Config.Options"])
        else:  # hostname, description, tags, onboot, nameserver ...: the options
            sim.require(call.subject, path, ["VM.Config.Options"])


def _template_volume(sim: Sim, call: Call, vmid: int, ostemplate: str) -> str:
    """``check_volume_access`` + ``abs_filesystem_path``: the template's file name."""
    m = re.fullmatch(r"([a-zA-Z][-_.a-zA-Z0-9]*):vztmpl/([^/]+)", ostemplate)
    if not m:
        raise ApiError(500, f"unable to parse volume ID '{ostemplate}'")
    sid, name = m.groups()
    storage = sim.state.storages.get(sid)
    if storage is None or not storage.on_node(sim.call_node(call)):
        raise ApiError(500, f"storage '{sid}' does not exist")
    del vmid  # PVE allows a volume owned by the VMID itself too; templates have no owner
    sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace", "Datastore.Audit"], any_of=True)
    if ostemplate not in storage.volumes:
        raise ApiError(500, f"can't find file '{ostemplate}'")
    return name


def _rootfs(sim: Sim, call: Call) -> tuple[str, int, str]:
    """(storage, size in bytes, the rest of the property string) of ``rootfs`` (default ``storage:4``)."""
    default_storage = call.str("storage") or "local"
    value = call.str("rootfs") or "4"
    parts = parse_kv(value, "volume")
    volume = parts.pop("volume", "4")
    if re.fullmatch(r"\d+(\.\d+)?", volume):
        sid, size = default_storage, volume
    else:
        m = re.fullmatch(r"([a-zA-Z][-_.a-zA-Z0-9]*):(\d+(?:\.\d+)?)", volume)
        if not m:
            raise param_error({"rootfs": "only a new volume STORAGE:SIZE_GIB is simulated"})
        sid, size = m.groups()
    storage = sim.state.storages.get(sid)
    if storage is None or not storage.on_node(sim.call_node(call)):
        raise ApiError(500, f"storage '{sid}' does not exist")
    if "rootdir" not in storage.content:
        raise param_error({"storage": f"storage '{sid}' does not support container directories"})
    sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace"])
    return sid, int(float(size) * GIB), ",".join(f"{k}={v}" for k, v in parts.items() if k != "size")


def _network(sim: Sim, value: str) -> str:
    net = parse_kv(value, "name")
    if "hwaddr" not in net:
        net["hwaddr"] = sim.state.new_mac()
    net.setdefault("type", "veth")
    return ",".join(f"{k}={net[k]}" for k in ["name", *sorted(k for k in net if k != "name")] if k in net)


def _ostype(template: str) -> str:
    distro = template.split("-", 1)[0].lower()
    return (
        distro
        if distro
        in ("debian", "ubuntu", "centos", "fedora", "opensuse", "archlinux", "alpine", "gentoo", "nixos", "devuan")
        else "unmanaged"
    )


@route("POST", "/nodes/{node}/lxc")
def lxc_create(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    vmid = int(call.params["vmid"])
    node = sim.call_node(call)
    if call.bool("restore"):
        raise param_error({"restore": "restoring a backup is not simulated"})
    pool = call.str("pool")
    in_pool = bool(pool) and sim.has(call.subject, f"/pool/{pool}", ["VM.Allocate"])
    if not sim.has(call.subject, f"/vms/{vmid}", ["VM.Allocate"]) and not in_pool:
        raise perm_error(f"/vms/{vmid}, VM.Allocate")
    unprivileged = call.bool("unprivileged", True)
    if not unprivileged:
        sim.require(call.subject, "/", ["Sys.Modify"])
    _check_modify_perm(sim, call, vmid, unprivileged)
    template = _template_volume(sim, call, vmid, str(call.params["ostemplate"]))
    sid, size, rootfs_rest = _rootfs(sim, call)
    if vmid in st.vms:
        raise ApiError(500, f"VM {vmid} already exists on node '{st.vms[vmid].node}'")
    if vmid in st.containers:
        raise ApiError(500, f"CT {vmid} already exists on node '{st.containers[vmid].get('node', st.node)}'")
    config: dict[str, str] = {}
    for key in sorted(call.params):
        if key in _NOT_CONFIG or key in ("rootfs",):
            continue
        value = call.str(key) or ""
        config[key] = _network(sim, value) if re.fullmatch(r"net\d+", key) else value
    ct = new_record(vmid, node, {"lock": "create"})  # the empty config written under the lock reserves the ID
    ct["pool"] = pool
    st.containers[vmid] = ct
    start = call.bool("start")

    def body(task: Task) -> None:
        volid = ""
        try:
            with st.lock:
                storage = st.storages[sid]
                disk = st.next_disk_name(sid, vmid)
                if call.fault("disk_full") or size > storage.avail:
                    raise TaskFailed(
                        f"lvcreate 'pve/{disk}' error:   Volume group \"pve\" has insufficient free space "
                        f"({storage.avail >> 22} extents): {size >> 22} required."
                    )
                volid = f"{sid}:{disk}"
                storage.volumes[volid] = size
                task.log(f'  Logical volume "{disk}" created.')
                task.log(f"extracting archive '{TEMPLATE_CACHE}/{template}'")
            sim.sleep("vzcreate")
            backend = _backend(sim)
            if backend is not None:
                _real(
                    "creating the real container",
                    lambda: backend.create(
                        vmid, config.get("hostname", f"CT{vmid}"), str(call.params.get("ssh-public-keys") or "")
                    ),
                )
            with st.lock:
                task.log("Total bytes read: 524288000 (500MiB, 250MiB/s)")
                ostype = _ostype(template)
                task.log("Detected container architecture: amd64")
                final = {
                    "arch": "amd64",
                    "ostype": ostype,
                    "hostname": f"CT{vmid}",
                    "memory": "512",
                    "swap": "512",
                    **config,
                    "rootfs": ",".join(p for p in (volid, rootfs_rest, f"size={format_size(size)}") if p),
                }
                if unprivileged:
                    final["unprivileged"] = "1"
                if call.params.get("ssh-public-keys"):
                    task.log("Creating SSH host key 'ssh_host_ed25519_key' - this may take some time ...")
                    ct["ssh_keys"] = str(call.params["ssh-public-keys"])
                ct["config"] = final
                ct["name"] = final["hostname"]
        except BaseException:
            with st.lock:
                if volid:
                    st.storages[sid].volumes.pop(volid, None)
                if st.containers.get(vmid) is ct:
                    del st.containers[vmid]
            raise
        if start:
            _start_body(sim, vmid, ct, task)

    return sim.start_task(call, "vzcreate", str(vmid), body)


# ------------------------------------------------------------------------------------------
# power state, destroy


def _check_lock(ct: dict[str, t.Any]) -> None:
    lock = ct["config"].get("lock")
    if lock:
        raise ApiError(500, f"CT is locked ({lock})")


def _start_body(sim: Sim, vmid: int, ct: dict[str, t.Any], task: Task) -> None:
    st = sim.state
    with st.lock:
        for key, value in ct["config"].items():
            if re.fullmatch(r"net\d+", key):
                bridge = parse_kv(value, "name").get("bridge")
                if bridge and bridge not in st.members[ct["node"]].bridges:
                    raise TaskFailed(f"bridge '{bridge}' does not exist")
        sid = ct["config"].get("rootfs", "").split(":", 1)[0]
        storage = st.storages.get(sid)
        if storage is None or not storage.enabled or not storage.active:
            raise TaskFailed(f"storage '{sid}' is not available on node '{ct['node']}'")
    sim.sleep("vzstart")
    backend = _backend(sim)
    if backend is not None:
        _real(f"starting CT {vmid}", lambda: backend.start(vmid))
    with st.lock:
        ct["status"] = "running"
        ct["started_at"] = sim.clock.now()
        task.log(f"starting CT {vmid}")


@route("POST", "/nodes/{node}/lxc/{vmid}/status/start")
def lxc_start(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    ct = record(sim, call)
    vmid = int(call.params["vmid"])
    if call.bool("skiplock") and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    if ct["config"].get("template") == "1":
        raise ApiError(500, "you can't start a CT if it's a template")
    if not call.bool("skiplock"):
        _check_lock(ct)
    if ct["status"] == "running":
        raise ApiError(500, f"CT {vmid} already running")
    return sim.start_task(call, "vzstart", str(vmid), lambda task: _start_body(sim, vmid, ct, task))


def _stop(sim: Sim, call: Call, ttype: str) -> str:
    sim.check_node(call)
    ct = record(sim, call)
    vmid = int(call.params["vmid"])
    if call.bool("skiplock") and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    if ct["status"] != "running":
        raise ApiError(500, f"CT {vmid} not running")
    if not call.bool("skiplock") and ct["config"].get("lock") not in (None, "backup"):
        _check_lock(ct)

    def body(task: Task) -> None:
        del task
        sim.sleep(ttype)
        backend = _backend(sim)
        if backend is not None:
            _real(f"stopping CT {vmid}", lambda: backend.stop(vmid, graceful=ttype == "vzshutdown"))
        with sim.state.lock:
            ct["status"] = "stopped"
            ct["started_at"] = None

    return sim.start_task(call, ttype, str(vmid), body)


@route("POST", "/nodes/{node}/lxc/{vmid}/status/stop")
def lxc_stop(sim: Sim, call: Call) -> str:
    return _stop(sim, call, "vzstop")


@route("POST", "/nodes/{node}/lxc/{vmid}/status/shutdown")
def lxc_shutdown(sim: Sim, call: Call) -> str:
    return _stop(sim, call, "vzshutdown")


@route("DELETE", "/nodes/{node}/lxc/{vmid}")
def lxc_destroy(sim: Sim, call: Call) -> str:
    sim.check_node(call)
    st = sim.state
    ct = record(sim, call)
    vmid = int(call.params["vmid"])
    if ct["config"].get("protection") == "1":
        raise ApiError(500, f"can't remove CT {vmid} - protection mode enabled")
    if ct["status"] == "running" and not call.bool("force"):
        raise ApiError(500, f"unable to destroy CT {vmid} - container is running")
    _check_lock(ct)
    ct["config"]["lock"] = "destroyed"

    def body(task: Task) -> None:
        if ct["status"] == "running":  # force: PVE stops it first
            sim.sleep("vzstop")
        sim.sleep("vzdestroy")
        backend = _backend(sim)
        if backend is not None:
            _real(f"destroying CT {vmid}", lambda: backend.destroy(vmid))
        with st.lock:
            volumes = [parse_kv(ct["config"].get("rootfs", ""), "volume").get("volume", "")]
            volumes += [
                parse_kv(v, "volume").get("volume", "") for k, v in ct["config"].items() if re.fullmatch(r"mp\d+", k)
            ]
            for volid in volumes:
                storage = st.storages.get(volid.split(":", 1)[0])
                if storage is not None and storage.volumes.pop(volid, None) is not None:
                    task.log(f'  Logical volume "{volid.split(":", 1)[1]}" successfully removed.')
            st.containers.pop(vmid, None)
        sim.guest_knobs.pop(vmid, None)

    return sim.start_task(call, "vzdestroy", str(vmid), body)


# ------------------------------------------------------------------------------------------
# interfaces


def _address(sim: Sim, vmid: int, ct: dict[str, t.Any], index: int, net: dict[str, str]) -> tuple[str, int] | None:
    ip = net.get("ip")
    if ip and ip not in ("dhcp", "manual"):
        iface = ipaddress.ip_interface(ip)
        return str(iface.ip), iface.network.prefixlen
    if ip != "dhcp" or sim.guest_knobs.get(vmid, {}).get("dhcp_never"):
        return None
    if ct["started_at"] is None or sim.clock.now() - ct["started_at"] < sim.durations.get("ct_dhcp", 3.0):
        return None
    backend = _backend(sim)
    if backend is not None and not backend.ssh_ready(vmid):  # a real container: only once its sshd answers
        return None
    bridge = sim.state.members[ct["node"]].bridges.get(net.get("bridge", ""), {})
    network = ipaddress.ip_network(bridge.get("cidr", "192.0.2.10/24"), strict=False)
    hosts = network.num_addresses - 2
    return str(network.network_address + 100 + (vmid * 8 + index) % max(1, hosts - 100)), network.prefixlen


def _eui64(prefix: str, mac: str) -> str:
    octets = [int(x, 16) for x in mac.split(":")]
    iid = bytes([octets[0] ^ 0x02, octets[1], octets[2], 0xFF, 0xFE, octets[3], octets[4], octets[5]])
    return str(ipaddress.IPv6Address(int(ipaddress.IPv6Network(prefix).network_address) | int.from_bytes(iid, "big")))


def _addresses6(sim: Sim, vmid: int, ct: dict[str, t.Any], net: dict[str, str]) -> list[tuple[str, int]]:
    """A container NIC's IPv6 addresses, global first: ``ip6=CIDR`` as given; ``ip6=auto`` (SLAAC) and ``ip6=dhcp``
    from the prefix announced on its bridge and VLAN (``vmnet.ipv6_prefix``; DHCPv6: interface id ``d6::`` + VMID, a
    /128), once the container has run as long as a DHCP lease takes; the EUI-64 link-local address always."""
    mac = net.get("hwaddr", "")
    if not re.fullmatch(r"(?:[0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}", mac):
        return []
    found: list[tuple[str, int]] = []
    ip6 = net.get("ip6")
    if ip6 and ip6 not in ("auto", "dhcp", "manual"):
        iface = ipaddress.IPv6Interface(ip6)
        found.append((str(iface.ip), iface.network.prefixlen))
    elif ip6 in ("auto", "dhcp") and ct["started_at"] is not None:
        up = sim.clock.now() - ct["started_at"] >= sim.durations.get("ct_dhcp", 3.0)
        bridge = sim.state.members[ct["node"]].bridges.get(net.get("bridge", ""))
        prefix = ipv6_prefix(bridge, int(net["tag"]) if net.get("tag") else None)
        if up and prefix is not None:
            if ip6 == "auto":
                found.append((_eui64(prefix, mac), 64))
            else:
                found.append((str(ipaddress.IPv6Network(prefix).network_address + ((0xD6 << 48) | vmid)), 128))
    found.append((_eui64("fe80::/64", mac), 64))
    return found


@route("GET", "/nodes/{node}/lxc/{vmid}/interfaces")
def lxc_interfaces(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    ct = record(sim, call)
    vmid = int(call.params["vmid"])
    if ct["status"] != "running":
        raise ApiError(500, f"CT {vmid} is not running")
    res: list[dict[str, t.Any]] = [
        {
            "name": "lo",
            "hwaddr": "00:00:00:00:00:00",
            "hardware-address": "00:00:00:00:00:00",
            "inet": "127.0.0.1/8",
            "inet6": "::1/128",
            "ip-addresses": [
                {"ip-address": "127.0.0.1", "ip-address-type": "inet", "prefix": 8},
                {"ip-address": "::1", "ip-address-type": "inet6", "prefix": 128},
            ],
        }
    ]
    for key in sorted(k for k in ct["config"] if re.fullmatch(r"net\d+", k)):
        net = parse_kv(ct["config"][key], "name")
        mac = net.get("hwaddr", "").lower()
        entry: dict[str, t.Any] = {
            "name": net.get("name", "eth0"),
            "hwaddr": mac,
            "hardware-address": mac,
            "ip-addresses": [],
        }
        address = _address(sim, vmid, ct, int(key[3:]), net)
        if address is not None:
            entry["inet"] = f"{address[0]}/{address[1]}"
            entry["ip-addresses"].append({"ip-address": address[0], "ip-address-type": "inet", "prefix": address[1]})
        for ip6, prefix in _addresses6(sim, vmid, ct, net):
            entry.setdefault("inet6", f"{ip6}/{prefix}")
            entry["ip-addresses"].append({"ip-address": ip6, "ip-address-type": "inet6", "prefix": prefix})
        res.append(entry)
    return res


# ------------------------------------------------------------------------------------------
# snapshots


# ------------------------------------------------------------------------------------------
# appliance templates and storage content
