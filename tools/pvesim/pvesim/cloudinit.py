# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Cloud-init drive contents as Proxmox VE 9.x generates them (pure functions, no I/O).

Modeled on proxmox/qemu-server 9.2.6 (commit e6352be6):

- ``src/PVE/QemuServer/Cloudinit.pm``: ``cloudinit_userdata``, ``nocloud_network`` (network-config
  version 1), ``nocloud_gen_metadata`` (``instance-id: sha1_hex(user . network)``),
  ``configdrive2_network``/``configdrive2_metadata``, ``get_custom_cloudinit_files``,
  ``dump_cloudinit_config`` (the ``GET .../cloudinit/dump`` handler: it ignores ``cicustom``
  and always shows the generated text).
- ``src/PVE/QemuServer/Network.pm``: ``parse_net`` and ``parse_ipconfig`` (an ipconfig with
  neither ``ip`` nor ``ip6`` means ``ip=dhcp,ip6=dhcp``; invalid combinations parse to nothing).
- ``src/PVE/API2/Qemu.pm``: ``cloudinit_pending`` (``GET .../cloudinit``) and
  ``$cloudinitoptions``; ``src/PVE/QemuServer.pm``: ``cloudinit_pending_properties`` and the
  ``$cloudinit_record_changed`` bookkeeping of the ``[special:cloudinit]`` config section.

The Perl quirks are kept on purpose: ``sort`` of ``netN`` keys is a string sort (``net10`` before
``net2``); ``sshkeys`` is decoded with ``uri_unescape`` (``%XX`` only, ``+`` stays ``+``); the
``- type: nameserver`` entry is always written, even when empty; the fqdn joins the *whole*
``searchdomain`` value; ``ciupgrade=0`` writes no ``package_upgrade`` line at all.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from urllib.parse import unquote

__all__ = [
    "CLOUDINIT_OPTIONS",
    "DEFAULT_HOST_DNS",
    "CloudinitError",
    "decode_sshkeys",
    "drive_files",
    "generated_snapshot",
    "get_format",
    "hostname_fqdn",
    "meta_data",
    "network_config",
    "parse_ipconfig",
    "parse_net",
    "pending_items",
    "pending_properties",
    "render",
    "user_data",
]

MAX_NETS = 32
MASKED_PASSWORD = "**********"

# PVE::API2::Qemu $cloudinitoptions: the only keys GET .../cloudinit reports as existing values.
CLOUDINIT_OPTIONS: tuple[str, ...] = (
    "cicustom",
    "cipassword",
    "citype",
    "ciuser",
    "ciupgrade",
    "nameserver",
    "searchdomain",
    "sshkeys",
)

# The node's /etc/resolv.conf as PVE::INotify reads it (same keys as GET /nodes/{node}/dns).
DEFAULT_HOST_DNS: dict[str, str] = {"search": "pvesim.lan", "dns1": "10.10.0.1"}

NIC_MODELS: frozenset[str] = frozenset(
    {
        "e1000",
        "e1000-82540em",
        "e1000-82544gc",
        "e1000-82545em",
        "e1000e",
        "i82551",
        "i82557b",
        "i82559er",
        "ne2k_isa",
        "ne2k_pci",
        "pcnet",
        "rtl8139",
        "virtio",
        "vmxnet3",
    }
)

WINDOWS_OSTYPES: frozenset[str] = frozenset({"wxp", "w2k", "w2k3", "w2k8", "wvista", "win7", "win8", "win10", "win11"})

_IPV6_START = re.compile(r"^[0-9A-Fa-f:]*:[0-9A-Fa-f:.]*")


class CloudinitError(Exception):
    """A failure PVE reports while generating the drive (the message is PVE's text)."""


def _perl_split_ws(value: str) -> list[str]:
    """Perl ``split(/\\s+/, $value)``: a leading empty field is kept, trailing ones dropped."""
    parts = re.split(r"\s+", value)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def _truthy(value: str | None) -> bool:
    """Perl truthiness of a config string: undef, '' and '0' are false."""
    return value is not None and value not in ("", "0")


def _parse_property_string(value: str, default_key: str | None = None) -> dict[str, str] | None:
    result: dict[str, str] = {}
    for part in value.split(","):
        if part == "":
            continue
        key, sep, val = part.partition("=")
        if not sep:
            if default_key is None or default_key in result:
                return None
            result[default_key] = key
            continue
        if key in result:
            return None
        result[key] = val
    return result


def get_format(config: Mapping[str, str]) -> str:
    """``citype`` or, by default, ``configdrive2`` for Windows ``ostype`` and ``nocloud`` otherwise."""
    citype = config.get("citype")
    if citype is not None:
        return citype
    if config.get("ostype") in WINDOWS_OSTYPES:
        return "configdrive2"
    return "nocloud"


def _fallback_mac(iface: str, value: str) -> str:
    digest = hashlib.sha1(f"{iface}:{value}".encode()).digest()
    return "BC:24:11:" + ":".join(f"{b:02X}" for b in digest[:3])


def parse_net(iface: str, value: str) -> dict[str, str] | None:
    """``netN`` property string: ``virtio=MAC,bridge=vmbr0`` or ``model=virtio,macaddr=MAC``.

    PVE generates a random MAC when none is set; the simulator derives a stable one instead.
    """
    raw = _parse_property_string(value, default_key="model")
    if raw is None:
        return None
    result: dict[str, str] = {}
    for key, val in raw.items():
        if key in NIC_MODELS:
            result["model"] = key
            if val:
                result["macaddr"] = val
        elif key == "model":
            if val not in NIC_MODELS:
                return None
            result["model"] = val
        else:
            result[key] = val
    if "model" not in result:
        return None
    if not result.get("macaddr"):
        result["macaddr"] = _fallback_mac(iface, value)
    return result


def _is_ipv4_cidr(value: str) -> bool:
    try:
        ipaddress.IPv4Interface(value)
    except ValueError:
        return False
    return "/" in value


def _is_ipv6_cidr(value: str) -> bool:
    try:
        ipaddress.IPv6Interface(value)
    except ValueError:
        return False
    return "/" in value


def parse_ipconfig(value: str) -> dict[str, str] | None:
    """``ipconfigN``: ``ip=dhcp|CIDR,gw=IP,ip6=dhcp|auto|CIDR,gw6=IP``; None where PVE warns and returns undef."""
    res = _parse_property_string(value)
    if res is None or set(res) - {"ip", "gw", "ip6", "gw6"}:
        return None
    ip, ip6 = res.get("ip"), res.get("ip6")
    if ip is not None and ip != "dhcp" and not _is_ipv4_cidr(ip):
        return None
    if ip6 is not None and ip6 not in ("dhcp", "auto") and not _is_ipv6_cidr(ip6):
        return None
    if res.get("gw") and not ip:
        return None
    if res.get("gw6") and not ip6:
        return None
    if res.get("gw") and ip == "dhcp":
        return None
    if res.get("gw6") and not _IPV6_START.match(ip6 or ""):
        return None
    if not ip and not ip6:
        return {"ip": "dhcp", "ip6": "dhcp"}
    return res


def hostname_fqdn(config: Mapping[str, str], vmid: int) -> tuple[str, str]:
    """``name`` (default ``VM<vmid>``); fqdn is the name itself when dotted, else name + '.' + searchdomain."""
    hostname = config.get("name")
    if hostname is None:
        hostname = f"VM{vmid}"
    if "." in hostname:
        return hostname.split(".", 1)[0], hostname
    search = config.get("searchdomain")
    if _truthy(search):
        return hostname, f"{hostname}.{search}"
    return hostname, hostname


def nameservers(config: Mapping[str, str], host_dns: Mapping[str, str] | None = None) -> list[str]:
    """The nameservers the network-config gives the guest (the VM's ``nameserver``, else the node's)."""
    return _dns_conf(config, host_dns)[1]


def _dns_conf(config: Mapping[str, str], host_dns: Mapping[str, str] | None) -> tuple[list[str], list[str]]:
    host = DEFAULT_HOST_DNS if host_dns is None else host_dns
    search = config.get("searchdomain")
    if search is None:
        search = host.get("search")
    searchdomains = _perl_split_ws(search or "")
    nameserver = config.get("nameserver")
    if nameserver is None:
        nameservers = [host[k] for k in ("dns1", "dns2", "dns3") if _truthy(host.get(k))]
    else:
        nameservers = _perl_split_ws(nameserver)
    return searchdomains, nameservers


def decode_sshkeys(value: str) -> list[str]:
    """``uri_unescape`` (``%XX`` only), split on newlines, drop lines without non-blank characters."""
    decoded = unquote(value, encoding="utf-8", errors="surrogateescape")
    return [line for line in decoded.split("\n") if re.search(r"\S", line)]


def user_data(config: Mapping[str, str], vmid: int, *, mask_password: bool = False) -> str:
    """The ``#cloud-config`` text of ``cloudinit_userdata``."""
    hostname, fqdn = hostname_fqdn(config, vmid)
    lines = ["#cloud-config", f"hostname: {hostname}", "manage_etc_hosts: true", f"fqdn: {fqdn}"]
    username = config.get("ciuser")
    password = config.get("cipassword")
    if username is not None:
        lines.append(f"user: {username}")
        if username == "root":
            lines.append("disable_root: False")
    if password is not None:
        lines.append(f"password: {MASKED_PASSWORD if mask_password else password}")
    sshkeys = config.get("sshkeys")
    if sshkeys is not None:
        lines.append("ssh_authorized_keys:")
        lines.extend(f"  - {key}" for key in decode_sshkeys(sshkeys))
    lines.extend(["chpasswd:", "  expire: False"])
    if username is None or username != "root":
        lines.extend(["users:", "  - default"])
    ciupgrade = config.get("ciupgrade")
    if ciupgrade is None or _truthy(ciupgrade):
        lines.append("package_upgrade: true")
    return "\n".join(lines) + "\n"


def _net_ifaces(config: Mapping[str, str]) -> list[tuple[str, str]]:
    """``sort grep { /^net(\\d+)$/ } keys``: string order, paired with the interface id."""
    return [(key, key[3:]) for key in sorted(k for k in config if re.fullmatch(r"net\d+", k))]


def _ipv4_netmask(prefix: str) -> str:
    return str(ipaddress.IPv4Network(f"0.0.0.0/{int(prefix)}").netmask)


def network_config(config: Mapping[str, str], *, host_dns: Mapping[str, str] | None = None) -> str:
    """``nocloud_network``: network-config version 1 with single-quoted values."""
    out = ["version: 1", "config:"]
    ind = "    "
    for iface, idx in _net_ifaces(config):
        if not _truthy(config.get(f"ipconfig{idx}")):
            continue
        net = parse_net(iface, config[iface])
        ipconfig = parse_ipconfig(config[f"ipconfig{idx}"]) or {}
        if net is None:
            raise CloudinitError(f"network interface '{iface}' has no mac address")
        mac = net["macaddr"].lower()
        out += [f"{ind}- type: physical", f"{ind}  name: eth{idx}", f"{ind}  mac_address: '{mac}'", f"{ind}  subnets:"]
        sub = ind + "  "
        ip = ipconfig.get("ip")
        if ip is not None:
            if ip == "dhcp":
                out.append(f"{sub}- type: dhcp4")
            else:
                addr, _sep, prefix = ip.partition("/")
                out += [
                    f"{sub}- type: static",
                    f"{sub}  address: '{addr}'",
                    f"{sub}  netmask: '{_ipv4_netmask(prefix)}'",
                ]
                if ipconfig.get("gw") is not None:
                    out.append(f"{sub}  gateway: '{ipconfig['gw']}'")
        ip6 = ipconfig.get("ip6")
        if ip6 is not None:
            if ip6 == "dhcp":
                out.append(f"{sub}- type: dhcp6")
            elif ip6 == "auto":
                out.append(f"{sub}- type: ipv6_slaac")
            else:
                out += [f"{sub}- type: static6", f"{sub}  address: '{ip6}'"]
                if ipconfig.get("gw6") is not None:
                    out.append(f"{sub}  gateway: '{ipconfig['gw6']}'")
    searchdomains, nameservers = _dns_conf(config, host_dns)
    out.append(f"{ind}- type: nameserver")
    if nameservers:
        out.append(f"{ind}  address:")
        out += [f"{ind}  - '{ns}'" for ns in nameservers]
    if searchdomains:
        out.append(f"{ind}  search:")
        out += [f"{ind}  - '{sd}'" for sd in searchdomains]
    return "\n".join(out) + "\n"


def _configdrive2_network(config: Mapping[str, str], host_dns: Mapping[str, str] | None) -> str:
    """``configdrive2_network``: the ENI text shown by the dump for non-nocloud formats."""
    out = "auto lo\niface lo inet loopback\n\n"
    searchdomains, nameservers = _dns_conf(config, host_dns)
    if nameservers:
        out += f"        dns_nameservers {' '.join(nameservers)}\n"
    if searchdomains:
        out += f"        dns_search {' '.join(searchdomains)}\n"
    for _iface, idx in _net_ifaces(config):
        if not _truthy(config.get(f"ipconfig{idx}")):
            continue
        net = parse_ipconfig(config[f"ipconfig{idx}"]) or {}
        name = f"eth{idx}"
        out += f"auto {name}\n"
        if net.get("ip"):
            if net["ip"] == "dhcp":
                out += f"iface {name} inet dhcp\n"
            else:
                addr, _sep, prefix = net["ip"].partition("/")
                out += f"iface {name} inet static\n        address {addr}\n        netmask {_ipv4_netmask(prefix)}\n"
                if net.get("gw"):
                    out += f"        gateway {net['gw']}\n"
        if net.get("ip6"):
            if net["ip6"] in ("auto", "dhcp"):
                out += f"iface {name} inet6 {net['ip6']}\n"
            else:
                addr, _sep, prefix = net["ip6"].partition("/")
                out += f"iface {name} inet6 static\n        address {addr}\n        netmask {prefix}\n"
                if net.get("gw6"):
                    out += f"        gateway {net['gw6']}\n"
    return out


def meta_data(user: str, network: str, citype: str = "nocloud") -> str:
    """``nocloud_gen_metadata``: ``instance-id: sha1_hex(user . network)`` (configdrive2: a JSON uuid)."""
    digest = hashlib.sha1((user + network).encode("utf-8", errors="surrogateescape")).hexdigest()
    if citype == "nocloud":
        return f"instance-id: {digest}\n"
    return f'{{\n     "uuid": "{digest}",\n     "network_config": {{ "content_path": "/content/0000" }}\n}}\n'


def render(
    config: Mapping[str, str],
    vmid: int,
    node: str,
    *,
    host_dns: Mapping[str, str] | None = None,
    mask_password: bool = False,
) -> dict[str, str]:
    """What ``GET /nodes/{node}/qemu/{vmid}/cloudinit/dump?type=user|network|meta`` returns.

    ``mask_password`` is PVE's behaviour for a caller without ``VM.Config.Cloudinit``; the meta
    digest is always computed over the unmasked user data. ``cicustom`` is ignored, as in PVE.
    ``node`` only names the node whose resolv.conf ``host_dns`` describes.
    """
    del node
    citype = get_format(config)
    user_unmasked = user_data(config, vmid)
    if citype == "nocloud":
        network = network_config(config, host_dns=host_dns)
    else:
        network = _configdrive2_network(config, host_dns)
    user = user_data(config, vmid, mask_password=True) if mask_password else user_unmasked
    return {"user": user, "network": network, "meta": meta_data(user_unmasked, network, citype)}


def _parse_cicustom(value: str) -> dict[str, str]:
    parsed = _parse_property_string(value)
    if parsed is None or set(parsed) - {"user", "network", "meta", "vendor"}:
        raise CloudinitError("cicustom: invalid format")
    return parsed


def drive_files(
    config: Mapping[str, str],
    vmid: int,
    node: str,
    *,
    snippets: Mapping[str, str] | None = None,
    host_dns: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The NoCloud drive as ``generate_nocloud`` writes it: keys ``user``, ``network``, ``meta``, ``vendor``.

    ``cicustom`` volumes (``user=local:snippets/x.yaml`` ...) replace the generated parts; their
    contents come from ``snippets`` (volume id -> text). The instance-id of a generated meta-data is
    computed over the final user and network parts, custom ones included. This is what a starting
    guest receives (pass it to :class:`pvesim.guest.SimulatedGuest` as ``seed``).
    """
    del node
    custom = _parse_cicustom(config["cicustom"]) if config.get("cicustom") else {}
    parts: dict[str, str | None] = {}
    for part in ("user", "network", "meta", "vendor"):
        volid = custom.get(part)
        if not volid:
            parts[part] = None
            continue
        if ":snippets/" not in volid:
            raise CloudinitError(f"{volid} is not in the snippets directory")
        if snippets is None or volid not in snippets:
            raise CloudinitError(f"unable to open file '{volid}' - No such file or directory")
        parts[part] = snippets[volid]
    user = parts["user"] if parts["user"] is not None else user_data(config, vmid)
    network = parts["network"] if parts["network"] is not None else network_config(config, host_dns=host_dns)
    vendor = parts["vendor"] if parts["vendor"] is not None else ""
    meta = parts["meta"] if parts["meta"] is not None else meta_data(user, network)
    total = sum(len(x.encode("utf-8", errors="surrogateescape")) for x in (user, network, meta, vendor))
    if total > 3 * 1024 * 1024:
        raise CloudinitError("Cloud-Init sum of snippets too big (> 3 MiB)")
    return {"user": user, "network": network, "meta": meta, "vendor": vendor}


def pending_properties() -> frozenset[str]:
    """``cloudinit_pending_properties``: cloud-init options, ``ipconfigN``, ``name`` and ``netN``."""
    keys = set(CLOUDINIT_OPTIONS)
    keys.update(f"ipconfig{i}" for i in range(MAX_NETS))
    keys.update(f"net{i}" for i in range(MAX_NETS))
    keys.add("name")
    return frozenset(keys)


def generated_snapshot(config: Mapping[str, str]) -> dict[str, str]:
    """The cloud-init relevant values at (re)generation time (VM start, ``PUT .../cloudinit``).

    PVE records differences only for changes hot-applied to a *running* VM; for a stopped VM the
    server should take a new snapshot after each config change (nothing is pending there).
    """
    props = pending_properties()
    return {key: str(value) for key, value in config.items() if key in props}


def pending_items(config: Mapping[str, str], generated: Mapping[str, str]) -> list[dict[str, str | int]]:
    """``GET /nodes/{node}/qemu/{vmid}/cloudinit`` for ``config`` versus the ``generated`` snapshot.

    Derives PVE's ``[special:cloudinit]`` section (old value of every changed or deleted key,
    ``added`` for new keys) and replays the handler, quirks included: existing values are listed
    only for ``CLOUDINIT_OPTIONS`` that are Perl-true (so ``ciupgrade: 0`` never is, and a change
    to it shows as ``delete``), changes to ``ipconfigN``/``name``/``netN`` are not listed, and
    ``cipassword`` is masked. Perl hash order is random; here it is added, then existing, then
    deleted, each sorted by key.
    """
    props = pending_properties()
    section: dict[str, str] = {}
    added: list[str] = []
    for key in sorted(props):
        old, new = generated.get(key), config.get(key)
        if old == new:
            continue
        if old is None:
            added.append(key)
        else:
            section[key] = old
    conf = {k: str(v) for k, v in config.items()}
    if "cipassword" in conf:
        conf["cipassword"] = MASKED_PASSWORD
    if "cipassword" in section:
        section["cipassword"] = MASKED_PASSWORD
    added_str = ",".join(added)
    result: list[dict[str, str | int]] = []
    for key in added:
        item: dict[str, str | int] = {"key": key}
        if key in conf:
            item["pending"] = conf[key]
        result.append(item)
    for opt in sorted(CLOUDINIT_OPTIONS):
        if not _truthy(conf.get(opt)) or opt in added_str:
            continue
        if _truthy(section.get(opt)):
            result.append({"key": opt, "value": section[opt], "pending": conf[opt]})
        else:
            result.append({"key": opt, "value": conf[opt]})
    for key in sorted(section):
        if _truthy(conf.get(key)):
            continue
        result.append({"key": key, "delete": 1})
    return result
