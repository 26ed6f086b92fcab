# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The networks a VM's NICs join when it starts: what qemu-server and pve-common check, and the IPv6 prefix each NIC
sees announced (the simulator's stand-in for the routers outside Proxmox).

Start (qemu-server 9.2.6 ``PVE/QemuServer.pm`` ``print_netdev_full``, pve-common 9.2.1 ``PVE/Network.pm``):

- a VirtIO NIC on a bridge reads the bridge's MTU (``read_bridge_mtu``: ``bridge 'x' does not exist``); ``mtu=1``
  means the bridge's; below 576 or above the bridge's MTU the start fails (``netdev netN: MTU ...``); another model
  with ``mtu`` only warns (``netdev netN: ignoring MTU 'M', not using VirtIO``).
- QEMU's ``pve-bridge`` script plugs the tap (``tap_plug``): on a bridge that is not VLAN-aware a ``tag`` makes PVE
  create the bridge ``<bridge>v<tag>`` with the VLAN sub-interface ``<port>.<tag>`` of each physical port
  (``activate_bridge_vlan``), so the NIC reaches the same VLAN of the same wire as through a VLAN-aware bridge; a bridge
  without a physical port fails the start (``no physical interface on bridge 'x'``, then QEMU exits with code 1).
  Simplification: the ``vmbrXvY`` bridge and the sub-interfaces are not listed anywhere (PVE's
  ``GET /nodes/{node}/network`` does not list them either: it reads /etc/network/interfaces and physical NICs).

IPv6 announced on a segment (``ipv6_prefix``): the untagged segment of a bridge carries the prefix of its ``cidr6``
(the seeds: ``vmbrN`` -> ``2001:db8:N::/64``, ``state.bridge_ipv6_prefix``); VLAN ``T`` on it carries the same /64
with its fourth group set to ``T``'s decimal digits read as hex (VLAN 42 on ``vmbr2``: ``2001:db8:2:42::/64``),
whether the bridge is VLAN-aware or PVE built ``vmbr2v42``. A bridge without ``cidr6`` announces nothing, tagged or
not: a guest there gets only its link-local address from SLAAC and no DHCPv6 lease.
"""

from __future__ import annotations

import ipaddress
import re
import typing as t
from collections.abc import Mapping

from .cloudinit import parse_net
from .state import VM, State
from .tasks import Task, TaskFailed

DEFAULT_BRIDGE_MTU = 1500
MIN_MTU = 576


def ipv6_prefix(bridge: Mapping[str, t.Any] | None, tag: int | None) -> str | None:
    """The /64 a router announces on ``bridge`` (VLAN ``tag``, or untagged), or None."""
    if bridge is None or not bridge.get("cidr6"):
        return None
    net = ipaddress.IPv6Interface(str(bridge["cidr6"])).network
    if not tag:
        return str(net)
    base = int(net.network_address) & ~((1 << 64) - 1) & ~(0xFFFF << 64)
    return str(ipaddress.IPv6Network((base | (int(str(tag), 16) << 64), 64)))


def _nets(conf: Mapping[str, str]) -> list[tuple[str, dict[str, str]]]:
    """``netN`` keys in NIC order with their parsed value (``model``, ``macaddr``, ``bridge``, ``tag``, ``mtu`` ...)."""
    keys = sorted((k for k in conf if re.fullmatch(r"net\d+", k)), key=lambda k: int(k[3:]))
    return [(key, net) for key in keys if (net := parse_net(key, conf[key])) is not None]


def nic_prefixes(state: State, vm: VM) -> dict[str, str | None]:
    """``netN`` -> the IPv6 prefix announced where that NIC is plugged (None: no router there)."""
    bridges = state.members[vm.node].bridges
    result: dict[str, str | None] = {}
    for key, net in _nets(vm.config):
        tag = int(net["tag"]) if net.get("tag") else None
        result[key] = ipv6_prefix(bridges.get(net.get("bridge", "")), tag)
    return result


def check_start(state: State, vm: VM, conf: Mapping[str, str], task: Task) -> None:
    """The NIC checks of a VM start (``conf``: the config the start uses, pending changes applied), in PVE's order:
    ``config_to_command`` for every NIC first, then ``pve-bridge`` per NIC as QEMU creates its taps."""
    bridges = state.members[vm.node].bridges
    nets = _nets(conf)
    for key, net in nets:
        bridge_name = net.get("bridge")
        if not bridge_name:
            continue
        bridge = bridges.get(bridge_name)
        if bridge is None:
            raise TaskFailed(f"bridge '{bridge_name}' does not exist")
        mtu = int(net["mtu"]) if net.get("mtu") else None
        if net["model"] != "virtio":
            if mtu is not None:
                task.warn(f"netdev {key}: ignoring MTU '{mtu}', not using VirtIO")
            continue
        bridge_mtu = int(bridge.get("mtu") or DEFAULT_BRIDGE_MTU)
        if mtu is None or mtu == 1:
            continue
        if mtu < MIN_MTU:
            raise TaskFailed(f"netdev {key}: MTU '{mtu}' is smaller than the IP minimum MTU '{MIN_MTU}'")
        if mtu > bridge_mtu:
            raise TaskFailed(
                f"netdev {key}: MTU '{mtu}' is bigger than the bridge MTU '{bridge_mtu}' - adjust the MTU for the "
                "network device in the VM configuration, while ensuring that the bridge is configured as desired."
            )
    for key, net in nets:
        bridge = bridges.get(net.get("bridge", ""))
        if bridge is None or not net.get("tag") or bridge.get("bridge_vlan_aware"):
            continue
        ports = [p for p in str(bridge.get("bridge_ports") or "").split() if p != "none"]
        if not ports:
            ifname = f"tap{vm.vmid}i{key[3:]}"
            vhost = ",vhost=on" if net["model"] == "virtio" else ""
            task.log(f"no physical interface on bridge '{net['bridge']}'")
            task.log(
                f"kvm: -netdev type=tap,id={key},ifname={ifname},script=/usr/libexec/qemu-server/pve-bridge,"
                f"downscript=/usr/libexec/qemu-server/pve-bridgedown{vhost}: network script "
                "/usr/libexec/qemu-server/pve-bridge failed with status 512"
            )
            raise TaskFailed("start failed: QEMU exited with code 1")
