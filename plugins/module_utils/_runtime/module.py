# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one place where collection errors become ``fail_json``, and what a module *is*.

A module is described once by a ``ModuleEntry``: its options, the libraries it needs, and an
action that receives plain option values (never ``AnsibleModule``), so the logic stays testable
without Ansible. Two runners use the same entry: ``run_entry`` inside the module process, and the
collection's action plugin inside Ansible's worker when the task runs on the controller
(``plugins/plugin_utils/_in_process.py``). Any ``VmanywareError`` becomes a failed result with its
fixed code; anything else becomes ``internal_error`` without the exception text, so nothing
unvetted reaches the output.
"""

from __future__ import annotations

import dataclasses
import typing as t

from .._core.cancel import controller_environment
from .._core.errors import VmanywareError

# action(params, check_mode, diff) -> result
Action = t.Callable[[t.Mapping[str, t.Any], bool, bool], t.Dict[str, t.Any]]


@dataclasses.dataclass(frozen=True)
class ModuleEntry:
    """A module's options, required libraries and action, independent of how it is invoked."""

    argument_spec: t.Callable[[], t.Dict[str, t.Dict[str, t.Any]]]
    action: Action
    libraries: t.Tuple[str, ...] = ()
    mutually_exclusive: t.Tuple[t.Tuple[str, ...], ...] = ()
    required_one_of: t.Tuple[t.Tuple[str, ...], ...] = ()
    required_if: t.Tuple[t.Tuple[t.Any, ...], ...] = ()

    def module_kwargs(self) -> dict[str, t.Any]:
        """Keyword arguments for ``AnsibleModule`` (every module supports check mode)."""
        kwargs: dict[str, t.Any] = {"argument_spec": self.argument_spec(), "supports_check_mode": True}
        if self.mutually_exclusive:
            kwargs["mutually_exclusive"] = [list(group) for group in self.mutually_exclusive]
        if self.required_one_of:
            kwargs["required_one_of"] = [list(group) for group in self.required_one_of]
        if self.required_if:
            kwargs["required_if"] = [list(rule) for rule in self.required_if]
        return kwargs


def safe_call(action: t.Callable[[], dict[str, t.Any]]) -> tuple[bool, dict[str, t.Any]]:
    """Run ``action``: ``(True, result)``, or ``(False, failure)`` with a fixed code and no exception text."""
    try:
        return True, action()
    except VmanywareError as err:
        return False, err.to_result()
    except Exception:  # pylint: disable=broad-exception-caught
        # The exception text may carry input values or provider bodies: never forward it.
        return False, {"msg": "An unexpected internal error occurred.", "error_code": "internal_error"}


def controller_watch() -> dict[str, str]:
    """The environment the action plugin gives a task (``$VMANYWARE_CONTROLLER``: the controller and the worker, ``_cancel``),
    so a run in process or in a module process stops once they are gone."""
    return controller_environment()


def missing_libraries(names: t.Iterable[str]) -> list[str]:
    """Which of ``names`` (``PyYAML``, ``jsonschema``, ``requests``, ``cryptography``) cannot be imported here."""
    # Imported here so a module only loads the support code of the libraries it needs.
    present: dict[str, bool] = {}
    names = list(names)
    if "PyYAML" in names:
        from .._formats.yaml_strict import HAS_YAML  # pylint: disable=import-outside-toplevel

        present["PyYAML"] = HAS_YAML
    if "jsonschema" in names:
        from .._formats.schemas import HAS_JSONSCHEMA  # pylint: disable=import-outside-toplevel

        present["jsonschema"] = HAS_JSONSCHEMA
    if "cryptography" in names:
        from .._api.certificate import HAS_CRYPTOGRAPHY  # pylint: disable=import-outside-toplevel

        present["cryptography"] = HAS_CRYPTOGRAPHY
    if "requests" in names:
        from .._api.libraries import HAS_REQUESTS  # pylint: disable=import-outside-toplevel

        present["requests"] = HAS_REQUESTS
    return [name for name in names if not present.get(name, False)]


def run_entry(module: t.Any, entry: ModuleEntry) -> None:
    """The whole ``main()`` of a module after ``AnsibleModule(**entry.module_kwargs())``."""
    require_libraries(module, *entry.libraries)
    params = module.params
    run_module(module, lambda: entry.action(params, module.check_mode, module._diff))  # pylint: disable=protected-access


def run_module(module: t.Any, action: t.Callable[[], dict[str, t.Any]]) -> None:
    """Run ``action`` and exit the module with its result, or fail with a safe error."""
    succeeded, result = safe_call(action)
    if not succeeded:
        module.fail_json(**result)
    module.exit_json(**result)


def require_libraries(module: t.Any, *names: str) -> None:
    """Fail with Ansible's standard message when a controller library is missing."""
    from ansible.module_utils.basic import missing_required_lib  # pylint: disable=import-outside-toplevel

    for name in missing_libraries(names):
        module.fail_json(msg=missing_required_lib(name), error_code="configuration_error")
