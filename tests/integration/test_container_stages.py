# SPDX-License-Identifier: GPL-3.0-or-later
"""The container stages (``_stages/container.py``) through the stage runner against the simulator.

template (download from the appliance index) -> create (pct create) -> start -> readiness
(interfaces on the recorded MAC); check mode sends nothing; a lost create reply is resolved by
reads (the vzcreate task and the binding description) and never sent again.
"""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guest_support as gs  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.container.common import container_mac  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.container.readiness import (
    ContainerReadinessStage,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import container_stage  # noqa: E402

pytestmark = pytest.mark.integration
CTID = 320
CREATE = r"^/nodes/pve-test/lxc$"
TEMPLATE = "debian-12-standard_12.12-1_amd64.tar.zst"


@pytest.fixture()
def sim(pvesim: t.Any) -> t.Any:
    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel

    pvesim.set_token(
        pvesim.connection["tokens"]["full"]["id"],
        privileges={**FULL_TOKEN_ACL, "/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]},
    )
    pvesim.set_speed(100.0)
    yield pvesim
    pvesim.set_speed(50.0)


def _env(tmp_path: Path, conn: dict[str, t.Any]) -> gs.Env:
    catalog = yaml.safe_load((gs.REPO / "examples/catalog-containers.yml").read_text(encoding="utf-8"))
    definition = yaml.safe_load(gs.definition_text())
    definition["image"] = "debian-12-ct"
    planned = build_plan(catalog=yaml.safe_dump(catalog), definition=yaml.safe_dump(definition), target_vmid=CTID)
    client = ProxmoxClient(gs.settings_for(conn))
    client.get("/version")
    store = JournalStore(str(tmp_path / "journal"))
    kinds = [step["kind"] for step in planned.plan["steps"]]
    document, _created = store.create_operation(
        idempotency_key="test-%s" % planned.plan_hash,
        provider_scope_id=client.provider_scope_id,
        definition=planned.definition,
        mapping=planned.mapping,
        plan=planned.plan,
        confirmation={"confirmed": True},
        target_node=gs.NODE,
        target_vmid=CTID,
        stage_kinds=kinds,
    )
    return gs.Env(store, client, document["operationId"], kinds)


def _declared_env(sim: t.Any, tmp_path: Path, key: str, **declared: t.Any) -> gs.Env:
    """An operation for the example container mapping whose definition declares ``declared`` (packages, snapshot)."""
    catalog = yaml.safe_load((gs.REPO / "examples/catalog-containers.yml").read_text(encoding="utf-8"))
    definition = yaml.safe_load(gs.definition_text(**declared))
    definition["image"] = "debian-12-ct"
    planned = build_plan(catalog=yaml.safe_dump(catalog), definition=yaml.safe_dump(definition), target_vmid=CTID)
    client = ProxmoxClient(gs.settings_for(sim.connection))
    client.get("/version")
    store = JournalStore(str(tmp_path / "journal"))
    kinds = [step["kind"] for step in planned.plan["steps"]]
    document, _created = store.create_operation(
        idempotency_key=key,
        provider_scope_id=client.provider_scope_id,
        definition=planned.definition,
        mapping=planned.mapping,
        plan=planned.plan,
        confirmation={"confirmed": True},
        target_node=gs.NODE,
        target_vmid=CTID,
        stage_kinds=kinds,
    )
    return gs.Env(store, client, document["operationId"], kinds)


def _mutations(sim: t.Any) -> list[tuple[str, str]]:
    return [
        (e["method"], e["path"])
        for e in sim.requests()
        if e["method"] != "GET" and e["status"] in (200, "dropped") and e["path"] != "/access/ticket"
    ]  # root_call logins


def test_check_mode_previews_then_the_stages_create_start_and_find_the_address(sim: t.Any, tmp_path: Path) -> None:
    env = _env(tmp_path, sim.connection)
    assert env.kinds == ["template", "create", "start", "readiness"]
    preview = env.run(container_stage("template"), check_mode=True, diff=True)
    assert preview["changed"] and preview["requests"][0]["params"] == {"storage": "local", "template": TEMPLATE}
    assert preview["requests"][0]["cli"] == f"pveam download local {TEMPLATE}"
    assert preview["diff"]["after"] == {"ostemplate": f"local:vztmpl/{TEMPLATE}", "present": True}
    planned_create = env.run(container_stage("create"), check_mode=True)
    assert planned_create["preview"] == "earlier stages pending"
    assert planned_create["requests"][0]["params"]["ostemplate"] == "local:vztmpl/<newest debian-12-standard 12.*>"
    # pct reads --ssh-public-keys from a file: the snippet writes it first with a here-document
    write_keys, create_cli = planned_create["requests"][0]["cli"].split("\nVMANYWARE_SSH_KEYS\n")
    assert write_keys.startswith("cat > vmanyware-320.sshkeys <<'VMANYWARE_SSH_KEYS'\nssh-ed25519 ")
    assert create_cli.startswith("pct create 320 'local:vztmpl/<newest debian-12-standard 12.*>' ")
    assert "--ssh-public-keys vmanyware-320.sshkeys" in create_cli
    assert _mutations(sim) == []

    for kind in ("template", "create", "start"):
        result = env.run(container_stage(kind), diff=True)
        assert result["done"] and result["stage"]["status"] == "completed", result
    create = env.stage("create")
    assert create["request"]["params"]["ostemplate"] == f"local:vztmpl/{TEMPLATE}"
    assert create["evidence"]["macaddr"] == container_mac(env.document)
    assert ":vzcreate:320:" in create["upid"]
    config = sim.root_call("GET", f"/nodes/pve-test/lxc/{CTID}/config")
    assert config["unprivileged"] == 1 and config["tags"] == "vmanyware" and "features" not in config
    assert (
        config["rootfs"] == "local-lvm:vm-320-disk-0,size=20G"
        and f"hwaddr={container_mac(env.document)}" in config["net0"]
    )
    assert config["description"].startswith("vmanyware operation " + env.operation_id)

    result = env.run(ContainerReadinessStage(readiness_timeout=60))
    assert result["done"], result
    evidence = env.stage("readiness")["evidence"]
    assert evidence["ipv4"].startswith("192.0.2.") and evidence["hostKeysVerified"] is False and "deadline" in evidence
    assert env.document["status"] == "completed"
    assert _mutations(sim) == [
        ("POST", "/nodes/pve-test/aplinfo"),
        ("POST", "/nodes/pve-test/lxc"),
        ("POST", f"/nodes/pve-test/lxc/{CTID}/status/start"),
    ]
    # a second run of every stage reads only
    sim.clear_requests()
    for kind in env.kinds:
        assert env.run(container_stage(kind))["changed"] is False
    assert _mutations(sim) == []


def test_lost_create_reply_is_resolved_by_the_task_and_the_binding(sim: t.Any, tmp_path: Path) -> None:
    env = _env(tmp_path, sim.connection)
    env.run(container_stage("template"))
    sim.add_fault("POST", CREATE, "drop_reply", occurrence=1)
    result = env.run(container_stage("create"))
    assert result["done"] and result["stage"]["status"] == "completed", result
    assert ":vzcreate:320:" in (env.stage("create")["upid"] or env.stage("create")["evidence"].get("resolvedUpid", ""))
    assert [e["status"] for e in sim.requests(method="POST", path_regex=CREATE)] == ["dropped"]


def test_lost_create_that_never_arrived_stays_uncertain_and_is_not_resent(sim: t.Any, tmp_path: Path) -> None:
    env = _env(tmp_path, sim.connection)
    env.run(container_stage("template"))
    # the request is refused before anything happens, but the client only sees a dropped connection
    sim.add_fault("POST", CREATE, "http_error", status=599, occurrence=1)
    with pytest.raises(VmanywareError) as raised:
        env.run(container_stage("create"))
    assert raised.value.code == "outcome_uncertain", raised.value.code
    with pytest.raises(VmanywareError):
        env.run(container_stage("create"))
    assert len(sim.requests(method="POST", path_regex=CREATE)) == 1  # never sent again
    assert env.stage("create")["status"] == "uncertain"


def test_taken_vmid_fails_create_before_sending(sim: t.Any, tmp_path: Path) -> None:
    env = _env(tmp_path, sim.connection)
    env.run(container_stage("template"))
    sim.add_container(CTID, name="someone-else")
    with pytest.raises(VmanywareError) as raised:
        env.run(container_stage("create"))
    assert raised.value.code == "vmid_taken"
    assert sim.requests(method="POST", path_regex=CREATE) == []


def test_the_module_entry_runs_each_stage_and_refuses_a_vm_plan(sim: t.Any, tmp_path: Path) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import run_stage  # pylint: disable=C0415

    env = _env(tmp_path, sim.connection)
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
        "provisioning_enabled": True,
        "set_operation_fact": True,
    }
    for kind in ("template", "create", "start", "readiness"):
        result = run_stage(params, container_stage(kind, readiness_timeout=60), check_mode=False, diff=False)
        assert result["done"], result
        assert conn["tokens"]["full"]["secret"] not in str(result)
    assert result["ansible_facts"]["vmanyware_operation"]["status"] == "completed"
    assert result["ansible_facts"]["vmanyware_operation"]["handoff"]["ipv4"].startswith("192.0.2.")
    # a container stage on a VM operation reads nothing and sends nothing
    vm_env = gs.create(tmp_path / "vm", conn)
    with pytest.raises(VmanywareError) as raised:
        vm_env.run(container_stage("create"))
    assert raised.value.details["rule"] == "unknown_stage"  # a VM plan has no create step
    sim.clear_requests()
    with pytest.raises(VmanywareError) as raised:
        vm_env.run(container_stage("start"))  # "start" exists in both plans: the VM's clone stages come first
    assert raised.value.code == "stage_out_of_order"
    gs.run_clone_stages(vm_env)
    for kind in ("cloudinit", "seed"):
        vm_env.store.record_dispatch(vm_env.operation_id, kind, {"noop": True})
        vm_env.store.record_completed(vm_env.operation_id, kind, {})
    sim.clear_requests()
    with pytest.raises(VmanywareError) as raised:
        vm_env.run(container_stage("start"))
    assert raised.value.details["rule"] == "container_plan"
    assert _mutations(sim) == []


def test_packages_are_verified_from_package_facts_and_the_snapshot_is_gated(sim: t.Any, tmp_path: Path) -> None:
    env = _declared_env(
        sim, tmp_path, "test-pkg", packages=[{"name": "git"}, {"name": "jq", "version": "1.7.1-6"}], snapshot=True
    )
    assert env.kinds == ["template", "create", "start", "readiness", "packages", "snapshot"]
    for kind in ("template", "create", "start", "readiness"):
        assert env.run(container_stage(kind, readiness_timeout=60))["done"]
    sim.clear_requests()
    with pytest.raises(VmanywareError) as raised:
        env.run(container_stage("packages", installed={"git": "1:2.39.5-0+deb12u2", "jq": "1.6-2.1"}))
    assert raised.value.code == "package_version_missing" and env.stage("packages")["status"] == "failed"
    assert _mutations(sim) == []  # the packages stage never sends anything; the container is kept


def test_container_snapshot_stage_is_gated_and_takes_one_snapshot(sim: t.Any, tmp_path: Path) -> None:
    env = _declared_env(sim, tmp_path, "test-snap", packages=[{"name": "git"}], snapshot=True)
    for kind in ("template", "create", "start", "readiness"):
        assert env.run(container_stage(kind, readiness_timeout=60))["done"]
    assert env.run(container_stage("packages", installed={"git": "1:2.39.5-0+deb12u2"}))["stage"]["evidence"][
        "installed"
    ] == {"git": "1:2.39.5-0+deb12u2"}
    sim.clear_requests()
    with pytest.raises(
        VmanywareError
    ) as raised:  # both gates are re-read before the write; the environment's false wins
        env.run(
            container_stage("snapshot"),
            environ=dict(gs.ON, VMANYWARE_SNAPSHOTS_ENABLED="false"),
            gate_options={"VMANYWARE_SNAPSHOTS_ENABLED": True},
        )
    assert raised.value.code == "snapshot_disabled" and _mutations(sim) == []
    assert env.stage("snapshot")["status"] == "pending"
    with pytest.raises(VmanywareError) as raised:
        env.run(
            container_stage("snapshot"),
            environ={"VMANYWARE_PROVISIONING_ENABLED": "false", "VMANYWARE_SNAPSHOTS_ENABLED": "true"},
        )
    assert raised.value.code == "provisioning_disabled" and _mutations(sim) == []
    result = env.run(container_stage("snapshot"), environ=dict(gs.ON, VMANYWARE_SNAPSHOTS_ENABLED="true"))
    assert result["done"] and result["stage"]["evidence"]["snapname"].startswith("vmanyware-")
    assert _mutations(sim) == [("POST", f"/nodes/pve-test/lxc/{CTID}/snapshot")]
    assert (
        env.document["status"] == "completed"
        and env.document["handoff"]["snapshot"] == result["stage"]["evidence"]["snapname"]
    )


def test_readiness_fails_at_the_journaled_deadline_without_an_address(sim: t.Any, tmp_path: Path) -> None:
    env = _env(tmp_path, sim.connection)
    for kind in ("template", "create", "start"):
        env.run(container_stage(kind))
    sim.add_fault("GET", rf"/lxc/{CTID}/interfaces$", "dhcp_never")
    progress = env.run(ContainerReadinessStage(readiness_timeout=2), wait_budget=0.2)
    assert progress["done"] is False and progress["progress"]["phase"] == "network"
    deadline = env.stage("readiness")["evidence"]["deadline"]
    with pytest.raises(VmanywareError) as raised:
        env.run(ContainerReadinessStage(readiness_timeout=600))  # a re-run keeps the first deadline
    assert raised.value.code == "guest_network_unavailable"
    assert env.stage("readiness")["status"] == "failed" and env.stage("readiness")["evidence"]["deadline"] == deadline


@pytest.mark.parametrize(
    ("environ", "option", "allowed"),
    [
        ("false", True, False),  # an environment false wins over the option
        ("", None, False),  # empty = unset: closed unless the option opens it
        ("", True, True),
        ("true", None, True),
        (None, False, False),
    ],
)
def test_packages_write_check_rereads_the_provisioning_gate(
    sim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, environ: str | None, option: bool | None, allowed: bool
) -> None:
    """The role's apt writes over SSH (Proxmox never sees them) are each preceded by ``write_check``: the gate re-read."""
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import run_stage  # pylint: disable=C0415

    env = _declared_env(sim, tmp_path, "test-gate", packages=[{"name": "jq"}])
    for kind in ("template", "create", "start", "readiness"):
        assert env.run(container_stage(kind, readiness_timeout=60))["done"]
    before = env.store.load(env.operation_id)
    sim.clear_requests()
    if environ is None:
        monkeypatch.delenv("VMANYWARE_PROVISIONING_ENABLED", raising=False)
    else:
        monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", environ)
    # no connection options at all: the check reads the gate and the journal, never Proxmox
    params = {
        "operation_id": env.operation_id,
        "journal_dir": str(tmp_path / "journal"),
        "provisioning_enabled": option,
        "write_check": True,
    }
    if allowed:
        result = run_stage(params, container_stage("packages"), check_mode=False, diff=False)
        assert result["write_allowed"] is True and result["changed"] is False and result["done"] is False
    else:
        with pytest.raises(VmanywareError) as raised:
            run_stage(params, container_stage("packages"), check_mode=False, diff=False)
        assert raised.value.code == "provisioning_disabled"
    assert sim.requests() == []
    assert env.store.load(env.operation_id) == before  # nothing recorded: the stage stays pending
    assert env.stage("packages")["status"] == "pending"


def test_write_check_is_only_for_the_packages_stage() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_container  # pylint: disable=C0415

    with pytest.raises(VmanywareError) as raised:
        vmanyware_container._logic({"stage": "start", "write_check": True, "readiness_timeout": 300.0})  # pylint: disable=W0212
    assert raised.value.code == "invalid_option"
