# SPDX-License-Identifier: GPL-3.0-or-later
"""Gates, confirmation and creation of operations (no provider request)."""

from __future__ import annotations

import copy
import threading
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    CONFIRMATION_FIELDS,
    create_operation,
    expected_confirmation,
    instance_tag,
    public_view,
    read_gate,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

REPO = Path(__file__).resolve().parents[5]
SCOPE = "pve:" + "d" * 64
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


def planned(snapshot: bool = False, attested: bool = True, vmid: int = 201, disk: int = 20) -> t.Any:
    definition = (
        (REPO / "examples/definition.yml").read_text(encoding="utf-8").replace("diskGiB: 20", "diskGiB: %d" % disk)
    )
    if snapshot:
        definition = definition.replace("snapshotAfterProvisioning: false", "snapshotAfterProvisioning: true")
    catalog = (REPO / "examples/catalog.yml").read_text(encoding="utf-8")
    if not attested:
        catalog = catalog.split("    # Operator attestation")[0]
    return build_plan(catalog=catalog, definition=definition, target_vmid=vmid)


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def create(
    store: JournalStore,
    plan: t.Any = None,
    confirmation: t.Any = "expected",
    environ: t.Mapping[str, str] | None = None,
    key: str | None = None,
    **kwargs: t.Any,
) -> dict[str, t.Any]:
    plan = plan or planned()
    environ = ON if environ is None else environ
    if confirmation == "expected":
        confirmation = expected_confirmation(plan.plan, SCOPE)
    return create_operation(
        store,
        planned=plan,
        provider_scope_id=SCOPE,
        confirmation=confirmation,
        idempotency_key=key,
        environ=environ,
        **kwargs,
    )


@pytest.mark.parametrize(
    "value,option,expected",
    [
        (None, None, False),
        ("", None, False),
        ("false", None, False),
        ("true", None, True),
        (None, True, True),
        ("", True, True),
        (None, False, False),
        ("true", False, False),
        ("true", True, True),
        ("false", True, False),  # the kill switch: an environment false wins over the option
    ],
)
def test_gate_values(value: str | None, option: bool | None, expected: bool) -> None:
    environ = {} if value is None else {"G": value}
    assert read_gate(environ, "G", option) is expected


@pytest.mark.parametrize("value", ["True", "1", "yes", " true", "false "])
def test_invalid_gate_is_a_configuration_error_before_anything(store: JournalStore, value: str) -> None:
    with pytest.raises(VmanywareError) as info:
        create(store, confirmation=None, environ={"VMANYWARE_PROVISIONING_ENABLED": value})
    assert info.value.code == "configuration_error"
    with pytest.raises(VmanywareError) as info:
        create(
            store,
            confirmation=None,
            environ={"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": value},
        )
    assert info.value.code == "configuration_error"
    assert store.list_operations() == []


@pytest.mark.parametrize("name", ["VMANYWARE_PROVISIONING_ENABLED", "VMANYWARE_LIFECYCLE_ENABLED"])
def test_gate_environment_false_wins_and_empty_is_unset(name: str) -> None:
    assert read_gate({name: "false"}, name, True) is False
    assert read_gate({name: "true"}, name, False) is False
    assert read_gate({name: "true"}, name, None) is True
    assert read_gate({name: ""}, name, None) is False
    assert read_gate({name: ""}, name, True) is True
    assert read_gate({}, name, True) is True
    with pytest.raises(VmanywareError) as info:
        read_gate({name: "TRUE"}, name, False)
    assert info.value.code == "configuration_error"


def test_gate_disabled_and_option_override(store: JournalStore) -> None:
    for environ in ({}, {"VMANYWARE_PROVISIONING_ENABLED": "false"}):
        with pytest.raises(VmanywareError) as info:
            create(store, environ=environ)
        assert info.value.code == "provisioning_disabled"
    with pytest.raises(VmanywareError) as info:
        create(store, environ=ON, provisioning_option=False)
    assert info.value.code == "provisioning_disabled"
    with pytest.raises(VmanywareError) as info:
        create(store, environ={"VMANYWARE_PROVISIONING_ENABLED": "false"}, provisioning_option=True)
    assert info.value.code == "provisioning_disabled"  # the environment's false is the administrator's kill switch
    # The message says how to open the gate.
    assert "VMANYWARE_PROVISIONING_ENABLED" in info.value.message and "set it to true" in info.value.message
    assert "provisioning_enabled: true" in info.value.message
    assert create(store, environ={}, provisioning_option=True)["created"] is True


def test_snapshot_gate(store: JournalStore) -> None:
    with pytest.raises(VmanywareError) as info:
        create(store, plan=planned(snapshot=True))
    assert info.value.code == "snapshot_disabled"
    assert create(store, plan=planned(snapshot=True), environ=dict(ON, VMANYWARE_SNAPSHOTS_ENABLED="true"))["created"]


def test_attestation_required(store: JournalStore) -> None:
    with pytest.raises(VmanywareError) as info:
        create(store, plan=planned(attested=False))
    assert info.value.code == "attestation_required"


@pytest.mark.parametrize("confirmation", [None, {}, "yes", "incomplete", "unconfirmed"])
def test_confirmation_required_carries_the_expected_block(store: JournalStore, confirmation: t.Any) -> None:
    plan = planned()
    expected = expected_confirmation(plan.plan, SCOPE)
    if confirmation == "incomplete":
        confirmation = {k: v for k, v in expected.items() if k != "bridge"}
    elif confirmation == "unconfirmed":
        confirmation = dict(expected, confirmed=False)
    with pytest.raises(VmanywareError) as info:
        create(store, plan=plan, confirmation=confirmation)
    assert info.value.code == "confirmation_required"
    assert info.value.to_result()["error_details"]["expected_confirmation"] == expected
    assert store.list_operations() == []


@pytest.mark.parametrize("field", [name for name in CONFIRMATION_FIELDS if name != "confirmed"])
def test_plan_changed_per_field(store: JournalStore, field: str) -> None:
    plan = planned()
    expected = expected_confirmation(plan.plan, SCOPE)
    given = copy.deepcopy(expected)
    given[field] = given[field] + 1 if isinstance(given[field], int) else given[field] + "x"
    with pytest.raises(VmanywareError) as info:
        create(store, plan=plan, confirmation=given)
    assert info.value.code == "plan_changed" and info.value.details["fields"] == [field]
    assert info.value.details["expected_confirmation"] == expected


def test_vmid_as_string_is_a_change(store: JournalStore) -> None:
    plan = planned()
    given = dict(expected_confirmation(plan.plan, SCOPE), targetVmid="201")
    with pytest.raises(VmanywareError) as info:
        create(store, plan=plan, confirmation=given)
    assert info.value.code == "plan_changed"


def test_same_key_same_confirmation_is_not_a_change(store: JournalStore) -> None:
    first = create(store)
    second = create(store)
    assert first["created"] and first["changed"] and not second["created"] and not second["changed"]
    assert first["operation_id"] == second["operation_id"]
    assert first["operation"]["instance"]["tag"] == instance_tag(first["operation_id"])


def test_same_key_different_inputs(store: JournalStore) -> None:
    create(store, key="k1")
    with pytest.raises(VmanywareError) as info:
        create(store, plan=planned(disk=24), key="k1")
    assert info.value.code == "idempotency_key_conflict"


def test_conflicting_operation_on_the_same_target(store: JournalStore) -> None:
    first = create(store)
    with pytest.raises(VmanywareError) as info:
        create(store, plan=planned(disk=24))
    assert info.value.code == "conflicting_operation" and info.value.details["operationId"] == first["operation_id"]
    with pytest.raises(VmanywareError) as info:
        create(store, plan=planned(disk=24), check_mode=True)
    assert info.value.code == "conflicting_operation"


def test_check_mode_writes_nothing(store: JournalStore) -> None:
    preview = create(store, check_mode=True)
    assert preview["changed"] and store.list_operations() == []
    assert preview["operation_id"] == preview["preview_document"]["operationId"] == preview["operation"]["operation_id"]
    assert [item["kind"] for item in preview["operation"]["stages"]][:3] == ["clone", "resources", "disk"]
    created = create(store)
    again = create(store, check_mode=True)
    assert not again["changed"] and again["operation_id"] == created["operation_id"]


def test_thread_race_creates_one_operation(store: JournalStore) -> None:
    plans = [planned(disk=20 + index) for index in range(4)]
    results: list[t.Any] = []
    barrier = threading.Barrier(len(plans))

    def worker(plan: t.Any) -> None:
        barrier.wait()
        try:
            results.append(create(JournalStore(store.journal_dir), plan=plan))
        except VmanywareError as err:
            results.append(err.code)

    threads = [threading.Thread(target=worker, args=(plan,)) for plan in plans]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    created = [r for r in results if isinstance(r, dict)]
    assert len(created) == 1 and sorted(r for r in results if isinstance(r, str)) == ["conflicting_operation"] * 3


def test_public_view_has_no_private_evidence(store: JournalStore) -> None:
    result = create(store)
    document = store.load(result["operation_id"])
    view = public_view(document)
    assert "definition" not in view and "confirmation" not in view and "idempotencyKeyHash" not in view
    assert all("evidence" not in stage and "request" not in stage for stage in view["stages"])


def test_review_run_gets_the_block_with_the_gates_closed(store: JournalStore) -> None:
    """A read-only credential (gates closed) can review: the block needs no recorded operation; the apply run needs the gate."""
    for confirmation in (None, {}, {"confirmed": True}):
        with pytest.raises(VmanywareError) as info:
            create(
                store,
                planned(snapshot=True),
                confirmation=confirmation,
                environ={"VMANYWARE_PROVISIONING_ENABLED": "false"},
            )
        assert info.value.code == "confirmation_required"
        assert info.value.details["expected_confirmation"] == expected_confirmation(planned(snapshot=True).plan, SCOPE)
        assert info.value.details["provisioning_enabled"] is False and info.value.details["snapshots_enabled"] is False
    with pytest.raises(VmanywareError) as info:
        create(store, planned(snapshot=True), environ={})
    assert info.value.code == "provisioning_disabled"
    assert store.list_operations() == []


def test_public_view_has_the_evidence_only_when_asked(store: JournalStore) -> None:
    created = create(store)
    document = store.load(created["operation_id"])
    assert all("evidence" not in stage for stage in public_view(document)["stages"])
    full = public_view(document, evidence=True)
    assert [stage["evidence"] for stage in full["stages"]] == [dict(stage["evidence"]) for stage in document["stages"]]


def test_module_return_keys_are_snake_case(store: JournalStore) -> None:
    """The public view and error details use Ansible's key style; the plan and confirmation documents keep theirs."""
    import json
    import re

    result = create(store)
    view = json.dumps(result["operation"])
    assert re.findall(r'"([A-Za-z_]*[A-Z][A-Za-z_]*)":', view) == []
    assert result["operation"]["provider_scope_id"] == SCOPE and result["operation"]["source"]["template_vmid"] == 9000
    with pytest.raises(VmanywareError) as info:
        create(store, confirmation=None)
    details = info.value.to_result()["error_details"]
    assert details["provisioning_enabled"] is True and "definitionHash" in details["expected_confirmation"]
    with pytest.raises(VmanywareError) as info:
        create(store, key="another request for the same target")
    assert info.value.code == "conflicting_operation"
    assert info.value.to_result()["error_details"] == {"operation_id": result["operation_id"]}
