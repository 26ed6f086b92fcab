# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Admission control per storage: at most K allocating submissions in flight (docs/concurrency.md).

Proxmox serializes every volume allocation and free on a storage under one lock whose waiters give
up after 10 seconds (pve-storage ``vdisk_alloc`` -> ``cluster_lock_storage`` -> pve-common
``lock_file``); dozens of clones at once make some of them fail with ``can't lock file
'/var/lock/pve-manager/pve-storage-<id>' - got timeout``. So before a stage sends a request that
allocates on a storage, it takes one of K *slots* of that storage, and gives it back when the task
ended or, while another run waits for a slot, as soon as the task's allocations are done (the
``allocated target volume`` lines qemu-server logs per cloned drive).

A slot is a file ``<journal_dir>/admission/<key>.<i>.slot`` (``i < K``) held with an exclusive
``flock``: every fork, every ``ansible-playbook`` process and every AWX job sharing the journal
directory sees the same slots, and the kernel drops the lock of a process that dies (even by
SIGKILL), so no slot outlives its holder. The key hashes the provider scope and the storage id.

Reading the task log costs API requests, and it only helps someone who waits for the slot. So a
process that found all K slots taken and is about to wait announces itself with a shared ``flock``
on ``<key>.waiters`` (dropped when it gets a slot, gives up or dies); a holder reads the task log
only while such a lock exists (a local, non-blocking ``flock`` probe: no API request). Without a
waiter the holder keeps its slot until the normal task wait sees the task end, then gives it back.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import time
import typing as t

from .._core.errors import InputError
from .._core.protocols import ApiClient
from .tasks import FIRST_INTERVAL, parse_upid, read_log_tail

ENV_STORAGE_CONCURRENCY = "VMANYWARE_STORAGE_CONCURRENCY"
# Measured on pvesim with the LVM-thin model (docs/benchmarks.md): 3 keeps the longest lock wait of a
# two-volume clone at 4 lock holds (about 4 s with 1 s per lvcreate), far from Proxmox's 10 s.
DEFAULT_STORAGE_CONCURRENCY = 3
ADMISSION_DIR = "admission"
ALLOCATED_LINE = "allocated target volume "
# A waiter retries the slots every ACQUIRE_POLL seconds (a few syscalls; a free slot should not idle long). While someone
# waits, a holder reads the task log FIRST_POLL seconds after the submission, then at intervals doubling up to MAX_POLL
# (the slot is busy until it sees the allocations); while nobody waits it probes for a waiter every WAITER_PROBE seconds
# (local syscalls only), so a waiter that comes late has the log read within WAITER_PROBE.
ACQUIRE_POLL = 0.2
FIRST_POLL = 0.1
MAX_POLL = 0.5
WAITER_PROBE = 0.1
LOG_LINES = 100


class AdmissionWaiting(Exception):
    """No slot became free within this run's budget; nothing was sent. ``progress`` says what it waits for."""

    def __init__(self, progress: t.Mapping[str, t.Any]) -> None:
        self.progress = dict(progress)
        super().__init__("waiting for a storage slot")


def check_concurrency(value: t.Any) -> int:
    """``storage_concurrency``: an integer >= 0 (0: no admission control)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(
            "storage_concurrency must be an integer >= 0 (0 turns admission control off).",
            path="storage_concurrency",
            details={"rule": "non_negative_integer"},
        )
    return value


def slot_key(scope: str, storage: str) -> str:
    """One key per provider scope (the cluster) and storage id; a hash keeps names safe and fixed-length."""
    return hashlib.sha256(("%s\0%s" % (scope, storage)).encode("utf-8")).hexdigest()[:32]


@dataclasses.dataclass
class Slot:
    """A held slot (an open, flocked file); ``release()`` is idempotent. ``waiters`` is its storage's waiters file."""

    storage: str
    index: int
    path: str
    fd: int
    waited: float
    waiters: str = ""
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            os.close(self.fd)  # closing the only descriptor drops the flock

    def summary(self) -> dict[str, t.Any]:
        return {"storage": self.storage, "slot": self.index, "waitedSeconds": round(self.waited, 1)}


def _try_flock(path: str, operation: int) -> int | None:
    """An open descriptor of ``path`` holding a non-blocking ``flock`` (``LOCK_EX`` or ``LOCK_SH``), or None: taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _try_slot(path: str) -> int | None:
    return _try_flock(path, fcntl.LOCK_EX)


def waiters_file(journal_dir: str, scope: str, storage: str) -> str:
    """The file whose shared ``flock``s announce the processes waiting for a slot of ``storage`` (``announce_waiting``)."""
    return os.path.join(journal_dir, ADMISSION_DIR, "%s.waiters" % slot_key(scope, storage))


def _paths(journal_dir: str, scope: str, storage: str, concurrency: int) -> tuple[list[str], str]:
    directory = os.path.join(journal_dir, ADMISSION_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    key = slot_key(scope, storage)
    return [os.path.join(directory, "%s.%d.slot" % (key, index)) for index in range(concurrency)], waiters_file(
        journal_dir, scope, storage
    )


def announce_waiting(waiters: str) -> int | None:
    """Say "I wait for a slot" with a shared ``flock`` on ``waiters`` (close the descriptor to withdraw); None: not now.

    Non-blocking: a holder's probe holds the exclusive lock for a moment (and a blocking lock on NFS retries slowly);
    the caller tries again before its next wait.
    """
    return _try_flock(waiters, fcntl.LOCK_SH)


def someone_waits(waiters: str) -> bool:
    """Whether a process announced it waits for a slot of this storage (a local probe, no API request).

    The probe takes the exclusive lock for a moment: it fails while any waiter holds its shared lock. Any other failure
    (a volume without locks, two holders probing at the same instant) counts as a waiter: one log read too many, never
    a slot kept from someone who waits.
    """
    try:
        fd = _try_flock(waiters, fcntl.LOCK_EX)
    except OSError:
        return True
    if fd is None:
        return True
    os.close(fd)  # drops the probe's lock at once
    return False


def acquire(
    journal_dir: str,
    scope: str,
    storage: str,
    concurrency: int,
    *,
    budget: float | None,
    holder: t.Mapping[str, t.Any],
    clock: t.Callable[[], float] = time.monotonic,
    sleep: t.Callable[[float], None] = time.sleep,
) -> Slot:
    """Take a free slot of ``storage``, waiting up to ``budget`` seconds (None: until one is free).

    While it waits it is announced as a waiter (``announce_waiting``), so the holders read their task logs to give
    their slot back as soon as their allocations are done. Raises ``AdmissionWaiting`` with the progress to show when
    the budget passes first.
    """
    paths, waiters = _paths(journal_dir, scope, storage, concurrency)
    start = clock()
    announced: int | None = None
    try:
        while True:
            for index, path in enumerate(paths):
                fd = _try_slot(path)
                if fd is not None:
                    # who holds it, for an operator looking at the directory (no secret in it)
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, (json.dumps(dict(holder, pid=os.getpid()), sort_keys=True) + "\n").encode("utf-8"), 0)
                    return Slot(storage, index, path, fd, clock() - start, waiters)
            waited = clock() - start
            if budget is not None and waited >= budget:
                raise AdmissionWaiting(
                    {
                        "waiting": "a free allocation slot on storage %s" % storage,
                        "storage": storage,
                        "storageConcurrency": concurrency,
                        "waitedSeconds": round(waited, 1),
                    }
                )
            if announced is None:
                announced = announce_waiting(waiters)
            sleep(ACQUIRE_POLL if budget is None else max(0.0, min(ACQUIRE_POLL, budget - waited)))
    finally:
        if announced is not None:
            os.close(announced)  # no longer waiting (holding a slot, gone with the budget, or failed)


def task_ended(lines: t.Sequence[str]) -> bool:
    """The task log shows the task's end (its last line)."""
    return any(line.startswith(("TASK OK", "TASK ERROR", "TASK WARNINGS")) for line in lines)


def allocations_done(lines: t.Sequence[str], allocations: int | None) -> bool:
    """The task log shows the task ended, or (when known) all its allocations logged."""
    if task_ended(lines):
        return True
    return allocations is not None and sum(1 for line in lines if line.startswith(ALLOCATED_LINE)) >= allocations


class Holding:
    """Keeps ``slot`` while the task ``upid`` may still allocate on the storage; gives it back early only for a waiter.

    ``sleep`` is the sleep of the task wait (``_tasks.wait_task``): while it sleeps, it probes for a waiter and, while
    one waits, reads the task log (after FIRST_POLL seconds, then doubling up to MAX_POLL) and gives the slot back once
    the allocations are logged (or the task ended). While someone waits, the sleep also lasts until then (at most
    ``limit`` seconds from the start): the log shows the task's end as well, so status polls would only add requests.
    Without a waiter it reads nothing; the slot goes back when the task wait has seen the end (``finish``).
    """

    def __init__(
        self,
        slot: Slot,
        client: ApiClient,
        upid: str,
        allocations: int | None,
        *,
        limit: float,
        clock: t.Callable[[], float] = time.monotonic,
        sleep: t.Callable[[float], None] = time.sleep,
    ) -> None:
        self.slot = slot
        self._client = client
        self._upid = parse_upid(upid)
        self._allocations = allocations
        self._clock = clock
        self._sleep = sleep
        self._deadline = clock() + limit
        self._interval = FIRST_POLL
        self._next_read = clock() + FIRST_POLL
        self._serving = False  # the last probe found a waiter
        self._log_ended = False  # the last log read showed the task's end
        self.log_reads = 0

    def _read(self) -> None:
        self.log_reads += 1
        lines = read_log_tail(self._client, self._upid, lines=LOG_LINES)
        self._interval = min(MAX_POLL, self._interval * 2)
        self._next_read = self._clock() + self._interval
        self._log_ended = task_ended(lines)
        if allocations_done(lines, self._allocations):
            self.slot.release()

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` for the task wait, serving waiters of the slot meanwhile (longer while one waits)."""
        remaining = seconds  # counted down by the pieces slept (not by the clock), so a no-op sleep cannot spin
        while not self.slot.released:
            if remaining <= 0 and not (self._serving and self._clock() < self._deadline):
                return
            remaining -= self._wait_and_read(remaining if remaining > 0 else None, force=False)
        if remaining > 0:
            self._sleep(remaining)
        elif remaining < 0 and not self._log_ended:
            # the slot went back past the task wait's poll time, at the allocations: the task still runs (a clone
            # copies its data now), so its status is polled after the task wait's first interval, not at once
            self._sleep(FIRST_INTERVAL)

    def _wait_and_read(self, at_most: float | None, *, force: bool) -> float:
        """Sleep until the next log read is due (past it: until the next probe for a waiter), then read the log if
        someone waits (or ``force``). Returns the seconds slept."""
        now = self._clock()
        piece = self._next_read - now if self._next_read > now else 0.0 if force else WAITER_PROBE
        piece = max(0.0, min(piece, self._deadline - now) if at_most is None else min(piece, at_most))
        self._sleep(piece)
        if self._clock() >= self._next_read:
            self._serving = someone_waits(self.slot.waiters)
            if self._serving or force:
                self._read()
        return piece

    def finish(self, ended: bool) -> None:
        """After the task wait: give the slot back, once sure the task allocates no more.

        ``ended``: the wait saw the task's end. Otherwise (the wait budget passed, or the status could not be read) the
        log is read, on the same schedule, until the allocations show or the ``limit`` passes, as this run is about to
        return and must not hand the slot on while its allocations may still be queued.
        """
        if not ended:
            self._next_read = min(self._next_read, self._clock())  # the first read at once
            while not self.slot.released and self._clock() < self._deadline:
                self._wait_and_read(None, force=True)
        self.slot.release()
