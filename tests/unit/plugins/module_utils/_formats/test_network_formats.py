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


def plan(
    definition_doc: dict[str, t.Any], catalog_doc: dict[str, t.Any], addresses: dict[str, str] | None = None
) -> t.Any:
    return build_plan(catalog=dump(catalog_doc), definition=dump(definition_doc), target_vmid=201, addresses=addresses)


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


def test_containers_join_named_networks_too() -> None:
    doc = with_networks(DHCP, STATIC)
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
    wanted = choosing("lab-static", "192.0.2.20")
    wanted["image"] = "debian-12-ct"
    planned = plan(wanted, doc)
    assert planned.plan["guestType"] == "container" and planned.plan["bridge"] == "vmbr2"
    assert planned.plan["nic"]["ipv4"]["address"] == "192.0.2.20/24" and planned.plan["network"] == "ipv4-static"


DUAL = {
    "name": "dual",
    "bridge": "vmbr2",
    "ipv4": {
        "mode": "static",
        "subnet": "192.0.2.0/24",
        "gateway": "192.0.2.1",
        "pool": [{"first": "192.0.2.100", "last": "192.0.2.109"}],
    },
    "ipv6": {
        "mode": "static",
        "subnet": "2001:DB8:42::/64",
        "gateway": "2001:db8:42::1",
        "dns": ["2001:db8:42::53"],
        "pool": [{"first": "2001:db8:42::100", "last": "2001:db8:42::1ff"}],
    },
}
SLAAC = {
    "name": "v6only",
    "bridge": "vmbr0",
    "ipv4": {"mode": "none"},
    "ipv6": {"mode": "slaac", "subnet": "2001:db8:7::/64"},
}


def dual(ipv4: str, ipv6: str) -> dict[str, t.Any]:
    doc = choosing("dual", ipv4)
    doc["network"]["ipv6"] = {"address": ipv6}
    return doc


def test_static_ipv6_is_planned_in_its_compressed_form() -> None:
    planned = plan(dual("192.0.2.20", "2001:0db8:0042:0000:0000:0000:0000:0020"), with_networks(DUAL))
    nic = planned.plan["nic"]
    assert nic["ipv6"] == {
        "mode": "static",
        "address": "2001:db8:42::20/64",
        "gateway": "2001:db8:42::1",
        "dns": ["2001:db8:42::53"],
    }
    assert planned.plan["network"] == "ipv4-static+ipv6-static"
    # the pool is catalog data: the plan records only what the guest gets
    assert "pool" not in nic["ipv4"] and "pool" not in nic["ipv6"]


def test_slaac_without_ipv4() -> None:
    planned = plan(choosing("v6only"), with_networks(SLAAC))
    assert planned.plan["nic"] == {
        "network": "v6only",
        "bridge": "vmbr0",
        "ipv4": {"mode": "none"},
        "ipv6": {"mode": "slaac", "subnet": "2001:db8:7::/64"},
    }
    assert planned.plan["network"] == "ipv6-slaac"


def test_auto_takes_the_leased_address_and_the_plan_binds_it() -> None:
    wanted = dual("auto", "auto")
    first = plan(wanted, with_networks(DUAL), {"ipv4": "192.0.2.100", "ipv6": "2001:db8:42::100"})
    second = plan(wanted, with_networks(DUAL), {"ipv4": "192.0.2.101", "ipv6": "2001:db8:42::100"})
    assert first.plan["nic"]["ipv4"]["address"] == "192.0.2.100/24" and first.plan["nic"]["ipv4"]["leased"] is True
    assert first.definition_hash == second.definition_hash and first.plan_hash != second.plan_hash
    assert first.definition["network"]["ipv4"] == {"address": "auto"}


@pytest.mark.parametrize(
    ("wanted", "addresses", "path", "rule"),
    [
        (("auto", "auto"), {"ipv6": "2001:db8:42::100"}, "network.ipv4.address", "address_not_leased"),
        (("auto", "auto"), {"ipv4": "192.0.2.110", "ipv6": "2001:db8:42::100"}, "network.ipv4.address", "outside_pool"),
        (
            ("auto", "auto"),
            {"ipv4": "192.0.2.100", "ipv6": "2001:db8:42::100/64"},
            "network.ipv6.address",
            "invalid_address",
        ),
        (("192.0.2.20", "2001:db8:42::5"), {"ipv4": "192.0.2.21"}, "network.ipv4.address", "address_mismatch"),
        (("192.0.2.20", "2001:db8:43::5"), None, "network.ipv6.address", "outside_subnet"),
        (("192.0.2.20", "2001:db8:42::"), None, "network.ipv6.address", "network_address"),
        (("192.0.2.20", "2001:db8:42::1"), None, "network.ipv6.address", "gateway_address"),
    ],
)
def test_refused_dual_stack_addresses(
    wanted: tuple[str, str], addresses: dict[str, str] | None, path: str, rule: str
) -> None:
    with pytest.raises(InputError) as caught:
        plan(dual(*wanted), with_networks(DUAL), addresses)
    assert (caught.value.code, caught.value.path, caught.value.details["rule"]) == (
        "invalid_network_address",
        path,
        rule,
    )


def test_auto_without_a_pool_and_addresses_without_a_network() -> None:
    with pytest.raises(InputError) as caught:
        plan(choosing("lab-static", "auto"), with_networks(STATIC), {"ipv4": "192.0.2.20"})
    assert caught.value.details["rule"] == "no_pool"
    with pytest.raises(InputError) as caught:
        plan(definition(), with_networks(STATIC), {"ipv4": "192.0.2.20"})
    assert caught.value.details["rule"] == "address_not_allowed"
    with pytest.raises(InputError) as caught:
        plan(definition(), with_networks(STATIC), {"ipv5": "x"})  # type: ignore[dict-item]
    assert (caught.value.path, caught.value.details["rule"]) == ("addresses", "keys")


@pytest.mark.parametrize(
    ("change", "path", "rule"),
    [
        ({"ipv4": {"mode": "none"}, "ipv6": {"mode": "none"}}, "networks[0]", "no_address_family"),
        ({"ipv4": {"mode": "none"}}, "networks[0]", "no_address_family"),
        ({"ipv6": {"mode": "slaac", "gateway": "2001:db8::1"}}, "networks[0].ipv6.gateway", "dhcp_static_field"),
        ({"ipv6": {"mode": "static", "subnet": "2001:db8::1/64"}}, "networks[0].ipv6.subnet", "subnet_host_bits"),
        ({"ipv6": {"mode": "static", "subnet": "2001:db8::/127"}}, "networks[0].ipv6.subnet", "subnet_too_small"),
        (
            {"ipv6": {"mode": "static", "subnet": "2001:db8::/64", "gateway": "::"}},
            "networks[0].ipv6.gateway",
            "gateway_outside_subnet",
        ),
        (
            {"ipv6": {"mode": "static", "subnet": "2001:db8::/64", "gateway": "2001:db8:::1"}},
            "networks[0].ipv6.gateway",
            "invalid_address",
        ),
        (
            {"ipv6": {"mode": "static", "subnet": "2001:db8::/64", "searchDomain": "other.example"}},
            "networks[0].ipv6.searchDomain",
            "search_domain_conflict",
        ),
        ({"ipv6": {"mode": "none", "subnet": "2001:db8::/64"}}, "networks[0].ipv6", "dhcp_static_field"),
        (
            {"ipv4": dict(STATIC["ipv4"], pool=[{"first": "192.0.2.10", "last": "192.0.3.10"}])},
            "networks[0].ipv4.pool[0].last",
            "pool_outside_subnet",
        ),
        (
            {"ipv4": dict(STATIC["ipv4"], pool=[{"first": "192.0.2.10", "last": "192.0.2.9"}])},
            "networks[0].ipv4.pool[0].last",
            "pool_order",
        ),
        (
            {"ipv4": {"mode": "dhcp", "pool": [{"first": "192.0.2.10", "last": "192.0.2.9"}]}},
            "networks[0].ipv4.pool",
            "dhcp_static_field",
        ),
    ],
)
def test_catalog_dual_stack_rules(change: dict[str, t.Any], path: str, rule: str) -> None:
    with pytest.raises(FormatError) as caught:
        parse_catalog(text=dump(with_networks(dict(STATIC, **change))))
    assert (caught.value.path, caught.value.rule) == (path, rule)


def test_a_repeat_of_auto_compares_with_the_recorded_lease() -> None:
    recorded = plan(dual("auto", "2001:db8:42::5"), with_networks(DUAL), {"ipv4": "192.0.2.104"}).mapping
    check_repeat_mapping(
        parse_catalog(text=dump(with_networks(DUAL))),
        parse_definition(text=dump(dual("auto", "2001:db8:42::5"))),
        recorded,
    )
    shrunk = dict(DUAL, ipv4=dict(DUAL["ipv4"], pool=[{"first": "192.0.2.100", "last": "192.0.2.103"}]))
    with pytest.raises(InputError) as caught:
        check_repeat_mapping(
            parse_catalog(text=dump(with_networks(shrunk))),
            parse_definition(text=dump(dual("auto", "2001:db8:42::5"))),
            recorded,
        )
    assert (caught.value.code, caught.value.details["fields"]) == ("repeat_mapping_changed", ["network"])
