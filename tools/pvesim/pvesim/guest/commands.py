# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``guest-exec`` commands: the binaries on the guest's PATH and the small ones (env, cat, ssh-keygen, hostname); sh in shell.py."""

from __future__ import annotations

from collections.abc import Callable

from .files import GuestFiles
from .hostkeys import KEY_INFO, key_fingerprint
from .model import Outcome
from .packages import PackageDatabase
from .shell import Shell


_PATH_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# The collection's exec-marker wrapper (plugins/module_utils/_stage.py ``EXEC_WRAPPER``, docs/stages.md "Guest commands"):
# ``/bin/sh -c EXEC_WRAPPER vmanyware <marker> <argv...>``. The simulated guest runs exactly this script (``SimulatedGuest.exec``
# implements its steps on the guest's files); tests/unit checks the two texts are equal. Any other ``sh`` script is refused.
EXEC_WRAPPER = (
    "m=$1; shift\n"
    '(set -C; : >"$m.started") 2>/dev/null || exit 125\n'
    'if [ -e "$m.superseded" ]; then c=superseded; else "$@"; c=$?; fi\n'
    'printf \'%s\\n\' "$c" >"$m.exit.tmp" && mv -f "$m.exit.tmp" "$m.exit"\n'
    'if [ "$c" = superseded ]; then exit 125; fi\n'
    'exit "$c"\n'
)
_BINARIES = {
    "apt-get": "/usr/bin/apt-get",
    "cat": "/usr/bin/cat",
    "cloud-init": "/usr/bin/cloud-init",
    "dpkg-query": "/usr/bin/dpkg-query",
    "env": "/usr/bin/env",
    "false": "/usr/bin/false",
    "hostname": "/usr/bin/hostname",
    "sh": "/usr/bin/sh",
    "ssh-keygen": "/usr/bin/ssh-keygen",
    "true": "/usr/bin/true",
}


class Commands(GuestFiles, PackageDatabase, Shell):
    """Runs an argv (no shell) against the in-memory guest; returns what it printed and when it ends."""

    @staticmethod
    def _resolve(name: str) -> str | None:
        if "/" in name:
            base = name.rsplit("/", 1)[1]
            if name.rsplit("/", 1)[0] in _PATH_DIRS and base in _BINARIES:
                return base
            return None
        return name if name in _BINARIES else None

    def _run(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        prog = self._resolve(argv[0])
        handlers: dict[str, Callable[[list[str], dict[str, str], str | None, float], Outcome]] = {
            "apt-get": self._cmd_apt_get,
            "cat": self._cmd_cat,
            "cloud-init": self._cmd_cloud_init,
            "dpkg-query": self._cmd_dpkg_query,
            "env": self._cmd_env,
            "false": lambda a, e, s, n: Outcome(1),
            "hostname": lambda a, e, s, n: Outcome(0, f"{self.hostname}\n"),
            "sh": self._cmd_sh,
            "ssh-keygen": self._cmd_ssh_keygen,
            "true": lambda a, e, s, n: Outcome(0),
        }
        if prog is None:
            return Outcome(127, "", f"{argv[0]}: command not found\n")
        return handlers[prog](argv, env, stdin, now)

    def _cmd_env(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        new_env = dict(env)
        rest = argv[1:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        while rest and "=" in rest[0] and not rest[0].startswith("="):
            name, _sep, value = rest[0].partition("=")
            new_env[name] = value
            rest = rest[1:]
        if not rest:
            return Outcome(0, "".join(f"{k}={v}\n" for k, v in new_env.items()))
        if self._resolve(rest[0]) is None:
            return Outcome(127, "", f"{argv[0]}: \u2018{rest[0]}\u2019: No such file or directory\n")
        return self._run(rest, new_env, stdin, now)

    def _cmd_cat(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        files = [a for a in argv[1:] if a != "--"]
        if not files:
            return Outcome(0, stdin or "")
        out, err, code = [], [], 0
        for path in files:
            text = stdin or "" if path == "-" else self._file(path)
            if text is None:
                err.append(f"cat: {path}: No such file or directory\n")
                code = 1
            else:
                out.append(text)
        return Outcome(code, "".join(out), "".join(err))

    def _cmd_ssh_keygen(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        args = argv[1:]
        path: str | None = None
        fingerprint = False
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "-l":
                fingerprint = True
            elif arg == "-f" and i + 1 < len(args):
                path = args[i + 1]
                i += 1
            elif arg.startswith("-f") and len(arg) > 2:
                path = arg[2:]
            elif arg == "-lf" and i + 1 < len(args):
                fingerprint, path = True, args[i + 1]
                i += 1
            elif arg == "-E" and i + 1 < len(args):
                if args[i + 1] != "sha256":
                    return Outcome(255, "", "Invalid hash algorithm\n")
                i += 1
            else:
                return Outcome(1, "", f"unknown option -- {arg.lstrip('-')[:1]}\n")
            i += 1
        if not fingerprint or path is None:
            return Outcome(1, "", "usage: ssh-keygen -l [-v] [-E fingerprint_hash] [-f input_keyfile]\n")
        keypath = path if path.endswith(".pub") else f"{path}.pub"
        text = self._file(keypath)
        if text is None:
            return Outcome(255, "", f"{path}: No such file or directory\n")
        out = []
        for line in text.splitlines():
            parts = line.split()
            ktype = {"ssh-ed25519": "ed25519", "ecdsa-sha2-nistp256": "ecdsa", "ssh-rsa": "rsa"}.get(
                parts[0] if parts else ""
            )
            if ktype is None or len(parts) < 2:
                continue
            bits, label = KEY_INFO[ktype]
            comment = " ".join(parts[2:]) or "no comment"
            out.append(f"{bits} {key_fingerprint(line)} {comment} ({label})\n")
        if not out:
            return Outcome(255, "", f"{path} is not a public key file.\n")
        return Outcome(0, "".join(out))
