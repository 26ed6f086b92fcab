# SPDX-License-Identifier: GPL-3.0-or-later
"""ResourcesStage against recorded PVE replies: digest-bound request, identity preconditions, resolution."""

from __future__ import annotations

import typing as t

import pytest
from stage_fakes import PVE, VM, FakeClient, assert_valid, complete, context, dispatch, fixture, new_operation

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import instance_tag
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import binding_description
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage

DIGEST = PVE["clone_config"]["digest"]
NEW_DIGEST = "91eb4507c8eb7ff0d2e4ebb041675903e2e2ce6a"


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.fixture()
def op(store: JournalStore) -> str:
    operation_id = new_operation(store)
    complete(store, operation_id, "clone", {"digest": DIGEST, "volid": "local-lvm:vm-201-disk-0"}, PVE["upid_clone"])
    return operation_id


def config(store: JournalStore, op: str, **changes: t.Any) -> dict[str, t.Any]:
    value = fixture("clone_config")
    value["description"] = binding_description(store.load(op))
    value.update(changes)
    return value


def applied(store: JournalStore, op: str) -> dict[str, t.Any]:
    return config(store, op, cores=2, memory="2048", tags=instance_tag(op), digest=NEW_DIGEST)


def paths(cfg: t.Any, pending: str = "pending_clean", status: str = "status_stopped") -> dict[str, t.Any]:
    return {VM + "/config": cfg, VM + "/status/current": fixture(status), VM + "/pending": fixture(pending)}


def test_request_sets_cores_memory_only_tag_and_digest(store: JournalStore, op: str) -> None:
    plan = store.load(op)["plan"]
    plan_cfg = config(store, op, cores=1, memory="512")
    client = FakeClient(paths(plan_cfg))
    ctx = context(store, op, "resources", client)
    logic = ResourcesStage()
    logic.preconditions(ctx)
    request = logic.request(ctx)
    assert request is not None and (request.method, request.path) == ("PUT", VM + "/config")
    assert request.params == {
        "cores": plan["resources"]["cores"],
        "memory": str(plan["resources"]["memoryMiB"]),
        "tags": instance_tag(op),
        "digest": DIGEST,
    }
    assert_valid(request.method, request.path, request.params)
    assert logic.diff(ctx) == {
        "before": {"cores": 1, "memory": 512, "tags": None},
        "after": {"cores": 2, "memory": 2048, "tags": instance_tag(op)},
    }


def test_values_already_set_need_no_request(store: JournalStore, op: str) -> None:
    client = FakeClient(paths(applied(store, op)))
    result = StageRunner(store, client, ResourcesStage()).run(op)
    assert result["done"] and not result["changed"] and client.mutations() == []
    assert result["stage"]["evidence"]["digest"] == NEW_DIGEST


def test_extra_tag_is_replaced(store: JournalStore, op: str) -> None:
    ctx = context(store, op, "resources", FakeClient(paths(config(store, op, tags="%s;other" % instance_tag(op)))))
    logic = ResourcesStage()
    logic.preconditions(ctx)
    assert logic.request(ctx) is not None


@pytest.mark.parametrize(
    "cfg_change,pending,status,code,rule",
    [
        ({"description": "not ours"}, "pending_clean", "status_stopped", "stage_precondition_failed", "description"),
        ({}, "pending_clean", "status_running", "stage_precondition_failed", "stopped"),
        ({}, "pending_changed", "status_stopped", "stage_precondition_failed", "no_pending"),
        ({"digest": "0" * 40}, "pending_clean", "status_stopped", "conflict", "digest_unchanged"),
        ({"lock": "backup"}, "pending_clean", "status_stopped", "locked", None),
    ],
)
def test_preconditions(
    store: JournalStore, op: str, cfg_change: dict[str, t.Any], pending: str, status: str, code: str, rule: str | None
) -> None:
    client = FakeClient(paths(config(store, op, cores=1, **cfg_change), pending, status))
    with pytest.raises(VmanywareError) as info:
        StageRunner(store, client, ResourcesStage()).run(op)
    assert info.value.code == code and info.value.details.get("rule") == rule
    assert client.mutations() == [] and store.stage(store.load(op), "resources")["status"] == "pending"


def test_observe_mismatch_fails_the_stage(store: JournalStore, op: str) -> None:
    client = FakeClient(paths(config(store, op, cores=1)), [None])
    with pytest.raises(VmanywareError) as info:
        StageRunner(store, client, ResourcesStage()).run(op)
    assert info.value.code == "observation_mismatch"
    assert store.stage(store.load(op), "resources")["status"] == "failed"


@pytest.mark.parametrize(
    "cfg,verdict",
    [("applied", "applied"), ("unchanged", "not_applied"), ("changed", "undecidable"), ("foreign", "undecidable")],
)
def test_resolution(store: JournalStore, op: str, cfg: str, verdict: str) -> None:
    dispatch(store, op, "resources")
    configs = {
        "applied": applied(store, op),
        "unchanged": config(store, op, cores=1),
        "changed": config(store, op, cores=1, digest="1" * 40),
        "foreign": config(store, op, description="x"),
    }
    client = FakeClient(paths(configs[cfg]))
    resolution = ResourcesStage().resolve_lost_reply(context(store, op, "resources", client))
    assert resolution.verdict == verdict and client.mutations() == []


def test_lost_reply_not_applied_is_never_resent(store: JournalStore, op: str) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError

    def put(_params: t.Any) -> t.Any:
        return ProviderError(code="reply_lost")  # the copy never reached the handler

    client = FakeClient(
        {
            VM + "/config": lambda _p: config(store, op, cores=1),
            VM + "/status/current": fixture("status_stopped"),
            VM + "/pending": fixture("pending_clean"),
        },
        [put, put],
    )
    with pytest.raises(VmanywareError) as info:
        StageRunner(store, client, ResourcesStage(), StageSettings(wait_budget=0.0)).run(op)
    assert info.value.code == "outcome_uncertain" and [m[2]["digest"] for m in client.mutations()] == [DIGEST]
    with pytest.raises(VmanywareError):
        StageRunner(store, client, ResourcesStage(), StageSettings(wait_budget=0.0)).run(op)
    assert len(client.mutations()) == 1 and store.stage(store.load(op), "resources")["status"] == "uncertain"
