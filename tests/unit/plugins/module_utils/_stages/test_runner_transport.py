# SPDX-License-Identifier: GPL-3.0-or-later
"""The stage runner and the transport's codes: only what the client proves unsent returns a stage to pending.

``transport_lost``, ``tls_verification_failed`` and ``certificate_changed`` are raised by the client only when no
byte of the request was written (_api/test_client.py shows it against a real TLS server); everything after the first
byte, ``response_too_large`` included, is resolved by reads and never sent again.
"""

from __future__ import annotations

import pytest
from test_runner import ON, UPID, CloneLike, _run, operation_id, scripted, sent, store  # noqa: F401  pylint: disable=unused-import
from test_guest_exec import FakeAgent, GuestProbe

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import NOT_APPLIED_CODES
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import (
    AMBIGUOUS_CODES,
    GuestCommand,
    Resolution,
)


def test_the_code_tables() -> None:
    assert {"transport_lost", "tls_verification_failed", "certificate_changed"} <= NOT_APPLIED_CODES
    assert {"reply_lost", "response_too_large"} <= AMBIGUOUS_CODES
    assert not NOT_APPLIED_CODES & AMBIGUOUS_CODES


@pytest.mark.parametrize("code", ["transport_lost", "tls_verification_failed", "certificate_changed"])
def test_a_failure_before_the_first_byte_returns_the_stage_to_pending(
    store: JournalStore, operation_id: str, code: str
) -> None:
    with pytest.raises(ProviderError) as info:
        _run(store, scripted([ProviderError(code=code, details={"method": "POST"})]), CloneLike(), operation_id)
    assert info.value.code == code
    clone = store.stage(store.load(operation_id), "clone")
    assert clone["status"] == "pending" and clone["attempts"] == 1
    again = scripted([UPID])
    assert _run(store, again, CloneLike(), operation_id)["done"] and len(sent(again)) == 1


def test_a_reply_over_the_bound_is_unknown_and_never_sent_again(store: JournalStore, operation_id: str) -> None:
    logic = CloneLike()
    first = scripted(
        [ProviderError(code="response_too_large", details={"method": "POST", "status": 200, "limit": 1024})]
    )
    with pytest.raises(VmanywareError) as info:
        _run(store, first, logic, operation_id)
    assert info.value.code == "outcome_uncertain" and info.value.details["cause"] == "response_too_large"
    clone = store.stage(store.load(operation_id), "clone")
    assert clone["status"] == "uncertain" and clone["failure"]["code"] == "response_too_large" and logic.resolved >= 1
    again = scripted([UPID])
    with pytest.raises(VmanywareError):
        _run(store, again, CloneLike(), operation_id)
    assert sent(first) == [("POST", "/nodes/pve-test/qemu/9000/clone")] and sent(again) == []


def test_a_reply_over_the_bound_whose_effect_reads_show_is_followed(store: JournalStore, operation_id: str) -> None:
    result = _run(
        store,
        scripted([ProviderError(code="response_too_large", details={"method": "POST"})]),
        CloneLike(Resolution.applied(UPID)),
        operation_id,
    )
    assert result["done"] and result["stage"]["upid"] == UPID


def test_an_exec_whose_reply_was_over_the_bound_is_resolved_by_its_marker_never_issued_again(
    store: JournalStore, operation_id: str
) -> None:
    # Proxmox answered (200, the PID) but the reply was over the bound: the command started in the guest. Its guest-side
    # marker proves that, so the outcome comes from the marker files and the exec is not sent a second time.
    install = GuestCommand("probe", "install", ("apt-get", "install", "-y", "--", "htop"), repeatable=False)
    agent = FakeAgent(
        store,
        operation_id,
        [ProviderError(code="response_too_large", details={"method": "POST", "status": 200})],
        [],
        started=[True],
        exits=["0"],
    )
    logic = GuestProbe(install)
    result = StageRunner(store, agent, logic, StageSettings(sleep=lambda _s: None, environ=ON)).run(operation_id)  # type: ignore[arg-type]
    assert result["done"] and [o.exitcode for o in logic.outcomes] == [0]
    assert (
        agent.posts == [list(install.argv)] and agent.file_writes == []
    )  # one exec; no superseded fence: it had started
    assert agent.file_reads[0] == agent.markers[0] + ".started"
