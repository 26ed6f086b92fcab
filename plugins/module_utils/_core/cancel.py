# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Cancel means stop: a run whose controller went away, or that was sent SIGTERM/SIGINT, stops at the next safe point.

ansible-core starts each task worker in a session of its own, so killing ``ansible-playbook``'s process group (a
SIGKILL, an AWX job cancel through ansible-runner) does not reach the worker that sends the requests; left alone, that
orphaned worker would go on provisioning while a re-run races it. So the run knows its controller and checks it:

- the action plugin (``_in_process``, in the worker) names the processes a run depends on in ``$VMANYWARE_CONTROLLER``
  for the task's duration: the controller (the worker's parent, ``ansible-playbook``) and the worker itself, each as
  ``pid:starttime`` (the start time from ``/proc/<pid>/stat``, so a reused pid is not taken for the same process). An
  in-process run reads it from the worker's environment; a module process inherits it (its worker and its controller
  are then both watched);
- ``Cancellation`` (the run settings' ``cancel_check``) answers ``controller_gone`` once one of them is gone (no such
  pid, another start time, or a zombie) and ``run_cancelled`` once SIGTERM or SIGINT reached this process while its
  ``signals()`` scope was active (the run then finishes its current step instead of dying between a dispatch record
  and its send; the signal is delivered again to the previous handler when the scope ends: ansible's worker handler
  then ends the worker as it would have);
- the stage runner asks it at each safe point (before it records a dispatch, before a guest exec, between polls and at
  the start of each stage) and raises ``RunCancelled``; never between a dispatch record and its send.

Without ``$VMANYWARE_CONTROLLER`` (a run outside Ansible: the reliability driver, unit tests) only signals cancel.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import typing as t

from .errors import VmanywareError

ENV_CONTROLLER = "VMANYWARE_CONTROLLER"
CONTROLLER_GONE = "controller_gone"
RUN_CANCELLED = "run_cancelled"
# A sleep of the run is cut into slices of at most this long (seconds), the cancel checked between them.
SLEEP_SLICE = 0.5
CANCEL_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# (pid, start time in clock ticks since boot), as in /proc/<pid>/stat field 22
Identity = t.Tuple[int, int]


class RunCancelled(VmanywareError):
    """The run stopped at a safe point: its controller is gone (``controller_gone``) or a signal asked it to stop
    (``run_cancelled``). Nothing was sent after the last recorded step; a re-run resumes from the journal."""

    default_code = CONTROLLER_GONE


def process_start(pid: int, proc: str = "/proc") -> int | None:
    """The start time of process ``pid`` (clock ticks after boot), None when it does not exist or is a zombie."""
    try:
        with open("%s/%d/stat" % (proc, pid), "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X", "x"):
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def identity(pid: int, proc: str = "/proc") -> Identity | None:
    """``(pid, start time)`` of a live process, None when it is gone."""
    start = process_start(pid, proc)
    return None if start is None else (pid, start)


def format_identities(identities: t.Iterable[Identity]) -> str:
    return ",".join("%d:%d" % item for item in identities)


def parse_identities(value: str | None) -> list[Identity]:
    """``pid:start,pid:start``; a malformed entry is ignored (it cannot name a process to watch)."""
    found: list[Identity] = []
    for item in (value or "").split(","):
        pid, _sep, start = item.strip().partition(":")
        if pid.isdigit() and start.isdigit():
            found.append((int(pid), int(start)))
    return found


def controller_environment(proc: str = "/proc") -> dict[str, str]:
    """What the action plugin puts in the worker's environment for a task: the controller (the worker's parent) and the
    worker (this process), or nothing when they cannot be read (no /proc: no controller watch)."""
    watched = [identity(os.getppid(), proc), identity(os.getpid(), proc)]
    if any(item is None for item in watched):
        return {}
    return {ENV_CONTROLLER: format_identities(t.cast("list[Identity]", watched))}


class Cancellation:
    """The run's cancel check (``StageSettings.cancel_check``): call it for the reason to stop, None to go on."""

    def __init__(self, watched: t.Sequence[Identity] = (), *, proc: str = "/proc") -> None:
        self.watched = list(watched)
        self.proc = proc
        self.signal_name: str | None = None
        self._caught: int | None = None

    @classmethod
    def from_environment(cls, environ: t.Mapping[str, str] | None = None, *, proc: str = "/proc") -> Cancellation:
        return cls(parse_identities((os.environ if environ is None else environ).get(ENV_CONTROLLER)), proc=proc)

    def __call__(self) -> str | None:
        if self._caught is not None:
            return RUN_CANCELLED
        for pid, start in self.watched:
            if process_start(pid, self.proc) != start:
                return CONTROLLER_GONE
        return None

    def _handle(self, signum: int, frame: t.Any) -> None:
        del frame
        if self._caught is None:
            self._caught = signum
            self.signal_name = signal.Signals(signum).name

    @contextlib.contextmanager
    def signals(self) -> t.Iterator[Cancellation]:
        """SIGTERM and SIGINT only mark the run cancelled while the scope runs (main thread only: elsewhere nothing is
        installed). At its end the previous handlers come back, and a caught signal is delivered again when the
        previous handler was a function of the host program (ansible's worker ends itself there)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous: dict[int, t.Any] = {int(number): signal.getsignal(number) for number in CANCEL_SIGNALS}
        try:
            for signum in CANCEL_SIGNALS:
                signal.signal(signum, self._handle)
            yield self
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
            caught = self._caught
            if caught is not None and callable(previous[caught]) and previous[caught] is not signal.default_int_handler:
                os.kill(os.getpid(), caught)


def raise_if_cancelled(check: t.Callable[[], str | None] | None) -> None:
    """Raise ``RunCancelled`` when ``check`` gives a reason to stop."""
    if check is None:
        return
    reason = check()
    if reason is not None:
        signal_name = getattr(check, "signal_name", None)
        details = {"reason": reason}
        if reason == RUN_CANCELLED and signal_name:
            details["signal"] = signal_name
        message = (
            "The controller of this run (ansible-playbook) is gone; the run stopped before its next request. Re-run to resume."
            if reason == CONTROLLER_GONE
            else "The run was asked to stop (SIGTERM or SIGINT); it stopped before its next request. Re-run to resume."
        )
        raise RunCancelled(message, code=reason, details=details)


def cancellable_sleep(sleep: t.Callable[[float], None], check: t.Callable[[], str | None]) -> t.Callable[[float], None]:
    """``sleep`` in slices of at most ``SLEEP_SLICE`` seconds, ``RunCancelled`` raised before and between them (a pause
    between reads is a safe point)."""

    def pause(seconds: float) -> None:
        raise_if_cancelled(check)
        remaining = max(0.0, float(seconds))
        while True:
            step = min(SLEEP_SLICE, remaining)
            sleep(step)
            remaining -= step
            raise_if_cancelled(check)
            if remaining <= 0:
                return

    return pause
