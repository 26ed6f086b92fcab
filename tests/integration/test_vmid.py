# SPDX-License-Identifier: GPL-3.0-or-later
"""Automatic VMID allocation (``vmanyware_vmid``, ``_vmid``) against the simulator.

In-process calls cover the rules (what is skipped, ranges, reuse, expiry, the lease becoming the
operation's target claim); real ``ansible-playbook`` runs prove that ten processes, and ten forks
of one process, reserving at once get ten distinct VMIDs. Proxmox is only ever read.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vmid_support import Reserver  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture()
def reserver(pvesim: t.Any, tmp_path: Path) -> Reserver:
    return Reserver(pvesim, tmp_path)


def assert_read_only(pvesim: t.Any) -> None:
    assert {entry["method"] for entry in pvesim.requests()} <= {"GET"}
    assert pvesim.schema_violations() == []


def test_lowest_free_skips_containers_templates_claims_and_leases(reserver: Reserver, pvesim: t.Any) -> None:
    pvesim.add_container(100, name="ct-web")
    pvesim.add_container(101, name="ct-template", template=True)
    held = reserver.create_operation(102)  # a live local operation holds 102 (no VM yet)
    assert held["created"]
    first = reserver.reserve("alpha")
    assert first["vmid"] == 103 and first["changed"] and not first["reused"]
    assert first["vmid_range"] == {"lower": 100, "upper": 999999999, "source": "default"}
    assert first["lease"]["owner"] == "alpha" and first["lease"]["purpose"] == "vm"
    second = reserver.reserve("beta")  # 103 is leased to alpha
    assert second["vmid"] == 104
    again = reserver.reserve("alpha")  # the same owner gets its lease back
    assert again["vmid"] == 103 and again["reused"] and not again["changed"] and again["lease"] == first["lease"]
    # the qemu template 9000 is skipped as well: a template range starting there
    template = reserver.reserve("tpl", purpose="template")
    assert template["vmid"] == 9001 and template["vmid_range"]["source"] == "template_default"
    ranged = reserver.reserve("gamma", vmid_range=[9000, 9002])
    assert ranged["vmid"] == 9002
    with pytest.raises(VmanywareError) as info:
        reserver.reserve("delta", vmid_range=[9000, 9002])
    assert info.value.code == "no_free_vmid" and info.value.details["lower"] == 9000
    assert pvesim.requests(path_regex=r"^/cluster/nextid$")
    assert_read_only(pvesim)


def test_nextid_refusal_of_an_unlisted_guest_is_skipped(reserver: Reserver, pvesim: t.Any) -> None:
    # a VM the token cannot audit is absent from /cluster/resources; nextid still refuses its VMID
    with ProxmoxClient(reserver.settings) as client:
        upid = client.post("/nodes/pve-test/qemu/9000/clone", newid=100, full=True, storage="local-lvm")
    assert upid
    pvesim.set_token(reserver.params["api_token_id"], privileges={"/vms/9000": ["VM.Audit"], "/vms/101": ["VM.Audit"]})
    result = reserver.reserve("alpha")
    assert result["vmid"] == 101
    assert reserver.leases() == [Path(reserver.store.lease_path(reserver.scope, 101)).name]


def test_datacenter_next_id_range(reserver: Reserver, pvesim: t.Any) -> None:
    pvesim.root_call("PUT", "/cluster/options", **{"next-id": "lower=500,upper=502"})
    # the test token lacks Sys.Audit on /: PVE hides next-id from it, so the default range applies
    assert reserver.reserve("alpha")["vmid_range"]["source"] == "default"
    reserver.release("alpha")
    pvesim.set_token(reserver.params["api_token_id"], privileges={"/": ["Sys.Audit"], "/vms": ["VM.Audit"]})
    first = reserver.reserve("alpha")
    assert first["vmid"] == 500 and first["vmid_range"] == {"lower": 500, "upper": 501, "source": "next_id"}
    assert reserver.reserve("beta")["vmid"] == 501
    with pytest.raises(VmanywareError) as info:
        reserver.reserve("gamma")  # upper is exclusive
    assert info.value.code == "no_free_vmid"


def test_expiry_release_and_given_vmid(reserver: Reserver, pvesim: t.Any) -> None:
    short = reserver.reserve("alpha", lease_seconds=1)
    assert short["vmid"] == 100
    with pytest.raises(VmanywareError) as info:
        reserver.reserve("beta", vmid=100)  # alpha's live lease
    assert info.value.code == "vmid_taken" and info.value.details["rule"] == "leased_by_another_owner"
    time.sleep(1.2)
    # expired: the lowest free VMID is 100 again, for another owner; alpha's expired lease is replaced
    taken = reserver.reserve("beta")
    assert taken["vmid"] == 100 and not taken["reused"]
    assert reserver.release("alpha")["released"] == []
    # the apply run of alpha names 100 (its confirmation): beta holds it now
    with pytest.raises(VmanywareError):
        reserver.reserve("alpha", vmid=100)
    assert reserver.release("beta", check_mode=True) == {
        "changed": True,
        "released": [100],
        "provider_scope_id": reserver.scope,
    }
    assert reserver.release("beta")["released"] == [100] and reserver.leases() == []
    # free again: alpha's apply run leases its confirmed VMID anew
    renewed = reserver.reserve("alpha", vmid=100)
    assert renewed["changed"] and renewed["lease"]["vmid"] == 100 and not renewed["reused"]
    assert reserver.reserve("alpha", vmid=100)["reused"]
    # a guest on the VMID: vmid_taken, nothing reserved
    pvesim.add_container(150)
    with pytest.raises(VmanywareError) as info:
        reserver.reserve("gamma", vmid=150)
    assert info.value.code == "vmid_taken" and info.value.details["rule"] == "on_proxmox"
    assert reserver.leases() == [Path(reserver.store.lease_path(reserver.scope, 100)).name]
    assert_read_only(pvesim)


def test_lease_becomes_the_target_claim_and_its_release_frees_the_vmid(reserver: Reserver, pvesim: t.Any) -> None:
    lease = reserver.reserve("alpha")
    assert lease["vmid"] == 100
    created = reserver.create_operation(100)
    operation_id = created["operation_id"]
    assert reserver.leases() == []  # the lease is now the operation's target claim
    assert reserver.store.target_holder(reserver.scope, 100) == operation_id
    held = reserver.reserve("alpha", vmid=100)  # an apply run re-run: the claim answers
    assert held == {
        "changed": False,
        "vmid": 100,
        "reused": True,
        "claimed_by": operation_id,
        "lease": None,
        "vmid_range": None,
        "provider_scope_id": reserver.scope,
    }
    assert reserver.reserve("beta")["vmid"] == 101  # the claim keeps 100 from other allocations
    reserver.store.abandon_operation(operation_id)  # releasing the claim is all it takes
    assert reserver.reserve("gamma")["vmid"] == 100


def test_check_mode_writes_no_lease(reserver: Reserver, pvesim: t.Any) -> None:
    preview = reserver.reserve("alpha", check_mode=True)
    # check mode says what a real run would do (a new lease: changed) and writes nothing
    assert preview["vmid"] == 100 and preview["changed"] and reserver.leases() == []
    assert reserver.reserve("alpha")["vmid"] == 100


# -- real ansible-playbook runs -------------------------------------------------------------------


def _env(pvesim: t.Any, journal: Path) -> dict[str, str]:
    conn = pvesim.connection
    return dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        VMANYWARE_JOURNAL_DIR=str(journal),
        ANSIBLE_NOCOLOR="1",
    )


def _write_playbook(path: Path, hosts: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Reserve a VMID",
                    "hosts": hosts,
                    "gather_facts": False,
                    "connection": "local",
                    "tasks": [
                        {
                            "name": "Reserve",
                            "vmanyware.proxmox.vmanyware_vmid": {
                                "owner": "{{ vmid_owner | default(inventory_hostname) }}"
                            },
                            "register": "reserved",
                        },
                        {
                            "name": "Show",
                            "ansible.builtin.debug": {"msg": "RESERVED {{ inventory_hostname }} {{ reserved.vmid }}"},
                        },
                    ],
                }
            ],
            sort_keys=False,
        )
    )
    return path


def _reserved(stdout: str) -> dict[str, int]:
    found = {}
    for line in stdout.splitlines():
        if '"msg": "RESERVED ' in line:
            host, vmid = line.split('"msg": "RESERVED ')[1].rstrip('"').split()
            found[host] = int(vmid)
    return found


def test_ten_concurrent_playbook_processes_get_ten_vmids(pvesim: t.Any, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    playbook = _write_playbook(tmp_path / "reserve.yml", "localhost")
    env = _env(pvesim, journal)
    procs = [
        subprocess.Popen(
            [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook), "-e", "vmid_owner=process-%d" % index],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for index in range(10)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 10, outputs
    vmids = [_reserved(out)["localhost"] for out in outputs]
    assert sorted(vmids) == list(range(100, 110)), vmids
    assert len(list((journal / "leases").iterdir())) == 10
    assert_read_only(pvesim)


def test_ten_forks_get_ten_vmids(pvesim: t.Any, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    playbook = _write_playbook(tmp_path / "reserve.yml", "all")
    inventory = ",".join("env%02d" % index for index in range(10)) + ","
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", inventory, "--forks", "10", str(playbook)],
        env=_env(pvesim, journal),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    found = _reserved(result.stdout)
    assert sorted(found) == ["env%02d" % index for index in range(10)]
    assert sorted(found.values()) == list(range(100, 110)), found
    assert_read_only(pvesim)
    # state: released gives the leases back (no API request: the provider is identified by its certificate)
    pvesim.clear_requests()
    release = tmp_path / "release.yml"
    release.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Release",
                    "hosts": "all",
                    "gather_facts": False,
                    "connection": "local",
                    "tasks": [
                        {
                            "name": "Release",
                            "vmanyware.proxmox.vmanyware_vmid": {
                                "owner": "{{ inventory_hostname }}",
                                "state": "released",
                            },
                            "register": "released",
                        },
                        {
                            "name": "Check",
                            "ansible.builtin.assert": {
                                "that": ["released is changed", "released.released | length == 1"]
                            },
                        },
                    ],
                }
            ],
            sort_keys=False,
        )
    )
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", inventory, "--forks", "10", str(release)],
        env=_env(pvesim, journal),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert list((journal / "leases").iterdir()) == [] and pvesim.requests() == []


@pytest.mark.parametrize("read_only", [False, True], ids=["unverified", "read-only-opt-in"])
def test_unverified_tls_is_refused_and_no_lease_is_written(reserver: Reserver, pvesim: t.Any, read_only: bool) -> None:
    """A lease is bound to a provider scope computed from the certificate: never from an unverified one, opt-in or not."""
    from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_vmid  # pylint: disable=import-outside-toplevel

    params = dict(
        reserver.params,
        validate_certs=False,
        ca_path=None,
        unverified_tls_read_only=read_only,
        api_user=None,
        api_password=None,
        api_fingerprint=None,
        owner="tls-test",
        purpose="vm",
        vmid=None,
        vmid_range=None,
        lease_seconds=600,
    )
    pvesim.clear_requests()
    for state in ("reserved", "released"):
        with pytest.raises(VmanywareError) as info:
            vmanyware_vmid.action(dict(params, state=state), False, False)
        assert info.value.code == "tls_unverified"
    assert pvesim.requests() == [] and reserver.leases() == []
    assert vmanyware_vmid.action(
        dict(params, state="reserved", validate_certs=True, ca_path=reserver.params["ca_path"]), False, False
    )["vmid"]
