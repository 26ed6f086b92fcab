# SPDX-License-Identifier: GPL-3.0-or-later
"""DiskStage against recorded PVE replies: absolute size, never shrink, resize task, resolution."""

from __future__ import annotations

import typing as t

import pytest
from stage_fakes import PVE, VM, FakeClient, assert_valid, complete, context, dispatch, fixture, new_operation

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import binding_description
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage

DIGEST = "91eb4507c8eb7ff0d2e4ebb041675903e2e2ce6a"
UPID = PVE["upid_resize"]


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.fixture()
def op(store: JournalStore) -> str:
    operation_id = new_operation(store, disk_gib=20)
    complete(store, operation_id, "clone", {"digest": PVE["clone_config"]["digest"]}, PVE["upid_clone"])
    complete(store, operation_id, "resources", {"digest": DIGEST})
    return operation_id


def config(store: JournalStore, op: str, size: str = "8G", **changes: t.Any) -> dict[str, t.Any]:
    value = fixture("clone_config")
    value.update(
        description=binding_description(store.load(op)), digest=DIGEST, scsi0="local-lvm:vm-201-disk-0,size=%s" % size
    )
    value.update(changes)
    return value


def paths(cfg: t.Any, tasks: list[t.Any] | None = None) -> dict[str, t.Any]:
    return {
        VM + "/config": cfg,
        VM + "/status/current": fixture("status_stopped"),
        VM + "/pending": fixture("pending_clean"),
        "/nodes/pve-test/tasks": tasks or [],
        "/nodes/pve-test/tasks/%s/status" % UPID: {"status": "stopped", "exitstatus": "OK"},
    }


def test_request_is_absolute_and_digest_bound(store: JournalStore, op: str) -> None:
    client = FakeClient(paths(config(store, op)))
    ctx = context(store, op, "disk", client)
    logic = DiskStage()
    logic.preconditions(ctx)
    request = logic.request(ctx)
    assert request is not None and (request.method, request.path) == ("PUT", VM + "/resize")
    assert request.params == {"disk": "scsi0", "size": "20G", "digest": DIGEST}
    assert_valid(request.method, request.path, request.params)
    assert logic.diff(ctx) == {
        "before": {"scsi0": {"sizeBytes": 8 * 1024**3}},
        "after": {"scsi0": {"sizeBytes": 20 * 1024**3}},
    }


def test_never_shrinks(store: JournalStore, op: str) -> None:
    client = FakeClient(paths(config(store, op, size="32G")))
    with pytest.raises(VmanywareError) as info:
        StageRunner(store, client, DiskStage()).run(op)
    assert info.value.code == "disk_shrink_unsupported" and client.mutations() == []


def test_requested_size_already_there(store: JournalStore, op: str) -> None:
    client = FakeClient(paths(config(store, op, size="20G")))
    result = StageRunner(store, client, DiskStage()).run(op)
    assert result["done"] and not result["changed"] and client.mutations() == []


def test_digest_changed_is_a_conflict(store: JournalStore, op: str) -> None:
    client = FakeClient(paths(config(store, op, digest="2" * 40)))
    with pytest.raises(VmanywareError) as info:
        StageRunner(store, client, DiskStage()).run(op)
    assert info.value.code == "conflict" and client.mutations() == []


def test_accept_reply_requires_a_resize_task_of_the_vm(store: JournalStore, op: str) -> None:
    ctx = context(store, op, "disk", FakeClient({}))
    logic = DiskStage()
    request = logic.request(ctx)
    assert request is not None and logic.accept_reply(ctx, request, UPID) == (UPID, {})
    for wrong in (UPID.replace(":201:", ":202:"), PVE["upid_clone"]):
        with pytest.raises(VmanywareError):
            logic.accept_reply(ctx, request, wrong)


def test_runner_follows_the_resize_task(store: JournalStore, op: str) -> None:
    state = {"sent": False}

    def resize(_params: t.Any) -> str:
        state["sent"] = True
        return UPID

    client = FakeClient(
        paths(lambda _p: config(store, op, size="20G", digest="3" * 40) if state["sent"] else config(store, op)),
        [resize],
    )
    client.routes["/nodes/pve-test/tasks/%s/log" % UPID] = [{"n": 1, "t": "TASK OK"}]
    result = StageRunner(store, client, DiskStage(), StageSettings(sleep=lambda _s: None)).run(op)
    assert (
        result["done"]
        and result["stage"]["upid"] == UPID
        and result["stage"]["evidence"]["diskSizeBytes"] == 20 * 1024**3
    )
    assert (
        result["admission"]["storage"] == "local-lvm"
    )  # lvextend takes the storage lock: the resize is admitted like a clone


@pytest.mark.parametrize(
    "size,digest,tasks,verdict,upid",
    [
        ("20G", "3" * 40, [], "applied", None),
        ("20G", "3" * 40, ["task_resize_ok"], "applied", UPID),
        ("8G", DIGEST, ["task_resize_ok"], "applied", UPID),
        ("8G", DIGEST, [], "not_applied", None),
        ("8G", "4" * 40, [], "undecidable", None),
    ],
)
def test_resolution(
    store: JournalStore, op: str, size: str, digest: str, tasks: list[str], verdict: str, upid: str | None
) -> None:
    dispatch(store, op, "disk")
    client = FakeClient(paths(config(store, op, size=size, digest=digest), [fixture(name) for name in tasks]))
    resolution = DiskStage().resolve_lost_reply(context(store, op, "disk", client))
    assert (resolution.verdict, resolution.upid) == (verdict, upid) and client.mutations() == []
