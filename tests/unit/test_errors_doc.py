# SPDX-License-Identifier: GPL-3.0-or-later
"""docs/errors.md has exactly one section per error code, in the same order as ERROR_CODES."""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES

DOC = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def test_every_code_has_one_section_in_order() -> None:
    sections = re.findall(r"^### ([a-z_]+)$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sections == list(ERROR_CODES)
