# SPDX-License-Identifier: GPL-3.0-or-later
"""Integration test wiring: the Proxmox VE simulator's pytest plugin (fixtures ``pvesim_server`` and ``pvesim``)."""

pytest_plugins = ["pvesim.testing"]
