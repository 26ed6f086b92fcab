# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What turns module input into calls: ``ModuleEntry`` (errors into failures in one place), the stage-module helper,
progress, the one-task provision and cleanup drivers, adoption.

May import: every other package. Only modules import it.

This is a private module_utils package: not a public API.
"""
