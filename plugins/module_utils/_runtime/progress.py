# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Progress lines of a long in-process module run (``vmanyware_provision``), shown while the task still runs.

The in-process action (plugins/plugin_utils/_in_process.py) installs a reporter that prints through Ansible's
display; a module process has none (its lines come back in the result only).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import contextlib
import contextvars
import typing as t

_REPORTER: contextvars.ContextVar[t.Callable[[str], None] | None] = contextvars.ContextVar(
    "vmanyware_progress", default=None
)


@contextlib.contextmanager
def reporting_to(reporter: t.Callable[[str], None]) -> t.Iterator[None]:
    """Send every ``report`` line of the block to ``reporter``."""
    token = _REPORTER.set(reporter)
    try:
        yield
    finally:
        _REPORTER.reset(token)


def report(line: str) -> None:
    """Show ``line`` now when a reporter is installed (else nothing: the caller keeps it for its result)."""
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(line)


def reporting() -> bool:
    """Whether ``report`` lines are shown as they come (a reporter is installed: the in-process run)."""
    return _REPORTER.get() is not None
