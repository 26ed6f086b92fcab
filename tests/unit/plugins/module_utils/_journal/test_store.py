# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Tests of the durable operation journal (the _journal package, docs/journal.md)."""

from __future__ import annotations

import copy
import json
import multiprocessing
import os
import stat
import subprocess
import sys
import textwrap
import typing as t
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ansible_collections
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core import files as _files
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.lock import FileLock
from ansible_collections.vmanyware.proxmox.plugins.module_utils import _journal
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    JournalError,
    JournalStore,
    resolve_journal_dir,
)
from hashed_plan import hashed_plan

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "crash_harness"))
import vmanyware_crash_hook as crash_hook  # noqa: E402  pylint: disable=wrong-import-position

FORK = multiprocessing.get_context("fork")
SCOPE = "pve:" + "c" * 64
UPID = "UPID:pve1:0000A1B2:0001C3D4:65A1B2C3:qmclone:9000:root@pam!vmanyware:"
STAGES = ["clone", "configure", "resize", "start"]


def _collections_root() -> str:
    for entry in ansible_collections.__path__:
        if os.path.isdir(os.path.join(entry, "vmanyware", "proxmox")):
            return os.path.dirname(entry)
    raise AssertionError("collection not importable")  # pragma: no cover


def _inputs(**overrides: t.Any) -> dict[str, t.Any]:
    inputs: dict[str, t.Any] = {
        "idempotency_key": "run-42-secret-key",
        "provider_scope_id": SCOPE,
        "definition": {"apiVersion": "vmanyware.dev/v1", "kind": "Environment", "name": "web", "image": "debian-12"},
        "mapping": {
            "image": "debian-12",
            "node": "pve1",
            "templateVmid": 9000,
            "imageDefaultUser": {"passwordLocked": True},
        },
        "plan": {"definitionHash": "a" * 64, "planHash": "b" * 64, "steps": [{"kind": "clone"}]},
        "confirmation": {"targetVmid": 123, "planHash": "b" * 64},
        "target_node": "pve1",
        "target_vmid": 123,
        "stage_kinds": list(STAGES),
    }
    inputs.update(overrides)
    if "plan" not in overrides:  # the hashes of the snapshots, as every load checks them
        try:
            inputs["plan"] = hashed_plan(
                inputs["definition"], inputs["mapping"], inputs["target_vmid"], steps=[{"kind": "clone"}]
            )
        except (TypeError, ValueError):  # inputs that create_operation refuses before anything is hashed
            inputs["plan"] = {"definitionHash": "a" * 64, "planHash": "b" * 64, "steps": [{"kind": "clone"}]}
    if "confirmation" not in overrides:
        inputs["confirmation"] = {"targetVmid": inputs["target_vmid"], "planHash": inputs["plan"]["planHash"]}
    return inputs


@pytest.fixture()
def journal_dir(tmp_path: Path) -> Path:
    return tmp_path / "journal"


@pytest.fixture()
def store(journal_dir: Path) -> JournalStore:
    return JournalStore(str(journal_dir), lock_timeout=20)


def _create(store: JournalStore, **overrides: t.Any) -> dict[str, t.Any]:
    document, created = store.create_operation(**_inputs(**overrides))
    assert created
    return document


def _complete_stage(store: JournalStore, operation_id: str, kind: str) -> dict[str, t.Any]:
    store.record_dispatch(operation_id, kind, {"node": "pve1"})
    return store.record_completed(operation_id, kind, {"ok": True})


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- directory resolution and layout ---------------------------------------------------------


def test_resolve_journal_dir_precedence() -> None:
    env = {"VMANYWARE_JOURNAL_DIR": "/env/j", "XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}
    assert resolve_journal_dir("/opt/j", env) == "/opt/j"
    assert resolve_journal_dir(None, env) == "/env/j"
    assert resolve_journal_dir("", env) == "/env/j"
    assert resolve_journal_dir(None, {"XDG_STATE_HOME": "/xdg", "HOME": "/home/u"}) == "/xdg/vmanyware/journal"
    assert (
        resolve_journal_dir(None, {"XDG_STATE_HOME": "relative", "HOME": "/home/u"})
        == "/home/u/.local/state/vmanyware/journal"
    )
    assert resolve_journal_dir(None, {"HOME": "/home/u/"}) == "/home/u/.local/state/vmanyware/journal"


def test_resolve_journal_dir_refuses_relative_paths() -> None:
    with pytest.raises(VmanywareError) as info:
        resolve_journal_dir("rel/dir", {})
    assert info.value.code == "invalid_option" and "rel/dir" not in str(info.value)
    with pytest.raises(VmanywareError) as info:
        resolve_journal_dir(None, {"VMANYWARE_JOURNAL_DIR": "rel"})
    assert info.value.code == "configuration_error"


def test_store_creates_private_layout(store: JournalStore, journal_dir: Path) -> None:
    assert _mode(journal_dir) == 0o700
    for sub in ("targets", "keys", "locks"):
        assert _mode(journal_dir / sub) == 0o700
    document = _create(store)
    path = journal_dir / (document["operationId"] + ".json")
    assert _mode(path) == 0o600
    assert path.name == "op-%s.json" % document["operationId"][3:]
    assert len(os.listdir(journal_dir / "targets")) == 1 and len(os.listdir(journal_dir / "keys")) == 1
    assert all(_mode(journal_dir / "targets" / name) == 0o600 for name in os.listdir(journal_dir / "targets"))


def test_store_refuses_unsafe_directories(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(VmanywareError) as info:
        JournalStore(str(shared))
    assert info.value.code == "configuration_error"
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(VmanywareError) as info:
        JournalStore(str(a_file))
    assert info.value.code == "configuration_error"
    with pytest.raises(VmanywareError) as info:
        JournalStore("relative")
    assert info.value.code == "invalid_option"


# --- operation ids ---------------------------------------------------------------------------


def test_generated_ids_are_unique_and_well_formed() -> None:
    ids = {_journal.new_operation_id() for _index in range(2000)}
    assert len(ids) == 2000
    assert all(_journal.validate_operation_id(value) == value for value in ids)


BAD_IDS = [
    "../x",
    "/etc/passwd",
    "op-" + "a" * 25 + "\x00",
    "op-" + "a" * 27,
    "op-" + "A" * 26,
    "op-" + "a" * 25 + "1",
    "op-../../../../etc/passwd",
    "op-" + "a" * 10000,
    "",
    "op-aaaaaaaaaaaaaaaaaaaaaaaaaa\n",
    42,
    None,
]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_outside_operation_ids_are_validated_without_echo(store: JournalStore, bad: t.Any) -> None:
    calls: list[t.Callable[[], t.Any]] = [
        lambda: store.load(bad),
        lambda: store.record_dispatch(bad, "clone", {}),
        lambda: store.record_evidence(bad, "clone", {}),
        lambda: store.set_handoff(bad, {}),
        lambda: store.update_operation_status(bad, "completed"),
        lambda: store.abandon_operation(bad),
    ]
    for call in calls:
        with pytest.raises(VmanywareError) as info:
            call()
        assert info.value.code == "invalid_option"
        rendered = json.dumps(info.value.to_result())
        assert (not isinstance(bad, str) or not bad or bad not in rendered) and "passwd" not in rendered
    # nothing was created for the bad id: no operation file, no lock file, no claim, anywhere
    assert sorted(os.listdir(store.journal_dir)) == ["keys", "locks", "targets"]
    for sub in ("keys", "locks", "targets"):
        assert os.listdir(os.path.join(store.journal_dir, sub)) == []
    assert not os.path.lexists("/etc/passwd.lock") and not os.path.lexists(
        os.path.join(os.path.dirname(store.journal_dir), "x.json")
    )


# --- creation, idempotency and the target association ----------------------------------------


def test_create_document_shape(store: JournalStore, journal_dir: Path) -> None:
    document = _create(store)
    assert document == store.load(document["operationId"])
    assert list(document) == list(_journal.document._TOP_KEYS)
    assert document["schemaVersion"] == 1 and document["kind"] == "vmanyware.dev/v1/Operation"
    assert document["status"] == "open" and document["failure"] is None and document["release"] is None
    assert document["revision"] == 1 and document["handoff"] == {}
    assert document["target"] == {"scope": SCOPE, "node": "pve1", "vmid": 123}
    assert document["createdAt"].endswith("Z") and document["createdAt"] == document["updatedAt"]
    assert [s["kind"] for s in document["stages"]] == STAGES
    assert [s["position"] for s in document["stages"]] == [1, 2, 3, 4]  # 1-based, like the plan's steps
    assert all(s["status"] == "pending" and s["submissionStarted"] is False for s in document["stages"])
    assert document["idempotencyKeyHash"] == _journal.hash_idempotency_key("run-42-secret-key")
    raw = (journal_dir / (document["operationId"] + ".json")).read_bytes()
    for name in os.listdir(journal_dir / "keys"):
        raw += (journal_dir / "keys" / name).read_bytes()
    assert b"run-42-secret-key" not in raw
    # snapshots are stored as given: never redacted (passwordLocked is an attestation, not a secret)
    assert document["mapping"]["imageDefaultUser"] == {"passwordLocked": True}


def test_create_copies_snapshots(store: JournalStore) -> None:
    inputs = _inputs()
    document = store.create_operation(**inputs)[0]
    inputs["definition"]["name"] = "changed"
    assert store.load(document["operationId"])["definition"]["name"] == "web"


def test_idempotent_replay_returns_the_same_operation(store: JournalStore) -> None:
    first = _create(store)
    store.record_dispatch(first["operationId"], "clone", {"newid": 123})
    again, created = store.create_operation(**_inputs())
    assert created is False
    assert again["operationId"] == first["operationId"]
    assert again["stages"][0]["status"] == "dispatching"
    assert store.list_operations() == [first["operationId"]]
    assert store.find_by_idempotency_key("run-42-secret-key") == first["operationId"]
    assert store.find_by_idempotency_key("other") is None


@pytest.mark.parametrize(
    "change",
    [
        {"plan": {"definitionHash": "a" * 64, "planHash": "d" * 64}},
        {"plan": {"definitionHash": "e" * 64, "planHash": "b" * 64}},
        {"confirmation": {"targetVmid": 123, "planHash": "f" * 64}},
        {"provider_scope_id": "pve:other"},
        {"target_vmid": 124},
        {"target_node": "pve2"},
        {"stage_kinds": ["clone"]},
    ],
)
def test_same_key_different_inputs_conflicts(store: JournalStore, change: dict[str, t.Any]) -> None:
    first = _create(store)
    with pytest.raises(JournalError) as info:
        store.create_operation(**_inputs(**change))
    assert info.value.code == "idempotency_key_conflict"
    assert info.value.details == {"operationId": first["operationId"]}
    assert "run-42-secret-key" not in json.dumps(info.value.to_result())
    assert store.list_operations() == [first["operationId"]]


def test_target_is_held_by_one_operation(store: JournalStore) -> None:
    first = _create(store)
    for change in (
        {"idempotency_key": "other"},
        {"idempotency_key": None},
        {"idempotency_key": "x", "target_node": "pve2"},
    ):
        with pytest.raises(JournalError) as info:
            store.create_operation(**_inputs(**change))
        assert info.value.code == "conflicting_operation"
        assert info.value.details == {"operationId": first["operationId"]}
    assert store.target_holder(SCOPE, 123) == first["operationId"]
    # other VMIDs and other provider scopes are independent
    _create(store, idempotency_key="b", target_vmid=124)
    _create(store, idempotency_key="c", provider_scope_id="pve:" + "d" * 64)
    assert len(store.list_operations()) == 3


def test_failure_keeps_the_association(store: JournalStore) -> None:
    first = _create(store)
    store.record_dispatch(first["operationId"], "clone", {})
    failed = store.record_failed(first["operationId"], "clone", "task_failed", "A Proxmox task ended with an error.")
    assert failed["status"] == "failed"
    assert failed["failure"] == {
        "code": "task_failed",
        "message": "A Proxmox task ended with an error.",
        "stage": "clone",
    }
    with pytest.raises(JournalError) as info:
        store.create_operation(**_inputs(idempotency_key="retry"))
    assert info.value.code == "conflicting_operation"
    with pytest.raises(JournalError) as info:
        store.close_operation(first["operationId"])
    assert info.value.code == "journal_conflict"


def test_abandon_releases_target_and_freezes_operation(store: JournalStore, journal_dir: Path) -> None:
    first = _create(store)
    oid = first["operationId"]
    released = store.abandon_operation(oid)
    assert released["release"]["reason"] == "abandoned" and released["revision"] == 2
    assert os.listdir(journal_dir / "targets") == []
    assert store.target_holder(SCOPE, 123) is None
    for call in (
        lambda: store.record_dispatch(oid, "clone", {}),
        lambda: store.set_handoff(oid, {}),
        lambda: store.abandon_operation(oid),
    ):
        with pytest.raises(JournalError) as info:
            call()
        assert info.value.code == "journal_conflict"
    # the same key still names the abandoned operation; a new key may take the target
    again, created = store.create_operation(**_inputs())
    assert (again["operationId"], created) == (oid, False)
    assert store.target_holder(SCOPE, 123) is None
    second = _create(store, idempotency_key="new-key")
    assert store.target_holder(SCOPE, 123) == second["operationId"]


def test_close_requires_completed(store: JournalStore) -> None:
    oid = _create(store, stage_kinds=["clone"])["operationId"]
    with pytest.raises(JournalError):
        store.close_operation(oid)
    _complete_stage(store, oid, "clone")
    store.set_handoff(oid, {"vmid": 123, "ipv4": "192.0.2.10", "api_token_secret": "s3cr3t"})
    store.update_operation_status(oid, "completed", expected_status="open")
    closed = store.close_operation(oid)
    assert closed["release"]["reason"] == "closed"
    assert closed["handoff"] == {"vmid": 123, "ipv4": "192.0.2.10", "api_token_secret": "<redacted>"}
    with pytest.raises(VmanywareError):
        store.release_target(oid, "whatever")


def test_stale_claims_after_crash_are_recognized(store: JournalStore, journal_dir: Path) -> None:
    first = _create(store)
    # a release whose claim removal was cut short: the claim still exists but the document says released
    claim = journal_dir / "targets" / os.listdir(journal_dir / "targets")[0]
    saved = claim.read_bytes()
    store.abandon_operation(first["operationId"])
    claim.write_bytes(saved)
    claim.chmod(0o600)
    assert store.target_holder(SCOPE, 123) is None
    second = _create(store, idempotency_key="k2")
    assert store.target_holder(SCOPE, 123) == second["operationId"]
    # a claim whose operation file is gone (removed by an operator) is stale too
    os.unlink(store.operation_path(second["operationId"]))
    third = _create(store, idempotency_key="k2")
    assert third["operationId"] != second["operationId"]


def test_replay_completes_a_creation_cut_short(store: JournalStore, journal_dir: Path) -> None:
    first = _create(store)
    for name in os.listdir(journal_dir / "targets"):  # crash between key claim and target claim
        os.unlink(journal_dir / "targets" / name)
    again, created = store.create_operation(**_inputs())
    assert (again["operationId"], created) == (first["operationId"], False)
    assert store.target_holder(SCOPE, 123) == first["operationId"]
    # if another operation took the target meanwhile, the replay conflicts
    for name in os.listdir(journal_dir / "targets"):
        os.unlink(journal_dir / "targets" / name)
    other = _create(store, idempotency_key="other")
    with pytest.raises(JournalError) as info:
        store.create_operation(**_inputs())
    assert info.value.code == "conflicting_operation" and info.value.details == {"operationId": other["operationId"]}


@pytest.mark.parametrize(
    "change,code",
    [
        ({"idempotency_key": ""}, "invalid_option"),
        ({"provider_scope_id": "has space"}, "invalid_option"),
        ({"target_node": "../etc"}, "invalid_option"),
        ({"target_vmid": 99}, "invalid_target_vmid"),
        ({"target_vmid": True}, "invalid_target_vmid"),
        ({"stage_kinds": []}, "invalid_option"),
        ({"stage_kinds": ["clone", "clone"]}, "invalid_option"),
        ({"stage_kinds": ["operation"]}, "invalid_option"),
        ({"stage_kinds": ["Clone"]}, "invalid_option"),
        ({"plan": {"planHash": "b" * 64}}, "invalid_option"),
        ({"definition": {1: "x"}}, "invalid_option"),
        ({"definition": {"x": float("nan")}}, "invalid_option"),
        ({"definition": {"x": object()}}, "invalid_option"),
        ({"confirmation": ["not", "a", "mapping"]}, "invalid_option"),
    ],
)
def test_create_validates_arguments(store: JournalStore, change: dict[str, t.Any], code: str) -> None:
    with pytest.raises(VmanywareError) as info:
        store.create_operation(**_inputs(**change))
    assert info.value.code == code
    assert store.list_operations() == []


# --- stages ----------------------------------------------------------------------------------


def test_full_stage_lifecycle(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    doc = store.record_dispatch(oid, "clone", {"newid": 123, "password": "hunter2", "nested": {"Ticket": "PVE:x"}})
    clone = store.stage(doc, "clone")
    assert clone["status"] == "dispatching" and clone["submissionStarted"] is True and clone["attempts"] == 1
    assert clone["dispatchedAt"].endswith("Z") and clone["request"] == {
        "newid": 123,
        "password": "<redacted>",
        "nested": {"Ticket": "<redacted>"},
    }
    doc = store.record_submitted(oid, "clone", UPID, {"volid": "local-lvm:vm-123-disk-0"})
    assert _journal.stage(doc, "clone")["upid"] == UPID
    doc = store.record_evidence(oid, "clone", {"mac": "BC:24:11:00:00:01"})
    doc = store.record_completed(oid, "clone", {"digest": "d" * 40})
    clone = _journal.stage(doc, "clone")
    assert clone["status"] == "completed" and clone["completedAt"].endswith("Z")
    assert clone["evidence"] == {"volid": "local-lvm:vm-123-disk-0", "mac": "BC:24:11:00:00:01", "digest": "d" * 40}
    for kind in STAGES[1:]:
        doc = _complete_stage(store, oid, kind)
    doc = store.update_operation_status(oid, "completed")
    assert doc["status"] == "completed" and doc["revision"] == 1 + 4 + 6 + 1
    assert b"hunter2" not in Path(store.operation_path(oid)).read_bytes()
    with pytest.raises(JournalError):
        store.record_evidence(oid, "nope", {})


@pytest.mark.parametrize(
    "prepare,call",
    [
        ([], lambda s, o: s.record_submitted(o, "clone", None)),
        ([], lambda s, o: s.record_completed(o, "clone")),
        ([], lambda s, o: s.record_uncertain(o, "clone", "reply_lost", "lost")),
        ([], lambda s, o: s.record_dispatch(o, "configure", {})),
        ([], lambda s, o: s.record_failed(o, "configure", "task_failed", "x")),
        (["dispatch"], lambda s, o: s.record_dispatch(o, "clone", {})),
        (["dispatch", "complete"], lambda s, o: s.record_completed(o, "clone")),
        (["dispatch", "complete"], lambda s, o: s.record_failed(o, "clone", "task_failed", "x")),
        (["dispatch", "fail"], lambda s, o: s.record_dispatch(o, "configure", {})),
        (["dispatch", "fail"], lambda s, o: s.record_completed(o, "clone")),
        (["dispatch", "uncertain"], lambda s, o: s.record_dispatch(o, "configure", {})),
        (["dispatch"], lambda s, o: s.update_operation_status(o, "completed")),
        (["dispatch"], lambda s, o: s.record_completed(o, "clone", expected_status="submitted")),
        (["dispatch"], lambda s, o: s.record_evidence(o, "clone", {}, expected_status="pending")),
        (["dispatch"], lambda s, o: s.update_operation_status(o, "open")),
        (["dispatch", "fail"], lambda s, o: s.update_operation_status(o, "open")),
    ],
)
def test_illegal_transitions_are_journal_conflicts(store: JournalStore, prepare: list[str], call: t.Any) -> None:
    oid = _create(store)["operationId"]
    steps = {
        "dispatch": lambda: store.record_dispatch(oid, "clone", {}),
        "complete": lambda: store.record_completed(oid, "clone"),
        "fail": lambda: store.record_failed(oid, "clone", "task_failed", "A Proxmox task ended with an error."),
        "uncertain": lambda: store.record_uncertain(oid, "clone", "reply_lost", "The reply was lost."),
    }
    for step in prepare:
        steps[step]()
    before = Path(store.operation_path(oid)).read_bytes()
    with pytest.raises(JournalError) as info:
        call(store, oid)
    assert info.value.code == "journal_conflict"
    assert Path(store.operation_path(oid)).read_bytes() == before


def test_uncertain_then_reconciled(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(oid, "clone", {})
    doc = store.record_uncertain(oid, "clone", "reply_lost", "The request was sent but its reply was lost.")
    assert doc["status"] == "uncertain" and doc["failure"]["stage"] == "clone"
    assert _journal.stage(doc, "clone")["failure"]["code"] == "reply_lost"
    doc = store.record_completed(oid, "clone", {"observed": "vm exists"}, expected_status="uncertain")
    assert doc["status"] == "open" and doc["failure"] is None
    assert _journal.stage(doc, "clone")["failure"] is None
    store.record_dispatch(oid, "configure", {})
    store.record_uncertain(oid, "configure", "task_unobservable", "The task status could not be polled.")
    doc = store.record_failed(oid, "configure", "task_failed", "A Proxmox task ended with an error.")
    assert doc["status"] == "failed" and doc["failure"]["stage"] == "configure"


def test_failed_before_dispatch_never_started_submission(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    doc = store.record_failed(oid, "clone", "preflight_failed", "At least one preflight check did not pass.")
    clone = _journal.stage(doc, "clone")
    assert clone["submissionStarted"] is False and clone["status"] == "failed" and clone["request"] is None


def test_failure_arguments_are_checked(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(oid, "clone", {})
    for code, message in (("made_up_code", "x"), ("task_failed", ""), ("task_failed", "x" * 2000), (None, "x")):
        with pytest.raises(VmanywareError) as info:
            store.record_failed(oid, "clone", code, message)  # type: ignore[arg-type]
        assert info.value.code == "invalid_option"
    with pytest.raises(VmanywareError):
        store.record_submitted(oid, "clone", "not-a-upid")
    with pytest.raises(VmanywareError):
        store.update_operation_status(oid, "failed")
    with pytest.raises(VmanywareError):
        store.update_operation_status(oid, "exploded")
    with pytest.raises(VmanywareError):
        store.update_operation_status(oid, "failed", failure={"code": "task_failed", "message": "x", "stage": "../x"})
    with pytest.raises(JournalError) as info:
        store.update_operation_status(
            oid, "failed", failure={"code": "task_failed", "message": "x", "stage": "unknown"}
        )
    assert info.value.code == "not_found"
    doc = store.update_operation_status(
        oid, "failed", failure={"code": "task_timeout", "message": "Deadline passed.", "stage": None}
    )
    assert doc["failure"] == {"code": "task_timeout", "message": "Deadline passed.", "stage": None}
    with pytest.raises(JournalError):
        store.update_operation_status(oid, "completed")


def test_lock_timeout_is_journal_locked(journal_dir: Path) -> None:
    store = JournalStore(str(journal_dir), lock_timeout=0.1)
    oid = _create(store)["operationId"]
    with FileLock(str(journal_dir / "locks" / (oid + ".lock"))):
        with pytest.raises(JournalError) as info:
            store.record_evidence(oid, "clone", {"x": 1})
        assert info.value.code == "journal_locked"
    with FileLock(str(journal_dir / ".lock")):
        with pytest.raises(JournalError) as info:
            store.create_operation(**_inputs(idempotency_key="k2", target_vmid=200))
        assert info.value.code == "journal_locked"
    assert store.list_operations() == [oid]
    store.record_evidence(oid, "clone", {"x": 1})


def test_expected_revision_is_compare_and_set(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    doc = store.load(oid)
    store.record_evidence(oid, "clone", {"n": 1}, expected_revision=doc["revision"])
    with pytest.raises(JournalError) as info:
        store.record_evidence(oid, "clone", {"n": 2}, expected_revision=doc["revision"])
    assert info.value.code == "journal_conflict" and info.value.details["rule"] == "revision"
    with pytest.raises(VmanywareError):
        store.record_evidence(oid, "clone", {}, expected_revision="1")  # type: ignore[arg-type]
    assert _journal.stage(store.load(oid), "clone")["evidence"] == {"n": 1}


def test_secrets_never_reach_the_file(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(
        oid, "clone", {"api_token_secret": "tok-SECRET-1", "cipassword": "pw-SECRET-2", "sshkeys": "ssh-ed25519 AAAA"}
    )
    store.record_evidence(oid, "clone", {"guest": {"out-data": "guest-OUTPUT-3"}, "password": "pw-SECRET-4"})
    raw = Path(store.operation_path(oid)).read_text()
    for secret in ("tok-SECRET-1", "pw-SECRET-2", "guest-OUTPUT-3", "pw-SECRET-4", "run-42-secret-key"):
        assert secret not in raw
    assert "ssh-ed25519 AAAA" in raw


# --- listing and cost ------------------------------------------------------------------------


def test_list_ignores_temp_lock_and_claim_files(store: JournalStore, journal_dir: Path) -> None:
    oid = _create(store)["operationId"]
    (journal_dir / (".%s.json.0123456789abcdef.tmp" % oid)).write_text("{torn")
    (journal_dir / "op-notanid.json").write_text("{}")
    (journal_dir / "README").write_text("x")
    store.record_evidence(oid, "clone", {"a": 1})
    assert store.list_operations() == [oid]
    assert store.load(oid)["stages"][0]["evidence"] == {"a": 1}


def test_list_and_stage_cost_do_not_grow_with_history(
    store: JournalStore, journal_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    oid = _create(store)["operationId"]
    for _index in range(10000):  # history: 10,000 files that list_operations must not parse
        (journal_dir / (_journal.new_operation_id() + ".json")).write_bytes(b"not parsed")
    reads: list[str] = []
    real_read = _journal.store.read_json_strict

    def counting(path: str, *args: t.Any, **kwargs: t.Any) -> t.Any:
        reads.append(path)
        return real_read(path, *args, **kwargs)

    monkeypatch.setattr(_journal.store, "read_json_strict", counting)
    listed = store.list_operations()
    assert len(listed) == 10001 and oid in listed and reads == []
    store.record_dispatch(oid, "clone", {})
    store.record_evidence(oid, "clone", {"x": 1})
    assert reads == [store.operation_path(oid)] * 2


# --- corruption: refused, never repaired -----------------------------------------------------


def _all_calls(store: JournalStore, oid: str) -> list[t.Callable[[], t.Any]]:
    return [
        lambda: store.load(oid),
        lambda: store.record_dispatch(oid, "clone", {}),
        lambda: store.record_submitted(oid, "clone", None),
        lambda: store.record_evidence(oid, "clone", {"x": 1}),
        lambda: store.record_completed(oid, "clone"),
        lambda: store.record_failed(oid, "clone", "task_failed", "x"),
        lambda: store.record_uncertain(oid, "clone", "reply_lost", "x"),
        lambda: store.set_handoff(oid, {}),
        lambda: store.update_operation_status(oid, "completed"),
        lambda: store.close_operation(oid),
        lambda: store.abandon_operation(oid),
        lambda: store.create_operation(**_inputs()),  # same key -> this operation
        lambda: store.create_operation(**_inputs(idempotency_key="other")),  # same target -> this operation
        lambda: store.target_holder(SCOPE, 123),
    ]


def _corruptions() -> list[t.Callable[[dict[str, t.Any], bytes], bytes]]:
    def with_doc(change: t.Callable[[dict[str, t.Any]], None]) -> t.Callable[[dict[str, t.Any], bytes], bytes]:
        def make(document: dict[str, t.Any], _raw: bytes) -> bytes:
            doc = copy.deepcopy(document)
            change(doc)
            return json.dumps(doc).encode()

        return make

    return [
        lambda _d, raw: raw[: len(raw) // 2],
        lambda _d, raw: b"",
        lambda _d, raw: b"\xff" + raw,
        lambda _d, raw: raw.replace(b'"status": "open"', b'"status": "open", "status": "open"', 1),
        lambda _d, raw: b"[]",
        with_doc(lambda d: d.update(schemaVersion=2)),
        with_doc(lambda d: d.update(kind="Operation")),
        with_doc(lambda d: d.update(status="exploded")),
        with_doc(lambda d: d.update(extra=1)),
        with_doc(lambda d: d.pop("handoff")),
        with_doc(lambda d: d.update(operationId=_journal.new_operation_id())),
        with_doc(lambda d: d.update(revision=0)),
        with_doc(lambda d: d.update(createdAt="2024-01-01 00:00:00")),
        with_doc(lambda d: d["target"].update(vmid="123")),
        with_doc(lambda d: d["plan"].pop("planHash")),
        with_doc(
            lambda d: d["stages"][1].update(
                status="completed",
                submissionStarted=True,
                attempts=1,
                dispatchedAt=d["createdAt"],
                completedAt=d["createdAt"],
                request={},
            )
        ),
        with_doc(lambda d: d["stages"][0].update(position=0)),
        with_doc(lambda d: d["stages"][0].update(status="dispatching")),
        with_doc(lambda d: d["stages"][0].update(failure={"code": "x", "message": "y"})),
        with_doc(lambda d: d["stages"].append(copy.deepcopy(d["stages"][0]))),
        with_doc(lambda d: d.update(status="failed")),
        with_doc(lambda d: d.update(stages=[])),
        # the recorded hashes are recomputed from the recorded snapshots (issue 31)
        with_doc(lambda d: d["plan"].update(planHash="b" * 64)),
        with_doc(lambda d: d["plan"].update(definitionHash="a" * 64)),
        with_doc(lambda d: d["definition"].update(name="other")),
        with_doc(lambda d: d["mapping"].update(templateVmid=9001)),
        with_doc(
            lambda d: d.update(mapping=dict(reversed(list(d["mapping"].items()))))
        ),  # planHash keeps the catalog's field order
        with_doc(lambda d: d["target"].update(vmid=124)),
        with_doc(lambda d: d["confirmation"].update(planHash="f" * 64)),
        with_doc(lambda d: d["plan"].update(target={"vmid": 124})),
        with_doc(
            lambda d: d["definition"].update(weight=1.5)
        ),  # no v1 field is a float: not hashable, so not a recorded snapshot
    ]


@pytest.mark.parametrize("corruption", range(len(_corruptions())))
def test_corrupt_file_is_refused_and_left_byte_identical(store: JournalStore, corruption: int) -> None:
    document = _create(store)
    oid = document["operationId"]
    path = Path(store.operation_path(oid))
    bad = _corruptions()[corruption](document, path.read_bytes())
    path.write_bytes(bad)
    stat_before = path.stat()
    for call in _all_calls(store, oid):
        with pytest.raises(JournalError) as info:
            call()
        assert info.value.code == "journal_corrupt"
        assert (
            info.value.message
            == "The journal file of operation %s is not a valid operation document; it was left untouched." % oid
        )
        assert info.value.details == {"operationId": oid}
        assert info.value.__cause__ is None
        assert path.read_bytes() == bad
    assert path.stat().st_ino == stat_before.st_ino and path.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert store.list_operations() == [oid]


def test_oversized_and_symlinked_files_are_corrupt(store: JournalStore, tmp_path: Path) -> None:
    oid = _create(store)["operationId"]
    path = Path(store.operation_path(oid))
    real = tmp_path / "elsewhere.json"
    real.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(real)
    with pytest.raises(JournalError) as info:
        store.load(oid)
    assert info.value.code == "journal_corrupt"
    path.unlink()
    path.write_bytes(b" " * (_journal.MAX_DOCUMENT_BYTES + 1))
    with pytest.raises(JournalError) as info:
        store.load(oid)
    assert info.value.code == "journal_corrupt"


def test_a_socket_fifo_or_directory_in_place_of_an_operation_file_is_corrupt(
    store: JournalStore, tmp_path: Path
) -> None:
    """Issue 31: any non-regular file is journal_corrupt (a socket cannot even be opened: still not an io_error)."""
    import socket

    for make in ("socket", "fifo", "directory"):
        oid = _create(store, idempotency_key=make, target_vmid=400 + len(make))["operationId"]
        path = Path(store.operation_path(oid))
        path.unlink()
        if make == "socket":
            server = socket.socket(socket.AF_UNIX)
            server.bind(str(path))
        elif make == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
        with pytest.raises(JournalError) as info:
            store.load(oid)
        assert info.value.code == "journal_corrupt", make
        if make == "socket":
            server.close()


def test_corrupt_claim_is_refused_and_left_alone(store: JournalStore, journal_dir: Path) -> None:
    _create(store)
    claim = journal_dir / "targets" / os.listdir(journal_dir / "targets")[0]
    claim.write_bytes(b'{"kind": "vmanyware.dev/v1/Claim", "operationId": "../../etc/passwd"}')
    with pytest.raises(JournalError) as info:
        store.create_operation(**_inputs(idempotency_key="other"))
    assert info.value.code == "journal_corrupt" and "passwd" not in json.dumps(info.value.to_result())
    assert claim.read_bytes() == b'{"kind": "vmanyware.dev/v1/Claim", "operationId": "../../etc/passwd"}'


def test_missing_operation_is_not_found(store: JournalStore) -> None:
    with pytest.raises(JournalError) as info:
        store.load(_journal.new_operation_id())
    assert info.value.code == "not_found"


_VALID: dict[str, t.Any] = {}


def _valid_bytes(tmp_root: str) -> tuple[str, bytes]:
    if not _VALID:
        store = JournalStore(os.path.join(tmp_root, "seed"))
        document = _create(store)
        oid = document["operationId"]
        store.record_dispatch(oid, "clone", {"newid": 123})
        store.record_submitted(oid, "clone", UPID, {"volid": "local-lvm:vm-123-disk-0"})
        _VALID.update(oid=oid, raw=Path(store.operation_path(oid)).read_bytes())
    return _VALID["oid"], _VALID["raw"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_corruption_only_ever_raises_journal_corrupt(tmp_path: Path, data: st.DataObject) -> None:
    oid, raw = _valid_bytes(str(tmp_path))
    mutation = data.draw(st.sampled_from(["truncate", "flip", "replace", "insert", "delete"]))
    mutated = bytearray(raw)
    if mutation == "truncate":
        mutated = mutated[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _edit in range(data.draw(st.integers(1, 4))):
            index = data.draw(st.integers(0, max(len(mutated) - 1, 0)))
            if mutation == "flip" and mutated:
                mutated[index] ^= 1 << data.draw(st.integers(0, 7))
            elif mutation == "replace" and mutated:
                mutated[index] = data.draw(st.integers(0, 255))
            elif mutation == "insert":
                mutated[index:index] = data.draw(st.binary(min_size=1, max_size=8))
            elif mutated:
                del mutated[index : index + data.draw(st.integers(1, 16))]
    directory = tmp_path / ("j-" + _journal.new_operation_id())
    store = JournalStore(str(directory))
    path = Path(store.operation_path(oid))
    path.write_bytes(bytes(mutated))
    try:
        document = store.load(oid)
    except JournalError as err:
        assert err.code == "journal_corrupt"
        assert (
            err.message
            == "The journal file of operation %s is not a valid operation document; it was left untouched." % oid
        )
        assert err.details == {"operationId": oid}
    else:
        assert document["operationId"] == oid
    assert path.read_bytes() == bytes(mutated)


# --- concurrency (separate processes) --------------------------------------------------------

WORKERS = 12


def _race_create(directory: str, key: str | None, start: t.Any, results: t.Any) -> None:
    store = JournalStore(directory, lock_timeout=60)
    start.wait(30)
    try:
        document, created = store.create_operation(**_inputs(idempotency_key=key))
        results.put(("ok", document["operationId"], created))
    except JournalError as err:
        results.put((err.code, err.details.get("operationId"), None))


def _run_workers(target: t.Any, args_for: t.Callable[[int], tuple[t.Any, ...]]) -> list[t.Any]:
    start, results = FORK.Event(), FORK.Queue()
    workers = [FORK.Process(target=target, args=args_for(index) + (start, results)) for index in range(WORKERS)]
    for worker in workers:
        worker.start()
    start.set()
    collected = [results.get(timeout=120) for _worker in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    return collected


def test_racing_creates_for_one_target_exactly_one_wins(journal_dir: Path) -> None:
    JournalStore(str(journal_dir))
    results = _run_workers(_race_create, lambda index: (str(journal_dir), "key-%d" % index))
    winners = [r for r in results if r[0] == "ok"]
    assert len(winners) == 1 and winners[0][2] is True
    assert sorted(set(r[0] for r in results)) == ["conflicting_operation", "ok"]
    assert all(r[1] == winners[0][1] for r in results)
    store = JournalStore(str(journal_dir))
    assert store.list_operations() == [winners[0][1]]
    assert store.target_holder(SCOPE, 123) == winners[0][1]
    assert len(os.listdir(journal_dir / "targets")) == 1


def test_racing_creates_with_one_key_yield_one_operation(journal_dir: Path) -> None:
    JournalStore(str(journal_dir))
    results = _run_workers(_race_create, lambda index: (str(journal_dir), "shared-key"))
    assert all(r[0] == "ok" for r in results)
    assert len({r[1] for r in results}) == 1
    assert sorted(r[2] for r in results) == [False] * (WORKERS - 1) + [True]


def _increment(directory: str, oid: str, rounds: int, start: t.Any, results: t.Any) -> None:
    store = JournalStore(directory, lock_timeout=60)
    start.wait(30)
    successes = conflicts = 0
    while successes < rounds:
        document = store.load(oid)
        counter = _journal.stage(document, "clone")["evidence"].get("counter", 0)
        try:
            store.record_evidence(
                oid,
                "clone",
                {"counter": counter + 1, "by-%d" % os.getpid(): successes + 1},
                expected_revision=document["revision"],
            )
        except JournalError as err:
            assert err.code == "journal_conflict"
            conflicts += 1
        else:
            successes += 1
    results.put((successes, conflicts))


def test_compare_and_set_counter_loses_no_update(store: JournalStore, journal_dir: Path) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(oid, "clone", {})
    rounds = 8
    results = _run_workers(_increment, lambda index: (str(journal_dir), oid, rounds))
    successes = sum(r[0] for r in results)
    document = store.load(oid)
    evidence = _journal.stage(document, "clone")["evidence"]
    assert successes == WORKERS * rounds == evidence["counter"]
    assert document["revision"] == 2 + successes
    assert sorted(v for k, v in evidence.items() if k.startswith("by-")) == [rounds] * WORKERS
    assert not [name for name in os.listdir(journal_dir) if _files.is_temp_name(name)]


def _merge(directory: str, oid: str, index: int, start: t.Any, results: t.Any) -> None:
    store = JournalStore(directory, lock_timeout=60)
    start.wait(30)
    for round_ in range(6):
        store.record_evidence(oid, "clone", {"worker-%d" % index: round_})
        store.load(oid)  # readers never see a torn file
    results.put(index)


def test_concurrent_evidence_merges_keep_every_key(store: JournalStore, journal_dir: Path) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(oid, "clone", {})
    _run_workers(_merge, lambda index: (str(journal_dir), oid, index))
    evidence = _journal.stage(store.load(oid), "clone")["evidence"]
    assert evidence == {"worker-%d" % index: 5 for index in range(WORKERS)}


# --- crash points (test-only hook) -----------------------------------------------------------

_CRASH_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
    store = JournalStore(sys.argv[2])
    action, oid = sys.argv[3], sys.argv[4]
    if action == "late-env":
        os.environ["VMANYWARE_TEST_CRASH_AT"] = "journal:before_replace:clone:dispatching"
        store.record_dispatch(oid, "clone", {})
    elif action == "dispatch":
        store.record_dispatch(oid, "clone", {"newid": 123})
    elif action == "create":
        inputs = json.loads(sys.argv[5])
        store.create_operation(**inputs)
    sys.exit(0)
    """
)


def _run_child(journal_dir: Path, action: str, oid: str, crash_at: str | None, extra: str = "") -> int:
    env = crash_hook.child_env(os.environ, crash_at)  # the harness's sitecustomize arms the point in the child
    args = [sys.executable, "-c", _CRASH_SCRIPT, _collections_root(), str(journal_dir), action, oid] + (
        [extra] if extra else []
    )
    return subprocess.run(args, env=env, timeout=60, check=False).returncode


def test_crash_before_replace_leaves_previous_valid_file(store: JournalStore, journal_dir: Path) -> None:
    oid = _create(store)["operationId"]
    before = Path(store.operation_path(oid)).read_bytes()
    assert _run_child(journal_dir, "dispatch", oid, "journal:before_replace:clone:dispatching") == 137
    assert Path(store.operation_path(oid)).read_bytes() == before
    temps = [name for name in os.listdir(journal_dir) if _files.is_temp_name(name)]
    assert len(temps) == 1  # the complete temp file of the interrupted write, ignored by everyone
    assert json.loads((journal_dir / temps[0]).read_bytes())["stages"][0]["status"] == "dispatching"
    assert store.list_operations() == [oid]
    assert _journal.stage(store.load(oid), "clone")["status"] == "pending"
    store.record_dispatch(oid, "clone", {})  # the lock died with the process
    assert _journal.stage(store.load(oid), "clone")["status"] == "dispatching"


def test_crash_after_replace_keeps_the_durable_dispatch(store: JournalStore, journal_dir: Path) -> None:
    oid = _create(store)["operationId"]
    assert _run_child(journal_dir, "dispatch", oid, "journal:after_replace:clone:dispatching") == 137
    clone = _journal.stage(store.load(oid), "clone")
    assert clone["status"] == "dispatching" and clone["submissionStarted"] is True
    with pytest.raises(JournalError) as info:  # the next run cannot dispatch the same stage again
        store.record_dispatch(oid, "clone", {})
    assert info.value.code == "journal_conflict"


def test_unrelated_or_late_crash_points_do_nothing(store: JournalStore, journal_dir: Path) -> None:
    oid = _create(store)["operationId"]
    assert _run_child(journal_dir, "dispatch", oid, "journal:before_replace:configure:dispatching") == 0
    assert (
        _run_child(journal_dir, "late-env", _create(store, idempotency_key="k2", target_vmid=124)["operationId"], None)
        == 0
    )


def test_crash_during_creation_leaves_no_claim(store: JournalStore, journal_dir: Path) -> None:
    inputs = json.dumps(_inputs())
    assert _run_child(journal_dir, "create", "-", "journal:before_replace:operation:open", inputs) == 137
    assert store.list_operations() == [] and os.listdir(journal_dir / "targets") == []
    assert _run_child(journal_dir, "create", "-", "journal:after_replace:operation:open", inputs) == 137
    orphans = store.list_operations()
    assert len(orphans) == 1 and os.listdir(journal_dir / "keys") == []  # nothing was dispatched: a harmless orphan
    document, created = store.create_operation(**_inputs())
    assert created and document["operationId"] != orphans[0]


def test_not_sent_returns_the_stage_to_pending_and_keeps_attempts(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(oid, "clone", {"newid": 123})
    doc = store.record_not_sent(oid, "clone")
    clone = _journal.stage(doc, "clone")
    assert clone["status"] == "pending" and clone["submissionStarted"] is False and clone["attempts"] == 1
    assert clone["request"] is None and clone["dispatchedAt"] is None
    doc = store.record_dispatch(oid, "clone", {"newid": 123})
    assert _journal.stage(doc, "clone")["attempts"] == 2
    store.record_completed(oid, "clone")
    with pytest.raises(JournalError) as info:  # only a dispatching stage can be "not sent"
        store.record_not_sent(oid, "clone")
    assert info.value.code == "journal_conflict"


def test_a_submission_with_an_unknown_outcome_is_never_dispatched_again(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    store.record_dispatch(oid, "clone", {})
    with pytest.raises(JournalError):
        store.record_dispatch(oid, "clone", {})  # dispatching: the outcome is unknown
    store.record_uncertain(oid, "clone", "reply_lost", "The reply was lost.")
    with pytest.raises(JournalError):
        store.record_dispatch(oid, "clone", {})  # uncertain: resolved by reads only
    with pytest.raises(TypeError):
        store.record_dispatch(oid, "clone", {}, resend=True)  # type: ignore[call-arg]  # no way to ask for a resend


# -- lifecycle: abandonment reason and the cleanup track -------------------------------------------


def test_abandon_records_when_and_why(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    with pytest.raises(VmanywareError) as info:
        store.abandon_operation(oid, "   ")
    assert info.value.code == "invalid_option"
    document = store.abandon_operation(oid, "VM deleted by hand after a failed clone")
    assert document["lifecycle"]["abandonment"]["reason"] == "VM deleted by hand after a failed clone"
    assert document["lifecycle"]["abandonment"]["at"] <= document["release"]["releasedAt"]
    assert store.load(oid)["lifecycle"] == document["lifecycle"] and store.target_holder(SCOPE, 123) is None


def test_cleanup_track_runs_like_stages_and_releases_as_cleaned(store: JournalStore) -> None:
    oid = _create(store, stage_kinds=["clone"])["operationId"]
    with pytest.raises(VmanywareError) as info:
        store.begin_cleanup(oid)
    assert info.value.code == "cleanup_not_eligible"  # open: abandon first
    store.record_dispatch(oid, "clone", {"method": "POST"})
    store.record_failed(oid, "clone", "task_failed", "A Proxmox task ended with an error.")
    started = store.begin_cleanup(oid)
    assert [item["kind"] for item in started["lifecycle"]["cleanup"]["steps"]] == ["stop", "destroy"]
    assert store.begin_cleanup(oid)["revision"] == started["revision"]  # idempotent
    with pytest.raises(JournalError) as conflict:
        store.set_handoff(oid, {})  # provisioning writes are over once the cleanup started
    assert conflict.value.code == "journal_conflict"
    track = store.cleanup_track()
    view = track.load(oid)
    assert view["status"] == "open" and [item["status"] for item in view["stages"]] == ["pending", "pending"]
    with pytest.raises(JournalError):
        track.record_dispatch(oid, "destroy", {"method": "DELETE"})  # steps run in order
    for kind in ("stop", "destroy"):
        track.record_dispatch(oid, kind, {"method": "POST"})
        track.record_completed(oid, kind, {"removed": {"vmid": 123}} if kind == "destroy" else {})
    with pytest.raises(JournalError):
        store.finish_cleanup(oid)  # the track is not completed yet
    track.update_operation_status(oid, "completed", expected_status="open")
    assert store.target_holder(SCOPE, 123) == oid
    finished = store.finish_cleanup(oid)
    assert finished["release"]["reason"] == "cleaned" and finished["status"] == "failed"
    assert finished["lifecycle"]["cleanup"]["completedAt"] is not None and store.target_holder(SCOPE, 123) is None
    assert store.finish_cleanup(oid)["revision"] == finished["revision"]


def test_abandoned_operation_is_cleanable_and_stays_abandoned(store: JournalStore) -> None:
    oid = _create(store)["operationId"]
    store.abandon_operation(oid, "operator decision")
    store.begin_cleanup(oid)
    track = store.cleanup_track()
    for kind in ("stop", "destroy"):
        track.record_dispatch(oid, kind, {"noop": True})
        track.record_completed(oid, kind, {})
    track.update_operation_status(oid, "completed")
    document = store.finish_cleanup(oid)
    assert document["release"]["reason"] == "abandoned" and document["lifecycle"]["cleanup"]["status"] == "completed"


def test_lifecycle_rules_are_validated(store: JournalStore) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import validate_document

    oid = _create(store)["operationId"]
    document = store.abandon_operation(oid, "why")
    bad = copy.deepcopy(document)
    bad["release"] = None
    with pytest.raises(Exception):
        validate_document(bad)  # an abandonment is always a release
    bad = copy.deepcopy(document)
    bad["lifecycle"]["cleanup"] = {
        "startedAt": document["updatedAt"],
        "completedAt": None,
        "status": "open",
        "failure": None,
        "steps": [],
    }
    with pytest.raises(Exception):
        validate_document(bad)  # the cleanup steps are exactly stop, destroy
    bad = copy.deepcopy(document)
    bad["release"]["reason"] = "cleaned"
    with pytest.raises(Exception):
        validate_document(bad)  # cleaned needs a completed cleanup


# --- recorded hashes (issue 31) ------------------------------------------------------------------

_REPO = Path(__file__).resolve().parents[5]


def _record_real(store: JournalStore, kind: str) -> dict[str, t.Any]:
    """An operation recorded from the example inputs of ``kind`` (vm, container, template) with the snapshots the
    operation code records for it (``create_operation``, ``_template_operation.journal_snapshots``)."""
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import build_template_plan
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import journal_snapshots

    if kind == "template":
        planned = build_template_plan(path=_REPO / "examples/template-build.yml")
        definition, mapping, plan = journal_snapshots(planned)
        confirmation = {
            "templateBuildHash": planned.template_build_hash,
            "planHash": planned.plan_hash,
            "confirmed": True,
        }
    else:
        catalog = "examples/catalog.yml" if kind == "vm" else "examples/catalog-containers.yml"
        text = (_REPO / "examples/definition.yml").read_text(encoding="utf-8")
        if kind == "container":
            text = text.replace("image: debian-13", "image: debian-12-ct")
        env = build_plan(catalog_path=_REPO / catalog, definition=text, target_vmid=321)
        definition, mapping, plan = dict(env.definition), dict(env.mapping), dict(env.plan)
        confirmation = {"definitionHash": env.definition_hash, "planHash": env.plan_hash, "confirmed": True}
    document, _created = store.create_operation(
        idempotency_key=None,
        provider_scope_id=SCOPE,
        definition=definition,
        mapping=mapping,
        plan=plan,
        confirmation=confirmation,
        target_node=plan["target"]["node"],
        target_vmid=plan["target"]["vmid"],
        stage_kinds=[step["kind"] for step in plan["steps"]],
    )
    return document


@pytest.mark.parametrize("kind", ["vm", "container", "template"])
def test_recorded_hashes_of_each_kind_are_checked_on_load(store: JournalStore, kind: str) -> None:
    document = _record_real(store, kind)
    oid = document["operationId"]
    assert kind != "container" or document["plan"].get("guestType") == "container"
    assert kind != "template" or document["plan"]["kind"] == "TemplateBuildPlan"
    assert store.load(oid) == document  # the hashes of every kind are recomputed the way its plan computed them
    path = Path(store.operation_path(oid))
    good = path.read_bytes()
    edits: list[t.Callable[[dict[str, t.Any]], None]] = [
        lambda d: d["definition"].update(name="edited"),
        lambda d: d["plan"].update(planHash=d["plan"]["definitionHash"]),
        lambda d: d["mapping"].update(storage="elsewhere"),
    ]
    if kind == "template":
        edits.append(lambda d: d["plan"].update(templateBuildHash="0" * 64))
        edits.append(lambda d: d["confirmation"].update(templateBuildHash="0" * 64))
    for edit in edits:
        edited = json.loads(good)
        edit(edited)
        path.write_bytes(json.dumps(edited).encode())
        with pytest.raises(JournalError) as info:
            store.load(oid)
        assert info.value.code == "journal_corrupt" and info.value.details == {"operationId": oid}
        assert "edited" not in json.dumps(info.value.to_result()) and "elsewhere" not in json.dumps(
            info.value.to_result()
        )
    path.write_bytes(good)
    assert store.load(oid) == document
