# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""vmanyware_cleanup's two steps (``stop``, ``destroy``) and the guard both run first.

May import: what ``_stages`` may (with ``_checks``: the token's privileges), the stage framework (``_stages/*.py``) and
``_stages/vm`` (shared reads). ``_runtime/cleanup.py`` drives them.

This is a private module_utils package: not a public API.
"""
