# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate docs/permissions.md from plugins/module_utils/_checks/permissions.py.

Usage: python tools/gen_permissions_doc.py [--check]
(--check exits 1 when the committed file differs from the generated text).
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import shutil
import sys
import tempfile
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load_permissions() -> types.ModuleType:
    # _permissions.py imports the stage registry through the collection: link this checkout as
    # ansible_collections/vmanyware/proxmox in a temporary directory and import it from there.
    root = Path(tempfile.mkdtemp(prefix="vmanyware-gen-"))
    atexit.register(shutil.rmtree, root, True)
    link = root / "ansible_collections" / "vmanyware" / "proxmox"
    link.parent.mkdir(parents=True)
    link.symlink_to(REPO, target_is_directory=True)
    sys.path.insert(0, str(root))
    return importlib.import_module("ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.permissions")


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
