# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Foundations every other package uses: the error hierarchy, atomic files and the file lock, the client and store
protocols, redaction, cancellation, text tables.

May import: nothing of ours (standard library only).

This is a private module_utils package: not a public API.
"""
