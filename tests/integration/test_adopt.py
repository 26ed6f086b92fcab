# SPDX-License-Identifier: GPL-3.0-or-later
"""``state: adopt`` against the simulator: provision with the real stages, lose the journal, adopt, finish.

Adoption must send GET requests only; the remaining stages then complete the operation without a
second clone, resize, start or snapshot (the simulator's request log proves it).
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.adopt import adopt_operation
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
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.cloudinit import CloudinitStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.packages import PackagesStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import ReadinessStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import SeedStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.snapshot import SnapshotStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.start import StartStage

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SPEED = 400
GATES = {"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": "true"}
VM = "/nodes/pve-test/qemu/201"
ORDER = ("clone", "resources", "disk", "cloudinit", "seed", "start", "readiness", "packages", "snapshot")


def logic_for(kind: str) -> t.Any:
    return {
        "clone": CloneStage,
        "resources": ResourcesStage,
        "disk": DiskStage,
        "cloudinit": CloudinitStage,
        "seed": SeedStage,
        "start": StartStage,
        "readiness": ReadinessStage,
        "packages": PackagesStage,
        "snapshot": SnapshotStage,
    }[kind]()


def planned_for(disk_gib: int = 20, packages: list[dict[str, str]] | None = None, snapshot: bool = True) -> t.Any:
    data = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    data["resources"]["diskGiB"] = disk_gib
    data["packages"] = [{"name": "git"}] if packages is None else packages
    data["snapshotAfterProvisioning"] = snapshot
    return build_plan(catalog_path=REPO / "examples/catalog.yml", definition=yaml.safe_dump(data), target_vmid=201)


class Env:
    """One confirmed operation on VM 201, its journal directory and the stage parameters."""

    def __init__(self, pvesim: t.Any, tmp_path: Path, **plan_args: t.Any) -> None:
        conn = pvesim.connection
        self.pvesim = pvesim
        self.journal = tmp_path / "journal"
        self.params: dict[str, t.Any] = {
            "api_host": conn["host"],
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
            "validate_certs": True,
            "journal_dir": str(self.journal),
            "api_timeout": 10.0,
            "lock_wait": 30.0,
            "provisioning_enabled": True,
            "snapshots_enabled": True,
        }
        self.settings = connection_settings(self.params)
        self.scope = provider_scope_id(self.settings, certificate_fingerprint(self.settings))
        self.planned = planned_for(**plan_args)
        self.kinds = [step["kind"] for step in self.planned.plan["steps"]]
        result = create_operation(
            open_store(str(self.journal)),
            planned=self.planned,
            provider_scope_id=self.scope,
            confirmation=expected_confirmation(self.planned.plan, self.scope),
            idempotency_key=None,
            environ=GATES,
        )
        self.operation_id = result["operation_id"]
        self.params["operation_id"] = self.operation_id

    def run(self, kind: str) -> dict[str, t.Any]:
        result = run_stage(self.params, logic_for(kind), check_mode=False, diff=False)
        assert result["done"], result
        return result

    def run_through(self, last: str) -> None:
        for kind in self.kinds[: self.kinds.index(last) + 1]:
            self.run(kind)

    def lose_journal(self) -> None:
        shutil.rmtree(self.journal)

    def adopt(self, planned: t.Any = None, check_mode: bool = False) -> dict[str, t.Any]:
        planned = planned or self.planned
        with ProxmoxClient(self.settings) as client:
            result = adopt_operation(
                open_store(str(self.journal)),
                client,
                planned=planned,
                provider_scope_id=self.scope,
                confirmation=expected_confirmation(planned.plan, self.scope),
                idempotency_key=None,
                environ=GATES,
                check_mode=check_mode,
            )
        assert self.params["api_token_secret"] not in json.dumps(result)
        return result

    @property
    def document(self) -> dict[str, t.Any]:
        return open_store(str(self.journal)).load(self.operation_id)

    def statuses(self) -> dict[str, str]:
        return {item["kind"]: item["status"] for item in self.document["stages"]}


def mutations(pvesim: t.Any) -> list[tuple[str, str]]:
    return [(e["method"], e["path"]) for e in pvesim.requests() if e["method"] != "GET"]


def installs(pvesim: t.Any) -> int:
    return len([e for e in pvesim.requests("POST", r"/agent/exec$") if "install" in e["params"]["command"]])


@pytest.fixture()
def sim(pvesim: t.Any) -> t.Any:
    pvesim.set_speed(SPEED)
    return pvesim


def test_adopt_after_full_provisioning_then_finish(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path)
    env.run_through("snapshot")
    before = env.document
    assert before["status"] == "completed"
    env.lose_journal()
    sim.clear_requests()

    result = env.adopt()
    assert result["changed"] and result["adopted"] and result["operation_id"] == env.operation_id
    assert {e["method"] for e in sim.requests()} == {"GET"}  # adoption reads only
    assert [(s["kind"], s["status"]) for s in result["adoption"]] == [
        ("clone", "completed"),
        ("resources", "completed"),
        ("disk", "completed"),
        ("cloudinit", "completed"),
        ("seed", "completed"),
        ("start", "completed"),
        ("readiness", "pending"),
        ("packages", "pending"),
        ("snapshot", "pending"),
    ]
    assert "snapshot is listed" in result["adoption"][-1]["reason"]
    document = env.document
    assert document["status"] == "open" and document["operationId"] == env.operation_id
    assert document["plan"] == before["plan"] and document["confirmation"] == before["confirmation"]
    assert document["idempotencyKeyHash"] == before["idempotencyKeyHash"]
    old = {item["kind"]: item["evidence"] for item in before["stages"]}
    new = {item["kind"]: item["evidence"] for item in document["stages"]}
    assert new["clone"]["volid"] == old["clone"]["volid"] and new["clone"]["macaddr"] == old["clone"]["macaddr"]
    assert new["clone"]["adopted"] is True and new["disk"]["diskSizeBytes"] == 20 * 1024**3
    assert new["seed"]["seedHashes"] == old["seed"]["seedHashes"]
    assert new["cloudinit"]["net0Mac"] == old["cloudinit"]["net0Mac"] and new["start"]["powerState"] == "running"

    sim.clear_requests()
    for kind in ("readiness", "packages", "snapshot"):
        env.run(kind)
    assert env.document["status"] == "completed"
    assert env.document["handoff"]["snapshot"] == before["handoff"]["snapshot"]
    counts = collections.Counter(mutations(sim))
    for forbidden in [
        ("POST", "/nodes/pve-test/qemu/9000/clone"),
        ("PUT", VM + "/resize"),
        ("POST", VM + "/status/start"),
        ("POST", VM + "/snapshot"),
        ("PUT", VM + "/config"),
        ("PUT", VM + "/cloudinit"),
    ]:
        assert counts[forbidden] == 0, counts
    assert installs(sim) == 0
    assert sim.schema_violations() == []

    # adopting again: the journal has the operation, it is returned unchanged
    text = (env.journal / (env.operation_id + ".json")).read_bytes()
    sim.clear_requests()
    again = env.adopt()
    assert again["changed"] is False and again["adopted"] is False and again["operation"]["status"] == "completed"
    assert (env.journal / (env.operation_id + ".json")).read_bytes() == text
    assert {e["method"] for e in sim.requests()} == {"GET"}


def test_adopt_after_start_then_finish(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path, snapshot=False)
    env.run_through("start")
    env.lose_journal()
    sim.clear_requests()
    result = env.adopt()
    assert {e["method"] for e in sim.requests()} == {"GET"}
    assert env.statuses() == {
        "clone": "completed",
        "resources": "completed",
        "disk": "completed",
        "cloudinit": "completed",
        "seed": "completed",
        "start": "completed",
        "readiness": "pending",
        "packages": "pending",
    }
    assert result["operation"]["status"] == "open" and result["observed"]["powerState"] == "running"
    sim.clear_requests()
    for kind in ("readiness", "packages"):
        env.run(kind)
    assert env.document["status"] == "completed"
    assert sim.vm(201)["status"] == "running"
    assert ("POST", VM + "/status/start") not in mutations(sim) and ("PUT", VM + "/resize") not in mutations(sim)
    assert installs(sim) == 1  # git was not installed yet: the packages stage installs it once
    assert sim.schema_violations() == []


def test_adopt_before_start_leaves_seed_and_start_pending(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path, disk_gib=8, packages=[], snapshot=False)
    assert "disk" not in env.kinds and "packages" not in env.kinds
    env.run_through("seed")
    env.lose_journal()
    sim.clear_requests()
    result = env.adopt()
    assert {e["method"] for e in sim.requests()} == {"GET"}
    assert env.statuses() == {
        "clone": "completed",
        "resources": "completed",
        "cloudinit": "completed",
        "seed": "pending",
        "start": "pending",
        "readiness": "pending",
    }
    assert result["observed"]["qmstartTasks"] == []
    sim.clear_requests()
    for kind in ("seed", "start", "readiness"):
        env.run(kind)
    assert env.document["status"] == "completed"
    counts = collections.Counter(mutations(sim))
    assert counts[("POST", VM + "/status/start")] == 1 and counts[("PUT", VM + "/cloudinit")] == 1
    assert counts[("POST", "/nodes/pve-test/qemu/9000/clone")] == 0 and counts[("PUT", VM + "/config")] == 0
    assert sim.schema_violations() == []


def test_adopt_after_clone_only_then_finish(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path, packages=[], snapshot=False)
    env.run_through("clone")
    env.lose_journal()
    env.adopt()
    assert env.statuses()["clone"] == "completed" and env.statuses()["resources"] == "pending"
    sim.clear_requests()
    for kind in env.kinds[1:]:
        env.run(kind)
    assert env.document["status"] == "completed"
    counts = collections.Counter(mutations(sim))
    assert counts[("POST", "/nodes/pve-test/qemu/9000/clone")] == 0 and counts[("PUT", VM + "/resize")] == 1
    assert sim.schema_violations() == []


def test_adopt_in_check_mode_writes_nothing(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path, snapshot=False)
    env.run_through("start")
    env.lose_journal()
    sim.clear_requests()
    result = env.adopt(check_mode=True)
    assert result["changed"] and result["adopted"] and result["operation_id"] == env.operation_id
    assert [item["status"] for item in result["preview_document"]["stages"]][:6] == ["completed"] * 6
    assert result["operation"]["stages"][6]["status"] == "pending"
    assert {e["method"] for e in sim.requests()} == {"GET"}
    store = open_store(str(env.journal))
    assert store.list_operations() == []
    assert os.listdir(env.journal / "targets") == [] and os.listdir(env.journal / "keys") == []
    # the preview can be adopted for real afterwards
    assert env.adopt()["adopted"] and env.statuses()["start"] == "completed"


def test_vm_without_our_description_is_not_found(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path)
    env.lose_journal()
    sim.clear_requests()
    with pytest.raises(VmanywareError) as missing:
        env.adopt()
    assert missing.value.code == "not_found"
    with ProxmoxClient(env.settings) as client:
        client.post(
            "/nodes/pve-test/qemu/9000/clone",
            newid=201,
            full=True,
            storage="local-lvm",
            description="made by someone else",
        )
    sim.clear_requests()
    with pytest.raises(VmanywareError) as foreign:
        env.adopt()
    assert foreign.value.code == "not_found" and foreign.value.details["vmid"] == 201
    assert {e["method"] for e in sim.requests()} == {"GET"}
    assert open_store(str(env.journal)).list_operations() == []


def test_changed_definition_is_plan_changed(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path)
    env.run_through("clone")
    env.lose_journal()
    sim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        env.adopt(planned=planned_for(disk_gib=24))
    assert info.value.code == "plan_changed" and info.value.details["fields"] == ["definitionHash", "planHash"]
    assert info.value.details["operationId"] == env.operation_id
    assert {e["method"] for e in sim.requests()} == {"GET"}
    assert open_store(str(env.journal)).list_operations() == []


def test_adopt_refuses_a_locked_vm_and_a_held_target(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path)
    env.run_through("clone")
    env.lose_journal()
    sim.set_vm_config(201, set={"lock": "backup"})
    with pytest.raises(VmanywareError) as locked:
        env.adopt()
    assert locked.value.code == "locked"
    sim.set_vm_config(201, delete=["lock"])
    # another (unreleased) operation holds the target in the new journal
    create_operation(
        open_store(str(env.journal)),
        planned=planned_for(disk_gib=24),
        provider_scope_id=env.scope,
        confirmation=expected_confirmation(planned_for(disk_gib=24).plan, env.scope),
        idempotency_key=None,
        environ=GATES,
    )
    with pytest.raises(VmanywareError) as held:
        env.adopt()
    assert held.value.code == "conflicting_operation"
    with pytest.raises(VmanywareError) as held_check:
        env.adopt(check_mode=True)
    assert held_check.value.code == "conflicting_operation"


PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/vmanyware.proxmox.proxmox:
      journal_dir: "{journal}"
  tasks:
    - name: Ask for the confirmation block
      vmanyware.proxmox.vmanyware_operation:
        state: adopt
        catalog_path: "{repo}/examples/catalog.yml"
        definition: "{{{{ lookup('file', '{definition}') }}}}"
        target_vmid: 201
      register: attempt
      failed_when: attempt.error_code | default('') != 'confirmation_required'

    - name: Adopt in check mode
      vmanyware.proxmox.vmanyware_operation:
        state: adopt
        catalog_path: "{repo}/examples/catalog.yml"
        definition: "{{{{ lookup('file', '{definition}') }}}}"
        target_vmid: 201
        confirmation: "{{{{ attempt.error_details.expected_confirmation }}}}"
      check_mode: true
      register: preview

    - name: Adopt
      vmanyware.proxmox.vmanyware_operation:
        state: adopt
        catalog_path: "{repo}/examples/catalog.yml"
        definition: "{{{{ lookup('file', '{definition}') }}}}"
        target_vmid: 201
        confirmation: "{{{{ attempt.error_details.expected_confirmation }}}}"
      register: adopted

    - name: Save the results
      ansible.builtin.copy:
        content: "{{{{ {{'preview': preview, 'adopted': adopted}} | to_json }}}}"
        dest: "{out}"
"""


def test_ansible_playbook_adopt(sim: t.Any, tmp_path: Path) -> None:
    env = Env(sim, tmp_path, snapshot=False)
    env.run_through("resources")
    env.lose_journal()
    definition = tmp_path / "definition.yml"
    data = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    data.update(packages=[{"name": "git"}], snapshotAfterProvisioning=False)
    definition.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "out.json"
    playbook = tmp_path / "site.yml"
    playbook.write_text(
        PLAYBOOK.format(journal=env.journal, repo=REPO, definition=definition, out=out), encoding="utf-8"
    )
    conn = sim.connection
    environ = dict(
        os.environ,
        ANSIBLE_NOCOLOR="1",
        VMANYWARE_PROVISIONING_ENABLED="true",
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
    )
    environ.pop("VMANYWARE_SNAPSHOTS_ENABLED", None)
    sim.clear_requests()
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert conn["tokens"]["full"]["secret"] not in completed.stdout + completed.stderr
    results = json.loads(out.read_text(encoding="utf-8"))
    assert results["preview"]["changed"] and results["preview"]["operation_id"] == env.operation_id
    adopted = results["adopted"]
    assert adopted["adopted"] and adopted["ansible_facts"]["vmanyware_operation"]["operation_id"] == env.operation_id
    assert [s["status"] for s in adopted["operation"]["stages"]][:4] == ["completed", "completed", "pending", "pending"]
    assert {e["method"] for e in sim.requests()} == {"GET"}
    assert sim.schema_violations() == []
