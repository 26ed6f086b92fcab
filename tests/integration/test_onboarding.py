# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Onboarding against the simulator: certificate inspection and the capability report (demo and three-node seeds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.capabilities import run_report
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.certificate import inspect_endpoint
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def report(conn: dict[str, t.Any], token: str = "full", **kwargs: t.Any) -> dict[str, t.Any]:
    settings = build_settings(
        host=conn["host"],
        port=conn["port"],
        token_id=conn["tokens"][token]["id"],
        token_secret=conn["tokens"][token]["secret"],
        ca_path=conn["ca_file"],
        timeout=10,
    )
    with ProxmoxClient(settings) as client:
        result = run_report(client, **kwargs)
    assert conn["tokens"][token]["secret"] not in json.dumps(result)
    return result


def operations(result: dict[str, t.Any]) -> dict[str, dict[str, t.Any]]:
    return {item["operation"]: item for item in result["operations"]}


def privilege_reasons(item: dict[str, t.Any]) -> list[tuple[str, str]]:
    return [(r["privilege"], r["path"]) for r in item["reasons"] if r["kind"] == "privilege" and "path" in r]


def assert_reads_only_and_valid(pvesim: t.Any) -> None:
    assert {entry["method"] for entry in pvesim.requests()} == {"GET"}
    assert pvesim.schema_violations() == []


def test_certificate_of_the_simulator(pvesim: t.Any) -> None:
    conn = pvesim.connection
    result = inspect_endpoint(conn["host"], conn["port"], ca_path=conn["ca_file"], timeout=10)
    assert result["pin_candidate"] == conn["fingerprint_sha256"]  # the colon form pvesim (like pvenode) prints
    assert result["verification"]["ca_path"] == {"verified": True, "reason": None}
    assert result["verification"]["system_store"]["verified"] is False
    assert (
        result["chain"][0]["san_ip"] == ["127.0.0.1"]
        and result["host_matches"]
        and result["certificate_warnings"] == []
    )
    assert pvesim.requests() == []  # handshakes only: the simulator saw no HTTP request


def test_demo_single_node(pvesim: t.Any) -> None:
    result = report(pvesim.connection)
    assert result["version"] == {"version": "9.1.3", "major": 9, "minor": 1}
    assert result["cluster"] == {"name": None, "quorate": None, "readable": False}  # Sys.Audit on / is not granted
    (node,) = result["nodes"]
    assert node["node"] == "pve-test" and node["online"] and node["bridges"] == ["vmbr0"]
    assert [(s["storage"], s["content"]) for s in node["storages"]] == [("local-lvm", ["images", "rootdir"])]
    ops = operations(result)
    assert ops["vm_provisioning"]["reasons"] == [] and ops["vm_provisioning"]["status"] == "available"
    assert ops["vm_provisioning"]["placement"] == {
        "node": "pve-test",
        "template": 9000,
        "storage": "local-lvm",
        "bridge": "vmbr0",
    }
    # 'local' (with import) is invisible to this token, so no node offers an import storage
    assert ops["template_build"]["status"] == "unavailable"
    assert {
        "kind": "storage_content",
        "node": "pve-test",
        "content": "import",
        "message": "Node pve-test has no active storage with content type import.",
    } in ops["template_build"]["reasons"]
    assert ops["containers"]["status"] == "unavailable" and ops["containers"]["via"] == "ssh"
    assert ops["cleanup"]["status"] == "available"
    assert result["summary"] == {"available": 2, "unavailable": 2}
    assert_reads_only_and_valid(pvesim)


def test_limited_token_lists_each_missing_privilege_with_path_and_purpose(pvesim: t.Any) -> None:
    ops = operations(report(pvesim.connection, "limited", template_vmid=9000))
    missing = privilege_reasons(ops["vm_provisioning"])
    assert ("VM.Clone", "/vms/9000") in missing and ("Datastore.AllocateSpace", "/storage/local-lvm") in missing
    assert ("VM.Snapshot", "/vms") in missing and ("VM.GuestAgent.Unrestricted", "/vms") in missing
    clone = next(r for r in ops["vm_provisioning"]["reasons"] if r.get("privilege") == "VM.Clone")
    assert clone["purpose"] == "clone: clone the template into the new VM"
    assert clone["message"] == "VM.Clone on /vms/9000 is missing: clone: clone the template into the new VM."


def test_three_node_cluster(pvesim: t.Any) -> None:
    pvesim.reset("cluster")
    pvesim.set_node_online("pve-test3", False)
    result = report(pvesim.connection)
    assert result["cluster"] == {"name": "vmanyware-lab", "quorate": True, "readable": True}
    nodes = {n["node"]: n for n in result["nodes"]}
    assert sorted(nodes) == ["pve-test", "pve-test2", "pve-test3"]
    assert [nodes[n]["online"] for n in sorted(nodes)] == [True, True, False] and nodes["pve-test"]["local"]
    assert nodes["pve-test2"]["bridges"] == ["vmbr0", "vmbr1", "vmbr2"] and nodes["pve-test3"]["storages"] == []
    shared = next(s for s in nodes["pve-test2"]["storages"] if s["storage"] == "shared")
    assert shared["content"] == ["images", "import", "iso", "snippets"] and shared["shared"]
    assert result["vnets"] == [{"vnet": "labnet", "zone": "lab", "alias": "lab network"}]
    assert "Sys.Audit" in result["privileges"]["/"]
    ops = operations(result)
    build = ops["template_build"]
    assert build["reasons"] == [] and build["status"] == "available" and build["via"] == "api"
    # the token's own ACL on /nodes/pve-test (Sys.Audit only) replaces the inherited Sys.AccessNetwork of /nodes there,
    # so only the other online node may download: PVE's "more specific ACL wins"
    assert build["placement"] == {"node": "pve-test2", "import": "shared", "storage": "local-lvm", "bridge": "vmbr0"}
    assert ops["vm_provisioning"]["status"] == "available" and ops["vm_provisioning"]["placement"]["node"] == "pve-test"
    # offline nodes are never read (a proxied request to them would fail with 595)
    assert not pvesim.requests(path_regex=r"^/nodes/pve-test3/")
    assert_reads_only_and_valid(pvesim)


def test_old_version_needs_ssh_for_template_build(pvesim: t.Any) -> None:
    pvesim.reset("cluster")
    conn = pvesim.connection
    settings = build_settings(
        host=conn["host"],
        port=conn["port"],
        token_id=conn["tokens"]["full"]["id"],
        token_secret=conn["tokens"]["full"]["secret"],
        ca_path=conn["ca_file"],
        timeout=10,
    )

    class OldVersion(ProxmoxClient):
        def get(self, path: str, /, **params: t.Any) -> t.Any:
            if path == "/version":
                return {"version": "8.3.5", "release": "8.3", "repoid": "0"}
            return super().get(path, **params)

    with OldVersion(settings) as client:
        ops = operations(run_report(client))
    build = ops["template_build"]
    assert build["status"] == "unavailable" and build["via"] == "ssh"
    assert [r["minimum"] for r in build["reasons"] if r["kind"] == "version"] == ["8.4"]
    # on PVE 8 the guest agent stages need VM.Monitor, which this (PVE 9 shaped) token lacks
    assert privilege_reasons(ops["vm_provisioning"]) == [("VM.Monitor", "/vms")]


def test_ansible_module_run(pvesim: t.Any) -> None:
    conn = pvesim.connection
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
    )
    for module in ("vmanyware_capabilities", "vmanyware_certificate_info"):
        completed = subprocess.run(
            [str(BIN / "ansible"), "localhost", "-m", f"vmanyware.proxmox.{module}", "--check"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert completed.returncode == 0, completed.stdout + completed.stderr
        result = json.loads(completed.stdout[completed.stdout.index("=> {") + 3 :])
        assert result["changed"] is False
        assert conn["tokens"]["full"]["secret"] not in completed.stdout
        if module == "vmanyware_capabilities":
            assert result["summary"] == {"available": 2, "unavailable": 2}
        else:
            assert result["pin_candidate"] == conn["fingerprint_sha256"]


def test_capabilities_playbook_prints_a_table(pvesim: t.Any) -> None:
    pvesim.reset("cluster")
    conn = pvesim.connection
    env = dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_FINGERPRINT=conn["fingerprint_sha256"],
        ANSIBLE_NOCOLOR="1",
    )
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), "vmanyware.proxmox.capabilities", "-e", "vmanyware_template_vmid=9000"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = completed.stdout
    assert completed.returncode == 0, out + completed.stderr
    assert "Proxmox VE 9.1.3; cluster vmanyware-lab; VNets: labnet" in out
    assert (
        "pve-test2 online: storages local-lvm=images,rootdir shared=images,import,iso,snippets; bridges vmbr0, vmbr1, vmbr2"
        in out
    )
    for line in (
        "available    vm_provisioning  via api",
        "available    template_build   via api",
        "available    cleanup          via api",
        "unavailable  containers       via ssh: Proxmox VE has no API to run commands inside a container",
    ):
        assert line in out, out
    assert conn["tokens"]["full"]["secret"] not in out
    assert_reads_only_and_valid(pvesim)


def test_capabilities_unverified_tls_refused_or_read_only_marked(pvesim: t.Any) -> None:
    """Onboarding before a pin: vmanyware_certificate_info still handshakes only; vmanyware_capabilities sends nothing over
    unverified TLS unless PROXMOX_UNVERIFIED_TLS_READ_ONLY=true, then GETs only, tls_verified false, a warning, no scope."""
    conn = pvesim.connection
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_VALIDATE_CERTS="false",
    )
    env.pop("PROXMOX_CA_PATH", None)
    env.pop("PROXMOX_FINGERPRINT", None)

    def run(module: str, **extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, t.Any]]:
        completed = subprocess.run(
            [str(BIN / "ansible"), "localhost", "-m", f"vmanyware.proxmox.{module}"],
            cwd=REPO,
            env=dict(env, **extra),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert conn["tokens"]["full"]["secret"] not in completed.stdout + completed.stderr
        return completed, json.loads(completed.stdout[completed.stdout.index("=> {") + 3 :])

    completed, result = run("vmanyware_certificate_info")
    assert completed.returncode == 0 and result["pin_candidate"] == conn["fingerprint_sha256"]
    completed, result = run("vmanyware_capabilities")
    assert completed.returncode != 0 and result["error_code"] == "tls_unverified"
    assert pvesim.requests() == []
    completed, result = run("vmanyware_capabilities", PROXMOX_UNVERIFIED_TLS_READ_ONLY="true")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert (
        result["tls_verified"] is False
        and result["provider_scope_id"] is None
        and "UNVERIFIED TLS" in completed.stdout + completed.stderr
    )
    assert pvesim.requests() and {entry["method"] for entry in pvesim.requests()} == {"GET"}
