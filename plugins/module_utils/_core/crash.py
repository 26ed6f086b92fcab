# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The test-only crash hooks (docs/journal.md, "Crash testing"; docs/reliability.md).

``$VMANYWARE_TEST_CRASH_AT`` names one crash point; the process then ends with ``os._exit(137)``
(what a ``kill -9`` leaves: no cleanup, no reply) exactly there. Never set it in production.

- ``journal:before_replace|after_replace:<kind>:<status>``: around the atomic replace of an
  operation file, when the write records stage ``<kind>`` (or ``operation``/``cleanup``) as
  ``<status>`` (``JournalStore``);
- ``http:before_send|after_reply:<METHOD>:<path regex>[#N]``: at the Nth matching request
  (default 1) of the client (``ProxmoxClient``).

Both readers take the variable once (per store, per client), so an unset hook costs one
``is None`` test per write or request.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import os
import re
import typing as t

ENV_CRASH_AT = "VMANYWARE_TEST_CRASH_AT"
CRASH_EXIT_CODE = 137

_HTTP_CRASH = re.compile(r"^http:(before_send|after_reply):([A-Z]+|\*):(.+?)(?:#([1-9][0-9]{0,5}))?$", re.DOTALL)


def crash() -> None:
    """End the process at once, as a kill would: no ``finally``, no flush, no reply."""
    os._exit(CRASH_EXIT_CODE)  # pylint: disable=protected-access


def crash_at(environ: t.Mapping[str, str] | None = None) -> str | None:
    """The configured crash point, ``None`` when unset (the normal case)."""
    return (os.environ if environ is None else environ).get(ENV_CRASH_AT) or None


def journal_hooks(point: str | None, kind: str, status: str) -> tuple[t.Callable[[], None] | None, t.Callable[[], None] | None]:
    """``(before_replace, after_replace)`` callables for a journal write recording ``kind`` as ``status``."""
    if point is None:
        return None, None

    def hook(name: str) -> t.Callable[[], None] | None:
        return crash if point == "journal:%s:%s:%s" % (name, kind, status) else None

    return hook("before_replace"), hook("after_replace")


class HttpCrashPoint:
    """``http:before_send|after_reply:<METHOD>:<path regex>[#N]``: crash at the Nth matching request (default 1).

    ``before_send``: the request is built, no byte is written yet; ``after_reply``: the whole reply (any status)
    was received, before it is parsed or returned. The path is the API-relative path (``/nodes/.../clone``).
    """

    def __init__(self, phase: str, method: str, regex: str, occurrence: int) -> None:
        self.phase = phase
        self.method = method
        self.regex = re.compile(regex)
        self.occurrence = occurrence
        self.seen = 0

    @classmethod
    def from_environment(cls, value: str | None) -> HttpCrashPoint | None:
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
