# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The time model's knobs (``--timings FILE``, ``PUT /_pvesim/timings``): task durations and guest timings, validated."""

from __future__ import annotations

import dataclasses
import typing as t

from . import guest, guestlink
from .api.core import DURATIONS, Sim
from .datafile import load_data_file


def apply_timings(sim: Sim, data: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Change the time model: ``{"tasks": {type: sim. seconds}, "guest": {GuestTiming field: sim. seconds}}``.

    Task keys are those of ``DURATIONS`` (``qmclone_full``, ``qmconfig``, ``resize``, ``qmstart``,
    ``qmsnapshot`` ...); guest keys the fields of ``pvesim.guest.GuestTiming``. Values are simulated
    seconds (>= 0), divided by the clock speed like every other duration. Guest timing applies to
    guests started afterwards (per-VM knobs of ``PUT /_pvesim/vms/{vmid}/guest`` still win).
    Everything is validated before anything changes (``ValueError`` otherwise).
    """
    unknown_top = sorted(set(data) - {"tasks", "guest"})
    if unknown_top:
        raise ValueError(f"unknown timing sections: {', '.join(unknown_top)} (tasks, guest)")
    tasks = dict(data.get("tasks") or {})
    guest_part = dict(data.get("guest") or {})
    bad = sorted(k for k in tasks if k not in DURATIONS)
    if bad:
        raise ValueError(f"unknown task durations: {', '.join(bad)} (known: {', '.join(sorted(DURATIONS))})")
    _faults, _timing, unknown = guestlink.split_knobs(guest_part)
    if unknown or _faults:
        raise ValueError(f"unknown guest timings: {', '.join(sorted(unknown + list(_faults)))}")
    values = {**{f"tasks.{k}": v for k, v in tasks.items()}, **{f"guest.{k}": v for k, v in guest_part.items()}}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{key} must be a number >= 0")
    sim.durations.update({k: float(v) for k, v in tasks.items()})
    sim.guest_timing.update({k: float(v) for k, v in guest_part.items()})
    return timings_dict(sim)


def timings_dict(sim: Sim) -> dict[str, t.Any]:
    """The effective time model (guest: GuestTiming defaults with the overrides applied)."""
    defaults = {f.name: f.default for f in dataclasses.fields(guest.GuestTiming)}
    return {"tasks": dict(sim.durations), "guest": {**defaults, **sim.guest_timing}}


def load_timings_file(path: str) -> dict[str, t.Any]:
    """Read a time model from a JSON or YAML file (``{"tasks": {...}, "guest": {...}}``)."""
    data = load_data_file(path)
    if not isinstance(data, dict):
        raise ValueError("timings file must hold a mapping with 'tasks' and/or 'guest'")
    return data
