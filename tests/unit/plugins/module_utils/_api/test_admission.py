# SPDX-License-Identifier: GPL-3.0-or-later
"""Admission control per storage (``_admission``): K flocked slot files in the journal directory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
from pve_fake import FakeClient, envelope, in_turn

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import admission as _admission, tasks as _tasks
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError

UPID = "UPID:pve-test:0001F050:00021036:6B0D00E2:qmclone:9000:vmanyware@pve!full:"
HOLDER = {"operationId": "op-1", "stage": "clone"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def take(
    journal: Path, k: int = 2, budget: float | None = 0.0, storage: str = "local-lvm", scope: str = "pve:a", **kw: t.Any
) -> _admission.Slot:
    return _admission.acquire(str(journal), scope, storage, k, budget=budget, holder=HOLDER, **kw)


def test_at_most_k_slots_per_storage_and_scope(tmp_path: Path) -> None:
    first, second = take(tmp_path), take(tmp_path)
    assert (first.index, second.index) == (0, 1)
    clock = FakeClock()
    with pytest.raises(_admission.AdmissionWaiting) as waiting:
        take(tmp_path, budget=5.0, clock=clock, sleep=clock.sleep)
    assert waiting.value.progress == {
        "waiting": "a free allocation slot on storage local-lvm",
        "storage": "local-lvm",
        "storageConcurrency": 2,
        "waitedSeconds": 5.0,
    }
    # other storages and other clusters have their own slots
    others = [take(tmp_path, storage="ceph"), take(tmp_path, scope="pve:b")]
    second.release()
    second.release()  # idempotent
    third = take(tmp_path)
    assert third.index == 1 and third.waited < 1.0
    # the slot file says who holds it (no secret), mode 0600 in a 0700 directory
    assert '"operationId": "op-1"' in Path(third.path).read_text(encoding="utf-8")
    assert os.stat(third.path).st_mode & 0o777 == 0o600 and os.stat(tmp_path / "admission").st_mode & 0o777 == 0o700
    for slot in (first, third, *others):
        slot.release()


@contextlib.contextmanager
def python_child(code: str, arg: str) -> t.Iterator[subprocess.Popen[bytes]]:
    """Another process running ``code`` with the collection importable (as another fork or ansible-playbook would); killed at the end."""
    child = subprocess.Popen(
        [sys.executable, "-c", code, arg],
        stdout=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_a_slot_of_a_killed_process_is_free_again(tmp_path: Path) -> None:
    # another process (as another fork or ansible-playbook would) takes both slots and is SIGKILLed
    code = (
        "import sys, time; from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import admission as a;"
        "s = [a.acquire(sys.argv[1], 'pve:a', 'local-lvm', 2, budget=0, holder={}) for _ in range(2)];"
        "print('held', flush=True); time.sleep(60)"
    )
    with python_child(code, str(tmp_path)) as child:
        assert child.stdout is not None and child.stdout.readline().strip() == b"held"
        with pytest.raises(_admission.AdmissionWaiting):
            take(tmp_path)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        slot = take(tmp_path)  # the kernel dropped the dead holder's flock: no lease to expire
        assert slot.index == 0
        slot.release()


def test_check_concurrency() -> None:
    assert _admission.check_concurrency(0) == 0 and _admission.check_concurrency(3) == 3
    for bad in (-1, True, "3", 2.5):
        with pytest.raises(InputError) as err:
            _admission.check_concurrency(bad)
        assert err.value.code == "invalid_option"


def log_client(logs: list[list[str]]) -> FakeClient:
    """Answers the task log GET with the next of ``logs`` (the last one repeats)."""
    pages = [envelope([{"n": i + 1, "t": line} for i, line in enumerate(lines)], total=len(lines)) for lines in logs]
    return FakeClient({"/nodes/pve-test/tasks/%s/log" % UPID: in_turn(*pages)})


def log_reads(client: FakeClient) -> int:
    return len(client.paths("GET"))


@pytest.mark.parametrize(
    "allocations,logs,reads",
    [
        (
            2,
            [
                ["create full clone of drive ide2"],
                ["allocated target volume 'a'"],
                ["allocated target volume 'a'", "x", "allocated target volume 'b'"],
            ],
            3,
        ),
        (
            2,
            [
                [],
                [
                    "TASK ERROR: clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"
                ],
            ],
            2,
        ),
        (
            None,
            [["allocated target volume 'a'"], ["allocated target volume 'a'", "TASK OK"]],
            2,
        ),  # resize: until the task ends
    ],
)
def test_a_run_that_returns_before_the_end_keeps_the_slot_until_the_allocations_are_logged(
    tmp_path: Path, allocations: int | None, logs: list[list[str]], reads: int
) -> None:
    # the wait budget passed with the task running, nobody waits: the log is read anyway (at once, then 0.2 s, 0.4 s,
    # ... up to 0.5 s apart), as the run is about to return and must not hand the slot on while allocations may queue
    slot = take(tmp_path)
    clock = FakeClock()
    client = log_client(logs)
    holding = _admission.Holding(slot, client, UPID, allocations, limit=600, clock=clock, sleep=clock.sleep)
    clock.sleep(1.0)
    holding.finish(ended=False)
    assert log_reads(client) == reads == holding.log_reads and slot.released
    assert clock.now == pytest.approx(1.0 + [0.0, 0.2, 0.6][reads - 1])


def test_the_slot_is_given_back_at_the_limit(tmp_path: Path) -> None:
    slot = take(tmp_path)
    clock = FakeClock()
    client = log_client([["create full clone of drive scsi0"]])
    _admission.Holding(slot, client, UPID, 2, limit=30, clock=clock, sleep=clock.sleep).finish(ended=False)
    assert slot.released and 30 <= clock.now < 31 and log_reads(client) > 3


def test_a_run_that_saw_the_end_gives_the_slot_back_without_a_read(tmp_path: Path) -> None:
    slot = take(tmp_path)
    client = log_client([["create full clone of drive scsi0"]])
    _admission.Holding(slot, client, UPID, 2, limit=30).finish(ended=True)
    assert slot.released and log_reads(client) == 0


# -- the holder reads the task log only while someone waits for a slot ----------------------------------------------------
STATUS = "/nodes/pve-test/tasks/%s/status" % UPID
LOG = "/nodes/pve-test/tasks/%s/log" % UPID
CLONE_LOG = [
    "create full clone of drive ide2",
    "allocated target volume 'local-lvm:vm-201-cloudinit'",
    "create full clone of drive scsi0",
    "allocated target volume 'local-lvm:vm-201-disk-0'",
]


class Task:
    """A clone task that ends at ``ends`` (fake seconds) and logs its two allocations by ``allocated``; records what was read when."""

    def __init__(self, clock: t.Callable[[], float], slot: _admission.Slot, *, ends: float, allocated: float) -> None:
        self.clock, self.slot, self.ends, self.allocated = clock, slot, ends, allocated
        self.status_polls: list[tuple[float, bool]] = []  # (when, slot still held)
        self.log_reads: list[float] = []

    def status(self, _params: t.Any) -> dict[str, t.Any]:
        self.status_polls.append((round(self.clock(), 2), not self.slot.released))
        return {"status": "stopped", "exitstatus": "OK"} if self.clock() >= self.ends else {"status": "running"}

    def log(self, _params: t.Any) -> envelope:
        self.log_reads.append(round(self.clock(), 2))
        lines = (CLONE_LOG if self.clock() >= self.allocated else CLONE_LOG[:1]) + (
            ["TASK OK"] if self.clock() >= self.ends else []
        )
        return envelope([{"n": i + 1, "t": line} for i, line in enumerate(lines)], total=len(lines))

    def client(self) -> FakeClient:
        return FakeClient({STATUS: self.status, LOG: self.log})


def fresh(clock: FakeClock) -> t.Callable[[], float]:
    """The wall clock of a task submitted at the fake clock's zero (its age, for ``_tasks.poll_cap``)."""
    return lambda: _tasks.parse_upid(UPID).starttime + clock()


def follow(
    task: Task, clock: FakeClock, *, timeout: float = 600.0, allocations: int | None = 2
) -> tuple[_tasks.TaskOutcome, _admission.Holding]:
    """What the stage runner does after the submission: the task wait sleeps through ``Holding``, then ``finish``."""
    holding = _admission.Holding(task.slot, task.client(), UPID, allocations, limit=600, clock=clock, sleep=clock.sleep)
    outcome = _tasks.wait_task(
        task.client(), UPID, timeout=timeout, clock=clock, sleep=holding.sleep, wall=fresh(clock)
    )
    holding.finish(ended=outcome.status not in ("running", "timeout", "unobservable"))
    return outcome, holding


def test_without_a_waiter_the_holder_reads_no_task_log(tmp_path: Path) -> None:
    clock = FakeClock()
    task = Task(clock, take(tmp_path), ends=2.2, allocated=0.3)
    outcome, holding = follow(task, clock)
    assert outcome.status == "ok" and task.slot.released
    assert task.log_reads == [] and holding.log_reads == 0
    # the task wait keeps its own schedule (polls at 0.25, 0.5, 1 s, then every 0.5 s) and the slot is kept until the end
    assert task.status_polls == [(0.25, True), (0.5, True), (1.0, True), (1.5, True), (2.0, True), (2.5, True)]


def test_a_waiter_makes_the_holder_read_the_log_and_give_the_slot_back_as_early_as_before(tmp_path: Path) -> None:
    clock = FakeClock()
    task = Task(clock, take(tmp_path), ends=2.2, allocated=0.3)
    waiter = _admission.announce_waiting(task.slot.waiters)  # someone found every slot taken and waits
    assert waiter is not None and _admission.someone_waits(task.slot.waiters)
    try:
        outcome, holding = follow(task, clock)
    finally:
        os.close(waiter)
    assert outcome.status == "ok" and holding.log_reads == 2
    # the log is read on the schedule of a holder that always read it (after 0.1 s, then 0.2 s later): the slot is
    # free at 0.3 s, as when the log was read without a waiter; meanwhile no status poll (the log shows the end too),
    # then the task wait goes on without the slot, its first poll 0.25 s after the release (the clone still copies)
    assert task.log_reads == [0.1, 0.3]
    assert task.status_polls == [(0.55, False), (1.05, False), (1.55, False), (2.05, False), (2.55, False)]
    assert not _admission.someone_waits(task.slot.waiters)  # closing the descriptor withdrew the waiter


def test_a_resize_with_a_waiter_gives_the_slot_back_at_its_end_and_the_end_is_polled_at_once(tmp_path: Path) -> None:
    clock = FakeClock()
    task = Task(clock, take(tmp_path), ends=0.5, allocated=99.0)
    waiter = _admission.announce_waiting(task.slot.waiters)
    try:
        outcome, _holding = follow(task, clock, allocations=None)
    finally:
        os.close(t.cast(int, waiter))
    assert outcome.status == "ok" and task.log_reads == [0.1, 0.3, 0.7]  # TASK OK in the third
    assert task.status_polls == [(0.7, False)]  # the log showed the end: no pause before the status poll


def test_a_waiter_that_comes_late_has_the_log_read_within_a_probe(tmp_path: Path) -> None:
    clock = FakeClock()
    slot = take(tmp_path)
    task = Task(clock, slot, ends=5.0, allocated=0.3)
    announced: list[int] = []

    def sleep(seconds: float) -> None:  # a waiter announces itself at 1.23 s
        clock.sleep(seconds)
        if clock.now >= 1.23 and not announced:
            fd = _admission.announce_waiting(slot.waiters)
            assert fd is not None
            announced.append(fd)

    holding = _admission.Holding(slot, task.client(), UPID, 2, limit=600, clock=clock, sleep=sleep)
    try:
        outcome = _tasks.wait_task(
            task.client(), UPID, timeout=600, clock=clock, sleep=holding.sleep, wall=fresh(clock)
        )
    finally:
        for fd in announced:
            os.close(fd)
    holding.finish(ended=outcome.status == "ok")
    (read,) = task.log_reads  # one read: the allocations were logged long before
    assert 1.23 <= read <= 1.23 + _admission.WAITER_PROBE
    assert [held for when, held in task.status_polls if when > read] == [False] * 8  # 1.5, 2.0, ..., 5.0


def test_when_the_waiter_leaves_the_holder_stops_reading_the_log(tmp_path: Path) -> None:
    clock = FakeClock()
    slot = take(tmp_path)
    task = Task(clock, slot, ends=3.0, allocated=1.0)
    waiter = [_admission.announce_waiting(slot.waiters)]

    def sleep(seconds: float) -> None:  # the waiter got a slot elsewhere (or gave up) at 0.2 s
        clock.sleep(seconds)
        if clock.now >= 0.2 and waiter:
            os.close(t.cast(int, waiter.pop()))

    holding = _admission.Holding(slot, task.client(), UPID, 2, limit=600, clock=clock, sleep=sleep)
    outcome = _tasks.wait_task(task.client(), UPID, timeout=600, clock=clock, sleep=holding.sleep, wall=fresh(clock))
    holding.finish(ended=outcome.status == "ok")
    assert task.log_reads == [0.1]  # at 0.3 s nobody waits any more: back to the status polls, the slot kept to the end
    assert task.status_polls == [
        (0.3, True),
        (0.6, True),
        (1.1, True),
        (1.6, True),
        (2.1, True),
        (2.6, True),
        (3.1, True),
    ]
    assert slot.released


def test_a_dead_waiter_does_not_count(tmp_path: Path) -> None:
    waiters = _admission.waiters_file(str(tmp_path), "pve:a", "local-lvm")
    take(tmp_path).release()  # creates the admission directory
    code = (
        "import sys, time; from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import admission as a;"
        "fd = a.announce_waiting(sys.argv[1]); print('waiting' if fd is not None else 'no', flush=True); time.sleep(60)"
    )
    with python_child(code, waiters) as child:
        assert child.stdout is not None and child.stdout.readline().strip() == b"waiting"
        assert _admission.someone_waits(waiters)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        assert not _admission.someone_waits(waiters)  # the kernel dropped its lock: no file to clean up, no lease


def test_acquire_announces_itself_only_while_it_waits(tmp_path: Path) -> None:
    held = [take(tmp_path), take(tmp_path)]
    waiters = held[0].waiters
    with pytest.raises(_admission.AdmissionWaiting):
        take(tmp_path, budget=0.0)  # gives up at once: never announced
    seen: list[bool] = []
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        seen.append(_admission.someone_waits(waiters))
        clock.sleep(seconds)
        if clock.now >= 1.0:
            held[1].release()

    slot = take(tmp_path, budget=5.0, clock=clock, sleep=sleep)
    assert slot.index == 1 and seen == [True] * 5 and not _admission.someone_waits(waiters)
    for each in (held[0], slot):
        each.release()


def test_the_budget_passes_while_the_task_may_still_allocate(tmp_path: Path) -> None:
    # the run returns (its wait budget passed) with the task running: it reads the log, even without a waiter, until
    # the allocations show, so that the slot is not handed on while they may be queued
    clock = FakeClock()
    task = Task(clock, take(tmp_path), ends=50.0, allocated=1.5)
    outcome, holding = follow(task, clock, timeout=1.0)
    assert outcome.status == "timeout" and task.slot.released
    assert task.log_reads == [1.0, 1.2, 1.6] and holding.log_reads == 3


def test_a_waiting_process_gets_the_slot_once_the_holders_allocations_are_logged(tmp_path: Path) -> None:
    # real processes and clocks: K=1, we hold the slot; another process waits for it (acquire, no budget)
    code = (
        "import sys, time; from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import admission as a;"
        "s = a.acquire(sys.argv[1], 'pve:a', 'local-lvm', 1, budget=None, holder={}); print('got', flush=True)"
    )
    slot = take(tmp_path, k=1)
    with python_child(code, str(tmp_path)) as child:
        deadline = time.monotonic() + 30
        while not _admission.someone_waits(slot.waiters):
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.05)
        task = Task(time.monotonic, slot, ends=time.monotonic() + 30, allocated=time.monotonic() + 0.5)
        holding = _admission.Holding(slot, task.client(), UPID, 2, limit=600)
        holding.sleep(1.0)  # the first second of the task wait
        assert slot.released and 1 <= holding.log_reads <= 3
        assert child.stdout is not None and child.stdout.readline().strip() == b"got"
