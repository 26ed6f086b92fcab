# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_provision: every remaining stage of an operation in one call, against the simulator.

The stages run through the same ``StageRunner`` as their modules; these tests check the chained run's own
promises: declared order, one journal, stop at the first failure with that stage's code and the results so far,
a real check-mode preview, progress lines, a re-run that sends nothing, and fewer configuration and power-state reads
than the stage-by-stage path with the same mutations (each exactly once), while an observation gone stale (its age, a
lost reply, another client's start) is never used (``_recent_reads`` rules; its unit tests cover each rule alone).
"""

from __future__ import annotations

import collections
import itertools
import json
import sys
import typing as t
from pathlib import Path

import pytest

import guest_support as gs
import test_in_process_action as tia
from vmid_support import Reserver

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import (
    ProvisionStopped,
    StageOptions,
    provision,
    provision_entry,
    run_stages,
    stage_logic,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.recent_reads import RecentReads
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import wait_task

pytestmark = pytest.mark.integration
SPEED = 400
FAST_GUEST = {"agent_up_after": 0.2, "dhcp_after_agent": 0.1, "cloudinit_done_after_boot": 0.4}
BOTH_GATES = {"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": "true"}


@pytest.fixture()
def sim(pvesim: t.Any) -> t.Any:
    pvesim.set_speed(SPEED)
    return pvesim


def _settings(**kwargs: t.Any) -> StageSettings:
    kwargs.setdefault("environ", BOTH_GATES)
    return StageSettings(**kwargs)


def _run(
    env: gs.Env,
    lines: list[str] | None = None,
    report: t.Callable[[str], None] | None = None,
    recent_reads: RecentReads | None = None,
    **kwargs: t.Any,
) -> dict[str, t.Any]:
    interval = kwargs.pop("progress_interval", 30.0)
    if report is None:
        report = lines.append if lines is not None else (lambda line: None)
    return run_stages(
        env.store,
        env.client,
        env.operation_id,
        _settings(**kwargs),
        StageOptions(readiness_timeout=60),
        progress_interval=interval,
        report=report,
        recent_reads=recent_reads,
    )


def _effective(sim: t.Any) -> collections.Counter[tuple[str, str]]:
    return collections.Counter(
        (e["method"], e["path"])
        for e in sim.requests()
        if e["method"] != "GET" and (e["status"] == "dropped" or e["status"] < 300)
    )


def _reads(sim: t.Any, suffix: str) -> int:
    return sum(1 for e in sim.requests() if e["method"] == "GET" and e["path"] == gs.VM + suffix)


READ_SUFFIXES = ("/config", "/status/current", "/pending")


def _read_counts(sim: t.Any) -> dict[str, int]:
    return {suffix: _reads(sim, suffix) for suffix in READ_SUFFIXES}


def _start_by_another_client(sim: t.Any) -> None:
    """Another client (not this process) starts the VM and waits for its task."""
    other = ProxmoxClient(gs.settings_for(sim.connection))
    assert wait_task(other, other.post(gs.VM + "/status/start"), timeout=30).succeeded


def test_every_stage_in_one_call(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection, snapshot=True)
    lines: list[str] = []
    result = _run(env, lines)
    assert result["done"] and result["changed"] and result["status"] == "completed"
    assert [item["kind"] for item in result["stages"]] == env.kinds
    assert all(item["status"] == "completed" and item["done"] for item in result["stages"])
    assert env.document["status"] == "completed"
    # One line per stage, in order, naming it.
    assert [line.split(":")[0] for line in lines] == [
        "stage %d/%d %s" % (i + 1, len(env.kinds), kind) for i, kind in enumerate(env.kinds)
    ]
    # Each mutation exactly once, every request schema-valid.
    effective = _effective(sim)
    assert effective.pop(("PUT", gs.VM + "/config")) == 2, effective  # resources, then cloudinit
    assert all(count == 1 for count in effective.values()), effective
    assert ("POST", "/nodes/pve-test/qemu/9000/clone") in _effective(sim) and (
        "POST",
        gs.VM + "/snapshot",
    ) in _effective(sim)
    assert sim.schema_violations() == []
    # resources, disk and cloudinit (digest-carrying writes) took the configuration the stage before read back; readiness
    # the power state the start's read-back observed. Seed and start read everything themselves (docs/stages.md).
    assert result["reads_saved"] == 4
    # A re-run sends nothing and reports nothing changed.
    before = len(sim.requests())
    again = _run(env)
    assert not again["changed"] and again["done"] and again["requests"] == []
    assert all(e["method"] == "GET" for e in sim.requests()[before:])


def test_fewer_reads_than_stage_by_stage(sim: t.Any, tmp_path: Path) -> None:
    def fresh() -> None:
        sim.reset()
        sim.set_speed(SPEED)

    chained = gs.create(tmp_path / "a", sim.connection)
    reads = RecentReads()
    assert _run(chained, recent_reads=reads)["done"]
    chained_reads, chained_mutations = _read_counts(sim), sorted(_effective(sim).elements())
    assert reads.saved == {"config": 3, "power": 1}

    # The same chain with every observation too old when asked (each clock reading 6 s after the last): no read saved.
    fresh()
    aged = gs.create(tmp_path / "b", sim.connection)
    aged_reads = RecentReads(clock=t.cast(t.Callable[[], float], itertools.count(0.0, 6.0).__next__))
    assert _run(aged, recent_reads=aged_reads)["done"]
    aged_counts = _read_counts(sim)
    assert aged_reads.served == 0 and sorted(_effective(sim).elements()) == chained_mutations

    fresh()
    single = gs.create(tmp_path / "c", sim.connection)
    options = StageOptions(readiness_timeout=60)
    for kind in single.kinds:
        assert single.run(stage_logic(kind, options), environ=BOTH_GATES)["done"]
    single_reads = _read_counts(sim)
    assert sorted(_effective(sim).elements()) == chained_mutations  # the same writes
    assert aged_counts == single_reads
    # config: resources, disk, cloudinit; power: readiness; pending: resources, disk, cloudinit (digest-bound: a pending
    # change since is in the digest).
    assert chained_reads == {
        "/config": single_reads["/config"] - 3,
        "/status/current": single_reads["/status/current"] - 1,
        "/pending": single_reads["/pending"] - 3,
    }, (chained_reads, single_reads)


def test_another_clients_start_inside_the_window_stops_the_run_at_start(sim: t.Any, tmp_path: Path) -> None:
    """The power state recorded at the clone's read-back is still young when the seed stage ends; another client starts
    the VM then. The start stage reads the power state itself: the run stops there, and this process starts nothing."""
    env = gs.create(tmp_path, sim.connection)
    reads = RecentReads()
    stale: list[str | None] = []

    def report(line: str) -> None:
        if " seed: completed" in line:
            _start_by_another_client(sim)
            stale.append(reads.power(gs.VM))

    with pytest.raises(ProvisionStopped) as info:
        _run(env, report=report, recent_reads=reads)
    assert stale == ["stopped"]  # a recorded, young and now wrong observation existed
    assert info.value.code == "stage_precondition_failed" and info.value.details["rule"] == "stopped"
    assert info.value.stages[-1]["kind"] == "start" and env.stage("start")["status"] == "pending"
    assert _effective(sim)[("POST", gs.VM + "/status/start")] == 1  # the other client's, not ours


@pytest.mark.parametrize(
    "key, value",
    [
        (
            "sshkeys",
            "ssh-ed25519%20AAAAC3NzaC1lZDI1NTE5AAAAIOtherClientsKeyOtherClientsKeyOtherCli%20other%40elsewhere",
        ),
        ("cores", 3),
    ],
)
def test_another_clients_change_between_seed_and_start_stops_the_run_at_start(
    sim: t.Any, tmp_path: Path, key: str, value: t.Any
) -> None:
    """The seed stage's read-back (its pending list, with the digest) is young when the seed stage ends; another client
    changes the configuration then (``sshkeys``: the guest would boot with a key nobody reviewed). The start stage reads
    the configuration itself: its digest differs from the one the seed was validated at, and nothing is started."""
    env = gs.create(tmp_path, sim.connection)
    reads = RecentReads()
    changed: list[bool] = []

    def report(line: str) -> None:
        if " seed: completed" in line:
            other = ProxmoxClient(gs.settings_for(sim.connection))
            other.put(gs.VM + "/config", **{key: value})
            changed.append(True)

    with pytest.raises(ProvisionStopped) as info:
        _run(env, report=report, recent_reads=reads)
    assert changed == [True]
    assert info.value.code == "conflict" and info.value.details["rule"] == "digest_unchanged"
    assert info.value.stages[-1]["kind"] == "start" and env.stage("start")["status"] == "pending"
    assert ("POST", gs.VM + "/status/start") not in _effective(sim)  # nothing was started
    # start read the configuration after the other client's PUT (it took no recorded one)
    sent = [(e["method"], e["path"]) for e in sim.requests() if e["path"].startswith(gs.VM)]
    other_put = max(i for i, item in enumerate(sent) if item == ("PUT", gs.VM + "/config"))
    assert ("GET", gs.VM + "/config") in sent[other_put + 1 :]
    assert sim.schema_violations() == []


def test_after_a_lost_reply_the_next_stage_reads_the_power_state(sim: t.Any, tmp_path: Path) -> None:
    """The resources PUT's reply is lost (applied): its resolution reads, and every observation is forgotten. Another
    client starts the VM before the disk stage: the disk stage reads the power state and stops before its resize."""
    env = gs.create(tmp_path, sim.connection)
    assert "disk" in env.kinds
    sim.add_fault(method="PUT", path=r"/qemu/201/config$", action="drop_reply", occurrence=1)
    reads = RecentReads()

    def report(line: str) -> None:
        if " resources: completed" in line:
            _start_by_another_client(sim)

    with pytest.raises(ProvisionStopped) as info:
        _run(env, report=report, recent_reads=reads)
    assert info.value.code == "stage_precondition_failed" and info.value.details["rule"] == "stopped"
    assert info.value.stages[-1]["kind"] == "disk" and env.stage("disk")["status"] == "pending"
    assert ("PUT", gs.VM + "/resize") not in _effective(sim)
    # The lost PUT was resolved by a configuration read right after it (never by the recorded configuration).
    sent = [(e["method"], e["path"], e["status"]) for e in sim.requests() if e["path"].startswith(gs.VM)]
    lost = next(i for i, item in enumerate(sent) if item[:2] == ("PUT", gs.VM + "/config"))
    assert sent[lost][2] == "dropped" and sent[lost + 1][:2] == ("GET", gs.VM + "/config")
    assert (
        reads.saved["power"] == 0
    )  # no stage before readiness takes a recorded power state (docs/stages.md "Reads reused")
    # resources took the clone's read-back before its PUT; disk the configuration the resolution read after the lost PUT
    assert reads.saved["config"] == 2


def test_stops_at_the_first_failure_with_its_code(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection, snapshot=True)
    sim.add_fault(method="PUT", path=r"/qemu/201/resize$", action="task_error", occurrence=1)
    with pytest.raises(ProvisionStopped) as info:
        _run(env)
    result = info.value.to_result()
    assert result["error_code"] == "task_failed"
    assert [item["kind"] for item in result["stages"]] == ["clone", "resources", "disk"]
    assert result["stages"][-1]["status"] == "failed" and result["stages"][-1]["error_code"] == "task_failed"
    assert env.stage("disk")["status"] == "failed" and env.stage("cloudinit")["status"] == "pending"
    # The guest is kept; nothing after the failed stage was sent.
    assert not any(path.endswith(("/status/start", "/snapshot", "/cloudinit")) for _m, path in _effective(sim))


def test_closed_gate_stops_before_the_stage_writes(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection, snapshot=True)
    with pytest.raises(ProvisionStopped) as info:
        _run(env, environ={"VMANYWARE_PROVISIONING_ENABLED": "true"})
    assert info.value.code == "snapshot_disabled"
    assert [item["status"] for item in info.value.stages][:-1] == ["completed"] * (len(env.kinds) - 1)
    assert ("POST", gs.VM + "/snapshot") not in _effective(sim)
    assert env.stage("snapshot")["status"] == "pending"


def test_check_mode_previews_every_stage_and_writes_nothing(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection)
    lines: list[str] = []
    journal_before = json.dumps(env.document, sort_keys=True)
    result = _run(env, lines, check_mode=True, diff=True)
    assert not result["done"] and result["changed"]
    assert result["diff"]["before"]["exists"] is False and result["diff"]["after"]["vmid"] == gs.VMID  # the clone's
    assert [item["kind"] for item in result["stages"]] == env.kinds
    assert result["stages"][0]["requests"][0]["path"] == "/nodes/pve-test/qemu/9000/clone"
    assert all(item.get("preview") == "earlier stages pending" for item in result["stages"][1:])
    assert lines[0].startswith("stage 1/%d clone: would send POST /nodes/pve-test/qemu/9000/clone" % len(env.kinds))
    assert _effective(sim) == collections.Counter() and json.dumps(env.document, sort_keys=True) == journal_before


def test_progress_line_while_a_stage_runs_long(sim: t.Any, tmp_path: Path) -> None:
    sim.set_speed(1)  # real seconds; only the clone takes long
    sim.set_timings(tasks={"qmclone_full": 2.5}, guest=FAST_GUEST)
    env = gs.create(tmp_path, sim.connection)
    lines: list[str] = []
    result = _run(env, lines, progress_interval=1.0, timeout=30.0)
    assert result["done"]
    running = [line for line in lines if "clone: still running after" in line]
    assert 1 <= len(running) <= 4, lines
    assert lines.index(running[0]) < next(
        i for i, line in enumerate(lines) if line.startswith("stage 1/") and "completed" in line
    )


def test_wait_budget_returns_not_done_and_a_rerun_continues(sim: t.Any, tmp_path: Path) -> None:
    sim.set_speed(1)
    sim.set_timings(tasks={"qmclone_full": 3.0}, guest=FAST_GUEST)
    env = gs.create(tmp_path, sim.connection)
    first = _run(env, wait_budget=0.5)
    assert not first["done"] and first["stages"][-1]["kind"] == "clone" and first["stages"][-1]["status"] == "submitted"
    sim.set_speed(SPEED)
    second = _run(env)
    assert second["done"] and second["stages"][0]["status"] == "completed"
    assert sum(1 for e in sim.requests() if e["method"] == "POST" and e["path"].endswith("/clone")) == 1


def test_container_operation_is_refused_before_anything_runs() -> None:
    with pytest.raises(VmanywareError) as info:
        stage_logic("create", StageOptions())
    assert info.value.code == "invalid_option" and info.value.details["stage"] == "create"


def test_module_entry_runs_the_chain(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection)
    conn = sim.connection
    params: dict[str, t.Any] = {
        "operation_id": env.operation_id,
        "journal_dir": str(tmp_path / "journal"),
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"],
        "api_token_secret": conn["tokens"]["full"]["secret"],
        "ca_path": conn["ca_file"],
        "validate_certs": True,
        "api_timeout": 10,
        "lock_wait": 10.0,
        "provisioning_enabled": True,
        "readiness_timeout": 60.0,
        "storage_concurrency": 3,
    }
    result = provision(params, check_mode=False, diff=False)
    assert result["done"] and result["status"] == "completed" and len(result["log"]) == len(env.kinds)
    assert conn["tokens"]["full"]["secret"] not in json.dumps(result)


def test_the_chain_runs_as_a_module_process_too(sim: t.Any, tmp_path: Path) -> None:
    # AnsiballZ packages what the module imports by name: every stage logic module must be in the payload (the registry's
    # classes are bound by import in _stages/logic.py), or the run fails with internal_error as a module process.
    env = gs.create(tmp_path, sim.connection)
    completed = tia._playbook(
        tmp_path,
        sys.executable,
        "false",
        module="vmanyware_provision",  # pylint: disable=protected-access
        args=_module_params(sim, env, tmp_path),
        task_env={"VMANYWARE_PROVISIONING_ENABLED": "true"},
    )
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "vmanyware: vmanyware_provision ran as a module process (VMANYWARE_IN_PROCESS=false)" in completed.stdout
    result = tia._result(completed)  # pylint: disable=protected-access
    assert result["done"] and result["status"] == "completed" and len(result["log"]) == len(env.kinds)
    assert sim.connection["tokens"]["full"]["secret"] not in completed.stdout + completed.stderr


def _module_params(sim: t.Any, env: gs.Env, tmp_path: Path, token: str = "full", **extra: t.Any) -> dict[str, t.Any]:
    conn = sim.connection
    params: dict[str, t.Any] = {
        "operation_id": env.operation_id,
        "journal_dir": str(tmp_path / "journal"),
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["tokens"][token]["id"],
        "api_token_secret": conn["tokens"][token]["secret"],
        "ca_path": conn["ca_file"],
        "validate_certs": True,
        "api_timeout": 10,
        "lock_wait": 10.0,
        "provisioning_enabled": True,
        "readiness_timeout": 60.0,
        "storage_concurrency": 3,
    }
    params.update(extra)
    return params


TEMPLATE_CONFIG = "/nodes/pve-test/qemu/9000/config"


def _gets(sim: t.Any, path: str) -> list[int]:
    """Positions of the GETs of ``path`` in the simulator's request log."""
    return [i for i, e in enumerate(sim.requests()) if e["method"] == "GET" and e["path"] == path]


def test_the_preflight_runs_first_and_the_clone_takes_its_template_and_vmid_reads(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path / "with", sim.connection)
    sim.clear_requests()
    result = provision(_module_params(sim, env, tmp_path / "with", preflight=True), check_mode=False, diff=False)
    assert result["done"] and result["preflight"]["summary"]["failed"] == 0 and "warnings" not in result
    assert [check["code"] for check in result["preflight"]["checks"]][0] == "api_reachable"
    assert result["log"][0].startswith("preflight passed") and result["log"][-1].startswith(
        "stage %d/" % len(env.kinds)
    )
    # The template configuration and the VMID are read once (by the preflight), before the clone's POST; the clone took both.
    clone_post = next(i for i, e in enumerate(sim.requests()) if e["method"] == "POST" and e["path"].endswith("/clone"))
    assert len(_gets(sim, TEMPLATE_CONFIG)) == 1 and _gets(sim, TEMPLATE_CONFIG)[0] < clone_post
    assert len(_gets(sim, "/cluster/nextid")) == 1 and _gets(sim, "/cluster/nextid")[0] < clone_post
    assert sim.schema_violations() == []
    with_preflight = len(sim.requests())

    # The same chain without the preflight: the clone reads both itself; the preflight's other reads are the only extra.
    sim.reset()
    sim.set_speed(SPEED)
    env = gs.create(tmp_path / "without", sim.connection)
    sim.clear_requests()
    without = provision(_module_params(sim, env, tmp_path / "without"), check_mode=False, diff=False)
    assert without["done"] and "preflight" not in without
    assert len(_gets(sim, TEMPLATE_CONFIG)) == 1 and len(_gets(sim, "/cluster/nextid")) == 1
    assert result["reads_saved"] == without["reads_saved"] + 2  # the template configuration and "VMID free"
    assert (
        with_preflight - len(sim.requests()) == 8
    )  # version, storage, network and 5 permission reads: the 10 minus the 2 taken


def test_a_failing_preflight_of_a_new_operation_sends_nothing(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection)
    sim.clear_requests()
    with pytest.raises(ProvisionStopped) as info:
        provision(_module_params(sim, env, tmp_path, token="limited", preflight=True), check_mode=False, diff=False)
    result = info.value.to_result()
    assert result["error_code"] == "preflight_failed" and result["stages"] == []
    assert result["error_details"]["failed_checks"] == ["privileges"]
    assert all(e["method"] == "GET" for e in sim.requests())
    assert all(item["status"] == "pending" and item["attempts"] == 0 for item in env.document["stages"])


def test_a_vmid_taken_after_the_preflight_read_it_free_is_refused_never_a_second_vm(sim: t.Any, tmp_path: Path) -> None:
    """Rule 8's claim on the simulator: another client clones into the VMID right after the preflight read it free. The
    clone stage takes that "free" and POSTs; Proxmox refuses (config file already exists); the stage reads, fails with
    vmid_taken and stays pending. One VM at that VMID, the other client's, untouched."""
    env = gs.create(tmp_path, sim.connection)
    other = ProxmoxClient(gs.settings_for(sim.connection))

    class TakenAfterTheRead:
        def __init__(self, client: ProxmoxClient) -> None:
            self.client = client
            self.raced = False

        def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
            envelope = self.client.request(method, path, params)
            if path == "/cluster/nextid" and not self.raced:
                self.raced = True
                upid = other.post(
                    "/nodes/pve-test/qemu/9000/clone",
                    newid=gs.VMID,
                    full=1,
                    storage="local-lvm",
                    name="someone-else",
                    description="made by another tool",
                )
                assert wait_task(other, upid, timeout=60).succeeded
            return envelope

        def __getattr__(self, name: str) -> t.Any:
            return getattr(self.client, name)

    sim.clear_requests()
    with pytest.raises(ProvisionStopped) as info:
        provision(
            _module_params(sim, env, tmp_path, preflight=True),
            check_mode=False,
            diff=False,
            client_factory=lambda settings: TakenAfterTheRead(ProxmoxClient(settings)),
        )
    assert info.value.code == "vmid_taken" and info.value.details["rule"] == "taken_before_clone"
    ours = [
        e
        for e in sim.requests(method="POST", path_regex=r"/qemu/9000/clone$")
        if e["params"].get("name") != "someone-else"
    ]
    assert len(ours) == 1 and ours[0]["status"] == 500
    assert len(_gets(sim, "/cluster/nextid")) == 1  # the clone took the preflight's (now stale) "free"
    assert env.stage("clone")["status"] == "pending" and env.document["status"] == "open"
    assert sim.vm(gs.VMID)["config"]["description"] == "made by another tool"
    assert sorted(guest["vmid"] for guest in sim.root_call("GET", "/cluster/resources", type="vm")) == [gs.VMID, 9000]


# --- With confirmation: the task records the confirmed operation itself (the provision role's confirmed one-task path) ---


def _record_params(
    sim: t.Any, tmp_path: Path, confirmation: t.Any, token: str = "full", **extra: t.Any
) -> dict[str, t.Any]:
    """vmanyware_provision's options with the plan inputs and a confirmation instead of an operation id."""
    params = _module_params(
        sim,
        t.cast(gs.Env, _NoOperation()),
        tmp_path,
        token=token,
        operation_id=None,
        catalog=gs.catalog_text(),
        catalog_path=None,
        definition=gs.definition_text(),
        definition_path=None,
        target_vmid=gs.VMID,
        confirmation=confirmation,
        idempotency_key=None,
        preflight=True,
    )
    params.update(extra)
    return params


class _NoOperation:  # pylint: disable=too-few-public-methods
    operation_id = None


def _journal_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "journal").glob("op-*.json"))


def _expected_confirmation(sim: t.Any, tmp_path: Path) -> dict[str, t.Any]:
    """The block a review run prints: vmanyware_provision without a complete confirmation fails with it, recording nothing."""
    with pytest.raises(VmanywareError) as info:
        provision(_record_params(sim, tmp_path, {}), check_mode=False, diff=False)
    assert info.value.code == "confirmation_required" and not isinstance(info.value, ProvisionStopped)
    return dict(info.value.details["expected_confirmation"])


def test_with_a_confirmation_it_records_the_operation_then_runs_every_stage(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VMANYWARE_PROVISIONING_ENABLED", raising=False)
    sim.clear_requests()
    confirmation = _expected_confirmation(sim, tmp_path)
    assert sim.requests() == [] and not _journal_files(tmp_path)  # the review sent nothing and recorded nothing
    assert confirmation["targetVmid"] == gs.VMID and confirmation["confirmed"] is True
    known_hosts = tmp_path / "ssh" / "known_hosts"
    result = provision(
        _record_params(sim, tmp_path, confirmation, set_operation_fact=True, known_hosts_path=str(known_hosts)),
        check_mode=False,
        diff=False,
    )
    assert result["done"] and result["status"] == "completed" and result["created"] and result["changed"]
    # the agent-verified host keys of the hand-off, installed as vmanyware_known_hosts installs them
    handoff = result["ansible_facts"]["vmanyware_operation"]["handoff"]
    assert (
        result["known_hosts"]["outcome"] == "created"
        and result["known_hosts"]["lines"] == len(handoff["known_hosts"]) >= 1
    )
    assert (
        known_hosts.read_text().splitlines()[1:-1] == handoff["known_hosts"]
        and known_hosts.stat().st_mode & 0o777 == 0o600
    )
    [path] = _journal_files(tmp_path)
    assert path.stem == result["operation_id"] == result["ansible_facts"]["vmanyware_operation"]["operation_id"]
    assert result["preflight"]["summary"]["failed"] == 0 and sim.schema_violations() == []
    # the operation is recorded exactly as vmanyware_operation records it: the confirmed block, the default idempotency key
    document = json.loads(path.read_text())
    assert document["confirmation"] == confirmation and document["plan"]["planHash"] == confirmation["planHash"]
    assert _effective(sim)[("POST", "/nodes/pve-test/qemu/9000/clone")] == 1
    # The same confirmation again finds the same operation (idempotent): nothing recorded, nothing sent but reads.
    sim.clear_requests()
    again = provision(
        _record_params(sim, tmp_path, confirmation, known_hosts_path=str(known_hosts)), check_mode=False, diff=False
    )
    assert again["operation_id"] == result["operation_id"] and not again["created"] and not again["changed"]
    assert again["known_hosts"]["outcome"] == "unchanged"
    assert _journal_files(tmp_path) == [path] and all(e["method"] == "GET" for e in sim.requests())


def test_a_confirmation_of_another_plan_fails_before_anything_is_recorded_or_sent(sim: t.Any, tmp_path: Path) -> None:
    confirmation = _expected_confirmation(sim, tmp_path)
    sim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        provision(_record_params(sim, tmp_path, dict(confirmation, planHash="0" * 64)), check_mode=False, diff=False)
    assert info.value.code == "plan_changed" and info.value.details["fields"] == ["planHash"]
    assert "operation_id" not in info.value.to_result()
    assert sim.requests() == [] and not _journal_files(tmp_path)
    # A confirmation with its gate closed: the same code as vmanyware_operation's, and still nothing recorded.
    with pytest.raises(VmanywareError) as closed:
        provision(_record_params(sim, tmp_path, confirmation, provisioning_enabled=False), check_mode=False, diff=False)
    assert closed.value.code == "provisioning_disabled" and sim.requests() == [] and not _journal_files(tmp_path)


@pytest.mark.parametrize("failing", ["privileges", "bridge"])
def test_a_failing_preflight_stops_before_the_operation_is_recorded(sim: t.Any, tmp_path: Path, failing: str) -> None:
    """The one-task path runs the preflight before it records the confirmed operation: a check that fails leaves no
    operation in the journal (nothing to abandon), no Proxmox write, and the VMID lease where it was (not taken over)."""
    confirmation = _expected_confirmation(sim, tmp_path)
    reserver = Reserver(sim, tmp_path)
    assert reserver.reserve("ops", vmid=gs.VMID)["vmid"] == gs.VMID
    leases = reserver.leases()
    assert leases
    if failing == "bridge":
        sim.delete_bridge("vmbr0")
    sim.clear_requests()
    with pytest.raises(ProvisionStopped) as info:
        provision(
            _record_params(
                sim,
                tmp_path,
                confirmation,
                token="limited" if failing == "privileges" else "full",
                known_hosts_path=str(tmp_path / "known_hosts"),
            ),
            check_mode=False,
            diff=False,
        )
    result = info.value.to_result()
    assert result["error_code"] == "preflight_failed" and result["stages"] == []
    assert result["error_details"]["failed_checks"] == ["privileges" if failing == "privileges" else "bridge_exists"]
    assert "operation_id" not in result and "operationId" not in result["error_details"]
    assert "Nothing was recorded or sent" in result["msg"]
    assert [check["code"] for check in result["preflight"]["checks"]][0] == "api_reachable"
    assert result["log"][-1] == "preflight: stopped before the operation was recorded; nothing was recorded or sent"
    assert not _journal_files(tmp_path) and reserver.leases() == leases
    assert all(e["method"] == "GET" for e in sim.requests()) and not (tmp_path / "known_hosts").exists()


def test_a_failure_after_recording_names_the_operation(sim: t.Any, tmp_path: Path) -> None:
    confirmation = _expected_confirmation(sim, tmp_path)
    sim.add_fault(method="PUT", path=r"/qemu/201/resize$", action="task_error", occurrence=1)
    sim.clear_requests()
    with pytest.raises(ProvisionStopped) as info:
        provision(
            _record_params(sim, tmp_path, confirmation, known_hosts_path=str(tmp_path / "known_hosts")),
            check_mode=False,
            diff=False,
        )
    result = info.value.to_result()
    assert not (tmp_path / "known_hosts").exists()  # keys only once the operation is completed
    [path] = _journal_files(tmp_path)
    # the preflight passed, the operation was recorded, then a stage failed: the failure names the operation
    assert result["error_code"] == "task_failed" and result["operation_id"] == path.stem
    assert result["preflight"]["summary"]["failed"] == 0 and result["stages"][-1]["kind"] == "disk"
    # the record comes after the preflight's reads and before the first write
    clone = next(i for i, e in enumerate(sim.requests()) if e["method"] == "POST" and e["path"].endswith("/clone"))
    assert _gets(sim, "/version")[0] < clone
    assert json.loads(path.read_text())["stages"][0]["status"] == "completed"


def test_check_mode_with_a_confirmation_previews_the_preflight_without_recording(sim: t.Any, tmp_path: Path) -> None:
    confirmation = _expected_confirmation(sim, tmp_path)
    sim.clear_requests()
    result = provision(_record_params(sim, tmp_path, confirmation), check_mode=True, diff=False)
    assert not result["done"] and not result["created"] and result["changed"]
    assert result["preflight"]["summary"]["failed"] == 0 and result["preflight"]["checks"][0]["code"] == "api_reachable"
    assert result["log"][0].startswith("preflight passed")
    assert [item["kind"] for item in result["stages"]][0] == "clone"
    assert ("POST", "/nodes/pve-test/qemu/9000/clone") in [(r["method"], r["path"]) for r in result["requests"]]
    assert all(e["method"] == "GET" for e in sim.requests()) and not _journal_files(tmp_path)
    # A preflight that would stop the apply run stops the preview the same way, with its checks, recording nothing.
    sim.delete_bridge("vmbr0")
    with pytest.raises(ProvisionStopped) as info:
        provision(_record_params(sim, tmp_path, confirmation), check_mode=True, diff=False)
    stopped = info.value.to_result()
    assert stopped["error_code"] == "preflight_failed" and stopped["error_details"]["failed_checks"] == [
        "bridge_exists"
    ]
    assert "operation_id" not in stopped and stopped["preflight"]["summary"]["failed"] == 1
    assert all(e["method"] == "GET" for e in sim.requests()) and not _journal_files(tmp_path)


def test_the_recording_options_need_the_plan_inputs_and_exclude_an_operation_id(sim: t.Any, tmp_path: Path) -> None:
    with pytest.raises(VmanywareError) as info:
        provision(_record_params(sim, tmp_path, {"confirmed": True}, definition=None), check_mode=False, diff=False)
    assert info.value.code == "invalid_option" and info.value.details["rule"] == "plan_inputs_required"
    assert ["operation_id", "confirmation"] in provision_entry().module_kwargs()["mutually_exclusive"]
