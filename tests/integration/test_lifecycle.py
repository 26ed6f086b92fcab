# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The operation lifecycle against the simulator: abandon, guarded cleanup, listing.

The cleanup runs in-process through ``_lifecycle.run_cleanup`` (the module's whole logic); one real
``ansible-playbook`` run proves the modules and the status role work as such. Every test checks the
simulator's request log: which mutating requests took effect, and that every request validated
against the PVE schema.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.cleanup import run_cleanup
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    abandon_operation,
    create_operation,
    expected_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import wait_task

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_stages_clone_resources_disk import assert_clean  # noqa: E402  pylint: disable=wrong-import-position
from test_stages_clone_resources_disk import effective_mutations as mutations  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
GATE = {"VMANYWARE_LIFECYCLE_ENABLED": "true"}
VM = "/nodes/pve-test/qemu/201"
DELETE = ("DELETE", VM)


class Env:
    """One operation on VM 201 (20 GiB disk), its journal and the module parameters."""

    def __init__(self, pvesim: t.Any, tmp_path: Path) -> None:
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
            "provisioning_enabled": True,  # stages re-read the gate before every write
        }
        self.settings = connection_settings(self.params)
        self.scope = provider_scope_id(self.settings, certificate_fingerprint(self.settings))
        self.store = open_store(self.params["journal_dir"])
        self.operation_id = self.create()

    def create(self, key: str | None = None, vmid: int = 201) -> str:
        planned = build_plan(
            catalog_path=REPO / "examples/catalog.yml",
            definition_path=REPO / "examples/definition.yml",
            target_vmid=vmid,
        )
        result = create_operation(
            self.store,
            planned=planned,
            provider_scope_id=self.scope,
            confirmation=expected_confirmation(planned.plan, self.scope),
            idempotency_key=key,
            environ=ON,
        )
        return t.cast(str, result["operation_id"])

    def stage(self, logic: t.Any, operation_id: str | None = None) -> dict[str, t.Any]:
        return run_stage(
            dict(self.params, operation_id=operation_id or self.operation_id), logic, check_mode=False, diff=False
        )

    def fail_at_disk(self) -> None:
        """Clone and resources complete, the disk grow fails: a failed operation whose VM exists."""
        self.stage(CloneStage())
        self.stage(ResourcesStage())
        self.pvesim.add_fault(method="PUT", path=r"/qemu/201/resize$", action="disk_full", occurrence=1)
        with pytest.raises(VmanywareError):
            self.stage(DiskStage())
        assert self.store.load(self.operation_id)["status"] == "failed"
        self.pvesim.clear_requests()

    def cleanup(
        self, check_mode: bool = False, environ: t.Mapping[str, str] | None = None, **options: t.Any
    ) -> dict[str, t.Any]:
        params = dict(
            self.params,
            operation_id=self.operation_id,
            stop=False,
            allow_completed=False,
            lifecycle_enabled=None,
            wait_budget=None,
            timeout=None,
        )
        params.update(options)
        result = run_cleanup(params, check_mode=check_mode, environ=GATE if environ is None else environ)
        assert self.params["api_token_secret"] not in json.dumps(result)
        return result

    def record_interrupted_destroy(self, path: str) -> None:
        """The journal of a cleanup run that recorded its DELETE of ``path`` and then died (the guest was stopped)."""
        self.store.begin_cleanup(self.operation_id)
        track = self.store.cleanup_track()
        track.record_dispatch(self.operation_id, "stop", {"noop": True})
        track.record_completed(self.operation_id, "stop", {"powerState": "stopped"})
        track.record_dispatch(self.operation_id, "destroy", {"method": "DELETE", "path": path})

    def vm_exists(self) -> bool:
        return any(vm["vmid"] == 201 for vm in self.client_get("/nodes/pve-test/qemu"))

    def client_get(self, path: str) -> t.Any:
        with ProxmoxClient(self.settings) as client:
            return client.get(path)


@pytest.fixture()
def env(pvesim: t.Any, tmp_path: Path) -> Env:
    return Env(pvesim, tmp_path)


def test_abandon_frees_the_vmid_for_a_new_operation(env: Env) -> None:
    env.pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="task_error", occurrence=1)
    with pytest.raises(VmanywareError):
        env.stage(CloneStage())
    with pytest.raises(VmanywareError) as held:
        env.create(key="retry")
    assert held.value.code == "conflicting_operation"
    env.pvesim.clear_requests()
    preview = abandon_operation(env.store, env.operation_id, "clone failed; retry", check_mode=True)
    assert preview["changed"] and env.store.load(env.operation_id)["release"] is None
    with pytest.raises(VmanywareError) as missing:
        abandon_operation(env.store, env.operation_id, " ")
    assert missing.value.code == "invalid_option"
    result = abandon_operation(env.store, env.operation_id, "clone failed; retry")
    view = result["operation"]
    assert result["changed"] and view["status"] == "abandoned" and view["provisioning_status"] == "failed"
    assert view["abandonment"]["reason"] == "clone failed; retry" and view["release"]["reason"] == "abandoned"
    assert abandon_operation(env.store, env.operation_id, "again")["changed"] is False
    assert env.pvesim.requests() == []  # abandoning sends nothing
    with pytest.raises(VmanywareError) as refused:
        env.stage(CloneStage())
    assert refused.value.code == "operation_abandoned"
    fresh = env.create(key="retry")
    assert env.stage(CloneStage(), fresh)["done"]
    assert env.store.target_holder(env.scope, 201) == fresh


def test_cleanup_needs_the_gate_then_removes_the_failed_operations_vm(env: Env) -> None:
    env.fail_at_disk()
    for environ, option in (({}, None), ({"VMANYWARE_LIFECYCLE_ENABLED": "false"}, True), ({}, False)):
        with pytest.raises(VmanywareError) as info:
            env.cleanup(environ=environ, lifecycle_enabled=option)
        assert info.value.code == "lifecycle_disabled"
    with pytest.raises(VmanywareError) as bad:
        env.cleanup(environ={"VMANYWARE_LIFECYCLE_ENABLED": "yes"}, lifecycle_enabled=True)
    assert bad.value.code == "configuration_error"
    assert env.pvesim.requests() == []  # the gate is read before any connection
    preview = env.cleanup(check_mode=True, environ={}, lifecycle_enabled=True)
    assert preview["requests"] == [
        {
            "method": "DELETE",
            "path": VM,
            "params": {"purge": 1, "destroy-unreferenced-disks": 1},
            "cli": "qm destroy 201 --purge 1 --destroy-unreferenced-disks 1",
        }
    ]
    assert preview["removed"] == {
        "vmid": 201,
        "volumes": ["local-lvm:vm-201-cloudinit", "local-lvm:vm-201-disk-0"],
        "snapshots": [],
    }
    assert mutations(env.pvesim) == [] and env.store.load(env.operation_id).get("lifecycle") is None
    result = env.cleanup()
    assert result["changed"] and result["done"] and result["requests"] == preview["requests"]
    assert result["removed"] == preview["removed"] and result["removed"]["vmid"] == 201
    assert not env.vm_exists()
    assert mutations(env.pvesim) == [DELETE]
    delete = env.pvesim.requests(method="DELETE")[0]["params"]
    assert str(delete["purge"]) == "1" and str(delete["destroy-unreferenced-disks"]) == "1"
    view = result["operation"]
    assert view["status"] == "cleaned" and view["released"] and view["release"]["reason"] == "cleaned"
    assert [step["status"] for step in view["cleanup"]["steps"]] == ["completed", "completed"]
    assert ":qmdestroy:201:" in view["cleanup"]["steps"][1]["upid"]
    assert env.store.target_holder(env.scope, 201) is None
    again = env.cleanup()
    assert again["changed"] is False and again["removed"] == result["removed"]
    with pytest.raises(VmanywareError) as ended:
        env.stage(DiskStage())
    assert ended.value.code == "operation_cleaned"
    assert_clean(env.pvesim)


# A config change an operator might make, and the guard that then refuses the cleanup (VMs here, containers in test_container_cleanup).
GUARDED_CHANGES = [
    ({"description": "vmanyware operation edited by hand"}, "cleanup_binding_mismatch"),
    ({"protection": "1"}, "cleanup_protected"),
    ({"template": "1"}, "cleanup_template"),
]


@pytest.mark.parametrize("change,code", GUARDED_CHANGES)
def test_guards_refuse_with_the_vm_untouched(env: Env, change: dict[str, str], code: str) -> None:
    env.fail_at_disk()
    env.pvesim.set_vm_config(201, set=change)
    before = env.pvesim.vm(201)["config"]
    for check_mode in (True, False):
        with pytest.raises(VmanywareError) as info:
            env.cleanup(check_mode=check_mode, stop=True)
        assert info.value.code == code
    assert mutations(env.pvesim) == [] and env.pvesim.vm(201)["config"] == before
    assert env.store.load(env.operation_id).get("lifecycle") is None  # nothing recorded either
    assert env.store.target_holder(env.scope, 201) == env.operation_id


def test_open_and_completed_operations_are_not_eligible(env: Env) -> None:
    env.stage(CloneStage())
    with pytest.raises(VmanywareError) as info:
        env.cleanup()
    assert info.value.code == "cleanup_not_eligible" and info.value.details["status"] == "open"
    assert env.vm_exists()


def test_lost_delete_reply_is_resolved_by_reads_and_never_resent(env: Env) -> None:
    env.fail_at_disk()
    with ProxmoxClient(env.settings) as client:  # a snapshot someone took: removed with the VM, and listed
        assert wait_task(
            client, client.request("POST", VM + "/snapshot", {"snapname": "inspect"})["data"], timeout=30
        ).succeeded
    env.pvesim.add_fault(method="DELETE", path=r"/qemu/201$", action="drop_reply", occurrence=1)
    result = env.cleanup()
    assert result["done"] and result["operation"]["status"] == "cleaned" and not env.vm_exists()
    assert (
        result["removed"]["snapshots"] == ["inspect"] and result["operation"]["cleanup"]["removed"] == result["removed"]
    )
    assert [e["status"] for e in env.pvesim.requests(method="DELETE")] == ["dropped"]
    assert_clean(env.pvesim)


def test_unresolvable_dispatch_stays_uncertain_and_is_never_sent(env: Env) -> None:
    env.fail_at_disk()
    env.record_interrupted_destroy(VM)  # reads see the VM and no qmdestroy task
    for _attempt in range(2):
        with pytest.raises(VmanywareError) as info:
            env.cleanup()
        assert info.value.code == "outcome_uncertain"
    assert env.vm_exists() and env.pvesim.requests(method="DELETE") == []
    assert env.store.load(env.operation_id)["lifecycle"]["cleanup"]["status"] == "uncertain"
    assert env.store.target_holder(env.scope, 201) == env.operation_id


def test_running_vm_is_refused_without_stop(env: Env) -> None:
    env.fail_at_disk()
    with ProxmoxClient(env.settings) as client:
        upid = client.request("POST", VM + "/status/start", {})["data"]
        assert wait_task(client, upid, timeout=30).succeeded
    env.pvesim.clear_requests()
    for check_mode in (True, False):
        with pytest.raises(VmanywareError) as info:
            env.cleanup(check_mode=check_mode)
        assert info.value.code == "cleanup_running"
    assert mutations(env.pvesim) == [] and env.vm_exists()
    preview = env.cleanup(check_mode=True, stop=True)
    assert [(item["method"], item["path"]) for item in preview["requests"]] == [("POST", VM + "/status/stop"), DELETE]
    result = env.cleanup(stop=True)
    assert result["done"] and not env.vm_exists()
    assert mutations(env.pvesim) == [("POST", VM + "/status/stop"), DELETE]
    assert (
        result["operation"]["cleanup"]["steps"][0]["upid"]
        and ":qmstop:201:" in result["operation"]["cleanup"]["steps"][0]["upid"]
    )
    assert_clean(env.pvesim)


def test_missing_privilege_refuses_before_anything_is_sent(env: Env) -> None:
    env.fail_at_disk()
    token = env.pvesim.connection["tokens"]["full"]["id"]
    env.pvesim.set_token(token, privileges={"/": ["VM.Audit", "Sys.Audit"]})
    with pytest.raises(VmanywareError) as info:
        env.cleanup()
    assert info.value.code == "permission_denied" and info.value.details["missing"] == ["VM.Allocate"]
    assert mutations(env.pvesim) == [] and env.vm_exists()


def test_cleanup_without_a_vm_sends_nothing_and_releases(env: Env) -> None:
    env.pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="task_error", occurrence=1)
    with pytest.raises(VmanywareError):
        env.stage(CloneStage())
    env.pvesim.clear_requests()
    result = env.cleanup()
    assert (
        result["done"]
        and result["requests"] == []
        and result["removed"] == {"vmid": None, "volumes": [], "snapshots": []}
    )
    assert result["operation"]["status"] == "cleaned" and env.store.target_holder(env.scope, 201) is None
    assert mutations(env.pvesim) == []


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/vmanyware.proxmox.proxmox:
      api_host: 127.0.0.1
      api_port: {port}
      api_token_id: "{token_id}"
      api_token_secret: "{token_secret}"
      ca_path: "{ca}"
      journal_dir: "{journal}"
  tasks:
    - name: Abandon (check mode)
      vmanyware.proxmox.vmanyware_operation:
        state: abandoned
        operation_id: "{other}"
        reason: superseded
      check_mode: true
      register: abandon_preview
    - name: Abandon
      vmanyware.proxmox.vmanyware_operation:
        state: abandoned
        operation_id: "{other}"
        reason: superseded
      register: abandoned
    - name: Clean up the failed operation
      vmanyware.proxmox.vmanyware_cleanup:
        operation_id: "{failed}"
        lifecycle_enabled: true
      register: cleaned
    - name: History
      vmanyware.proxmox.vmanyware_operation_info:
        status: [cleaned, abandoned]
      register: history
    - name: Snapshots of an operation
      vmanyware.proxmox.vmanyware_operation_info:
        operation_id: "{failed}"
        include_snapshots: true
      register: snapshots
    - name: Write the results
      ansible.builtin.copy:
        dest: "{results}"
        content: "{{{{ {{'preview': abandon_preview, 'abandoned': abandoned, 'cleaned': cleaned, 'history': history,
                     'snapshots': snapshots}} | to_json }}}}"
        mode: "0600"
- name: The status role prints the history
  hosts: localhost
  gather_facts: false
  roles:
    - role: vmanyware.proxmox.status
      status_journal_dir: "{journal}"
      status_filter_status: [cleaned]
"""


def test_modules_and_status_role_in_a_playbook(env: Env, tmp_path: Path) -> None:
    env.fail_at_disk()
    env.pvesim.delete_vm(201)  # removed by hand: the cleanup finds nothing to send and releases
    other = env.create(vmid=202)
    conn = env.pvesim.connection
    results = tmp_path / "results.json"
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        PLAYBOOK.format(
            port=conn["port"],
            token_id=conn["tokens"]["full"]["id"],
            token_secret=conn["tokens"]["full"]["secret"],
            ca=conn["ca_file"],
            journal=env.params["journal_dir"],
            other=other,
            failed=env.operation_id,
            results=results,
        ),
        encoding="utf-8",
    )
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert conn["tokens"]["full"]["secret"] not in proc.stdout
    out = json.loads(results.read_text())
    assert (
        out["preview"]["changed"]
        and out["abandoned"]["changed"]
        and out["abandoned"]["operation"]["status"] == "abandoned"
    )
    assert (
        out["cleaned"]["changed"]
        and out["cleaned"]["operation"]["status"] == "cleaned"
        and out["cleaned"]["requests"] == []
    )
    assert [row["operation_id"] for row in out["history"]["operations"]] == [other, env.operation_id] and out[
        "history"
    ]["total"] == 2
    assert set(out["snapshots"]["snapshots"]) == {"definition", "mapping", "plan"}
    assert out["snapshots"]["snapshots"]["plan"]["target"]["vmid"] == 201
    assert "cleaned" in proc.stdout and env.operation_id in proc.stdout  # the status role's table


@pytest.mark.parametrize("read_only", [False, True], ids=["unverified", "read-only-opt-in"])
def test_cleanup_refuses_unverified_tls_before_any_request(env: Env, read_only: bool) -> None:
    """As every stage: validate_certs false and no pin is tls_unverified before anything is sent (stop and DELETE purge
    included), and the read-only opt-in does not apply to a cleanup; the VM stays and no cleanup is recorded."""
    env.fail_at_disk()
    for check_mode in (True, False):
        with pytest.raises(VmanywareError) as info:
            env.cleanup(
                check_mode=check_mode, stop=True, validate_certs=False, ca_path=None, unverified_tls_read_only=read_only
            )
        assert info.value.code == "tls_unverified"
    assert env.pvesim.requests() == []
    assert (env.store.load(env.operation_id).get("lifecycle") or {}).get("cleanup") is None
    assert env.vm_exists()
    result = env.cleanup(stop=True)  # the same cleanup over verified TLS goes through
    assert result["done"] and not env.vm_exists()


def test_a_cleanup_whose_controller_is_gone_stops_before_it_writes(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    # The action plugin names the controller in VMANYWARE_CONTROLLER (pid:start time); this one does not exist (_cancel).
    env.fail_at_disk()
    monkeypatch.setenv("VMANYWARE_CONTROLLER", "999999999:1")
    env.pvesim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        env.cleanup()
    assert info.value.code == "controller_gone"
    assert [e["method"] for e in env.pvesim.requests() if e["method"] != "GET"] == [] and env.vm_exists()
    monkeypatch.delenv("VMANYWARE_CONTROLLER")
    result = env.cleanup()  # a re-run (a new controller) goes on with the cleanup the journal recorded
    assert result["done"] and not env.vm_exists()
    assert len([e for e in env.pvesim.requests(method="DELETE") if e["path"] == "/nodes/pve-test/qemu/201"]) == 1
