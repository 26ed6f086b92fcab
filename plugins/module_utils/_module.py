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


def require_libraries(module: t.Any, *names: str) -> None:
    """Fail with Ansible's standard message when a controller library is missing.

    ``names``: ``PyYAML``, ``jsonschema``, ``requests``, ``proxmoxer``.
    """
    # Imported here so a module only loads the support code of the libraries it needs.
    from ansible.module_utils.basic import missing_required_lib  # pylint: disable=import-outside-toplevel

    present: dict[str, bool] = {}
    if "PyYAML" in names:
        from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats import HAS_YAML  # pylint: disable=import-outside-toplevel
        present["PyYAML"] = HAS_YAML
    if "jsonschema" in names:
        from ansible_collections.vmanyware.proxmox.plugins.module_utils._schemas import HAS_JSONSCHEMA  # pylint: disable=import-outside-toplevel
        present["jsonschema"] = HAS_JSONSCHEMA
    if "requests" in names or "proxmoxer" in names:
        from ansible_collections.vmanyware.proxmox.plugins.module_utils._client import (  # pylint: disable=import-outside-toplevel
            HAS_PROXMOXER,
            HAS_REQUESTS,
        )
        present["requests"] = HAS_REQUESTS
        present["proxmoxer"] = HAS_PROXMOXER
    for name in names:
        if not present.get(name, False):
            module.fail_json(msg=missing_required_lib(name), error_code="configuration_error")
