# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A scalable simulation clock: simulated seconds run ``speed`` times faster than real ones."""

from __future__ import annotations

import threading
import time


class Clock:
    """Simulated time. ``now()`` is monotonic simulated seconds; ``time()`` a simulated epoch.

    Changing ``speed`` at run time keeps ``now()`` continuous.
    """

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self._lock = threading.Lock()
        self._speed = float(speed)
        self._base_real = time.monotonic()
        self._base_sim = 0.0
        self._epoch0 = time.time()

    @property
    def speed(self) -> float:
        return self._speed

    def set_speed(self, speed: float) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        with self._lock:
            self._base_sim = self._now_unlocked()
            self._base_real = time.monotonic()
            self._speed = float(speed)

    def _now_unlocked(self) -> float:
        return self._base_sim + (time.monotonic() - self._base_real) * self._speed

    def now(self) -> float:
        """Simulated seconds since the clock was created."""
        with self._lock:
            return self._now_unlocked()

    def time(self) -> float:
        """Simulated wall-clock epoch seconds."""
        return self._epoch0 + self.now()

    def real_seconds(self, sim_seconds: float) -> float:
        return max(0.0, sim_seconds) / self._speed

    def sleep(self, sim_seconds: float, stop: threading.Event | None = None) -> bool:
        """Sleep for ``sim_seconds`` simulated seconds; returns False when ``stop`` was set."""
        real = self.real_seconds(sim_seconds)
        if stop is None:
            time.sleep(real)
            return True
        return not stop.wait(real)
