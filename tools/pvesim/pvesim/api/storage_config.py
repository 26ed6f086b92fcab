# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/storage``: the cluster's storage configuration (storage.cfg, pve-storage API2/Storage/Config.pm), read side.

Distinct from a node's ``/nodes/{node}/storage`` (status: sizes, active): this is what the administrator configured.
"""

from __future__ import annotations

import hashlib
import typing as t

from ..state import Storage
from .core import ApiError, Call, Sim, route

# The type-specific keys storage.cfg holds for the seeded storages (a default installation's values).
_TYPE_KEYS: dict[str, t.Callable[[Storage], dict[str, t.Any]]] = {
    "dir": lambda s: {"path": "/var/lib/vz"},
    "lvmthin": lambda s: {"thinpool": "data", "vgname": "pve"},
    "nfs": lambda s: {"server": "192.0.2.200", "export": f"/export/{s.storage}", "path": f"/mnt/pve/{s.storage}"},
}


def _section(storage: Storage) -> dict[str, t.Any]:
    conf: dict[str, t.Any] = {"type": storage.type, "content": ",".join(sorted(storage.content)) or "none"}
    conf.update(_TYPE_KEYS.get(storage.type, lambda s: {})(storage))
    if storage.nodes is not None:
        conf["nodes"] = ",".join(sorted(storage.nodes))
    if not storage.enabled:
        conf["disable"] = 1
    return conf


def _digest(sim: Sim) -> str:
    text = ""
    for sid, storage in sorted(sim.state.storages.items()):
        conf = _section(storage)
        text += f"{conf.pop('type')}: {sid}\n" + "".join(f"\t{k} {v}\n" for k, v in sorted(conf.items())) + "\n"
    return hashlib.sha1(text.encode()).hexdigest()


def _api_storage_config(sim: Sim, sid: str) -> dict[str, t.Any]:
    storage = sim.state.storages.get(sid)
    if storage is None:
        raise ApiError(500, f"storage '{sid}' does not exist")
    return {**_section(storage), "storage": sid, "digest": _digest(sim)}


@route("GET", "/storage")
def storage_index(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    """Every storage the caller may audit or allocate space on, optionally of one type."""
    wanted = call.str("type")
    res = []
    for sid in sorted(sim.state.storages):
        if not sim.has(call.subject, f"/storage/{sid}", ["Datastore.Audit", "Datastore.AllocateSpace"], any_of=True):
            continue
        conf = _api_storage_config(sim, sid)
        if wanted and conf["type"] != wanted:
            continue
        res.append(conf)
    return res


@route("GET", "/storage/{storage}")
def storage_read(sim: Sim, call: Call) -> dict[str, t.Any]:
    return _api_storage_config(sim, str(call.params["storage"]))
