# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The implemented ``/api2/json`` endpoints (PVE semantics, simulated state), one module per resource family.

Every handler gets the ``Sim`` (state, tasks, clock, faults) and a ``Call`` (validated wire
parameters merged with path parameters, the authenticated subject, the faults that fired) and
returns the ``data`` value, or raises ``ApiError``. Messages are copied from qemu-server,
pve-manager, pve-common and pve-access-control.

Each family module registers its handlers into the one route table ``HANDLERS`` with ``@route``
when it is imported; importing this package imports them all. The names below are what the server
and the other route modules (``cluster.py``, ``imagebuild.py``, ``lxc.py``) use.
"""

from __future__ import annotations

from .core import DURATIONS, HANDLERS, PVE_VERSION, ApiError, Call, Handler, Sim, param_error, perm_error, route
from .permissions import check_permissions
from .qemu_volumes import free_volume, materialize
# importing a family module registers its routes
from . import access, nodes, resources, qemu_config, qemu_clone, qemu_power, qemu_snapshot  # noqa: F401  pylint: disable=unused-import
from . import qemu_cloudinit, qemu_agent, node_tasks  # noqa: F401  pylint: disable=unused-import
from .qemu_snapshot import RESERVED_SNAPNAMES

# The names imagebuild.py imports (it allocates and frees volumes like a config update does).
_materialize = materialize
_free_volume = free_volume

__all__ = ["DURATIONS", "HANDLERS", "PVE_VERSION", "RESERVED_SNAPNAMES", "ApiError", "Call", "Handler", "Sim", "check_permissions",
           "free_volume", "materialize", "param_error", "perm_error", "route"]

# Several cluster nodes (the ``cluster`` seed, /cluster/status, the SDN VNet list), template builds and containers register here too.
from .. import cluster  # noqa: E402,F401  pylint: disable=wrong-import-position,cyclic-import,unused-import
from .. import imagebuild  # noqa: E402,F401  pylint: disable=wrong-import-position,cyclic-import,unused-import
from .. import lxc  # noqa: E402,F401  pylint: disable=wrong-import-position,cyclic-import,unused-import
