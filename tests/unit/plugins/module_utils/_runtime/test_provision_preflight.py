# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_provision's preflight (``preflight: true``): the checks of the recorded plan before the first stage, and the
one rule of what checks that do not pass may do (``preflight_verdict``: stop an operation that has not begun before any
write, resume one that has). Against the typed fake client; the simulator run is tests/integration/test_provision_module.py.
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.history import ROW_KEYS
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.history import summarize as summarize_operation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
    JournalError,
    JournalStore,
    operation_begun,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import abandon_operation, public_view
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.permissions import STAGE_PRIVILEGES
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import (
    BEGUN_TEXT,
    ProvisionStopped,
    StageOptions,
    preflight_before_stages,
    preflight_verdict,
    provision_argument_spec,
    run_stages,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.recent_reads import ObservingClient, RecentReads
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings

from stage_fakes import TEMPLATE, VM, FakeClient, complete, dispatch, fixture, new_operation, pve_error  # noqa: E402  pylint: disable=C0413

GATES = {"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": "true"}
ALL_PRIVILEGES = {row.privilege: 1 for rows in STAGE_PRIVILEGES.values() for row in rows}
PREFLIGHT_READS = [
    "/version",
    TEMPLATE + "/config",
    "/nodes/pve-test/storage/local-lvm/status",
    "/nodes/pve-test/network",
    "/cluster/nextid",
]


def datacenter(vmid_taken: bool = False) -> dict[str, t.Any]:
    """Routes answering every preflight read (all checks pass unless ``vmid_taken``)."""
    return {
        "/version": {"version": "9.1.3", "release": "9.1", "repoid": "0123abcd"},
        TEMPLATE + "/config": fixture("template_config"),
        "/nodes/pve-test/storage/local-lvm/status": {
            "active": 1,
            "enabled": 1,
            "content": "images,rootdir",
            "avail": 500 * 1024**3,
        },
        "/nodes/pve-test/network": [{"iface": "vmbr0", "type": "bridge"}],
        "/cluster/nextid": pve_error("nextid_taken") if vmid_taken else (lambda params: params["vmid"]),
        "/access/permissions": lambda params: {params["path"]: dict(ALL_PRIVILEGES)},
    }


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def preflight(
    store: JournalStore, operation_id: str, client: t.Any, fail_on: str = "failed", lines: list[str] | None = None
) -> tuple[dict[str, t.Any] | None, list[str]]:
    return preflight_before_stages(
        store,
        client,
        operation_id,
        StageSettings(environ=GATES),
        fail_on,
        report=(lines.append if lines is not None else (lambda line: None)),
    )


def test_passing_checks_are_returned_one_line_each_and_nothing_is_written(store: JournalStore) -> None:
    operation_id = new_operation(store)
    client = FakeClient(datacenter())
    lines: list[str] = []
    result, warnings = preflight(store, operation_id, client, lines=lines)
    assert result is not None and warnings == []
    assert result["summary"]["failed"] == 0 and "changed" not in result
    assert result["plan_hash"] == store.load(operation_id)["plan"]["planHash"] and result["creation_blockers"] == []
    # vmanyware_preflight's shape: every check code in order, with status and message
    assert [check["code"] for check in result["checks"]][:3] == [
        "api_reachable",
        "version_supported",
        "template_exists",
    ]
    assert all(set(check) == {"code", "status", "message"} for check in result["checks"])
    # one line per check (the role's check table, aligned), then the counts
    assert len(lines) == len(result["checks"]) + 1 and lines[-1].startswith(
        "preflight: %d passed, 0 failed" % result["summary"]["passed"]
    )
    assert all(line.startswith("preflight ") and check["code"] in line for line, check in zip(lines, result["checks"]))
    assert (
        len({line.index(check["code"]) for line, check in zip(lines, result["checks"])}) == 1
    )  # the codes form one column
    assert (
        client.mutations() == []
        and [path for path in client.paths() if path != "/access/permissions"] == PREFLIGHT_READS
    )
    assert not operation_begun(store.load(operation_id))


def test_failed_checks_stop_an_operation_that_has_not_begun_before_any_write(store: JournalStore) -> None:
    operation_id = new_operation(store)
    client = FakeClient(datacenter(vmid_taken=True))
    lines: list[str] = []
    settings = StageSettings(environ=GATES)
    reads = RecentReads()
    with pytest.raises(ProvisionStopped) as info:
        preflight_before_stages(
            store, ObservingClient(client, reads), operation_id, settings, "failed", report=lines.append
        )
        run_stages(store, client, operation_id, settings, StageOptions(), recent_reads=reads)  # never reached
    stopped = info.value.to_result()
    assert stopped["error_code"] == "preflight_failed" and stopped["stages"] == []
    assert (
        stopped["error_details"]["failed_checks"] == ["vmid_free"]
        and stopped["error_details"]["operation_id"] == operation_id
    )
    assert "Nothing was sent" in stopped["msg"] and "abandon" in stopped["msg"]
    assert [check["status"] for check in stopped["preflight"]["checks"] if check["code"] == "vmid_free"] == ["failed"]
    assert client.mutations() == []
    document = store.load(operation_id)
    assert all(
        item["status"] == "pending" and item["attempts"] == 0 for item in document["stages"]
    )  # nothing recorded either
    assert lines[-1] == "preflight: stopped before the first stage; nothing was sent"


def test_a_stopped_operation_shows_as_open_in_the_history_and_can_be_abandoned(store: JournalStore) -> None:
    operation_id = new_operation(store)
    with pytest.raises(ProvisionStopped):
        preflight(store, operation_id, FakeClient(datacenter(vmid_taken=True)))
    row = dict(zip(ROW_KEYS, summarize_operation(store.load(operation_id))))
    assert (
        row["status"] == "open"
        and row["provisioning_status"] == "open"
        and row["failure_code"] is None
        and not row["released"]
    )
    view = public_view(store.load(operation_id))
    assert view["begun"] is False and all(
        stage["status"] == "pending" and not stage["submission_started"] for stage in view["stages"]
    )
    # Planning differently for the same VMID needs the target: the operator abandons the recorded operation first.
    with pytest.raises(JournalError) as held:
        new_operation(store, disk_gib=30)
    assert held.value.code == "conflicting_operation" and held.value.details["operationId"] == operation_id
    abandoned = abandon_operation(store, operation_id, "preflight failed: VMID taken; planning another VMID")
    assert (
        abandoned["changed"] and abandoned["operation"]["status"] == "abandoned" and abandoned["operation"]["released"]
    )
    assert new_operation(store, disk_gib=30) != operation_id


@pytest.mark.parametrize("fail_on, stops", [("failed", False), ("unknown", True), ("never", False)])
def test_fail_on_decides_which_results_stop(store: JournalStore, fail_on: str, stops: bool) -> None:
    operation_id = new_operation(store)
    routes = datacenter()
    routes["/nodes/pve-test/network"] = pve_error("server_500")  # bridge_exists: unknown
    if stops:
        with pytest.raises(ProvisionStopped) as info:
            preflight(store, operation_id, FakeClient(routes), fail_on)
        assert info.value.code == "preflight_failed"
    else:
        result, warnings = preflight(store, operation_id, FakeClient(routes), fail_on)
        assert result is not None and warnings == [] and result["summary"]["unknown"] >= 5


def test_failed_checks_let_an_operation_that_has_begun_resume_with_a_warning(store: JournalStore) -> None:
    operation_id = new_operation(store)
    complete(store, operation_id, "clone", {"digest": "d1"})  # its VM exists now: the preflight reports the VMID taken
    lines: list[str] = []
    result, warnings = preflight(store, operation_id, FakeClient(datacenter(vmid_taken=True)), lines=lines)
    assert result is not None and result["summary"]["failed"] == 1 and warnings == [BEGUN_TEXT]
    assert lines[-1] == "preflight: " + BEGUN_TEXT


def test_a_dispatched_stage_counts_as_begun_even_when_refused_back_to_pending(store: JournalStore) -> None:
    operation_id = new_operation(store)
    document = store.load(operation_id)
    assert preflight_verdict(document, None) == "passed"
    failed = t.cast(t.Any, object())
    assert preflight_verdict(document, failed) == "stop" and not public_view(document)["begun"]
    dispatch(store, operation_id, "clone")
    assert preflight_verdict(store.load(operation_id), failed) == "resume"
    store.record_not_sent(operation_id, "clone")  # a definite refusal: pending again, but it was sent
    document = store.load(operation_id)
    assert document["stages"][0]["status"] == "pending" and document["stages"][0]["attempts"] == 1
    assert preflight_verdict(document, failed) == "resume" and public_view(document)["begun"]


def test_no_preflight_when_no_stage_remains(store: JournalStore) -> None:
    operation_id = new_operation(store)
    for item in store.load(operation_id)["stages"]:
        complete(store, operation_id, item["kind"], {"digest": "d1"})
    client = FakeClient({})
    lines: list[str] = []
    assert preflight(store, operation_id, client, lines=lines) == (None, [])
    assert client.log == [] and lines == ["preflight: skipped, no stage of the operation remains to run"]


def test_the_clone_takes_what_the_preflight_read_and_a_stale_free_vmid_is_a_known_refusal(store: JournalStore) -> None:
    """The preflight's template configuration and "VMID free" serve the clone's preconditions (rules 7 and 8). Another
    client takes the VMID after the preflight read it free: Proxmox refuses the clone ("config file already exists"), and
    the stage reads and fails with vmid_taken, pending again (a known failure, not an uncertain outcome)."""
    operation_id = new_operation(store)
    routes = datacenter()
    foreign = dict(fixture("clone_config"), description="made by another tool")
    routes.update(
        {
            "POST " + TEMPLATE + "/clone": pve_error("already_exists_500", "POST", TEMPLATE + "/clone"),
            VM + "/config": foreign,
            VM + "/status/current": fixture("status_stopped"),
        }
    )
    client = FakeClient(routes)
    reads = RecentReads()
    settings = StageSettings(environ=GATES)
    preflight_before_stages(store, ObservingClient(client, reads), operation_id, settings, "failed")
    client.log.clear()
    with pytest.raises(ProvisionStopped) as info:
        run_stages(store, client, operation_id, settings, StageOptions(), recent_reads=reads)
    assert info.value.code == "vmid_taken" and info.value.details["rule"] == "taken_before_clone"
    # no template read, no nextid before the POST; the refusal is decided by a fresh read of the target
    assert [(method, path) for method, path, _params in client.log] == [
        ("POST", TEMPLATE + "/clone"),
        ("GET", VM + "/config"),
    ]
    assert reads.saved == {"template": 1, "vmid_free": 1}
    document = store.load(operation_id)
    assert (
        document["status"] == "open"
        and document["stages"][0]["status"] == "pending"
        and not document["stages"][0]["submissionStarted"]
    )


def test_the_options_are_those_of_vmanyware_preflight() -> None:
    spec = provision_argument_spec()
    assert spec["preflight"] == {"type": "bool", "default": False}
    assert spec["preflight_fail_on"] == {"type": "str", "choices": ["failed", "unknown", "never"], "default": "failed"}
