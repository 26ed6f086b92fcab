# SPDX-License-Identifier: GPL-3.0-or-later
"""The stage protocol, driven by a scripted client and a minimal stage (no simulator needed)."""

from __future__ import annotations

import time
import typing as t

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import (
    Request,
    Resolution,
    StageContext,
    StageInProgress,
    StageLogic,
    StageRunner,
    StageSettings,
)

UPID = "UPID:pve-test:00001234:00005678:65000000:qmclone:9000:vmanyware@pve!full:"
HASH = "a" * 64


class ScriptedClient:
    """Answers mutations from a script (a value, or an exception to raise) and task status GETs from a list."""

    def __init__(self, replies: list[t.Any], statuses: list[dict[str, t.Any]] | None = None) -> None:
        self.replies = list(replies)
        self.statuses = list(statuses or [{"status": "stopped", "exitstatus": "OK"}])
        self.sent: list[tuple[str, str]] = []
        self.gets: list[str] = []

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        if method == "GET":
            return {"data": self.get(path, **dict(params or {}))}
        self.sent.append((method, path))
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return {"data": reply}

    def get(self, path: str, /, **params: t.Any) -> t.Any:
        self.gets.append(path)
        if path.endswith("/status"):
            return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        if path.endswith("/log"):
            return [{"n": 1, "t": "TASK ERROR: no space left"}]
        raise AssertionError("unexpected GET " + path)


class CloneLike(StageLogic):
    kind = "clone"
    task_type = "qmclone"

    def __init__(self, resolution: Resolution | None = None, harmless: bool = False, observed: dict[str, t.Any] | None = None) -> None:
        self.resolution = resolution or Resolution.undecidable("Check the task list.")
        self.resend_harmless = harmless  # type: ignore[misc]
        self.observed = observed if observed is not None else {"volid": "local-lvm:vm-201-disk-0"}
        self.resolved = 0

    def request(self, ctx: StageContext) -> Request:
        return Request("POST", "/nodes/pve-test/qemu/9000/clone", {"newid": ctx.vmid, "full": 1})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        return dict(self.observed)

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        self.resolved += 1
        return self.resolution


def _lost() -> ProviderError:
    return ProviderError(code="reply_lost", details={"method": "POST"})


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.fixture()
def operation_id(store: JournalStore) -> str:
    plan = {"definitionHash": HASH, "planHash": HASH}
    document, _created = store.create_operation(
        idempotency_key="k", provider_scope_id="pve:" + HASH, definition={}, mapping={}, plan=plan, confirmation={},
        target_node="pve-test", target_vmid=201, stage_kinds=["clone", "resources"])
    return t.cast(str, document["operationId"])


def _run(store: JournalStore, client: ScriptedClient, logic: StageLogic, operation_id: str, **settings: t.Any) -> dict[str, t.Any]:
    settings.setdefault("sleep", lambda _s: None)
    return StageRunner(store, client, logic, StageSettings(**settings)).run(operation_id)


def test_happy_path_records_dispatch_upid_and_evidence(store: JournalStore, operation_id: str) -> None:
    client = ScriptedClient([UPID])
    result = _run(store, client, CloneLike(), operation_id)
    assert result["changed"] and result["done"] and result["stage"]["status"] == "completed"
    assert result["stage"]["upid"] == UPID and result["stage"]["evidence"] == {"volid": "local-lvm:vm-201-disk-0"}
    assert client.sent == [("POST", "/nodes/pve-test/qemu/9000/clone")]
    assert result["requests"][0]["params"] == {"newid": 201, "full": 1}


def test_rerun_after_success_sends_nothing(store: JournalStore, operation_id: str) -> None:
    _run(store, ScriptedClient([UPID]), CloneLike(), operation_id)
    client = ScriptedClient([])
    result = _run(store, client, CloneLike(), operation_id)
    assert not result["changed"] and result["done"] and client.sent == [] and client.gets == []


def test_dispatch_is_durable_before_the_request_is_sent(store: JournalStore, operation_id: str) -> None:
    seen: list[str] = []

    class Spy(ScriptedClient):
        def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
            if method != "GET":
                seen.append(store.stage(store.load(operation_id), "clone")["status"])
            return super().request(method, path, params)

    _run(store, Spy([UPID]), CloneLike(), operation_id)
    assert seen == ["dispatching"]


def test_known_upid_is_reconciled_by_get_only(store: JournalStore, operation_id: str) -> None:
    running = [{"status": "running"}]
    first = _run(store, ScriptedClient([UPID], statuses=running), CloneLike(), operation_id, wait_budget=0)
    assert first["done"] is False and first["stage"]["status"] == "submitted"
    client = ScriptedClient([])
    second = _run(store, client, CloneLike(), operation_id)
    assert second["done"] and client.sent == [] and all(path.endswith("/status") for path in client.gets)


def test_lost_reply_undecidable_stays_uncertain_and_never_resends(store: JournalStore, operation_id: str) -> None:
    logic = CloneLike()
    with pytest.raises(VmanywareError) as info:
        _run(store, ScriptedClient([_lost()]), logic, operation_id)
    assert info.value.code == "outcome_uncertain" and "task list" in info.value.message
    assert store.stage(store.load(operation_id), "clone")["status"] == "uncertain"
    client = ScriptedClient([])
    with pytest.raises(VmanywareError):
        _run(store, client, logic, operation_id)
    assert client.sent == [] and logic.resolved == 2


def test_lost_reply_resolved_as_applied_follows_the_found_task(store: JournalStore, operation_id: str) -> None:
    logic = CloneLike(Resolution.applied(UPID))
    result = _run(store, ScriptedClient([_lost()]), logic, operation_id)
    assert result["done"] and result["stage"]["status"] == "completed" and result["stage"]["upid"] == UPID


def test_not_applied_is_resent_only_when_harmless(store: JournalStore, operation_id: str) -> None:
    with pytest.raises(VmanywareError):
        _run(store, ScriptedClient([_lost()]), CloneLike(Resolution.not_applied()), operation_id)
    client = ScriptedClient([UPID])
    result = _run(store, client, CloneLike(Resolution.not_applied(), harmless=True), operation_id)
    assert result["done"] and len(client.sent) == 1 and result["stage"]["attempts"] == 2


def test_definite_refusal_returns_to_pending(store: JournalStore, operation_id: str) -> None:
    denied = ProviderError(code="permission_denied", details={"path": "/vms/201", "privilege": "VM.Allocate"})
    with pytest.raises(ProviderError):
        _run(store, ScriptedClient([denied]), CloneLike(), operation_id)
    clone = store.stage(store.load(operation_id), "clone")
    assert clone["status"] == "pending" and clone["attempts"] == 1
    assert _run(store, ScriptedClient([UPID]), CloneLike(), operation_id)["done"]


def test_lock_is_waited_out_within_the_budget(store: JournalStore, operation_id: str) -> None:
    client = ScriptedClient([ProviderError(code="locked"), UPID])
    result = _run(store, client, CloneLike(), operation_id, lock_wait=30)
    assert result["done"] and len(client.sent) == 2


def test_failed_task_fails_the_stage_and_keeps_it(store: JournalStore, operation_id: str) -> None:
    client = ScriptedClient([UPID], statuses=[{"status": "stopped", "exitstatus": "no space left on device"}])
    with pytest.raises(VmanywareError) as info:
        _run(store, client, CloneLike(), operation_id)
    assert info.value.code == "task_failed" and info.value.details["log_tail"] == ["TASK ERROR: no space left"]
    document = store.load(operation_id)
    assert document["status"] == "failed" and store.stage(document, "clone")["status"] == "failed"
    with pytest.raises(VmanywareError) as again:
        _run(store, ScriptedClient([]), CloneLike(), operation_id)
    assert again.value.code == "stage_failed"


def test_warnings_complete_with_a_warning(store: JournalStore, operation_id: str) -> None:
    client = ScriptedClient([UPID], statuses=[{"status": "stopped", "exitstatus": "WARNINGS: 2"}])
    result = _run(store, client, CloneLike(), operation_id)
    assert result["done"] and result["stage"]["evidence"]["taskWarnings"] == 2 and result["warnings"]


def test_check_mode_returns_the_request_and_writes_nothing(store: JournalStore, operation_id: str) -> None:
    before = store.load(operation_id)
    client = ScriptedClient([])
    result = _run(store, client, CloneLike(), operation_id, check_mode=True)
    assert result["changed"] and not result["done"] and result["requests"][0]["method"] == "POST"
    assert client.sent == [] and store.load(operation_id) == before


def test_stages_run_in_order(store: JournalStore, operation_id: str) -> None:
    class Resources(CloneLike):
        kind = "resources"
        task_type = None

    with pytest.raises(VmanywareError) as info:
        _run(store, ScriptedClient([None]), Resources(), operation_id)
    assert info.value.code == "stage_out_of_order"


def test_wrong_task_type_is_resolved_by_reads(store: JournalStore, operation_id: str) -> None:
    other = UPID.replace("qmclone", "qmstart")
    with pytest.raises(VmanywareError) as info:
        _run(store, ScriptedClient([other]), CloneLike(), operation_id)
    assert info.value.code == "outcome_uncertain"


def test_submitted_without_task_is_observed_not_resent(store: JournalStore, operation_id: str) -> None:
    class GuestExec(CloneLike):
        task_type = None
        calls = 0

        def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
            return None, {"pid": data["pid"]}

        def observe(self, ctx: StageContext) -> dict[str, t.Any]:
            GuestExec.calls += 1
            if GuestExec.calls == 1:
                raise StageInProgress({"pid": ctx.evidence()["pid"]})
            return {"exitcode": 0}

    first = _run(store, ScriptedClient([{"pid": 42}]), GuestExec(), operation_id)
    assert first["done"] is False and first["changed"] and first["progress"] == {"pid": 42}
    client = ScriptedClient([])
    second = _run(store, client, GuestExec(), operation_id)
    assert second["done"] and client.sent == [] and second["stage"]["evidence"] == {"pid": 42, "exitcode": 0}


class Sequenced(CloneLike):
    """A harmless-to-repeat stage whose reads give one verdict after another (the last one repeats)."""

    def __init__(self, *verdicts: Resolution) -> None:
        super().__init__(harmless=True)
        self.verdicts = list(verdicts)

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        self.resolved += 1
        return self.verdicts.pop(0) if len(self.verdicts) > 1 else self.verdicts[0]


def _frozen_wall(offset: float = 0.0) -> t.Callable[[], float]:
    """A wall clock that stops at its first reading (just after the journal recorded the dispatch)."""
    frozen: list[float] = []

    def wall() -> float:
        if not frozen:
            frozen.append(time.time())
        return frozen[0] + offset

    return wall


def test_lost_reply_is_resent_only_after_settling_and_reading_again(store: JournalStore, operation_id: str) -> None:
    slept: list[float] = []
    logic = Sequenced(Resolution.not_applied())
    client = ScriptedClient([_lost(), UPID])
    result = _run(store, client, logic, operation_id, resend_after=30.0, sleep=slept.append, wall_clock=_frozen_wall())
    assert result["done"] and len(client.sent) == 2 and logic.resolved == 2
    assert 29.0 < slept[0] <= 30.0 and all(s <= 1.0 for s in slept[1:])  # the settle wait, then task polls


def test_first_copy_applied_while_settling_is_never_resent(store: JournalStore, operation_id: str) -> None:
    logic = Sequenced(Resolution.not_applied(), Resolution.applied(UPID))
    client = ScriptedClient([_lost()])
    result = _run(store, client, logic, operation_id, resend_after=30.0, wall_clock=_frozen_wall())
    assert result["done"] and len(client.sent) == 1 and result["stage"]["upid"] == UPID and result["stage"]["attempts"] == 1


def test_settling_beyond_the_wait_budget_returns_progress_and_sends_nothing(store: JournalStore, operation_id: str) -> None:
    slept: list[float] = []
    logic = Sequenced(Resolution.not_applied())
    client = ScriptedClient([_lost()])
    result = _run(store, client, logic, operation_id, resend_after=30.0, wait_budget=5.0, sleep=slept.append, wall_clock=_frozen_wall())
    assert result["done"] is False and not result["changed"] and len(client.sent) == 1 and slept == [5.0]
    assert 24.0 < result["progress"]["resendAfterSeconds"] <= 25.0
    assert store.stage(store.load(operation_id), "clone")["status"] == "dispatching"
    # Once the settle time has passed, the next run reads once and re-sends.
    later = ScriptedClient([UPID])
    done = _run(store, later, logic, operation_id, resend_after=30.0, wall_clock=_frozen_wall(60.0))
    assert done["done"] and len(later.sent) == 1 and logic.resolved == 2


def test_a_definite_refusal_is_not_waited_for(store: JournalStore, operation_id: str) -> None:
    slept: list[float] = []
    refused = ProviderError(code="server_error", details={"status": 500})
    with pytest.raises(ProviderError):
        _run(store, ScriptedClient([refused]), Sequenced(Resolution.not_applied()), operation_id, sleep=slept.append)
    assert slept == [] and store.stage(store.load(operation_id), "clone")["status"] == "pending"


def test_a_stage_whose_effect_reads_cannot_see_resends_without_settling(store: JournalStore, operation_id: str) -> None:
    slept: list[float] = []
    logic = Sequenced(Resolution.not_applied())
    logic.settle_before_resend = False  # type: ignore[misc]
    client = ScriptedClient([_lost(), UPID])
    result = _run(store, client, logic, operation_id, resend_after=30.0, sleep=slept.append, wall_clock=_frozen_wall())
    assert result["done"] and len(client.sent) == 2 and all(s <= 1.0 for s in slept) and logic.resolved == 1  # task polls only
