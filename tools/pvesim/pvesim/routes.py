# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one route table: every endpoint module, named here, and the ``(method, path template) -> handler`` table built
from the handlers they mark with ``@route``. The server imports this; no endpoint module imports it (no import cycle).
A new endpoint module gets its line in ``ENDPOINT_MODULES``."""

from __future__ import annotations

import types
import typing as t

from . import appliances, cluster, imagebuild, lxc, lxc_snapshots, uploads
from .api import (
    access,
    ha,
    node_tasks,
    nodes,
    pools,
    qemu_agent,
    qemu_clone,
    qemu_cloudinit,
    qemu_config,
    qemu_disks,
    qemu_power,
    qemu_snapshot,
    resources,
    storage_config,
)
from .api.core import ROUTE_ATTRIBUTE, Handler

ENDPOINT_MODULES: tuple[types.ModuleType, ...] = (
    access,
    nodes,
    resources,
    pools,
    storage_config,
    qemu_config,
    qemu_disks,
    qemu_clone,
    qemu_power,
    qemu_snapshot,
    qemu_cloudinit,
    qemu_agent,
    node_tasks,
    cluster,
    ha,
    imagebuild,
    lxc,
    lxc_snapshots,
    appliances,
    uploads,
)


def build_table(modules: t.Iterable[types.ModuleType]) -> dict[tuple[str, str], Handler]:
    """The route table of ``modules``; two handlers for one route is an error, not a silent override."""
    table: dict[tuple[str, str], Handler] = {}
    for module in modules:
        for value in vars(module).values():
            key = getattr(value, ROUTE_ATTRIBUTE, None)
            if key is None or getattr(value, "__module__", None) != module.__name__:
                continue
            if key in table and table[key] is not value:
                raise RuntimeError("two handlers for %s %s" % key)
            table[key] = value
    return table


HANDLERS = build_table(ENDPOINT_MODULES)
