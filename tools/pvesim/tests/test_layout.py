# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's layout: no import cycle between its modules (function-local imports included) and no file over 700
lines, so the package reads top-down (docs/development.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pvesim"
MAX_LINES = 700


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The pvesim modules ``name`` imports anywhere in its body (relative or absolute, ``from . import x`` as ``x``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "pvesim")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "pvesim":
                continue
            for alias in node.names:
                target = "%s.%s" % (module, alias.name)
                found.add(target if target in MODULES else module)
    return {target for target in found if target in MODULES and target != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_the_graph_sees_relative_and_function_local_imports() -> None:
    assert "pvesim.api.core" in imports_of("pvesim.routes") and "pvesim.lxc" in imports_of("pvesim.routes")
    assert "pvesim.guestlink" in imports_of("pvesim.api.qemu_agent")  # ``from .. import guestlink``
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle() -> None:
    found = cycles({name: imports_of(name) for name in MODULES})
    assert not found, "import cycles in pvesim: %s" % found


@pytest.mark.parametrize(
    "path",
    sorted(path for path in ROOT.rglob("*.py") if "build" not in path.relative_to(ROOT).parts),
    ids=lambda path: str(path.relative_to(ROOT)),
)
def test_no_file_over_the_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, "%s has %d lines (at most %d)" % (path.relative_to(ROOT), lines, MAX_LINES)


def test_every_module_with_handlers_is_in_the_route_table() -> None:
    """A handler marked with ``@route`` in a module ``routes.py`` does not name would silently answer 501."""
    marking = {name for name, path in MODULES.items() if "@route(" in path.read_text(encoding="utf-8")}
    from pvesim import routes  # pylint: disable=import-outside-toplevel

    listed = {module.__name__ for module in routes.ENDPOINT_MODULES}
    assert marking - {"pvesim.api.core"} == listed
