# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import typing as t

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    """M(vmanyware.proxmox.vmanyware_print): the text printed as it is (Ansible's display), nothing returned but C(changed)."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        result = super().run(tmp, task_vars)
        del tmp
        _spec, args = self.validate_argument_spec(argument_spec={"text": {"type": "str", "required": True}})
        display.display(args["text"][:-1] if args["text"].endswith("\n") else args["text"])
        result["changed"] = False
        return result
