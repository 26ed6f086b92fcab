# SPDX-License-Identifier: GPL-3.0-or-later
"""The stage tests run with the provisioning gate open, as an operator who ran them would (tests of a closed gate set it)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def provisioning_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", "true")
    monkeypatch.setenv("VMANYWARE_SNAPSHOTS_ENABLED", "true")
