# SPDX-License-Identifier: GPL-3.0-or-later
"""The exact safety rules (issue 14), one test per point, proven from the simulator's request log.

1. gates re-read before every new write (and the catalog's mapping re-checked); 2. an environment ``false``
wins over the option; 3. an unknown submission is never sent again (``drop_reply``: executed, reply lost;
``drop_request``: never executed); 4. a lost probe reply is never re-issued; 5. ``creation_enabled``; 6. TLS
honesty; 7. the operation's snapshots through ``vmanyware_operation_info``; 8. one network device; 9. one
numbering. Point 10 (the seed's guest-user branch) is a unit test: no confirmed operation can reach it.
"""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guest_support as gs  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime import stage_module as _stage_module  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import run_preflight  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.cloudinit import CloudinitStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import ReadinessStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import SeedStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.snapshot import SnapshotStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.start import StartStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.modules import (
    vmanyware_operation,
    vmanyware_operation_info,
    vmanyware_plan,
)  # noqa: E402

pytestmark = pytest.mark.integration
GATE = "VMANYWARE_PROVISIONING_ENABLED"
SNAPSHOTS = "VMANYWARE_SNAPSHOTS_ENABLED"
CLONE = r"/qemu/9000/clone$"
LOGICS: dict[str, t.Callable[[], t.Any]] = {
    "clone": CloneStage,
    "resources": ResourcesStage,
    "disk": DiskStage,
    "cloudinit": CloudinitStage,
    "seed": SeedStage,
    "start": StartStage,
    "readiness": ReadinessStage,
    "snapshot": SnapshotStage,
}
# stage -> (method, path regex) of its one mutating request
ENDPOINTS = {
    "clone": ("POST", CLONE),
    "resources": ("PUT", gs.VM + "/config$"),
    "disk": ("PUT", gs.VM + "/resize$"),
    "cloudinit": ("PUT", gs.VM + "/config$"),
    "seed": ("PUT", gs.VM + "/cloudinit$"),
    "start": ("POST", gs.VM + "/status/start$"),
    "snapshot": ("POST", gs.VM + "/snapshot$"),
}


@pytest.fixture(autouse=True)
def _clean_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GATE, raising=False)
    monkeypatch.delenv(SNAPSHOTS, raising=False)


@pytest.fixture()
def sim(pvesim: t.Any) -> t.Any:
    pvesim.set_speed(400)
    return pvesim


def definition_text(snapshot: bool = True) -> str:
    return gs.definition_text(snapshot=snapshot)


class Op:
    """One confirmed operation on VM 201 and the stage module parameters (``run_stage``, the modules' whole logic)."""

    def __init__(self, sim: t.Any, tmp_path: Path, snapshot: bool = True, **extra: t.Any) -> None:
        conn = sim.connection
        self.sim = sim
        self.params: dict[str, t.Any] = {
            "api_host": conn["host"],
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
            "validate_certs": True,
            "journal_dir": str(tmp_path / "journal"),
            "api_timeout": 10.0,
            "lock_wait": 10.0,
            "wait_budget": 3.0,
            "provisioning_enabled": True,
            "snapshots_enabled": True,
            "catalog": gs.catalog_text(),
        }
        self.params.update(extra)
        settings = connection_settings(self.params)
        self.scope = provider_scope_id(settings, certificate_fingerprint(settings))
        self.planned = build_plan(catalog=gs.catalog_text(), definition=definition_text(snapshot), target_vmid=gs.VMID)
        self.store = open_store(self.params["journal_dir"])
        created = create_operation(
            self.store,
            planned=self.planned,
            provider_scope_id=self.scope,
            confirmation=expected_confirmation(self.planned.plan, self.scope),
            idempotency_key=None,
            environ={GATE: "true", SNAPSHOTS: "true"},
        )
        self.operation_id = created["operation_id"]
        self.params["operation_id"] = self.operation_id
        self.kinds = [step["kind"] for step in self.planned.plan["steps"]]

    def run(self, kind: str, **params: t.Any) -> dict[str, t.Any]:
        return run_stage(dict(self.params, **params), LOGICS[kind](), check_mode=False, diff=False)

    def fails(self, kind: str, code: str, **params: t.Any) -> VmanywareError:
        with pytest.raises(VmanywareError) as info:
            self.run(kind, **params)
        assert info.value.code == code, info.value.to_result()
        return info.value

    def run_until(self, last: str) -> None:
        """Every stage before ``last``, each until done."""
        for kind in self.kinds[: self.kinds.index(last)]:
            for _attempt in range(20):
                if self.run(kind)["done"]:
                    break
            else:
                raise AssertionError("stage %s never finished" % kind)

    def stage(self, kind: str) -> dict[str, t.Any]:
        return t.cast(dict, self.store.stage(self.store.load(self.operation_id), kind))


def mutating(sim: t.Any) -> list[dict[str, t.Any]]:
    return [
        e for e in sim.requests() if e["method"] != "GET" and not e["path"].endswith(("/agent/ping", "/agent/exec"))
    ]


# -- 1 and 2: gates on every new write; the kill switch wins ------------------------------------------------------------
def test_a_gate_closed_after_creation_stops_every_new_write(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = Op(sim, tmp_path)
    monkeypatch.setenv(GATE, "false")  # the operation exists; the administrator closes the gate afterwards
    sim.clear_requests()
    error = op.fails("clone", "provisioning_disabled")  # the option provisioning_enabled: true cannot override it
    assert (
        error.details["gate"] == GATE
        and op.stage("clone")["status"] == "pending"
        and op.stage("clone")["attempts"] == 0
    )
    with pytest.raises(VmanywareError) as preview:
        run_stage(op.params, CloneStage(), check_mode=True, diff=False)
    assert preview.value.code == "provisioning_disabled"
    assert mutating(sim) == []
    # A known task keeps reconciling by GET with the gate closed: start the clone, close the gate, follow it.
    monkeypatch.delenv(GATE)
    sim.set_speed(5)
    first = op.run("clone", wait_budget=0.0)
    assert first["done"] is False and op.stage("clone")["upid"]
    monkeypatch.setenv(GATE, "false")
    sim.set_speed(400)
    sim.clear_requests()
    assert op.run("clone", wait_budget=30.0)["done"]
    assert mutating(sim) == []
    # The next stage's write is refused again; with the gate open (option, environment unset) it goes on.
    op.fails("resources", "provisioning_disabled")
    assert mutating(sim) == []
    monkeypatch.delenv(GATE)
    assert op.run("resources")["done"]
    assert [(e["method"], e["path"]) for e in mutating(sim)] == [("PUT", gs.VM + "/config")]


def test_the_snapshots_gate_is_reread_before_the_snapshot_and_readiness_may_continue(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = Op(sim, tmp_path)
    op.run_until("readiness")
    monkeypatch.setenv(GATE, "false")  # VM writes disabled: the fixed read-only readiness probes may go on
    sim.clear_requests()
    assert op.run("readiness", wait_budget=30.0)["done"]
    assert mutating(sim) == []
    monkeypatch.delenv(GATE)
    monkeypatch.setenv(SNAPSHOTS, "false")
    sim.clear_requests()
    op.fails("snapshot", "snapshot_disabled")  # snapshots_enabled: true cannot override the environment's false
    assert mutating(sim) == [] and op.stage("snapshot")["status"] == "pending"
    monkeypatch.delenv(SNAPSHOTS)
    assert op.run("snapshot", wait_budget=30.0)["done"]
    assert [(e["method"], e["path"]) for e in mutating(sim)] == [("POST", gs.VM + "/snapshot")]


def test_a_changed_catalog_mapping_stops_the_write(sim: t.Any, tmp_path: Path) -> None:
    op = Op(sim, tmp_path)
    data = yaml.safe_load(gs.catalog_text())
    data["images"][0]["templateVersion"] = "debian-13-cloud-29990101"
    data["images"][0]["imageDefaultUser"]["templateVersion"] = "debian-13-cloud-29990101"  # a re-attested new template
    changed = yaml.safe_dump(data)
    sim.clear_requests()
    error = op.fails("clone", "plan_changed", catalog=changed)
    assert error.details["fields"] == ["mapping"] and op.stage("clone")["status"] == "pending"
    assert mutating(sim) == []
    assert op.run("clone", wait_budget=30.0)["done"]  # the unchanged catalog (the role passes it) goes on


def test_the_environment_false_wins_when_creating_an_operation(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = sim.connection
    params = {
        "catalog": gs.catalog_text(),
        "catalog_path": None,
        "definition": definition_text(False),
        "definition_path": None,
        "target_vmid": gs.VMID,
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"],
        "api_token_secret": conn["tokens"]["full"]["secret"],
        "ca_path": conn["ca_file"],
        "validate_certs": True,
        "api_password": None,
        "api_user": None,
        "api_fingerprint": None,
        "api_timeout": 10.0,
        "journal_dir": str(tmp_path / "j"),
        "confirmation": None,
        "idempotency_key": None,
        "provisioning_enabled": True,
        "state": "present",
    }
    monkeypatch.setenv(GATE, "false")
    with pytest.raises(VmanywareError) as review:
        vmanyware_operation.action(params, False, False)
    # A review run gets its confirmation block whatever the gates say, and is told the gate is closed.
    assert review.value.code == "confirmation_required" and review.value.details["provisioning_enabled"] is False
    params["confirmation"] = review.value.details["expected_confirmation"]
    with pytest.raises(VmanywareError) as info:
        vmanyware_operation.action(params, False, False)
    assert info.value.code == "provisioning_disabled"  # the environment's false wins over provisioning_enabled: true
    monkeypatch.delenv(GATE)
    created = vmanyware_operation.action(params, False, False)
    assert created["changed"] and created["operation_id"]  # the option opened the gate the environment left unset
    assert sim.requests() == []


# -- 3: an unknown submission is never sent again -------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["drop_reply", "drop_request"])
@pytest.mark.parametrize("kind", ["clone", "resources", "disk", "cloudinit", "seed", "start", "snapshot"])
def test_a_lost_submission_is_sent_exactly_once(sim: t.Any, tmp_path: Path, kind: str, fault: str) -> None:
    op = Op(sim, tmp_path)
    op.run_until(kind)
    method, path = ENDPOINTS[kind]
    sim.clear_requests()
    sim.add_fault(method, path, fault, occurrence=1)
    if fault == "drop_reply" or kind == "seed":
        # Executed, then the reply was lost: reads prove the effect and the stage goes on. (seed: PVE regenerates the
        # drive whenever a Cloud-Init value changes on a stopped VM, so GET cloudinit shows the drive current either way.)
        result = op.run(kind, wait_budget=30.0)
        assert result["done"] and op.stage(kind)["status"] == "completed" and op.stage(kind)["attempts"] == 1
    else:
        # Never executed: reads cannot prove an effect, so the stage is uncertain and the request is not sent again,
        # by this run or a later one.
        for _run in range(2):
            error = op.fails(kind, "outcome_uncertain", wait_budget=1.0)
            assert error.details["cause"] == "reply_lost"
        assert op.stage(kind)["status"] == "uncertain" and op.store.load(op.operation_id)["status"] == "uncertain"
    sent = sim.requests(method=method, path_regex=path)
    assert len(sent) == 1 and sent[0]["status"] == ("dropped" if fault == "drop_reply" else "request_dropped")
    assert len(mutating(sim)) == 1
    assert sim.schema_violations() == []


# -- 4: readiness probes ------------------------------------------------------------------------------------------------
def test_a_lost_probe_reply_is_never_reissued(sim: t.Any, tmp_path: Path) -> None:
    """issue 31: the probe's marker in the guest proves it started, so the run follows it through the marker and completes
    without a second exec. With the marker unreadable (the agent stops answering file-read) the stage is uncertain and the
    exec is still never issued again."""
    op = Op(sim, tmp_path, snapshot=False)
    op.run_until("readiness")
    sim.clear_requests()
    sim.add_fault("POST", gs.VM + "/agent/exec$", "drop_reply", occurrence=1)
    assert op.run("readiness", wait_budget=30.0)["done"]
    execs = sim.requests("POST", gs.VM + "/agent/exec$")
    # the dropped probe was followed through its marker; the exited read-only probe then ran once more for its output
    assert (
        execs[0]["status"] == "dropped"
        and len(execs) == 2
        and execs[0]["params"]["command"][4] != execs[1]["params"]["command"][4]
    )
    assert sim.requests("POST", gs.VM + "/agent/file-write$") == []  # it had started: nothing superseded


def test_a_lost_probe_reply_with_an_unreadable_marker_is_uncertain_and_never_reissued(
    sim: t.Any, tmp_path: Path
) -> None:
    op = Op(sim, tmp_path, snapshot=False)
    op.run_until("readiness")
    sim.clear_requests()
    sim.add_fault("POST", gs.VM + "/agent/exec$", "drop_reply", occurrence=1)
    sim.add_fault("GET", gs.VM + "/agent/file-read$", "http_error", status=500, message="simulated failure")
    error = op.fails(
        "readiness", "outcome_uncertain", wait_budget=3.0
    )  # the marker is read again within the budget, then given up
    assert error.details["cause"] == "reply_lost" and "cloud-init-status" in error.message
    record = op.stage("readiness")
    assert record["status"] == "uncertain" and record["request"]["probe"] == "cloud-init-status"
    marker = record["evidence"]["probe"]
    assert (
        marker["submissionStarted"] is True and marker["pid"] is None and record["request"]["marker"] == marker["file"]
    )
    deadline = record["evidence"]["deadline"]
    op.fails("readiness", "outcome_uncertain", wait_budget=3.0)
    assert len(sim.requests("POST", gs.VM + "/agent/exec$")) == 1  # no second agent exec
    assert op.stage("readiness")["evidence"]["deadline"] == deadline  # never extended
    sim.clear_faults()  # the marker can be read again: a later run resolves it and completes
    assert op.run("readiness", wait_budget=30.0)["done"]


def test_every_exec_is_marked_started_before_it_is_sent(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = Op(sim, tmp_path, snapshot=False)
    op.run_until("readiness")
    execs_seen_at_marker: list[int] = []
    original = op.store.record_evidence

    def spy(operation_id: str, kind: str, evidence: t.Mapping[str, t.Any], **kwargs: t.Any) -> t.Any:
        marker = evidence.get("probe")
        if isinstance(marker, dict) and marker.get("pid") is None:
            execs_seen_at_marker.append(len(sim.requests("POST", gs.VM + "/agent/exec$")))
        return original(operation_id, kind, evidence, **kwargs)

    monkeypatch.setattr(op.store, "record_evidence", spy)
    monkeypatch.setattr(_stage_module, "open_store", lambda _directory: op.store)
    sim.clear_requests()
    assert op.run("readiness", wait_budget=30.0)["done"]
    execs = sim.requests("POST", gs.VM + "/agent/exec$")
    # the k-th started marker was journaled when k-1 execs had been sent: each marker precedes its exec
    assert execs and execs_seen_at_marker == list(range(len(execs)))


# -- 5 and 6: creation_enabled and TLS honesty --------------------------------------------------------------------------------
def test_creation_enabled_in_plan_and_preflight(sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan_params = {
        "catalog": gs.catalog_text(),
        "catalog_path": None,
        "definition": definition_text(True),
        "definition_path": None,
        "target_vmid": gs.VMID,
    }
    monkeypatch.setenv(GATE, "true")
    result = vmanyware_plan.action(plan_params, False, False)
    assert result["creation_enabled"] is False and result["creation_blockers"] == ["snapshot_disabled"]
    monkeypatch.setenv(SNAPSHOTS, "true")
    assert vmanyware_plan.action(plan_params, False, False)["creation_enabled"] is True
    unattested = dict(plan_params, catalog=gs.catalog_text(attested=False))
    assert vmanyware_plan.action(unattested, False, False)["creation_blockers"] == ["attestation_required"]
    assert sim.requests() == []  # the plan makes no connection
    conn = sim.connection
    verified = connection_settings(
        {
            "api_host": conn["host"],
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
        }
    )
    planned = build_plan(catalog=gs.catalog_text(), definition=definition_text(True), target_vmid=gs.VMID)
    preflight = run_preflight(planned, verified, environ={GATE: "true", SNAPSHOTS: "false"}, fail_on="never")
    assert preflight["creation_enabled"] is False and preflight["creation_blockers"] == ["snapshot_disabled"]
    assert (
        run_preflight(planned, verified, environ={GATE: "true", SNAPSHOTS: "true"}, fail_on="never")["creation_enabled"]
        is True
    )


def test_unverified_tls_is_marked_and_refused_for_writes(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = Op(sim, tmp_path)
    conn = sim.connection
    unverified = {
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"],
        "api_token_secret": conn["tokens"]["full"]["secret"],
        "validate_certs": False,
    }
    planned = build_plan(catalog=gs.catalog_text(), definition=definition_text(False), target_vmid=gs.VMID)
    sim.clear_requests()
    with pytest.raises(VmanywareError) as refused:  # by default not even the preflight sends the token unverified
        run_preflight(planned, connection_settings(unverified), environ={GATE: "true"}, fail_on="never")
    assert refused.value.code == "tls_unverified" and sim.requests() == []
    read_only = dict(unverified, unverified_tls_read_only=True)
    result = run_preflight(planned, connection_settings(read_only), environ={GATE: "true"}, fail_on="never")
    reachable = result["checks"][0]
    assert (
        reachable["status"] == "passed"
        and "UNVERIFIED" in reachable["message"]
        and "with verified TLS" not in reachable["message"]
    )
    assert (
        result["tls_verified"] is False
        and result["creation_blockers"] == ["tls_unverified"]
        and result["provider_scope_id"] is None
    )
    assert result["warnings"] and {entry["method"] for entry in sim.requests()} == {"GET"}
    sim.clear_requests()
    for extra in ({}, {"unverified_tls_read_only": True}):  # the opt-in never reaches a stage
        stage_params = dict(op.params, validate_certs=False, ca_path=None, **extra)
        with pytest.raises(VmanywareError) as stage:
            run_stage(stage_params, CloneStage(), check_mode=False, diff=False)
        assert stage.value.code == "tls_unverified"
    monkeypatch.setenv(GATE, "true")
    operation_params = dict(
        unverified,
        catalog=gs.catalog_text(),
        catalog_path=None,
        definition=definition_text(False),
        definition_path=None,
        target_vmid=gs.VMID,
        ca_path=None,
        api_password=None,
        api_user=None,
        api_fingerprint=None,
        api_timeout=10.0,
        journal_dir=str(tmp_path / "other"),
        confirmation=None,
        idempotency_key=None,
        provisioning_enabled=None,
        state="present",
    )
    for extra in ({}, {"unverified_tls_read_only": True}):
        with pytest.raises(VmanywareError) as creation:
            vmanyware_operation.action(dict(operation_params, **extra), False, False)
        assert creation.value.code == "tls_unverified"
    assert sim.requests() == []  # refused before connecting


# -- 7: snapshots readable -------------------------------------------------------------------------------------------------
def test_operation_info_returns_the_snapshots_without_keys(sim: t.Any, tmp_path: Path) -> None:
    op = Op(sim, tmp_path)
    base = {
        "operation_id": op.operation_id,
        "journal_dir": op.params["journal_dir"],
        "evidence": False,
        "include_public_keys": False,
    }
    assert "snapshots" not in vmanyware_operation_info.action(dict(base, include_snapshots=False), False, False)
    result = vmanyware_operation_info.action(dict(base, include_snapshots=True), False, False)
    snapshots = result["snapshots"]
    assert snapshots["plan"] == op.planned.plan and snapshots["mapping"] == op.planned.mapping
    assert snapshots["definition"]["access"] == {
        "sshPublicKeyCount": len(op.planned.definition["access"]["sshPublicKeys"])
    }
    assert snapshots["definition"]["name"] == op.planned.definition["name"]
    assert "ssh-ed25519" not in str(result) and "ssh-rsa" not in str(result)
    assert sim.requests() == []


# -- 8: one network device -------------------------------------------------------------------------------------------------
def test_cloudinit_refuses_a_second_network_device(sim: t.Any, tmp_path: Path) -> None:
    op = Op(sim, tmp_path)
    sim.set_vm_config(9000, set={"net1": "virtio=BC:24:11:00:00:02,bridge=vmbr0"})  # a template with a second NIC
    op.run_until("cloudinit")
    sim.clear_requests()
    error = op.fails("cloudinit", "stage_precondition_failed")
    assert error.details["rule"] == "single_network_device" and error.details["devices"] == ["net0", "net1"]
    assert mutating(sim) == [] and op.stage("cloudinit")["status"] == "pending"


# -- 9: one numbering --------------------------------------------------------------------------------------------------------
def test_plan_steps_and_stages_share_one_numbering(sim: t.Any, tmp_path: Path) -> None:
    op = Op(sim, tmp_path)
    steps = [(step["position"], step["kind"]) for step in op.planned.plan["steps"]]
    assert steps[0] == (1, "clone")
    document = op.store.load(op.operation_id)
    assert [(item["position"], item["kind"]) for item in document["stages"]] == steps
    result = op.run("clone", wait_budget=30.0, set_operation_fact=True)
    assert result["stage"]["position"] == 1
    view = result["ansible_facts"]["vmanyware_operation"]
    assert [(item["position"], item["kind"]) for item in view["stages"]] == steps
