# SPDX-License-Identifier: GPL-3.0-or-later
"""Admission control per storage (``_admission``): K flocked slot files in the journal directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
from pve_fake import FakeClient, envelope, in_turn

from ansible_collections.vmanyware.proxmox.plugins.module_utils import _admission
from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import InputError

UPID = "UPID:pve-test:0001F050:00021036:6B0D00E2:qmclone:9000:vmanyware@pve!full:"
HOLDER = {"operationId": "op-1", "stage": "clone"}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def take(journal: Path, k: int = 2, budget: float | None = 0.0, storage: str = "local-lvm", scope: str = "pve:a", **kw: t.Any) -> _admission.Slot:
    return _admission.acquire(str(journal), scope, storage, k, budget=budget, holder=HOLDER, **kw)


def test_at_most_k_slots_per_storage_and_scope(tmp_path: Path) -> None:
    first, second = take(tmp_path), take(tmp_path)
    assert (first.index, second.index) == (0, 1)
    clock = FakeClock()
    with pytest.raises(_admission.AdmissionWaiting) as waiting:
        take(tmp_path, budget=5.0, clock=clock, sleep=clock.sleep)
    assert waiting.value.progress == {"waiting": "a free allocation slot on storage local-lvm", "storage": "local-lvm",
                                      "storageConcurrency": 2, "waitedSeconds": 5.0}
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


def test_a_slot_of_a_killed_process_is_free_again(tmp_path: Path) -> None:
    # another process (as another fork or ansible-playbook would) takes both slots and is SIGKILLed
    code = ("import sys, time; from ansible_collections.vmanyware.proxmox.plugins.module_utils import _admission as a;"
            "s = [a.acquire(sys.argv[1], 'pve:a', 'local-lvm', 2, budget=0, holder={}) for _ in range(2)];"
            "print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"held"
        with pytest.raises(_admission.AdmissionWaiting):
            take(tmp_path)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        slot = take(tmp_path)  # the kernel dropped the dead holder's flock: no lease to expire
        assert slot.index == 0
        slot.release()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


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


@pytest.mark.parametrize("allocations,logs,reads", [
    (2, [["create full clone of drive ide2"], ["allocated target volume 'a'"],
         ["allocated target volume 'a'", "x", "allocated target volume 'b'"]], 3),
    (2, [[], ["TASK ERROR: clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"]], 2),
    (None, [["allocated target volume 'a'"], ["allocated target volume 'a'", "TASK OK"]], 2),  # resize: until the task ends
])
def test_the_slot_is_kept_until_the_allocations_are_logged(tmp_path: Path, allocations: int | None, logs: list[list[str]], reads: int) -> None:
    slot = take(tmp_path)
    clock = FakeClock()
    client = log_client(logs)
    _admission.hold_until_allocated(slot, client, UPID, allocations, limit=600, clock=clock, sleep=clock.sleep)
    assert log_reads(client) == reads and slot.released


def test_the_slot_is_given_back_at_the_limit(tmp_path: Path) -> None:
    slot = take(tmp_path)
    clock = FakeClock()
    client = log_client([["create full clone of drive scsi0"]])
    _admission.hold_until_allocated(slot, client, UPID, 2, limit=30, clock=clock, sleep=clock.sleep)
    assert slot.released and 30 <= clock.now < 31 and log_reads(client) > 3
