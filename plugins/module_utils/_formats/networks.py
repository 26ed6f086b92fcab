# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Named networks (docs/networks.md): the catalog declares them, a definition picks one, the plan carries the NIC.

``network_rules`` checks one catalog network beyond its schema (a subnet's host bits, the gateway and the address pool
inside it, no static-only field on another mode, at least one address family) and normalizes it. ``planned_nic``
resolves a definition's ``network`` against the catalog into the NIC the plan records (and hashes, as part of the
plan's mapping): bridge, VLAN, MTU and per family the mode and, for static, the address with the subnet's prefix.
``address: auto`` takes the address leased for the plan (``leased``, from ``_journal/addresses.py``), which must lie in
the network's pool. A definition without ``network`` gets no NIC entry: its plan, and every hash over it, stay exactly
what they were (the mapping's bridge, IPv4 DHCP).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import ipaddress
import typing as t

from .._core.errors import InputError
from .format_errors import FormatError

STATIC = "static"
DHCP = "dhcp"
SLAAC = "slaac"
NONE = "none"
AUTO = "auto"
FAMILIES = ("ipv4", "ipv6")
_STATIC_ONLY = ("gateway", "dns", "searchDomain", "pool")
# The smallest subnet a static network may have: room for the guest and a gateway.
_MAX_PREFIX = {"ipv4": 30, "ipv6": 126}

IPAddress = t.Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = t.Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


def parse_address(family: str, text: str) -> IPAddress:
    """An address of ``family``; ``ValueError`` otherwise (IPv6 in any valid notation: the plan keeps the compressed)."""
    return ipaddress.IPv4Address(text) if family == "ipv4" else ipaddress.IPv6Address(text)


def parse_subnet(family: str, text: str) -> IPNetwork:
    """A subnet of ``family`` with its host bits zero; ``ValueError`` otherwise."""
    if family == "ipv4":
        return ipaddress.IPv4Network(text, strict=True)
    return ipaddress.IPv6Network(text, strict=True)


def reserved_addresses(subnet: IPNetwork, gateway: str | None) -> set[IPAddress]:
    """Addresses of a subnet no guest may have: its network address, IPv4's broadcast address, the gateway."""
    reserved: set[IPAddress] = {subnet.network_address}
    if subnet.version == 4:
        reserved.add(subnet.broadcast_address)
    if gateway is not None:
        reserved.add(ipaddress.ip_address(gateway))
    return reserved


def _family_rules(family: str, settings: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    mode = str(settings["mode"])
    if mode != STATIC:
        allowed = ("subnet",) if family == "ipv6" and mode in (SLAAC, DHCP) else ()
        for key in ("subnet",) + _STATIC_ONLY:
            if key in settings and key not in allowed:
                raise FormatError(code, "%s.%s" % (path, key), "dhcp_static_field")
        normalized: dict[str, t.Any] = {"mode": mode}
        if "subnet" in settings:
            try:
                normalized["subnet"] = str(parse_subnet(family, str(settings["subnet"])))
            except ValueError:
                raise FormatError(code, path + ".subnet", "subnet_host_bits") from None
        return normalized
    if "subnet" not in settings:
        raise FormatError(code, path + ".subnet", "static_subnet_required")
    try:
        subnet = parse_subnet(family, str(settings["subnet"]))
    except ValueError:
        raise FormatError(code, path + ".subnet", "subnet_host_bits") from None
    if subnet.prefixlen > _MAX_PREFIX[family]:
        raise FormatError(code, path + ".subnet", "subnet_too_small")
    normalized = {"mode": STATIC, "subnet": str(subnet)}
    if "gateway" in settings:
        try:
            gateway = parse_address(family, str(settings["gateway"]))
        except ValueError:
            raise FormatError(code, path + ".gateway", "invalid_address") from None
        if gateway not in subnet or gateway in reserved_addresses(subnet, None):
            raise FormatError(code, path + ".gateway", "gateway_outside_subnet")
        normalized["gateway"] = str(gateway)
    if "dns" in settings:
        servers = []
        for index, server in enumerate(settings["dns"]):
            try:
                servers.append(str(parse_address(family, str(server))))
            except ValueError:
                raise FormatError(code, "%s.dns[%d]" % (path, index), "invalid_address") from None
        normalized["dns"] = servers
    if "searchDomain" in settings:
        normalized["searchDomain"] = str(settings["searchDomain"])
    if "pool" in settings:
        normalized["pool"] = _pool_rules(family, settings["pool"], subnet, normalized.get("gateway"), path, code)
    return normalized


def _pool_rules(
    family: str, pool: t.Sequence[t.Mapping[str, t.Any]], subnet: IPNetwork, gateway: str | None, path: str, code: str
) -> list[dict[str, str]]:
    ranges = []
    for index, item in enumerate(pool):
        where = "%s.pool[%d]" % (path, index)
        bounds = []
        for key in ("first", "last"):
            try:
                address = parse_address(family, str(item[key]))
            except ValueError:
                raise FormatError(code, "%s.%s" % (where, key), "invalid_address") from None
            if address not in subnet:
                raise FormatError(code, "%s.%s" % (where, key), "pool_outside_subnet")
            bounds.append(address)
        if int(bounds[0]) > int(bounds[1]):
            raise FormatError(code, where + ".last", "pool_order")
        if bounds[0] == bounds[1] and bounds[0] in reserved_addresses(subnet, gateway):
            raise FormatError(code, where, "pool_empty")
        ranges.append({"first": str(bounds[0]), "last": str(bounds[1])})
    return ranges


def network_rules(network: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    """One schema-valid catalog network, normalized (field order: name, bridge, vlan, mtu, ipv4, ipv6).

    ``ipv6`` is kept only when its mode is not ``none``; with IPv4 ``none`` too the network would give the guest no
    address at all (``no_address_family``). Both static families may name DNS servers; their search domains must
    agree, as Proxmox has one ``searchdomain`` (``search_domain_conflict``)."""
    result: dict[str, t.Any] = {"name": str(network["name"]), "bridge": str(network["bridge"])}
    for key in ("vlan", "mtu"):
        if key in network:
            result[key] = int(network[key])
    result["ipv4"] = _family_rules("ipv4", network["ipv4"], path + ".ipv4", code)
    if "ipv6" in network and network["ipv6"]["mode"] != NONE:
        result["ipv6"] = _family_rules("ipv6", network["ipv6"], path + ".ipv6", code)
    elif "ipv6" in network and len(network["ipv6"]) > 1:
        raise FormatError(code, path + ".ipv6", "dhcp_static_field")
    if result["ipv4"]["mode"] == NONE and "ipv6" not in result:
        raise FormatError(code, path, "no_address_family")
    domains = {result[f]["searchDomain"] for f in FAMILIES if f in result and "searchDomain" in result[f]}
    if len(domains) > 1:
        raise FormatError(code, path + ".ipv6.searchDomain", "search_domain_conflict")
    return result


def catalog_networks(networks: t.Sequence[t.Mapping[str, t.Any]], code: str) -> list[dict[str, t.Any]]:
    """Every catalog network normalized; names unique (``duplicate_network`` at the later one)."""
    seen: set[str] = set()
    result = []
    for index, network in enumerate(networks):
        path = "networks[%d]" % index
        if network["name"] in seen:
            raise FormatError(code, path + ".name", "duplicate_network")
        seen.add(network["name"])
        result.append(network_rules(network, path, code))
    return result


def catalog_network(catalog: t.Mapping[str, t.Any], name: str) -> dict[str, t.Any]:
    """The catalog network called ``name`` (``network_not_in_catalog`` otherwise)."""
    network = next((n for n in catalog.get("networks", []) if n["name"] == name), None)
    if network is None:
        raise InputError(code="network_not_in_catalog", path="network.name", details={"rule": "not_in_catalog"})
    return dict(network)


def _address_error(family: str, rule: str, text: str) -> InputError:
    return InputError(text, code="invalid_network_address", path="network.%s.address" % family, details={"rule": rule})


def in_pool(family: str, settings: t.Mapping[str, t.Any], address: IPAddress) -> bool:
    return any(
        int(parse_address(family, item["first"])) <= int(address) <= int(parse_address(family, item["last"]))
        for item in settings.get("pool", [])
    )


def _static_address(
    family: str, settings: t.Mapping[str, t.Any], given: str, leased: t.Mapping[str, str]
) -> dict[str, t.Any]:
    """The planned static settings of one family: the definition's address, or for ``auto`` the leased one."""
    if given == AUTO:
        if "pool" not in settings:
            raise _address_error(family, "no_pool", "address: auto needs an address pool in the catalog network.")
        if family not in leased:
            raise _address_error(
                family, "address_not_leased", "address: auto needs a leased address (vmanyware_address reserves one)."
            )
        text = leased[family]
    else:
        if family in leased and leased[family] != given:
            raise _address_error(family, "address_mismatch", "The leased address is not the definition's address.")
        text = given
    subnet = parse_subnet(family, settings["subnet"])
    try:
        address = parse_address(family, text)
    except ValueError:
        raise _address_error(family, "invalid_address", "The address is not a valid address of its family.") from None
    if address not in subnet:
        raise _address_error(family, "outside_subnet", "The address is outside the network's subnet.")
    if address == subnet.network_address:
        raise _address_error(family, "network_address", "The address is the subnet's network address.")
    if family == "ipv4" and address == subnet.broadcast_address:
        raise _address_error(family, "broadcast_address", "The address is the subnet's broadcast address.")
    if "gateway" in settings and address == parse_address(family, settings["gateway"]):
        raise _address_error(family, "gateway_address", "The address is the network's gateway.")
    if given == AUTO and not in_pool(family, settings, address):
        raise _address_error(family, "outside_pool", "The leased address is outside the network's pool.")
    planned: dict[str, t.Any] = {"mode": STATIC, "address": "%s/%d" % (address, subnet.prefixlen)}
    if given == AUTO:
        planned["leased"] = True
    for key in ("gateway", "dns", "searchDomain"):
        if key in settings:
            planned[key] = settings[key]
    return planned


def planned_nic(
    catalog: t.Mapping[str, t.Any], definition: t.Mapping[str, t.Any], leased: t.Mapping[str, str] | None = None
) -> dict[str, t.Any] | None:
    """The NIC a definition's ``network`` asks for, resolved against the catalog; ``None`` without ``network``.

    ``leased`` maps a family to the address leased for ``address: auto`` (the plan input ``addresses``)."""
    chosen = definition.get("network")
    leased = dict(leased or {})
    if chosen is None:
        if leased:
            raise _address_error(
                sorted(leased)[0], "address_not_allowed", "Addresses were given but the definition names no network."
            )
        return None
    network = catalog_network(catalog, chosen["name"])
    nic: dict[str, t.Any] = {"network": network["name"], "bridge": network["bridge"]}
    for key in ("vlan", "mtu"):
        if key in network:
            nic[key] = network[key]
    for family in FAMILIES:
        settings = network.get(family, {"mode": NONE})
        given = (chosen.get(family) or {}).get("address")
        if settings["mode"] != STATIC:
            if given is not None or family in leased:
                raise _address_error(
                    family, "address_not_allowed", "The network's %s is not static: give no address." % family
                )
            if family in network:
                nic[family] = {key: settings[key] for key in ("mode", "subnet") if key in settings}
            continue
        if given is None:
            raise _address_error(family, "address_required", "The network's %s is static: give an address." % family)
        nic[family] = _static_address(family, settings, given, leased)
    return nic


def static_families(nic: t.Mapping[str, t.Any]) -> list[str]:
    """The families of a planned NIC with a static address."""
    return [family for family in FAMILIES if nic.get(family, {}).get("mode") == STATIC]


def planned_address(nic: t.Mapping[str, t.Any], family: str) -> str | None:
    """The bare static address of ``family`` (no prefix); ``None`` when that family is not static."""
    settings = nic.get(family) or {}
    if settings.get("mode") != STATIC:
        return None
    return str(settings["address"]).split("/", 1)[0]


def pool_placeholders(catalog: t.Mapping[str, t.Any], definition: t.Mapping[str, t.Any]) -> dict[str, str]:
    """For each family a definition leaves to the pool (``address: auto``), the pool's first address: what placement
    resolves the NIC with, as it reads only the bridge and VLAN (the real address is leased separately, and planned)."""
    chosen = definition.get("network") or {}
    network = next((n for n in catalog.get("networks", []) if n["name"] == chosen.get("name")), None)
    if network is None:
        return {}
    return {
        family: network[family]["pool"][0]["first"]
        for family in FAMILIES
        if (chosen.get(family) or {}).get("address") == AUTO and "pool" in (network.get(family) or {})
    }
