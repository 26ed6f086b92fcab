# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The template-build stages.

May import: what ``_stages`` may, the stage framework (``_stages/*.py``) and ``_stages/vm`` (the disk stage and shared guest helpers).

This is a private module_utils package: not a public API.
"""
