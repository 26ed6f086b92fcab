# SPDX-License-Identifier: GPL-3.0-or-later
"""Named networks (docs/networks.md): catalog rules, a definition's pick, the planned NIC, and hashes unchanged
for everything that names no network."""

from __future__ import annotations

import typing as t

import pytest
from format_samples import PLANTED, catalog, definition, dump

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import parse_definition
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import FormatError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    build_plan,
    check_repeat_mapping,
    planned_network,
)

STATIC = {
    "name": "lab-static",
    "bridge": "vmbr2",
    "vlan": 42,
    "mtu": 9000,
    "ipv4": {
        "mode": "static",
        "subnet": "192.0.2.0/24",
        "gateway": "192.0.2.1",
        "dns": ["192.0.2.53", "198.51.100.53"],
        "searchDomain": "lab.example",
    },
}
DHCP = {"name": "office", "bridge": "vmbr1", "ipv4": {"mode": "dhcp"}}


def with_networks(*networks: dict[str, t.Any]) -> dict[str, t.Any]:
    doc = catalog()
    doc["networks"] = [dict(n) for n in networks]
    return doc


def choosing(name: str, address: str | None = None) -> dict[str, t.Any]:
    doc = definition()
    doc["network"] = {"name": name}
    if address is not None:
        doc["network"]["ipv4"] = {"address": address}
    return doc


def plan(definition_doc: dict[str, t.Any], catalog_doc: dict[str, t.Any]) -> t.Any:
    return build_plan(catalog=dump(catalog_doc), definition=dump(definition_doc), target_vmid=201)


def test_no_network_keeps_every_hash() -> None:
    """A catalog with networks, and a definition naming none, plan exactly as before networks existed."""
    before = plan(definition(), catalog())
    after = plan(definition(), with_networks(STATIC, DHCP))
    assert (after.definition_hash, after.plan_hash, after.plan) == (
        before.definition_hash,
        before.plan_hash,
        before.plan,
    )
    assert "nic" not in after.plan and after.plan["network"] == "ipv4-dhcp" and "network" not in after.mapping
    assert planned_network(after.mapping) == {"bridge": "vmbr0", "ipv4": {"mode": "dhcp"}}


def test_static_network_plans_the_nic() -> None:
    planned = plan(choosing("lab-static", "192.0.2.20"), with_networks(DHCP, STATIC))
    nic = {
        "network": "lab-static",
        "bridge": "vmbr2",
        "vlan": 42,
        "mtu": 9000,
        "ipv4": {
            "mode": "static",
            "address": "192.0.2.20/24",
            "gateway": "192.0.2.1",
            "dns": ["192.0.2.53", "198.51.100.53"],
            "searchDomain": "lab.example",
        },
    }
    assert planned.mapping["network"] == nic and planned.plan["source"]["network"] == nic
    assert planned.plan["nic"] == nic and planned.plan["bridge"] == "vmbr2" and planned.plan["network"] == "ipv4-static"
    assert planned.definition["network"] == {"name": "lab-static", "ipv4": {"address": "192.0.2.20"}}
    other = plan(choosing("lab-static", "192.0.2.21"), with_networks(DHCP, STATIC))
    assert other.definition_hash != planned.definition_hash and other.plan_hash != planned.plan_hash
    moved = dict(STATIC, vlan=43)
    assert plan(choosing("lab-static", "192.0.2.20"), with_networks(moved)).plan_hash != planned.plan_hash


def test_dhcp_network_plans_its_bridge() -> None:
    planned = plan(choosing("office"), with_networks(DHCP))
    assert planned.plan["nic"] == {"network": "office", "bridge": "vmbr1", "ipv4": {"mode": "dhcp"}}
    assert planned.plan["bridge"] == "vmbr1" and planned.plan["network"] == "ipv4-dhcp"


@pytest.mark.parametrize(
    ("name", "address", "code", "rule"),
    [
        ("nowhere", None, "network_not_in_catalog", "not_in_catalog"),
        ("lab-static", None, "invalid_network_address", "address_required"),
        ("office", "192.0.2.20", "invalid_network_address", "address_not_allowed"),
        ("lab-static", "198.51.100.7", "invalid_network_address", "outside_subnet"),
        ("lab-static", "192.0.2.0", "invalid_network_address", "network_address"),
        ("lab-static", "192.0.2.255", "invalid_network_address", "broadcast_address"),
        ("lab-static", "192.0.2.1", "invalid_network_address", "gateway_address"),
    ],
)
def test_refused_addresses(name: str, address: str | None, code: str, rule: str) -> None:
    with pytest.raises(InputError) as caught:
        plan(choosing(name, address), with_networks(STATIC, DHCP))
    assert (caught.value.code, caught.value.details["rule"]) == (code, rule)
    assert caught.value.path == ("network.name" if code == "network_not_in_catalog" else "network.ipv4.address")
    assert address is None or address not in str(caught.value)  # the address is never echoed


@pytest.mark.parametrize(
    ("change", "path", "rule"),
    [
        ({"ipv4": {"mode": "dhcp", "gateway": "192.0.2.1"}}, "networks[0].ipv4.gateway", "dhcp_static_field"),
        ({"ipv4": {"mode": "static"}}, "networks[0].ipv4.subnet", "static_subnet_required"),
        ({"ipv4": {"mode": "static", "subnet": "192.0.2.5/24"}}, "networks[0].ipv4.subnet", "subnet_host_bits"),
        ({"ipv4": {"mode": "static", "subnet": "192.0.2.0/31"}}, "networks[0].ipv4.subnet", "subnet_too_small"),
        (
            {"ipv4": {"mode": "static", "subnet": "192.0.2.0/24", "gateway": "192.0.3.1"}},
            "networks[0].ipv4.gateway",
            "gateway_outside_subnet",
        ),
        (
            {"ipv4": {"mode": "static", "subnet": "192.0.2.0/24", "gateway": "192.0.2.255"}},
            "networks[0].ipv4.gateway",
            "gateway_outside_subnet",
        ),
        ({"vlan": 4095}, "networks[0].vlan", "maximum"),
        ({"mtu": 100}, "networks[0].mtu", "minimum"),
        ({"ipv4": {"mode": "static", "subnet": "192.0.2.0/24", "dns": []}}, "networks[0].ipv4.dns", "min_items"),
        ({"ipv4": {"mode": "slaac"}}, "networks[0].ipv4.mode", "enum"),
        ({"bridge": PLANTED + "-too-long-for-a-bridge"}, "networks[0].bridge", "pattern"),
    ],
)
def test_catalog_network_rules(change: dict[str, t.Any], path: str, rule: str) -> None:
    with pytest.raises(FormatError) as caught:
        parse_catalog(text=dump(with_networks(dict(STATIC, **change))))
    assert (caught.value.code, caught.value.path, caught.value.rule) == (
        "invalid_catalog",
        path,
        rule,
    )
    assert PLANTED not in str(caught.value)


def test_network_names_are_unique() -> None:
    with pytest.raises(FormatError) as caught:
        parse_catalog(text=dump(with_networks(STATIC, dict(DHCP, name="lab-static"))))
    assert (caught.value.path, caught.value.rule) == ("networks[1].name", "duplicate_network")


def test_definition_network_schema() -> None:
    doc = choosing("lab-static", "192.0.2.20")
    doc["network"]["ipv4"]["gateway"] = "192.0.2.1"
    with pytest.raises(FormatError) as caught:
        parse_definition(text=dump(doc))
    assert (caught.value.path, caught.value.rule) == ("network.ipv4", "unknown_field")
    bad = choosing("lab-static", "192.0.2.300")
    with pytest.raises(FormatError) as caught:
        parse_definition(text=dump(bad))
    assert (caught.value.path, caught.value.rule) == ("network.ipv4.address", "pattern")


def test_a_repeat_checks_the_network_too() -> None:
    """The repeat of a recorded operation compares the network the definition names, as the catalog has it now."""
    recorded = plan(choosing("lab-static", "192.0.2.20"), with_networks(STATIC)).mapping
    current = parse_catalog(text=dump(with_networks(dict(STATIC, mtu=1500))))
    with pytest.raises(InputError) as caught:
        check_repeat_mapping(current, parse_definition(text=dump(choosing("lab-static", "192.0.2.20"))), recorded)
    assert (caught.value.code, caught.value.details["fields"]) == ("repeat_mapping_changed", ["network"])
    same = parse_catalog(text=dump(with_networks(STATIC)))
    check_repeat_mapping(same, parse_definition(text=dump(choosing("lab-static", "192.0.2.20"))), recorded)


def test_containers_refuse_a_named_network() -> None:
    doc = with_networks(DHCP)
    doc["images"].append(
        {
            "image": "debian-12-ct",
            "guestType": "container",
            "node": "pve-test",
            "ostemplate": "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst",
            "storage": "local-lvm",
            "bridge": "vmbr0",
            "guestUser": "root",
        }
    )
    wanted = choosing("office")
    wanted["image"] = "debian-12-ct"
    with pytest.raises(InputError) as caught:
        plan(wanted, doc)
    assert (caught.value.code, caught.value.details["rule"]) == ("invalid_plan", "container_network")
