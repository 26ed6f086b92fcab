# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Tests of the file lock (_core/lock.py): exclusion, timeouts, threads, processes and forks."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.files import LocalFileError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.lock import FileLock

FORK = multiprocessing.get_context("fork")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_lock_excludes_second_holder_and_times_out(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    with FileLock(path) as first:
        assert first.held
        started = time.monotonic()
        with pytest.raises(LocalFileError) as info:
            FileLock(path, timeout=0.1).acquire()
        assert info.value.code == "journal_locked"
        assert 0.09 <= time.monotonic() - started < 2
    assert not first.held
    with FileLock(path, timeout=0.1):
        pass
    assert _mode(tmp_path / "x.lock") == 0o600


def test_lock_custom_code_and_not_reentrant(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    lock = FileLock(path)
    with lock:
        with pytest.raises(RuntimeError):
            lock.acquire()
        with pytest.raises(LocalFileError) as info:
            FileLock(path, timeout=0, code="conflict").acquire()
        assert info.value.code == "conflict"
    lock.release()  # releasing twice is harmless


def test_lock_rejects_bad_timing(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        FileLock(str(tmp_path / "x.lock"), timeout=-1)


def test_lock_threads_mutual_exclusion(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    inside = [0]
    overlaps = [0]
    total = [0]

    def work() -> None:
        for _round in range(20):
            with FileLock(path, timeout=10):
                inside[0] += 1
                if inside[0] > 1:
                    overlaps[0] += 1
                total[0] += 1
                time.sleep(0.0005)
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _index in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps[0] == 0 and total[0] == 120


def _hold_lock(path: str, ready: t.Any, release: t.Any) -> None:
    with FileLock(path):
        ready.set()
        release.wait(10)


def test_lock_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    ready, release = FORK.Event(), FORK.Event()
    child = FORK.Process(target=_hold_lock, args=(path, ready, release))
    child.start()
    try:
        assert ready.wait(10)
        with pytest.raises(LocalFileError):
            FileLock(path, timeout=0.05).acquire()
    finally:
        release.set()
        child.join(10)
    with FileLock(path, timeout=5):
        pass


def _try_lock(path: str, result: t.Any) -> None:
    try:
        FileLock(path, timeout=0.05).acquire()
    except LocalFileError as err:
        result.put(err.code)
    else:
        result.put("acquired")


def test_forked_child_neither_holds_nor_releases_parent_lock(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    lock = FileLock(path)
    lock.acquire()
    try:
        pid = os.fork()
        if pid == 0:  # child: the inherited lock is forgotten, and exiting does not unlock the parent's
            code = 0 if not lock.held else 1
            lock.release()
            os._exit(code)
        status = os.waitpid(pid, 0)[1]
        assert os.WEXITSTATUS(status) == 0
        result = FORK.Queue()
        probe = FORK.Process(target=_try_lock, args=(path, result))
        probe.start()
        probe.join(10)
        assert result.get(timeout=5) == "journal_locked"
        assert lock.held
    finally:
        lock.release()
    result = FORK.Queue()
    probe = FORK.Process(target=_try_lock, args=(path, result))
    probe.start()
    probe.join(10)
    assert result.get(timeout=5) == "acquired"
