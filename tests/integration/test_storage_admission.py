# SPDX-License-Identifier: GPL-3.0-or-later
"""Admission control per storage against the simulator's storage lock (docs/concurrency.md).

20 operations on one storage run their clone and disk stages at once, each in its own process (as
Ansible forks or separate ``ansible-playbook`` runs would), sharing one journal directory. With
``storage_concurrency: 3`` the simulator never sees more than 3 allocating requests in flight on
``local-lvm`` and no stage fails, and the holders read their clone logs to hand their slots to the
waiters early; with admission control off the same load makes Proxmox's storage lock time out,
which shows the scenario really contends. One operation alone reads no task log at all.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
VMIDS = list(range(201, 221))
LOCK_ERROR = "can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout"

# One operation's clone, resources and disk stages, re-run while it reports done=false (as the role does); waits for
# the GO file first so that all 20 processes submit at the same moment.
WORKER = r"""
import json, os, sys, time
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import run_stage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage
params = json.loads(open(sys.argv[1]).read())
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
report = {"vmid": params["vmid"], "progress": [], "admission": []}
for kind, logic in (("clone", CloneStage), ("resources", ResourcesStage), ("disk", DiskStage)):
    try:
        while True:
            result = run_stage(params, logic(), check_mode=False, diff=False)
            if "admission" in result:
                report["admission"].append(result["admission"])
            if result["done"]:
                break
            report["progress"].append(result.get("progress"))
    except VmanywareError as err:
        report[kind] = {"error": err.code, "details": err.details}
        break
    report[kind] = {"status": result["stage"]["status"]}
print(json.dumps(report))
"""


def run_twenty(
    pvesim: t.Any, tmp_path: Path, concurrency: int, vmids: t.Sequence[int] = tuple(VMIDS), wait_budget: float = 1.0
) -> list[dict[str, t.Any]]:
    conn = pvesim.connection
    base = {
        "api_host": "127.0.0.1",
        "api_port": conn["port"],
        "api_token_id": conn["tokens"]["full"]["id"],
        "api_token_secret": conn["tokens"]["full"]["secret"],
        "ca_path": conn["ca_file"],
        "validate_certs": True,
        "journal_dir": str(tmp_path / "journal"),
        "api_timeout": 30,
        "lock_wait": 10.0,
        "wait_budget": wait_budget,
        "provisioning_enabled": True,  # stages re-read the gate before every write
        "storage_concurrency": concurrency,
    }
    settings = connection_settings(base)
    scope = provider_scope_id(settings, certificate_fingerprint(settings))
    store = open_store(base["journal_dir"])
    definition = (REPO / "examples/definition.yml").read_text(encoding="utf-8")
    go = tmp_path / "go"
    procs = []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    for vmid in vmids:
        planned = build_plan(catalog_path=REPO / "examples/catalog.yml", definition=definition, target_vmid=vmid)
        operation = create_operation(
            store,
            planned=planned,
            provider_scope_id=scope,
            confirmation=expected_confirmation(planned.plan, scope),
            idempotency_key=None,
            environ=ON,
        )
        params_file = tmp_path / ("params-%d.json" % vmid)
        params_file.write_text(
            json.dumps(dict(base, operation_id=operation["operation_id"], vmid=vmid)), encoding="utf-8"
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, str(params_file), str(go)],
                env=env,  # pylint: disable=consider-using-with
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    time.sleep(1.0)  # let every worker finish its imports
    go.write_text("", encoding="utf-8")
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


@pytest.fixture()
def contended(pvesim: t.Any) -> t.Any:
    # 1 s per lvcreate (the LVM-thin default): 20 two-volume clones at once need 40 s of lock, a waiter gives up after 10 s.
    # x5, so that the submissions of 20 processes on a loaded machine still arrive within a few simulated seconds
    pvesim.set_speed(5)
    pvesim.set_storage("local-lvm", total=4 << 40)  # the demo's 200 GiB hold only nine 20 GiB VMs
    pvesim.set_timings(tasks={"storage_alloc": 1, "storage_resize": 1, "qmclone_full": 4, "resize": 0.5})
    return pvesim


def test_twenty_operations_on_one_storage_with_k3(contended: t.Any, tmp_path: Path) -> None:
    reports = run_twenty(contended, tmp_path, 3)
    done = {"status": "completed"}
    assert [(r["vmid"], r["clone"], r.get("resources"), r.get("disk")) for r in reports] == [
        (vmid, done, done, done) for vmid in VMIDS
    ]
    stats = contended.storage_locks()["storages"]["local-lvm"]
    assert stats["timeouts"] == 0 and 2 <= stats["maxInflight"] <= 3, {k: v for k, v in stats.items() if k != "history"}
    assert stats["maxWait"] < 10
    # each clone and each resize was sent exactly once, and each held a slot with an index below 3
    sent = collections.Counter(
        (e["method"], e["path"].rsplit("/", 1)[-1]) for e in contended.requests() if e["method"] != "GET"
    )
    assert sent[("POST", "clone")] == 20 and sent[("PUT", "resize")] == 20
    held = [a for r in reports for a in r["admission"]]
    assert len(held) == 40 and {a["slot"] for a in held} <= {0, 1, 2} and {a["storage"] for a in held} == {"local-lvm"}
    # the waiting showed as progress (nothing sent yet), with the seconds waited
    waiting = [p for r in reports for p in r["progress"] if p and p.get("storage") == "local-lvm"]
    assert waiting and all(p["storageConcurrency"] == 3 and p["waitedSeconds"] >= 1.0 for p in waiting)
    for vmid in VMIDS:
        config = contended.vm(vmid)["config"]
        assert "lock" not in config and config["scsi0"].endswith("size=20G")
    # runs waited for a slot, so the holders read their clone logs while the clones ran, to hand the slot on at the
    # allocations rather than at the clone's end (when exactly: tests/unit/plugins/module_utils/_api/test_admission.py)
    ended = {task["upid"]: task["ended"] for task in contended.tasks() if task["type"] == "qmclone"}
    during = [
        e
        for e in contended.requests("GET", r"/tasks/[^/]+/log$")
        if e["path"].split("/")[4] in ended and e["time"] < ended[e["path"].split("/")[4]]
    ]
    assert during, "no clone log was read while the clone ran, although runs waited for a slot"
    assert contended.schema_violations() == []


def test_one_operation_alone_reads_no_task_log(contended: t.Any, tmp_path: Path) -> None:
    # nobody waits for a slot: the clone and the resize keep theirs until the task wait sees the end (a budget that
    # outlasts both tasks, so that the run does not return while they may still allocate)
    (report,) = run_twenty(contended, tmp_path, 3, vmids=VMIDS[:1], wait_budget=30.0)
    assert report["clone"] == report["disk"] == {"status": "completed"} and len(report["admission"]) == 2
    assert contended.requests("GET", r"/tasks/[^/]+/log$") == []
    assert len(contended.requests("GET", r"/tasks/[^/]+/status$")) >= 2 and contended.schema_violations() == []


def test_without_admission_the_same_load_hits_the_storage_lock(contended: t.Any, tmp_path: Path) -> None:
    reports = run_twenty(contended, tmp_path, 0)
    failed = [r for r in reports if r["clone"].get("error")]
    assert failed and contended.storage_locks()["storages"]["local-lvm"]["timeouts"] > 0
    for report in failed:
        # a definite failure: the task ended with Proxmox's lock timeout, and reads show no VM was left behind
        assert report["clone"]["error"] == "task_failed" and report["clone"]["details"]["stage"] == "clone"
        assert any(LOCK_ERROR in line for line in report["clone"]["details"]["log_tail"]), report
        with pytest.raises(RuntimeError):
            contended.vm(report["vmid"])
