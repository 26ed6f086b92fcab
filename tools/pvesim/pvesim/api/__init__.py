# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The implemented ``/api2/json`` endpoints (PVE semantics, simulated state), one module per resource family.

Every handler gets the ``Sim`` (state, tasks, clock, faults) and a ``Call`` (validated wire
parameters merged with path parameters, the authenticated subject, the faults that fired) and
returns the ``data`` value, or raises ``ApiError`` (``core.py``). Messages are copied from qemu-server,
pve-manager, pve-common and pve-access-control.

A handler is marked with ``@route`` (``core.py``); ``pvesim/routes.py`` names every endpoint module (these, and
``cluster.py``, ``imagebuild.py``, ``lxc.py``) and builds the one route table the server uses. Importing this package
imports nothing: an endpoint module imports ``core`` and what it needs, never the table.
"""
