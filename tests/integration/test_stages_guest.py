# SPDX-License-Identifier: GPL-3.0-or-later
"""The guest stages (cloudinit, seed, start, readiness, packages, snapshot) against the simulator.

Each test builds the operation with the real clone/resources/disk stages, then runs the guest
stages through the stage runner (the full happy path through ``run_stage``, like the modules).
"""

from __future__ import annotations

import sys
import time
import typing as t
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guest_support as gs  # noqa: E402  pylint: disable=wrong-import-position
from pvesim.packageindex import load_index  # noqa: E402

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import run_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.guest_exec import EXEC_WRAPPER  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.cloudinit import CloudinitStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.packages import PackagesStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import ReadinessStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import SeedStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.snapshot import SnapshotStage, snapshot_name  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.start import StartStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import parse_upid, wait_task  # noqa: E402

pytestmark = pytest.mark.integration
SPEED = 400
ENABLED = {"VMANYWARE_SNAPSHOTS_ENABLED": "true"}


@pytest.fixture()
def sim(pvesim: t.Any) -> t.Any:
    pvesim.set_speed(SPEED)
    return pvesim


def _through(env: gs.Env, kind: str) -> None:
    """Run the guest stages before ``kind``."""
    logics = {"cloudinit": CloudinitStage, "seed": SeedStage, "start": StartStage, "readiness": ReadinessStage}
    for name in ("cloudinit", "seed", "start", "readiness"):
        if name == kind:
            return
        assert env.run(logics[name]())["done"]


def _fails(env: gs.Env, logic: t.Any, code: str, **settings: t.Any) -> VmanywareError:
    with pytest.raises(VmanywareError) as info:
        env.run(logic, **settings)
    assert info.value.code == code, info.value.to_result()
    return info.value


def _no_mutation(sim: t.Any) -> None:
    assert gs.mutations(sim) == []


# -- cloudinit ----------------------------------------------------------------------------------------
def test_cloudinit_happy_rerun_and_check_mode(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    sim.clear_requests()
    preview = env.run(CloudinitStage(), check_mode=True, diff=True)
    assert preview["changed"] and not preview["done"] and preview["requests"][0]["params"]["ipconfig0"] == "ip=dhcp"
    assert preview["diff"]["after"]["citype"] == "nocloud" and env.stage("cloudinit")["status"] == "pending"
    _no_mutation(sim)
    result = env.run(CloudinitStage())
    assert result["changed"] and result["done"] and result["stage"]["evidence"]["guestReady"] is False
    assert gs.mutations(sim) == [("PUT", gs.VM + "/config")]
    config = sim.vm(gs.VMID)["config"]
    assert "ciuser" not in config and "cipassword" not in config and config["ipconfig0"] == "ip=dhcp"
    sim.clear_requests()
    again = env.run(CloudinitStage())
    assert not again["changed"] and again["done"] and sim.requests() == []
    assert sim.schema_violations() == []


def test_cloudinit_lost_reply_is_resolved_by_reads(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    sim.clear_requests()
    sim.add_fault("PUT", r"/qemu/201/config$", "drop_reply", occurrence=1)
    result = env.run(CloudinitStage())
    assert result["done"] and env.stage("cloudinit")["status"] == "completed"
    assert gs.mutations(sim) == [("PUT", gs.VM + "/config")]


def test_cloudinit_refuses_a_changed_config(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    sim.set_vm_config(gs.VMID, set={"onboot": "1"})
    sim.clear_requests()
    _fails(env, CloudinitStage(), "conflict")
    _no_mutation(sim)


def test_cloudinit_non_attested_sets_ciuser(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection, attested=False)
    assert env.run(CloudinitStage())["done"]
    assert sim.vm(gs.VMID)["config"]["ciuser"] == "debian"


# -- seed ---------------------------------------------------------------------------------------------
def test_seed_happy_and_lost_reply(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "seed")
    sim.clear_requests()
    sim.add_fault("PUT", r"/qemu/201/cloudinit$", "drop_reply", occurrence=1)
    result = env.run(SeedStage())
    evidence = result["stage"]["evidence"]
    assert (
        result["done"]
        and set(evidence["seedHashes"]) == {"user", "network", "meta"}
        and evidence["seedVerdict"] == "valid"
    )
    # the lost reply is resolved by GET cloudinit (nothing pending: the drive was regenerated), never re-sent
    assert gs.mutations(sim) == [("PUT", gs.VM + "/cloudinit")]
    assert evidence["seedResolvedBy"] == "cloudinit_pending"
    assert "ssh-ed25519" not in str(result)


def test_seed_scalar_user_is_incompatible(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection, attested=False)
    _through(env, "seed")
    error = _fails(env, SeedStage(), "seed_incompatible")
    assert error.details["rule"] == "scalar_user"
    document = env.document
    assert env.stage("seed")["status"] == "failed" and document["status"] == "failed"


# -- start --------------------------------------------------------------------------------------------
def test_start_lost_reply_is_resolved_by_the_task_list(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.clear_requests()
    sim.add_fault("POST", r"/status/start$", "drop_reply", occurrence=1)
    result = env.run(StartStage())
    assert result["done"] and result["stage"]["upid"].split(":")[5] == "qmstart"
    assert gs.mutations(sim) == [("POST", gs.VM + "/status/start")]
    assert sim.vm(gs.VMID)["status"] == "running"
    sim.clear_requests()
    assert not env.run(StartStage())["changed"] and sim.requests() == []


def test_start_task_failure_fails_the_stage(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.add_fault("POST", r"/status/start$", "task_error", message="start failed: QEMU exited with code 1")
    error = _fails(env, StartStage(), "task_failed")
    assert any("QEMU exited" in line for line in error.details["log_tail"])
    assert env.stage("start")["status"] == "failed"


def test_start_refuses_a_changed_seed(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.set_vm_config(gs.VMID, set={"searchdomain": "example.org"})
    sim.clear_requests()
    _fails(env, StartStage(), "conflict")
    _no_mutation(sim)


# -- readiness ----------------------------------------------------------------------------------------
def test_readiness_happy_rerun_and_handoff(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "readiness")
    sim.clear_requests()
    result = env.run(ReadinessStage())
    evidence = result["stage"]["evidence"]
    assert result["done"] and not result["changed"] and evidence["ipv4"].startswith("10.")
    # cloud-init is waited for by one exec; its status is first read a poll interval after it, never right away
    execs = sim.requests("POST", r"/agent/exec$")
    # through the exec-marker wrapper (docs/stages.md, "Guest commands"): the fixed script, the marker, then the argv
    assert [e["params"]["command"][5:] for e in execs] == [["cloud-init", "status", "--long", "--wait"]]
    assert all(e["params"]["command"][:4] == ["/bin/sh", "-c", EXEC_WRAPPER, "vmanyware"] for e in execs)
    reads = sim.requests("GET", r"/agent/exec-status$")
    assert reads and reads[0]["time"] - execs[0]["time"] >= 0.09
    assert (
        len(sim.requests("GET", r"/agent/file-read$")) == 3
        and len(sim.requests("GET", r"/agent/network-get-interfaces$")) == 1
    )
    assert all(line.startswith(evidence["ipv4"] + " ") for line in evidence["knownHosts"])
    assert set(evidence["hostKeyFingerprints"]) == {"ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"}
    handoff = env.document["handoff"]
    assert (
        handoff["ipv4"] == evidence["ipv4"]
        and handoff["guestUser"] == "debian"
        and "historical" in handoff["readinessNote"]
    )
    sim.clear_requests()
    assert env.run(ReadinessStage())["done"] and sim.requests() == []


def test_readiness_agent_never_up(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.set_guest(gs.VMID, agent_never=True)
    assert env.run(StartStage())["done"]
    first = env.run(ReadinessStage(readiness_timeout=2.0), wait_budget=0.3)
    assert first["done"] is False and first["progress"]["phase"] == "agent"
    deadline = env.stage("readiness")["evidence"]["deadline"]
    _fails(env, ReadinessStage(readiness_timeout=600.0), "guest_agent_unavailable")
    assert env.stage("readiness")["evidence"]["deadline"] == deadline  # never extended by a re-run
    assert env.stage("readiness")["status"] == "failed"


def test_readiness_dhcp_never(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.set_guest(gs.VMID, dhcp_never=True)
    assert env.run(StartStage())["done"]
    _fails(env, ReadinessStage(readiness_timeout=2.0), "guest_network_unavailable")


def test_readiness_cloudinit_error(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.set_guest(gs.VMID, cloudinit_error=True)
    assert env.run(StartStage())["done"]
    error = _fails(env, ReadinessStage(readiness_timeout=30.0), "cloudinit_failed")
    assert error.details["cloudinitState"] == "error"


def test_readiness_exec_disabled(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection)
    _through(env, "start")
    sim.set_guest(gs.VMID, exec_disabled=True)
    assert env.run(StartStage())["done"]
    error = _fails(env, ReadinessStage(readiness_timeout=30.0), "guest_exec_unavailable")
    assert "guest-exec" in error.message


def test_readiness_resumes_a_journaled_probe_and_reissues_a_consumed_one(sim: t.Any, tmp_path: Path) -> None:
    for consumed in (False, True):
        sim.reset()
        sim.set_speed(SPEED)
        env = gs.prepared(tmp_path / str(consumed), sim.connection)
        _through(env, "readiness")
        time.sleep(0.2)  # the agent is up
        pid = env.client.post(gs.VM + "/agent/exec", command=["cloud-init", "status", "--long", "--wait"])["pid"]
        if consumed:
            time.sleep(0.2)
            assert env.client.get(gs.VM + "/agent/exec-status", pid=pid)[
                "exited"
            ]  # a crashed run read it, never recorded it
        marker = {"probe": "cloud-init-status", "pid": pid, "issuedAt": time.time()}
        env.store.record_evidence(env.operation_id, "readiness", {"probe": marker})
        sim.clear_requests()
        assert env.run(ReadinessStage())["done"]
        polled = [e for e in sim.requests("GET", r"/agent/exec-status$") if str(e["params"].get("pid")) == str(pid)]
        execs = sim.requests("POST", r"/agent/exec$")
        assert polled, "the journaled PID is resumed by GET"
        assert len(execs) == (1 if consumed else 0)


# -- packages -----------------------------------------------------------------------------------------
def test_packages_already_present_sends_no_install(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(
        tmp_path, sim.connection, packages=[{"name": "sudo"}, {"name": "openssh-server", "version": "1:10.0p1-7"}]
    )
    _through(env, "packages")
    sim.clear_requests()
    result = env.run(PackagesStage())
    assert result["done"] and not result["changed"]
    commands = [e["params"]["command"] for e in sim.requests("POST", r"/agent/exec$")]
    assert commands and all(c[5] == "dpkg-query" for c in commands)


def test_packages_version_missing(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection, packages=[{"name": "jq", "version": "9.9-1"}])
    _through(env, "packages")
    _fails(env, PackagesStage(), "package_version_missing")
    assert env.stage("packages")["status"] == "failed"


def test_packages_lost_install_reply_is_never_rerun(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection, packages=[{"name": "git"}])
    _through(env, "packages")
    sim.clear_requests()
    # exec #1 dpkg-query, #2 apt-get update, #3 the install
    sim.add_fault("POST", r"/agent/exec$", "drop_reply", occurrence=3)
    try:
        result = env.run(PackagesStage())
    except VmanywareError as err:
        # the install may still be running: the operator waits, then re-runs (dpkg-query decides again)
        assert err.code == "outcome_uncertain" and env.stage("packages")["status"] == "uncertain"
        time.sleep(0.5)
        result = env.run(PackagesStage())
    assert result["done"] and env.stage("packages")["evidence"]["packages"]["git"] == load_index()["git"][-1]
    installs = [e for e in sim.requests("POST", r"/agent/exec$") if "install" in e["params"]["command"]]
    assert len(installs) == 1


@pytest.mark.parametrize("action", ["error_after_effect", "http_error"])
def test_packages_install_with_a_500_is_resolved_by_its_marker_and_runs_once(
    sim: t.Any, tmp_path: Path, action: str
) -> None:
    """issue 31: ``guest-exec failed - got timeout`` while the install starts (error_after_effect) -> the marker shows it
    started, the run follows it and never sends it again; a 500 before anything ran (http_error) -> the marker proves it
    never started (and refuses a late start), so the same run sends it once more, with a new marker."""
    env = gs.prepared(tmp_path, sim.connection, packages=[{"name": "git"}])
    _through(env, "packages")
    sim.clear_requests()
    extra = {"status": 500, "message": "guest-exec failed - got timeout"} if action == "http_error" else {}
    sim.add_fault("POST", r"/agent/exec$", action, occurrence=3, **extra)
    result = env.run(PackagesStage())
    assert result["done"] and env.stage("packages")["evidence"]["packages"]["git"] == load_index()["git"][-1]
    installs = [e for e in sim.requests("POST", r"/agent/exec$") if "install" in e["params"]["command"]]
    markers = [e["params"]["command"][4] for e in installs]
    writes = [e["params"]["file"] for e in sim.requests("POST", r"/agent/file-write$")]
    if action == "error_after_effect":
        assert len(installs) == 1 and writes == []
    else:
        assert len(installs) == 2 and markers[0] != markers[1] and writes == [markers[0] + ".superseded"]


# -- snapshot -----------------------------------------------------------------------------------------
def test_snapshot_disabled(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection, snapshot=True)
    _through(env, "readiness")
    assert env.run(ReadinessStage())["done"]
    sim.clear_requests()
    for environ in (gs.ON, dict(gs.ON, VMANYWARE_SNAPSHOTS_ENABLED="false")):
        _fails(
            env,
            SnapshotStage(),
            "snapshot_disabled",
            environ=environ,
            gate_options={"VMANYWARE_SNAPSHOTS_ENABLED": True} if environ != gs.ON else {},
        )
    assert gs.mutations(sim) == [] and env.stage("snapshot")["status"] == "pending"


def test_snapshot_lost_reply_and_completion(sim: t.Any, tmp_path: Path) -> None:
    env = gs.prepared(tmp_path, sim.connection, snapshot=True)
    _through(env, "readiness")
    assert env.run(ReadinessStage())["done"]
    sim.clear_requests()
    sim.add_fault("POST", r"/qemu/201/snapshot$", "drop_reply", occurrence=1)
    result = env.run(SnapshotStage(), environ=dict(gs.ON, **ENABLED))
    assert result["done"] and result["stage"]["evidence"]["snapname"].startswith("vmanyware-")
    assert gs.mutations(sim) == [("POST", gs.VM + "/snapshot")]
    assert (
        env.document["status"] == "completed"
        and env.document["handoff"]["snapshot"] == result["stage"]["evidence"]["snapname"]
    )


def test_a_snapshot_taken_outside_under_the_operations_name_fails_the_stage(sim: t.Any, tmp_path: Path) -> None:
    # The stage does not list snapshots before its write (it never sent it: only someone else can have used the operation's
    # name). Proxmox's snapshot task refuses a used name; the stage fails on that task and never takes the foreign one as its own.
    env = gs.prepared(tmp_path, sim.connection, snapshot=True)
    _through(env, "readiness")
    assert env.run(ReadinessStage())["done"]
    name = snapshot_name(env.document["operationId"])
    with ProxmoxClient(gs.settings_for(sim.connection)) as client:
        wait_task(client, parse_upid(client.post(gs.VM + "/snapshot", snapname=name)), timeout=30).raise_for_outcome()
    sim.clear_requests()
    error = _fails(env, SnapshotStage(), "task_failed", environ=dict(gs.ON, **ENABLED))
    assert any("already used" in line for line in error.details["log_tail"])
    assert gs.mutations(sim) == [("POST", gs.VM + "/snapshot")]
    assert [e["path"] for e in sim.requests() if e["method"] == "GET"][:1] == [
        gs.VM + "/config"
    ]  # no list before the write
    assert env.stage("snapshot")["status"] == "failed"


# -- the whole operation -----------------------------------------------------------------------------
def test_full_happy_path_clone_to_snapshot(sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = gs.create(
        tmp_path,
        sim.connection,
        packages=[{"name": "git"}, {"name": "jq", "version": load_index()["jq"][0]}],
        snapshot=True,
    )
    sim.clear_requests()
    gs.run_clone_stages(env)
    conn = sim.connection
    params = {
        "operation_id": env.operation_id,
        "journal_dir": str(tmp_path / "journal"),
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"],
        "api_token_secret": conn["tokens"]["full"]["secret"],
        "ca_path": conn["ca_file"],
        "validate_certs": True,
        "api_timeout": 10.0,
        "lock_wait": 30.0,
        "catalog": gs.catalog_text(),
        "set_operation_fact": True,
    }
    monkeypatch.setenv("VMANYWARE_SNAPSHOTS_ENABLED", "true")
    monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", "true")
    for logic in (CloudinitStage(), SeedStage(), StartStage(), ReadinessStage(), PackagesStage(), SnapshotStage()):
        result = run_stage(params, logic, check_mode=False, diff=False)
        assert result["done"], result
        assert conn["tokens"]["full"]["secret"] not in str(result)
    assert result["ansible_facts"]["vmanyware_operation"]["status"] == "completed"
    kinds: dict[tuple[str, str], int] = {}
    for entry in sim.requests():
        if entry["method"] != "GET":
            key = (entry["method"], entry["path"].replace(gs.VM, "{vm}"))
            kinds[key] = kinds.get(key, 0) + 1
    for key in [
        ("POST", "/nodes/pve-test/qemu/9000/clone"),
        ("PUT", "{vm}/cloudinit"),
        ("POST", "{vm}/status/start"),
        ("POST", "{vm}/snapshot"),
        ("PUT", "{vm}/resize"),
    ]:
        assert kinds.get(key) == 1, (key, kinds)
    config_writes = [e for e in sim.requests() if e["method"] in ("PUT", "POST") and e["path"] == gs.VM + "/config"]
    assert len([e for e in config_writes if "sshkeys" in e["params"]]) == 1
    installs = [e for e in sim.requests("POST", r"/agent/exec$") if "install" in e["params"]["command"]]
    assert len(installs) == 1
    assert sim.schema_violations() == []
