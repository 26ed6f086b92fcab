# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An operation's life outside its stages: creating it (gates, confirmation, scope), its states (abandon), template
operations.

May import: ``_core``, ``_formats``, ``_api``, ``_journal`` and the stage registry's table.

This is a private module_utils package: not a public API.
"""
