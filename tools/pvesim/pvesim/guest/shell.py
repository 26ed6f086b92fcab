# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``sh -c`` in the simulated guest: the qga connection plugin's two scripts, and a script that is one simple command.

The plugin (plugins/module_utils/_api/guest_agent.py) runs ``/bin/sh -c QGA_EXEC_SCRIPT vmanyware-qga <command>`` and joins
uploaded parts with ``/bin/sh -c QGA_JOIN_SCRIPT vmanyware-qga-join <dest> <tmp> <part>...``; the texts here are the
plugin's (tests/unit checks they are equal). ``<command>`` (and Ansible's ``/bin/sh -c '<cmd>'`` inside it) runs when it is
one simple command (words and quotes, no operator, redirection or expansion); anything else exits 2, as before.
"""

from __future__ import annotations

import shlex
from .model import Outcome

QGA_EXEC_SCRIPT = (
    '[ -n "${HOME:-}" ] || { HOME=$(getent passwd "$(id -u)" 2>/dev/null | cut -d: -f6); HOME=${HOME:-/root}; export HOME; }\n'
    "PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}; export PATH\n"
    'exec /bin/sh -c "$1"\n'
)
QGA_JOIN_SCRIPT = 'd=$1; t=$2; shift 2\nif cat -- "$@" >"$t" && mv -f -- "$t" "$d"; then c=0; else c=1; fi\nrm -f -- "$@" "$t"\nexit "$c"\n'
_REFUSED = "sh: the simulated guest runs the vmanyware scripts and simple commands only\n"
_SPECIAL = set("|&;<>()$`*?[]{}~\n")


class Shell:
    """The ``sh`` of the simulated guest (mixed into ``Commands``; ``_written`` and ``_file`` are the guest's)."""

    _written: dict[str, str]

    def _file(self, path: str) -> str | None:
        raise NotImplementedError  # the guest's files (GuestFiles, SimulatedGuest)

    def _run(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        raise NotImplementedError  # Commands

    def _cmd_sh(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        if len(argv) >= 5 and argv[1:3] == ["-c", QGA_EXEC_SCRIPT]:
            return self._simple(argv[4], env, stdin, now)
        if len(argv) >= 6 and argv[1:3] == ["-c", QGA_JOIN_SCRIPT]:
            return self._join(argv[4], argv[5], argv[6:])
        if len(argv) == 3 and argv[1] == "-c":
            return self._simple(argv[2], env, stdin, now)
        return Outcome(2, "", _REFUSED)

    def _simple(self, script: str, env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        try:
            lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            words = list(lexer)
        except ValueError:
            return Outcome(2, "", "sh: syntax error\n")
        # Operators come as their own tokens; expansions are refused wherever they are (quoted or not: kept simple).
        if not words or any(set(word) & _SPECIAL for word in words):
            return Outcome(2, "", _REFUSED)
        return self._run(words, env, stdin, now)

    def _join(self, dest: str, tmp: str, parts: list[str]) -> Outcome:
        texts = [self._file(part) for part in parts]
        code = 1
        if all(text is not None for text in texts) and "/" in dest:
            self._written[dest] = "".join(t for t in texts if t is not None)
            code = 0
        for name in parts + [tmp]:
            self._written.pop(name, None)
        return Outcome(code, duration=0.01)
