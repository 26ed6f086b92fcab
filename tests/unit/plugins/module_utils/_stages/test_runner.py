# SPDX-License-Identifier: GPL-3.0-or-later
"""The stage protocol, driven by a scripted client and a minimal stage (no simulator needed)."""

from __future__ import annotations

import json
import typing as t

import pytest
from hashed_plan import hashed_plan
from pve_fake import FakeClient, in_turn

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import map_http_error
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import (
    StageContext,
    StageLogic,
    StageSettings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import (
    Request,
    Resolution,
    StageInProgress,
    StageUncertain,
    accept_task,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import LOG_LINE_MAX, LOG_TAIL_LINES

UPID = "UPID:pve-test:00001234:00005678:65000000:qmclone:9000:vmanyware@pve!full:"
HASH = "a" * 64


TASK = "/nodes/pve-test/tasks/" + UPID


def scripted(replies: list[t.Any], statuses: list[dict[str, t.Any]] | None = None) -> FakeClient:
    """Mutations answered from ``replies`` (a value, or an exception to raise); the task's status GETs from ``statuses``."""
    routes = {
        TASK + "/status": in_turn(*(statuses or [{"status": "stopped", "exitstatus": "OK"}])),
        TASK + "/log": [{"n": 1, "t": "TASK ERROR: no space left"}],
    }
    return FakeClient(routes, replies, user=None, token=None)


def sent(client: FakeClient) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _params in client.mutations()]


class CloneLike(StageLogic):
    kind = "clone"
    task_type = "qmclone"

    def __init__(self, resolution: Resolution | None = None, observed: dict[str, t.Any] | None = None) -> None:
        self.resolution = resolution or Resolution.undecidable("Check the task list.")
        self.observed = observed if observed is not None else {"volid": "local-lvm:vm-201-disk-0"}
        self.resolved = 0

    def request(self, ctx: StageContext) -> Request:
        return Request("POST", "/nodes/pve-test/qemu/9000/clone", {"newid": ctx.vmid, "full": 1})

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return accept_task(
            data, task_type="qmclone", node=ctx.node, task_id="9000"
        ), {}  # as the clone: the template's id

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
    plan = hashed_plan({}, {}, 201)
    document, _created = store.create_operation(
        idempotency_key="k",
        provider_scope_id="pve:" + HASH,
        definition={},
        mapping={},
        plan=plan,
        confirmation={},
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=["clone", "resources"],
    )
    return t.cast(str, document["operationId"])


ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


class FakeTime:
    """A monotonic clock that advances only when the runner sleeps (so waits are instant and measurable)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _run(
    store: JournalStore, client: FakeClient, logic: StageLogic, operation_id: str, **settings: t.Any
) -> dict[str, t.Any]:
    fake = settings.pop("fake", None) or FakeTime()
    settings.setdefault("sleep", fake.sleep)
    settings.setdefault("clock", fake.clock)
    settings.setdefault("environ", ON)
    return StageRunner(store, client, logic, StageSettings(**settings)).run(operation_id)


def test_happy_path_records_dispatch_upid_and_evidence(store: JournalStore, operation_id: str) -> None:
    client = scripted([UPID])
    result = _run(store, client, CloneLike(), operation_id)
    assert result["changed"] and result["done"] and result["stage"]["status"] == "completed"
    assert result["stage"]["upid"] == UPID and result["stage"]["evidence"] == {"volid": "local-lvm:vm-201-disk-0"}
    assert sent(client) == [("POST", "/nodes/pve-test/qemu/9000/clone")]
    assert result["requests"][0]["params"] == {"newid": 201, "full": 1}


def test_rerun_after_success_sends_nothing(store: JournalStore, operation_id: str) -> None:
    _run(store, scripted([UPID]), CloneLike(), operation_id)
    client = scripted([])
    result = _run(store, client, CloneLike(), operation_id)
    assert not result["changed"] and result["done"] and sent(client) == [] and client.paths("GET") == []


def test_dispatch_is_durable_before_the_request_is_sent(store: JournalStore, operation_id: str) -> None:
    seen: list[str] = []

    def clone(_params: t.Any) -> str:
        seen.append(store.stage(store.load(operation_id), "clone")["status"])
        return UPID

    _run(store, scripted([clone]), CloneLike(), operation_id)
    assert seen == ["dispatching"]


def test_known_upid_is_reconciled_by_get_only(store: JournalStore, operation_id: str) -> None:
    running = [{"status": "running"}]
    first = _run(store, scripted([UPID], statuses=running), CloneLike(), operation_id, wait_budget=0)
    assert first["done"] is False and first["stage"]["status"] == "submitted"
    client = scripted([])
    second = _run(store, client, CloneLike(), operation_id)
    assert second["done"] and sent(client) == [] and all(path.endswith("/status") for path in client.paths("GET"))


def test_lost_reply_undecidable_stays_uncertain_and_never_resends(store: JournalStore, operation_id: str) -> None:
    logic = CloneLike()
    with pytest.raises(VmanywareError) as info:
        _run(store, scripted([_lost()]), logic, operation_id)
    assert info.value.code == "outcome_uncertain" and "task list" in info.value.message
    assert store.stage(store.load(operation_id), "clone")["status"] == "uncertain"
    first_reads = logic.resolved
    client = scripted([])
    with pytest.raises(VmanywareError):
        _run(store, client, logic, operation_id)
    assert sent(client) == [] and logic.resolved > first_reads > 1


def test_lost_reply_resolved_as_applied_follows_the_found_task(store: JournalStore, operation_id: str) -> None:
    logic = CloneLike(Resolution.applied(UPID))
    result = _run(store, scripted([_lost()]), logic, operation_id)
    assert result["done"] and result["stage"]["status"] == "completed" and result["stage"]["upid"] == UPID


def test_not_applied_is_never_resent(store: JournalStore, operation_id: str) -> None:
    first = scripted([_lost()])
    with pytest.raises(VmanywareError) as info:
        _run(store, first, CloneLike(Resolution.not_applied()), operation_id)
    assert info.value.code == "outcome_uncertain" and "never sent again" in info.value.message
    client = scripted([UPID])
    with pytest.raises(VmanywareError):
        _run(store, client, CloneLike(Resolution.not_applied()), operation_id)
    clone = store.stage(store.load(operation_id), "clone")
    assert sent(first) == [("POST", "/nodes/pve-test/qemu/9000/clone")] and sent(client) == []
    assert clone["status"] == "uncertain" and clone["attempts"] == 1


def test_a_crash_after_the_dispatch_record_is_resolved_by_reads_never_sent(
    store: JournalStore, operation_id: str
) -> None:
    store.record_dispatch(
        operation_id, "clone", {"method": "POST", "path": "/nodes/pve-test/qemu/9000/clone", "params": {}}
    )
    client = scripted([UPID])
    with pytest.raises(VmanywareError) as info:
        _run(store, client, CloneLike(Resolution.not_applied()), operation_id)
    assert info.value.code == "outcome_uncertain" and sent(client) == []


def test_definite_refusal_returns_to_pending(store: JournalStore, operation_id: str) -> None:
    denied = ProviderError(code="permission_denied", details={"path": "/vms/201", "privilege": "VM.Allocate"})
    with pytest.raises(ProviderError):
        _run(store, scripted([denied]), CloneLike(), operation_id)
    clone = store.stage(store.load(operation_id), "clone")
    assert clone["status"] == "pending" and clone["attempts"] == 1
    assert _run(store, scripted([UPID]), CloneLike(), operation_id)["done"]


def test_lock_is_waited_out_within_the_budget(store: JournalStore, operation_id: str) -> None:
    client = scripted([ProviderError(code="locked"), UPID])
    result = _run(store, client, CloneLike(), operation_id, lock_wait=30)
    assert result["done"] and len(sent(client)) == 2


def test_failed_task_fails_the_stage_and_keeps_it(store: JournalStore, operation_id: str) -> None:
    client = scripted([UPID], statuses=[{"status": "stopped", "exitstatus": "no space left on device"}])
    with pytest.raises(VmanywareError) as info:
        _run(store, client, CloneLike(), operation_id)
    assert info.value.code == "task_failed" and info.value.details["log_tail"] == ["TASK ERROR: no space left"]
    document = store.load(operation_id)
    assert document["status"] == "failed" and store.stage(document, "clone")["status"] == "failed"
    with pytest.raises(VmanywareError) as again:
        _run(store, scripted([]), CloneLike(), operation_id)
    assert again.value.code == "stage_failed"


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["plan"].update(planHash="b" * 64),
        lambda d: d["definition"].update(name="edited"),
        lambda d: d["target"].update(vmid=202),
    ],
)
def test_a_journal_whose_hashes_do_not_match_sends_nothing(store: JournalStore, operation_id: str, edit: t.Any) -> None:
    """Issue 31: an edited planHash, definition or target is journal_corrupt on load, before any request."""
    path = store.operation_path(operation_id)
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    edit(document)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)
    client = scripted([UPID])
    with pytest.raises(VmanywareError) as info:
        _run(store, client, CloneLike(), operation_id)
    assert info.value.code == "journal_corrupt" and info.value.details == {"operationId": operation_id}
    assert client.calls() == []  # not a read, not a write
    assert "edited" not in json.dumps(info.value.to_result())


def test_task_log_lines_are_redacted_and_capped_in_results(store: JournalStore, operation_id: str) -> None:
    """Issue 31: the task log tail of a failure passes the one redaction list and the length caps before it reaches a result."""
    long_line = "x" * 100_000
    routes = {
        TASK + "/status": in_turn({"status": "stopped", "exitstatus": "failed: password=hunter2"}),
        TASK + "/log": [
            {"n": 1, "t": "curl -H 'Authorization: PVEAPIToken=root@pam!ci=0b6f1c2e-1111-2222-3333-444455556666' x"},
            {"n": 2, "t": "set cipassword=s3cr3t-value and ticket: PVE:root@pam:65A1B2C3::c2VjcmV0"},
            {"n": 3, "t": long_line},
        ],
    }
    client = FakeClient(routes, [UPID], user=None, token=None)
    with pytest.raises(VmanywareError) as info:
        _run(store, client, CloneLike(), operation_id)
    shown = json.dumps(info.value.to_result())
    for secret in (
        "hunter2",
        "0b6f1c2e-1111-2222-3333-444455556666",
        "s3cr3t-value",
        "c2VjcmV0",
        "PVE:root@pam:65A1B2C3",
    ):
        assert secret not in shown
    tail = info.value.details["log_tail"]
    assert (
        tail[0] == "curl -H 'Authorization: <redacted>' x"
        and tail[1] == "set cipassword=<redacted> and ticket: <redacted>"
    )
    assert len(tail[2]) == LOG_LINE_MAX and tail[2].endswith("...")
    assert len(shown) < LOG_TAIL_LINES * LOG_LINE_MAX + 2048


def test_warnings_complete_with_a_warning(store: JournalStore, operation_id: str) -> None:
    client = scripted([UPID], statuses=[{"status": "stopped", "exitstatus": "WARNINGS: 2"}])
    result = _run(store, client, CloneLike(), operation_id)
    assert result["done"] and result["stage"]["evidence"]["taskWarnings"] == 2 and result["warnings"]


def test_check_mode_returns_the_request_and_writes_nothing(store: JournalStore, operation_id: str) -> None:
    before = store.load(operation_id)
    client = scripted([])
    result = _run(store, client, CloneLike(), operation_id, check_mode=True)
    assert result["changed"] and not result["done"] and result["requests"][0]["method"] == "POST"
    assert sent(client) == [] and store.load(operation_id) == before


def test_stages_run_in_order(store: JournalStore, operation_id: str) -> None:
    class Resources(CloneLike):
        kind = "resources"
        task_type = None

    with pytest.raises(VmanywareError) as info:
        _run(store, scripted([None]), Resources(), operation_id)
    assert info.value.code == "stage_out_of_order"


def test_wrong_task_type_is_resolved_by_reads(store: JournalStore, operation_id: str) -> None:
    other = UPID.replace("qmclone", "qmstart")
    with pytest.raises(VmanywareError) as info:
        _run(store, scripted([other]), CloneLike(), operation_id)
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

    first = _run(store, scripted([{"pid": 42}]), GuestExec(), operation_id)
    assert first["done"] is False and first["changed"] and first["progress"] == {"pid": 42}
    client = scripted([])
    second = _run(store, client, GuestExec(), operation_id)
    assert second["done"] and sent(client) == [] and second["stage"]["evidence"] == {"pid": 42, "exitcode": 0}


class Sequenced(CloneLike):
    """A stage whose reads give one verdict after another (the last one repeats)."""

    def __init__(self, *verdicts: Resolution) -> None:
        super().__init__()
        self.verdicts = list(verdicts)

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        self.resolved += 1
        return self.verdicts.pop(0) if len(self.verdicts) > 1 else self.verdicts[0]


def test_reads_are_repeated_within_the_wait_budget_then_uncertain(store: JournalStore, operation_id: str) -> None:
    fake = FakeTime()
    logic = Sequenced(Resolution.not_applied())
    client = scripted([_lost()])
    with pytest.raises(VmanywareError) as info:
        _run(store, client, logic, operation_id, wait_budget=5.0, fake=fake)
    assert info.value.code == "outcome_uncertain" and len(sent(client)) == 1
    assert sum(fake.slept) == pytest.approx(5.0) and logic.resolved > 2


def test_an_effect_that_appears_while_reading_is_followed_never_resent(store: JournalStore, operation_id: str) -> None:
    logic = Sequenced(Resolution.not_applied(), Resolution.not_applied(), Resolution.applied(UPID))
    client = scripted([_lost()])
    result = _run(store, client, logic, operation_id)
    assert (
        result["done"]
        and len(sent(client)) == 1
        and result["stage"]["upid"] == UPID
        and result["stage"]["attempts"] == 1
    )


def test_a_later_run_continues_once_the_effect_appeared(store: JournalStore, operation_id: str) -> None:
    with pytest.raises(VmanywareError):
        _run(store, scripted([_lost()]), Sequenced(Resolution.not_applied()), operation_id, wait_budget=1.0)
    client = scripted([])
    result = _run(store, client, Sequenced(Resolution.applied(UPID)), operation_id)
    assert result["done"] and result["stage"]["status"] == "completed" and sent(client) == []


def test_a_final_undecidable_verdict_is_not_waited_for(store: JournalStore, operation_id: str) -> None:
    fake = FakeTime()
    logic = Sequenced(Resolution.undecidable("The probe's reply was lost.", final=True))
    with pytest.raises(VmanywareError):
        _run(store, scripted([_lost()]), logic, operation_id, fake=fake)
    assert fake.slept == [] and logic.resolved == 1


def test_a_definite_refusal_is_not_waited_for(store: JournalStore, operation_id: str) -> None:
    fake = FakeTime()
    refused = map_http_error("POST", "/nodes/pve-test/qemu/9000/clone", 500, "", {"message": "VM is locked (backup)"})
    logic = Sequenced(Resolution.not_applied())
    with pytest.raises(ProviderError):
        _run(store, scripted([refused]), logic, operation_id, fake=fake, lock_wait=0)
    assert (
        fake.slept == []
        and logic.resolved == 0
        and store.stage(store.load(operation_id), "clone")["status"] == "pending"
    )


@pytest.mark.parametrize("message", ["simulated failure", "VM 201 qmp command 'guest-exec' failed - got timeout", ""])
def test_a_plain_500_is_unknown_resolved_by_reads_then_uncertain_never_sent_again(
    store: JournalStore, operation_id: str, message: str
) -> None:
    # A 500 whose text proves no pre-check refusal says nothing about the effect (the handler may have done its work).
    error = map_http_error("POST", "/nodes/pve-test/qemu/9000/clone", 500, "", {"message": message})
    assert error.details["precheck"] is False
    client = scripted([error])
    logic = Sequenced(Resolution.not_applied())
    causes = []
    for _attempt in range(2):
        with pytest.raises(VmanywareError) as info:
            _run(store, client, logic, operation_id, wait_budget=1.0)
        assert info.value.code == "outcome_uncertain"
        causes.append(info.value.details["cause"])
    assert (
        causes[0] == "server_error"
    )  # a later run resolves the recorded submission by reads (its cause: the reply was lost)
    assert len(sent(client)) == 1 and logic.resolved >= 2
    assert store.stage(store.load(operation_id), "clone")["status"] == "uncertain"


def test_a_plain_500_is_applied_when_reads_show_the_effect(store: JournalStore, operation_id: str) -> None:
    error = map_http_error("POST", "/nodes/pve-test/qemu/9000/clone", 500, "", {"message": "got timeout"})
    client = scripted([error])
    assert _run(store, client, CloneLike(Resolution.applied(UPID)), operation_id)["done"] and len(sent(client)) == 1


def test_a_proven_never_started_request_is_sent_once_more_in_the_run(store: JournalStore, operation_id: str) -> None:
    client = scripted([_lost(), UPID])
    logic = Sequenced(Resolution.never_started())
    assert _run(store, client, logic, operation_id)["done"] and len(sent(client)) == 2
    clone = store.stage(store.load(operation_id), "clone")
    assert clone["status"] == "completed" and clone["attempts"] == 2


def test_a_second_proven_never_started_in_one_run_stops_with_the_stage_pending(
    store: JournalStore, operation_id: str
) -> None:
    client = scripted([_lost(), _lost()])
    with pytest.raises(VmanywareError):
        _run(store, client, Sequenced(Resolution.never_started()), operation_id)
    assert len(sent(client)) == 2 and store.stage(store.load(operation_id), "clone")["status"] == "pending"


@pytest.mark.parametrize(
    "environ,option,allowed",
    [
        ({}, None, False),
        ({"VMANYWARE_PROVISIONING_ENABLED": ""}, None, False),
        ({}, True, True),
        ({}, False, False),
        ({"VMANYWARE_PROVISIONING_ENABLED": "true"}, None, True),
        ({"VMANYWARE_PROVISIONING_ENABLED": "true"}, False, False),
        ({"VMANYWARE_PROVISIONING_ENABLED": "false"}, True, False),
        ({"VMANYWARE_PROVISIONING_ENABLED": "false"}, None, False),
    ],
)
def test_the_gate_is_reread_before_the_write_and_an_environment_false_wins(
    store: JournalStore, operation_id: str, environ: dict[str, str], option: bool | None, allowed: bool
) -> None:
    client = scripted([UPID])
    options = {"VMANYWARE_PROVISIONING_ENABLED": option}
    if allowed:
        assert _run(store, client, CloneLike(), operation_id, environ=environ, gate_options=options)["done"]
        return
    for check_mode in (True, False):
        with pytest.raises(VmanywareError) as info:
            _run(store, client, CloneLike(), operation_id, environ=environ, gate_options=options, check_mode=check_mode)
        assert (
            info.value.code == "provisioning_disabled"
            and info.value.details["gate"] == "VMANYWARE_PROVISIONING_ENABLED"
        )
    clone = store.stage(store.load(operation_id), "clone")
    assert sent(client) == [] and clone["status"] == "pending" and clone["attempts"] == 0


def test_a_known_task_keeps_reconciling_after_the_gate_closed(store: JournalStore, operation_id: str) -> None:
    _run(store, scripted([UPID], statuses=[{"status": "running"}]), CloneLike(), operation_id, wait_budget=0)
    client = scripted([])
    result = _run(store, client, CloneLike(), operation_id, environ={"VMANYWARE_PROVISIONING_ENABLED": "false"})
    assert result["done"] and sent(client) == []


def test_a_stage_with_two_gates_needs_both(store: JournalStore, operation_id: str) -> None:
    class Snapshotting(CloneLike):
        gates = ("VMANYWARE_PROVISIONING_ENABLED", "VMANYWARE_SNAPSHOTS_ENABLED")

    client = scripted([UPID])
    with pytest.raises(VmanywareError) as info:
        _run(
            store,
            client,
            Snapshotting(),
            operation_id,
            gate_options={"VMANYWARE_SNAPSHOTS_ENABLED": True},
            environ=dict(ON, VMANYWARE_SNAPSHOTS_ENABLED="false"),
        )
    assert info.value.code == "snapshot_disabled" and sent(client) == []
    assert _run(store, client, Snapshotting(), operation_id, gate_options={"VMANYWARE_SNAPSHOTS_ENABLED": True})["done"]


def test_a_changed_catalog_mapping_is_plan_changed_and_sends_nothing(store: JournalStore, tmp_path: t.Any) -> None:
    mapping = {"image": "debian-12", "node": "pve-test", "templateVmid": 9000}
    document, _created = store.create_operation(
        idempotency_key="c",
        provider_scope_id="pve:" + HASH,
        definition={"image": "debian-12"},
        mapping=mapping,
        plan=hashed_plan({"image": "debian-12"}, mapping, 202),
        confirmation={},
        target_node="pve-test",
        target_vmid=202,
        stage_kinds=["clone"],
    )
    oid = document["operationId"]
    client = scripted([UPID])
    for catalog in ({"images": [dict(mapping, templateVmid=9001)]}, {"images": []}):
        with pytest.raises(VmanywareError) as info:
            _run(store, client, CloneLike(), oid, catalog=catalog)
        assert info.value.code == "plan_changed" and info.value.details["fields"] == ["mapping"]
    assert sent(client) == [] and store.stage(store.load(oid), "clone")["status"] == "pending"
    assert _run(store, client, CloneLike(), oid, catalog={"images": [dict(mapping)]})["done"]


def test_a_hook_submission_with_an_unknown_outcome_makes_the_stage_uncertain(
    store: JournalStore, operation_id: str
) -> None:
    class LostProbe(CloneLike):
        def preconditions(self, ctx: StageContext) -> None:
            raise StageUncertain(
                "reply_lost", "The probe's reply was lost.", {"method": "POST", "path": "/x/agent/exec", "params": {}}
            )

    with pytest.raises(VmanywareError) as info:
        _run(store, scripted([]), LostProbe(), operation_id)
    clone = store.stage(store.load(operation_id), "clone")
    assert (
        info.value.code == "outcome_uncertain"
        and clone["status"] == "uncertain"
        and clone["request"]["path"] == "/x/agent/exec"
    )
