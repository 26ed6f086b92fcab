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

from .._formats.networks import NONE, STATIC, planned_address

# ipconfigN's value per non-static mode (qemu-server's Network.pm: ip6=auto is SLAAC).
_IPCONFIG_MODES = {"dhcp": "dhcp", "slaac": "auto"}
# The network-config v1 subnet types Proxmox's nocloud generator writes per family and mode.
_SUBNET_TYPES = {
    "ipv4": {"dhcp": {"dhcp", "dhcp4"}, STATIC: {"static"}},
    "ipv6": {"dhcp": {"dhcp6"}, "slaac": {"ipv6_slaac"}, STATIC: {"static6"}},
}


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
    """``ip=``/``gw=`` and ``ip6=``/``gw6=`` of the planned families (``ip=dhcp`` for every plan without a network)."""
    parts = []
    for family, ip_key, gw_key in (("ipv4", "ip", "gw"), ("ipv6", "ip6", "gw6")):
        settings = nic.get(family) or {"mode": NONE}
        if settings["mode"] == STATIC:
            parts.append("%s=%s" % (ip_key, settings["address"]))
            if "gateway" in settings:
                parts.append("%s=%s" % (gw_key, settings["gateway"]))
        elif settings["mode"] != NONE:
            parts.append("%s=%s" % (ip_key, _IPCONFIG_MODES[settings["mode"]]))
    return ",".join(parts)


def dns_settings(nic: t.Mapping[str, t.Any]) -> dict[str, str | None]:
    """``nameserver`` and ``searchdomain`` as a static network sets them: the IPv4 servers, then the IPv6 ones, and the
    (one) search domain (``None``: absent, so the guest gets the DHCP server's, or the host's, as Proxmox generates it)."""
    servers: list[str] = []
    domain = None
    for family in ("ipv4", "ipv6"):
        settings = nic.get(family) or {"mode": NONE}
        if settings["mode"] == STATIC:
            servers += settings.get("dns", [])
            domain = domain or settings.get("searchDomain")
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


def _static_subnet_matches(subnet: t.Mapping[str, t.Any], settings: t.Mapping[str, t.Any], family: str) -> bool:
    address = str(subnet.get("address", ""))
    if "/" not in address and subnet.get("netmask") is not None:
        address = "%s/%s" % (address, subnet["netmask"])
    try:
        if ipaddress.ip_interface(address) != ipaddress.ip_interface(settings["address"]):
            return False
    except ValueError:
        return False
    if "gateway" not in settings:
        return "gateway" not in subnet
    try:
        return ipaddress.ip_address(str(subnet.get("gateway"))) == ipaddress.ip_address(settings["gateway"])
    except ValueError:
        return False


def family_config_matches(entry: t.Mapping[str, t.Any], nic: t.Mapping[str, t.Any], family: str) -> bool:
    """A network-config v1 ``physical`` entry configures the planned ``family`` as Proxmox generates it: ``dhcp4``,
    ``dhcp6``, ``ipv6_slaac``, or a ``static``/``static6`` subnet with the address, netmask and gateway; a family
    that is ``none`` has no subnet of its kind."""
    subnets = [s for s in entry.get("subnets") or [] if isinstance(s, dict)]
    settings = nic.get(family)
    if settings is None:  # the plan says nothing of this family (IPv6 before named networks): not judged
        return True
    kinds = _SUBNET_TYPES[family]
    if settings["mode"] == NONE:
        return not any(s.get("type") in set().union(*kinds.values()) for s in subnets)
    if settings["mode"] != STATIC:
        return any(s.get("type") in kinds[settings["mode"]] for s in subnets)
    return any(s.get("type") in kinds[STATIC] and _static_subnet_matches(s, settings, family) for s in subnets)


def network_config_mismatch(entry: t.Mapping[str, t.Any], nic: t.Mapping[str, t.Any]) -> str | None:
    """The rule a ``physical`` entry breaks (``static4``, ``dhcp4``, ``none4``, ``static6``, ``slaac6``, ...), or
    ``None`` when it configures every planned family."""
    for family, suffix in (("ipv4", "4"), ("ipv6", "6")):
        if not family_config_matches(entry, nic, family):
            return str((nic.get(family) or {"mode": NONE})["mode"]) + suffix
    return None


def nameservers_match(config: t.Sequence[t.Any], nic: t.Mapping[str, t.Any]) -> bool:
    """The network-config ``nameserver`` entry lists the planned DNS servers and search domain. Each that the plan
    leaves unset is not judged: Proxmox fills it from the host's resolv.conf (qemu-server's ``get_dns_conf``)."""
    dns = dns_settings(nic)
    if dns["nameserver"] is None and dns["searchdomain"] is None:
        return True
    entry = next((e for e in config if isinstance(e, dict) and e.get("type") == "nameserver"), None)
    if entry is None:
        return False
    servers = [str(a) for a in entry.get("address") or []]
    search = [str(s) for s in entry.get("search") or []]
    if dns["nameserver"] is not None and servers != dns["nameserver"].split():
        return False
    return dns["searchdomain"] is None or search == [dns["searchdomain"]]


def wanted_address(nic: t.Mapping[str, t.Any]) -> str | None:
    """The IPv4 address readiness waits for on net0: the static one; ``None`` for DHCP (any usable address)."""
    return planned_address(nic, "ipv4")


def wanted_ipv6(nic: t.Mapping[str, t.Any]) -> dict[str, str] | None:
    """What readiness waits for in IPv6 on net0: ``{address}`` (static), ``{prefix}`` (SLAAC or DHCPv6 with a known
    prefix), ``{}`` (any global address); ``None`` when the plan configures no IPv6."""
    settings = nic.get("ipv6") or {"mode": NONE}
    if settings["mode"] == NONE:
        return None
    if settings["mode"] == STATIC:
        return {"address": str(planned_address(nic, "ipv6"))}
    return {"prefix": settings["subnet"]} if "subnet" in settings else {}


def container_net0_value(nic: t.Mapping[str, t.Any], mac: str) -> str:
    """A container's ``net0`` (pct's ``--net0``): name, bridge and MAC, then per family ``ip=``/``gw=`` and
    ``ip6=``/``gw6=`` (``dhcp``, ``auto`` for SLAAC, or the static address; a family that is ``none`` is left out),
    then the VLAN ``tag`` and ``mtu``."""
    value = "name=eth0,bridge=%s,hwaddr=%s" % (nic["bridge"], mac)
    ipconfig = ipconfig0_value(nic)
    if ipconfig:
        value += "," + ipconfig
    if "vlan" in nic:
        value += ",tag=%d" % nic["vlan"]
    if "mtu" in nic:
        value += ",mtu=%d" % nic["mtu"]
    return value


def container_net0_mismatch(value: t.Any, nic: t.Mapping[str, t.Any]) -> str | None:
    """The first ``net0`` field of a container that is not as planned (``bridge``, ``ip``, ``gw``, ``ip6``, ``gw6``,
    ``tag``, ``mtu``), or ``None``; addresses compare in canonical form."""
    planned = parse_property_string(container_net0_value(nic, "00:00:00:00:00:00"), "name")
    actual = parse_property_string(str(value or ""), "name")
    for key in ("bridge", "ip", "gw", "ip6", "gw6", "tag", "mtu"):
        want, got = planned.get(key), actual.get(key)
        if want == got:
            continue
        try:
            if want is not None and got is not None and ipaddress.ip_interface(want) == ipaddress.ip_interface(got):
                continue
        except ValueError:
            pass
        return key
    return None


def pick_ipv6(candidates: t.Iterable[str], wanted: t.Mapping[str, str]) -> str | None:
    """The first global IPv6 of ``candidates`` (not link-local, loopback or multicast): the planned ``address`` itself
    (static), or one in the planned ``prefix`` (SLAAC, DHCPv6), or any (no prefix known)."""
    prefix = ipaddress.IPv6Network(wanted["prefix"]) if "prefix" in wanted else None
    for text in candidates:
        try:
            ip = ipaddress.IPv6Address(text)
        except ValueError:
            continue
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
            continue
        if ("address" in wanted and ip != ipaddress.IPv6Address(wanted["address"])) or (
            prefix is not None and ip not in prefix
        ):
            continue
        return str(ip)
    return None
