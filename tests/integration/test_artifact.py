# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection tarball: no tool caches in it; galaxy.yml without placeholders; requires_ansible is what CI tests.

CI itself installs the tarball and uses it (tools/dev/artifact.sh, for every ansible-core of the support matrix).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CACHES = (
    ".mypy_cache/3.11/cache.db",
    ".ruff_cache/0.6.0/x",
    ".coverage",
    ".coverage.host.1234",
    "changelogs/.plugin-cache.yaml",
    "extensions/molecule/provision/.cache/x",
    "extensions/molecule/provision/.molecule/state.yml",
    "plugins/.mypy_cache/x",
    ".pytest_cache/v/x",
    "htmlcov/index.html",
    ".cache/molecule/x",
)
# What a user gets: the collection, its docs and examples, the EE and AWX files; no development files (galaxy.yml build_ignore).
SHIPPED = {
    "FILES.json",
    "MANIFEST.json",
    "LICENSE",
    "README.md",
    "awx",
    "bindep.txt",
    "changelogs",
    "docs",
    "examples",
    "execution-environment.yml",
    "meta",
    "playbooks",
    "plugins",
    "requirements.txt",
    "roles",
}


def test_build_leaves_out_tool_caches(tmp_path: Path) -> None:
    source = tmp_path / "src"
    tracked = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode().split("\0")
    )
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    for cache in CACHES:
        (source / cache).parent.mkdir(parents=True, exist_ok=True)
        (source / cache).write_text("cache\n")
    subprocess.run(
        [str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    [tarball] = (tmp_path / "dist").glob("vmanyware-proxmox-*.tar.gz")
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "plugins/modules/vmanyware_plan.py" in names and "roles/provision/tasks/main.yml" in names
    assert {name.split("/", 1)[0] for name in names} == SHIPPED
    assert [name for name in names if name.startswith("changelogs/") and name.count("/") > 1] == []  # no fragments
    assert [
        name for name in names if any(name == c or name.startswith(c.split("/x", maxsplit=1)[0]) for c in CACHES)
    ] == []


def test_galaxy_metadata_and_the_tested_ansible_core_range() -> None:
    galaxy = (REPO / "galaxy.yml").read_text(encoding="utf-8")
    assert "example.invalid" not in galaxy and "example.com" not in galaxy
    for field in ("repository", "documentation", "homepage", "issues"):
        value = yaml.safe_load(galaxy).get(field)
        assert value is None or (value.startswith("https://") and "example" not in value), field
    requires = yaml.safe_load((REPO / "meta/runtime.yml").read_text(encoding="utf-8"))["requires_ansible"]
    # No upper cap: a released ansible-core newer than the matrix is not refused with a warning on every run.
    oldest = re.fullmatch(r">=(\d+\.\d+)\.0", requires).group(1)
    # The support matrix: the cores test_in_process_action.py accepts, oldest first.
    matrix_line = re.search(
        r"^MATRIX = \(([^)]*)\)",
        (REPO / "tests/integration/test_in_process_action.py").read_text(encoding="utf-8"),
        re.M,
    )
    matrix = re.findall(r'"(\d+\.\d+)"', matrix_line.group(1))
    assert matrix[0] == oldest and matrix == sorted(matrix, key=lambda minor: tuple(map(int, minor.split("."))))
    # Every row runs in make test: the development venv's core (requirements-demo.txt) in make pytest and make artifact,
    # every other one as a core-<minor> target (tools/dev/core_lane.sh) in one of the two lanes.
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    lanes = " ".join(re.findall(r"^test-(?:dynamic|static):\n\tset -e; for part in ([^;]*);", makefile, re.M)).split()
    dev = re.search(
        r"^ansible-core>=(\d+\.\d+),<(\d+\.\d+)$", (REPO / "requirements-demo.txt").read_text(encoding="utf-8"), re.M
    )
    lane_script = (REPO / "tools/dev/core_lane.sh").read_text(encoding="utf-8")

    def version(minor: str) -> tuple[int, ...]:
        return tuple(map(int, minor.split(".")))

    for minor in matrix:
        in_dev_venv = (
            version(dev.group(1)) <= version(minor) < version(dev.group(2))
            and "pytest" in lanes
            and "artifact" in lanes
        )
        assert in_dev_venv or f"core-{minor}" in lanes, minor
        assert in_dev_venv or re.search(rf"^  (?:\S+\|)*{re.escape(minor)}(?:\|\S+)*\) pythons=", lane_script, re.M), (
            minor
        )
    # The newest row runs the unit tests, the simulator integration suite, the demo and the tarball check.
    assert f"tools/dev/core_lane.sh {matrix[-1]} unit integration demo artifact" in makefile
