# SPDX-License-Identifier: GPL-3.0-or-later
"""Test wiring shared by every test: make this checkout importable and runnable as the
``vmanyware.proxmox`` collection without installing it.

A directory ``<tmp>/ansible_collections/vmanyware/proxmox`` is symlinked to the repository
root; its parent goes on ``sys.path`` (for ``ansible_collections.vmanyware.proxmox...``
imports in unit tests) and into ``ANSIBLE_COLLECTIONS_PATH`` (for real ``ansible`` /
``ansible-playbook`` runs in integration tests).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _collection_root() -> Path:
    explicit = os.environ.get("VMANYWARE_TEST_COLLECTIONS_ROOT")
    # One link per checkout: several clones (a CI run beside a work tree) must not re-point each other's.
    tag = hashlib.sha256(str(REPO_ROOT).encode()).hexdigest()[:12]
    root = Path(explicit) if explicit else Path(tempfile.gettempdir()) / f"vmanyware-collections-{os.getuid()}-{tag}"
    link = root / "ansible_collections" / "vmanyware" / "proxmox"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() and link.resolve() != REPO_ROOT:
        link.unlink()
    if not link.exists():
        try:
            link.symlink_to(REPO_ROOT, target_is_directory=True)
        except FileExistsError:  # another xdist worker won the race
            pass
    return root


COLLECTIONS_ROOT = _collection_root()
if str(COLLECTIONS_ROOT) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_ROOT))
os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(COLLECTIONS_ROOT)
# Real module runs in tests must not pick up a user's ansible.cfg or write retry files.
os.environ.setdefault("ANSIBLE_CONFIG", str(REPO_ROOT / "tests" / "ansible.cfg"))
