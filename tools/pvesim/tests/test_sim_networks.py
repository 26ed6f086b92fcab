# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Networks of a simulated VM: the addresses its agent reports for each Cloud-Init ``ipconfig0`` form, the IPv6 prefix
announced per bridge and VLAN (``pvesim.vmnet``), the NIC checks at start (MTU, a VLAN tag on a bridge that is not
VLAN-aware), the seeds' bridges with IPv6, and a clone placed on another node."""

from __future__ import annotations

import ipaddress
import time
import typing as t

import pytest

from pvesim.cloudinit import drive_files
from pvesim.guest import GuestFaults, GuestTiming, SimulatedGuest
from pvesim.state import VM, State
from pvesim.tasks import TaskFailed
from pvesim.testing import PvesimAdmin
from pvesim.vmnet import check_start, ipv6_prefix, nic_prefixes

from .conftest import Api
from .test_cluster import returns_ok

MAC = "BC:24:11:AA:BB:CC"
EUI64 = "be24:11ff:feaa:bbcc"  # the interface id SLAAC and the link-local address derive from MAC
LINK_LOCAL = {"ip-address-type": "ipv6", "ip-address": f"fe80::{EUI64}", "prefix": 64}


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _guest(
    ipconfig: str, prefix: str | None = "2001:db8:2:42::/64", faults: GuestFaults | None = None
) -> tuple[SimulatedGuest, _Clock]:
    config = {"name": "n1", "net0": f"virtio={MAC},bridge=vmbr2,tag=42", "ipconfig0": ipconfig}
    clock = _Clock()
    guest = SimulatedGuest(
        301,
        config,
        drive_files(config, 301, "pve-test"),
        clock,
        GuestTiming(),
        faults or GuestFaults(),
        ipv6_prefixes={"net0": prefix},
    )
    return guest, clock


def _addresses(guest: SimulatedGuest) -> list[dict[str, t.Any]]:
    (nic,) = [i for i in guest.network_get_interfaces() if i["name"] != "lo"]
    assert nic["hardware-address"] == MAC.lower() and nic["name"] == "eth0"
    return list(nic["ip-addresses"])


# --- the agent's addresses per ipconfig form ---------------------------------------------------------------------


def test_static_ipv4_and_ipv6_are_there_as_soon_as_the_agent_is() -> None:
    guest, clock = _guest("ip=203.0.113.50/24,gw=203.0.113.1,ip6=2001:db8:2:42::50/64,gw6=2001:db8:2:42::1")
    clock.now = 8.0
    assert _addresses(guest) == [
        {"ip-address-type": "ipv4", "ip-address": "203.0.113.50", "prefix": 24},
        {"ip-address-type": "ipv6", "ip-address": "2001:db8:2:42::50", "prefix": 64},
        LINK_LOCAL,
    ]


def test_slaac_takes_the_announced_prefix_and_the_eui64_interface_id() -> None:
    guest, clock = _guest("ip=dhcp,ip6=auto")
    clock.now = 8.0
    assert _addresses(guest) == [LINK_LOCAL]  # before the lease and the router advertisement: link-local only
    clock.now = 10.0
    assert _addresses(guest) == [
        {"ip-address-type": "ipv4", "ip-address": guest.dhcp_address(0), "prefix": 24},
        {"ip-address-type": "ipv6", "ip-address": f"2001:db8:2:42:{EUI64}", "prefix": 64},
        LINK_LOCAL,
    ]


def test_dhcpv6_leases_a_deterministic_address_from_the_prefix() -> None:
    guest, clock = _guest("ip6=dhcp")
    clock.now = 10.0
    assert guest.dhcp6_address("2001:db8:2:42::/64") == "2001:db8:2:42:d6::12d"
    assert _addresses(guest) == [
        {"ip-address-type": "ipv6", "ip-address": "2001:db8:2:42:d6::12d", "prefix": 128},
        LINK_LOCAL,
    ]


def test_no_router_no_global_ipv6_and_router_advertisements_need_no_dhcp_server() -> None:
    for ipconfig in ("ip6=auto", "ip6=dhcp"):
        guest, clock = _guest(ipconfig, prefix=None)
        clock.now = 60.0
        assert _addresses(guest) == [LINK_LOCAL], ipconfig
    guest, clock = _guest("ip=dhcp,ip6=auto", faults=GuestFaults(dhcp_never=True))
    clock.now = 60.0
    assert [a["ip-address"] for a in _addresses(guest)] == [f"2001:db8:2:42:{EUI64}", f"fe80::{EUI64}"]
    guest, clock = _guest("ip6=dhcp", faults=GuestFaults(dhcp_never=True))
    clock.now = 60.0
    assert _addresses(guest) == [LINK_LOCAL]


# --- prefixes per bridge and VLAN, NIC checks at start (in-process) ------------------------------------------------


def test_prefix_rule_per_bridge_and_vlan() -> None:
    state = State("cluster")
    vmbr2 = state.bridges["vmbr2"]
    assert (vmbr2["cidr6"], vmbr2["address6"], vmbr2["netmask6"]) == ("2001:db8:2::10/64", "2001:db8:2::10", 64)
    assert ipv6_prefix(vmbr2, None) == "2001:db8:2::/64"
    assert ipv6_prefix(vmbr2, 42) == "2001:db8:2:42::/64"
    assert ipv6_prefix(vmbr2, 4094) == "2001:db8:2:4094::/64"
    assert ipv6_prefix(state.bridges["vmbr0"], 7) == "2001:db8:0:7::/64"  # not VLAN-aware: PVE's vmbr0v7, same wire
    assert ipv6_prefix({"iface": "vmbr9", "cidr": "192.0.2.1/24"}, None) is None  # no IPv6 there
    vm = VM(
        301, "pve-test", {"net0": f"virtio={MAC},bridge=vmbr2,tag=42", "net1": "e1000=BC:24:11:00:00:01,bridge=vmbr0"}
    )
    assert nic_prefixes(state, vm) == {"net0": "2001:db8:2:42::/64", "net1": "2001:db8::/64"}


class _Task:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings = 0

    def log(self, line: str) -> None:
        self.lines.append(line)

    def warn(self, line: str) -> None:
        self.warnings += 1
        self.lines.append("WARN: " + line)


def _check(state: State, net0: str) -> _Task:
    task = _Task()
    vm = VM(301, "pve-test", {"net0": net0})
    check_start(state, vm, vm.config, task)  # type: ignore[arg-type]
    return task


def test_vlan_tag_on_a_bridge_without_vlan_awareness_needs_a_physical_port() -> None:
    state = State("demo")
    assert _check(state, f"virtio={MAC},bridge=vmbr0,tag=42").lines == []  # PVE builds vmbr0v42 over eno1.42
    state.bridges["vmbr0"]["bridge_ports"] = "none"
    with pytest.raises(TaskFailed, match=r"^start failed: QEMU exited with code 1$"):
        _check(state, f"virtio={MAC},bridge=vmbr0,tag=42")
    task = _Task()
    with pytest.raises(TaskFailed):
        check_start(state, VM(301, "pve-test", {}), {"net0": f"virtio={MAC},bridge=vmbr0,tag=42"}, task)  # type: ignore[arg-type]
    assert task.lines[0] == "no physical interface on bridge 'vmbr0'"
    assert "network script /usr/libexec/qemu-server/pve-bridge failed with status 512" in task.lines[1]
    assert _check(state, f"virtio={MAC},bridge=vmbr0").lines == []  # untagged: nothing to build


def test_mtu_checks_of_print_netdev_full() -> None:
    state = State("demo")
    assert _check(state, f"virtio={MAC},bridge=vmbr0,mtu=1450").lines == []
    assert _check(state, f"virtio={MAC},bridge=vmbr0,mtu=1").lines == []  # 1: the bridge's
    with pytest.raises(TaskFailed, match=r"^netdev net0: MTU '9000' is bigger than the bridge MTU '1500' - adjust"):
        _check(state, f"virtio={MAC},bridge=vmbr0,mtu=9000")
    with pytest.raises(TaskFailed, match=r"^netdev net0: MTU '500' is smaller than the IP minimum MTU '576'$"):
        _check(state, f"virtio={MAC},bridge=vmbr0,mtu=500")
    state.bridges["vmbr0"]["mtu"] = 9000
    assert _check(state, f"virtio={MAC},bridge=vmbr0,mtu=9000").lines == []
    task = _check(state, f"e1000={MAC},bridge=vmbr0,mtu=1450")
    assert (task.warnings, task.lines) == (1, ["WARN: netdev net0: ignoring MTU '1450', not using VirtIO"])
    with pytest.raises(TaskFailed, match=r"^bridge 'vmbr7' does not exist$"):
        _check(state, f"virtio={MAC},bridge=vmbr7")


# --- over the API ----------------------------------------------------------------------------------------------------


def _wait(api: Api, node: str, upid: str) -> dict[str, t.Any]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        status = api.data(api.get(f"/nodes/{node}/tasks/{upid}/status"))
        if status["status"] == "stopped":
            return dict(status)
        time.sleep(0.02)
    raise AssertionError(f"task {upid} did not finish")


def _interfaces(api: Api, node: str, vmid: int) -> list[dict[str, t.Any]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        resp = api.get(f"/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces")
        if resp.status_code == 200:
            addresses = [i for i in resp.json()["data"]["result"] if i["name"] != "lo"]
            if any(a["ip-address-type"] == "ipv4" for a in addresses[0]["ip-addresses"]):
                return addresses
        time.sleep(0.05)
    raise AssertionError("no IPv4 address reported")


@pytest.fixture()
def fast(pvesim: PvesimAdmin) -> PvesimAdmin:
    pvesim.set_speed(200)
    pvesim.set_timings(guest={"agent_up_after": 0.4, "dhcp_after_agent": 0.2})
    return pvesim


def test_demo_vm_with_static_ipv4_and_slaac(fast: PvesimAdmin, api: Api) -> None:
    assert api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=301, name="v6", full=1)["exitstatus"] == "OK"
    config = api.data(api.get("/nodes/pve-test/qemu/301/config"))
    mac = config["net0"].split(",")[0].split("=")[1]
    api.data(api.put("/nodes/pve-test/qemu/301/config", ipconfig0="ip=192.0.2.50/24,gw=192.0.2.1,ip6=auto"))
    assert api.run("POST", "/nodes/pve-test/qemu/301/status/start")["exitstatus"] == "OK"
    (nic,) = _interfaces(api, "pve-test", 301)
    assert nic["hardware-address"] == mac.lower()
    octets = [int(x, 16) for x in mac.split(":")]
    iid = f"{octets[0] ^ 2:x}{octets[1]:02x}:{octets[2]:x}ff:fe{octets[3]:02x}:{octets[4]:x}{octets[5]:02x}"
    assert [(a["ip-address"], a["prefix"]) for a in nic["ip-addresses"]] == [
        ("192.0.2.50", 24),
        (str(ipaddress.IPv6Address(f"2001:db8::{iid}")), 64),
        (str(ipaddress.IPv6Address(f"fe80::{iid}")), 64),
    ]
    assert fast.schema_violations() == []


def test_bridges_of_every_node_show_ipv4_and_ipv6(fast: PvesimAdmin, api: Api) -> None:
    fast.reset("cluster")
    seen = {}
    for node in ("pve-test", "pve-test2", "pve-test3"):
        bridges = api.data(api.get(f"/nodes/{node}/network"))
        # (bridge_stp and bridge_fd, which PVE returns too, are not in the return schema)
        errors = returns_ok("GET", f"/nodes/{node}/network", bridges)
        assert [e for e in errors if not e.endswith(("bridge_stp: unknown", "bridge_fd: unknown"))] == []
        seen[node] = {b["iface"]: (b["cidr"], b["cidr6"], b.get("bridge_vlan_aware", 0)) for b in bridges}
        for bridge in bridges:
            one = api.data(api.get(f"/nodes/{node}/network/{bridge['iface']}"))
            assert one["families"] == ["inet", "inet6"] and one["method6"] == "static"
    assert seen == {
        "pve-test": {
            "vmbr0": ("192.0.2.10/24", "2001:db8::10/64", 0),
            "vmbr2": ("203.0.113.10/24", "2001:db8:2::10/64", 1),
        },
        "pve-test2": {
            "vmbr0": ("192.0.2.11/24", "2001:db8::11/64", 0),
            "vmbr1": ("198.51.100.11/24", "2001:db8:1::11/64", 0),
            "vmbr2": ("203.0.113.11/24", "2001:db8:2::11/64", 1),
        },
        "pve-test3": {"vmbr0": ("192.0.2.12/24", "2001:db8::12/64", 0)},
    }
    assert fast.schema_violations() == []


def test_clone_to_another_node_boots_there_on_a_vlan_with_dhcpv6(fast: PvesimAdmin, api: Api) -> None:
    """A clone with ``target`` lives on the target node (config, /cluster/resources, later requests through that node
    only); there it gets VLAN 42 of vmbr2 and its DHCPv6 lease from that VLAN's prefix."""
    fast.reset("cluster")
    upid = api.data(
        api.post("/nodes/pve-test/qemu/9001/clone", newid=301, name="far", full=1, storage="shared", target="pve-test2")
    )
    assert _wait(api, "pve-test", upid)["exitstatus"] == "OK"
    resources = {r["id"]: r for r in api.data(api.get("/cluster/resources", type="vm"))}
    assert resources["qemu/301"]["node"] == "pve-test2"
    wrong = api.get("/nodes/pve-test/qemu/301/config")
    assert (wrong.status_code, wrong.json()["message"]) == (
        500,
        "Configuration file 'nodes/pve-test/qemu-server/301.conf' does not exist\n",
    )
    assert api.post("/nodes/pve-test/qemu/301/status/start").status_code == 500
    config = api.data(api.get("/nodes/pve-test2/qemu/301/config"))
    mac = config["net0"].split(",")[0].split("=")[1]
    api.data(
        api.put(
            "/nodes/pve-test2/qemu/301/config",
            net0=f"virtio={mac},bridge=vmbr2,tag=42,mtu=1450",
            ipconfig0="ip=203.0.113.60/24,gw=203.0.113.1,ip6=dhcp",
        )
    )
    upid = api.data(api.post("/nodes/pve-test2/qemu/301/status/start"))
    assert _wait(api, "pve-test2", upid)["exitstatus"] == "OK"
    (nic,) = _interfaces(api, "pve-test2", 301)
    addresses = [(a["ip-address"], a["prefix"]) for a in nic["ip-addresses"]]
    assert addresses[:2] == [("203.0.113.60", 24), ("2001:db8:2:42:d6::12d", 128)]
    assert addresses[2][0].startswith("fe80::") and len(addresses) == 3
    assert fast.schema_violations() == []


def test_start_fails_on_an_mtu_above_the_bridge(fast: PvesimAdmin, api: Api) -> None:
    assert api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=301, full=1)["exitstatus"] == "OK"
    config = api.data(api.get("/nodes/pve-test/qemu/301/config"))
    api.data(api.put("/nodes/pve-test/qemu/301/config", net0=config["net0"] + ",mtu=9000"))
    status = api.run("POST", "/nodes/pve-test/qemu/301/status/start")
    assert status["exitstatus"].startswith("netdev net0: MTU '9000' is bigger than the bridge MTU '1500'")
    assert api.data(api.get("/nodes/pve-test/qemu/301/status/current"))["status"] == "stopped"


def test_net_values_are_printed_as_qemu_server_prints_them(fast: PvesimAdmin, api: Api) -> None:
    """print_net: ``model=MAC`` first, the other properties sorted by key, on update and on clone alike."""
    fast.set_vm_config(9000, set={"net0": "virtio=BC:24:11:00:00:01,tag=42,bridge=vmbr0"})  # written by hand
    assert api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=301, full=1)["exitstatus"] == "OK"
    net0 = api.data(api.get("/nodes/pve-test/qemu/301/config"))["net0"]
    assert net0.split(",", 1)[1] == "bridge=vmbr0,tag=42" and "BC:24:11:00:00:01" not in net0
    api.data(api.put("/nodes/pve-test/qemu/301/config", net0="virtio,bridge=vmbr0,tag=42,mtu=1450,firewall=1"))
    net0 = api.data(api.get("/nodes/pve-test/qemu/301/config"))["net0"]
    mac = net0.split(",")[0].split("=")[1]
    assert net0 == f"virtio={mac},bridge=vmbr0,firewall=1,mtu=1450,tag=42"
    api.data(api.put("/nodes/pve-test/qemu/301/config", net0=f"model=e1000,link_down=1,macaddr={mac.lower()}"))
    assert api.data(api.get("/nodes/pve-test/qemu/301/config"))["net0"] == f"e1000={mac},link_down=1"


def test_sdn_use_is_checked_per_vlan(fast: PvesimAdmin, api: Api) -> None:
    """pve-guest-common check_vnet_access: a tagged NIC needs SDN.Use on ``/sdn/zones/<zone>/<bridge>/<tag>``
    (inherited from the bridge's ACL, or granted for that VLAN alone), each trunk VLAN too, an untagged one on the
    bridge; the zone of an SDN VNet is its own."""
    assert api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=301, full=1)["exitstatus"] == "OK"
    mac = api.data(api.get("/nodes/pve-test/qemu/301/config"))["net0"].split(",")[0].split("=")[1]
    token = fast.connection["tokens"]["full"]["id"]
    privileges = {
        "/vms": ["VM.Config.Network", "VM.Audit"],
        "/sdn/zones/localnetwork/vmbr0/42": ["SDN.Use"],
        "/sdn/zones/lab/labnet": ["SDN.Use"],
    }
    fast.set_token(token, privileges=privileges)
    assert api.put("/nodes/pve-test/qemu/301/config", net0=f"virtio={mac},bridge=vmbr0,tag=42").status_code == 200
    for value, path in (
        (f"virtio={mac},bridge=vmbr0", "/sdn/zones/localnetwork/vmbr0"),
        (f"virtio={mac},bridge=vmbr0,tag=43", "/sdn/zones/localnetwork/vmbr0/43"),
        (f"virtio={mac},bridge=vmbr0,tag=42,trunks=42;44", "/sdn/zones/localnetwork/vmbr0/44"),
    ):
        resp = api.put("/nodes/pve-test/qemu/301/config", net0=value)
        assert (resp.status_code, resp.reason) == (403, f"Permission check failed ({path}, SDN.Use)"), value
    fast.set_token(token, privileges={**privileges, "/sdn/zones/localnetwork/vmbr0": ["SDN.Use"]})
    assert api.put("/nodes/pve-test/qemu/301/config", net0=f"virtio={mac},bridge=vmbr0,tag=43").status_code == 200
    fast.reset("cluster")
    assert api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=301, full=1)["exitstatus"] == "OK"
    fast.set_token(token, privileges=privileges)
    assert api.put("/nodes/pve-test/qemu/301/config", net0=f"virtio={mac},bridge=labnet").status_code == 200
