# SPDX-License-Identifier: GPL-3.0-or-later
"""Root test wiring: pytest only accepts ``pytest_plugins`` here. The simulator's plugin provides
the ``pvesim_server`` (per session) and ``pvesim`` (fresh state per test) fixtures."""

pytest_plugins = ["pvesim.testing"]
