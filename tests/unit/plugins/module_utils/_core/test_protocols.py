# SPDX-License-Identifier: GPL-3.0-or-later
"""The Protocols' implementations that are not the real client or journal: what they refuse, and the context without a runner."""

from __future__ import annotations

import inspect
import typing as t
from pathlib import Path

import pytest
from pve_fake import FakeClient, envelope, in_turn

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.protocols import ApiClient, OperationStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import OfflineClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageContext, StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import GuestCommand
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import PreviewStore


from stage_fakes import new_operation  # noqa: E402  pylint: disable=wrong-import-position

VM = "/nodes/pve-test/qemu/201"


def _members(protocol: type) -> list[str]:
    return sorted(name for name in vars(protocol) if not name.startswith("_"))


@pytest.fixture()
def document(tmp_path: Path) -> dict[str, t.Any]:
    store = JournalStore(str(tmp_path / "journal"))
    return store.load(new_operation(store))


def test_the_check_mode_store_reads_the_preview_and_refuses_every_write(document: dict[str, t.Any]) -> None:
    preview = PreviewStore(document)
    assert preview.load(document["operationId"]) == document
    writes = [name for name in _members(OperationStore) if name != "load"]
    assert writes  # the Protocol names the writes; each must be refused, nothing recorded
    for name in writes:
        with pytest.raises(VmanywareError) as info:
            member = getattr(preview, name)  # journal_dir is a property: reading it is the refusal
            arity = len(
                [p for p in inspect.signature(member).parameters.values() if p.default is inspect.Parameter.empty]
            )
            member(*[document["operationId"], "clone", {}, "x"][:arity])
        assert info.value.code == "internal_error", name
    assert preview.load(document["operationId"]) == document


def test_a_context_without_a_runner_neither_waits_nor_runs_guest_commands(document: dict[str, t.Any]) -> None:
    ctx = StageContext(operation=document, client=FakeClient(), kind="readiness")
    assert ctx.wait_budget is None
    ctx.sleep(5.0)  # no run's sleep: returns at once
    with pytest.raises(VmanywareError) as info:
        ctx.guest_exec(GuestCommand("probe", "hostname", ("hostname",)), deadline=0.0)
    assert info.value.code == "internal_error"
    slept: list[float] = []
    ctx.settings = StageSettings(wait_budget=2.5, sleep=slept.append)
    ctx.sleep(0.5)
    assert ctx.wait_budget == 2.5 and slept == [0.5]


def test_the_fake_client_implements_every_member_of_the_client_protocol() -> None:
    client = FakeClient(
        {
            VM + "/status/current": in_turn({"status": "stopped"}, {"status": "running"}),
            "POST " + VM + "/status/start": "UPID:pve-test:00000001:00000002:65000000:qmstart:201:vmanyware@pve!full:",
        },
        provider_scope_id="pve:" + "c" * 64,
    )
    for name in _members(ApiClient):
        assert hasattr(client, name), name
    assert client.get(VM + "/status/current") == {"status": "stopped"}
    assert client.request("GET", VM + "/status/current") == {"data": {"status": "running"}}
    assert client.post(VM + "/status/start").startswith("UPID:")
    assert (client.settings.user, client.settings.token_name, client.provider_scope_id) == (
        "vmanyware@pve",
        "full",
        "pve:" + "c" * 64,
    )
    assert client.paths("GET") == [VM + "/status/current"] * 2 and client.mutations() == [
        ("POST", VM + "/status/start", {})
    ]


def test_the_fake_client_refuses_a_request_the_schema_refuses_and_an_unexpected_one() -> None:
    client = FakeClient({VM + "/config": {"digest": "d"}})
    with pytest.raises(AssertionError):
        client.put(VM + "/config", cores="many")  # not an integer: PVE would answer 400
    with pytest.raises(AssertionError):
        client.get("/nodes/pve-test/no-such-endpoint")
    with pytest.raises(AssertionError):
        client.get(VM + "/pending")  # a valid path the test did not script
    assert [call[1] for call in client.log] == [VM + "/config", "/nodes/pve-test/no-such-endpoint", VM + "/pending"]


def test_the_fake_client_answers_errors_envelopes_and_callables() -> None:
    lines = [{"n": 1, "t": "TASK OK"}]
    task = "/nodes/pve-test/tasks/UPID:pve-test:00000001:00000002:65000000:qmstart:201:vmanyware@pve!full:"
    client = FakeClient(
        {
            task + "/log": lambda params: envelope(lines[params["start"] :], total=len(lines)),
            task + "/status": ProviderError(code="server_error"),
        }
    )
    assert client.request("GET", task + "/log", {"start": 0, "limit": 50}) == {"data": lines, "total": 1}
    with pytest.raises(ProviderError):
        client.get(task + "/status")


def test_the_client_of_a_run_that_sends_nothing_refuses_every_request() -> None:
    client: ApiClient = OfflineClient()
    assert client.provider_scope_id is None and client.settings.user is None
    for send in (
        lambda: client.get(VM + "/config"),
        lambda: client.post(VM + "/status/start"),
        lambda: client.put(VM + "/config", cores=2),
        lambda: client.delete(VM),
        lambda: client.request("GET", "/version"),
    ):
        with pytest.raises(VmanywareError) as info:
            send()
        assert info.value.code == "internal_error"
