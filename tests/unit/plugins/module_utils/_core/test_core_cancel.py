# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Cancel means stop (``_cancel``): the controller watch, the signals, and the stage runner's safe points."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
from pve_fake import FakeClient
from test_runner import UPID, CloneLike, FakeTime, scripted, sent, store, operation_id  # noqa: F401  # pylint: disable=unused-import

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core import cancel as _cancel
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.cancel import (
    CONTROLLER_GONE,
    ENV_CONTROLLER,
    RUN_CANCELLED,
    Cancellation,
    RunCancelled,
    cancellable_sleep,
    parse_identities,
    process_start,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings

ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


def _stat(tmp_path: Path, pid: int, start: int, state: str = "S", name: str = "ansible-playbook") -> None:
    (tmp_path / str(pid)).mkdir(exist_ok=True)
    fields = [state, "1", "1", "1"] + ["0"] * 15 + [str(start)] + ["0"] * 10
    (tmp_path / str(pid) / "stat").write_text("%d (%s) %s\n" % (pid, name, " ".join(fields)), encoding="ascii")


def test_codes_are_registered() -> None:
    assert CONTROLLER_GONE in ERROR_CODES and RUN_CANCELLED in ERROR_CODES


def test_the_start_time_of_this_process_is_read_and_a_missing_pid_is_gone() -> None:
    assert isinstance(process_start(os.getpid()), int)
    assert process_start(2**22 + 12345) is None


def test_a_reused_pid_a_zombie_and_an_odd_command_name(tmp_path: Path) -> None:
    _stat(tmp_path, 4242, 777, name="a) b (c")
    watch = Cancellation([(4242, 777)], proc=str(tmp_path))
    assert watch() is None
    _stat(tmp_path, 4242, 778)  # the pid now belongs to another process
    assert watch() == CONTROLLER_GONE
    _stat(tmp_path, 4242, 777, state="Z")  # killed, not yet reaped
    assert watch() == CONTROLLER_GONE
    (tmp_path / "4242" / "stat").unlink()
    assert watch() == CONTROLLER_GONE


def test_the_environment_names_what_to_watch(tmp_path: Path) -> None:
    _stat(tmp_path, 10, 5)
    _stat(tmp_path, 11, 6)
    assert parse_identities("10:5, 11:6,junk,:3") == [(10, 5), (11, 6)]
    assert Cancellation.from_environment({ENV_CONTROLLER: "10:5,11:6"}, proc=str(tmp_path))() is None
    assert Cancellation.from_environment({ENV_CONTROLLER: "10:5,12:6"}, proc=str(tmp_path))() == CONTROLLER_GONE
    assert Cancellation.from_environment({}, proc=str(tmp_path)).watched == []


def test_controller_environment_names_the_parent_and_this_process() -> None:
    value = _cancel.controller_environment()[ENV_CONTROLLER]
    assert [pid for pid, _start in parse_identities(value)] == [os.getppid(), os.getpid()]
    assert Cancellation(parse_identities(value))() is None


def test_a_real_dead_parent_is_seen(tmp_path: Path) -> None:
    """A child watching its parent (the controller) by the environment the action plugin gives it: the parent is killed."""
    script = (
        "import os,sys,time\n"
        "from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.cancel import Cancellation, controller_environment\n"
        "watch = Cancellation.from_environment(controller_environment())\n"
        "print(watch(), flush=True)\n"
        "sys.stdin.readline()\n"
        "for _ in range(100):\n"
        "    if watch():\n"
        "        break\n"
        "    time.sleep(0.05)\n"
        "print(watch(), flush=True)\n"
    )
    out = tmp_path / "out"
    # a parent shell that starts the watcher and is then killed while its child lives on
    parent = subprocess.Popen(
        ["/bin/sh", "-c", '%s -c "$0" > %s; :' % (sys.executable, out), script],
        stdin=subprocess.PIPE,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    try:
        for _attempt in range(200):
            if out.exists() and out.read_text():
                break
            time.sleep(0.05)
        assert out.read_text().split() == ["None"]
        parent.kill()
        parent.wait()
        assert parent.stdin is not None
        parent.stdin.write(b"go\n")
        parent.stdin.close()
        for _attempt in range(200):
            if len(out.read_text().split()) == 2:
                break
            time.sleep(0.05)
        assert out.read_text().split() == ["None", CONTROLLER_GONE]
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_signal_in_the_scope_only_marks_the_run_and_is_delivered_again_to_the_previous_handler() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda number, frame: seen.append(number))
    try:
        watch = Cancellation()
        with watch.signals():
            os.kill(os.getpid(), signal.SIGTERM)
            assert watch() == RUN_CANCELLED and watch.signal_name == "SIGTERM"
            assert seen == []
        assert seen == [signal.SIGTERM]  # the host's handler (ansible's worker) gets it once the run stopped
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigint_with_pythons_default_handler_is_not_raised_again() -> None:
    # Python's own SIGINT handler, whatever an earlier test of the session (an in-process ansible run) left installed.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        watch = Cancellation()
        with watch.signals():
            os.kill(os.getpid(), signal.SIGINT)
        assert watch() == RUN_CANCELLED and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_sleep_is_cut_into_slices_and_raises_between_them() -> None:
    fake = FakeTime()
    stop_after = [3]

    def check() -> str | None:
        stop_after[0] -= 1
        return CONTROLLER_GONE if stop_after[0] < 0 else None

    pause = cancellable_sleep(fake.sleep, check)
    with pytest.raises(RunCancelled) as caught:
        pause(5.0)
    assert caught.value.code == CONTROLLER_GONE and fake.slept == [0.5, 0.5, 0.5]
    fake.slept.clear()
    cancellable_sleep(fake.sleep, lambda: None)(1.2)
    assert fake.slept == pytest.approx([0.5, 0.5, 0.2])


def _runner(store: JournalStore, client: FakeClient, check: t.Callable[[], str | None]) -> StageRunner:
    fake = FakeTime()
    return StageRunner(
        store, client, CloneLike(), StageSettings(sleep=fake.sleep, clock=fake.clock, environ=ON, cancel_check=check)
    )


def test_a_gone_controller_stops_the_stage_before_its_dispatch_is_recorded(
    store: JournalStore, operation_id: str
) -> None:  # noqa: F811
    client = scripted([UPID])
    with pytest.raises(RunCancelled) as caught:
        _runner(store, client, lambda: CONTROLLER_GONE).run(operation_id)
    assert caught.value.code == CONTROLLER_GONE
    record = store.stage(store.load(operation_id), "clone")
    assert sent(client) == [] and record["status"] == "pending" and not record["submissionStarted"]
    assert record["evidence"]["cancelled"]["code"] == CONTROLLER_GONE and record["evidence"]["cancelled"][
        "at"
    ].endswith("Z")
    # a re-run with its controller alive dispatches once
    result = _runner(store, client, lambda: None).run(operation_id)
    assert result["done"] and sent(client) == [("POST", "/nodes/pve-test/qemu/9000/clone")]


def test_the_run_is_never_stopped_between_the_dispatch_record_and_its_send(
    store: JournalStore, operation_id: str
) -> None:  # noqa: F811
    """The check passes up to the record; from the record on the controller is gone: the request is still sent (the one
    already dispatched) and the run stops at the next pause, while it follows the task by reads."""
    state = {"gone": False}
    original = store.record_dispatch

    def record_dispatch(*args: t.Any, **kwargs: t.Any) -> dict[str, t.Any]:
        document = original(*args, **kwargs)
        state["gone"] = True
        return document

    store.record_dispatch = record_dispatch  # type: ignore[method-assign]
    client = scripted([UPID], statuses=[{"status": "running"}, {"status": "stopped", "exitstatus": "OK"}])
    with pytest.raises(RunCancelled):
        _runner(store, client, lambda: CONTROLLER_GONE if state["gone"] else None).run(operation_id)
    record = store.stage(store.load(operation_id), "clone")
    assert sent(client) == [("POST", "/nodes/pve-test/qemu/9000/clone")]
    assert (
        record["status"] == "submitted"
        and record["upid"] == UPID
        and record["evidence"]["cancelled"]["code"] == CONTROLLER_GONE
    )
    # the re-run follows the recorded task by reads only
    store.record_dispatch = original  # type: ignore[method-assign]
    result = _runner(store, client, lambda: None).run(operation_id)
    assert result["done"] and sent(client) == [("POST", "/nodes/pve-test/qemu/9000/clone")]


def test_a_signal_stops_the_stage_with_run_cancelled(store: JournalStore, operation_id: str) -> None:  # noqa: F811
    watch = Cancellation()
    client = scripted([UPID])
    with watch.signals():
        os.kill(os.getpid(), signal.SIGINT)
        with pytest.raises(RunCancelled) as caught:
            _runner(store, client, watch).run(operation_id)
    assert caught.value.code == RUN_CANCELLED and caught.value.details["signal"] == "SIGINT" and sent(client) == []
    cancelled = store.stage(store.load(operation_id), "clone")["evidence"]["cancelled"]
    assert cancelled["code"] == RUN_CANCELLED and cancelled["signal"] == "SIGINT"
