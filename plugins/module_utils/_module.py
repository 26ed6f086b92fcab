# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place where collection errors become ``fail_json``.

Modules build their ``AnsibleModule``, then hand a callable to ``run_module``. The callable
receives plain option values (never the module itself), so the logic stays testable without
Ansible. Any ``VmanywareError`` becomes a failed result with its fixed code; anything else
becomes ``internal_error`` without the exception text, so nothing unvetted reaches the output.
"""

from __future__ import annotations

import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import VmanywareError


def run_module(module: t.Any, action: t.Callable[[], dict[str, t.Any]]) -> None:
    """Run ``action`` and exit the module with its result, or fail with a safe error."""
    try:
        result = action()
    except VmanywareError as err:
        module.fail_json(**err.to_result())
    except Exception:  # pylint: disable=broad-exception-caught
        # The exception text may carry input values or provider bodies: never forward it.
        module.fail_json(msg="An unexpected internal error occurred.", error_code="internal_error")
    else:
        module.exit_json(**result)
