# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_preflight against the simulator: one real ansible run per shape, the rest in-process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError, ProviderError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import CHECK_CODES, run_preflight
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.driver import PreflightFailed
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import wait_task

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
UNDECIDABLE = {"template_revision", "dhcp_available", "guest_readiness", "workflow_permitted"}
TEMPLATE_REST = ("template_is_template", "template_disk", "template_cloudinit_drive", "template_guest_agent")
STORAGE_REST = ("storage_active", "storage_images", "storage_capacity")
GIB = 1024**3


def settings_for(conn: dict[str, t.Any], token: str = "full", **overrides: t.Any) -> t.Any:
    values: dict[str, t.Any] = {
        "host": conn["host"],
        "port": conn["port"],
        "token_id": conn["tokens"][token]["id"],
        "token_secret": conn["tokens"][token]["secret"],
        "ca_path": conn["ca_file"],
        "timeout": 10,
    }
    values.update(overrides)
    return build_settings(**values)


def planned(target_vmid: int = 201) -> t.Any:
    return build_plan(
        catalog_path=REPO / "examples/catalog.yml",
        definition_path=REPO / "examples/definition.yml",
        target_vmid=target_vmid,
    )


def preflight(
    conn: dict[str, t.Any], token: str = "full", environ: dict[str, str] | None = None, **overrides: t.Any
) -> dict[str, t.Any]:
    result = run_preflight(planned(), settings_for(conn, token, **overrides), environ=environ or {}, fail_on="never")
    text = json.dumps(result)
    for tok in conn["tokens"].values():
        assert tok["secret"] not in text
    return result


def statuses(result: dict[str, t.Any]) -> dict[str, str]:
    return {c["code"]: c["status"] for c in result["checks"]}


def expect(**overrides: str) -> dict[str, str]:
    out = {code: ("unknown" if code in UNDECIDABLE else "passed") for code in CHECK_CODES}
    out.update(overrides)
    return out


def assert_get_only_and_valid(pvesim: t.Any) -> None:
    entries = pvesim.requests()
    assert entries, "no request reached the simulator"
    assert {e["method"] for e in entries} == {"GET"}
    assert pvesim.schema_violations() == []


def test_healthy(pvesim: t.Any) -> None:
    conn = pvesim.connection
    result = preflight(conn)
    assert statuses(result) == expect()
    assert result["provider_scope_id"] == preflight(conn, fingerprint=conn["fingerprint_sha256"])["provider_scope_id"]
    assert result["capabilities"]["pve_major"] == 9
    assert result["creation_enabled"] is False and result["vmid_reserved"] is False
    assert_get_only_and_valid(pvesim)


def test_healthy_with_pin_and_gate(pvesim: t.Any) -> None:
    conn = pvesim.connection
    result = preflight(
        conn, environ={"VMANYWARE_PROVISIONING_ENABLED": "true"}, ca_path=None, fingerprint=conn["fingerprint_sha256"]
    )
    assert statuses(result) == expect() and result["creation_enabled"] is True


def test_missing_template(pvesim: t.Any) -> None:
    pvesim.delete_vm(9000)
    assert statuses(preflight(pvesim.connection)) == expect(
        template_exists="failed", **{c: "unknown" for c in TEMPLATE_REST}
    )


def test_wrong_disk_size(pvesim: t.Any) -> None:
    pvesim.set_vm_config(9000, set={"scsi0": "local-lvm:base-9000-disk-0,size=10G"})
    assert statuses(preflight(pvesim.connection)) == expect(template_disk="failed")


def test_not_a_template_no_cloudinit_no_agent(pvesim: t.Any) -> None:
    pvesim.set_vm_config(9000, delete=["ide2", "template"], set={"agent": "0"})
    assert statuses(preflight(pvesim.connection)) == expect(
        template_is_template="failed", template_cloudinit_drive="failed", template_guest_agent="failed"
    )


def test_no_cloudinit_drive(pvesim: t.Any) -> None:
    pvesim.set_vm_config(9000, delete=["ide2"])
    assert statuses(preflight(pvesim.connection)) == expect(template_cloudinit_drive="failed")


def test_full_storage(pvesim: t.Any) -> None:
    pvesim.set_storage("local-lvm", avail=5 * GIB)
    assert statuses(preflight(pvesim.connection)) == expect(storage_capacity="failed")


def test_storage_without_images(pvesim: t.Any) -> None:
    pvesim.set_storage("local-lvm", content="rootdir")
    assert statuses(preflight(pvesim.connection)) == expect(storage_images="failed")


def test_storage_disabled(pvesim: t.Any) -> None:
    pvesim.set_storage("local-lvm", enabled=False)
    assert statuses(preflight(pvesim.connection)) == expect(storage_active="failed", storage_capacity="unknown")


def test_missing_bridge(pvesim: t.Any) -> None:
    pvesim.delete_bridge("vmbr0")
    assert statuses(preflight(pvesim.connection)) == expect(bridge_exists="failed")


def test_vmid_taken(pvesim: t.Any) -> None:
    conn = pvesim.connection
    with ProxmoxClient(settings_for(conn)) as client:
        upid = client.post(f"/nodes/{conn['node']}/qemu/9000/clone", newid=201, name="taken", full=1)
        outcome = wait_task(client, upid, timeout=60)
        assert outcome.succeeded, outcome
    pvesim.clear_requests()
    assert statuses(preflight(conn)) == expect(vmid_free="failed")
    assert_get_only_and_valid(pvesim)


def test_limited_token(pvesim: t.Any) -> None:
    result = preflight(pvesim.connection, token="limited")
    assert statuses(result) == expect(privileges="failed")
    message = next(c["message"] for c in result["checks"] if c["code"] == "privileges")
    assert "VM.Clone on /vms/9000 (clone)" in message
    assert "Datastore.AllocateSpace on /storage/local-lvm (clone)" in message
    assert "VM.GuestAgent.Unrestricted on /vms/201 (readiness)" in message


def test_wrong_fingerprint_refused_before_token(pvesim: t.Any) -> None:
    conn = pvesim.connection
    wrong = "00" * 32
    result = preflight(conn, ca_path=None, fingerprint=wrong)
    assert statuses(result) == {c: ("failed" if c == "api_reachable" else "unknown") for c in CHECK_CODES}
    assert pvesim.requests() == []  # the handshake failed the pin: no request, no token reached the server
    assert result["provider_scope_id"] is not None  # derived from the configured pin


def test_unverified_tls_refused_before_token(pvesim: t.Any) -> None:
    """validate_certs false and no pin: the preflight refuses before a connection, so the token never travels unverified."""
    with pytest.raises(ConfigurationError) as info:
        preflight(pvesim.connection, ca_path=None, validate_certs=False)
    assert info.value.code == "tls_unverified" and pvesim.requests() == []


def test_unverified_read_only_opt_in_reads_and_marks(pvesim: t.Any) -> None:
    result = preflight(pvesim.connection, ca_path=None, validate_certs=False, unverified_tls_read_only=True)
    assert statuses(result) == expect()
    assert result["tls_verified"] is False and result["provider_scope_id"] is None and result["warnings"]
    assert "UNVERIFIED" in result["checks"][0]["message"] and "tls_unverified" in result["creation_blockers"]
    assert_get_only_and_valid(pvesim)


def test_expired_token(pvesim: t.Any) -> None:
    pvesim.set_token(pvesim.connection["tokens"]["full"]["id"], expire=int(time.time()) - 3600)
    result = preflight(pvesim.connection)
    assert statuses(result) == {c: ("failed" if c == "api_reachable" else "unknown") for c in CHECK_CODES}
    assert "rejected the credentials" in result["checks"][0]["message"]


@pytest.mark.parametrize("status", [500, 596])
def test_server_errors(pvesim: t.Any, status: int) -> None:
    pvesim.add_fault("GET", r"/qemu/9000/config$", action="http_error", status=status, message="simulated failure")
    pvesim.add_fault("GET", r"/cluster/nextid", action="http_error", status=status, message="simulated failure")
    result = preflight(pvesim.connection)
    assert statuses(result) == expect(
        template_exists="unknown", vmid_free="unknown", **{c: "unknown" for c in TEMPLATE_REST}
    )
    assert len(pvesim.requests("GET", r"/cluster/nextid")) == 3  # bounded GET retries
    assert "simulated failure" not in json.dumps(result)


def test_server_error_on_version(pvesim: t.Any) -> None:
    pvesim.add_fault("GET", r"^/api2/json/version$|/version$", action="http_error", status=500, message="boom")
    result = preflight(pvesim.connection)
    assert statuses(result) == {c: ("unknown") for c in CHECK_CODES}


def test_endpoint_missing_501(pvesim: t.Any) -> None:
    pvesim.add_fault("GET", r"/access/permissions", action="http_error", status=501, message="Method not implemented")
    pvesim.add_fault("GET", r"/network", action="http_error", status=501, message="Method not implemented")
    result = preflight(pvesim.connection)
    assert statuses(result) == expect(privileges="unknown", bridge_exists="unknown")
    assert len(pvesim.requests("GET", r"/network")) == 1  # 501 is not retried


def test_in_process_fail_on(pvesim: t.Any) -> None:
    pvesim.delete_bridge("vmbr0")
    with pytest.raises(PreflightFailed) as info:
        run_preflight(planned(), settings_for(pvesim.connection), environ={}, fail_on="failed")
    result = info.value.to_result()
    assert result["error_code"] == "preflight_failed" and statuses(result)["bridge_exists"] == "failed"


def test_client_errors_against_simulator(pvesim: t.Any) -> None:
    conn = pvesim.connection
    with ProxmoxClient(settings_for(conn, token="limited")) as client:
        with pytest.raises(ProviderError) as info:
            client.post(f"/nodes/{conn['node']}/qemu/9000/clone", newid=202, name="nope", full=1)
    assert info.value.code == "permission_denied"
    assert info.value.details["path"] == "/vms/9000" and info.value.details["privilege"] == "VM.Clone"
    with ProxmoxClient(settings_for(conn)) as client:
        with pytest.raises(ProviderError) as info:
            client.get(f"/nodes/{conn['node']}/qemu/4242/config")
    assert info.value.code == "not_found"
    assert pvesim.schema_violations() == []


# -- real ansible runs ----------------------------------------------------------------------------------------------


def _ansible(
    conn: dict[str, t.Any],
    args: dict[str, t.Any],
    *extra: str,
    token: str = "full",
    env_extra: dict[str, str | None] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_NOCOLOR="1",
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"][token]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"][token]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
    )
    env.pop("VMANYWARE_PROVISIONING_ENABLED", None)
    for key, value in (env_extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    base = {
        "catalog_path": str(REPO / "examples/catalog.yml"),
        "definition_path": str(REPO / "examples/definition.yml"),
        "target_vmid": 201,
    }
    base.update(args)
    command = [
        str(BIN / "ansible"),
        "localhost",
        "-m",
        "vmanyware.proxmox.vmanyware_preflight",
        "-a",
        json.dumps(base),
        *extra,
    ]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)


def _result(output: str) -> dict[str, t.Any]:
    return json.loads(output[output.index("=> {") + 3 :])


@pytest.mark.parametrize("check", [False, True], ids=["normal", "check"])
def test_ansible_run_healthy(pvesim: t.Any, check: bool) -> None:
    completed = _ansible(pvesim.connection, {}, *(["--check"] if check else []))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = _result(completed.stdout)
    assert statuses(result) == expect() and result["changed"] is False
    assert result["plan_hash"] == planned().plan_hash and "planHash" not in result  # module keys are snake_case
    assert_get_only_and_valid(pvesim)


def test_ansible_run_failed_and_redacted(pvesim: t.Any) -> None:
    conn = pvesim.connection
    secret = conn["tokens"]["limited"]["secret"]
    completed = _ansible(conn, {"api_token_secret": secret}, "-vvvv", token="limited")
    assert completed.returncode != 0
    result = _result(completed.stdout[completed.stdout.index("FAILED!") :])
    assert result["error_code"] == "preflight_failed" and statuses(result)["privileges"] == "failed"
    assert secret not in completed.stdout and secret not in completed.stderr


def test_ansible_run_bad_gate_before_network(pvesim: t.Any) -> None:
    completed = _ansible(pvesim.connection, {}, env_extra={"VMANYWARE_PROVISIONING_ENABLED": "yes"})
    assert completed.returncode != 0
    assert _result(completed.stdout)["error_code"] == "configuration_error"
    assert pvesim.requests() == []


def test_ansible_run_wrong_pin_redacted(pvesim: t.Any) -> None:
    conn = pvesim.connection
    secret = conn["tokens"]["full"]["secret"]
    completed = _ansible(
        conn, {"api_fingerprint": "AA:" * 31 + "AA", "fail_on": "unknown"}, "-vvvv", env_extra={"PROXMOX_CA_PATH": None}
    )
    assert completed.returncode != 0
    result = _result(completed.stdout[completed.stdout.index("FAILED!") :])
    assert result["error_code"] == "preflight_failed" and statuses(result)["api_reachable"] == "failed"
    assert secret not in completed.stdout + completed.stderr
    assert pvesim.requests() == []


def test_ansible_run_unverified_tls_refused_then_read_only_warns(pvesim: t.Any) -> None:
    """Through ansible: PROXMOX_VALIDATE_CERTS=false alone fails with tls_unverified and sends nothing; with
    PROXMOX_UNVERIFIED_TLS_READ_ONLY=true the preflight reads with GETs and Ansible shows the warning."""
    conn = pvesim.connection
    unverified = {"PROXMOX_CA_PATH": None, "PROXMOX_VALIDATE_CERTS": "false"}
    completed = _ansible(conn, {}, env_extra=unverified)
    assert completed.returncode != 0
    assert _result(completed.stdout)["error_code"] == "tls_unverified" and pvesim.requests() == []
    completed = _ansible(conn, {}, env_extra=dict(unverified, PROXMOX_UNVERIFIED_TLS_READ_ONLY="true"))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    result = _result(completed.stdout)
    assert result["tls_verified"] is False and result["provider_scope_id"] is None
    assert "UNVERIFIED TLS" in completed.stderr + completed.stdout
    assert conn["tokens"]["full"]["secret"] not in completed.stdout + completed.stderr
    assert_get_only_and_valid(pvesim)
