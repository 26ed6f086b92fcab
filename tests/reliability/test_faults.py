# SPDX-License-Identifier: GPL-3.0-or-later
"""Every simulator fault at every stage where it applies: the observed outcome equals fault_matrix.EXPECTED.

A case arms its rules right before its stage (driver, in-process stages, one simulator), runs, then clears the
faults and re-runs (at most twice) as an operator would. Every case also asserts: no journal torn, no duplicate
clone/start/resize/snapshot/install reaching the handler, no other VM.
"""

from __future__ import annotations

import os
import re
import time
import typing as t
from pathlib import Path

import pytest

import fault_matrix as fm
import rel_support as rs
from test_crash import FAST_GUEST

CASES = fm.cases() if rs.FULL else [c for c in fm.cases() if fm.case_id(c) in fm.CI_CASES]
RECORD = os.environ.get("VMANYWARE_RELIABILITY_RECORD") == "1"
DOC = rs.REPO / "docs" / "reliability.md"


def _summary(run: rs.Run) -> tuple[str, str | None]:
    result = rs.driver_result(run)
    if run.rc == 0 and result.get("result") == "completed":
        return "completed", None
    if result.get("result") == "error":
        return "error", result.get("code")
    return "crash", "rc=%s" % run.rc


def observe(sim: rs.Simulator, case: fm.Case, workdir: Path) -> dict[str, object]:
    sim.admin.reset()
    sim.admin.set_guest(fm.VMID, **FAST_GUEST)
    journal = workdir / "journal"
    # wait_budget 6 s: above the largest injected delay (3 s), so a delayed first copy is seen by the same run's reads.
    extra = {
        "faults": case.rules,
        "api_timeout": case.api_timeout,
        "readiness_timeout": 3.0,
        "packages_timeout": 20.0,
        "wait_budget": 6.0,
    }
    first = rs.driver_run(sim, journal, fm.VMID, extra=extra)
    kind, code = _summary(first)
    delays = [float(item["rule"].get("seconds", 0)) for item in case.rules if item["rule"]["action"] == "delay"]
    if delays:
        time.sleep(max(delays) + 0.5)  # let a delayed copy reach the handler before anything is counted
    faults = sim.admin.faults()
    sim.admin.clear_faults()
    torn = 0
    documents, torn_now = rs.journal_state(journal)
    torn += torn_now
    if kind == "completed":
        outcome = "completed"
    else:
        document = documents[0] if documents else None
        status = document["status"] if document else "none"
        if status == "failed":
            outcome = "failed %s" % document["failure"]["code"]
        else:
            label = ("uncertain %s" % document["failure"]["code"]) if status == "uncertain" else ("stopped %s" % code)
            final = "still %s" % status
            for _again in range(2):
                rerun = rs.driver_run(
                    sim,
                    journal,
                    fm.VMID,
                    extra={"readiness_timeout": 3.0, "packages_timeout": 20.0, "wait_budget": 6.0},
                )
                documents, torn_now = rs.journal_state(journal)
                torn += torn_now
                status = documents[0]["status"] if documents else "none"
                if _summary(rerun)[0] == "completed":
                    final = "re-run completes"
                    break
                if status == "failed":
                    final = "re-run fails %s" % documents[0]["failure"]["code"]
                    break
            outcome = "%s, %s" % (label, final)
    entries = sim.admin.requests()
    counts = rs.mutation_counts(entries, fm.VMID, faults, not_run=rs.wrapper_not_run(sim, fm.VMID))
    other = dict(rs.OTHER_COUNTS or {})
    return {
        "config_puts": other.get("config"),
        "cloudinit_puts": other.get("cloudinit"),
        "resent": rs.resent_submissions(entries, fm.VMID),
        "case": fm.case_id(case),
        "fault": case.fault,
        "stage": case.stage,
        "outcome": outcome,
        "torn": torn,
        "duplicates": {k: v for k, v in counts.items() if v > 1},
        "extra_vms": [v for v in sim.vmids() if v not in (9000, fm.VMID)],
        "fired": sum(int(f.get("fired", 0)) for f in faults),
    }


def _param(case: fm.Case) -> t.Any:
    return pytest.param(case, id=fm.case_id(case))


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_fault(sim: rs.Simulator, tmp_path: Path, case: fm.Case) -> None:
    record = observe(sim, case, tmp_path)
    rs.write_result("faults", record)
    assert record["fired"] >= 1, record  # the fault really happened
    assert record["torn"] == 0 and record["extra_vms"] == [], record
    if not RECORD:
        assert record["outcome"] == fm.EXPECTED[fm.case_id(case)], record
    assert record["duplicates"] == {}, record
    assert record["resent"] == 0, record  # an unknown submission is never sent again


def test_fault_table_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- fault-table:begin -->\n(.*?)\n<!-- fault-table:end -->", text, re.S)
    assert match, "docs/reliability.md has no generated fault table"
    assert match.group(1).strip() == fm.render_table(fm.EXPECTED).strip()
    assert set(fm.EXPECTED) == {fm.case_id(c) for c in fm.cases()}


def test_resent_submissions_are_counted_from_the_request_log() -> None:
    def put(status: object, **params: object) -> dict[str, object]:
        return {"method": "PUT", "path": "/nodes/pve-test/qemu/%d/config" % fm.VMID, "status": status, "params": params}

    # another stage's request to the same path after a lost reply is not a resend; a copy with the same parameters is
    assert rs.resent_submissions([put("dropped", cores=2), put(200, sshkeys="k")], fm.VMID) == 0
    assert rs.resent_submissions([put("request_dropped", cores=2), put(200, cores=2)], fm.VMID) == 1
    assert rs.resent_submissions([put(503, cores=2), put(200, cores=2)], fm.VMID) == 1
    # after a definite refusal the stage may dispatch again; a third accepted config PUT is one too many
    assert rs.resent_submissions([put(500, cores=2), put(200, cores=2), put(200, sshkeys="k")], fm.VMID) == 0
    assert rs.resent_submissions([put(200, cores=2), put(200, cores=2), put(200, sshkeys="k")], fm.VMID) == 1
