# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The profile stage's transports per guest type (docs/profiles.md, "Profiles on containers"): the default of each guest
type, the refused pairings (``profile_transport_unsupported`` before anything runs or is recorded, check mode included),
the ``pct`` route (the nested inventory, the read-only probe before the dispatch) and SSH into a container (the
operator's known_hosts, ``HostKeyAlias``, the key required before the dispatch), and the check-mode previews with
their transport and equivalent command. A container operation here is planned from the example profiles."""

from __future__ import annotations

import json
import os
import stat
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_stages"))

from stage_fakes import SCOPE, complete  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.node_ssh import NodeSshSettings  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import (  # noqa: E402
    InputError,
    NodeSshError,
    VmanywareError,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.nested_playbook import (  # noqa: E402
    NestedPlaybook,
    NestedResult,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.profile import (  # noqa: E402
    GuestSsh,
    ProfileSettings,
    profile_argument_spec,
    profile_module,
    resolve_transport,
    run_profile,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import _profile_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError  # noqa: E402

REPO = Path(__file__).resolve().parents[5]
GATES = {"VMANYWARE_PROVISIONING_ENABLED": "true", "PROXMOX_TOKEN_SECRET": "s3cr3t-token-value"}
CTID = 301
ADDRESS = "192.0.2.30"
CONTAINER_CATALOG = {
    "apiVersion": "vmanyware.dev/v1",
    "kind": "TemplateCatalog",
    "images": [
        {
            "image": "debian-12-ct",
            "guestType": "container",
            "node": "pve-test",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "storage": "local-lvm",
            "bridge": "vmbr0",
            "guestUser": "root",
            "distroFamily": "debian",
        }
    ],
}
CONTAINER_DEFINITION = {
    "apiVersion": "vmanyware.dev/v1",
    "kind": "Environment",
    "name": "ct-profiles",
    "image": "debian-12-ct",
    "resources": {"cores": 1, "memoryMiB": 512, "diskGiB": 4},
    "access": {
        "sshPublicKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO a@b"]
    },
    "profiles": [{"name": "ssh-hardening"}, {"name": "base", "vars": {"motd": "ct"}}],
}


class FakeRunner:
    """Records each nested run's inventory (read while the files exist) and the stage's status then."""

    def __init__(self, store: JournalStore, operation_id: str) -> None:
        self.store, self.operation_id = store, operation_id
        self.calls: list[dict[str, t.Any]] = []

    def __call__(self, nested: NestedPlaybook, cancel_check: t.Any, timeout: float) -> NestedResult:
        inventory = json.loads(Path(nested.workdir, "inventory.json").read_text(encoding="utf-8"))
        status = {item["kind"]: item["status"] for item in self.store.load(self.operation_id)["stages"]}
        self.calls.append(
            {
                "host": inventory["all"]["hosts"]["vmanyware_guest"],
                "files": sorted(os.listdir(nested.workdir)),
                "env": dict(nested.env),
                "status": status,
            }
        )
        return NestedResult(ok=5, changed=2, failed=0, unreachable=0, rc=0, seconds=1.0)


@pytest.fixture
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """The operator's files: a node key and the nodes' known_hosts (pct), the container's known_hosts (ssh)."""
    paths = {name: tmp_path / name for name in ("node_key", "node_known_hosts", "known_hosts")}
    paths["node_key"].write_text("not a real key\n")
    paths["node_known_hosts"].write_text("[127.0.0.1]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAnode\n")
    paths["known_hosts"].write_text(f"{ADDRESS} ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAct\n")
    for path in paths.values():
        os.chmod(path, 0o600)
    return {name: str(path) for name, path in paths.items()}


def node_ssh(files: dict[str, str]) -> dict[str, t.Any]:
    return {
        "private_key_file": files["node_key"],
        "known_hosts_file": files["node_known_hosts"],
        "user": "root",
        "port": 22,
        "endpoints": {"pve-test": "127.0.0.1:2222"},
        "connect_timeout": 7,
    }


def _create(store: JournalStore, plan: t.Any, vmid: int) -> str:
    document, _new = store.create_operation(
        idempotency_key=None,
        provider_scope_id=SCOPE,
        definition=plan.definition,
        mapping=plan.mapping,
        plan=plan.plan,
        confirmation=expected_confirmation(plan.plan, SCOPE),
        target_node="pve-test",
        target_vmid=vmid,
        stage_kinds=[step.get("name") or step["kind"] for step in plan.plan["steps"]],
    )
    return t.cast(str, document["operationId"])


def container_operation(store: JournalStore, ready: bool = True) -> str:
    """A container operation planned with base and ssh-hardening; ``ready``: every stage before them completed and the
    readiness handoff (address, guest user; containers record no host keys) set."""
    plan = build_plan(
        catalog=yaml.safe_dump(CONTAINER_CATALOG),
        definition=yaml.safe_dump(CONTAINER_DEFINITION),
        target_vmid=CTID,
        profiles_path=str(REPO / "examples" / "profiles"),
    )
    operation_id = _create(store, plan, CTID)
    if ready:
        for item in store.load(operation_id)["stages"]:
            if item["kind"].startswith("profile:"):
                break
            complete(store, operation_id, item["kind"], {})
        store.set_handoff(operation_id, {"ipv4": ADDRESS, "address": ADDRESS, "guestUser": "root"})
    return operation_id


def vm_operation(store: JournalStore) -> str:
    """A VM operation whose plan runs base (built like the container's, from the example profiles)."""
    catalog = yaml.safe_load((REPO / "examples" / "catalog.yml").read_text(encoding="utf-8"))
    catalog["images"][0]["distroFamily"] = "debian"
    definition = yaml.safe_load((REPO / "examples" / "definition.yml").read_text(encoding="utf-8"))
    definition["profiles"] = [{"name": "base"}]
    plan = build_plan(
        catalog=yaml.safe_dump(catalog),
        definition=yaml.safe_dump(definition),
        target_vmid=201,
        profiles_path=str(REPO / "examples" / "profiles"),
    )
    operation_id = _create(store, plan, 201)
    for item in store.load(operation_id)["stages"]:
        if item["kind"].startswith("profile:"):
            break
        complete(store, operation_id, item["kind"], {})
    return operation_id


def run(
    store: JournalStore, operation_id: str, profile: str = "base", **changes: t.Any
) -> tuple[dict[str, t.Any], FakeRunner]:
    runner = FakeRunner(store, operation_id)
    fields = {"environ": GATES, "probe": lambda settings, vmid: None, **changes}
    result = run_profile(
        store, operation_id, profile, ProfileSettings(**fields), runner=runner, report=lambda line: None
    )
    return result, runner


def test_the_plan_of_a_container_has_its_profile_stages_in_run_order(store: JournalStore) -> None:
    operation_id = container_operation(store, ready=False)
    kinds = [item["kind"] for item in store.load(operation_id)["stages"]]
    assert kinds == ["create", "start", "readiness", "profile:base", "profile:ssh-hardening"]


def test_each_guest_type_has_its_default_transport(store: JournalStore) -> None:
    container, vm = store.load(container_operation(store)), store.load(vm_operation(store))
    assert resolve_transport(container, None) == resolve_transport(container, "") == "ssh"
    assert resolve_transport(vm, None) == "qga"
    assert resolve_transport(container, "pct") == "pct" and resolve_transport(vm, "ssh") == "ssh"


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize(("guest", "transport"), [("container", "qga"), ("vm", "pct")])
def test_a_transport_the_guest_type_cannot_take_is_refused_before_anything(
    store: JournalStore, files: dict[str, str], guest: str, transport: str, check_mode: bool
) -> None:
    operation_id = container_operation(store) if guest == "container" else vm_operation(store)
    before = store.load(operation_id)
    runner = FakeRunner(store, operation_id)
    probed: list[int] = []
    with pytest.raises(InputError) as err:
        run_profile(
            store,
            operation_id,
            "base",
            ProfileSettings(
                transport=transport,
                environ=GATES,
                check_mode=check_mode,
                node_ssh=node_ssh(files),
                probe=lambda settings, vmid: probed.append(vmid),
            ),
            runner=runner,
            report=lambda line: None,
        )
    assert err.value.code == "profile_transport_unsupported" and err.value.path == "guest_connection"
    assert err.value.details == {"rule": "transport_guest_type", "transport": transport, "guestType": guest}
    assert runner.calls == [] and probed == [] and store.load(operation_id) == before


def test_the_module_refuses_the_pairing_before_it_reads_a_connection(store: JournalStore, tmp_path: Path) -> None:
    """vmanyware_profile with guest_connection qga on a container: refused before the qga TLS check and the run."""
    operation_id = container_operation(store)
    params: dict[str, t.Any] = {name: spec.get("default") for name, spec in profile_argument_spec().items()}
    params.update(
        operation_id=operation_id, journal_dir=str(tmp_path / "journal"), profile="base", guest_connection="qga"
    )
    with pytest.raises(VmanywareError) as err:
        profile_module(params, check_mode=False)
    assert err.value.code == "profile_transport_unsupported"
    assert all(
        item["status"] == "pending"
        for item in store.load(operation_id)["stages"]
        if item["kind"].startswith("profile:")
    )


def test_pct_runs_the_role_through_the_node_route_after_a_probe_and_passes_no_api_credential(
    store: JournalStore, files: dict[str, str]
) -> None:
    operation_id = container_operation(store)
    probes: list[tuple[NodeSshSettings, int, str]] = []

    def probe(settings: NodeSshSettings, vmid: int) -> None:
        probes.append(
            (
                settings,
                vmid,
                next(i for i in store.load(operation_id)["stages"] if i["kind"] == "profile:base")["status"],
            )
        )

    result, runner = run(store, operation_id, transport="pct", node_ssh=node_ssh(files), probe=probe)
    ((settings, vmid, status),) = probes
    assert (settings.host, settings.port, settings.user, vmid, status) == ("127.0.0.1", 2222, "root", CTID, "pending")
    assert settings.known_hosts_file == files["node_known_hosts"] and settings.private_key_file == files["node_key"]
    (call,) = runner.calls
    assert call["host"] == {
        "ansible_connection": "vmanyware.proxmox.pct",
        "ansible_host": "127.0.0.1",
        "ansible_port": 2222,
        "ansible_user": "root",
        "ansible_private_key_file": files["node_key"],
        "vmanyware_pct_known_hosts_file": files["node_known_hosts"],
        "vmanyware_pct_connect_timeout": 7,
        "proxmox_vmid": CTID,
        "ansible_pipelining": True,
        "vmanyware_vmid": CTID,
        "vmanyware_node": "pve-test",
    }
    assert "known_hosts" not in call["files"]  # the operator's file is used as it is, nothing is written
    assert not any(key.startswith("PROXMOX_") for key in call["env"])
    assert call["status"]["profile:base"] == "dispatching"
    stage = next(item for item in store.load(operation_id)["stages"] if item["kind"] == "profile:base")
    assert stage["status"] == "completed" and stage["evidence"]["transport"] == "pct" and result["changed"] is True
    assert stage["request"]["transport"] == "pct"


def test_a_node_route_that_fails_its_probe_runs_nothing_and_leaves_the_stage_pending(
    store: JournalStore, files: dict[str, str]
) -> None:
    operation_id = container_operation(store)

    def probe(settings: NodeSshSettings, vmid: int) -> None:
        raise NodeSshError(code="node_ssh_host_key_not_verified")

    with pytest.raises(NodeSshError) as err:
        run(store, operation_id, transport="pct", node_ssh=node_ssh(files), probe=probe)
    assert err.value.code == "node_ssh_host_key_not_verified"
    stage = next(item for item in store.load(operation_id)["stages"] if item["kind"] == "profile:base")
    assert stage["status"] == "pending" and stage["request"] is None


def test_pct_needs_the_node_route_settings(store: JournalStore, files: dict[str, str]) -> None:
    operation_id = container_operation(store)
    with pytest.raises(InputError) as err:
        run(store, operation_id, transport="pct")
    assert (err.value.path, err.value.details) == ("node_ssh", {"rule": "required"})
    broken = dict(node_ssh(files), known_hosts_file=files["node_key"] + ".missing")
    with pytest.raises(VmanywareError) as err:
        run(store, operation_id, transport="pct", node_ssh=broken)
    assert err.value.path == "node_ssh.known_hosts_file" and "missing" not in err.value.message


def test_ssh_into_a_container_uses_the_operators_known_hosts_under_the_recorded_address(
    store: JournalStore, files: dict[str, str]
) -> None:
    operation_id = container_operation(store)
    checked: list[tuple[str, str]] = []

    def key_known(path: str, host: str) -> bool:
        checked.append((path, host))
        return True

    ssh = GuestSsh(host="127.0.0.1", port=20301, private_key_file="/keys/id", known_hosts_file=files["known_hosts"])
    _result, runner = run(store, operation_id, ssh=ssh, host_key_check=key_known)  # the container's default: ssh
    assert checked == [(files["known_hosts"], ADDRESS)]
    (call,) = runner.calls
    host = call["host"]
    assert (host["ansible_connection"], host["ansible_host"], host["ansible_port"], host["ansible_user"]) == (
        "ssh",
        "127.0.0.1",
        20301,
        "root",
    )
    assert host["ansible_ssh_private_key_file"] == "/keys/id"
    assert host["ansible_ssh_common_args"] == (
        "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s -o HostKeyAlias=%s" % (files["known_hosts"], ADDRESS)
    )
    assert "accept-new" not in json.dumps(host) and "known_hosts" not in call["files"]
    assert not any(key.startswith("PROXMOX_") for key in call["env"])


def test_ssh_into_a_container_without_its_key_in_known_hosts_runs_nothing(
    store: JournalStore, files: dict[str, str], tmp_path: Path
) -> None:
    operation_id = container_operation(store)
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    with pytest.raises(StageError) as err:  # the real check (ssh-keygen -F) against an empty file
        run(store, operation_id, ssh=GuestSsh(known_hosts_file=str(empty)))
    assert (err.value.code, err.value.details["rule"]) == ("stage_precondition_failed", "host_key_unknown")
    stage = next(item for item in store.load(operation_id)["stages"] if item["kind"] == "profile:base")
    assert stage["status"] == "pending"
    with pytest.raises(InputError) as missing:
        run(store, operation_id, ssh=GuestSsh())
    assert (missing.value.path, missing.value.details) == ("known_hosts_file", {"rule": "required"})


@pytest.mark.skipif(not os.path.exists("/usr/bin/ssh-keygen"), reason="needs ssh-keygen")
def test_the_key_check_finds_the_recorded_address_in_a_known_hosts_file(files: dict[str, str]) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.profile import host_key_known

    assert host_key_known(files["known_hosts"], ADDRESS) is True
    assert host_key_known(files["known_hosts"], "192.0.2.31") is False


def test_check_mode_previews_each_transport_with_its_equivalent_command(
    store: JournalStore, files: dict[str, str]
) -> None:
    operation_id = container_operation(store, ready=False)  # before readiness: the address is not known yet
    before = store.load(operation_id)
    lines: list[str] = []
    runner = FakeRunner(store, operation_id)
    probed: list[int] = []
    result = run_profile(
        store,
        operation_id,
        "ssh-hardening",
        ProfileSettings(
            transport="pct",
            environ=GATES,
            check_mode=True,
            node_ssh=node_ssh(files),
            probe=lambda s, v: probed.append(v),
        ),
        runner=runner,
        report=lines.append,
    )
    assert result["preview"]["transport"] == "pct"
    assert result["preview"]["equivalent"] == (
        "ssh -p 2222 -i %s -o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s root@127.0.0.1 pct exec %d -- /bin/sh -c <task>"
        % (files["node_key"], files["node_known_hosts"], CTID)
    )
    assert lines == [
        "profile 2/2 ssh-hardening: would run role vmanyware.proxmox.profile_ssh_hardening "
        "(vars: password_authentication, permit_root_login, ssh_service) through pct; each task as: "
        + result["preview"]["equivalent"]
    ]
    ssh = GuestSsh(host="127.0.0.1", port=20301, known_hosts_file=str(Path(files["known_hosts"]).with_name("later")))
    result = run_profile(
        store,
        operation_id,
        "base",
        ProfileSettings(environ=GATES, check_mode=True, ssh=ssh),
        runner=runner,
        report=print,
    )
    assert result["preview"]["transport"] == "ssh"
    assert result["preview"]["equivalent"] == (
        "ssh -p 20301 -o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s -o HostKeyAlias=<readiness address> "
        "root@127.0.0.1 <task>" % ssh.known_hosts_file
    )  # the known_hosts file may not exist yet in check mode (packages may record the key first)
    assert runner.calls == [] and probed == [] and store.load(operation_id) == before
    # a VM's qga preview, and the one-task path's preview names the transport chosen for it
    vm = vm_operation(store)
    result = run_profile(
        store, vm, "base", ProfileSettings(environ=GATES, check_mode=True), runner=runner, report=print
    )
    assert (result["preview"]["transport"], result["preview"]["equivalent"]) == (
        "qga",
        "qm guest exec 201 -- /bin/sh -c <task>",
    )
    summary = _profile_stage(store.load(vm), "profile:base", 7, True, "ssh")
    assert summary["preview"].endswith(
        "through ssh; each task as: ssh -o StrictHostKeyChecking=yes -o UserKnownHostsFile=<the agent-verified host keys> "
        "debian@<readiness address> <task>"
    )
    with pytest.raises(InputError) as err:
        _profile_stage(store.load(vm), "profile:base", 7, True, "pct")
    assert err.value.code == "profile_transport_unsupported"


def test_the_generated_files_stay_private_for_a_container(store: JournalStore, files: dict[str, str]) -> None:
    operation_id = container_operation(store)
    modes: list[int] = []

    def runner(nested: NestedPlaybook, cancel_check: t.Any, timeout: float) -> NestedResult:
        modes.append(stat.S_IMODE(os.stat(nested.workdir).st_mode))
        modes.extend(stat.S_IMODE(os.stat(os.path.join(nested.workdir, n)).st_mode) for n in os.listdir(nested.workdir))
        return NestedResult(ok=1, changed=0, failed=0, unreachable=0, rc=0, seconds=0.1)

    run_profile(
        store,
        operation_id,
        "base",
        ProfileSettings(transport="pct", environ=GATES, node_ssh=node_ssh(files), probe=lambda s, v: None),
        runner=runner,
        report=print,
    )
    assert modes[0] == 0o700 and set(modes[1:]) == {0o600}
