# SPDX-License-Identifier: GPL-3.0-or-later
"""Reliability suite wiring (docs/reliability.md): marker, hypothesis profiles, one dedicated simulator per session.

``VMANYWARE_RELIABILITY_FULL=1`` (set by tools/dev/reliability.sh) selects the full run: >= 300 crash trials,
the whole fault matrix, the 10,000-case fuzz profile. Unset, the quick CI subset runs.
"""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rel_support as rs  # noqa: E402  pylint: disable=wrong-import-position

settings.register_profile(
    "reliability-ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
settings.register_profile(
    "reliability-full",
    max_examples=1500,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "reliability: crash, fault, concurrency, fuzz and secret checks (docs/reliability.md)"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.reliability)


@pytest.fixture(scope="session", autouse=True)
def _outputs(tmp_path_factory: pytest.TempPathFactory) -> None:
    rs.OUTPUT_DIR = tmp_path_factory.getbasetemp() / "outputs"


@pytest.fixture(scope="session")
def rel_sim(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[rs.Simulator]:
    sim = rs.Simulator(tmp_path_factory.mktemp("rel-sim"), speed=1000.0)
    try:
        yield sim
    finally:
        sim.stop()


@pytest.fixture()
def sim(rel_sim: rs.Simulator) -> rs.Simulator:
    rel_sim.admin.reset()
    return rel_sim
