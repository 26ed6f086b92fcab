# SPDX-License-Identifier: GPL-3.0-or-later
"""CloneStage against recorded PVE replies: request, description binding, preconditions, observation, lost-reply resolution."""

from __future__ import annotations

import os
import typing as t

import pytest
from stage_fakes import (
    PVE,
    TEMPLATE,
    VM,
    FakeClient,
    assert_valid,
    context,
    dispatch,
    fixture,
    new_operation,
    pve_error,
)

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import admission as _admission
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import (
    TASK_SINCE_SLACK,
    binding_description,
    dispatched_epoch,
)


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.fixture()
def op(store: JournalStore) -> str:
    return new_operation(store)


def ours(store: JournalStore, op: str, **changes: t.Any) -> dict[str, t.Any]:
    config = fixture("clone_config")
    config["description"] = binding_description(store.load(op))
    config.update(changes)
    return config


def routes(
    store: JournalStore, op: str, *, target: t.Any = None, nextid: t.Any = 201, tasks: list[t.Any] | None = None
) -> dict[str, t.Any]:
    return {
        TEMPLATE + "/config": fixture("template_config"),
        "/cluster/nextid": nextid,
        VM + "/config": target if target is not None else pve_error("config_missing", path=VM + "/config"),
        VM + "/status/current": fixture("status_stopped"),
        "/nodes/pve-test/tasks": tasks or [],
    }


def test_description_binds_operation_and_hashes(store: JournalStore, op: str) -> None:
    document = store.load(op)
    text = binding_description(document)
    assert text == "vmanyware operation %s\ndefinitionHash %s\nplanHash %s" % (
        op,
        document["plan"]["definitionHash"],
        document["plan"]["planHash"],
    )
    assert text == text.rstrip()


def test_request_is_a_full_clone_bound_to_the_operation(store: JournalStore, op: str) -> None:
    client = FakeClient(routes(store, op))
    ctx = context(store, op, "clone", client)
    logic = CloneStage()
    logic.preconditions(ctx)
    request = logic.request(ctx)
    assert request is not None and request.method == "POST" and request.path == TEMPLATE + "/clone"
    assert request.params == {
        "newid": 201,
        "name": "kernel-lab",
        "full": 1,
        "storage": "local-lvm",
        "description": binding_description(ctx.operation),
    }
    assert request.params["full"] is not True and "target" not in request.params
    assert client.log[-1] == ("GET", "/cluster/nextid", {"vmid": 201})
    assert_valid(request.method, request.path, request.params)  # the request validates against the schema


def test_template_missing_or_not_a_template(store: JournalStore, op: str) -> None:
    paths = routes(store, op)
    paths[TEMPLATE + "/config"] = pve_error("config_missing")
    with pytest.raises(VmanywareError) as info:
        CloneStage().preconditions(context(store, op, "clone", FakeClient(paths)))
    assert info.value.code == "stage_precondition_failed" and info.value.details["rule"] == "template_exists"
    paths[TEMPLATE + "/config"] = dict(fixture("template_config"), template=0)
    with pytest.raises(VmanywareError) as info:
        CloneStage().preconditions(context(store, op, "clone", FakeClient(paths)))
    assert info.value.details["rule"] == "is_template"


def test_vmid_taken_by_a_foreign_vm(store: JournalStore, op: str) -> None:
    foreign = dict(fixture("clone_config"), description="somebody else's VM")
    client = FakeClient(routes(store, op, target=foreign, nextid=pve_error("nextid_taken")))
    with pytest.raises(VmanywareError) as info:
        CloneStage().preconditions(context(store, op, "clone", client))
    assert info.value.code == "vmid_taken" and client.mutations() == []


def test_vmid_taken_by_our_vm_is_adopted_without_a_request(store: JournalStore, op: str) -> None:
    client = FakeClient(routes(store, op, target=ours(store, op), nextid=pve_error("nextid_taken")))
    result = StageRunner(store, client, CloneStage()).run(op)
    assert result["done"] and not result["changed"] and client.mutations() == []
    assert (
        result["stage"]["evidence"]["adopted"] is True
        and result["stage"]["evidence"]["volid"] == "local-lvm:vm-201-disk-0"
    )


def test_our_vm_still_cloning_is_locked(store: JournalStore, op: str) -> None:
    client = FakeClient(routes(store, op, target=ours(store, op, lock="clone"), nextid=pve_error("nextid_taken")))
    with pytest.raises(VmanywareError) as info:
        CloneStage().preconditions(context(store, op, "clone", client))
    assert info.value.code == "locked"


def test_accept_reply_requires_the_source_vmid_in_the_upid(store: JournalStore, op: str) -> None:
    ctx = context(store, op, "clone", FakeClient({}))
    logic = CloneStage()
    request = logic.request(ctx)
    assert request is not None
    assert logic.accept_reply(ctx, request, PVE["upid_clone"]) == (PVE["upid_clone"], {})
    for wrong in (
        PVE["upid_clone"].replace(":9000:", ":201:"),
        PVE["upid_resize"],
        PVE["upid_clone"].replace("pve-test", "pve-other"),
    ):
        with pytest.raises(VmanywareError) as info:
            logic.accept_reply(ctx, request, wrong)
        assert info.value.code == "unexpected_response"


def test_observe_records_volume_digest_mac_and_size(store: JournalStore, op: str) -> None:
    ctx = context(store, op, "clone", FakeClient(routes(store, op, target=ours(store, op))))
    assert CloneStage().observe(ctx) == {
        "volid": "local-lvm:vm-201-disk-0",
        "digest": PVE["clone_config"]["digest"],
        "macaddr": "BC:24:11:73:96:67",
        "diskSizeBytes": 8 * 1024**3,
    }


@pytest.mark.parametrize(
    "change,rule",
    [
        ({"description": "other"}, "description"),
        ({"lock": "clone"}, "unlocked"),
        ({"scsi0": "other-storage:vm-201-disk-0,size=8G"}, "disk_on_storage"),
    ],
)
def test_observe_mismatch(store: JournalStore, op: str, change: dict[str, t.Any], rule: str) -> None:
    ctx = context(store, op, "clone", FakeClient(routes(store, op, target=ours(store, op, **change))))
    with pytest.raises(VmanywareError) as info:
        CloneStage().observe(ctx)
    assert info.value.code == "observation_mismatch" and info.value.details["rule"] == rule


def test_observe_requires_stopped(store: JournalStore, op: str) -> None:
    paths = routes(store, op, target=ours(store, op))
    paths[VM + "/status/current"] = fixture("status_running")
    with pytest.raises(VmanywareError) as info:
        CloneStage().observe(context(store, op, "clone", FakeClient(paths)))
    assert info.value.details["rule"] == "stopped"


# -- lost-reply resolution ---------------------------------------------------------------------------


def resolve(store: JournalStore, op: str, **kwargs: t.Any) -> t.Any:
    dispatch(store, op, "clone")
    client = FakeClient(routes(store, op, **kwargs))
    resolution = CloneStage().resolve_lost_reply(context(store, op, "clone", client))
    assert client.mutations() == []
    return resolution, client


def test_task_list_query_is_bounded_to_our_dispatch(store: JournalStore, op: str) -> None:
    _resolution, client = resolve(store, op)
    query = [entry for entry in client.log if entry[1] == "/nodes/pve-test/tasks"][0][2]
    since = dispatched_epoch(context(store, op, "clone", client))
    assert since is not None
    assert query == {
        "typefilter": "qmclone",
        "vmid": 9000,
        "source": "all",
        "limit": 500,
        "since": since - TASK_SINCE_SLACK,
        "userfilter": "vmanyware@pve",
    }


@pytest.mark.parametrize(
    "case,verdict,upid",
    [
        ({"target": "ours", "tasks": ["task_clone_ok"]}, "applied", "upid_clone"),
        ({"target": "ours", "tasks": []}, "applied", None),
        ({"target": "ours_locked", "tasks": ["task_clone_running"]}, "applied", "upid_clone"),
        ({"target": "ours_locked", "tasks": []}, "undecidable", None),
        ({"target": "early", "tasks": ["task_clone_running"]}, "applied", "upid_clone"),
        ({"target": "early", "tasks": []}, "undecidable", None),
        ({"target": "foreign", "tasks": ["task_clone_ok"]}, "undecidable", None),
        ({"target": None, "tasks": []}, "not_applied", None),
        ({"target": None, "tasks": ["task_clone_other_token"]}, "not_applied", None),
        ({"target": None, "tasks": ["task_clone_failed"]}, "applied", "upid_clone"),
        ({"target": None, "tasks": ["task_clone_ok"]}, "undecidable", None),
    ],
    ids=[
        "ours+task",
        "ours-done",
        "ours-running",
        "ours-locked-no-task",
        "early+task",
        "early-no-task",
        "foreign",
        "nothing",
        "other-token-only",
        "failed-task",
        "ok-task-no-vm",
    ],
)
def test_resolution_table(store: JournalStore, op: str, case: dict[str, t.Any], verdict: str, upid: str | None) -> None:
    targets = {
        "ours": lambda: ours(store, op),
        "ours_locked": lambda: ours(store, op, lock="clone"),
        "early": lambda: fixture("clone_config_early"),
        "foreign": lambda: dict(fixture("clone_config"), description="x"),
        None: lambda: None,
    }
    resolution, _client = resolve(
        store, op, target=targets[case["target"]](), tasks=[fixture(name) for name in case["tasks"]]
    )
    assert resolution.verdict == verdict
    assert resolution.upid == (PVE[upid] if upid else None)
    if verdict == "undecidable":
        assert "201" in resolution.message or "9000" in resolution.message


# -- the runner with the stage ------------------------------------------------------------------------

TASK_LOG = [
    {"n": 1, "t": "create full clone of drive ide2 (local-lvm:vm-9000-cloudinit)"},
    {"n": 2, "t": "allocated target volume 'local-lvm:vm-201-cloudinit'"},
    {"n": 3, "t": "create full clone of drive scsi0 (local-lvm:base-9000-disk-0)"},
    {"n": 4, "t": "allocated target volume 'local-lvm:vm-201-disk-0'"},
]


def test_runner_happy_path_and_rerun(store: JournalStore, op: str) -> None:
    state: dict[str, t.Any] = {"created": False}

    def target(_params: dict[str, t.Any]) -> t.Any:
        return ours(store, op) if state["created"] else pve_error("config_missing")

    def clone(_params: t.Any) -> str:
        state["created"] = True
        return PVE["upid_clone"]

    paths = routes(store, op)
    paths[VM + "/config"] = target
    paths["/nodes/pve-test/tasks/%s/status" % PVE["upid_clone"]] = {"status": "stopped", "exitstatus": "OK"}
    paths["/nodes/pve-test/tasks/%s/log" % PVE["upid_clone"]] = TASK_LOG
    client = FakeClient(paths, [clone])
    result = StageRunner(store, client, CloneStage(), StageSettings(sleep=lambda _s: None)).run(op)
    assert result["done"] and result["changed"] and result["stage"]["upid"] == PVE["upid_clone"]
    # the storage slot was taken before the POST and, as nobody waited for it, kept until the task's end: no log read
    assert result["admission"] == {"storage": "local-lvm", "slot": 0, "waitedSeconds": 0.0}
    assert "/nodes/pve-test/tasks/%s/log" % PVE["upid_clone"] not in client.paths()
    assert [m[:2] for m in client.mutations()] == [("POST", TEMPLATE + "/clone")]
    again = FakeClient(paths)
    assert StageRunner(store, again, CloneStage()).run(op)["changed"] is False and again.log == []


def test_runner_gives_the_slot_to_a_waiter_once_the_log_shows_the_allocations(store: JournalStore, op: str) -> None:
    # storage_concurrency 1 and another run waiting for local-lvm: the runner reads the clone's log while it follows the
    # task and gives the slot back as soon as both allocations are logged, before the task's end
    state: dict[str, t.Any] = {"created": False, "free": []}
    scope = store.load(op)["providerScopeId"]

    def target(_params: dict[str, t.Any]) -> t.Any:
        return ours(store, op) if state["created"] else pve_error("config_missing")

    def clone(_params: t.Any) -> str:
        state["created"] = True
        return PVE["upid_clone"]

    def status(_params: t.Any) -> dict[str, t.Any]:
        try:  # can the waiter take the only slot now?
            _admission.acquire(store.journal_dir, scope, "local-lvm", 1, budget=0, holder={}).release()
            state["free"].append(True)
        except _admission.AdmissionWaiting:
            state["free"].append(False)
        return {"status": "stopped", "exitstatus": "OK"} if len(state["free"]) == 3 else {"status": "running"}

    paths = routes(store, op)
    paths[VM + "/config"] = target
    paths["/nodes/pve-test/tasks/%s/status" % PVE["upid_clone"]] = status
    paths["/nodes/pve-test/tasks/%s/log" % PVE["upid_clone"]] = TASK_LOG
    client = FakeClient(paths, [clone])
    waiters = _admission.waiters_file(store.journal_dir, scope, "local-lvm")
    os.makedirs(os.path.dirname(waiters), exist_ok=True)
    waiter = _admission.announce_waiting(waiters)
    now = [0.0]
    settings = StageSettings(
        clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s), storage_concurrency=1
    )
    try:
        result = StageRunner(store, client, CloneStage(), settings).run(op)
    finally:
        assert waiter is not None
        os.close(waiter)
    assert result["done"] and result["admission"]["slot"] == 0
    assert (
        client.paths().count("/nodes/pve-test/tasks/%s/log" % PVE["upid_clone"]) == 1
    )  # after 0.1 s: both allocations
    assert state["free"] == [True, True, True]  # free from the first status poll (0.25 s) on, while the task still ran


def test_runner_crash_before_send_is_resolved_by_reads_and_never_sent(store: JournalStore, op: str) -> None:
    dispatch(store, op, "clone")  # the process died after recording the dispatch: whether it sent is unknown
    paths = routes(store, op)
    paths[VM + "/config"] = lambda _p: pve_error("config_missing")
    client = FakeClient(paths, [])
    now = [0.0]
    settings = StageSettings(sleep=lambda s: now.__setitem__(0, now[0] + s), clock=lambda: now[0], wait_budget=3.0)
    with pytest.raises(VmanywareError) as info:
        StageRunner(store, client, CloneStage(), settings).run(op)
    assert info.value.code == "outcome_uncertain" and client.mutations() == []
    assert store.stage(store.load(op), "clone")["status"] == "uncertain"
