# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The planned NIC on the Proxmox side and in the guest (docs/networks.md): what ``net0``, ``ipconfig0``,
``nameserver`` and ``searchdomain`` must say, whether Proxmox's generated network-config says it, and which address
readiness waits for.

A plan without a named network (every plan before networks) is the mapping's bridge with IPv4 DHCP, and is judged
exactly as before: ``net0`` by MAC, bridge and model only, DNS settings untouched.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import ipaddress
import typing as t

from .._api.pveconfig import net_bridge, net_macaddr, parse_property_string
from .._formats.plan import planned_network
from .protocol import StageContext

STATIC = "static"


def planned(ctx: StageContext) -> dict[str, t.Any]:
    """The operation's NIC: its network's, or the plan's bridge with IPv4 DHCP."""
    if named(ctx):
        return planned_network(ctx.mapping)
    return {"bridge": ctx.plan["bridge"], "ipv4": {"mode": "dhcp"}}


def named(ctx: StageContext) -> bool:
    """Whether the plan names a network (then VLAN, MTU and DNS settings are the plan's too)."""
    return isinstance(ctx.mapping.get("network"), dict)


def net0_value(nic: t.Mapping[str, t.Any], mac: str) -> str:
    value = "virtio=%s,bridge=%s" % (mac, nic["bridge"])
    if "vlan" in nic:
        value += ",tag=%d" % nic["vlan"]
    if "mtu" in nic:
        value += ",mtu=%d" % nic["mtu"]
    return value


def ipconfig0_value(nic: t.Mapping[str, t.Any]) -> str:
    ipv4 = nic["ipv4"]
    if ipv4["mode"] != STATIC:
        return "ip=dhcp"
    value = "ip=%s" % ipv4["address"]
    if "gateway" in ipv4:
        value += ",gw=%s" % ipv4["gateway"]
    return value


def dns_settings(nic: t.Mapping[str, t.Any]) -> dict[str, str | None]:
    """``nameserver`` and ``searchdomain`` as a static network sets them (``None``: absent, so the guest gets the
    DHCP server's, or the host's, as Proxmox generates it)."""
    ipv4 = nic["ipv4"]
    servers = ipv4.get("dns") if ipv4["mode"] == STATIC else None
    domain = ipv4.get("searchDomain") if ipv4["mode"] == STATIC else None
    return {"nameserver": " ".join(servers) if servers else None, "searchdomain": domain}


def net0_matches(value: t.Any, nic: t.Mapping[str, t.Any], mac: str, *, with_options: bool) -> bool:
    """``net0`` carries ``mac`` on the planned bridge as a virtio NIC (and, ``with_options``, exactly the planned VLAN
    tag and MTU)."""
    text = str(value or "")
    fields = parse_property_string(text, "model")
    if net_macaddr(text) != mac or net_bridge(text) != nic["bridge"] or "virtio" not in fields:
        return False
    if not with_options:
        return True
    for key, planned_key in (("tag", "vlan"), ("mtu", "mtu")):
        want = str(nic[planned_key]) if planned_key in nic else None
        if fields.get(key) != want:
            return False
    return True


def network_config_matches(entry: t.Mapping[str, t.Any], nic: t.Mapping[str, t.Any]) -> bool:
    """A network-config v1 ``physical`` entry configures the planned IPv4: DHCPv4, or the static address, netmask and
    gateway."""
    subnets = entry.get("subnets")
    if not isinstance(subnets, list):
        return False
    ipv4 = nic["ipv4"]
    if ipv4["mode"] != STATIC:
        return any(isinstance(s, dict) and s.get("type") in ("dhcp", "dhcp4") for s in subnets)
    interface = ipaddress.IPv4Interface(ipv4["address"])
    for subnet in subnets:
        if not isinstance(subnet, dict) or subnet.get("type") != STATIC:
            continue
        address = str(subnet.get("address", ""))
        if "/" not in address and subnet.get("netmask") is not None:
            address = "%s/%s" % (address, subnet["netmask"])
        try:
            if ipaddress.IPv4Interface(address) != interface:
                continue
        except ValueError:
            continue
        gateway_ok = str(subnet.get("gateway")) == ipv4["gateway"] if "gateway" in ipv4 else "gateway" not in subnet
        if gateway_ok:
            return True
    return False


def nameservers_match(config: t.Sequence[t.Any], nic: t.Mapping[str, t.Any]) -> bool:
    """The network-config ``nameserver`` entry lists the planned DNS servers and search domain (a plan without
    them: nothing to check, the guest gets the DHCP server's or the host's)."""
    dns = dns_settings(nic)
    if dns["nameserver"] is None and dns["searchdomain"] is None:
        return True
    entry = next((e for e in config if isinstance(e, dict) and e.get("type") == "nameserver"), None)
    if entry is None:
        return False
    servers = [str(a) for a in entry.get("address") or []]
    search = [str(s) for s in entry.get("search") or []]
    return servers == (dns["nameserver"] or "").split() and search == (
        [dns["searchdomain"]] if dns["searchdomain"] else []
    )


def wanted_address(nic: t.Mapping[str, t.Any]) -> str | None:
    """The IPv4 address readiness waits for on net0: the static one; ``None`` for DHCP (any usable address)."""
    ipv4 = nic["ipv4"]
    return str(ipaddress.IPv4Interface(ipv4["address"]).ip) if ipv4["mode"] == STATIC else None
