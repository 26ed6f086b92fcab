# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import InProcessModuleAction


class ActionModule(InProcessModuleAction):
    """Runs M(vmanyware.proxmox.vmanyware_profile) in Ansible's worker on the controller (see plugins/plugin_utils/_in_process.py)."""
