# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The runner's guest-exec helper and the hooks through which the runner writes every journal record of a stage."""

from __future__ import annotations

import time
import typing as t

import pytest
from hashed_plan import hashed_plan

from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import guest_exec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import PRECHECK_AGENT_REASONS
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import (
    StageContext,
    StageLogic,
    StageSettings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import (
    DEFAULT_RESOLVE_WAIT,
    GuestCommand,
    GuestOutcome,
    Request,
    Resolution,
    StageInProgress,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import FIRST_INTERVAL

HASH = "b" * 64
PROBE = GuestCommand("probe", "uname", ("uname", "-r"))


class FakeAgent:
    """A guest agent: ``exec`` answers the scripted replies, ``exec-status`` the scripted statuses (per PID).

    The guest's files (``files``) back ``file-read``/``file-write``; an exec whose ``started`` entry is true runs the wrapper's
    protocol on them (``.started`` created, the exit code ``exits`` gives, or none while it runs). ``started`` defaults to
    "the reply carried a PID". ``unreadable``: every file-read fails with a server error.
    """

    def __init__(
        self,
        store: JournalStore,
        operation_id: str,
        execs: list[t.Any],
        statuses: list[t.Any],
        started: list[bool] | None = None,
        exits: list[str | None] | None = None,
        unreadable: bool = False,
    ) -> None:
        self.store, self.operation_id = store, operation_id
        self.execs, self.statuses = list(execs), list(statuses)
        self.started = list(started) if started is not None else [isinstance(r, dict) and "pid" in r for r in execs]
        self.exits = list(exits) if exits is not None else ["0"] * len(execs)
        self.unreadable = unreadable
        self.files: dict[str, str] = {}
        self.posts: list[list[str]] = []
        self.markers: list[str] = []  # the marker path of each exec
        self.file_reads: list[str] = []
        self.file_writes: list[str] = []
        self.status_reads: list[int] = []
        self.marker_at_exec: list[t.Any] = []  # the journaled marker when each exec was sent
        self.marker_at_status: list[t.Any] = []

    def run_wrapper(self, marker: str, exit_text: str | None) -> None:
        """What ``guest_exec.EXEC_WRAPPER`` does in the guest (tests/unit/.../_stages/test_guest_exec.py runs the real one too)."""
        if marker + ".started" in self.files:
            return
        self.files[marker + ".started"] = ""
        if marker + ".superseded" in self.files:
            self.files[marker + ".exit"] = "superseded\n"
        elif exit_text is not None:
            self.files[marker + ".exit"] = exit_text + "\n"

    def _evidence(self) -> dict[str, t.Any]:
        return t.cast(dict, self.store.stage(self.store.load(self.operation_id), "clone")["evidence"])

    def post(self, path: str, /, **params: t.Any) -> t.Any:
        if path.endswith("/agent/file-write"):
            self.file_writes.append(params["file"])
            self.files[params["file"]] = params["content"]
            return None
        assert path.endswith("/agent/exec")
        self.marker_at_exec.append(self._evidence().get("probe"))
        marker = guest_exec.marker_of_argv(params["command"])
        assert marker is not None, "every guest command runs through the wrapper"
        self.markers.append(marker)
        self.posts.append(list(params["command"][5:]))
        reply = self.execs.pop(0)
        if self.started.pop(0):
            self.run_wrapper(marker, self.exits.pop(0))
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def get(self, path: str, /, **params: t.Any) -> t.Any:
        if path.endswith("/agent/file-read"):
            self.file_reads.append(params["file"])
            if self.unreadable:
                raise ProviderError(code="server_error", details={"status": 500, "precheck": False})
            if params["file"] not in self.files:
                raise ProviderError(code="not_found", details={"status": 500, "precheck": True})
            return {"content": self.files[params["file"]], "bytes-read": len(self.files[params["file"]])}
        assert path.endswith("/agent/exec-status")
        self.marker_at_status.append(self._evidence().get(self.slot))
        self.status_reads.append(params["pid"])
        reply = self.statuses.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    slot = "probe"


class GuestProbe(StageLogic):
    """A stage whose only work is one guest command, run in ``observe`` (as readiness does)."""

    kind = "clone"
    gates = ("VMANYWARE_PROVISIONING_ENABLED",)

    def __init__(self, command: GuestCommand = PROBE, deadline: float = 300.0) -> None:
        self.command = command
        self.deadline = deadline
        self.outcomes: list[GuestOutcome] = []

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        return None if "deadline" in ctx.evidence() else {"deadline": round(time.time() + self.deadline, 3)}

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        # As readiness: reads cannot tell whether a lost exec ran, so do not read again for the resolve wait (30 s).
        return Resolution.undecidable("The exec's reply was lost.", final=True)

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        outcome = ctx.guest_exec(self.command, deadline=float(ctx.evidence()["deadline"]))
        self.outcomes.append(outcome)
        if outcome.state == "running":
            raise StageInProgress({"pid": outcome.pid}, evidence={"seen": "running"})
        return {"exitcode": outcome.exitcode, "out": outcome.out}

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        return {"ipv4": "192.0.2.10", "probeOut": evidence["out"]}


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.fixture()
def operation_id(store: JournalStore) -> str:
    document, _created = store.create_operation(
        idempotency_key="k",
        provider_scope_id="pve:" + HASH,
        definition={},
        mapping={},
        plan=hashed_plan({}, {}, 201),
        confirmation={},
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=["clone"],
    )
    return t.cast(str, document["operationId"])


def _run(
    store: JournalStore, client: FakeAgent, logic: StageLogic, operation_id: str, **settings: t.Any
) -> dict[str, t.Any]:
    settings.setdefault("sleep", lambda _seconds: None)
    settings.setdefault("environ", {"VMANYWARE_PROVISIONING_ENABLED": "true"})
    return StageRunner(store, client, logic, StageSettings(**settings)).run(operation_id)


def _record(store: JournalStore, operation_id: str) -> dict[str, t.Any]:
    return t.cast(dict, store.stage(store.load(operation_id), "clone"))


def _agent_error(token: str) -> ProviderError:
    return ProviderError(
        code="server_error", details={"status": 500, "agent": token, "precheck": token in PRECHECK_AGENT_REASONS}
    )


def test_marker_then_exec_then_pid_then_poll_and_the_runner_records_checkpoint_and_handoff(
    store: JournalStore, operation_id: str
) -> None:
    running = {"exited": 0}
    done = {"exited": 1, "exitcode": 0, "out-data": "6.1.0\n"}
    agent = FakeAgent(store, operation_id, [{"pid": 41}], [running, done])
    result = _run(store, agent, GuestProbe(), operation_id)
    assert result["done"] and agent.posts == [["uname", "-r"]]
    # The started marker (no PID) was journaled before the exec, the PID before the first exec-status.
    assert agent.marker_at_exec[0]["pid"] is None and agent.marker_at_exec[0]["submissionStarted"] is True
    assert [marker["pid"] for marker in agent.marker_at_status] == [41, 41] and agent.status_reads == [41, 41]
    record = _record(store, operation_id)
    # A repeatable command's marker is cleared once it exited; the checkpoint (deadline) was journaled by the runner.
    assert record["status"] == "completed" and record["evidence"]["probe"] is None and "deadline" in record["evidence"]
    assert record["evidence"]["out"] == "6.1.0\n" and store.load(operation_id)["handoff"]["probeOut"] == "6.1.0\n"


class FakeTime:
    """The runner's wall clock, moved only by its sleeps (recorded)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = time.time()
        self.sleeps: list[float] = []
        monkeypatch.setattr(guest_exec, "wall_clock", lambda: self.now)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_the_status_is_first_read_after_the_first_interval_then_less_and_less_often(
    store: JournalStore, operation_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    running, done = {"exited": 0}, {"exited": 1, "exitcode": 0}
    agent = FakeAgent(store, operation_id, [{"pid": 41}], [running] * 11 + [done])
    clock = FakeTime(monkeypatch)
    assert _run(store, agent, GuestProbe(), operation_id, sleep=clock.sleep)["done"]
    # The task polls' schedule: no status read right after the exec (it always found the command running), the first
    # after FIRST_INTERVAL, then as long as the command has run, never more than half a second apart in its first minute.
    assert clock.sleeps == pytest.approx([0.25, 0.25] + [0.5] * 10, abs=1e-3)  # issuedAt is rounded to 1 ms
    assert len(agent.status_reads) == 12


def test_a_command_running_for_more_than_a_minute_is_read_once_a_second(
    store: JournalStore, operation_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeTime(monkeypatch)
    marker = {"probe": "uname", "pid": 7, "submissionStarted": True, "issuedAt": clock.now - 59.0}
    store.record_evidence(operation_id, "clone", {"probe": marker})
    agent = FakeAgent(store, operation_id, [], [{"exited": 0}] * 3 + [{"exited": 1, "exitcode": 0}])
    assert _run(store, agent, GuestProbe(), operation_id, sleep=clock.sleep)["done"]
    # 59 s: still the first minute's half second; from 60 s on, a second (an install's long tail costs one read a second)
    assert agent.status_reads == [7] * 4 and clock.sleeps == pytest.approx([0.5, 0.5, 1.0], abs=1e-3)


def test_a_resumed_pid_is_read_at_once_then_at_the_pace_of_its_running_time(
    store: JournalStore, operation_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeTime(monkeypatch)
    marker = {"probe": "uname", "pid": 7, "submissionStarted": True, "issuedAt": clock.now - 0.3}
    store.record_evidence(operation_id, "clone", {"probe": marker})
    agent = FakeAgent(store, operation_id, [], [{"exited": 0}, {"exited": 0}, {"exited": 1, "exitcode": 0}])
    assert _run(store, agent, GuestProbe(), operation_id, sleep=clock.sleep)["done"]
    # running for 0.3 s: the next read as long after (0.3 s), then capped at half a second; not from 0.25 s again
    assert agent.posts == [] and agent.status_reads == [7, 7, 7] and clock.sleeps == pytest.approx([0.3, 0.5], abs=1e-3)


def test_a_short_command_costs_one_status_read(
    store: JournalStore, operation_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = FakeAgent(store, operation_id, [{"pid": 41}], [{"exited": 1, "exitcode": 0, "out-data": "6.1.0\n"}])
    # The fake clock: on a loaded machine the real one moves between the exec and the pause, shortening it.
    clock = FakeTime(monkeypatch)
    assert _run(store, agent, GuestProbe(), operation_id, sleep=clock.sleep)["done"]
    assert agent.status_reads == [41] and clock.sleeps == pytest.approx([FIRST_INTERVAL], abs=1e-3)


def test_the_pauses_end_with_the_wait_budget(
    store: JournalStore, operation_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = FakeAgent(store, operation_id, [{"pid": 41}], [{"exited": 0}] * 50)
    clock = FakeTime(monkeypatch)
    sleeps = clock.sleeps
    result = _run(store, agent, GuestProbe(), operation_id, sleep=clock.sleep, wait_budget=0.3)
    assert not result["done"] and result["progress"] == {"pid": 41}
    # 0.25, then what is left of the 0.3 s (not a whole 0.25 s interval), then one last read
    assert sleeps == pytest.approx([0.25, 0.05], abs=1e-3) and len(agent.status_reads) == 2


def test_a_journaled_pid_is_resumed_by_get_only(store: JournalStore, operation_id: str) -> None:
    store.record_evidence(
        operation_id, "clone", {"probe": {"probe": "uname", "pid": 7, "submissionStarted": True, "issuedAt": 1.0}}
    )
    agent = FakeAgent(store, operation_id, [], [{"exited": 1, "exitcode": 3}])
    sleeps: list[float] = []
    assert _run(store, agent, GuestProbe(), operation_id, sleep=sleeps.append)["done"]
    assert agent.posts == [] and agent.status_reads == [7] and _record(store, operation_id)["evidence"]["exitcode"] == 3
    assert sleeps == []  # a command started by an earlier run is read at once


# An exec reply that does not prove a pre-check refusal: lost, a 500 such as ``guest-exec failed - got timeout``, no PID.
AMBIGUOUS_REPLIES = [
    ProviderError(code="reply_lost"),
    ProviderError(code="server_error", details={"status": 500, "precheck": False}),
    {"unexpected": True},
]


@pytest.mark.parametrize("reply", AMBIGUOUS_REPLIES)
def test_an_ambiguous_exec_that_started_is_followed_through_its_marker_never_issued_again(
    store: JournalStore, operation_id: str, reply: t.Any
) -> None:
    install = GuestCommand("probe", "install", ("apt-get", "install", "-y", "--", "x; rm -rf /"), repeatable=False)
    agent = FakeAgent(store, operation_id, [reply], [], started=[True], exits=["3"])
    logic = GuestProbe(install)
    assert _run(store, agent, logic, operation_id)["done"]
    marker = agent.markers[0]
    # One exec; the outcome came from the marker files (exit code 3), no superseded file was written (it had started).
    assert (
        agent.posts == [["apt-get", "install", "-y", "--", "x; rm -rf /"]]
        and agent.status_reads == []
        and agent.file_writes == []
    )
    assert logic.outcomes == [GuestOutcome("exited", None, 3)]
    assert marker.startswith(guest_exec.EXEC_MARKER_PREFIX + operation_id + "-probe-")
    assert agent.marker_at_exec[0]["file"] == marker  # journaled before the exec was sent
    assert _record(store, operation_id)["evidence"]["probe"]["exitcode"] == 3


@pytest.mark.parametrize("reply", AMBIGUOUS_REPLIES)
def test_an_ambiguous_exec_that_never_started_is_superseded_then_sent_afresh(
    store: JournalStore, operation_id: str, reply: t.Any
) -> None:
    agent = FakeAgent(
        store,
        operation_id,
        [reply, {"pid": 42}],
        [{"exited": 1, "exitcode": 0, "out-data": "6.1\n"}],
        started=[False, True],
    )
    assert _run(store, agent, GuestProbe(), operation_id)["done"]
    first, second = agent.markers
    # The late start of the first was refused (superseded written and read back absent) before the second exec; a new marker.
    assert agent.file_writes == [first + ".superseded"] and first != second
    assert agent.file_reads[:2] == [first + ".started", first + ".started"]
    agent.run_wrapper(first, "0")  # the agent gets to its queue late: the wrapper refuses
    assert agent.files[first + ".exit"] == "superseded\n"
    assert agent.posts == [["uname", "-r"], ["uname", "-r"]] and agent.status_reads == [42]


def test_a_repeatable_command_that_started_and_exited_runs_afresh_for_its_output(
    store: JournalStore, operation_id: str
) -> None:
    agent = FakeAgent(
        store,
        operation_id,
        [ProviderError(code="reply_lost"), {"pid": 43}],
        [{"exited": 1, "exitcode": 0}],
        started=[True, True],
    )
    assert _run(store, agent, GuestProbe(), operation_id)["done"]
    assert len(agent.posts) == 2 and agent.file_writes == [] and agent.status_reads == [43]


@pytest.mark.parametrize("reply", AMBIGUOUS_REPLIES)
def test_an_ambiguous_exec_whose_marker_cannot_be_read_is_uncertain_and_never_issued_again(
    store: JournalStore, operation_id: str, reply: t.Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = FakeAgent(store, operation_id, [reply], [], started=[True], unreadable=True)
    clock = FakeTime(monkeypatch)
    for _attempt in range(2):
        with pytest.raises(VmanywareError) as info:
            _run(store, agent, GuestProbe(), operation_id, sleep=clock.sleep)
        assert info.value.code == "outcome_uncertain"
    # The marker was read again for a while (the agent may come back), then given up: never an exec again.
    assert DEFAULT_RESOLVE_WAIT <= sum(clock.sleeps) < DEFAULT_RESOLVE_WAIT + 2
    record = _record(store, operation_id)
    assert len(agent.posts) == 1 and agent.status_reads == []
    assert (
        record["status"] == "uncertain"
        and record["request"]["probe"] == "uname"
        and record["evidence"]["probe"]["pid"] is None
    )
    assert record["request"]["marker"] == agent.markers[0]


def test_a_marker_without_its_guest_file_from_an_older_version_stays_uncertain(
    store: JournalStore, operation_id: str
) -> None:
    store.record_evidence(operation_id, "clone", {"probe": {"probe": "uname", "pid": None, "submissionStarted": True}})
    agent = FakeAgent(store, operation_id, [], [])
    with pytest.raises(VmanywareError) as info:
        _run(store, agent, GuestProbe(), operation_id)
    assert info.value.code == "outcome_uncertain" and agent.posts == [] and agent.file_reads == []


def test_the_wrapper_in_a_real_posix_shell_runs_once_refuses_when_superseded_and_never_interpolates(
    tmp_path: t.Any,
) -> None:
    import shutil
    import subprocess

    shell = shutil.which("dash") or "/bin/sh"
    marker = str(tmp_path / "m")
    argv = guest_exec.wrap_guest_argv(
        marker, ["sh", "-c", 'printf "%s|" "$@"; exit 4', "x", "a b", "$(touch %s)" % (tmp_path / "pwned"), "'"]
    )
    argv[0] = shell
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 4 and done.stdout == "a b|$(touch %s)|'|" % (tmp_path / "pwned")
    assert (
        not (tmp_path / "pwned").exists()
        and (tmp_path / "m.started").exists()
        and (tmp_path / "m.exit").read_text() == "4\n"
    )
    again = subprocess.run(argv, capture_output=True, text=True, check=False)  # the same marker never runs twice
    assert again.returncode == 125 and again.stdout == ""
    late = str(tmp_path / "late")
    (tmp_path / "late.superseded").write_text("superseded\n")
    refused = subprocess.run(
        [shell, *guest_exec.wrap_guest_argv(late, ["touch", str(tmp_path / "ran")])[1:]],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        refused.returncode == 125
        and not (tmp_path / "ran").exists()
        and (tmp_path / "late.exit").read_text() == "superseded\n"
    )


def test_a_definite_refusal_clears_the_marker(store: JournalStore, operation_id: str) -> None:
    agent = FakeAgent(store, operation_id, [_agent_error("exec_disabled")], [])
    with pytest.raises(VmanywareError) as info:
        _run(store, agent, GuestProbe(), operation_id)
    assert info.value.code == "guest_exec_unavailable" and _record(store, operation_id)["evidence"]["probe"] is None


def test_a_write_command_checks_the_gates_before_a_new_exec_only(store: JournalStore, operation_id: str) -> None:
    update = GuestCommand("probe", "apt-get-update", ("apt-get", "update"), write=True)
    agent = FakeAgent(store, operation_id, [], [])
    with pytest.raises(VmanywareError) as info:
        _run(store, agent, GuestProbe(update), operation_id, environ={"VMANYWARE_PROVISIONING_ENABLED": "false"})
    assert (
        info.value.code == "provisioning_disabled"
        and agent.posts == []
        and "probe" not in _record(store, operation_id)["evidence"]
    )
    # A journaled one is followed by GET even with the gate closed (no new write).
    store.record_evidence(
        operation_id, "clone", {"probe": {"probe": "apt-get-update", "pid": 9, "submissionStarted": True}}
    )
    agent = FakeAgent(store, operation_id, [], [{"exited": 1, "exitcode": 0}])
    assert _run(store, agent, GuestProbe(update), operation_id, environ={"VMANYWARE_PROVISIONING_ENABLED": "false"})[
        "done"
    ]
    assert agent.posts == [] and agent.status_reads == [9]


def test_a_consumed_status_reissues_a_repeatable_command_but_not_a_one_shot(
    store: JournalStore, operation_id: str
) -> None:
    store.record_evidence(operation_id, "clone", {"probe": {"probe": "uname", "pid": 5, "submissionStarted": True}})
    agent = FakeAgent(store, operation_id, [{"pid": 6}], [_agent_error("unknown_pid"), {"exited": 1, "exitcode": 0}])
    assert _run(store, agent, GuestProbe(), operation_id)["done"]
    assert agent.posts == [["uname", "-r"]] and agent.status_reads == [5, 6]

    install = GuestCommand("probe", "install", ("apt-get", "install"), repeatable=False)
    other = _second_operation(store)
    store.record_evidence(other, "clone", {"probe": {"probe": "install", "pid": 8, "submissionStarted": True}})
    agent = FakeAgent(store, other, [], [_agent_error("unknown_pid")])
    logic = GuestProbe(install)
    assert _run(store, agent, logic, other)["done"]
    assert agent.posts == [] and logic.outcomes == [GuestOutcome("exited", 8)]
    assert _record(store, other)["evidence"]["probe"] == {
        "probe": "install",
        "pid": 8,
        "submissionStarted": True,
        "exitcode": None,
    }


def test_the_budget_returns_running_and_journals_the_hooks_evidence_the_deadline_times_out(
    store: JournalStore, operation_id: str
) -> None:
    agent = FakeAgent(store, operation_id, [{"pid": 11}], [{"exited": 0}])
    result = _run(store, agent, GuestProbe(), operation_id, wait_budget=0.0)
    record = _record(store, operation_id)
    assert not result["done"] and result["progress"] == {"pid": 11}
    assert (
        record["status"] == "pending"
        and record["evidence"]["seen"] == "running"
        and record["evidence"]["probe"]["pid"] == 11
    )

    other = _second_operation(store)
    agent = FakeAgent(store, other, [{"pid": 12}], [{"exited": 0}])
    logic = GuestProbe(deadline=-1.0)
    _run(store, agent, logic, other)
    assert logic.outcomes == [GuestOutcome("timeout", 12)]


def test_check_mode_journals_no_checkpoint_and_execs_nothing(store: JournalStore, operation_id: str) -> None:
    agent = FakeAgent(store, operation_id, [], [])
    _run(store, agent, GuestProbe(), operation_id, check_mode=True)
    assert agent.posts == [] and _record(store, operation_id)["evidence"] == {}
    with pytest.raises(VmanywareError) as info:  # the helper itself refuses in check mode
        StageRunner(store, agent, GuestProbe(), StageSettings(check_mode=True)).guest_exec(
            StageContext(operation=store.load(operation_id), client=agent, kind="clone"), PROBE, time.time() + 60
        )
    assert info.value.code == "internal_error" and agent.posts == []


def _second_operation(store: JournalStore) -> str:
    document, _created = store.create_operation(
        idempotency_key="k2",
        provider_scope_id="pve:" + HASH,
        definition={},
        mapping={},
        plan=hashed_plan({}, {}, 202),
        confirmation={},
        target_node="pve-test",
        target_vmid=202,
        stage_kinds=["clone"],
    )
    return t.cast(str, document["operationId"])


def test_the_simulated_guest_runs_the_same_wrapper_text() -> None:
    from pvesim.guest.commands import EXEC_WRAPPER  # pylint: disable=import-outside-toplevel

    assert EXEC_WRAPPER == guest_exec.EXEC_WRAPPER
