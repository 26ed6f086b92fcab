# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read-only checks: one check driver, the VM, container and template preflights, the privilege table and the capability
report on top of it.

May import: ``_core``, ``_formats``, ``_api``, ``_operation`` and the stage registry's table. Never the journal or a stage.

This is a private module_utils package: not a public API.
"""
