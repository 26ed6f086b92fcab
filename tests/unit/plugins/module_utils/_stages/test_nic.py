# SPDX-License-Identifier: GPL-3.0-or-later
"""The planned NIC on the Proxmox side and in the guest (docs/networks.md): net0, ipconfig0 and DNS settings, the seed's
network-config verdicts, and the address readiness waits for."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import nic
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import (
    usable_addresses,
    usable_ipv4,
    usable_ipv6,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import validate_network

MAC = "BC:24:11:AA:BB:CC"
STATIC: dict[str, t.Any] = {
    "network": "lab",
    "bridge": "vmbr2",
    "vlan": 42,
    "mtu": 1450,
    "ipv4": {
        "mode": "static",
        "address": "203.0.113.50/24",
        "gateway": "203.0.113.1",
        "dns": ["203.0.113.53"],
        "searchDomain": "lab.example",
    },
}
DHCP: dict[str, t.Any] = {"network": "office", "bridge": "vmbr1", "ipv4": {"mode": "dhcp"}}
# What Proxmox generates for STATIC (qemu-server's nocloud network-config v1, as pvesim renders it).
STATIC_SEED = """version: 1
config:
    - type: physical
      name: eth0
      mac_address: 'bc:24:11:aa:bb:cc'
      subnets:
      - type: static
        address: '203.0.113.50'
        netmask: '255.255.255.0'
        gateway: '203.0.113.1'
    - type: nameserver
      address:
      - '203.0.113.53'
      search:
      - 'lab.example'
"""


def test_proxmox_settings() -> None:
    assert nic.net0_value(STATIC, MAC) == "virtio=BC:24:11:AA:BB:CC,bridge=vmbr2,tag=42,mtu=1450"
    assert nic.ipconfig0_value(STATIC) == "ip=203.0.113.50/24,gw=203.0.113.1"
    assert nic.dns_settings(STATIC) == {"nameserver": "203.0.113.53", "searchdomain": "lab.example"}
    assert (nic.net0_value(DHCP, MAC), nic.ipconfig0_value(DHCP)) == (
        "virtio=BC:24:11:AA:BB:CC,bridge=vmbr1",
        "ip=dhcp",
    )
    assert nic.dns_settings(DHCP) == {"nameserver": None, "searchdomain": None}


@pytest.mark.parametrize(
    ("value", "strict", "lenient"),
    [
        ("virtio=BC:24:11:AA:BB:CC,bridge=vmbr2,tag=42,mtu=1450", True, True),
        ("virtio=BC:24:11:AA:BB:CC,bridge=vmbr2,mtu=1450,tag=42,firewall=1", True, True),
        ("virtio=BC:24:11:AA:BB:CC,bridge=vmbr2,tag=43,mtu=1450", False, True),
        ("virtio=BC:24:11:AA:BB:CC,bridge=vmbr2,tag=42", False, True),
        ("virtio=BC:24:11:AA:BB:CC,bridge=vmbr0,tag=42,mtu=1450", False, False),
        ("e1000=BC:24:11:AA:BB:CC,bridge=vmbr2,tag=42,mtu=1450", False, False),
    ],
)
def test_net0_matches(value: str, strict: bool, lenient: bool) -> None:
    assert nic.net0_matches(value, STATIC, MAC, with_options=True) is strict
    assert nic.net0_matches(value, STATIC, MAC, with_options=False) is lenient


def test_seed_network_config_of_a_static_network() -> None:
    validate_network(STATIC_SEED, MAC, STATIC)
    wrong = {
        "static4": STATIC_SEED.replace("203.0.113.50", "203.0.113.51"),
        "static4 ": STATIC_SEED.replace("255.255.255.0", "255.255.0.0"),
        "static4  ": STATIC_SEED.replace("gateway: '203.0.113.1'", "gateway: '203.0.113.254'"),
        "nameserver": STATIC_SEED.replace("- '203.0.113.53'", "- '192.0.2.53'"),
        "nameserver ": STATIC_SEED.replace("- 'lab.example'", "- 'other.example'"),
    }
    for rule, text in wrong.items():
        with pytest.raises(StageError) as info:
            validate_network(text, MAC, STATIC)
        assert info.value.details["rule"] == rule.strip()
    with pytest.raises(StageError) as info:
        validate_network(STATIC_SEED, MAC, DHCP)  # a static seed where DHCP was planned
    assert info.value.details["rule"] == "dhcp4"


def test_readiness_waits_for_the_planned_address() -> None:
    interfaces = [
        {
            "hardware-address": MAC.lower(),
            "ip-addresses": [
                {"ip-address-type": "ipv4", "ip-address": "203.0.113.99", "prefix": 24},
                {"ip-address-type": "ipv4", "ip-address": "203.0.113.50", "prefix": 24},
            ],
        }
    ]
    assert nic.wanted_address(STATIC) == "203.0.113.50" and nic.wanted_address(DHCP) is None
    assert usable_ipv4(interfaces, MAC, "203.0.113.50") == "203.0.113.50"
    assert usable_ipv4(interfaces, MAC) == "203.0.113.99"
    other_only = [dict(interfaces[0], **{"ip-addresses": interfaces[0]["ip-addresses"][:1]})]
    assert usable_ipv4(other_only, MAC, "203.0.113.50") is None  # another address is not the planned one


DUAL: dict[str, t.Any] = {
    "network": "dual",
    "bridge": "vmbr2",
    "ipv4": {"mode": "static", "address": "203.0.113.50/24", "gateway": "203.0.113.1", "dns": ["203.0.113.53"]},
    "ipv6": {
        "mode": "static",
        "address": "2001:db8:42::50/64",
        "gateway": "2001:db8:42::1",
        "dns": ["2001:db8:42::53"],
        "searchDomain": "lab.example",
    },
}
V6_SLAAC: dict[str, t.Any] = {
    "network": "v6",
    "bridge": "vmbr0",
    "ipv4": {"mode": "none"},
    "ipv6": {"mode": "slaac", "subnet": "2001:db8:7::/64"},
}
DUAL_SEED = """version: 1
config:
    - type: physical
      name: eth0
      mac_address: 'bc:24:11:aa:bb:cc'
      subnets:
      - type: static
        address: '203.0.113.50'
        netmask: '255.255.255.0'
        gateway: '203.0.113.1'
      - type: static6
        address: '2001:db8:42::50/64'
        gateway: '2001:db8:42::1'
    - type: nameserver
      address:
      - '203.0.113.53'
      - '2001:db8:42::53'
      search:
      - 'lab.example'
"""
SLAAC_SEED = """version: 1
config:
    - type: physical
      name: eth0
      mac_address: 'bc:24:11:aa:bb:cc'
      subnets:
      - type: ipv6_slaac
    - type: nameserver
"""


def test_dual_stack_and_slaac_settings() -> None:
    assert nic.ipconfig0_value(DUAL) == "ip=203.0.113.50/24,gw=203.0.113.1,ip6=2001:db8:42::50/64,gw6=2001:db8:42::1"
    assert nic.dns_settings(DUAL) == {"nameserver": "203.0.113.53 2001:db8:42::53", "searchdomain": "lab.example"}
    assert nic.ipconfig0_value(V6_SLAAC) == "ip6=auto"
    assert nic.ipconfig0_value(dict(V6_SLAAC, ipv6={"mode": "dhcp"})) == "ip6=dhcp"
    assert nic.dns_settings(V6_SLAAC) == {"nameserver": None, "searchdomain": None}
    assert nic.wanted_ipv6(DUAL) == {"address": "2001:db8:42::50"}
    assert nic.wanted_ipv6(V6_SLAAC) == {"prefix": "2001:db8:7::/64"}
    assert nic.wanted_ipv6(dict(V6_SLAAC, ipv6={"mode": "dhcp"})) == {} and nic.wanted_ipv6(STATIC) is None


def test_seed_network_config_of_ipv6() -> None:
    validate_network(DUAL_SEED, MAC, DUAL)
    validate_network(SLAAC_SEED, MAC, V6_SLAAC)
    wrong = {
        "static6": DUAL_SEED.replace("2001:db8:42::50/64", "2001:db8:42::51/64"),
        "static6 ": DUAL_SEED.replace("gateway: '2001:db8:42::1'", "gateway: '2001:db8:42::2'"),
        "nameserver": DUAL_SEED.replace("      - '2001:db8:42::53'\n", ""),
    }
    for rule, text in wrong.items():
        with pytest.raises(StageError) as info:
            validate_network(text, MAC, DUAL)
        assert info.value.details["rule"] == rule.strip()
    with pytest.raises(StageError) as info:
        validate_network(SLAAC_SEED.replace("ipv6_slaac", "dhcp6"), MAC, V6_SLAAC)
    assert info.value.details["rule"] == "slaac6"
    with pytest.raises(StageError) as info:  # IPv4 planned none, but the seed asks for DHCPv4
        validate_network(
            SLAAC_SEED.replace("      - type: ipv6_slaac\n", "      - type: ipv6_slaac\n      - type: dhcp4\n"),
            MAC,
            V6_SLAAC,
        )
    assert info.value.details["rule"] == "none4"
    # IPv6 uncompressed in the seed is the same address
    validate_network(DUAL_SEED.replace("2001:db8:42::50/64", "2001:0db8:0042:0:0:0:0:0050/64"), MAC, DUAL)


def test_readiness_waits_for_every_planned_family() -> None:
    def iface(*addresses: tuple[str, str]) -> list[dict[str, t.Any]]:
        return [
            {
                "hardware-address": MAC.lower(),
                "ip-addresses": [{"ip-address-type": kind, "ip-address": ip, "prefix": 64} for kind, ip in addresses],
            }
        ]

    link_local = ("ipv6", "fe80::be24:11ff:feaa:bbcc")
    v4 = ("ipv4", "203.0.113.50")
    assert usable_addresses(iface(v4, link_local), MAC, DUAL) is None  # the static IPv6 is not there yet
    assert usable_addresses(iface(v4, link_local, ("ipv6", "2001:db8:42::50")), MAC, DUAL) == {
        "ipv4": "203.0.113.50",
        "ipv6": "2001:db8:42::50",
    }
    slaac = ("ipv6", "2001:db8:7:0:be24:11ff:feaa:bbcc")
    assert usable_addresses(iface(link_local), MAC, V6_SLAAC) is None
    assert usable_addresses(iface(("ipv6", "2001:db8:8::5"), link_local), MAC, V6_SLAAC) is None  # another prefix
    assert usable_addresses(iface(link_local, slaac), MAC, V6_SLAAC) == {"ipv4": None, "ipv6": slaac[1]}
    assert usable_addresses(iface(v4), MAC, STATIC) == {"ipv4": "203.0.113.50"}  # no IPv6 planned: none waited for
    assert usable_ipv6(iface(link_local, slaac), MAC, {}) == slaac[1]


def test_an_unset_search_domain_or_server_list_is_the_hosts() -> None:
    """qemu-server's get_dns_conf fills what the VM leaves unset from the host's resolv.conf, each on its own."""
    servers_only = dict(STATIC, ipv4={k: v for k, v in STATIC["ipv4"].items() if k != "searchDomain"})
    validate_network(STATIC_SEED.replace("- 'lab.example'", "- 'host.example'"), MAC, servers_only)
    with pytest.raises(StageError) as info:
        validate_network(STATIC_SEED.replace("- '203.0.113.53'", "- '192.0.2.53'"), MAC, servers_only)
    assert info.value.details["rule"] == "nameserver"
    domain_only = dict(STATIC, ipv4={k: v for k, v in STATIC["ipv4"].items() if k != "dns"})
    validate_network(STATIC_SEED.replace("- '203.0.113.53'", "- '192.0.2.53'"), MAC, domain_only)
