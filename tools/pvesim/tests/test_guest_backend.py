# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The guest implementations satisfy ``pvesim.guest.GuestBackend``: same method names, parameters
(names, kinds, defaults, in order) and return types, and the attributes the API layer reads."""

from __future__ import annotations

import inspect
import re
import types
import typing as t
from pathlib import Path

import pytest

from pvesim.containerguest import ContainerGuest
from pvesim.guest import GuestBackend, GuestFaults, GuestTiming, SimulatedGuest
from pvesim.realguest import RealGuest

IMPLEMENTATIONS = (SimulatedGuest, RealGuest, ContainerGuest)


def _protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(fn)
        for name, fn in vars(GuestBackend).items()
        if inspect.isfunction(fn) and not name.startswith("_")
    }


def _annotation(text: t.Any) -> str:
    """Annotations are strings here (``from __future__ import annotations``); ``t.Any`` and ``Any`` are the same type."""
    return re.sub(r"\b(?:t|typing)\.", "", str(text)).replace(" ", "")


def mismatches(cls: type) -> list[str]:
    """What ``cls`` lacks or declares differently from the protocol (empty when it conforms)."""
    problems: list[str] = []
    for name, proto in _protocol_methods().items():
        impl_fn = getattr(cls, name, None)
        if not callable(impl_fn):
            problems.append(f"{cls.__name__}.{name} is missing")
            continue
        impl = inspect.signature(impl_fn)
        want = list(proto.parameters.values())
        have = list(impl.parameters.values())
        for i, param in enumerate(want):
            got = have[i] if i < len(have) else None
            if got is None or (got.name, got.kind, got.default) != (param.name, param.kind, param.default):
                problems.append(f"{cls.__name__}.{name}: parameter {i} is {got}, the protocol has {param}")
            elif param.name != "self" and _annotation(got.annotation) != _annotation(param.annotation):
                problems.append(f"{cls.__name__}.{name}({param.name}): {got.annotation} != {param.annotation}")
        for extra in have[len(want) :]:
            if extra.default is inspect.Parameter.empty:
                problems.append(f"{cls.__name__}.{name}: extra required parameter {extra.name}")
        if _annotation(impl.return_annotation) != _annotation(proto.return_annotation):
            problems.append(
                f"{cls.__name__}.{name} returns {impl.return_annotation}, the protocol {proto.return_annotation}"
            )
    return problems


def test_protocol_names_what_the_api_layer_calls() -> None:
    assert set(_protocol_methods()) == {
        "ping",
        "network_get_interfaces",
        "get_osinfo",
        "get_info",
        "exec",
        "exec_status",
        "file_read",
        "file_write",
        "stop",
        "admin_info",
    }
    assert set(t.get_type_hints(GuestBackend)) == {"vmid", "faults", "timing"}


@pytest.mark.parametrize("cls", IMPLEMENTATIONS, ids=lambda c: c.__name__)
def test_implementation_matches_the_protocol(cls: type) -> None:
    assert not mismatches(cls)


def test_the_check_fails_for_a_guest_without_a_method_or_with_another_signature() -> None:
    class Incomplete(SimulatedGuest):
        get_info = None  # type: ignore[assignment]

        def file_read(self, path: str, count: int | None = None) -> dict[str, t.Any]:  # type: ignore[override]
            return {}

    problems = mismatches(Incomplete)
    assert "Incomplete.get_info is missing" in problems
    assert any(p.startswith("Incomplete.file_read: parameter 3") for p in problems), problems


def test_instances_carry_the_attributes_the_api_reads(tmp_path: Path) -> None:
    simulated = SimulatedGuest(301, {"net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"}, {}, lambda: 0.0)
    backend = types.SimpleNamespace(
        vm_dir=lambda vmid: str(tmp_path / f"vm-{vmid}"),
        run_dir=lambda vmid: str(tmp_path / f"run-{vmid}"),
        state_dir=str(tmp_path),
        accel="tcg",
    )
    real = RealGuest(backend, 302, {}, {})  # type: ignore[arg-type]  # only paths are computed; nothing starts
    container = ContainerGuest(backend, 303, {"net0": "virtio=BC:24:11:AA:BB:CD,bridge=vmbr0"}, {})  # type: ignore[arg-type]
    for guest, vmid in ((simulated, 301), (real, 302), (container, 303)):
        assert isinstance(guest, GuestBackend)
        assert guest.vmid == vmid and isinstance(guest.faults, GuestFaults) and isinstance(guest.timing, GuestTiming)
    assert simulated.admin_info() == {"exec_wrapper": {}} and real.admin_info()["guest_backend"] == "real"
    simulated.stop(graceful=True)  # nothing to end for a simulated guest
