# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_operation's logic per state, and the template operation's: what is read when, without AnsibleModule."""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    PREVIEW_FACT,
    OperationInputs,
    expected_confirmation,
    require_scope,
    verified_scope,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.operation_states import run_operation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import run_template_operation


REPO = Path(__file__).resolve().parents[5]
PIN = "ab" * 32
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
COMPLETE = {
    "definitionName": "x",
    "definitionHash": "x",
    "providerScopeId": "x",
    "planHash": "x",
    "targetNode": "x",
    "targetVmid": 1,
    "sourceVmid": 1,
    "storage": "x",
    "bridge": "x",
    "confirmed": True,
}


def planned() -> t.Any:
    return build_plan(
        catalog=(REPO / "examples/catalog.yml").read_text(encoding="utf-8"),
        definition=(REPO / "examples/definition.yml").read_text(encoding="utf-8"),
        target_vmid=201,
    )


def _settings(**overrides: t.Any) -> t.Any:
    values: dict[str, t.Any] = {
        "host": "127.0.0.1",
        "port": 9,
        "token_id": "automation@pve!vmanyware",
        "token_secret": "00000000-test-secret-0000-000000000000",
        "timeout": 5,
        "fingerprint": PIN,
    }
    values.update(overrides)
    return build_settings(**values)


class Reads:
    """``OperationInputs`` that log what was read, in order."""

    def __init__(self, store: JournalStore, settings: t.Any = None) -> None:
        self.log: list[str] = []
        self.inputs = OperationInputs(
            store=lambda: self._read("store", store),
            planned=lambda: self._read("planned", planned()),
            connection=lambda: self._read("connection", settings or _settings()),
        )

    def _read(self, name: str, value: t.Any) -> t.Any:
        self.log.append(name)
        return value


def _run(
    reads: Reads, state: str = "present", environ: t.Mapping[str, str] | None = None, **kwargs: t.Any
) -> dict[str, t.Any]:
    values: dict[str, t.Any] = {
        "confirmation": None,
        "idempotency_key": None,
        "provisioning_option": None,
        "operation_id": None,
        "reason": None,
        "check_mode": False,
    }
    values.update(kwargs)
    return run_operation(
        state, reads.inputs, environ=ON if environ is None else environ, client_factory=_no_client, **values
    )


def _no_client(settings: t.Any) -> t.Any:
    raise AssertionError("no connection expected")


@pytest.fixture()
def store(tmp_path: t.Any) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.mark.parametrize("state", ["present", "adopt"])
def test_the_gates_come_before_any_input_is_read(store: JournalStore, state: str) -> None:
    reads = Reads(store)
    with pytest.raises(VmanywareError) as info:
        _run(reads, state, environ={"VMANYWARE_PROVISIONING_ENABLED": "yes"})
    assert info.value.code == "configuration_error" and reads.log == []
    with pytest.raises(VmanywareError) as info:
        _run(reads, state, environ={}, confirmation=dict(COMPLETE))
    assert info.value.code == "provisioning_disabled" and reads.log == []


def test_a_review_run_reads_journal_plan_then_connection_and_gets_the_block(store: JournalStore) -> None:
    reads = Reads(store)
    with pytest.raises(VmanywareError) as info:
        _run(reads, environ={})
    assert info.value.code == "confirmation_required" and reads.log == ["store", "planned", "connection"]
    assert info.value.details["expected_confirmation"]["providerScopeId"] == verified_scope(_settings())


def test_unverified_tls_stops_before_any_connection(store: JournalStore) -> None:
    reads = Reads(store, _settings(fingerprint=None, validate_certs=False))
    with pytest.raises(VmanywareError) as info:
        _run(reads, "adopt")
    assert info.value.code == "tls_unverified"


def test_present_in_check_mode_returns_the_preview_fact_and_writes_nothing(store: JournalStore) -> None:
    scope = verified_scope(_settings())
    result = _run(Reads(store), confirmation=expected_confirmation(planned().plan, scope), check_mode=True)
    assert result["changed"] and result["ansible_facts"][PREVIEW_FACT] == result["preview_document"]
    assert result["ansible_facts"]["vmanyware_operation"] == result["operation"] and store.list_operations() == []
    created = _run(Reads(store), confirmation=expected_confirmation(planned().plan, scope))
    assert created["changed"] and created["ansible_facts"][PREVIEW_FACT] is None
    assert store.list_operations() == [created["operation_id"]]


def test_abandoned_reads_only_the_journal(store: JournalStore) -> None:
    scope = verified_scope(_settings())
    created = _run(Reads(store), confirmation=expected_confirmation(planned().plan, scope))
    reads = Reads(store)
    result = _run(
        reads,
        "abandoned",
        environ={"VMANYWARE_PROVISIONING_ENABLED": "false"},
        operation_id=created["operation_id"],
        reason="wrong size",
    )
    assert (
        result["changed"]
        and reads.log == ["store"]
        and result["ansible_facts"] == {"vmanyware_operation": result["operation"]}
    )
    assert result["operation"]["release"]["reason"] == "abandoned"


def test_require_scope_lives_with_the_operation_code() -> None:
    require_scope("pve:" + "a" * 64, "pve:" + "a" * 64)
    with pytest.raises(VmanywareError) as info:
        require_scope("pve:" + "b" * 64, "pve:" + "a" * 64)
    assert info.value.code == "plan_changed" and info.value.details == {"fields": ["providerScopeId"]}


def test_the_template_operation_checks_its_gate_before_reading_anything(store: JournalStore) -> None:
    reads = Reads(store)
    with pytest.raises(VmanywareError) as info:
        run_template_operation(
            reads.inputs, confirmation=None, idempotency_key=None, provisioning_option=None, environ={}, check_mode=True
        )
    assert info.value.code == "provisioning_disabled" and reads.log == []


def test_adoption_reads_over_a_client_bound_to_the_scope_certificate(store: JournalStore) -> None:
    seen: list[t.Any] = []

    def capture(settings: t.Any) -> t.Any:
        seen.append(settings)
        raise VmanywareError("stop after the client is built", code="internal_error")

    scope = verified_scope(_settings())
    with pytest.raises(VmanywareError):
        run_operation(
            "adopt",
            Reads(store).inputs,
            environ=ON,
            client_factory=capture,
            confirmation=expected_confirmation(planned().plan, scope),
            idempotency_key=None,
            provisioning_option=None,
            operation_id=None,
            reason=None,
            check_mode=False,
        )
    # the certificate the scope was computed from (the pin here): every connection of that client must present it
    assert [s.bound_certificate for s in seen] == [PIN]
