# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate docs/permissions.md from plugins/module_utils/_permissions.py.

Usage: python tools/gen_permissions_doc.py [--check]
(--check exits 1 when the committed file differs from the generated text).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load_permissions() -> types.ModuleType:
    # _permissions.py has no collection imports, so it loads by file path without an installed collection.
    spec = importlib.util.spec_from_file_location("vmanyware_permissions", REPO / "plugins" / "module_utils" / "_permissions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = _load_permissions().render_permissions_doc()
    target = REPO / "docs" / "permissions.md"
    if args.check:
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current != text:
            sys.stderr.write("docs/permissions.md is out of date: run python tools/gen_permissions_doc.py\n")
            return 1
        return 0
    target.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
