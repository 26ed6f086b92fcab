# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Named networks (docs/networks.md): the catalog declares them, a definition picks one, the plan carries the NIC.

``network_rules`` checks one catalog network beyond its schema (the subnet's host bits, the gateway inside it, no
static-only field on a DHCP network) and normalizes it. ``planned_nic`` resolves a definition's ``network`` against
the catalog into the NIC the plan records (and hashes, as part of the plan's mapping): bridge, VLAN, MTU and the IPv4
settings, the static address with the subnet's prefix. A definition without ``network`` gets no NIC entry: its plan,
and every hash over it, stay exactly what they were (the mapping's bridge, IPv4 DHCP).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import ipaddress
import typing as t

from .._core.errors import InputError
from .format_errors import FormatError

STATIC = "static"
DHCP = "dhcp"
_STATIC_ONLY = ("subnet", "gateway", "dns", "searchDomain")


def network_rules(network: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    """One schema-valid catalog network, normalized (field order: name, bridge, vlan, mtu, ipv4)."""
    result: dict[str, t.Any] = {"name": str(network["name"]), "bridge": str(network["bridge"])}
    for key in ("vlan", "mtu"):
        if key in network:
            result[key] = int(network[key])
    ipv4 = network["ipv4"]
    mode = str(ipv4["mode"])
    if mode == DHCP:
        for key in _STATIC_ONLY:
            if key in ipv4:
                raise FormatError(code, "%s.ipv4.%s" % (path, key), "dhcp_static_field")
        result["ipv4"] = {"mode": DHCP}
        return result
    if "subnet" not in ipv4:
        raise FormatError(code, path + ".ipv4.subnet", "static_subnet_required")
    try:
        subnet = ipaddress.IPv4Network(str(ipv4["subnet"]), strict=True)
    except ValueError:
        raise FormatError(code, path + ".ipv4.subnet", "subnet_host_bits") from None
    if subnet.prefixlen > 30:
        raise FormatError(code, path + ".ipv4.subnet", "subnet_too_small")
    normalized: dict[str, t.Any] = {"mode": STATIC, "subnet": str(subnet)}
    if "gateway" in ipv4:
        gateway = ipaddress.IPv4Address(str(ipv4["gateway"]))
        if gateway not in subnet or gateway in (subnet.network_address, subnet.broadcast_address):
            raise FormatError(code, path + ".ipv4.gateway", "gateway_outside_subnet")
        normalized["gateway"] = str(gateway)
    if "dns" in ipv4:
        normalized["dns"] = [str(server) for server in ipv4["dns"]]
    if "searchDomain" in ipv4:
        normalized["searchDomain"] = str(ipv4["searchDomain"])
    result["ipv4"] = normalized
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


def _address_error(rule: str, text: str) -> InputError:
    return InputError(text, code="invalid_network_address", path="network.ipv4.address", details={"rule": rule})


def planned_nic(catalog: t.Mapping[str, t.Any], definition: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
    """The NIC a definition's ``network`` asks for, resolved against the catalog; ``None`` without ``network``."""
    chosen = definition.get("network")
    if chosen is None:
        return None
    network = next((n for n in catalog.get("networks", []) if n["name"] == chosen["name"]), None)
    if network is None:
        raise InputError(code="network_not_in_catalog", path="network.name", details={"rule": "not_in_catalog"})
    nic: dict[str, t.Any] = {"network": network["name"], "bridge": network["bridge"]}
    for key in ("vlan", "mtu"):
        if key in network:
            nic[key] = network[key]
    ipv4 = network["ipv4"]
    given = (chosen.get("ipv4") or {}).get("address")
    if ipv4["mode"] == DHCP:
        if given is not None:
            raise _address_error("address_not_allowed", "The network is DHCP: the definition must not give an address.")
        nic["ipv4"] = {"mode": DHCP}
        return nic
    if given is None:
        raise _address_error("address_required", "The network is static: the definition must give an address.")
    subnet = ipaddress.IPv4Network(ipv4["subnet"])
    address = ipaddress.IPv4Address(given)
    if address not in subnet:
        raise _address_error("outside_subnet", "The address is outside the network's subnet.")
    if address == subnet.network_address:
        raise _address_error("network_address", "The address is the subnet's network address.")
    if address == subnet.broadcast_address:
        raise _address_error("broadcast_address", "The address is the subnet's broadcast address.")
    if "gateway" in ipv4 and address == ipaddress.IPv4Address(ipv4["gateway"]):
        raise _address_error("gateway_address", "The address is the network's gateway.")
    planned: dict[str, t.Any] = {"mode": STATIC, "address": "%s/%d" % (address, subnet.prefixlen)}
    for key in ("gateway", "dns", "searchDomain"):
        if key in ipv4:
            planned[key] = ipv4[key]
    nic["ipv4"] = planned
    return nic
