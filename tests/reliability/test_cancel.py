# SPDX-License-Identifier: GPL-3.0-or-later
"""Cancel means stop (docs/reliability.md, "How trials kill"): a real ``ansible-playbook`` killed while a stage runs.

ansible-core starts each task worker in a session of its own, so a signal to the playbook's process group never
reaches the worker that sends the requests. Each trial kills the group when the clone's request reaches the
simulator's log (an event, not a time: the trial does not depend on the machine's speed), then checks from the
simulator's request log that the worker sent no new mutating request after the kill (at most the one in flight),
that it stopped by itself (no process of the run is alive ``ORPHAN_GRACE`` later), that the journal shows the cancel
(``evidence.cancelled``: ``controller_gone`` after a SIGKILL, ``run_cancelled`` after SIGTERM/SIGINT, which
ansible-playbook forwards to its workers), and that a re-run completes with no duplicate.
"""

from __future__ import annotations

import os
import signal
import typing as t
from pathlib import Path

import pytest
import yaml

import rel_support as rs
from test_crash import _playbook_trial as _trial, _prepare, check_trial

ON_CLONE = ("POST", r"/qemu/%d/clone$" % rs.TEMPLATE, 1)


@pytest.fixture(scope="module")
def playbook(rel_sim: rs.Simulator, tmp_path_factory: pytest.TempPathFactory) -> rs.Playbook:
    rel_sim.admin.reset()
    book = rs.Playbook(rel_sim, tmp_path_factory.mktemp("pb-cancel"), 201)
    book.review()
    return book


@pytest.mark.parametrize(
    "sig,code",
    [(signal.SIGKILL, "controller_gone"), (signal.SIGTERM, "run_cancelled"), (signal.SIGINT, "run_cancelled")],
    ids=["sigkill", "sigterm", "sigint"],
)
def test_a_killed_playbook_group_stops_its_worker(
    rel_sim: rs.Simulator, playbook: rs.Playbook, sig: int, code: str
) -> None:
    spec = rs.TrialSpec(
        "cancel-%s" % signal.Signals(sig).name.lower(), "playbook", kill=rs.Kill("group", sig, request=ON_CLONE)
    )
    result = _trial(rel_sim, spec, playbook)
    record = result.to_json()
    check_trial(result)
    assert result.killed and result.runs >= 2, record
    assert result.lingered == 0, record  # the orphaned worker stopped by itself
    assert result.after_kill <= 1, record  # at most the request in flight at the kill
    assert result.cancelled == [code], record
    assert result.outcome == "completed" and result.duplicates == {}, record


def test_a_module_process_stops_too(rel_sim: rs.Simulator, playbook: rs.Playbook) -> None:
    """``VMANYWARE_IN_PROCESS=false``: a stage runs in a module process under the worker; it watches the controller and
    the worker the action plugin named (``$VMANYWARE_CONTROLLER``) and stops as the in-process run does. The packages
    stage's ``apt-get update`` takes 5 s here, so the kill finds the module process polling it."""
    spec = rs.TrialSpec(
        "cancel-module-process",
        "playbook",
        env={"VMANYWARE_IN_PROCESS": "false"},
        args=("-e", "provision_step_by_step=true"),
        kill=rs.Kill("group", signal.SIGKILL, request=("POST", r"/agent/exec$", 1), params=r"apt-get.*update"),
    )
    result = _trial(rel_sim, spec, playbook, apt_update=5000.0)
    record = result.to_json()
    check_trial(result)
    assert result.killed and result.runs >= 2 and result.lingered == 0 and result.after_kill <= 1, record
    assert result.cancelled == ["controller_gone"] and result.outcome == "completed", record


def test_ansible_runner_cancel_stops_the_worker(rel_sim: rs.Simulator, playbook: rs.Playbook, tmp_path: Path) -> None:
    """AWX's cancel: ansible-runner's ``cancel_callback`` returns true, runner SIGKILLs ansible-playbook's process group."""
    ansible_runner = pytest.importorskip("ansible_runner")
    rel_sim.admin.reset()
    _prepare(rel_sim, playbook.vmid)
    for path in playbook.journal.rglob("*"):
        if path.is_file():
            path.unlink()
    pdd = tmp_path / "private"
    (pdd / "project").mkdir(parents=True)
    (pdd / "project" / "provision.yml").write_text(
        "- ansible.builtin.import_playbook: vmanyware.proxmox.provision\n", encoding="utf-8"
    )
    args = playbook.args()
    extravars: dict[str, t.Any] = dict(item.split("=", 1) for item in args[3::2])
    extravars["vmanyware_target_vmid"] = playbook.vmid
    extravars.update(yaml.safe_load(playbook.confirm.read_text(encoding="utf-8")))
    env = rel_sim.playbook_env(playbook.journal)
    envvars = {key: value for key, value in env.items() if key.startswith(("PROXMOX_", "VMANYWARE_", "ANSIBLE_"))}
    envvars["PATH"] = "%s%s%s" % (rs.BIN, os.pathsep, os.environ.get("PATH", ""))
    state: dict[str, t.Any] = {"seq": None, "workers": {}}
    before = rs.descendants(os.getpid())  # the simulator and the like: not the job's

    def cancel() -> bool:
        if state["seq"] is not None:
            return True
        clones = rel_sim.admin.requests(*ON_CLONE[:2])
        state["workers"].update(
            {pid: start for pid, start in rs.descendants(os.getpid()).items() if before.get(pid) != start}
        )
        if clones:
            state["seq"] = max(int(entry["seq"]) for entry in rel_sim.admin.requests())
            return True
        return False

    runner = ansible_runner.run(
        private_data_dir=str(pdd),
        playbook="provision.yml",
        extravars=extravars,
        envvars=envvars,
        quiet=True,
        rotate_artifacts=0,
        timeout=600,
        cancel_callback=cancel,
        # the callback is asked each time pexpect's read times out (AWX polls its cancel flag too)
        settings={"pexpect_timeout": 0.1},
    )
    assert runner.status == "canceled" and state["seq"] is not None
    # the worker (in a session of its own: runner's SIGKILL of the group misses it) stops by itself
    workers = state["workers"]
    assert workers  # ansible-playbook and its task worker were seen
    deadline = rs.time.monotonic() + rs.ORPHAN_GRACE
    while rs._alive(workers) and rs.time.monotonic() < deadline:  # pylint: disable=protected-access
        rs.time.sleep(rs.POLL)
    assert rs._alive(workers) == {}  # pylint: disable=protected-access
    after = rs.mutations_after(rel_sim, state["seq"])
    assert len(after) <= 1, after
    documents, torn = rs.journal_state(playbook.journal)
    assert torn == 0 and len(documents) == 1
    cancelled = [
        item["evidence"]["cancelled"]["code"] for item in documents[0]["stages"] if "cancelled" in item["evidence"]
    ]
    assert cancelled == ["controller_gone"] and documents[0]["status"] == "open", documents[0]["stages"]
    # the re-run completes, with no duplicate
    rerun = playbook.apply()
    assert rerun.rc == 0, rerun.stdout[-3000:]
    counts = rs.mutation_counts(rel_sim.admin.requests(), playbook.vmid)
    assert {key: value for key, value in counts.items() if value > 1} == {} and counts["clone"] == 1
    assert rs.journal_state(playbook.journal)[0][0]["status"] == "completed"
    # What the job produced (its stdout and events) carries no token secret; ansible-runner's own copies of the job's inputs
    # (env/envvars, artifacts/<id>/command: the environment the test handed it) are removed, as AWX removes a job's
    # private data dir, so the session-wide secret scan (test_secrets_tls) judges only what the collection wrote.
    _secret = envvars["PROXMOX_TOKEN_SECRET"]
    outputs = [path for path in (pdd / "artifacts").rglob("*") if path.is_file() and path.name not in ("command",)]
    assert outputs and all(_secret.encode() not in path.read_bytes() for path in outputs)
    for path in [pdd / "env" / "envvars", *(pdd / "artifacts").rglob("command")]:
        path.unlink()
