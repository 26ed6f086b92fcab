# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Proxmox's per-storage allocation lock (``pvesim.storagelock``): allocations, resizes and frees on
one storage are serialized; a waiter gives up after 10 simulated seconds with PVE's message; a clone
that fails that way leaves no VM (and frees what it had allocated, under the lock too)."""

from __future__ import annotations

import concurrent.futures
import time
import typing as t

from pvesim.testing import PvesimAdmin

from .conftest import Api

N = "/nodes/pve-test"
LOCK_ERROR = "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"


def clone(api: Api, newid: int) -> str:
    return str(api.data(api.post(f"{N}/qemu/9000/clone", newid=newid, full=1, storage="local-lvm", name=f"vm{newid}")))


def volumes(pvesim: PvesimAdmin, vmid: int) -> list[str]:
    return sorted(v for v in pvesim.set_storage("local-lvm")["volumes"] if f"-{vmid}-" in v)


def local_lvm(pvesim: PvesimAdmin) -> dict[str, t.Any]:
    return dict(pvesim.storage_locks()["storages"]["local-lvm"])


def wait_until(predicate: t.Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_allocations_on_one_storage_are_serialized(api: Api, pvesim: PvesimAdmin) -> None:
    # 4 clones at once, 2 allocations each (cloud-init drive, disk), 1 s each: the last waits at most 7 s < 10 s.
    # Real time (speed 1), so all four requests arrive while the first clone still holds the lock, even on a
    # loaded machine (at the fixture's speed 50 the first clone was done after 40 ms).
    pvesim.set_speed(1)
    pvesim.set_timings(tasks={"qmclone_full": 0, "storage_alloc": 1})
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        upids = list(pool.map(lambda vmid: clone(api, vmid), range(301, 305)))
    assert [api.wait(upid)["exitstatus"] for upid in upids] == ["OK"] * 4
    stats = local_lvm(pvesim)
    holds = sorted((h for h in stats["history"] if h["operation"] == "alloc"), key=lambda h: h["start"])
    assert len(holds) == 8 and stats["acquired"] == 8 and stats["timeouts"] == 0
    for before, after in zip(holds, holds[1:]):
        assert after["start"] >= before["end"], (before, after)  # never two holders at once
    assert all(h["end"] - h["start"] >= 0.99 for h in holds)  # each held for storage_alloc
    assert stats["maxInflight"] == 4 and stats["inflight"] == 0 and stats["maxWait"] > 3
    for vmid in range(301, 305):
        log = [line["t"] for line in api.data(api.get(f"{N}/tasks/{upids[vmid - 301]}/log"))]
        assert f"allocated target volume 'local-lvm:vm-{vmid}-cloudinit'" in log
        assert f"allocated target volume 'local-lvm:vm-{vmid}-disk-0'" in log


def test_a_waiter_fails_after_10_simulated_seconds_and_the_clone_leaves_no_vm(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.set_speed(10)
    pvesim.set_timings(tasks={"qmclone_full": 0, "storage_alloc": 25})
    first = clone(api, 301)
    wait_until(lambda: local_lvm(pvesim)["acquired"] == 1)
    second = clone(api, 302)
    # while it waits, the new VM exists with the clone lock (create_and_lock_config), as in PVE
    assert api.data(api.get(f"{N}/qemu/302/config"))["lock"] == "clone"
    status = api.wait(second, timeout=30)
    assert status["exitstatus"] == f"clone failed: {LOCK_ERROR}"
    timeout = [h for h in local_lvm(pvesim)["history"] if h.get("timeout")]
    assert len(timeout) == 1 and 10.0 <= timeout[0]["waited"] < 12.0, timeout
    resp = api.get(f"{N}/qemu/302/config")
    assert resp.status_code == 500 and "does not exist" in resp.json()["message"]
    assert volumes(pvesim, 302) == []
    assert api.wait(first, timeout=30)["exitstatus"] == "OK" and volumes(pvesim, 301) == [
        "local-lvm:vm-301-cloudinit",
        "local-lvm:vm-301-disk-0",
    ]


def test_at_high_speed_a_waiter_waits_at_least_a_real_second(api: Api, pvesim: PvesimAdmin) -> None:
    # speed 1000: 10 simulated seconds are 10 ms, less than a loaded host may take to schedule the waiter's thread; the
    # first clone holds the lock for 50 simulated seconds (50 ms), the second waits for it instead of failing
    pvesim.set_speed(1000)
    pvesim.set_timings(tasks={"qmclone_full": 0, "storage_alloc": 50})
    first = clone(api, 301)
    wait_until(lambda: local_lvm(pvesim)["acquired"] == 1)
    second = clone(api, 302)
    assert api.wait(first, timeout=30)["exitstatus"] == "OK" and api.wait(second, timeout=30)["exitstatus"] == "OK"
    stats = local_lvm(pvesim)
    assert (
        stats["timeouts"] == 0 and stats["maxWait"] > 10.0
    )  # it waited longer than the model's 10 s, in simulated time


def test_a_clone_failing_after_its_first_allocation_frees_it_under_the_lock(api: Api, pvesim: PvesimAdmin) -> None:
    # clone 302: cloud-init drive [0, 5]; a resize queued at ~2 holds [5, 19]; the clone's disk allocation
    # (queued at 5) gives up at 15; its cleanup frees the cloud-init volume after the resize: [19, 24]
    api.wait(clone(api, 301))
    pvesim.set_speed(10)
    pvesim.set_timings(
        tasks={"qmclone_full": 0, "storage_alloc": 5, "storage_resize": 14, "storage_free": 5, "resize": 0}
    )
    failing = clone(api, 302)
    wait_until(lambda: local_lvm(pvesim)["acquired"] == 3)  # 301's two, then 302's cloud-init drive
    time.sleep(0.2)
    resize = api.data(api.put(f"{N}/qemu/301/resize", disk="scsi0", size="20G"))
    status = api.wait(failing, timeout=30)
    assert status["exitstatus"] == f"clone failed: {LOCK_ERROR}"
    assert api.wait(resize, timeout=30)["exitstatus"] == "OK"
    wait_until(lambda: volumes(pvesim, 302) == [])
    ops = [(h["operation"], h["volume"]) for h in local_lvm(pvesim)["history"] if not h.get("timeout")]
    assert ops[-3:] == [
        ("alloc", "local-lvm:vm-302-cloudinit"),
        ("resize", "local-lvm:vm-301-disk-0"),
        ("free", "local-lvm:vm-302-cloudinit"),
    ], ops
    assert api.get(f"{N}/qemu/302/config").status_code == 500


def test_frees_take_the_lock_too(api: Api, pvesim: PvesimAdmin) -> None:
    api.wait(clone(api, 301))
    api.wait(clone(api, 302))
    pvesim.set_speed(10)
    pvesim.set_timings(tasks={"storage_resize": 30, "resize": 0, "qmdestroy": 0})
    resize = api.data(api.put(f"{N}/qemu/302/resize", disk="scsi0", size="20G"))
    wait_until(lambda: local_lvm(pvesim)["acquired"] == 5)  # 4 clone allocations + the resize
    destroy = api.data(api.delete(f"{N}/qemu/301"))
    status = api.wait(destroy, timeout=30)
    # destroy_vm: vdisk_free waits for the storage lock like an allocation; a failure only warns
    assert status["exitstatus"] == "WARNINGS: 2", status
    log = [line["t"] for line in api.data(api.get(f"{N}/tasks/{destroy}/log"))]
    assert f"WARN: Could not remove disk 'local-lvm:vm-301-disk-0', check manually: {LOCK_ERROR}" in log
    assert api.get(f"{N}/qemu/301/config").status_code == 500
    assert volumes(pvesim, 301) == ["local-lvm:vm-301-cloudinit", "local-lvm:vm-301-disk-0"]  # left behind, as PVE does
    assert api.wait(resize, timeout=30)["exitstatus"] == "OK"
    frees = [h for h in local_lvm(pvesim)["history"] if h["operation"] == "free"]
    assert len(frees) == 2 and all(h["timeout"] for h in frees)

    # with the lock free, the frees go through it and are recorded like any other holder
    pvesim.set_timings(tasks={"storage_free": 1})
    api.wait(api.data(api.delete(f"{N}/qemu/302")))
    frees = [h for h in local_lvm(pvesim)["history"] if h["operation"] == "free" and not h.get("timeout")]
    assert sorted(h["volume"] for h in frees) == ["local-lvm:vm-302-cloudinit", "local-lvm:vm-302-disk-0"]


def test_the_model_can_be_switched_off_until_reset(api: Api, pvesim: PvesimAdmin) -> None:
    assert pvesim.storage_locks()["enabled"] is True and pvesim.storage_locks()["lockTimeout"] == 10.0
    pvesim.set_storage_lock(False)
    pvesim.set_speed(10)
    pvesim.set_timings(tasks={"qmclone_full": 0, "storage_alloc": 25})
    upids = [clone(api, 301), clone(api, 302)]
    assert [api.wait(upid, timeout=10)["exitstatus"] for upid in upids] == ["OK", "OK"]
    assert local_lvm(pvesim)["acquired"] == 0 and local_lvm(pvesim)["timeouts"] == 0
    pvesim.reset()
    assert pvesim.storage_locks() == {"enabled": True, "lockTimeout": 10.0, "storages": {}}
