# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Admission control per storage: at most K allocating submissions in flight (docs/concurrency.md).

Proxmox serializes every volume allocation and free on a storage under one lock whose waiters give
up after 10 seconds (pve-storage ``vdisk_alloc`` -> ``cluster_lock_storage`` -> pve-common
``lock_file``); dozens of clones at once make some of them fail with ``can't lock file
'/var/lock/pve-manager/pve-storage-<id>' - got timeout``. So before a stage sends a request that
allocates on a storage, it takes one of K *slots* of that storage, and gives it back once the task's
allocations are done (the ``allocated target volume`` lines qemu-server logs per cloned drive) or
the task ended, whichever Proxmox shows first.

A slot is a file ``<journal_dir>/admission/<key>.<i>.slot`` (``i < K``) held with an exclusive
``flock``: every fork, every ``ansible-playbook`` process and every AWX job sharing the journal
directory sees the same slots, and the kernel drops the lock of a process that dies (even by
SIGKILL), so no slot outlives its holder. The key hashes the provider scope and the storage id.

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

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._protocols import ApiClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._tasks import parse_upid, read_log_tail

ENV_STORAGE_CONCURRENCY = "VMANYWARE_STORAGE_CONCURRENCY"
# Measured on pvesim with the LVM-thin model (docs/benchmarks.md): 3 keeps the longest lock wait of a
# two-volume clone at 4 lock holds (about 4 s with 1 s per lvcreate), far from Proxmox's 10 s.
DEFAULT_STORAGE_CONCURRENCY = 3
ADMISSION_DIR = "admission"
ALLOCATED_LINE = "allocated target volume "
# A waiter retries the slots every ACQUIRE_POLL seconds (a few syscalls; a free slot should not idle long); a holder
# reads the task log after FIRST_POLL seconds, doubling up to MAX_POLL (the slot is busy until it sees the allocations).
ACQUIRE_POLL = 0.2
FIRST_POLL = 0.1
MAX_POLL = 0.5
LOG_LINES = 100


class AdmissionWaiting(Exception):
    """No slot became free within this run's budget; nothing was sent. ``progress`` says what it waits for."""

    def __init__(self, progress: t.Mapping[str, t.Any]) -> None:
        self.progress = dict(progress)
        super().__init__("waiting for a storage slot")


def check_concurrency(value: t.Any) -> int:
    """``storage_concurrency``: an integer >= 0 (0: no admission control)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError("storage_concurrency must be an integer >= 0 (0 turns admission control off).", path="storage_concurrency",
                         details={"rule": "non_negative_integer"})
    return value


def slot_key(scope: str, storage: str) -> str:
    """One key per provider scope (the cluster) and storage id; a hash keeps names safe and fixed-length."""
    return hashlib.sha256(("%s\0%s" % (scope, storage)).encode("utf-8")).hexdigest()[:32]


@dataclasses.dataclass
class Slot:
    """A held slot (an open, flocked file); ``release()`` is idempotent."""

    storage: str
    index: int
    path: str
    fd: int
    waited: float
    released: bool = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            os.close(self.fd)  # closing the only descriptor drops the flock

    def summary(self) -> dict[str, t.Any]:
        return {"storage": self.storage, "slot": self.index, "waitedSeconds": round(self.waited, 1)}


def _try_slot(path: str) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def acquire(journal_dir: str, scope: str, storage: str, concurrency: int, *, budget: float | None, holder: t.Mapping[str, t.Any],
            clock: t.Callable[[], float] = time.monotonic, sleep: t.Callable[[float], None] = time.sleep) -> Slot:
    """Take a free slot of ``storage``, waiting up to ``budget`` seconds (None: until one is free).

    Raises ``AdmissionWaiting`` with the progress to show when the budget passes first.
    """
    directory = os.path.join(journal_dir, ADMISSION_DIR)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    key = slot_key(scope, storage)
    paths = [os.path.join(directory, "%s.%d.slot" % (key, index)) for index in range(concurrency)]
    start = clock()
    while True:
        for index, path in enumerate(paths):
            fd = _try_slot(path)
            if fd is not None:
                # who holds it, for an operator looking at the directory (no secret in it)
                os.ftruncate(fd, 0)
                os.pwrite(fd, (json.dumps(dict(holder, pid=os.getpid()), sort_keys=True) + "\n").encode("utf-8"), 0)
                return Slot(storage, index, path, fd, clock() - start)
        waited = clock() - start
        if budget is not None and waited >= budget:
            raise AdmissionWaiting({"waiting": "a free allocation slot on storage %s" % storage, "storage": storage,
                                    "storageConcurrency": concurrency, "waitedSeconds": round(waited, 1)})
        sleep(ACQUIRE_POLL if budget is None else max(0.0, min(ACQUIRE_POLL, budget - waited)))


def allocations_done(lines: t.Sequence[str], allocations: int | None) -> bool:
    """The task log shows the task ended, or (when known) all its allocations logged."""
    if any(line.startswith(("TASK OK", "TASK ERROR", "TASK WARNINGS")) for line in lines):
        return True
    return allocations is not None and sum(1 for line in lines if line.startswith(ALLOCATED_LINE)) >= allocations


def hold_until_allocated(slot: Slot, client: ApiClient, upid: str, allocations: int | None, *, limit: float,
                         clock: t.Callable[[], float] = time.monotonic, sleep: t.Callable[[float], None] = time.sleep) -> None:
    """Keep ``slot`` while the task ``upid`` may still allocate (read from its log), at most ``limit`` seconds; then release it.

    A Proxmox without the ``allocated target volume`` line (qemu-server before 2026-04) keeps the slot until the
    task ends, which is slower but never lets more than K allocations queue on the storage lock.
    """
    parsed = parse_upid(upid)
    deadline = clock() + limit
    interval = FIRST_POLL
    try:
        while clock() < deadline:
            sleep(min(interval, max(0.0, deadline - clock())))
            interval = min(MAX_POLL, interval * 2)
            if allocations_done(read_log_tail(client, parsed, lines=LOG_LINES), allocations):
                return
    finally:
        slot.release()
