# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pvesim: a Proxmox VE 9.x API simulator (HTTPS, schema-validated, with fault injection)."""

__version__ = "0.1.0"
