# SPDX-License-Identifier: GPL-3.0-or-later
"""UPID parsing and the task poller (fake clock, fake client)."""

from __future__ import annotations

import typing as t

import pytest
from pve_fake import FakeClient, envelope, in_turn

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, TaskError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import (
    TaskOutcome,
    parse_upid,
    poll_once,
    sanitize_log_line,
    wait_task,
)

UPID = "UPID:pve:0000A1B2:0012D687:6650F00D:qmclone:9000:automation@pve!vmanyware:"
TASK = "/nodes/pve/tasks/" + UPID


class FakeClock:
    def __init__(self, task_age: float = 0.0) -> None:
        self.now = 1000.0
        self.task_age = task_age  # how long the task of UPID had run when the wait began
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        """Epoch seconds: the UPID's start time plus the task's age."""
        return 0x6650F00D + self.task_age + self.now - 1000.0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 4))
        self.now += seconds


def task_client(statuses: list[t.Any], log: list[str] | None = None) -> FakeClient:
    """Status GETs answered from a script (dicts, or ProviderError codes to raise), the last repeated; log GETs from ``log``."""
    lines = [{"n": i + 1, "t": text} for i, text in enumerate(log or [])]
    answers = [ProviderError(code=item) if isinstance(item, str) else item for item in statuses]
    return FakeClient(
        {
            TASK + "/status": in_turn(*answers),
            TASK + "/log": lambda params: envelope(
                lines[params["start"] : params["start"] + params["limit"]], total=len(lines)
            ),
        }
    )


RUNNING = {"status": "running", "upid": UPID}


def test_parse_upid() -> None:
    upid = parse_upid(UPID)
    assert (upid.node, upid.pid, upid.pstart, upid.starttime, upid.type, upid.id, upid.user) == (
        "pve",
        0xA1B2,
        0x12D687,
        0x6650F00D,
        "qmclone",
        "9000",
        "automation@pve!vmanyware",
    )
    assert parse_upid("UPID:pve:00001234:00000001:00000002:vzdump::root@pam:").id == ""


@pytest.mark.parametrize(
    "bad",
    [
        None,
        42,
        "",
        "UPID:pve:1234",
        UPID[:-1],
        UPID.replace("UPID", "UPIX"),
        UPID.replace("0000A1B2", "zzzz"),
        UPID.replace("automation@pve!vmanyware", "nouser"),
        UPID + "extra:",
        "UPID:pve:1:2:3:type:id:user@pam:\n",
    ],
)
def test_parse_upid_malformed(bad: t.Any) -> None:
    with pytest.raises(ProviderError) as info:
        parse_upid(bad)
    assert info.value.code == "unexpected_response"
    assert "zzzz" not in info.value.message


def test_wait_ok_with_adaptive_interval() -> None:
    clock = FakeClock()
    client = task_client([RUNNING] * 4 + [{"status": "stopped", "exitstatus": "OK"}])
    outcome = wait_task(client, UPID, timeout=60, clock=clock.clock, sleep=clock.sleep, wall=clock.wall)
    assert outcome == TaskOutcome(upid=UPID, status="ok", exitstatus="OK")
    assert outcome.succeeded and outcome.raise_for_outcome() is outcome
    # the first poll waits 0.25 s (a task is never done when accepted), then each pause is as long as the wait so far
    # (polls at 0.25, 0.5, 1.0 s), up to half a second
    assert clock.sleeps == [0.25, 0.25, 0.5, 0.5, 0.5] and len(client.log) == 5
    assert client.log[0] == ("GET", f"/nodes/pve/tasks/{UPID}/status", {})


def test_interval_caps_at_half_a_second_in_the_first_minute_then_at_one_second() -> None:
    clock = FakeClock()
    client = task_client([RUNNING] * 130 + [{"status": "stopped", "exitstatus": "OK"}])
    wait_task(client, UPID, timeout=600, clock=clock.clock, sleep=clock.sleep, wall=clock.wall)
    first_minute = [s for i, s in enumerate(clock.sleeps) if sum(clock.sleeps[:i]) < 60]
    later = clock.sleeps[len(first_minute) :]
    assert max(first_minute) == 0.5 and first_minute[-1] == 0.5 and later and set(later) == {1.0}
    assert len(clock.sleeps) == 131 and len(first_minute) == 121


def test_a_task_older_than_a_minute_is_polled_once_a_second_from_the_start_of_a_later_wait() -> None:
    # a resumed operation or the next round of a wait budget: the pace follows the task's age (its UPID start time)
    clock = FakeClock(task_age=90.0)
    client = task_client([RUNNING] * 3 + [{"status": "stopped", "exitstatus": "OK"}])
    wait_task(client, UPID, timeout=60, clock=clock.clock, sleep=clock.sleep, wall=clock.wall)
    assert clock.sleeps == [0.25, 0.25, 0.5, 1.0]


def test_wait_warnings() -> None:
    clock = FakeClock()
    outcome = wait_task(
        task_client([{"status": "stopped", "exitstatus": "WARNINGS: 2"}]),
        UPID,
        timeout=5,
        clock=clock.clock,
        sleep=clock.sleep,
    )
    assert (outcome.status, outcome.warnings, outcome.succeeded, outcome.error_code) == ("warnings", 2, True, None)


def test_wait_failed_with_sanitized_log_tail() -> None:
    clock = FakeClock()
    log = [f"line {i}" for i in range(45)] + ["\x1b[31mTASK ERROR: clone failed\x07", "x" * 1000]
    client = task_client([RUNNING, {"status": "stopped", "exitstatus": "clone failed: storage full"}], log)
    outcome = wait_task(client, UPID, timeout=5, clock=clock.clock, sleep=clock.sleep)
    assert outcome.status == "failed" and outcome.exitstatus == "clone failed: storage full"
    assert len(outcome.log_tail) == 20
    assert outcome.log_tail[0] == "line 27"
    assert outcome.log_tail[-2] == "[31mTASK ERROR: clone failed"
    assert len(outcome.log_tail[-1]) == 240 and outcome.log_tail[-1].endswith("...")
    log_calls = [c for c in client.log if c[1].endswith("/log")]
    assert [c[2] for c in log_calls] == [{"start": 0, "limit": 20}, {"start": 27, "limit": 20}]
    with pytest.raises(TaskError) as info:
        outcome.raise_for_outcome()
    assert info.value.code == "task_failed" and info.value.details["upid"] == UPID


def test_wait_timeout() -> None:
    clock = FakeClock()
    outcome = wait_task(task_client([RUNNING]), UPID, timeout=10, clock=clock.clock, sleep=clock.sleep)
    assert outcome.status == "timeout" and outcome.error_code == "task_timeout"
    assert clock.now == pytest.approx(1010.0)  # never sleeps past the deadline


@pytest.mark.parametrize("code", ["transport_lost", "server_error", "reply_lost"])
def test_wait_unobservable_after_repeated_errors(code: str) -> None:
    clock = FakeClock()
    client = task_client([RUNNING, code, code, code, RUNNING])
    outcome = wait_task(client, UPID, timeout=60, clock=clock.clock, sleep=clock.sleep)
    assert outcome.status == "unobservable" and outcome.error_code == "task_unobservable"
    assert len(client.log) == 4


def test_wait_transient_error_then_success() -> None:
    clock = FakeClock()
    client = task_client([RUNNING, "server_error", "server_error", {"status": "stopped", "exitstatus": "OK"}])
    assert wait_task(client, UPID, timeout=60, clock=clock.clock, sleep=clock.sleep).status == "ok"


def test_wait_unobservable_at_once_on_permission_error() -> None:
    clock = FakeClock()
    client = task_client(["permission_denied"])
    assert wait_task(client, UPID, timeout=60, clock=clock.clock, sleep=clock.sleep).status == "unobservable"
    assert len(client.log) == 1


def test_poll_once() -> None:
    assert poll_once(task_client([RUNNING]), UPID).status == "running"
    assert poll_once(task_client([{"status": "stopped", "exitstatus": "OK"}]), parse_upid(UPID)).status == "ok"
    assert poll_once(task_client(["server_error"]), UPID).status == "unobservable"
    assert poll_once(task_client([{"status": "weird"}]), UPID).status == "unobservable"


def test_sanitize() -> None:
    assert sanitize_log_line("a\tb\r\nc\u2028d\x00") == "abcd"
    assert sanitize_log_line("y" * 10, max_length=8) == "yyyyy..."


def test_provider_text_is_redacted_and_capped_before_any_result() -> None:
    """Issue 31: a task's exit status and log lines pass the one redaction list and the caps (lines, characters)."""
    clock = FakeClock()
    secret = "0b6f1c2e-1111-2222-3333-444455556666"
    log = [
        "login with password=hunter2 failed",
        "Authorization: PVEAPIToken=ci@pve!t=" + secret,
        "y" * 50 + " ticket=" + "z" * 10_000,
        "w" * 1_000_000,
    ] * 10
    client = task_client([{"status": "stopped", "exitstatus": "command failed: token=" + secret}], log)
    outcome = wait_task(client, UPID, timeout=5, clock=clock.clock, sleep=clock.sleep)
    assert outcome.exitstatus == "command failed: token=<redacted>"
    assert len(outcome.log_tail) == 20 and all(len(line) <= 240 for line in outcome.log_tail)
    assert outcome.log_tail[-4:-1] == (
        "login with password=<redacted> failed",
        "Authorization: <redacted>",
        "y" * 50 + " ticket=<redacted>",
    )
    with pytest.raises(TaskError) as info:
        outcome.raise_for_outcome()
    shown = repr(info.value.to_result())
    assert "hunter2" not in shown and secret not in shown and "zzz" not in shown and len(shown) < 20 * 240 + 1024


def test_a_secret_cut_by_the_cap_shows_no_part_of_it() -> None:
    line = "x" * 225 + " password=" + "Q" * 50  # the cap falls inside the value
    assert sanitize_log_line(line) == ("x" * 225 + " password=<redacted>")[:237] + "..."
    assert sanitize_log_line("p" * 2000 + " password=abc") == "p" * 237 + "..."
