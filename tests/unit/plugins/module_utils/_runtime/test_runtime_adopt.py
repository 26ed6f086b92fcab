# SPDX-License-Identifier: GPL-3.0-or-later
"""Adoption of an operation whose journal was lost (``_adopt``), without the simulator.

Recorded PVE replies (tests/unit/fixtures/pve_vm.json and pve_guest_stages.json) drive the
per-stage decision table; every request is schema-validated by the fake client and must be a GET.
"""

from __future__ import annotations

import copy
import json
import os
import typing as t
from pathlib import Path

import pytest


from stage_fakes import PVE, SCOPE, VM, FakeClient, new_operation, planned, pve_error  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.adopt import (
    ReadOnlyClient,
    adopt_operation,
    decide,
    parse_binding,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.adoption import NOT_JUDGED  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    JournalError,
    JournalStore,
    adopted_operation_document,
    validate_document,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    default_idempotency_key,
    expected_confirmation,
    instance_tag,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import binding_description  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import dump_hashes  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.snapshot import snapshot_name  # noqa: E402

REPO = Path(__file__).resolve().parents[5]
REC = json.loads((REPO / "tests/unit/fixtures/pve_guest_stages.json").read_text(encoding="utf-8"))
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
OPID = "op-" + "b" * 26
PLANNED = planned(20)  # examples: packages build-essential and git, no snapshot, disk 8 -> 20 GiB
GIB = 1024**3
TASKS = "/nodes/pve-test/tasks"
USER = "vmanyware@pve!full"


def bound(config: dict[str, t.Any], operation_id: str = OPID, plan: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """A recorded configuration rebound to ``operation_id`` (description, and the tag when it has one)."""
    config = copy.deepcopy(config)
    config["description"] = binding_description({"operationId": operation_id, "plan": plan or PLANNED.plan})
    if "tags" in config:
        config["tags"] = instance_tag(operation_id)
    return config


FULL = bound(REC["config_after"])  # cloned, resources, disk 20G, Cloud-Init settings
CLONED = bound(PVE["clone_config"])  # right after the clone: no tag, 8G


def task(
    kind: str, vmid: int, status: str | None = "OK", user: str = USER, start: int = 0x6B0D00E4
) -> dict[str, t.Any]:
    upid = "UPID:pve-test:0001F052:0002103E:%08X:%s:%d:%s:" % (start, kind, vmid, user)
    entry: dict[str, t.Any] = {
        "upid": upid,
        "type": kind,
        "id": str(vmid),
        "node": "pve-test",
        "starttime": start,
        "user": user.split("!")[0],
    }
    if status is not None:
        entry.update(status=status, endtime=start + 2)
    return entry


def client_for(
    config: t.Any,
    power: str = "running",
    tasks: t.Sequence[dict[str, t.Any]] = (),
    dumps: dict[str, str] | None = None,
    snapshots: t.Sequence[dict[str, t.Any]] = (),
    pending: t.Any = None,
) -> FakeClient:
    parts = dumps or REC["dump"]
    routes: dict[str, t.Any] = {
        "/version": {"version": "9.1.3", "release": "9.1", "repoid": "abcdef12"},
        VM + "/config": config,
        VM + "/status/current": dict(PVE["status_running"], status=power),
        VM + "/pending": pending if pending is not None else PVE["pending_clean"],
        TASKS: list(tasks),
        VM + "/cloudinit/dump": lambda params: parts[params["type"]],
        VM + "/snapshot": list(snapshots) + [{"name": "current", "description": "You are here!"}],
    }
    return FakeClient(routes, provider_scope_id=SCOPE)


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def adopt(
    store: t.Any,
    client: FakeClient,
    *,
    plan: t.Any = PLANNED,
    check_mode: bool = False,
    confirmation: t.Any = "expected",
    environ: t.Mapping[str, str] | None = None,
) -> dict[str, t.Any]:
    environ = ON if environ is None else environ
    if confirmation == "expected":
        confirmation = expected_confirmation(plan.plan, SCOPE)
    return adopt_operation(
        store,
        client,
        planned=plan,
        provider_scope_id=SCOPE,
        confirmation=confirmation,
        idempotency_key=None,
        environ=environ,
        check_mode=check_mode,
    )


def only_gets(client: FakeClient) -> None:
    assert client.log and {method for method, _path, _params in client.log} == {"GET"}


def statuses(result: dict[str, t.Any]) -> dict[str, str]:
    return {item["kind"]: item["status"] for item in result["adoption"]}


def evidence(store: JournalStore, kind: str) -> dict[str, t.Any]:
    return t.cast(dict, store.stage(store.load(OPID), kind)["evidence"])


# -- the decision table ------------------------------------------------------------------------------------
DONE_THROUGH_START = {
    "clone": "completed",
    "resources": "completed",
    "disk": "completed",
    "cloudinit": "completed",
    "seed": "completed",
    "start": "completed",
    "readiness": "pending",
    "packages": "pending",
}
CASES = [
    ("running", dict(config=FULL, power="running"), DONE_THROUGH_START, "open"),
    (
        "started-by-token-but-stopped",
        dict(config=FULL, power="stopped", tasks=[task("qmstart", 201)]),
        dict(DONE_THROUGH_START, start="uncertain"),
        "uncertain",
    ),
    (
        "not-started",
        dict(config=FULL, power="stopped"),
        dict(DONE_THROUGH_START, seed="pending", start="pending"),
        "open",
    ),
    (
        "start-task-of-another-token",
        dict(config=FULL, power="stopped", tasks=[task("qmstart", 201, user="root@pam")]),
        dict(DONE_THROUGH_START, seed="pending", start="pending"),
        "open",
    ),
    (
        "start-task-still-running",
        dict(config=FULL, power="stopped", tasks=[task("qmstart", 201, status=None)]),
        dict(DONE_THROUGH_START, start="uncertain"),
        "uncertain",
    ),
    (
        "only-cloned",
        dict(config=CLONED, power="stopped"),
        dict(
            DONE_THROUGH_START,
            resources="pending",
            disk="pending",
            cloudinit="pending",
            seed="pending",
            start="pending",
        ),
        "open",
    ),
    (
        "resources-not-disk",
        dict(config=dict(CLONED, tags=instance_tag(OPID)), power="stopped"),
        dict(DONE_THROUGH_START, disk="pending", cloudinit="pending", seed="pending", start="pending"),
        "open",
    ),
    (
        "disk-not-cloudinit",
        dict(config=dict(CLONED, tags=instance_tag(OPID), scsi0="local-lvm:vm-201-disk-0,size=20G"), power="stopped"),
        dict(DONE_THROUGH_START, cloudinit="pending", seed="pending", start="pending"),
        "open",
    ),
    (
        "cloudinit-keys-differ",
        dict(config=dict(FULL, sshkeys="ssh-ed25519%20AAAA%20other"), power="stopped"),
        dict(DONE_THROUGH_START, cloudinit="pending", seed="pending", start="pending"),
        "open",
    ),
    (
        "disk-elsewhere",
        dict(config=dict(FULL, scsi0="other-lvm:vm-201-disk-0,size=20G")),
        {kind: "pending" for kind in DONE_THROUGH_START} | {"clone": "uncertain"},
        "uncertain",
    ),
    (
        "running-seed-invalid",
        dict(config=FULL, dumps=dict(REC["dump"], user="#cloud-config\nuser: debian\n")),
        dict(DONE_THROUGH_START, seed="uncertain", start="pending"),
        "uncertain",
    ),
    (
        "running-but-resources-differ",
        dict(config=dict(FULL, cores=4)),
        {kind: "pending" for kind in DONE_THROUGH_START} | {"clone": "completed"},
        "open",
    ),
]


@pytest.mark.parametrize(
    "routes,expected,operation_status", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_decision_table(
    store: JournalStore, routes: dict[str, t.Any], expected: dict[str, str], operation_status: str
) -> None:
    client = client_for(**routes)
    result = adopt(store, client)
    only_gets(client)
    assert result["changed"] and result["adopted"] and result["operation_id"] == OPID
    assert statuses(result) == expected
    document = store.load(OPID)
    validate_document(document, OPID)
    assert {item["kind"]: item["status"] for item in document["stages"]} == expected
    assert document["status"] == operation_status == result["operation"]["status"]
    for item in document["stages"]:
        if item["status"] == "pending":
            assert item["evidence"] == {} and not item["submissionStarted"] and item["request"] is None
        else:
            assert item["request"] == {"adopted": True} and item["attempts"] == 1
        if item["status"] == "uncertain":
            assert item["failure"]["code"] == "outcome_uncertain" and document["failure"]["stage"] == item["kind"]
    assert store.target_holder(SCOPE, 201) == OPID


def test_completed_evidence_is_what_the_stages_record(store: JournalStore) -> None:
    tasks = [task("resize", 201), task("qmclone", 9000, start=0x6B0D00E0), task("qmclone", 9000, start=0x6B0D00E1)]
    adopt(store, client_for(FULL, tasks=tasks))
    digest = FULL["digest"]
    clone = evidence(store, "clone")
    assert clone == {
        "volid": "local-lvm:vm-201-disk-0",
        "digest": digest,
        "macaddr": "BC:24:11:C4:FF:C1",
        "diskSizeBytes": 20 * GIB,
        "adopted": True,
    }
    document = store.load(OPID)
    assert store.stage(document, "clone")["upid"] is None  # two qmclone tasks of the template: not singled out
    assert store.stage(document, "disk")["upid"] == tasks[0]["upid"]
    assert evidence(store, "resources") == {
        "digest": digest,
        "cores": 2,
        "memoryMiB": 2048,
        "tags": instance_tag(OPID),
        "adopted": True,
    }
    assert evidence(store, "disk") == {
        "digest": digest,
        "diskSizeBytes": 20 * GIB,
        "volid": "local-lvm:vm-201-disk-0",
        "adopted": True,
    }
    assert evidence(store, "cloudinit") == {
        "digest": digest,
        "net0Mac": "BC:24:11:C4:FF:C1",
        "bridge": "vmbr0",
        "guestReady": False,
        "attested": True,
        "sshKeyCount": 1,
        "adopted": True,
    }
    assert evidence(store, "seed") == {
        "seedHashes": dump_hashes(REC["dump"]),
        "seedDigest": digest,
        "digest": digest,
        "seedVerdict": "valid",
        "adopted": True,
    }
    assert evidence(store, "start") == {
        "powerState": "running",
        "guestReady": False,
        "startResolvedBy": "power_state",
        "adopted": True,
    }
    assert document["handoff"] == {} and document["confirmation"] == expected_confirmation(PLANNED.plan, SCOPE)


def test_snapshot_listed_is_reported(store: JournalStore, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = planned(20)
    plan.plan["snapshotAfterProvisioning"] = True
    plan.plan["steps"] = plan.plan["steps"] + [{"position": 9, "kind": "snapshot"}]
    client = client_for(
        bound(REC["config_after"], plan=plan.plan), snapshots=[{"name": snapshot_name(OPID), "snaptime": 1779237100}]
    )
    result = adopt(store, client, plan=plan, environ=dict(ON, VMANYWARE_SNAPSHOTS_ENABLED="true"))
    assert statuses(result)["snapshot"] == "pending" and "snapshot is listed" in result["adoption"][-1]["reason"]
    only_gets(client)


# -- refusals ----------------------------------------------------------------------------------------------
def test_no_vm_is_not_found(store: JournalStore) -> None:
    client = client_for(pve_error("config_missing", "GET", VM + "/config"))
    with pytest.raises(VmanywareError) as info:
        adopt(store, client)
    assert info.value.code == "not_found" and info.value.details == {"vmid": 201, "node": "pve-test"}
    only_gets(client)
    assert store.list_operations() == []


@pytest.mark.parametrize(
    "description",
    [
        None,
        "made by someone else",
        binding_description({"operationId": OPID, "plan": PLANNED.plan}) + "\n",
        "vmanyware operation op-short\ndefinitionHash x\nplanHash y",
    ],
)
def test_vm_without_our_description_is_not_found(store: JournalStore, description: str | None) -> None:
    config = dict(FULL)
    config.pop("description")
    if description is not None:
        config["description"] = description
    with pytest.raises(VmanywareError) as info:
        adopt(store, client_for(config))
    assert info.value.code == "not_found"
    assert store.list_operations() == [] and os.listdir(os.path.join(store.journal_dir, "targets")) == []


def test_changed_definition_is_plan_changed(store: JournalStore) -> None:
    other = planned(24)
    client = client_for(FULL)
    with pytest.raises(VmanywareError) as info:
        adopt(store, client, plan=other)
    assert info.value.code == "plan_changed" and info.value.details == {
        "fields": ["definitionHash", "planHash"],
        "operationId": OPID,
    }
    assert store.list_operations() == []


def test_gates_and_confirmation_come_before_any_request(store: JournalStore) -> None:
    client = client_for(FULL)
    with pytest.raises(VmanywareError) as missing:
        adopt(store, client, confirmation=None)
    assert (
        missing.value.code == "confirmation_required"
        and missing.value.details["expected_confirmation"]["targetVmid"] == 201
    )
    with pytest.raises(VmanywareError) as disabled:
        adopt(store, client, environ={})
    assert disabled.value.code == "provisioning_disabled"
    wrong = dict(expected_confirmation(PLANNED.plan, SCOPE), targetVmid=202)
    with pytest.raises(VmanywareError) as changed:
        adopt(store, client, confirmation=wrong)
    assert changed.value.code == "plan_changed" and changed.value.details["fields"] == ["targetVmid"]
    assert client.log == []


def test_other_provider_is_plan_changed(store: JournalStore) -> None:
    client = client_for(FULL)
    client.provider_scope_id = "pve:" + "d" * 64
    with pytest.raises(VmanywareError) as info:
        adopt(store, client)
    assert info.value.code == "plan_changed" and info.value.details["fields"] == ["providerScopeId"]
    assert [path for _m, path, _p in client.log] == ["/version"]


def test_locked_vm_is_refused(store: JournalStore) -> None:
    with pytest.raises(VmanywareError) as info:
        adopt(store, client_for(dict(FULL, lock="backup")))
    assert info.value.code == "locked" and info.value.details["lock"] == "backup"
    assert store.list_operations() == []


def test_operation_still_in_the_journal_is_returned_unchanged(store: JournalStore) -> None:
    operation_id = new_operation(store)
    config = bound(REC["config_after"], operation_id=operation_id)
    path = store.operation_path(operation_id)
    before = Path(path).read_bytes()
    client = client_for(config)
    result = adopt(store, client)
    assert result["changed"] is False and result["adopted"] is False and result["operation_id"] == operation_id
    assert result["operation"]["stages"][0]["status"] == "pending" and result["adoption"] == []
    assert Path(path).read_bytes() == before
    assert [path for _m, path, _p in client.log] == ["/version", VM + "/config"]


def test_target_held_by_another_operation(store: JournalStore) -> None:
    holder = new_operation(store, disk_gib=24)
    with pytest.raises(VmanywareError) as info:
        adopt(store, client_for(FULL))
    assert info.value.code == "conflicting_operation" and info.value.details["operationId"] == holder
    with pytest.raises(VmanywareError) as preview:
        adopt(store, client_for(FULL), check_mode=True)
    assert preview.value.code == "conflicting_operation"
    assert store.list_operations() == [holder]


def test_key_held_by_another_operation(store: JournalStore) -> None:
    document, _created = store.create_operation(  # same plan, same default key, another id
        idempotency_key=default_idempotency_key(PLANNED.plan, SCOPE),
        provider_scope_id=SCOPE,
        definition=PLANNED.definition,
        mapping=PLANNED.mapping,
        plan=PLANNED.plan,
        confirmation=expected_confirmation(PLANNED.plan, SCOPE),
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=[step["kind"] for step in PLANNED.plan["steps"]],
    )
    holder = document["operationId"]
    store.abandon_operation(holder)  # the target is free, the key stays bound to it
    with pytest.raises(VmanywareError) as info:
        adopt(store, client_for(FULL))
    assert info.value.code == "idempotency_key_conflict" and info.value.details["operationId"] == holder
    with pytest.raises(VmanywareError) as preview:
        adopt(store, client_for(FULL), check_mode=True)
    assert preview.value.code == "idempotency_key_conflict"


# -- check mode --------------------------------------------------------------------------------------------
def test_check_mode_reads_and_writes_nothing(store: JournalStore) -> None:
    client = client_for(FULL)
    result = adopt(store, client, check_mode=True)
    only_gets(client)
    assert result["changed"] and result["adopted"] and result["operation_id"] == OPID
    validate_document(result["preview_document"], OPID)
    assert statuses(result) == DONE_THROUGH_START and result["observed"]["powerState"] == "running"
    assert store.list_operations() == []
    for sub in ("targets", "keys"):
        assert os.listdir(os.path.join(store.journal_dir, sub)) == []
    applied = adopt(store, client_for(FULL))
    strip = ("createdAt", "updatedAt", "dispatchedAt", "completedAt")

    def timeless(document: dict[str, t.Any]) -> str:
        return json.dumps(
            {
                k: ([{s: v for s, v in item.items() if s not in strip} for item in value] if k == "stages" else value)
                for k, value in document.items()
                if k not in strip
            },
            sort_keys=True,
        )

    assert timeless(store.load(OPID)) == timeless(result["preview_document"]) and applied["adopted"]


# -- the read-only client and the journal ------------------------------------------------------------------
def test_read_only_client_refuses_everything_but_get() -> None:
    reader = ReadOnlyClient(client_for(FULL))
    assert reader.get("/version")["version"] == "9.1.3"
    assert reader.request("GET", "/version")["data"]["release"] == "9.1"
    for call in (
        lambda: reader.post(VM + "/status/start"),
        lambda: reader.put(VM + "/config", cores=4),
        lambda: reader.request("POST", VM + "/status/start"),
        lambda: reader.delete(VM),
    ):
        with pytest.raises(VmanywareError) as info:
            call()
        assert info.value.code == "internal_error"


def test_parse_binding() -> None:
    text = binding_description({"operationId": OPID, "plan": PLANNED.plan})
    assert parse_binding(text) == (OPID, PLANNED.plan["definitionHash"], PLANNED.plan["planHash"])
    for other in (None, 5, text + "\n", text.replace("planHash", "planhash"), text.upper()):
        assert parse_binding(other) is None


def _observed(*statuses: str) -> list[dict[str, t.Any]]:
    entries = []
    for status in statuses:
        entry: dict[str, t.Any] = {
            "status": status,
            "evidence": {"digest": "d"} if status == "completed" else {},
            "upid": None,
        }
        if status == "uncertain":
            entry["failure"] = {"code": "outcome_uncertain", "message": "check it"}
        entries.append(entry)
    return entries


def _document(observed: list[dict[str, t.Any]]) -> dict[str, t.Any]:
    plan = PLANNED.plan
    snapshots = {
        "definition": PLANNED.definition,
        "mapping": PLANNED.mapping,
        "plan": plan,
        "confirmation": {"confirmed": True},
    }
    kinds = [step["kind"] for step in plan["steps"]]
    return adopted_operation_document(
        OPID,
        None,
        {"scope": SCOPE, "node": "pve-test", "vmid": 201},
        snapshots,
        kinds,
        observed,
        "2025-01-30T04:39:34.600364Z",
    )


def test_adopted_document_keeps_the_stage_order() -> None:
    n = len(PLANNED.plan["steps"])
    document = _document(_observed("completed", "uncertain", *["pending"] * (n - 2)))
    assert document["status"] == "uncertain"
    assert document["failure"] == {"code": "outcome_uncertain", "message": "check it", "stage": "resources"}
    assert _document(_observed(*["completed"] * n))["status"] == "completed"
    for bad in (
        _observed("pending", "completed", *["pending"] * (n - 2)),
        _observed("uncertain", "uncertain", *["pending"] * (n - 2)),
        _observed("completed", "pending", "completed", *["pending"] * (n - 3)),
    ):
        with pytest.raises(JournalError) as info:
            _document(bad)
        assert info.value.code == "internal_error"
    for bad_input in (
        _observed("completed"),
        [{"status": "failed"}] * n,
        [dict(_observed("completed")[0], upid="nope")] + _observed(*["pending"] * (n - 1)),
    ):
        with pytest.raises(VmanywareError):
            _document(bad_input)


def test_journal_adopt_operation_never_overwrites(store: JournalStore) -> None:
    operation_id = new_operation(store)
    before = Path(store.operation_path(operation_id)).read_bytes()
    n = len(PLANNED.plan["steps"])
    document, adopted = store.adopt_operation(
        operation_id=operation_id,
        idempotency_key="other-key",
        provider_scope_id=SCOPE,
        definition=PLANNED.definition,
        mapping=PLANNED.mapping,
        plan=PLANNED.plan,
        confirmation={"confirmed": True},
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=[step["kind"] for step in PLANNED.plan["steps"]],
        observed=_observed(*["completed"] * n),
    )
    assert adopted is False and document["status"] == "open"
    assert Path(store.operation_path(operation_id)).read_bytes() == before
    assert store.find_by_idempotency_key("other-key") is None


def test_a_crash_before_the_target_claim_is_completed_by_the_next_adoption(store: JournalStore) -> None:
    adopt(store, client_for(FULL))
    path = store.operation_path(OPID)
    before = Path(path).read_bytes()
    claims = os.path.join(store.journal_dir, "targets")
    for name in os.listdir(claims):
        os.remove(os.path.join(claims, name))  # as if the process died between the operation file and its target claim
    assert store.target_holder(SCOPE, 201) is None
    again = adopt(store, client_for(FULL))
    assert again["changed"] is False and again["adopted"] is False
    assert store.target_holder(SCOPE, 201) == OPID and Path(path).read_bytes() == before


def test_a_profile_stage_is_not_judged_from_reads_and_runs_again() -> None:
    """No API read shows what a profile's role did: its ``profile:<name>`` stage stays pending (it runs again), and
    the profiles after it wait for it; no observation is read for either (``None`` would fail on a read)."""
    decisions = decide(t.cast(t.Any, None), ["profile:base", "profile:ssh-hardening"])
    assert [(kind, decision.status) for kind, decision in decisions] == [
        ("profile:base", "pending"),
        ("profile:ssh-hardening", "pending"),
    ]
    assert decisions[0][1].reason == NOT_JUDGED
    assert decisions[1][1].reason.startswith("Stages complete in order: profile:base is not completed.")
