# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The file lock: ``FileLock``, an ``fcntl.flock`` on a separate lock file with a bounded, polling wait.

Safe across threads (one open file description per lock object), separate processes and forks
(a forked child never holds or releases its parent's lock). A lock that cannot be taken is a
``LocalFileError`` (``files.py``) with a fixed message.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
import weakref

from .files import local_file_error

DEFAULT_LOCK_TIMEOUT = 30.0

# Locks held by this process; a forked child drops its inherited copies (see _after_fork_in_child).
_HELD_LOCKS: "weakref.WeakSet[FileLock]" = weakref.WeakSet()


class FileLock:
    """An exclusive ``fcntl.flock`` on ``path`` (a separate, empty lock file, created 0600).

    ``acquire`` polls with ``LOCK_NB`` until ``timeout`` seconds have passed, then raises
    ``LocalFileError`` with ``code`` (``journal_locked`` by default). Each lock object opens its
    own file description, so two objects on the same path exclude each other even within one
    process (threads included). The lock is not re-entrant. After ``fork``, the child closes its
    inherited descriptor without unlocking, so the parent keeps the lock and the child never
    holds it by accident; the descriptor is close-on-exec as well. The lock file is never
    deleted (deleting flock files races with waiters).
    """

    def __init__(
        self,
        path: str,
        *,
        timeout: float = DEFAULT_LOCK_TIMEOUT,
        poll_interval: float = 0.005,
        max_poll_interval: float = 0.05,
        code: str = "journal_locked",
    ) -> None:
        if timeout < 0 or poll_interval <= 0 or max_poll_interval < poll_interval:
            raise ValueError("invalid lock timing")
        self.path = path
        self.timeout = float(timeout)
        self.poll_interval = float(poll_interval)
        self.max_poll_interval = float(max_poll_interval)
        self.code = code
        self._fd: int | None = None
        self._owner_pid: int | None = None
        self._mutex = threading.Lock()

    @property
    def held(self) -> bool:
        return self._fd is not None and self._owner_pid == os.getpid()

    def acquire(self) -> None:
        with self._mutex:
            if self.held:
                raise RuntimeError("FileLock is not re-entrant")
            self._fd = None
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            except OSError:
                raise local_file_error("io_error", "os_error", "A lock file could not be opened.") from None
            deadline = time.monotonic() + self.timeout
            interval = self.poll_interval
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as err:
                    if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        os.close(fd)
                        raise local_file_error("io_error", "os_error", "A lock file could not be locked.") from None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    os.close(fd)
                    raise local_file_error(self.code, "timeout")
                time.sleep(min(interval, remaining))
                interval = min(interval * 2, self.max_poll_interval)
            self._fd = fd
            self._owner_pid = os.getpid()
            _HELD_LOCKS.add(self)

    def release(self) -> None:
        with self._mutex:
            fd, owner = self._fd, self._owner_pid
            self._fd = None
            self._owner_pid = None
            _HELD_LOCKS.discard(self)
            if fd is None:
                return
            try:
                if owner == os.getpid():
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def _forget_in_child(self) -> None:
        fd = self._fd
        self._fd = None
        self._owner_pid = None
        self._mutex = threading.Lock()
        if fd is not None:
            try:
                os.close(fd)  # no LOCK_UN: the description is shared with the parent
            except OSError:
                pass

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


def _after_fork_in_child() -> None:
    for lock in list(_HELD_LOCKS):
        lock._forget_in_child()  # pylint: disable=protected-access
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
