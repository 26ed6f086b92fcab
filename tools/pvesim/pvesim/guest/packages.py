# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The package database: ``dpkg-query`` and ``apt-get`` against the bundled Debian index (dpkg order: ``debversion``)."""

from __future__ import annotations

import functools
import re

from ..debversion import dpkg_version_compare
from ..packageindex import load_index
from .model import CLOUDINIT_APT_PID, GuestBase, Outcome


class PackageDatabase(GuestBase):
    """Installed packages, the apt lists and the dpkg lock (held by cloud-init's own apt run too)."""

    def _dpkg_field(self, name: str, field_name: str) -> str:
        version = self.installed[name]
        values = {
            "Package": name,
            "binary:Package": name,
            "Version": version,
            "Architecture": "amd64",
            "db:Status-Abbrev": "ii ",
            "Status": "install ok installed",
            "db:Status-Want": "install",
            "db:Status-Status": "installed",
            "db:Status-Eflag": "ok",
        }
        return values.get(field_name, "")

    def _dpkg_format(self, fmt: str, name: str) -> str:
        out: list[str] = []
        i = 0
        while i < len(fmt):
            ch = fmt[i]
            if ch == "\\" and i + 1 < len(fmt):
                out.append({"n": "\n", "t": "\t", "r": "\r", "\\": "\\"}.get(fmt[i + 1], fmt[i + 1]))
                i += 2
            elif fmt.startswith("${", i) and "}" in fmt[i:]:
                end = fmt.index("}", i)
                spec = fmt[i + 2 : end]
                fname, _sep, width = spec.partition(";")
                value = self._dpkg_field(name, fname)
                if width.lstrip("-").isdigit():
                    w = int(width)
                    value = value.ljust(-w) if w < 0 else value.rjust(w)
                out.append(value)
                i = end + 1
            else:
                out.append(ch)
                i += 1
        return "".join(out)

    def _cmd_dpkg_query(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        args = argv[1:]
        fmt = "${binary:Package}\t${Version}\n"
        show = False
        names: list[str] = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                names.extend(args[i + 1 :])
                break
            if arg in ("-W", "--show"):
                show = True
            elif arg in ("-f", "--showformat"):
                if i + 1 >= len(args):
                    return Outcome(2, "", "dpkg-query: error: --showformat needs a value\n")
                fmt = args[i + 1]
                i += 1
            elif arg.startswith("--showformat="):
                fmt = arg[len("--showformat=") :]
            elif arg.startswith("-f"):
                fmt = arg[2:]  # dpkg's short options take the rest of the word: -f=X means "=X"
            elif arg.startswith("-W") and arg[2:].startswith("f"):
                show, fmt = True, arg[3:]
            elif arg.startswith("-"):
                return Outcome(
                    2, "", f"dpkg-query: error: unknown option {arg}\n\nUse --help for help about querying packages.\n"
                )
            else:
                names.append(arg)
            i += 1
        if not show:
            return Outcome(
                2, "", "dpkg-query: error: need an action option\n\nUse --help for help about querying packages.\n"
            )
        matched: set[str] = set()
        unmatched: list[str] = []
        for pattern in names:
            found = {n for n in self.installed if re.fullmatch(_glob_to_re(pattern), n)}
            if not found:
                unmatched.append(pattern)
            matched |= found
        if not names:
            matched = set(self.installed)
        out = "".join(self._dpkg_format(fmt, n) for n in sorted(matched))
        err = "".join(f"dpkg-query: no packages found matching {p}\n" for p in unmatched)
        return Outcome(1 if unmatched else 0, out, err)

    # apt-get ----------------------------------------------------------------------------------

    def _apt_lock_holder(self, now: float) -> int | None:
        start, end = self._cloudinit_apt_window()
        if start <= now < end:
            return CLOUDINIT_APT_PID
        for pid, proc in self._procs.items():
            if proc.apt_lock and proc.start <= now < proc.end:
                return pid
        return None

    def _available(self, name: str) -> list[str]:
        offered = (
            self.faults.package_versions[name] if name in self.faults.package_versions else load_index().get(name, ())
        )
        versions = list(offered) if self._lists_fresh else []
        if name in self.installed and self.installed[name] not in versions:
            versions.append(self.installed[name])
        return sorted(set(versions), key=functools.cmp_to_key(dpkg_version_compare))

    def _cmd_apt_get(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        args = argv[1:]
        action: str | None = None
        names: list[str] = []
        quiet = 0
        allow_downgrades = False
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                names.extend(args[i + 1 :])
                break
            if arg in (
                "-y",
                "--yes",
                "--assume-yes",
                "--no-install-recommends",
                "--no-install-suggests",
                "-m",
                "--fix-missing",
            ):
                pass
            elif arg in ("-q", "--quiet"):
                quiet += 1
            elif arg == "-qq":
                quiet += 2
            elif arg == "--allow-downgrades":
                allow_downgrades = True
            elif arg == "-o" and i + 1 < len(args):
                i += 1
            elif arg.startswith("-o") or arg.startswith("--option="):
                pass
            elif arg.startswith("-"):
                return Outcome(
                    100, "", f"E: Command line option '{arg}' is not understood in combination with the other options\n"
                )
            elif action is None:
                action = arg
            else:
                names.append(arg)
            i += 1
        reading = "" if quiet >= 2 else "Reading package lists...\n"
        if action == "update":
            holder = self._apt_lock_holder(now)
            if holder is not None:
                return Outcome(
                    100,
                    "",
                    f"E: Could not get lock /var/lib/apt/lists/lock. It is held by process {holder} (apt-get)\n"
                    "E: Unable to lock directory /var/lib/apt/lists/\n",
                    duration=0.3,
                )
            out = (
                ""
                if quiet >= 2
                else (
                    "Hit:1 http://deb.debian.org/debian trixie InRelease\n"
                    "Hit:2 http://deb.debian.org/debian trixie-updates InRelease\n"
                    "Hit:3 http://deb.debian.org/debian-security trixie-security InRelease\n" + reading
                )
            )

            def refreshed() -> None:
                self._lists_fresh = True

            return Outcome(0, out, duration=self.timing.apt_update, effect=refreshed, apt_lock=True)
        if action != "install":
            if action is None:
                return Outcome(1, "apt 3.0.3 (amd64)\nUsage: apt-get [options] command\n", duration=0.1)
            return Outcome(100, "", f"E: Invalid operation {action}\n", duration=0.1)
        holder = self._apt_lock_holder(now)
        if holder is not None:
            return Outcome(
                100,
                "",
                f"E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process {holder} (apt-get)\n"
                "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?\n",
                duration=0.3,
            )
        header = "" if quiet >= 2 else reading + "Building dependency tree...\nReading state information...\n"
        errors: list[str] = []
        plan: list[tuple[str, str, str | None]] = []  # (name, target version, old version)
        for spec in names:
            name, sep, version = spec.partition("=")
            available = self._available(name)
            if not available:
                errors.append(f"E: Unable to locate package {name}\n")
                continue
            if sep:
                if version not in available:
                    errors.append(f"E: Version '{version}' for '{name}' was not found\n")
                    continue
                target = version
            else:
                target = available[-1]
            plan.append((name, target, self.installed.get(name)))
        if errors:
            return Outcome(100, header, "".join(errors), duration=0.5)
        new = [(n, v) for n, v, old in plan if old is None]
        up = [(n, v) for n, v, old in plan if old is not None and dpkg_version_compare(v, old) > 0]
        down = [(n, v) for n, v, old in plan if old is not None and dpkg_version_compare(v, old) < 0]
        same = [(n, v) for n, v, old in plan if old is not None and dpkg_version_compare(v, old) == 0]
        lines = [header] if header else []
        lines += [f"{n} is already the newest version ({v}).\n" for n, v in same]
        if up:
            lines.append("The following packages will be upgraded:\n  " + " ".join(n for n, _version in up) + "\n")
        if new:
            lines.append(
                "The following NEW packages will be installed:\n  " + " ".join(n for n, _version in new) + "\n"
            )
        if down:
            lines.append("The following packages will be DOWNGRADED:\n  " + " ".join(n for n, _version in down) + "\n")
        lines.append(
            f"{len(up)} upgraded, {len(new)} newly installed, {len(down)} downgraded, 0 to remove and 0 not upgraded.\n"
        )
        if down and not allow_downgrades:
            return Outcome(
                100,
                "".join(lines) if quiet < 2 else "",
                "E: Packages were downgraded and -y was used without --allow-downgrades.\n",
                duration=0.5,
            )
        changes = new + up + down
        if not changes:
            return Outcome(0, "".join(lines) if quiet < 2 else "", duration=0.5)
        for n, v in changes:
            lines.append(f"Unpacking {n} ({v}) ...\n")
        for n, v in changes:
            lines.append(f"Setting up {n} ({v}) ...\n")

        def install() -> None:
            for n, v in changes:
                self.installed[n] = v

        return Outcome(
            0, "".join(lines) if quiet < 2 else "", duration=self.timing.apt_install, effect=install, apt_lock=True
        )


def _glob_to_re(pattern: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
