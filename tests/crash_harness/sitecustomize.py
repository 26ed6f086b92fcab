# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Python imports this at start-up when this folder is on ``PYTHONPATH`` (the crash tests put it there): with
``$VMANYWARE_TEST_CRASH_AT`` set, the collection's client and journal store get their crash points (vmanyware_crash_hook)."""

import os

if os.environ.get("VMANYWARE_TEST_CRASH_AT"):
    import vmanyware_crash_hook

    vmanyware_crash_hook.install_on_import()
