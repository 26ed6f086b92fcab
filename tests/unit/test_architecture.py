# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The architecture map of docs/development.md, checked against the imports of every file under plugins/ (ast)."""

from __future__ import annotations

import ast
import re
import typing as t
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
PREFIX = "ansible_collections.vmanyware.proxmox.plugins."
ROW = re.compile(r"^\| (?P<part>[a-z ]+) \| (?P<files>`.+`) \| (?P<imports>[a-z ,]+) \|$")


def parse_map(text: str) -> tuple[list[tuple[str, str]], dict[str, set[str]]]:
    """(pattern, part) in table order, and the parts each part may import (its own included)."""
    section = text.split("## Architecture map", 1)[1].split("\n## ", 1)[0]
    patterns: list[tuple[str, str]] = []
    allowed: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        part = match.group("part")
        patterns += [(pattern, part) for pattern in re.findall(r"`([^`]+)`", match.group("files"))]
        imports = match.group("imports").strip()
        allowed[part] = {part} | (set() if imports == "nothing else" else {name.strip() for name in imports.split(",")})
    return patterns, allowed


PATTERNS, ALLOWED = parse_map((REPO / "docs" / "development.md").read_text(encoding="utf-8"))
FILES = sorted(path.relative_to(PLUGINS).as_posix() for path in PLUGINS.rglob("*.py"))


def matches(relative: str, pattern: str) -> bool:
    """Glob match where ``*`` stays inside one folder (``_stages/*.py`` is not ``_stages/vm/clone.py``)."""
    return (
        re.fullmatch(
            ".*".join("[^/]*".join(re.escape(piece) for piece in part.split("*")) for part in pattern.split("**")),
            relative,
        )
        is not None
    )


def part_of(relative: str) -> str | None:
    return next((part for pattern, part in PATTERNS if matches(relative, pattern)), None)


def module_file(dotted: str) -> str | None:
    """plugins/-relative path of the collection module ``dotted`` (a file or a package), None when it is not one."""
    if not dotted.startswith(PREFIX):
        return None
    base = dotted[len(PREFIX) :].replace(".", "/")
    for candidate in (base + ".py", base + "/__init__.py"):
        if (PLUGINS / candidate).is_file():
            return candidate
    return None


def absolute_module(node: ast.ImportFrom, importer: str) -> str | None:
    """The dotted module ``node`` imports from: relative imports resolved against ``importer`` (plugins/-relative)."""
    if node.level == 0:
        return node.module
    package = (PREFIX + importer).rsplit("/", 1)[0].replace("/", ".").split(".")
    if node.level > 1:
        package = package[: -(node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def collection_imports(tree: ast.AST, importer: str = "module_utils/_any.py") -> list[tuple[int, str]]:
    """(line, plugins/-relative file) of every import of this collection, ``from package import submodule`` and relative
    imports resolved (``importer`` is the importing file, plugins/-relative)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, target) for alias in node.names if (target := module_file(alias.name))]
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(node, importer)
            if not module or not module.startswith(PREFIX):
                continue
            for alias in node.names:
                target = module_file("%s.%s" % (module, alias.name)) or module_file(module)
                if target:
                    found.append((node.lineno, target))
    return found


def test_the_map_names_parts_that_exist() -> None:
    assert len(ALLOWED) >= 10 and PATTERNS
    for part, imports in ALLOWED.items():
        assert imports <= set(ALLOWED), "%s may import an unknown part: %s" % (part, sorted(imports - set(ALLOWED)))


@pytest.mark.parametrize("relative", FILES)
def test_every_file_belongs_to_a_part(relative: str) -> None:
    assert part_of(relative) is not None, (
        "plugins/%s matches no row of the architecture map in docs/development.md" % relative
    )


@pytest.mark.parametrize("relative", FILES)
def test_imports_follow_the_map(relative: str) -> None:
    part = part_of(relative)
    if part is None:
        pytest.fail("plugins/%s has no part" % relative)
    tree = ast.parse((PLUGINS / relative).read_text(encoding="utf-8"))
    forbidden = [
        "line %d: %s (%s)" % (line, target, part_of(target))
        for line, target in collection_imports(tree, relative)
        if part_of(target) not in ALLOWED[part]
    ]
    assert not forbidden, "plugins/%s (%s) imports what the architecture map forbids: %s" % (
        relative,
        part,
        "; ".join(forbidden),
    )


@pytest.mark.parametrize(
    "relative", [f for f in FILES if f.startswith("module_utils/") and f != "module_utils/_runtime/module.py"]
)
def test_module_utils_never_import_ansible_module_nor_read_params(relative: str) -> None:
    tree = ast.parse((PLUGINS / relative).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ansible.module_utils.basic":
            assert "AnsibleModule" not in [alias.name for alias in node.names], (
                "plugins/%s imports AnsibleModule" % relative
            )
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "params"
            and isinstance(node.value, ast.Name)
            and node.value.id == "module"
        ):
            pytest.fail("plugins/%s reads module.params (line %d)" % (relative, node.lineno))


CASES: list[tuple[str, str, bool]] = [
    # (file, imported module, allowed?): the rules the map exists for, on the map itself (new files: by their folder)
    ("module_utils/_api/client.py", "module_utils/_journal/store.py", False),
    ("module_utils/_formats/catalog.py", "module_utils/_api/client.py", False),
    ("module_utils/_formats/plan.py", "module_utils/_api/client.py", False),
    ("module_utils/_formats/plan.py", "module_utils/_stages/registry.py", True),
    ("module_utils/_formats/plan.py", "module_utils/_stages/logic.py", False),
    ("module_utils/_stages/registry.py", "module_utils/_stages/vm/disk.py", False),
    ("module_utils/_stages/vm/disk.py", "modules/vmanyware_disk.py", False),
    ("module_utils/_stages/vm/disk.py", "module_utils/_runtime/stage_module.py", False),
    ("module_utils/_stages/runner.py", "module_utils/_stages/vm/disk.py", False),
    ("module_utils/_stages/new_family/new_stage.py", "module_utils/_stages/runner.py", True),
    ("module_utils/_stages/logic.py", "module_utils/_stages/new_family/new_stage.py", True),
    ("module_utils/_journal/store.py", "module_utils/_api/client.py", False),
    ("module_utils/_checks/permissions.py", "module_utils/_journal/store.py", False),
    ("module_utils/_checks/new_check.py", "module_utils/_stages/runner.py", False),
    ("modules/vmanyware_disk.py", "module_utils/_stages/vm/disk.py", True),
    ("action/vmanyware_disk.py", "module_utils/_api/client.py", False),
    ("connection/qga.py", "module_utils/_api/guest_agent.py", True),
    ("connection/qga.py", "module_utils/_journal/store.py", False),
    ("connection/qga.py", "module_utils/_stages/runner.py", False),
]


@pytest.mark.parametrize(("importer", "imported", "allowed"), CASES)
def test_the_map_forbids_what_the_rules_say(importer: str, imported: str, allowed: bool) -> None:
    assert (part_of(imported) in ALLOWED[t.cast(str, part_of(importer))]) is allowed


def test_a_forbidden_import_is_found() -> None:
    """The checker sees ``from package import submodule``, plain and relative imports, not only ``from module import name``."""
    tree = ast.parse(
        "from ansible_collections.vmanyware.proxmox.plugins.module_utils import _journal\n"
        "import ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client\n"
        "from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import runner\n"
        "from ..runner import StageContext\n"
        "from ... import _core\n"
        "from ..._journal.store import JournalStore\n"
        "from . import clone\n"
    )
    assert [target for _line, target in collection_imports(tree, "module_utils/_stages/vm/disk.py")] == [
        "module_utils/_journal/__init__.py",
        "module_utils/_api/client.py",
        "module_utils/_stages/runner.py",
        "module_utils/_stages/runner.py",
        "module_utils/_core/__init__.py",
        "module_utils/_journal/store.py",
        "module_utils/_stages/vm/clone.py",
    ]


def import_cycles(graph: t.Mapping[str, t.Iterable[str]]) -> list[list[str]]:
    """The files that import each other, directly or through others (the strongly connected parts of more than one file)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        order[node] = low[node] = len(order)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            part = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(part) > 1:
                cycles.append(sorted(part))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return cycles


def test_an_import_cycle_is_found() -> None:
    assert import_cycles({"a.py": ["b.py"], "b.py": ["c.py"], "c.py": ["a.py", "d.py"], "d.py": []}) == [
        ["a.py", "b.py", "c.py"]
    ]


def test_no_files_import_each_other() -> None:
    """A cycle (even one a function-local import dodges at load time) means the cut between the files is wrong."""
    graph = {
        relative: {
            target
            for _line, target in collection_imports(
                ast.parse((PLUGINS / relative).read_text(encoding="utf-8")), relative
            )
            if target != relative
        }
        for relative in FILES
    }
    assert not import_cycles(graph), "files under plugins/ that import each other: %s" % import_cycles(graph)


MAX_PLUGIN_LINES = 600


@pytest.mark.parametrize("relative", FILES)
def test_no_plugin_file_over_the_limit(relative: str) -> None:
    """One private file per concern keeps files short (docs/development.md): a file that outgrows the limit is split."""
    lines = len((PLUGINS / relative).read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_PLUGIN_LINES, "plugins/%s has %d lines (at most %d)" % (relative, lines, MAX_PLUGIN_LINES)


def test_test_file_names_are_unique_across_the_suite() -> None:
    """pytest imports test files by their base name (no packages): two files of one name in the suite break collection."""
    names = [
        path.name for root in (REPO / "tests", REPO / "tools" / "pvesim" / "tests") for path in root.rglob("test_*.py")
    ]
    assert sorted({name for name in names if names.count(name) > 1}) == []
