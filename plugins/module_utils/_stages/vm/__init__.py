# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The VM provisioning stages, one file per stage kind, and what they share (``common``, ``guest``).

May import: what ``_stages`` may, and the stage framework (``_stages/*.py``).

This is a private module_utils package: not a public API.
"""
