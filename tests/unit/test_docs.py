# SPDX-License-Identifier: GPL-3.0-or-later
"""The committed reference pages (docs/reference/) are exactly what tools/dev/render_reference.py renders from the
current DOCUMENTATION/EXAMPLES/RETURN and roles' argument specs, so they never go stale. Regenerate with
``tools/dev/build_docs.sh`` (``LINT=0`` to skip the antsibull-docs lint)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "reference"


def test_every_module_filter_and_role_has_a_page() -> None:
    runtime = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))
    modules = {
        m.split(".")[-1] for group in runtime.get("action_groups", {}).values() for m in group if isinstance(m, str)
    }
    modules |= {p.stem for p in (REPO / "plugins" / "modules").glob("*.py") if not p.name.startswith("_")}
    filters = {p.stem for p in (REPO / "plugins" / "filter").glob("*.py") if not p.name.startswith("_")}
    roles = {p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file()}
    inventories = {p.stem for p in (REPO / "plugins" / "inventory").glob("*.py") if not p.name.startswith("_")}
    expected = (
        {f"{m}_module.md" for m in modules} | {f"{f}_filter.md" for f in filters} | {f"{r}_role.md" for r in roles}
    )
    expected |= {f"{i}_inventory.md" for i in inventories}
    missing = sorted(n for n in expected | {"README.md"} if not (REFERENCE / n).is_file())
    assert not missing, f"no reference page (run tools/dev/build_docs.sh): {missing}"
    index = (REFERENCE / "README.md").read_text(encoding="utf-8")
    assert not [n for n in expected if f"]({n})" not in index]


def test_reference_pages_match_a_fresh_rendering() -> None:
    # ANSIBLE_COLLECTIONS_PATH comes from tests/conftest.py; ansible-doc is the one next to this interpreter.
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "dev" / "render_reference.py"), "--check", str(REFERENCE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, (
        f"docs/reference is stale; run tools/dev/build_docs.sh\n{proc.stdout}{proc.stderr[-4000:]}"
    )
