# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The crash points of the crash tests (docs/journal.md, "Crash testing"; docs/reliability.md), injected from outside.

``$VMANYWARE_TEST_CRASH_AT`` names one crash point; the process then ends with ``os._exit(137)`` (what a ``kill -9``
leaves: no cleanup, no reply) exactly there:

- ``journal:before_replace|after_replace:<kind>:<status>``: around the rename of an operation file, when the write
  records stage ``<kind>`` (or ``operation``/``cleanup``) as ``<status>`` (``JournalStore._write``);
- ``http:before_send|after_reply:<METHOD>:<path regex>[#N]``: at the Nth matching exchange (default 1) of a client
  (``ProxmoxClient._exchange``): before any byte is written, or after the whole reply (any status) was received.

The collection knows nothing of this: ``install()`` wraps those two methods in this process (the in-process drivers and
unit tests call it), and ``sitecustomize.py`` beside this file calls ``install_on_import()`` in every Python process
started with this folder on ``PYTHONPATH`` and the variable set (``child_env``): ansible-playbook, its workers (the
in-process action) and AnsiballZ module processes alike. Each client and store reads the variable once, on its first
exchange or write; ``rearm`` makes them read it again (the chained driver arms one stage at a time).
"""

from __future__ import annotations

import builtins
import functools
import os
import re
import sys
import typing as t
from pathlib import Path

ENV_CRASH_AT = "VMANYWARE_TEST_CRASH_AT"
CRASH_EXIT_CODE = 137
HARNESS_DIR = str(Path(__file__).resolve().parent)
_MODULE_UTILS = "ansible_collections.vmanyware.proxmox.plugins.module_utils"
CLIENT_MODULE = _MODULE_UTILS + "._api.client"
STORE_MODULE = _MODULE_UTILS + "._journal.store"
_HTTP_CRASH = re.compile(r"^http:(before_send|after_reply):([A-Z]+|\*):(.+?)(?:#([1-9][0-9]{0,5}))?$", re.DOTALL)
_POINT_ATTRIBUTE = "_vmanyware_crash_point"
_UNSET = object()


def crash() -> None:
    """End the process at once, as a kill would: no ``finally``, no flush, no reply."""
    os._exit(CRASH_EXIT_CODE)  # pylint: disable=protected-access


def crash_at(environ: t.Mapping[str, str] | None = None) -> str | None:
    """The configured crash point, ``None`` when unset (the normal case)."""
    return (os.environ if environ is None else environ).get(ENV_CRASH_AT) or None


class HttpCrashPoint:
    """``http:before_send|after_reply:<METHOD>:<path regex>[#N]``: crash at the Nth matching exchange (default 1)."""

    def __init__(self, phase: str, method: str, regex: str, occurrence: int) -> None:
        self.phase = phase
        self.method = method
        self.regex = re.compile(regex)
        self.occurrence = occurrence
        self.seen = 0

    @classmethod
    def parse(cls, value: str | None) -> HttpCrashPoint | None:
        """The ``http:`` point named by ``value`` (a ``journal:`` point or a bad pattern gives ``None``)."""
        match = _HTTP_CRASH.match(value or "")
        if match is None:
            return None
        try:
            return cls(match.group(1), match.group(2), match.group(3), int(match.group(4) or 1))
        except re.error:
            return None

    def check(self, phase: str, method: str, path: str) -> None:
        if phase != self.phase or self.method not in ("*", method) or not self.regex.search(path):
            return
        self.seen += 1
        if self.seen == self.occurrence:
            crash()


def _point_of(instance: t.Any, parse: t.Callable[[str | None], t.Any]) -> t.Any:
    """The instance's crash point, read from the environment on first use (``rearm`` forgets it)."""
    point = instance.__dict__.get(_POINT_ATTRIBUTE, _UNSET)
    if point is _UNSET:
        point = parse(crash_at())
        instance.__dict__[_POINT_ATTRIBUTE] = point
    return point


def rearm(*instances: t.Any) -> None:
    """Make clients and stores read ``$VMANYWARE_TEST_CRASH_AT`` again on their next exchange or write."""
    for instance in instances:
        instance.__dict__.pop(_POINT_ATTRIBUTE, None)


def patch_client(module: t.Any) -> None:
    """Wrap ``ProxmoxClient._exchange``: ``before_send`` after the TLS refusal check (a refused exchange sends nothing and
    is not counted), ``after_reply`` once the whole reply came back, whatever its status."""
    client_class = module.ProxmoxClient
    original = client_class._exchange  # pylint: disable=protected-access
    if getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def exchange(self: t.Any, method: str, path: str, params: t.Any, **kwargs: t.Any) -> t.Any:
        point = _point_of(self, HttpCrashPoint.parse)
        if point is None or module.tls_refusal(self.settings, method, path) is not None:
            return original(self, method, path, params, **kwargs)
        point.check("before_send", method, path)
        try:
            result = original(self, method, path, params, **kwargs)
        except module.ProviderError as err:
            # The whole reply arrived and was then refused (an HTTP error status, a body it does not understand); a
            # reply that was cut off or over the size bound never arrived whole: no ``after_reply`` then.
            if (err.details or {}).get("status") is not None and err.code not in ("reply_lost", "response_too_large"):
                point.check("after_reply", method, path)
            raise
        point.check("after_reply", method, path)
        return result

    client_class._exchange = exchange  # pylint: disable=protected-access


def patch_store(module: t.Any) -> None:
    """Wrap ``JournalStore._write``: when the write records the point's ``<kind>:<status>``, crash right before the
    rename of the operation file or right after it (``os.replace`` of that path, for the duration of the write)."""
    store_class = module.JournalStore
    original = store_class._write  # pylint: disable=protected-access
    if getattr(original, "__wrapped__", None) is not None:
        return

    @functools.wraps(original)
    def write(self: t.Any, document: t.Any, change: tuple[str, str]) -> None:
        point = _point_of(self, lambda value: value if (value or "").startswith("journal:") else None)
        phases = [
            phase
            for phase in ("before_replace", "after_replace")
            if point == "journal:%s:%s:%s" % (phase, change[0], change[1])
        ]
        if not phases:
            return original(self, document, change)
        target = os.path.abspath(self.operation_path(document["operationId"]))
        real_replace = os.replace

        def replace(source: t.Any, destination: t.Any, *args: t.Any, **kwargs: t.Any) -> None:
            if os.path.abspath(os.fspath(destination)) != target:
                return real_replace(source, destination, *args, **kwargs)
            if phases == ["before_replace"]:
                crash()
            real_replace(source, destination, *args, **kwargs)
            crash()
            return None

        os.replace = replace
        try:
            return original(self, document, change)
        finally:
            os.replace = real_replace

    store_class._write = write  # pylint: disable=protected-access


_PATCHES: dict[str, tuple[str, t.Callable[[t.Any], None]]] = {
    CLIENT_MODULE: ("ProxmoxClient", patch_client),
    STORE_MODULE: ("JournalStore", patch_store),
}


def install() -> None:
    """Wrap both methods in this process now (imports the two modules)."""
    import importlib  # pylint: disable=import-outside-toplevel

    for name, (_class_name, patch) in _PATCHES.items():
        patch(importlib.import_module(name))


def install_on_import() -> None:
    """Wrap both methods as soon as their modules are imported in this process, however they are found (ansible's
    collection loader, AnsiballZ's zip): ``builtins.__import__`` looks for them after each import until both are done."""
    pending = dict(_PATCHES)
    original_import = builtins.__import__

    def patch_ready() -> None:
        for name, (class_name, patch) in list(pending.items()):
            module = sys.modules.get(name)
            if module is not None and hasattr(module, class_name):
                del pending[name]
                patch(module)
        if not pending:
            builtins.__import__ = original_import

    def importing(
        name: str, globals: t.Any = None, locals: t.Any = None, fromlist: t.Any = (), level: int = 0
    ) -> t.Any:  # pylint: disable=redefined-builtin
        module = original_import(name, globals, locals, fromlist, level)
        if pending:
            patch_ready()
        return module

    builtins.__import__ = importing


def child_env(environ: t.Mapping[str, str], point: str | None) -> dict[str, str]:
    """``environ`` for a child process: the crash point set (or removed) and this folder first on ``PYTHONPATH``."""
    env = dict(environ)
    env.pop(ENV_CRASH_AT, None)
    if point:
        env[ENV_CRASH_AT] = point
        paths = [HARNESS_DIR] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != HARNESS_DIR]
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env
