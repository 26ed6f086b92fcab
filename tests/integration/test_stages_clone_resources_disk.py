# SPDX-License-Identifier: GPL-3.0-or-later
"""Operations and the clone, resources and disk stages against the simulator.

Stages run in-process through ``_stage_module.run_stage`` (the module's whole logic); one real
``ansible-playbook`` run proves the modules work as modules. Every test checks from the simulator's
request log that each mutating request took effect at most once per operation and that every
request validated against the PVE schema.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
    instance_tag,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.common import binding_description
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GIB = 1024**3
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
CLONE = r"/qemu/9000/clone$"
CONFIG = r"/qemu/201/config$"
RESIZE = r"/qemu/201/resize$"


class Env:
    """One operation on VM 201 with its journal and the stage parameters."""

    def __init__(self, pvesim: t.Any, tmp_path: Path, disk_gib: int = 20) -> None:
        conn = pvesim.connection
        self.pvesim = pvesim
        self.params: dict[str, t.Any] = {
            "api_host": "127.0.0.1",
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
            "validate_certs": True,
            "journal_dir": str(tmp_path / "journal"),
            "api_timeout": 10,
            "lock_wait": 10.0,
            "provisioning_enabled": True,
        }
        self.settings = connection_settings(self.params)
        self.scope = provider_scope_id(self.settings, certificate_fingerprint(self.settings))
        self.store = open_store(self.params["journal_dir"])
        self.planned = plan(disk_gib)
        result = create_operation(
            self.store,
            planned=self.planned,
            provider_scope_id=self.scope,
            confirmation=expected_confirmation(self.planned.plan, self.scope),
            idempotency_key=None,
            environ=ON,
        )
        self.operation_id = result["operation_id"]
        self.params["operation_id"] = self.operation_id

    def run(self, logic: t.Any, check_mode: bool = False, diff: bool = False) -> dict[str, t.Any]:
        result = run_stage(self.params, logic, check_mode=check_mode, diff=diff)
        text = json.dumps(result)
        assert self.params["api_token_secret"] not in text
        return result

    def stage(self, kind: str) -> dict[str, t.Any]:
        return t.cast(dict, self.store.stage(self.store.load(self.operation_id), kind))


def plan(disk_gib: int = 20, vmid: int = 201) -> t.Any:
    definition = (
        (REPO / "examples/definition.yml").read_text(encoding="utf-8").replace("diskGiB: 20", "diskGiB: %d" % disk_gib)
    )
    return build_plan(catalog_path=REPO / "examples/catalog.yml", definition=definition, target_vmid=vmid)


def effective_mutations(pvesim: t.Any) -> list[tuple[str, str]]:
    """Mutating requests that reached a handler and could have changed something (2xx or reply dropped)."""
    return [
        (e["method"], e["path"])
        for e in pvesim.requests()
        if e["method"] != "GET" and (e["status"] == "dropped" or e["status"] < 300)
    ]


def assert_clean(pvesim: t.Any) -> None:
    counts = collections.Counter(effective_mutations(pvesim))
    assert all(count == 1 for count in counts.values()), counts
    assert pvesim.schema_violations() == []


@pytest.fixture()
def env(pvesim: t.Any, tmp_path: Path) -> Env:
    return Env(pvesim, tmp_path)


# -- happy paths ------------------------------------------------------------------------------------


@pytest.mark.parametrize("disk_gib", [20, 8], ids=["with-disk", "without-disk"])
def test_happy_path(pvesim: t.Any, tmp_path: Path, disk_gib: int) -> None:
    env = Env(pvesim, tmp_path, disk_gib)
    kinds = [item["kind"] for item in env.store.load(env.operation_id)["stages"]]
    assert ("disk" in kinds) is (disk_gib == 20)
    logics = [CloneStage(), ResourcesStage()] + ([DiskStage()] if disk_gib == 20 else [])
    preview = env.run(CloneStage(), check_mode=True, diff=True)
    assert preview["changed"] and not preview["done"] and preview["requests"][0]["params"]["full"] == 1
    description = binding_description(env.store.load(env.operation_id))
    assert preview["requests"][0][
        "cli"
    ] == "qm clone 9000 201 --name kernel-lab --full 1 --storage local-lvm --description " + shlex.quote(
        description
    )  # the documented syntax: qm clone <vmid> <newid> [OPTIONS]
    assert preview["diff"]["before"]["exists"] is False and effective_mutations(pvesim) == []
    later = env.run(ResourcesStage(), check_mode=True)
    assert later["preview"] == "earlier stages pending" and later["requests"][0]["basis"] == "plan"
    for logic in logics:
        result = env.run(logic, diff=True)
        assert result["changed"] and result["done"] and result["stage"]["status"] == "completed", result
        # Compact: no evidence (the journal has it), and no fact unless asked.
        assert "evidence" not in result["stage"] and "ansible_facts" not in result
    vm = pvesim.vm(201)
    config = vm["config"]
    assert config["description"] == binding_description(env.store.load(env.operation_id))
    assert config["tags"] == instance_tag(env.operation_id) and config["cores"] == "2" and config["memory"] == "2048"
    assert config["scsi0"].startswith("local-lvm:vm-201-disk-0,") and config["scsi0"].endswith("size=%dG" % disk_gib)
    assert config["name"] == "kernel-lab" and "lock" not in config
    clone = env.stage("clone")["evidence"]
    assert (
        clone["volid"] == "local-lvm:vm-201-disk-0"
        and clone["macaddr"].startswith("BC:24:11:")
        and clone["diskSizeBytes"] == 8 * GIB
    )
    expected = [("POST", "/nodes/pve-test/qemu/9000/clone"), ("PUT", "/nodes/pve-test/qemu/201/config")]
    if disk_gib == 20:
        expected.append(("PUT", "/nodes/pve-test/qemu/201/resize"))
        assert env.stage("disk")["evidence"]["diskSizeBytes"] == 20 * GIB
    assert effective_mutations(pvesim) == expected
    clone_post = pvesim.requests(method="POST", path_regex=CLONE)[0]["params"]
    assert str(clone_post["full"]) == "1" and str(clone_post["newid"]) == "201" and "target" not in clone_post
    assert_clean(pvesim)

    # re-run after success: nothing mutating, and each stage reports changed=false
    pvesim.clear_requests()
    for logic in logics:
        again = env.run(logic)
        assert again["changed"] is False and again["done"] is True
    assert {e["method"] for e in pvesim.requests()} <= {"GET"}  # completed stages answer from the journal


def test_check_and_diff_mode_of_resources(env: Env) -> None:
    env.run(CloneStage())
    preview = env.run(ResourcesStage(), check_mode=True, diff=True)
    assert preview["requests"][0]["params"]["tags"] == instance_tag(env.operation_id)
    digest = preview["requests"][0]["params"]["digest"]
    assert (
        preview["requests"][0]["cli"]
        == f"qm set 201 --cores 2 --memory 2048 --tags {instance_tag(env.operation_id)} --digest {digest}"
    )
    assert (
        preview["diff"]["after"]["tags"] == instance_tag(env.operation_id) and preview["diff"]["before"]["tags"] is None
    )
    assert env.stage("resources")["status"] == "pending"
    assert effective_mutations(env.pvesim) == [("POST", "/nodes/pve-test/qemu/9000/clone")]


# -- crash and lost replies ---------------------------------------------------------------------------


def test_crash_after_dispatch_before_send_is_never_sent(env: Env) -> None:
    # The process stopped after journaling the dispatch: whether the POST left is unknown, so it is never sent.
    env.store.record_dispatch(env.operation_id, "clone", {"method": "POST", "path": "/nodes/pve-test/qemu/9000/clone"})
    env.params["wait_budget"] = 1.0
    for _run in range(2):
        with pytest.raises(VmanywareError) as info:
            env.run(CloneStage())
        assert info.value.code == "outcome_uncertain"
    assert env.stage("clone")["status"] == "uncertain" and env.stage("clone")["attempts"] == 1
    assert [e for e in env.pvesim.requests() if e["method"] != "GET"] == []
    assert_clean(env.pvesim)


@pytest.mark.parametrize("target", ["clone", "config", "resize"])
def test_reply_lost_after_commit_is_resolved_by_reads(env: Env, target: str) -> None:
    pvesim = env.pvesim
    method, path = {"clone": ("POST", CLONE), "config": ("PUT", CONFIG), "resize": ("PUT", RESIZE)}[target]
    pvesim.add_fault(method=method, path=path, action="drop_reply", occurrence=1)
    for logic in (CloneStage(), ResourcesStage(), DiskStage()):
        result = env.run(logic)
        assert result["done"] and result["stage"]["status"] == "completed", result
    statuses = [e["status"] for e in pvesim.requests(method=method, path_regex=path)]
    assert statuses == ["dropped"]
    assert pvesim.vm(201)["config"]["scsi0"].endswith("size=20G")
    if target == "clone":
        assert env.stage("clone")["upid"] and ":qmclone:9000:" in env.stage("clone")["upid"]
    assert_clean(pvesim)


# -- task outcomes --------------------------------------------------------------------------------------


def test_clone_task_failing_fails_the_stage(env: Env) -> None:
    env.pvesim.add_fault(
        method="POST", path=CLONE, action="task_error", message="clone failed: simulated", occurrence=1
    )
    with pytest.raises(VmanywareError) as info:
        env.run(CloneStage())
    assert info.value.code == "task_failed" and info.value.details["log_tail"]
    document = env.store.load(env.operation_id)
    assert document["status"] == "failed" and env.stage("clone")["status"] == "failed"
    with pytest.raises(VmanywareError) as again:
        env.run(CloneStage())
    assert again.value.code == "stage_failed"
    assert_clean(env.pvesim)


def test_resize_disk_full_fails_and_keeps_the_vm(env: Env) -> None:
    env.run(CloneStage())
    env.run(ResourcesStage())
    env.pvesim.add_fault(method="PUT", path=RESIZE, action="disk_full")
    with pytest.raises(VmanywareError) as info:
        env.run(DiskStage())
    assert info.value.code == "task_failed"
    assert env.stage("disk")["status"] == "failed"
    assert env.pvesim.vm(201)["config"]["scsi0"].endswith("size=8G")  # the VM is kept for the operator
    assert_clean(env.pvesim)


def test_task_warnings_complete_with_a_warning(env: Env) -> None:
    env.pvesim.add_fault(method="POST", path=CLONE, action="task_warnings", count=2, occurrence=1)
    result = env.run(CloneStage())
    assert result["done"] and result["warnings"] and env.stage("clone")["evidence"]["taskWarnings"] == 2
    assert result["task"]["status"] == "warnings"
    assert_clean(env.pvesim)


@pytest.mark.parametrize(
    "action,method,path", [("lock_timeout", "POST", CLONE), ("vm_locked", "PUT", CONFIG), ("vm_locked", "PUT", RESIZE)]
)
def test_lock_contention_is_waited_out(env: Env, action: str, method: str, path: str) -> None:
    env.pvesim.add_fault(method=method, path=path, action=action, occurrence=1)
    for logic in (CloneStage(), ResourcesStage(), DiskStage()):
        assert env.run(logic)["done"]
    assert [e["status"] for e in env.pvesim.requests(method=method, path_regex=path)] == [500, 200]
    assert_clean(env.pvesim)


# -- conflicts ------------------------------------------------------------------------------------------------


def test_digest_conflict_sends_nothing(env: Env) -> None:
    env.run(CloneStage())
    env.pvesim.set_vm_config(201, set={"onboot": "1"})
    env.pvesim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        env.run(ResourcesStage())
    assert info.value.code == "conflict" and env.stage("resources")["status"] == "pending"
    assert {e["method"] for e in env.pvesim.requests()} == {"GET"}
    assert_clean(env.pvesim)


def test_vmid_taken_between_preflight_and_clone(env: Env) -> None:
    with ProxmoxClient(env.settings) as client:
        upid = client.post(
            "/nodes/pve-test/qemu/9000/clone",
            newid=201,
            full=True,
            storage="local-lvm",
            description="made by someone else",
        )
        # PVE writes the clone's config (with the description) only after allocating its volumes
        while client.get("/nodes/pve-test/tasks/%s/status" % upid)["status"] == "running":
            time.sleep(0.02)
    env.pvesim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        env.run(CloneStage())
    assert info.value.code == "vmid_taken" and env.stage("clone")["status"] == "pending"
    assert {e["method"] for e in env.pvesim.requests()} == {"GET"}
    assert env.pvesim.vm(201)["config"]["description"] == "made by someone else"
    assert_clean(env.pvesim)


def test_two_operations_on_one_vmid(pvesim: t.Any, tmp_path: Path) -> None:
    env = Env(pvesim, tmp_path)
    with pytest.raises(VmanywareError) as info:
        create_operation(
            env.store,
            planned=plan(24),
            provider_scope_id=env.scope,
            confirmation=expected_confirmation(plan(24).plan, env.scope),
            idempotency_key=None,
            environ=ON,
        )
    assert info.value.code == "conflicting_operation" and info.value.details["operationId"] == env.operation_id
    # a thread race on a fresh journal: exactly one wins
    journal = str(tmp_path / "race")
    results: list[t.Any] = []
    barrier = threading.Barrier(3)

    def worker(disk: int) -> None:
        planned = plan(disk)
        barrier.wait()
        try:
            results.append(
                create_operation(
                    open_store(journal),
                    planned=planned,
                    provider_scope_id=env.scope,
                    confirmation=expected_confirmation(planned.plan, env.scope),
                    idempotency_key=None,
                    environ=ON,
                )
            )
        except VmanywareError as err:
            results.append(err.code)

    threads = [threading.Thread(target=worker, args=(disk,)) for disk in (20, 21, 22)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(isinstance(r, dict) for r in results) == 1 and results.count("conflicting_operation") == 2
    assert pvesim.requests(method="POST") == [] and pvesim.schema_violations() == []


def test_confirmation_mismatch_is_plan_changed(pvesim: t.Any, tmp_path: Path) -> None:
    env = Env(pvesim, tmp_path)
    other = plan(24, vmid=202)
    with pytest.raises(VmanywareError) as info:
        create_operation(
            env.store,
            planned=other,
            provider_scope_id=env.scope,
            confirmation=expected_confirmation(plan(20, vmid=202).plan, env.scope),
            idempotency_key=None,
            environ=ON,
        )
    assert info.value.code == "plan_changed" and info.value.details["fields"] == ["definitionHash", "planHash"]
    assert info.value.details["expected_confirmation"] == expected_confirmation(other.plan, env.scope)
    # A stage refuses to act for another provider scope (apiUrl + certificate + user): "localhost" is another apiUrl.
    params = dict(env.params, api_host="localhost")
    with pytest.raises(VmanywareError) as stage_info:
        run_stage(params, CloneStage(), check_mode=False, diff=False)
    assert stage_info.value.code == "plan_changed"
    assert effective_mutations(pvesim) == []
    assert pvesim.schema_violations() == []


# -- one real ansible-playbook run ------------------------------------------------------------------------------


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/vmanyware.proxmox.proxmox:
      journal_dir: "{journal}"
  tasks:
    - name: Ask for the confirmation block
      vmanyware.proxmox.vmanyware_operation:
        catalog_path: "{repo}/examples/catalog.yml"
        definition_path: "{repo}/examples/definition.yml"
        target_vmid: 201
      register: attempt
      failed_when: attempt.error_code | default('') != 'confirmation_required'

    - name: Create the operation
      vmanyware.proxmox.vmanyware_operation:
        catalog_path: "{repo}/examples/catalog.yml"
        definition_path: "{repo}/examples/definition.yml"
        target_vmid: 201
        confirmation: "{{{{ attempt.error_details.expected_confirmation }}}}"
      register: operation

    - name: Clone
      vmanyware.proxmox.vmanyware_clone:
        operation_id: "{{{{ operation.operation_id }}}}"

    - name: Resources
      vmanyware.proxmox.vmanyware_resources:
        operation_id: "{{{{ operation.operation_id }}}}"
      diff: true

    - name: Disk
      vmanyware.proxmox.vmanyware_disk:
        operation_id: "{{{{ operation.operation_id }}}}"

    - name: Disk again (idempotent)
      vmanyware.proxmox.vmanyware_disk:
        operation_id: "{{{{ operation.operation_id }}}}"
      register: again
      failed_when: again.changed

    - name: Info
      vmanyware.proxmox.vmanyware_operation_info:
        operation_id: "{{{{ operation.operation_id }}}}"
      register: info

    - name: Save the view
      ansible.builtin.copy:
        content: "{{{{ info.operation | to_json }}}}"
        dest: "{out}"
"""


def test_ansible_playbook_operation_to_info(pvesim: t.Any, tmp_path: Path) -> None:
    conn = pvesim.connection
    out = tmp_path / "info.json"
    playbook = tmp_path / "site.yml"
    playbook.write_text(PLAYBOOK.format(journal=tmp_path / "journal", repo=REPO, out=out), encoding="utf-8")
    env = dict(
        os.environ,
        ANSIBLE_NOCOLOR="1",
        VMANYWARE_PROVISIONING_ENABLED="true",
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
    )
    env.pop("VMANYWARE_SNAPSHOTS_ENABLED", None)
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert conn["tokens"]["full"]["secret"] not in completed.stdout + completed.stderr
    view = json.loads(out.read_text(encoding="utf-8"))
    assert [(s["kind"], s["status"]) for s in view["stages"][:3]] == [
        ("clone", "completed"),
        ("resources", "completed"),
        ("disk", "completed"),
    ]
    assert view["instance"]["vmid"] == 201 and view["instance"]["tag"] == instance_tag(view["operation_id"])
    assert effective_mutations(pvesim) == [
        ("POST", "/nodes/pve-test/qemu/9000/clone"),
        ("PUT", "/nodes/pve-test/qemu/201/config"),
        ("PUT", "/nodes/pve-test/qemu/201/resize"),
    ]
    assert_clean(pvesim)
