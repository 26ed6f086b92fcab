# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The guest's NICs from the VM config and the seed's network-config, and the addresses the agent reports."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import GuestBase, load_yaml_text


@dataclass(frozen=True)
class Nic:
    key: str
    index: int
    name: str
    mac: str
    link_down: bool
    subnets: tuple[Mapping[str, Any], ...]
    prefix6: str | None = None  # the IPv6 prefix announced where the NIC is plugged (SLAAC, DHCPv6)


class GuestNetwork(GuestBase):
    """The network model: NICs, DHCP leases, SLAAC and link-local addresses."""

    _nics: list[Nic]

    def _build_nics(self) -> list[Nic]:
        from pvesim.cloudinit import parse_net

        netcfg = load_yaml_text(self.seed.get("network"))
        physical: dict[str, Mapping[str, Any]] = {}
        if isinstance(netcfg, dict) and isinstance(netcfg.get("config"), list):
            for entry in netcfg["config"]:
                if isinstance(entry, dict) and entry.get("type") == "physical" and entry.get("mac_address"):
                    physical[str(entry["mac_address"]).lower()] = entry
        fallback = not isinstance(netcfg, dict)
        keys = sorted((k for k in self.config if re.fullmatch(r"net\d+", k)), key=lambda k: int(k[3:]))
        nics: list[Nic] = []
        for key in keys:
            net = parse_net(key, self.config[key])
            if net is None:
                continue
            idx = int(key[3:])
            mac = net["macaddr"].lower()
            entry = physical.get(mac)
            link_down = net.get("link_down", "0") not in ("", "0")
            if entry is not None:
                subnets = tuple(s for s in entry.get("subnets") or [] if isinstance(s, dict))
                name = str(entry.get("name") or f"ens{18 + idx}")
            elif fallback and not nics:
                subnets, name = ({"type": "dhcp4"},), f"ens{18 + idx}"
            else:
                subnets, name = (), f"ens{18 + idx}"
            nics.append(Nic(key, idx, name, mac, link_down, subnets, self.ipv6_prefixes.get(key)))
        return nics

    def dhcp_address(self, index: int = 0) -> str:
        """The address the simulated DHCP server leases to NIC ``index`` of this VMID."""
        n = self.vmid % 62500
        return f"10.{10 + index}.{n // 250}.{n % 250 + 2}"

    def dhcp6_address(self, prefix: str) -> str:
        """The address the simulated DHCPv6 server leases to this VMID from ``prefix``: interface id ``d6::`` plus the
        VMID in its last 32 bits (VM 301 on ``2001:db8:2:42::/64``: ``2001:db8:2:42:d6::12d``)."""
        net = ipaddress.IPv6Network(prefix)
        return str(net.network_address + ((0xD6 << 48) | (self.vmid & 0xFFFFFFFF)))

    @staticmethod
    def _eui64(prefix: str, mac: str) -> str:
        b = [int(x, 16) for x in mac.split(":")]
        iid = bytes([b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]])
        net = ipaddress.IPv6Network(prefix)
        return str(ipaddress.IPv6Address(int(net.network_address) | int.from_bytes(iid, "big")))

    def _addresses(self, nic: Nic, now: float) -> list[dict[str, Any]]:
        v4: list[dict[str, Any]] = []
        v6: list[dict[str, Any]] = []
        leased = now >= self.dhcp_at and not nic.link_down
        # router advertisements need no DHCP server: SLAAC addresses come at the lease time even with ``dhcp_never``
        advertised = now >= self.timing.agent_up_after + self.timing.dhcp_after_agent and not nic.link_down
        for sub in nic.subnets:
            kind = sub.get("type")
            if kind == "static" and sub.get("address"):
                addr = str(sub["address"])
                prefix = ipaddress.IPv4Network(f"0.0.0.0/{sub.get('netmask', '255.255.255.0')}").prefixlen
                if "/" in addr:
                    addr, _sep, pfx = addr.partition("/")
                    prefix = int(pfx)
                v4.append({"ip-address-type": "ipv4", "ip-address": addr, "prefix": prefix})
            elif kind in ("dhcp", "dhcp4") and leased:
                v4.append({"ip-address-type": "ipv4", "ip-address": self.dhcp_address(nic.index), "prefix": 24})
            elif kind == "static6" and sub.get("address"):
                iface = ipaddress.IPv6Interface(str(sub["address"]))
                v6.append({"ip-address-type": "ipv6", "ip-address": str(iface.ip), "prefix": iface.network.prefixlen})
            elif kind == "dhcp6" and leased and nic.prefix6:
                # a DHCPv6 lease (IA_NA) is a /128 in the guest; the on-link /64 comes from the router advertisement
                v6.append({"ip-address-type": "ipv6", "ip-address": self.dhcp6_address(nic.prefix6), "prefix": 128})
            elif kind == "ipv6_slaac" and advertised and nic.prefix6:
                net = ipaddress.IPv6Network(nic.prefix6)
                v6.append(
                    {
                        "ip-address-type": "ipv6",
                        "ip-address": self._eui64(nic.prefix6, nic.mac),
                        "prefix": net.prefixlen,
                    }
                )
        v6.append({"ip-address-type": "ipv6", "ip-address": self._eui64("fe80::/64", nic.mac), "prefix": 64})
        return v4 + v6

    @staticmethod
    def _stats(ticks: int, packets: int, size: int) -> dict[str, int]:
        rx = ticks * packets
        tx = ticks * max(1, packets - 1)
        return {
            "rx-bytes": rx * size,
            "rx-packets": rx,
            "rx-errs": 0,
            "rx-dropped": 0,
            "tx-bytes": tx * size // 2,
            "tx-packets": tx,
            "tx-errs": 0,
            "tx-dropped": 0,
        }
