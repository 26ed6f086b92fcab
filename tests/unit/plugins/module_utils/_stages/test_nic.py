# SPDX-License-Identifier: GPL-3.0-or-later
"""The planned NIC on the Proxmox side and in the guest (docs/networks.md): net0, ipconfig0 and DNS settings, the seed's
network-config verdicts, and the address readiness waits for."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import nic
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import usable_ipv4
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
