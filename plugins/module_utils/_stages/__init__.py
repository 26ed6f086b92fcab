# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stages: the registry (``registry.py``, a data-only table), the runner, the stage context and guest execution; the
stage logic of each family in ``vm/``, ``container/``, ``template/`` and ``cleanup/``, one file per stage kind;
``logic.py`` binds each registry row to its class by import.

May import: ``_core``, ``_formats``, ``_api``, ``_journal``, ``_operation``; stage logic also ``_checks``. Never ``_runtime``.

This is a private module_utils package: not a public API.
"""
