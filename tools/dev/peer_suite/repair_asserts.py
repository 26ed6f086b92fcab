# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Evidence, not a fix: copy the peer's targets with one kind of their own bug removed, Jinja delimiters inside
``assert`` conditions (ansible-core 2.19 refuses them; 2.18 refuses them when the value came from a module result).

``"text {{ x }}"`` inside a condition becomes ``('text ' ~ (x))``; a bare ``{{ vmid }}`` becomes ``(vmid | int)`` (its
rendered text was an integer literal), any other bare ``{{ x }}`` ``(x)``. Nothing else changes, so a task that
still fails in the repaired run fails for another reason. Usage: repair_asserts.py SRC_TARGETS DEST_TARGETS.
"""

from __future__ import annotations

import pathlib
import re
import sys

INTEGER_VARIABLES = {"vmid", "target_vm", "from_vmid"}


def _concatenation(match: re.Match[str]) -> str:
    parts = re.split(r"\{\{\s*(.*?)\s*\}\}", match.group(1))
    pieces = [f"({part})" if i % 2 else "'" + part.replace("'", "\\'") + "'" for i, part in enumerate(parts) if part]
    return "(" + " ~ ".join(pieces) + ")"


def repair_condition(line: str) -> str:
    """One ``- condition`` line of a ``that:`` list."""
    match = re.match(r"^(\s*- )(.*)$", line)
    if not match or "{{" not in line:
        return line
    prefix, expr = match.groups()
    if expr.startswith('"') and expr.endswith('"'):  # the whole condition is one YAML string: '{{ x }}' -> (x)
        return prefix + '"' + re.sub(r"'\{\{\s*(\w+)\s*\}\}'", r"(\1)", expr[1:-1]) + '"'
    expr = re.sub(r'"([^"]*\{\{[^"]*)"', _concatenation, expr)
    expr = re.sub(
        r"\{\{\s*(\w+)\s*\}\}",
        lambda bare: f"({bare.group(1)} | int)" if bare.group(1) in INTEGER_VARIABLES else f"({bare.group(1)})",
        expr,
    )
    return prefix + expr


def repair_file(text: str) -> str:
    lines, in_that = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("that:"):
            in_that = True
        elif in_that and not stripped.startswith("- "):
            in_that = False
        elif in_that:
            line = repair_condition(line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def main(source: pathlib.Path, destination: pathlib.Path) -> None:
    for path in sorted(source.rglob("*")):
        if path.is_file():
            target = destination / path.relative_to(source)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(repair_file(path.read_text(encoding="utf-8")), encoding="utf-8")


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
