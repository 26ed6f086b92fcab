# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a template can be cloned to another node: every volume on shared storage, the clone's own storage shared
(qemu-server: ``can't clone to non-shared storage``), and the node online.

Proxmox clones to another node (``POST .../clone`` with ``target``) only when every volume of the source is on shared
storage (qemu-server's ``check_storage_access_clone``; otherwise "can't clone VM to node ... (VM uses local storage)").
The preflight (``clone_source_shared``, ``target_node_online``) and placement (a template reachable from a node) decide
it from the same reads: the template's configuration, the storage list of its node (``shared``) and ``GET /nodes``.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import typing as t

from .._core.errors import ProviderError
from .._core.protocols import ApiClient

# The configuration keys that hold volumes (qemu-server's drive keys): CD images count too, as in the clone's check.
_VOLUME_KEY = re.compile(r"(ide|sata|scsi|virtio)\d+|efidisk0|tpmstate0")
PASSED, FAILED, UNKNOWN = "passed", "failed", "unknown"


def template_storages(config: t.Mapping[str, t.Any]) -> list[str]:
    """The storages the template's volumes are on (sorted, each once); ``none``/``cdrom`` and absolute paths hold none."""
    found = set()
    for key, value in config.items():
        if not _VOLUME_KEY.fullmatch(key) or not isinstance(value, str):
            continue
        volid = value.split(",", 1)[0]
        if volid in ("", "none", "cdrom") or ":" not in volid:
            continue
        found.add(volid.split(":", 1)[0])
    return sorted(found)


def shared_flags(client: ApiClient, node: str) -> dict[str, bool] | None:
    """``storage -> shared`` of the storages ``GET /nodes/{node}/storage`` lists (the token's view); None: unreadable."""
    try:
        entries = client.get(f"/nodes/{node}/storage")
    except ProviderError:
        return None
    if not isinstance(entries, list):
        return None
    return {
        str(entry["storage"]): entry.get("shared") in (1, True, "1")
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("storage"), str)
    }


def source_shared(config: t.Mapping[str, t.Any], flags: t.Mapping[str, bool] | None) -> tuple[str, str]:
    """(status, fixed message) of "every template volume is on shared storage" from the template's configuration and
    the storage flags of its node."""
    storages = template_storages(config)
    if not storages:
        return FAILED, "The template has no volume a clone to another node could take."
    if flags is None:
        return UNKNOWN, "The storages of the template's node could not be read."
    local = [name for name in storages if name in flags and not flags[name]]
    if local:
        return (
            FAILED,
            "The template has volumes on non-shared storage (%s): Proxmox refuses to clone it to another node; map "
            "a template on the target node, or keep the template on shared storage." % ", ".join(local),
        )
    unseen = [name for name in storages if name not in flags]
    if unseen:
        return UNKNOWN, "The token cannot see storage %s of the template's volumes." % ", ".join(unseen)
    return PASSED, "Every volume of the template is on shared storage: Proxmox can clone it to the target node."


def target_storage_shared(storage: str, flags: t.Mapping[str, bool] | None) -> tuple[str, str]:
    """(status, fixed message) of "the clone's own storage is shared": qemu-server's clone with ``target`` refuses a
    storage that is not (``can't clone to non-shared storage``), as the disks are written on the template's node."""
    if flags is None:
        return UNKNOWN, "The storages of the target node could not be read."
    if storage not in flags:
        return FAILED, "The plan's storage is not available on the target node (or the token cannot see it)."
    if not flags[storage]:
        return (
            FAILED,
            "The plan's storage is not shared: Proxmox clones to another node only onto shared storage; map the image "
            "with a shared storage, or a template on the target node.",
        )
    return PASSED, "The plan's storage is shared and available on the target node."


def online_nodes(client: ApiClient) -> dict[str, bool] | None:
    """``node -> online`` from ``GET /nodes``; None when it cannot be read or understood."""
    try:
        entries = client.get("/nodes")
    except ProviderError:
        return None
    if not isinstance(entries, list):
        return None
    return {
        str(entry["node"]): entry.get("status") == "online"
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("node"), str)
    }
