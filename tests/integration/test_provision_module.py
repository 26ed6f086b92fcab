# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_provision: every remaining stage of an operation in one call, against the simulator.

The stages run through the same ``StageRunner`` as their modules; these tests check the chained run's own
promises: declared order, one journal, stop at the first failure with that stage's code and the results so far,
a real check-mode preview, progress lines, a re-run that sends nothing, and fewer configuration reads than the
stage-by-stage path with the same mutations (each exactly once).
"""

from __future__ import annotations

import collections
import json
import typing as t
from pathlib import Path

import pytest

import guest_support as gs

from ansible_collections.vmanyware.proxmox.plugins.module_utils._errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._provision import (
    ProvisionStopped,
    StageOptions,
    provision,
    run_stages,
    stage_logic,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._recent_reads import ObservingClient, RecentReads
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import StageSettings

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


def _run(env: gs.Env, lines: list[str] | None = None, **kwargs: t.Any) -> dict[str, t.Any]:
    interval = kwargs.pop("progress_interval", 30.0)
    return run_stages(env.store, env.client, env.operation_id, _settings(**kwargs), StageOptions(readiness_timeout=60),
                      progress_interval=interval, report=(lines.append if lines is not None else (lambda line: None)))


def _effective(sim: t.Any) -> collections.Counter[tuple[str, str]]:
    return collections.Counter((e["method"], e["path"]) for e in sim.requests()
                               if e["method"] != "GET" and (e["status"] == "dropped" or e["status"] < 300))


def _reads(sim: t.Any, suffix: str) -> int:
    return sum(1 for e in sim.requests() if e["method"] == "GET" and e["path"] == gs.VM + suffix)


def test_every_stage_in_one_call(sim: t.Any, tmp_path: Path) -> None:
    env = gs.create(tmp_path, sim.connection, snapshot=True)
    lines: list[str] = []
    result = _run(env, lines)
    assert result["done"] and result["changed"] and result["status"] == "completed"
    assert [item["kind"] for item in result["stages"]] == env.kinds
    assert all(item["status"] == "completed" and item["done"] for item in result["stages"])
    assert env.document["status"] == "completed"
    # One line per stage, in order, naming it.
    assert [line.split(":")[0] for line in lines] == ["stage %d/%d %s" % (i + 1, len(env.kinds), kind) for i, kind in enumerate(env.kinds)]
    # Each mutation exactly once, every request schema-valid.
    effective = _effective(sim)
    assert effective.pop(("PUT", gs.VM + "/config")) == 2, effective  # resources, then cloudinit
    assert all(count == 1 for count in effective.values()), effective
    assert ("POST", "/nodes/pve-test/qemu/9000/clone") in _effective(sim) and ("POST", gs.VM + "/snapshot") in _effective(sim)
    assert sim.schema_violations() == []
    # resources, disk, cloudinit and seed took the configuration the stage before read back.
    assert result["reads_saved"] == 4
    # A re-run sends nothing and reports nothing changed.
    before = len(sim.requests())
    again = _run(env)
    assert not again["changed"] and again["done"] and again["requests"] == []
    assert all(e["method"] == "GET" for e in sim.requests()[before:])


def test_fewer_reads_than_stage_by_stage(sim: t.Any, tmp_path: Path) -> None:
    chained = gs.create(tmp_path / "a", sim.connection)
    assert _run(chained)["done"]
    chained_config, chained_pending = _reads(sim, "/config"), _reads(sim, "/pending")
    chained_mutations = sorted(_effective(sim).elements())
    sim.reset()
    sim.set_speed(SPEED)
    single = gs.create(tmp_path / "b", sim.connection)
    options = StageOptions(readiness_timeout=60)
    for kind in single.kinds:
        assert single.run(stage_logic(kind, options), environ=BOTH_GATES)["done"]
    single_config, single_pending = _reads(sim, "/config"), _reads(sim, "/pending")
    assert sorted(_effective(sim).elements()) == chained_mutations  # the same writes
    assert chained_config == single_config - 4 and chained_pending == single_pending - 4, (chained_config, single_config)


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
    assert lines.index(running[0]) < next(i for i, line in enumerate(lines) if line.startswith("stage 1/") and "completed" in line)


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
        "operation_id": env.operation_id, "journal_dir": str(tmp_path / "journal"), "api_host": conn["host"], "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"], "api_token_secret": conn["tokens"]["full"]["secret"], "ca_path": conn["ca_file"],
        "validate_certs": True, "api_timeout": 10, "lock_wait": 10.0, "provisioning_enabled": True, "readiness_timeout": 60.0,
        "storage_concurrency": 3,
    }
    result = provision(params, check_mode=False, diff=False)
    assert result["done"] and result["status"] == "completed" and len(result["log"]) == len(env.kinds)
    assert conn["tokens"]["full"]["secret"] not in json.dumps(result)


def test_recent_reads_serve_one_check_until_a_write_or_their_age() -> None:
    now = [0.0]
    reads = RecentReads(max_age=5.0, clock=lambda: now[0])

    class Fake:
        def __init__(self) -> None:
            self.sent: list[tuple[str, str]] = []

        def request(self, method: str, path: str, params: t.Any = None) -> dict[str, t.Any]:
            self.sent.append((method, path))
            return {"data": {"digest": "d1", "cores": 2} if path.endswith("/config") else None}

    client = ObservingClient(Fake(), reads)
    client.get("/nodes/n/qemu/1/config")
    assert reads.take("/nodes/n/qemu/1") == {"digest": "d1", "cores": 2}
    assert reads.take("/nodes/n/qemu/1") is None  # served once
    client.get("/nodes/n/qemu/1/config")
    client.put("/nodes/n/qemu/1/config", cores=4)
    assert reads.take("/nodes/n/qemu/1") is None  # a write forgets what was read before it
    client.get("/nodes/n/qemu/1/config")
    now[0] = 5.1
    assert reads.take("/nodes/n/qemu/1") is None  # too old to be "just observed"
    client.get("/nodes/n/qemu/1/config", current=1)
    assert reads.take("/nodes/n/qemu/1") is None  # only the plain configuration read counts
    assert reads.served == 1
