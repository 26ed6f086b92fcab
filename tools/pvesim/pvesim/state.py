# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Simulated cluster state: node, storages, bridges, VMs, users, tokens, ACLs and the seed.

All mutation happens under ``State.lock`` (one re-entrant lock for the whole state).
"""

from __future__ import annotations

import hashlib
import ipaddress
import random
import re
import secrets
import threading
import typing as t
import urllib.parse
import uuid
from dataclasses import dataclass, field

if t.TYPE_CHECKING:
    from .guest import GuestBackend

GIB = 1 << 30

# Privileges of PVE 9 (pve-access-control PVE::AccessControl $privgroups + specials)
ALL_PRIVS: frozenset[str] = frozenset(
    """
Datastore.Allocate Datastore.AllocateSpace Datastore.AllocateTemplate Datastore.Audit Group.Allocate Mapping.Audit
Mapping.Modify Mapping.Use Permissions.Modify Pool.Allocate Pool.Audit Realm.Allocate Realm.AllocateUser SDN.Allocate
SDN.Audit SDN.Use Sys.AccessNetwork Sys.Audit Sys.Console Sys.Incoming Sys.Modify Sys.PowerMgmt Sys.Syslog User.Modify
VM.Allocate VM.Audit VM.Backup VM.Clone VM.Config.CDROM VM.Config.CPU VM.Config.Cloudinit VM.Config.Disk VM.Config.HWType
VM.Config.Memory VM.Config.Network VM.Config.Options VM.Console VM.GuestAgent.Audit VM.GuestAgent.FileRead
VM.GuestAgent.FileSystemMgmt VM.GuestAgent.FileWrite VM.GuestAgent.Unrestricted VM.Migrate VM.PowerMgmt VM.Replicate
VM.Snapshot VM.Snapshot.Rollback
""".split()
)

VM_CONFIG_PRIVS = [
    "VM.Config.Disk",
    "VM.Config.CDROM",
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.Network",
    "VM.Config.HWType",
    "VM.Config.Options",
    "VM.Config.Cloudinit",
]

FULL_TOKEN_ACL: dict[str, list[str]] = {
    "/vms": [
        "VM.Allocate",
        *VM_CONFIG_PRIVS,
        "VM.PowerMgmt",
        "VM.GuestAgent.Audit",
        "VM.GuestAgent.Unrestricted",
        "VM.Snapshot",
        "VM.Audit",
    ],
    "/vms/9000": ["VM.Clone", "VM.Audit"],
    "/storage/local-lvm": ["Datastore.AllocateSpace", "Datastore.Audit"],
    "/sdn/zones/localnetwork/vmbr0": ["SDN.Use"],
    "/nodes/pve-test": ["Sys.Audit"],
}
LIMITED_TOKEN_ACL: dict[str, list[str]] = {
    "/vms": ["VM.Allocate", *VM_CONFIG_PRIVS, "VM.PowerMgmt", "VM.GuestAgent.Audit", "VM.Audit"],
    "/vms/9000": ["VM.Audit"],
    "/storage/local-lvm": ["Datastore.Audit"],
    "/sdn/zones/localnetwork/vmbr0": ["SDN.Use"],
    "/nodes/pve-test": ["Sys.Audit"],
}

CLOUDINIT_KEYS = frozenset(
    {"cicustom", "cipassword", "citype", "ciupgrade", "ciuser", "nameserver", "searchdomain", "sshkeys"}
)
FAST_PLUG = (
    frozenset(
        {
            "description",
            "hookscript",
            "lock",
            "migrate_downtime",
            "migrate_speed",
            "name",
            "onboot",
            "protection",
            "shares",
            "startup",
            "tags",
            "vmstatestorage",
        }
    )
    | CLOUDINIT_KEYS
)
DRIVE_RE = re.compile(r"(ide|sata|scsi|virtio)\d+|efidisk0|tpmstate0")
# Storage types whose volumes are files under a path (uploads land there; disk images carry a format extension).
FILE_STORAGE_TYPES = ("dir", "nfs", "cifs", "glusterfs", "btrfs")


def size_to_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT])?", text)
    if not m:
        raise ValueError(text)
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(m.group(2) or "", 1)
    return int(float(m.group(1)) * mult)


def format_size(size: int) -> str:
    """``PVE::JSONSchema::format_size``."""
    for unit in ("", "K", "M", "G"):
        if size % 1024:
            return f"{size}{unit}"
        size //= 1024
        if unit == "G":
            return f"{size}T"
    return f"{size}T"  # pragma: no cover


def parse_kv(text: str, default_key: str) -> dict[str, str]:
    """Loose property-string split (values already schema-validated)."""
    res: dict[str, str] = {}
    for part in text.split(","):
        if not part:
            continue
        if "=" in part:
            k, v = part.split("=", 1)
            res[k] = v
        else:
            res[default_key] = part
    return res


def print_kv(data: dict[str, str], default_key: str) -> str:
    parts = [data[default_key]] if default_key in data else []
    parts += [f"{k}={v}" for k, v in data.items() if k != default_key]
    return ",".join(parts)


def random_mac(rng: random.Random) -> str:
    """PVE's ``random_ether_addr`` with the Proxmox OUI prefix ``BC:24:11``."""
    return "BC:24:11:" + ":".join(f"{rng.randrange(256):02X}" for _octet in range(3))


def is_cdrom(value: str) -> bool:
    return "media=cdrom" in value or value.split(",")[0] in ("cdrom", "none")


def is_cloudinit_volume(value: str) -> bool:
    return bool(re.search(r"vm-\d+-cloudinit", value.split(",")[0]))


@dataclass
class Storage:
    storage: str
    type: str
    content: list[str]
    total: int
    used: int = 0
    shared: int = 0
    enabled: int = 1
    active: int = 1
    avail_override: int | None = None
    volumes: dict[str, int] = field(default_factory=dict)
    nodes: list[str] | None = None  # storage.cfg ``nodes``: None = every cluster node

    def on_node(self, node: str) -> bool:
        return self.nodes is None or node in self.nodes

    @property
    def avail(self) -> int:
        if self.avail_override is not None:
            return self.avail_override
        return max(0, self.total - self.used - sum(self.volumes.values()))

    def used_bytes(self) -> int:
        return self.total - self.avail


@dataclass
class Snapshot:
    name: str
    conf: dict[str, str]
    snaptime: int
    description: str = ""
    vmstate: bool = False
    parent: str | None = None


@dataclass
class VM:
    vmid: int
    node: str
    config: dict[str, str]
    pending: dict[str, str] = field(default_factory=dict)
    pending_delete: list[str] = field(default_factory=list)
    snapshots: dict[str, Snapshot] = field(default_factory=dict)
    status: str = "stopped"
    started_at: float | None = None
    guest: GuestBackend | None = None  # set while the VM runs
    cloudinit_generated: dict[str, str] = field(default_factory=dict)
    pool: str | None = None

    @property
    def is_template(self) -> bool:
        return self.config.get("template") == "1"

    @property
    def lock(self) -> str | None:
        return self.config.get("lock")

    def raw_config(self) -> str:
        """The config file as ``write_vm_config`` writes it (digest = SHA-1 of this text)."""
        raw = _raw_section(self.config, False)
        if self.pending or self.pending_delete:
            pend = dict(self.pending)
            if self.pending_delete:
                pend["delete"] = ",".join(self.pending_delete)
            raw += "\n[PENDING]\n" + _raw_section(pend, True)
        for name in sorted(self.snapshots):
            snap = self.snapshots[name]
            conf = dict(snap.conf)
            conf["snaptime"] = str(snap.snaptime)
            if snap.description:
                conf["description"] = snap.description
            if snap.parent:
                conf["parent"] = snap.parent
            raw += f"\n[{name}]\n" + _raw_section(conf, False)
        return raw

    def digest(self) -> str:
        return hashlib.sha1(self.raw_config().encode()).hexdigest()

    def pending_config(self) -> dict[str, str]:
        conf = dict(self.config)
        for key in self.pending_delete:
            conf.pop(key.lstrip("!"), None)
        conf.update(self.pending)
        return conf

    def disks(self, conf: dict[str, str] | None = None) -> dict[str, str]:
        conf = self.config if conf is None else conf
        return {k: v for k, v in conf.items() if DRIVE_RE.fullmatch(k)}


def _encode_text(text: str) -> str:
    return urllib.parse.quote(text, safe="".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in "%:"))


def _raw_section(conf: dict[str, str], pending: bool) -> str:
    raw = ""
    descr = conf.get("description")
    if descr is not None:
        if descr:
            raw += "".join("#" + _encode_text(line) + "\n" for line in descr.split("\n"))
        elif pending:
            raw += "#\n"
    for key in sorted(conf):
        if key == "description":
            continue
        raw += f"{key}: {conf[key]}\n"
    return raw


@dataclass
class Member:
    """A cluster node (corosync member); its network interfaces are its own."""

    name: str
    nodeid: int
    ip: str
    online: bool = True
    bridges: dict[str, dict[str, t.Any]] = field(default_factory=dict)
    maintenance: bool = False  # HA maintenance mode (api/ha.py)


SEEDS = ("demo", "cluster")


@dataclass
class Token:
    userid: str
    name: str
    secret: str
    privsep: bool = True
    expire: int = 0
    comment: str = ""

    @property
    def tokenid(self) -> str:
        return f"{self.userid}!{self.name}"


@dataclass
class Pool:
    """A resource pool (``/pools``). Guest members are the VMs and containers whose ``pool`` names it (kept with the
    guest); storage members are listed here (user.cfg's ``pool`` line)."""

    poolid: str
    comment: str = ""
    storage: set[str] = field(default_factory=set)
    absent_vms: set[int] = field(default_factory=set)  # VMIDs named in the pool that no guest holds


@dataclass
class Group:
    """A user group (user.cfg ``group:`` line): its members are user IDs."""

    groupid: str
    comment: str = ""
    users: set[str] = field(default_factory=set)


@dataclass
class User:
    userid: str
    password: str | None = None
    enable: bool = True
    expire: int = 0
    email: str = ""
    comment: str = ""


# domains.cfg of a fresh installation: realm -> its section (``type`` and ``comment``).
DEFAULT_REALMS: dict[str, dict[str, str]] = {
    "pam": {"type": "pam", "comment": "Linux PAM standard authentication"},
    "pve": {"type": "pve", "comment": "Proxmox VE authentication server"},
}


class State:
    """Everything the simulated host knows. Use ``with state.lock:`` around reads and writes."""

    def __init__(self, seed: str = "demo", rng_seed: int | None = None) -> None:
        self.lock = threading.RLock()
        self.rng = random.Random(rng_seed)
        self.node = "pve-test"
        self.cluster_name: str | None = None
        self.members: dict[str, Member] = {}
        # SDN VNets (``/cluster/sdn/vnets``): vnet id -> {"zone": ..., "type": "vnet", ...}
        self.vnets: dict[str, dict[str, t.Any]] = {}
        self.storages: dict[str, Storage] = {}
        self.bridges: dict[str, dict[str, t.Any]] = {}
        self.vms: dict[int, VM] = {}
        # Containers (lxc.py): vmid -> {"name", "status", "node", "config", "snapshots", ...}; they hold their VMID too
        # (listed, counted by nextid, refused as clone targets).
        self.containers: dict[int, dict[str, t.Any]] = {}
        # datacenter.cfg as GET /cluster/options returns it (``next-id`` parsed to {lower, upper}).
        self.datacenter: dict[str, t.Any] = {}
        self.pools: dict[str, Pool] = {}
        self.users: dict[str, User] = {}
        self.groups: dict[str, Group] = {}
        self.realms: dict[str, dict[str, str]] = {}
        self.tokens: dict[str, Token] = {}
        # subject (userid or tokenid) -> path -> (privileges, propagate)
        self.acl: dict[str, dict[str, tuple[frozenset[str], bool]]] = {}
        self.tickets: dict[str, tuple[str, float]] = {}
        self.csrf: dict[str, str] = {}
        self.seed_name = seed
        self.apply_seed(seed)

    # ------------------------------------------------------------------------------------
    def apply_seed(self, seed: str, secrets_from: "State | None" = None) -> None:
        if seed not in SEEDS:
            raise ValueError(f"unknown seed '{seed}'")
        self.seed_name = seed
        self.storages = {
            "local-lvm": Storage("local-lvm", "lvmthin", ["images", "rootdir"], total=200 * GIB, used=0),
            "local": Storage(
                "local", "dir", ["iso", "vztmpl", "backup", "snippets", "import"], total=100 * GIB, used=12 * GIB
            ),
        }
        self.bridges = {
            "vmbr0": {
                "iface": "vmbr0",
                "type": "bridge",
                "active": 1,
                "autostart": 1,
                "bridge_ports": "eno1",
                "bridge_stp": "off",
                "bridge_fd": "0",
                "method": "static",
                "method6": "manual",
                "families": ["inet"],
                "cidr": "192.0.2.10/24",
                "address": "192.0.2.10",
                "netmask": "24",
                "gateway": "192.0.2.1",
                "priority": 5,
            },
        }
        with_ipv6(self.bridges["vmbr0"], gateway=True)
        self.vms = {}
        self.containers = {}
        self.datacenter = {}
        self.pools = {}
        template = VM(
            9000,
            self.node,
            {
                "agent": "1",
                "boot": "order=scsi0",
                "cores": "2",
                "cpu": "x86-64-v2-AES",
                "ide2": "local-lvm:vm-9000-cloudinit,media=cdrom",
                "memory": "2048",
                "meta": "creation-qemu=10.0.2,ctime=1760000000",
                "name": "debian-13",
                "net0": f"virtio={random_mac(self.rng)},bridge=vmbr0",
                "ostype": "l26",
                "scsi0": "local-lvm:base-9000-disk-0,size=8G",
                "scsihw": "virtio-scsi-single",
                "serial0": "socket",
                "smbios1": "uuid=5f0c8a4e-3d55-4d6e-9a0e-2b1f3c4d5e6f",
                "sockets": "1",
                "template": "1",
                "vga": "serial0",
                "vmgenid": "0d2f8c1e-6a3b-4f5e-8d7c-1b2a3c4d5e6f",
                "description": "Debian 13 (trixie) cloud image template",
            },
        )
        self.vms[9000] = template
        lvm = self.storages["local-lvm"]
        lvm.volumes = {"local-lvm:base-9000-disk-0": 8 * GIB, "local-lvm:vm-9000-cloudinit": 4 << 20}
        old_tokens = secrets_from.tokens if secrets_from else self.tokens
        old_users = secrets_from.users if secrets_from else self.users
        root_pw = old_users["root@pam"].password if "root@pam" in old_users else secrets.token_urlsafe(18)
        self.users = {
            "root@pam": User("root@pam", password=root_pw, email="root@localhost"),
            "vmanyware@pve": User("vmanyware@pve", comment="vmanyware automation"),
        }
        self.groups = {"operators": Group("operators", "people who confirm plans", {"vmanyware@pve"})}
        self.realms = {realm: dict(section) for realm, section in DEFAULT_REALMS.items()}
        self.tokens = {}
        for name in ("full", "limited"):
            tid = f"vmanyware@pve!{name}"
            secret = old_tokens[tid].secret if tid in old_tokens else str(uuid.uuid4())
            self.tokens[tid] = Token("vmanyware@pve", name, secret)
        user_acl: dict[str, set[str]] = {}
        for acl in (FULL_TOKEN_ACL, LIMITED_TOKEN_ACL):
            for path, privs in acl.items():
                user_acl.setdefault(path, set()).update(privs)
        self.acl = {
            "vmanyware@pve": {p: (frozenset(v), True) for p, v in user_acl.items()},
            "vmanyware@pve!full": {p: (frozenset(v), True) for p, v in FULL_TOKEN_ACL.items()},
            "vmanyware@pve!limited": {p: (frozenset(v), True) for p, v in LIMITED_TOKEN_ACL.items()},
        }
        self.tickets = {}
        self.csrf = {}
        self.cluster_name = None
        self.members = {self.node: Member(self.node, 1, "192.0.2.10", True, self.bridges)}
        self.vnets = {}
        if seed == "cluster":
            seed_cluster(self)

    # ------------------------------------------------------------------------------------
    def permissions(self, subject: str, path: str) -> frozenset[str]:
        """Effective privileges of a user or token on ``path`` (PVE's ``permissions``).

        A VM that is a member of a pool also gets the privileges on ``/pool/<poolid>``: PVE's
        RPCEnvironment evaluates a pool member's ``/vms/<vmid>`` with its pool's ACL as well, which is
        what lets an administrator grant a whole pool once instead of every VMID.
        """
        privs = self._permissions(subject, path)
        match = re.fullmatch(r"/vms/(\d+)", path)
        vm = self.vms.get(int(match.group(1))) if match else None
        if vm is not None and vm.pool:
            privs = privs | self._permissions(subject, "/pool/" + vm.pool)
        return privs

    def _permissions(self, subject: str, path: str) -> frozenset[str]:
        userid = subject.split("!", 1)[0]
        if userid == "root@pam":
            if "!" not in subject:
                return ALL_PRIVS
            token = self.tokens.get(subject)
            if token is not None and not token.privsep:
                return ALL_PRIVS
        user_privs = ALL_PRIVS if userid == "root@pam" else self._acl_privs(userid, path)
        if "!" not in subject:
            return user_privs
        token = self.tokens.get(subject)
        if token is None:
            return frozenset()
        if not token.privsep:
            return user_privs
        return user_privs & self._acl_privs(subject, path)

    def _acl_privs(self, subject: str, path: str) -> frozenset[str]:
        entries = self.acl.get(subject, {})
        parts = [p for p in path.split("/") if p]
        prefixes = ["/"] + ["/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        perm: frozenset[str] = frozenset()
        for prefix in prefixes:
            entry = entries.get(prefix)
            if entry is None:
                continue
            privs, propagate = entry
            if prefix == prefixes[-1] or propagate:
                perm = privs  # more specific ACL entries replace inherited ones (PVE semantics)
        return perm

    def acl_paths(self, subject: str) -> list[str]:
        userid = subject.split("!", 1)[0]
        paths = set(self.acl.get(subject, {})) | set(self.acl.get(userid, {}))
        if userid == "root@pam":
            paths.add("/")
        return sorted(paths)

    # ------------------------------------------------------------------------------------
    def vmid_used(self, vmid: int) -> bool:
        """Whether ``vmid`` is in the cluster's VM list (VMs, templates and containers: PVE's ``get_vmlist``)."""
        return vmid in self.vms or vmid in self.containers

    def next_disk_name(self, storage: str, vmid: int) -> str:
        used = {v.split(":", 1)[1].split("/")[-1].split(".")[0] for st in self.storages.values() for v in st.volumes}
        n = 0
        while f"vm-{vmid}-disk-{n}" in used:
            n += 1
        return f"vm-{vmid}-disk-{n}"

    def volume_size(self, volid: str) -> int | None:
        storage = volid.split(":", 1)[0]
        st = self.storages.get(storage)
        if st is None:
            return None
        return st.volumes.get(volid)

    def new_mac(self) -> str:
        return random_mac(self.rng)

    def new_uuid(self) -> str:
        return _uuid(self.rng)


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


CLUSTER_NAME = "vmanyware-lab"
CLUSTER_NODES = (("pve-test", 1, "192.0.2.10"), ("pve-test2", 2, "192.0.2.11"), ("pve-test3", 3, "192.0.2.12"))


def bridge_ipv6_prefix(name: str) -> str | None:
    """The IPv6 prefix the untagged segment of a seed bridge carries: ``vmbrN`` -> ``2001:db8:N::/64`` (RFC 3849's
    documentation prefix; ``N`` written as hex digits, so ``vmbr2`` -> ``2001:db8:2::/64``). A router on that segment
    announces it (``pvesim.vmnet`` derives the VLANs' prefixes from it); other names carry none."""
    match = re.fullmatch(r"vmbr(\d{1,4})", name)
    if match is None:
        return None
    return str(ipaddress.IPv6Network(f"2001:db8:{match.group(1)}::/64"))


def with_ipv6(bridge: dict[str, t.Any], gateway: bool = False) -> dict[str, t.Any]:
    """Give a seed bridge the node's own static IPv6 address on that prefix, as ``GET /nodes/{node}/network`` shows an
    ``iface vmbrN inet6 static`` stanza (``address6``, ``netmask6``, ``cidr6``, ``method6``, ``families``): the
    interface id is the last octet of its IPv4 address read as hex digits (``192.0.2.10`` -> ``::10``); ``gateway``
    adds ``gateway6`` (``::1``)."""
    prefix = bridge_ipv6_prefix(str(bridge["iface"]))
    if prefix is None:
        return bridge
    net = ipaddress.IPv6Network(prefix)
    address = net.network_address + int(str(bridge["address"]).rsplit(".", 1)[1], 16)
    bridge.update(
        {
            "method6": "static",
            "families": ["inet", "inet6"],
            "address6": str(address),
            "netmask6": net.prefixlen,  # an integer in the API's return schema (netmask, IPv4, is a string)
            "cidr6": f"{address}/{net.prefixlen}",
        }
    )
    if gateway:
        bridge["gateway6"] = str(net.network_address + 1)
    return bridge


def _bridge(name: str, ip: str, ports: str) -> dict[str, t.Any]:
    return with_ipv6(
        {
            "iface": name,
            "type": "bridge",
            "active": 1,
            "autostart": 1,
            "bridge_ports": ports,
            "bridge_stp": "off",
            "bridge_fd": "0",
            "method": "static",
            "method6": "manual",
            "families": ["inet"],
            "cidr": f"{ip}/24",
            "address": ip,
            "netmask": "24",
            "priority": 5,
        }
    )


def seed_cluster(state: State) -> None:
    """The demo seed grown into a three-node cluster ``vmanyware-lab``.

    ``pve-test`` (the node answering, with template 9000), ``pve-test2`` and ``pve-test3``, all online.
    Every node has ``vmbr0``; ``pve-test2`` also ``vmbr1``; ``pve-test`` and ``pve-test2`` also the VLAN-aware ``vmbr2``.
    Each bridge carries IPv4 and IPv6 (``bridge_ipv6_prefix``: ``vmbrN`` -> ``2001:db8:N::/64``).
    A shared NFS storage ``shared`` holds images, import and snippets on every node, and template 9001
    (``debian-13-shared``); ``local-lvm`` and ``local`` exist on every node.
    One SDN VNet ``labnet`` in the simple zone ``lab``. The ``full`` token may also audit the cluster
    (``Sys.Audit`` on ``/``, not propagated), let nodes download (``Sys.AccessNetwork`` on ``/nodes``) and use ``shared``
    and ``labnet``: enough to build a template from a cloud image over the API.
    """
    state.cluster_name = CLUSTER_NAME
    local = state.members[state.node]
    local.nodeid, local.ip = CLUSTER_NODES[0][1], CLUSTER_NODES[0][2]
    for name, nodeid, ip in CLUSTER_NODES[1:]:
        bridges = {"vmbr0": _bridge("vmbr0", ip, "eno1")}
        if name == "pve-test2":
            bridges["vmbr1"] = _bridge("vmbr1", "198.51.100." + ip.rsplit(".", 1)[1], "eno2")
        state.members[name] = Member(name, nodeid, ip, True, bridges)
    state.storages["shared"] = Storage(
        "shared", "nfs", ["images", "import", "snippets", "iso"], total=2048 * GIB, used=100 * GIB, shared=1
    )
    # A second template whose disks are on the shared storage: a clone of it may go to any node (``target``); one of
    # 9000 (local-lvm) may not, as in qemu-server.
    shared_template = dict(state.vms[9000].config)
    shared_template.update(
        {
            "name": "debian-13-shared",
            "scsi0": "shared:base-9001-disk-0,size=8G",
            "ide2": "shared:vm-9001-cloudinit,media=cdrom",
            "net0": f"virtio={random_mac(state.rng)},bridge=vmbr0",
            "smbios1": "uuid=8c2e4f10-7a1b-4c3d-9e5f-a0b1c2d3e4f5",
            "vmgenid": "3e1a9b7c-2d4f-4a6b-8c9d-0e1f2a3b4c5d",
            "description": "Debian 13 (trixie) cloud image template on shared storage",
        }
    )
    state.vms[9001] = VM(9001, state.node, shared_template)
    state.storages["shared"].volumes = {"shared:base-9001-disk-0": 8 * GIB, "shared:vm-9001-cloudinit": 4 << 20}
    # A VLAN-aware bridge on two of the three nodes (a tagged NIC needs one where the definition asks for it).
    for bridges, ip in ((state.bridges, "203.0.113.10"), (state.members["pve-test2"].bridges, "203.0.113.11")):
        bridges["vmbr2"] = {**_bridge("vmbr2", ip, "eno3"), "bridge_vlan_aware": 1, "bridge_vids": "2-4094"}
    state.vnets = {"labnet": {"vnet": "labnet", "zone": "lab", "type": "vnet", "tag": 100, "alias": "lab network"}}
    for subject in ("vmanyware@pve", "vmanyware@pve!full"):
        acl = state.acl.setdefault(subject, {})
        acl["/"] = (frozenset({"Sys.Audit"}), False)
        acl["/nodes"] = (frozenset({"Sys.Audit", "Sys.AccessNetwork"}), True)
        acl["/storage/shared"] = (
            frozenset({"Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit"}),
            True,
        )
        acl["/sdn/zones/lab/labnet"] = (frozenset({"SDN.Use", "SDN.Audit"}), True)
        acl["/sdn/zones/localnetwork"] = (frozenset({"SDN.Use", "SDN.Audit"}), True)
        acl["/vms/9001"] = (frozenset({"VM.Clone", "VM.Audit"}), True)
