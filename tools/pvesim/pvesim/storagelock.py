# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Proxmox's per-storage allocation lock (docs/simulator.md, "Storage lock").

pve-storage runs every volume allocation (``vdisk_alloc``), linked clone (``vdisk_clone``), free
(``vdisk_free``) and, on LVM / LVM-thin, every resize (``LVMPlugin::volume_resize``) inside
``PVE::Storage::Plugin::cluster_lock_storage``: for a non-shared storage that is
``PVE::Tools::lock_file('/var/lock/pve-manager/pve-storage-<id>')``, an exclusive ``flock`` that a
waiter gives up on after 10 seconds (``lock_file_full``: ``$timeout = 10 if !$timeout``) with
``can't lock file '<file>' - got timeout``. Shared storages take the cluster-wide ``cfs_lock_storage``
instead; the simulator models both as one lock per storage.

Each operation holds the lock for a time from the time model (``storage_alloc``, ``storage_resize``,
``storage_free``: simulated seconds, divided by ``--speed``); waiters are served in order. The statistics (``GET /_pvesim/storage-locks``) let tests
and benchmarks see the serialization, the waits, the timeouts and the number of *allocating requests
in flight* per storage: a clone or resize request counts from its arrival until its task has done its
last storage-lock operation (or ended).
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import typing as t

from .clock import Clock
from .tasks import TaskFailed

# PVE::Tools::lock_file_full: "$timeout = 10 if !$timeout" (vdisk_alloc / vdisk_free pass undef).
LOCK_TIMEOUT = 10.0
# A waiter never gives up sooner than this in real seconds. At speed 1000 (the reliability suite) 10 simulated seconds
# are 10 ms: a busy host's thread scheduling, not the modelled queue, would then decide who times out. Speeds up to
# 10, where runs study the lock (benchmarks, the admission tests), keep the model's timeout exactly.
MIN_REAL_LOCK_TIMEOUT = 1.0
HISTORY_MAX = 2000


def lock_error(storage: str) -> str:
    """The message of ``lock_file_full`` when the storage lock was not had in time."""
    return f"can't lock file '/var/lock/pve-manager/pve-storage-{storage}' - got timeout"


class FifoLock:
    """An exclusive lock granted in request order (deterministic for tests); a waiter may give up."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: collections.deque[object] = collections.deque()
        self._held = False

    def acquire(self, timeout: float) -> bool:
        ticket = object()
        deadline = time.monotonic() + timeout
        with self._cond:
            self._queue.append(ticket)
            while self._held or self._queue[0] is not ticket:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
                    return False
                self._cond.wait(remaining)
            self._queue.popleft()
            self._held = True
            return True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()


class _Storage:
    def __init__(self) -> None:
        self.lock = FifoLock()
        self.inflight = 0
        self.max_inflight = 0
        self.acquired = 0
        self.timeouts = 0
        self.max_wait = 0.0
        self.history: list[dict[str, t.Any]] = []


class AllocatingRequest:
    """One request in its allocating phase; ``end()`` is idempotent."""

    def __init__(self, meta: threading.Lock, entry: _Storage) -> None:
        self._meta = meta
        self._entry = entry
        self._ended = False

    def end(self) -> None:
        with self._meta:
            if not self._ended:
                self._ended = True
                self._entry.inflight -= 1


class StorageLocks:
    """Every storage's lock and statistics; replaced on ``POST /_pvesim/reset``."""

    def __init__(self, clock: Clock, stop_event: threading.Event, durations: t.Mapping[str, float]) -> None:
        self.clock = clock
        self.stop_event = stop_event
        self.durations = durations
        self.enabled = True
        self.meta = threading.Lock()
        self._storages: dict[str, _Storage] = {}

    def storage(self, storage: str) -> _Storage:
        with self.meta:
            return self._storages.setdefault(storage, _Storage())

    def begin_allocating(self, storage: str) -> AllocatingRequest:
        """Count a request that will allocate on ``storage`` as in flight (until ``end()``)."""
        entry = self.storage(storage)
        with self.meta:
            entry.inflight += 1
            entry.max_inflight = max(entry.max_inflight, entry.inflight)
        return AllocatingRequest(self.meta, entry)

    @contextlib.contextmanager
    def hold(self, storage: str, operation: str, volume: str = "") -> t.Iterator[None]:
        """Take the lock of ``storage`` (give up after 10 simulated seconds, at least ``MIN_REAL_LOCK_TIMEOUT`` real ones:
        ``TaskFailed`` with PVE's message), hold it for the time model's ``storage_<operation>``, then run the caller's block."""
        if not self.enabled:
            yield
            return
        entry = self.storage(storage)
        asked = self.clock.now()
        if not entry.lock.acquire(timeout=max(self.clock.real_seconds(LOCK_TIMEOUT), MIN_REAL_LOCK_TIMEOUT)):
            waited = self.clock.now() - asked
            with self.meta:
                entry.timeouts += 1
                entry.max_wait = max(entry.max_wait, waited)
                self._record(
                    entry, {"operation": operation, "volume": volume, "asked": asked, "timeout": True, "waited": waited}
                )
            raise TaskFailed(lock_error(storage))
        try:
            start = self.clock.now()
            with self.meta:
                entry.acquired += 1
                entry.max_wait = max(entry.max_wait, start - asked)
            self.clock.sleep(self.durations.get(f"storage_{operation}", 1.0), self.stop_event)
            yield
            with self.meta:
                self._record(
                    entry,
                    {
                        "operation": operation,
                        "volume": volume,
                        "asked": asked,
                        "start": start,
                        "end": self.clock.now(),
                        "waited": start - asked,
                    },
                )
        finally:
            entry.lock.release()

    @staticmethod
    def _record(entry: _Storage, item: dict[str, t.Any]) -> None:
        entry.history.append(item)
        del entry.history[:-HISTORY_MAX]

    def stats(self) -> dict[str, t.Any]:
        """``GET /_pvesim/storage-locks``: per storage, simulated seconds."""
        with self.meta:
            return {
                "enabled": self.enabled,
                "lockTimeout": LOCK_TIMEOUT,
                "storages": {
                    sid: {
                        "inflight": e.inflight,
                        "maxInflight": e.max_inflight,
                        "acquired": e.acquired,
                        "timeouts": e.timeouts,
                        "maxWait": round(e.max_wait, 3),
                        "history": [dict(h) for h in e.history],
                    }
                    for sid, e in sorted(self._storages.items())
                },
            }
