# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``vmanyware_cleanup`` and VMID allocation for container operations (``guestType: container``), against the simulator.

The cleanup of a container reads and writes ``/nodes/{node}/lxc/{vmid}`` (config, status/current, snapshot,
``status/stop``, ``DELETE`` with ``purge`` and ``destroy-unreferenced-disks``, never ``force``) with the same guards,
journal protocol and check mode as a VM's (tests/integration/test_lifecycle.py). The cleanup runs in process through
``_lifecycle.run_cleanup`` (the module's whole logic); every test checks the simulator's request log, and that every
request validated against the PVE schema.
"""

from __future__ import annotations

import json
import re
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_container_stages import sim  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import  # the fixture
from test_stages_clone_resources_disk import assert_clean  # noqa: E402  pylint: disable=wrong-import-position
from test_stages_clone_resources_disk import effective_mutations as mutations  # noqa: E402  pylint: disable=wrong-import-position
from test_lifecycle import GUARDED_CHANGES, ON, Env  # noqa: E402  pylint: disable=wrong-import-position
from vmid_support import Reserver  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    abandon_operation,
    create_operation,
    expected_confirmation,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import run_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import container_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import wait_task  # noqa: E402

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CTID = 320
CT = "/nodes/pve-test/lxc/%d" % CTID
DESTROY = {"purge": 1, "destroy-unreferenced-disks": 1}
STOP_REQUEST = {"method": "POST", "path": CT + "/status/stop", "params": {}, "cli": "pct stop 320"}
DELETE_REQUEST = {
    "method": "DELETE",
    "path": CT,
    "params": DESTROY,
    "cli": "pct destroy 320 --purge 1 --destroy-unreferenced-disks 1",
}
NOTHING_REMOVED = {"vmid": None, "volumes": [], "snapshots": []}


def container_definition() -> dict[str, t.Any]:
    """The example definition for the example container mapping (``debian-12-ct``: appliance ``debian-12-standard 12.*``)."""
    definition = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    definition.update({"image": "debian-12-ct", "packages": [], "snapshotAfterProvisioning": False})
    return t.cast(dict, definition)


def container_plan(vmid: int) -> t.Any:
    return build_plan(
        catalog=(REPO / "examples/catalog-containers.yml").read_text(encoding="utf-8"),
        definition=yaml.safe_dump(container_definition()),
        target_vmid=vmid,
    )


class CtEnv(Env):
    """test_lifecycle's ``Env`` (module options, journal, ``cleanup``) with a confirmed container operation on CT 320."""

    def create(self, key: str | None = None, vmid: int = CTID) -> str:
        planned = container_plan(vmid)
        assert planned.plan["guestType"] == "container"
        result = create_operation(
            self.store,
            planned=planned,
            provider_scope_id=self.scope,
            confirmation=expected_confirmation(planned.plan, self.scope),
            idempotency_key=key,
            environ=ON,
        )
        return t.cast(str, result["operation_id"])

    def run(self, kind: str, operation_id: str | None = None, **options: t.Any) -> dict[str, t.Any]:
        """Container stage ``kind`` through the module entry (``vmanyware_container stage=kind``)."""
        return self.stage(container_stage(kind, **options), operation_id)

    def created(self, *kinds: str) -> None:
        """The given stages (in order) completed: a container of this operation exists."""
        for kind in kinds:
            assert self.run(kind)["done"]

    def fail_at_readiness(self) -> None:
        """template, create and start complete; the container never gets an address: a failed operation, container running."""
        self.created("template", "create", "start")
        self.pvesim.set_guest(CTID, dhcp_never=True)
        with pytest.raises(VmanywareError) as info:
            self.run("readiness", readiness_timeout=1.0)
        assert info.value.code == "guest_network_unavailable"
        assert self.store.load(self.operation_id)["status"] == "failed"
        self.pvesim.clear_requests()

    def abandon(self) -> None:
        abandon_operation(self.store, self.operation_id, "test: abandoned before readiness")
        self.pvesim.clear_requests()

    def config(self) -> dict[str, t.Any]:
        return t.cast(dict, self.client_get(CT + "/config"))

    def container_exists(self) -> bool:
        return any(guest.get("vmid") == CTID for guest in self.client_get("/cluster/resources"))


@pytest.fixture()
def ct(sim: t.Any, tmp_path: Path) -> CtEnv:  # pylint: disable=redefined-outer-name
    return CtEnv(sim, tmp_path)


def test_cleanup_stops_and_removes_the_failed_operations_container(ct: CtEnv) -> None:  # pylint: disable=redefined-outer-name
    ct.fail_at_readiness()
    assert ct.client_get(CT + "/status/current")["status"] == "running"
    for check_mode in (True, False):  # a running container is refused without stop: true
        with pytest.raises(VmanywareError) as info:
            ct.cleanup(check_mode=check_mode)
        assert info.value.code == "cleanup_running" and info.value.details["powerState"] == "running"
    with pytest.raises(VmanywareError) as closed:
        ct.cleanup(environ={}, stop=True)
    assert closed.value.code == "lifecycle_disabled"
    assert mutations(ct.pvesim) == [] and ct.store.load(ct.operation_id).get("lifecycle") is None

    preview = ct.cleanup(check_mode=True, stop=True)
    assert preview["changed"] and not preview["done"]
    assert preview["requests"] == [STOP_REQUEST, DELETE_REQUEST]
    assert preview["removed"] == {"vmid": CTID, "volumes": ["local-lvm:vm-320-disk-0"], "snapshots": []}
    assert (
        mutations(ct.pvesim) == [] and ct.store.load(ct.operation_id).get("lifecycle") is None
    )  # check mode sends and records nothing
    assert all(
        entry["path"].startswith((CT, "/access/permissions")) for entry in ct.pvesim.requests()
    )  # it read the lxc paths only

    result = ct.cleanup(stop=True)
    assert result["changed"] and result["done"] and result["requests"] == preview["requests"]
    assert result["removed"] == preview["removed"]
    assert mutations(ct.pvesim) == [("POST", CT + "/status/stop"), ("DELETE", CT)]
    [delete] = ct.pvesim.requests(method="DELETE")
    assert {key: str(value) for key, value in delete["params"].items() if key not in ("node", "vmid")} == {
        "purge": "1",
        "destroy-unreferenced-disks": "1",
    }  # never force
    assert not ct.container_exists()
    assert "local-lvm:vm-320-disk-0" not in ct.pvesim.set_storage("local-lvm")["volumes"]  # its root disk went with it
    view = result["operation"]
    assert view["status"] == "cleaned" and view["released"] and view["release"]["reason"] == "cleaned"
    steps = view["cleanup"]["steps"]
    assert [step["status"] for step in steps] == ["completed", "completed"]
    assert ":vzstop:320:" in steps[0]["upid"] and ":vzdestroy:320:" in steps[1]["upid"]
    assert ct.store.target_holder(ct.scope, CTID) is None  # a new operation may take the VMID

    ct.pvesim.clear_requests()
    again = ct.cleanup(stop=True)
    assert again["changed"] is False and again["removed"] == result["removed"] and ct.pvesim.requests() == []
    with pytest.raises(VmanywareError) as ended:
        ct.run("readiness")
    assert ended.value.code == "operation_cleaned"
    assert_clean(ct.pvesim)


@pytest.mark.parametrize("change,code", [*GUARDED_CHANGES, ({"lock": "backup"}, "locked")])
def test_guards_refuse_with_the_container_untouched(ct: CtEnv, change: dict[str, str], code: str) -> None:  # pylint: disable=W0621
    ct.created("template", "create")
    ct.abandon()
    ct.pvesim.set_container_config(CTID, set=change)
    before = ct.config()
    for check_mode in (True, False):
        with pytest.raises(VmanywareError) as info:
            ct.cleanup(check_mode=check_mode, stop=True, lock_wait=0.0)
        assert info.value.code == code and info.value.details["vmid"] == CTID
    assert mutations(ct.pvesim) == [] and ct.config() == before
    assert ct.store.load(ct.operation_id)["lifecycle"]["cleanup"] is None  # no cleanup recorded either
    assert ct.store.target_holder(ct.scope, CTID) is None  # abandoning released it; the container stays
    assert ct.pvesim.schema_violations() == []


def test_missing_power_privilege_refuses_before_anything_is_sent(ct: CtEnv) -> None:  # pylint: disable=redefined-outer-name
    ct.fail_at_readiness()
    ct.pvesim.set_token(
        ct.pvesim.connection["tokens"]["full"]["id"], privileges={"/": ["VM.Audit", "VM.Allocate", "Sys.Audit"]}
    )
    with pytest.raises(VmanywareError) as info:
        ct.cleanup(stop=True)
    assert info.value.code == "permission_denied" and info.value.details == {
        "stage": "stop",
        "path": "/vms/320",
        "missing": ["VM.PowerMgmt"],
    }
    assert mutations(ct.pvesim) == [] and ct.container_exists()


def test_someone_elses_container_on_the_vmid_is_never_removed(ct: CtEnv) -> None:  # pylint: disable=redefined-outer-name
    ct.created("template")
    ct.abandon()  # before create: nothing of ours exists; then another tool creates CT 320
    ct.pvesim.add_container(CTID, name="someone-elses-ct")
    with pytest.raises(VmanywareError) as info:
        ct.cleanup(stop=True)
    assert info.value.code == "cleanup_binding_mismatch"
    assert mutations(ct.pvesim) == [] and ct.container_exists()


def test_without_a_container_nothing_is_sent_and_the_operation_is_cleaned(ct: CtEnv) -> None:  # pylint: disable=W0621
    ct.created("template")
    ct.abandon()
    preview = ct.cleanup(check_mode=True)
    assert preview["requests"] == [] and preview["removed"] == NOTHING_REMOVED
    result = ct.cleanup()
    assert result["done"] and result["requests"] == [] and result["removed"] == NOTHING_REMOVED
    assert result["operation"]["status"] == "cleaned" and mutations(ct.pvesim) == []


def test_lost_delete_reply_is_resolved_by_reads_and_never_resent(ct: CtEnv) -> None:  # pylint: disable=redefined-outer-name
    ct.created("template", "create")
    ct.abandon()
    with ProxmoxClient(ct.settings) as client:  # a snapshot someone took: removed with the container, and listed
        assert wait_task(
            client, client.request("POST", CT + "/snapshot", {"snapname": "inspect"})["data"], timeout=30
        ).succeeded
    ct.pvesim.clear_requests()
    ct.pvesim.add_fault(method="DELETE", path=r"/lxc/320$", action="drop_reply", occurrence=1)
    result = ct.cleanup()
    assert result["done"] and result["operation"]["status"] == "cleaned" and not ct.container_exists()
    assert result["removed"] == {"vmid": CTID, "volumes": ["local-lvm:vm-320-disk-0"], "snapshots": ["inspect"]}
    assert [entry["status"] for entry in ct.pvesim.requests(method="DELETE")] == [
        "dropped"
    ]  # sent once, resolved by the vzdestroy task
    assert ":vzdestroy:320:" in result["operation"]["cleanup"]["steps"][1]["upid"]
    assert_clean(ct.pvesim)


def test_unresolvable_destroy_stays_uncertain_and_is_never_sent(ct: CtEnv) -> None:  # pylint: disable=redefined-outer-name
    ct.created("template", "create")
    ct.abandon()
    ct.record_interrupted_destroy(CT)  # reads see the container and no vzdestroy task
    with pytest.raises(VmanywareError) as info:
        ct.cleanup(wait_budget=0.0)
    assert (
        info.value.code == "outcome_uncertain" and "container still exists and no vzdestroy task" in info.value.message
    )
    assert ct.container_exists() and ct.pvesim.requests(method="DELETE") == []
    assert ct.store.load(ct.operation_id)["lifecycle"]["cleanup"]["status"] == "uncertain"


# -- VMID allocation for container plans -----------------------------------------------------------------------------


def test_auto_vmid_for_a_container_plan_skips_guests_and_is_held_by_the_container(sim: t.Any, tmp_path: Path) -> None:  # pylint: disable=W0621
    reserver = Reserver(sim, tmp_path)
    sim.add_container(100, name="someone-elses-ct")  # an LXC guest holds 100: skipped
    lease = reserver.reserve("/srv/envs/ct.yml", vmid_range=[100, 110])
    assert lease["vmid"] == 101 and lease["changed"]
    planned = container_plan(lease["vmid"])
    operation = create_operation(
        reserver.store,
        planned=planned,
        provider_scope_id=reserver.scope,
        confirmation=expected_confirmation(planned.plan, reserver.scope),
        idempotency_key=None,
        environ=ON,
    )
    assert reserver.leases() == []  # the lease became the operation's target claim
    params = dict(reserver.params, operation_id=operation["operation_id"], provisioning_enabled=True, lock_wait=10.0)
    for kind in ("template", "create"):
        assert run_stage(params, container_stage(kind), check_mode=False, diff=False)["done"]
    assert [entry["params"]["vmid"] for entry in sim.requests(method="POST", path_regex=r"^/nodes/pve-test/lxc$")] == [
        "101"
    ]
    # the next reservation skips both containers (ours is also a live claim)
    assert reserver.reserve("/srv/envs/other.yml", vmid_range=[100, 110])["vmid"] == 102
    assert sim.schema_violations() == []


@pytest.mark.parametrize("winner", ["container", "vm"])
def test_a_guest_created_between_preconditions_and_create_fails_vmid_taken(
    sim: t.Any, tmp_path: Path, winner: str
) -> None:  # noqa: W0621
    ct = CtEnv(sim, tmp_path)  # pylint: disable=redefined-outer-name
    ct.created("template")

    def outside(vmid: int) -> None:
        if winner == "container":
            sim.add_container(vmid, name="someone-elses-ct")
        else:
            with ProxmoxClient(ct.settings) as client:
                upid = client.post(
                    "/nodes/pve-test/qemu/9000/clone", newid=vmid, full=1, storage="local-lvm", name="someone-else"
                )
                wait_task(client, upid, timeout=120)

    class RacedClient:
        """The first POST /nodes/pve-test/lxc is preceded by another client's guest on the same VMID (the race)."""

        def __init__(self, client: ProxmoxClient) -> None:
            self.client = client

        def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
            if method == "POST" and path == "/nodes/pve-test/lxc" and not raced:
                raced.append(True)
                outside(int((params or {})["vmid"]))
            return self.client.request(method, path, params)

        def __getattr__(self, name: str) -> t.Any:
            return getattr(self.client, name)

    raced: list[bool] = []
    params = dict(ct.params, operation_id=ct.operation_id)
    with pytest.raises(VmanywareError) as info:
        run_stage(
            params,
            container_stage("create"),
            check_mode=False,
            diff=False,
            client_factory=lambda s: RacedClient(ProxmoxClient(s)),
        )
    assert raced and info.value.code == "vmid_taken" and info.value.details["rule"] == "taken_before_create"
    posts = ct.pvesim.requests(method="POST", path_regex=r"^/nodes/pve-test/lxc$")
    assert len(posts) == 1 and posts[0]["status"] == 500  # refused before it changed anything
    record = ct.store.stage(ct.store.load(ct.operation_id), "create")
    assert record["status"] == "pending" and not record["submissionStarted"] and record["upid"] is None
    holder = ct.client_get("/cluster/resources")
    assert [guest["type"] for guest in holder if guest.get("vmid") == CTID] == [
        "lxc" if winner == "container" else "qemu"
    ]
    assert sim.schema_violations() == []


# -- the shipped roles and modules in ansible-playbook ---------------------------------------------------------------

CLEANUP_PLAY = """
- name: Remove the container of a completed container operation
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Clean up
      vmanyware.proxmox.vmanyware_cleanup:
        operation_id: "{{ op }}"
        stop: true
        allow_completed: true
        lifecycle_enabled: true
      register: cleaned
    - name: Write the result
      ansible.builtin.copy:
        dest: "{{ results }}"
        content: "{{ cleaned | to_json }}"
        mode: "0600"
- name: The status role shows the cleaned container operation
  hosts: localhost
  gather_facts: false
  roles:
    - role: vmanyware.proxmox.status
      status_operation_id: "{{ op }}"
"""


def test_provision_with_auto_then_cleanup_and_status_in_playbooks(sim: t.Any, tmp_path: Path) -> None:  # pylint: disable=W0621
    import subprocess  # pylint: disable=import-outside-toplevel

    from test_provision_role import BIN, Operator  # pylint: disable=import-outside-toplevel

    sim.set_speed(200)
    sim.add_container(100, name="someone-elses-ct")  # skipped: an LXC guest holds 100
    definition_path = tmp_path / "definition.yml"
    definition_path.write_text(yaml.safe_dump(container_definition()), encoding="utf-8")
    operator = Operator(sim, tmp_path)

    def provision(*extra: str) -> str:
        completed = operator.run(
            "-e",
            "vmanyware_catalog_path=%s" % (REPO / "examples/catalog-containers.yml"),
            "-e",
            "vmanyware_target_vmid=auto",
            *extra,
            definition=definition_path,
        )
        assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
        return completed.stdout

    review = provision()
    assert "VMID 101 is reserved" in review and mutations(sim) == []
    block = yaml.safe_load(operator.confirm.read_text(encoding="utf-8"))["provision_confirmation"]
    assert block["targetVmid"] == 101
    applied = provision("-e", "@%s" % operator.confirm)
    assert mutations(sim) == [
        ("POST", "/nodes/pve-test/aplinfo"),
        ("POST", "/nodes/pve-test/lxc"),
        ("POST", "/nodes/pve-test/lxc/101/status/start"),
    ]
    assert [entry["params"]["vmid"] for entry in sim.requests(method="POST", path_regex=r"^/nodes/pve-test/lxc$")] == [
        "101"
    ]
    assert re.search(r"container 101 '\S+' on pve-test", applied), applied[-3000:]  # the summary names the guest type
    (document_path,) = operator.journal.glob("op-*.json")
    document = json.loads(document_path.read_text(encoding="utf-8"))
    assert document["status"] == "completed" and document["target"]["vmid"] == 101
    assert not list((operator.journal / "leases").glob("*.json"))  # the lease became the operation's claim

    sim.clear_requests()
    play = tmp_path / "cleanup.yml"
    play.write_text(CLEANUP_PLAY, encoding="utf-8")
    results = tmp_path / "cleaned.json"
    completed = subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            str(play),
            "-e",
            "op=%s" % document["operationId"],
            "-e",
            "results=%s" % results,
        ],
        env=operator.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=str(tmp_path),
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    assert operator.env["PROXMOX_TOKEN_SECRET"] not in completed.stdout
    cleaned = json.loads(results.read_text(encoding="utf-8"))
    assert [(item["method"], item["path"], item["cli"]) for item in cleaned["requests"]] == [
        ("POST", "/nodes/pve-test/lxc/101/status/stop", "pct stop 101"),
        ("DELETE", "/nodes/pve-test/lxc/101", "pct destroy 101 --purge 1 --destroy-unreferenced-disks 1"),
    ]
    assert cleaned["removed"] == {"vmid": 101, "volumes": ["local-lvm:vm-101-disk-0"], "snapshots": []}
    assert cleaned["operation"]["status"] == "cleaned" and cleaned["operation"]["instance"]["guest_type"] == "container"
    assert mutations(sim) == [("POST", "/nodes/pve-test/lxc/101/status/stop"), ("DELETE", "/nodes/pve-test/lxc/101")]
    assert re.search(r"container 101 '\S+' on pve-test", completed.stdout) and "cleanup completed" in completed.stdout
    assert 101 not in [guest["vmid"] for guest in sim.root_call("GET", "/cluster/resources", type="vm")]
    assert sim.schema_violations() == []
