# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Run a vmanyware module's own code inside Ansible's worker when the task runs on the controller.

Every vmanyware module talks to the Proxmox API or the local journal, so it normally runs on the
controller (``connection: local``). There, executing it as a module means one more Python start,
the AnsiballZ payload and ``ansible.module_utils.basic`` for every task: about a second per task,
most of the wall time of a provisioning run (docs/benchmarks.md). This action runs the same
``ModuleEntry`` (options, libraries, action) in the worker process that Ansible already forked for
the task, with the same option validation (``ArgumentSpecValidator``: types, defaults,
``PROXMOX_*`` fallbacks, choices, mutually exclusive groups), the task's ``environment``, and the
same ``no_log`` censoring of the result.

It falls back to executing the module normally whenever the in-process run would not be the same:
a connection other than ``local``, ``become``, ``async``, a library missing from the controller's
Python (the module then runs under ``ansible_python_interpreter``),
``VMANYWARE_IN_PROCESS=false`` in the controller's environment, or an ansible-core whose private
internals this run needs are not there (below). With ``-vvv`` every task says which path it took.

ansible-core has no public API for two things the in-process run needs; both are read through a
guarded access (present and of the expected type, else the fallback), and tests/integration/test_in_process_action.py
checks on every ansible-core of the support matrix that they are there and the in-process path runs:

- ``ValidationResult._no_log_values``: the values of ``no_log`` options (with their fallbacks and
  sub-options) that ``AnsibleModule`` censors in results. Without it nothing could be censored the way
  the module process censors: the module process runs instead.
- ``Play._action_groups`` (through ``Task._parent._play``): which ``group/...`` module_defaults apply to
  the task, to leave out a group default this module does not take. ansible-core's own action plugins read
  it the same way. Without it, this collection's own action groups (``meta/runtime.yml``) are used, which
  is what the play resolves for a group of this collection.

``ActionBase._compute_environment_string(raw_environment_out=...)`` (the task's ``environment:``) is
ActionBase's interface for subclasses, like ``_execute_module``; a change of its signature also falls
back to the module process. The temporary directory of a module run is removed by ``ActionBase.cleanup()``,
which the task executor calls after every action.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import typing as t
from pathlib import Path

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

try:
    import yaml
except ImportError:  # ansible-core requires PyYAML; the sanity import test loads this file without it
    yaml = None

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import (
    ModuleEntry,
    controller_watch,
    missing_libraries,
    safe_call,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.progress import reporting_to
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import PREVIEW_FACT

display = Display()

MODULES_PACKAGE = "ansible_collections.vmanyware.proxmox.plugins.modules."
SWITCH = "VMANYWARE_IN_PROCESS"
COLLECTION = "vmanyware.proxmox"
RUNTIME_YML = Path(__file__).resolve().parents[2] / "meta" / "runtime.yml"


class NotInProcess(Exception):
    """The in-process run cannot be the same as the module process here (the reason is the message): run the module."""


def no_log_values(validation: t.Any) -> set[str]:
    """The ``no_log`` values ``ArgumentSpecValidator`` found (private ``ValidationResult._no_log_values``: no public API)."""
    values = getattr(validation, "_no_log_values", None)
    if not isinstance(values, (set, frozenset)) or not all(isinstance(value, str) for value in values):
        raise NotInProcess("ansible-core internals unavailable: ValidationResult._no_log_values")
    return set(values)


def own_action_groups(fqcn: str, runtime_yml: Path = RUNTIME_YML) -> list[str]:
    """The groups of this collection's ``meta/runtime.yml`` that hold ``fqcn``, fully qualified (as a play resolves them)."""
    prefix = COLLECTION + "."
    if not fqcn.startswith(prefix) or yaml is None:
        return []
    try:
        groups = (yaml.safe_load(runtime_yml.read_text(encoding="utf-8")) or {}).get("action_groups") or {}
    except (OSError, yaml.YAMLError):
        return []
    short = fqcn[len(prefix) :]
    return [
        prefix + name
        for name, members in groups.items()
        if isinstance(members, list) and (short in members or fqcn in members)
    ]


def action_groups(task: t.Any) -> list[str]:
    """The fully qualified groups ``task``'s action belongs to for ``module_defaults``.

    The play's ``_action_groups`` (private; ansible-core's own action plugins read it the same way), else this
    collection's own groups.
    """
    fqcn = task.resolved_action or task.action
    play = getattr(getattr(task, "_parent", None), "_play", None)
    groups = getattr(play, "_action_groups", None)
    if isinstance(groups, t.Mapping):
        return list(groups.get(fqcn, []))
    return own_action_groups(fqcn)


def in_process_enabled(environ: t.Mapping[str, str]) -> bool:
    """``VMANYWARE_IN_PROCESS``: unset or ``true`` -> in process; ``false`` -> always a module process."""
    return environ.get(SWITCH, "true").strip().lower() != "false"


@contextlib.contextmanager
def task_environment(overrides: t.Mapping[str, t.Any]) -> t.Iterator[None]:
    """The task's ``environment:`` keyword applied to ``os.environ`` for the run, then restored."""
    saved = {key: os.environ.get(key) for key in overrides}
    try:
        for key, value in overrides.items():
            os.environ[str(key)] = str(value)
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def without_foreign_group_defaults(
    args: t.Mapping[str, t.Any], entry: ModuleEntry, from_group: t.Collection[str]
) -> dict[str, t.Any]:
    """``args`` without the group defaults that do not apply to this module.

    One ``module_defaults: group/vmanyware.proxmox.proxmox`` entry serves every module of the group, so an
    option set there that this module does not take (``journal_dir`` for ``vmanyware_plan``) is left out,
    and a group default gives way to the other member of a mutually exclusive pair that the task itself
    (or the module's own defaults) set (``catalog`` on the task, ``catalog_path`` in the group).
    A group default outside this module's choices for an option of the same name is meant for another
    module (``state: present`` of ``vmanyware_operation`` is not a state of ``vmanyware_vmid``) and is left out too.
    ``from_group`` names the options that reached the task only through group defaults.
    """
    accepted = entry.argument_spec()
    kept = {
        name: value
        for name, value in args.items()
        if name not in from_group or (name in accepted and _within_choices(value, accepted[name]))
    }
    for group in entry.mutually_exclusive:
        present = [name for name in group if kept.get(name) is not None]
        if len(present) > 1 and any(name not in from_group for name in present):
            for name in present:
                if name in from_group:
                    del kept[name]
    return kept


def _within_choices(value: t.Any, spec: t.Mapping[str, t.Any]) -> bool:
    """Whether a group default fits the option's ``choices`` (always when it has none, or for a templated value)."""
    choices = spec.get("choices")
    if not choices or not isinstance(value, (str, int)) or isinstance(value, bool) or spec.get("type") == "list":
        return True
    return value in choices or str(value) in [str(choice) for choice in choices]


def with_preview_document(
    args: t.Mapping[str, t.Any], entry: ModuleEntry, facts: t.Mapping[str, t.Any]
) -> dict[str, t.Any]:
    """In check mode, a stage task's ``operation_id`` from ``vmanyware_operation``'s preview gets that preview document.

    A playbook written for the normal mode (``operation_id: "{{ op.operation_id }}"``) then previews every
    stage unchanged under ``--check``: the operation does not exist in the journal, its document is the
    fact ``vmanyware_preview_operation`` the check-mode ``vmanyware_operation`` task set.
    """
    document = facts.get(PREVIEW_FACT)
    if (
        "preview_operation" not in entry.argument_spec()
        or args.get("preview_operation") is not None
        or not args.get("operation_id")
        or not isinstance(document, t.Mapping)
        or document.get("operationId") != args["operation_id"]
    ):
        return dict(args)
    return dict(args, preview_operation=document)


def plain(value: t.Any) -> t.Any:
    """Task arguments as a module process would receive them (JSON types only, no template tags)."""
    return json.loads(json.dumps(value))


def run_entry_in_process(
    entry: ModuleEntry, module_name: str, args: t.Mapping[str, t.Any], *, check_mode: bool, diff: bool
) -> dict[str, t.Any]:
    """Validate ``args`` like ``AnsibleModule`` does, run the entry, censor ``no_log`` values in the result.

    Raises ``NotInProcess`` (before the entry ran) when this ansible-core does not say which values to censor.
    """
    kwargs = entry.module_kwargs()
    kwargs.pop("supports_check_mode")
    validator = ArgumentSpecValidator(**kwargs)
    try:
        plain_args = plain(dict(args))
    except (TypeError, ValueError):
        # A module process could not receive them either (arguments travel as JSON).
        return {"failed": True, "msg": "The task arguments are not JSON values (%s module)." % module_name}
    validation = validator.validate(plain_args)
    censored = no_log_values(validation)  # raises NotInProcess before anything ran
    if validation.error_messages:
        # The first error, worded as AnsibleModule words it (no error code there either), censored.
        message = validation.errors.msg
        if isinstance(validation.errors[0], UnsupportedError):
            message = "Unsupported parameters for (%s) module: %s" % (module_name, message)
        return {"failed": True, "msg": remove_values(message, censored)}
    params = validation.validated_parameters
    succeeded, result = safe_call(lambda: entry.action(params, check_mode, diff))
    if not succeeded:
        result["failed"] = True
    result.setdefault("changed", False)
    result.setdefault("invocation", {"module_args": params})  # as AnsibleModule returns it, on success and failure
    return t.cast(dict, remove_values(result, censored))


class InProcessModuleAction(ActionBase):
    """The action of every vmanyware module (``plugins/action/vmanyware_*.py``)."""

    _supports_check_mode = True
    _supports_async = True

    def _module_short_name(self) -> str:
        return (self._task.resolved_action or self._task.action).rsplit(".", 1)[-1]

    def _module_entry(self) -> ModuleEntry:
        return t.cast(ModuleEntry, importlib.import_module(MODULES_PACKAGE + self._module_short_name()).ENTRY)

    def _entry(self) -> ModuleEntry | None:
        """The module's entry when this task can run in process, else ``None`` (run the module)."""
        try:
            return self._in_process_entry()
        except NotInProcess:
            return None

    def _in_process_entry(self) -> ModuleEntry:
        """The module's entry when this task can run in process; ``NotInProcess`` (with the reason) when not."""
        if not in_process_enabled(os.environ):
            raise NotInProcess("%s=false" % SWITCH)
        transport = getattr(self._connection, "transport", None)
        if transport != "local":
            raise NotInProcess("connection %s" % transport)
        if self._play_context.become:
            raise NotInProcess("become")
        if self._task.async_val:
            raise NotInProcess("async")
        entry = self._module_entry()
        missing = missing_libraries(entry.libraries)
        if missing:
            raise NotInProcess("missing on the controller: %s" % ", ".join(missing))
        return entry

    def _task_environment(self) -> dict[str, t.Any]:
        """The task's ``environment:`` as ansible-core computes it for a module (ActionBase's interface for subclasses)."""
        environment: dict[str, t.Any] = {}
        try:
            self._compute_environment_string(raw_environment_out=environment)
        except (TypeError, AttributeError) as exc:
            raise NotInProcess(
                "ansible-core internals unavailable: ActionBase._compute_environment_string(raw_environment_out)"
            ) from exc
        return environment

    def _group_default_names(self) -> set[str]:
        """Options of this task that only ``group/...`` module_defaults set (not the module's own defaults entry)."""
        merged: dict[str, t.Any] = {}
        for defaults in self._task.module_defaults or []:
            merged.update(defaults)
        fqcn = self._task.resolved_action or self._task.action
        groups = action_groups(self._task)
        names: set[str] = set()
        try:
            for key, value in merged.items():
                if key.startswith("group/") and key.split("group/")[-1] in groups:
                    value = self._templar.template(value)
                    if isinstance(value, t.Mapping):
                        names.update(str(name) for name in value)
            own = self._templar.template(merged.get(fqcn) or {})
        except Exception:  # pylint: disable=broad-exception-caught  # not resolvable here: leave the task's arguments as they are
            return set()
        return names - set(own if isinstance(own, t.Mapping) else ())

    def _module_args(self, task_vars: t.Mapping[str, t.Any] | None) -> dict[str, t.Any]:
        """The task's arguments for this module: foreign group defaults left out, the check-mode preview filled in."""
        entry = self._module_entry()
        args = without_foreign_group_defaults(self._task.args, entry, self._group_default_names())
        if self._task.check_mode:
            facts = dict((task_vars or {}).get("ansible_facts") or {})
            facts.setdefault(PREVIEW_FACT, (task_vars or {}).get(PREVIEW_FACT))
            args = with_preview_document(args, entry, facts)
        return args

    def run(self, tmp: t.Any = None, task_vars: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = self._module_args(task_vars)
        name = self._module_short_name()
        # The controller (this worker's parent) and this worker, watched by the run: it stops once they are gone (_cancel).
        # Not for an async task: it is meant to outlive both (poll: 0).
        watch = {} if self._task.async_val else controller_watch()
        try:
            entry = self._in_process_entry()
            environment = self._task_environment()
            host = (task_vars or {}).get("inventory_hostname", "localhost")
            # Progress lines of a long run (vmanyware_provision) are shown while the task runs, from the worker.
            with (
                task_environment(dict(environment, **watch)),
                reporting_to(lambda line: display.display("[%s] %s" % (host, line))),
            ):
                outcome = run_entry_in_process(
                    entry, name, args, check_mode=bool(self._task.check_mode), diff=bool(self._task.diff)
                )
        except NotInProcess as reason:
            display.vvv("vmanyware: %s ran as a module process (%s)" % (name, reason))
            # What ansible.builtin.normal does for a module without an action plugin (a local module process inherits the
            # watch through the worker's environment); ActionBase.cleanup(), which the task executor calls after every
            # action, removes the temporary directory of a module that was not async.
            wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
            with task_environment(watch):
                return t.cast(
                    dict,
                    merge_hash(
                        result, self._execute_module(module_args=args, task_vars=task_vars, wrap_async=wrap_async)
                    ),
                )
        display.vvv("vmanyware: %s ran in process" % name)
        result.update(outcome)
        return result
