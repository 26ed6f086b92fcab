# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared helpers for Proxmox VE VM configuration values (one implementation for every user).

- property strings (``virtio=BC:24:11:00:00:01,bridge=vmbr0``, ``local-lvm:vm-201-disk-0,size=8G``)
  with PVE's *default key* (the first item may omit ``key=``);
- sizes (``8G``, ``512M``, ``1.5T``, plain bytes) as PVE writes them into disk properties;
- disk volumes, memory and network values of a VM configuration;
- the three reads every stage needs: the configuration with its ``digest``, ``status/current``
  and ``pending``.

Only the reads talk to Proxmox (through the collection's client, GET only). This is a private
module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import re
import typing as t

from .._core.errors import ProviderError
from .._core.protocols import ApiClient

GIB = 1024**3
MIB = 1024**2

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([KMGT]?)$")
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
_NET_MODELS = (
    "virtio",
    "e1000",
    "e1000e",
    "rtl8139",
    "vmxnet3",
    "i82551",
    "i82557b",
    "i82559er",
    "ne2k_isa",
    "ne2k_pci",
    "pcnet",
)


def parse_property_string(value: t.Any, default_key: str) -> dict[str, str]:
    """``"a,k=v"`` -> ``{default_key: "a", "k": "v"}`` (only the first item may omit its key)."""
    parts: dict[str, str] = {}
    for index, item in enumerate(str(value).split(",")):
        if "=" in item:
            key, _sep, val = item.partition("=")
            parts[key.strip()] = val.strip()
        elif index == 0 and item.strip():
            parts[default_key] = item.strip()
    return parts


def format_property_string(props: t.Mapping[str, t.Any], default_key: str | None = None) -> str:
    """The inverse of ``parse_property_string``: the default key's value first, without ``key=``."""
    items: list[str] = []
    if default_key is not None and default_key in props:
        items.append(str(props[default_key]))
    items += ["%s=%s" % (key, value) for key, value in props.items() if key != default_key]
    return ",".join(items)


def parse_size_bytes(value: t.Any) -> int | None:
    """``8G``/``512M``/``1.5T``/``10737418240`` (or an int) -> bytes; ``None`` if not understood."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    match = _SIZE.match(value.strip())
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def bytes_to_gib(size: int) -> float:
    """Bytes -> GiB (may be fractional)."""
    return size / GIB


def gib_size_string(gib: int) -> str:
    """An absolute PVE size for ``gib`` GiB: ``"20G"``."""
    return "%dG" % int(gib)


@dataclasses.dataclass(frozen=True)
class DiskVolume:
    """The volume behind a disk device: ``volid`` (``local-lvm:vm-201-disk-0``), its storage and size."""

    device: str
    volid: str
    storage: str
    size_bytes: int | None
    is_cdrom: bool

    @property
    def is_cloudinit(self) -> bool:
        return "cloudinit" in self.volid


def disk_volume(config: t.Mapping[str, t.Any], device: str) -> DiskVolume | None:
    """The volume of ``device`` in ``config``; ``None`` when the device is absent."""
    value = config.get(device)
    if value is None:
        return None
    props = parse_property_string(value, "file")
    volid = props.get("file", "")
    storage = volid.split(":", 1)[0] if ":" in volid else ""
    size = parse_size_bytes(props["size"]) if "size" in props else None
    return DiskVolume(
        device=device, volid=volid, storage=storage, size_bytes=size, is_cdrom=props.get("media") == "cdrom"
    )


def memory_mib(value: t.Any) -> int | None:
    """The ``memory`` option (``2048`` or ``current=2048``) in MiB; ``None`` if absent or not understood."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    current = parse_property_string(value, "current").get("current", "")
    return int(current) if current.isdigit() else None


def net_macaddr(value: t.Any) -> str | None:
    """The MAC address of a ``netN`` value (``virtio=BC:24:11:..,bridge=vmbr0`` or ``macaddr=``)."""
    if value is None:
        return None
    props = parse_property_string(value, "model")
    if "macaddr" in props:
        return props["macaddr"].upper()
    for model in _NET_MODELS:
        if model in props:
            return props[model].upper()
    return None


def net_bridge(value: t.Any) -> str | None:
    """The bridge of a ``netN`` value."""
    return None if value is None else parse_property_string(value, "model").get("bridge")


def tag_list(value: t.Any) -> list[str]:
    """The ``tags`` option split as PVE splits it (``;``, ``,`` or spaces)."""
    if not value:
        return []
    return [item for item in re.split(r"[;,\s]+", str(value)) if item]


def int_value(value: t.Any) -> int | None:
    """A config integer (PVE returns numbers, older versions strings)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value.strip())
    return None


# -- reads (GET only) ---------------------------------------------------------------------------------


def vm_path(node: str, vmid: int) -> str:
    return "/nodes/%s/qemu/%d" % (node, int(vmid))


def read_config(client: ApiClient, path: str) -> dict[str, t.Any]:
    """``GET {vm}/config``: the configuration (pending values applied, as PVE shows it) including ``digest``."""
    data = client.get(path + "/config")
    if not isinstance(data, dict):
        raise ProviderError(
            "Proxmox answered the VM configuration with an unexpected body.", code="unexpected_response"
        )
    return data


def read_status(client: ApiClient, path: str) -> dict[str, t.Any]:
    """``GET {vm}/status/current``."""
    data = client.get(path + "/status/current")
    if not isinstance(data, dict):
        raise ProviderError("Proxmox answered the VM status with an unexpected body.", code="unexpected_response")
    return data


def read_pending(client: ApiClient, path: str) -> list[dict[str, t.Any]]:
    """``GET {vm}/pending``: one item per key (``value``, ``pending``, ``delete``)."""
    data = client.get(path + "/pending")
    return [item for item in data if isinstance(item, dict)] if isinstance(data, list) else []


def config_of_pending(items: t.Iterable[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """The configuration in effect as ``GET {vm}/pending`` lists it: each key's ``value`` (the file's ``digest`` is one of
    the keys qemu-server lists; a caller that needs it checks it is there)."""
    return {str(item["key"]): item["value"] for item in items if "key" in item and "value" in item}


def pending_keys(items: t.Iterable[t.Mapping[str, t.Any]]) -> list[str]:
    """Keys with a pending change: an item carrying ``pending`` or ``delete``."""
    return sorted(str(item.get("key")) for item in items if "pending" in item or "delete" in item)
