# SPDX-License-Identifier: GPL-3.0-or-later
"""Preflight checks against a scripted datacenter (recording transport; every request schema-validated)."""

from __future__ import annotations

import copy
import json
import typing as t
from pathlib import Path

import pytest
from format_samples import catalog, definition, dump
from pve_stubs import RecordingAdapter

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import UNVERIFIED_TLS_WARNING
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError, InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.permissions import STAGE_PRIVILEGES
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import (
    CHECK_CODES,
    parse_size_bytes,
    run_preflight,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.driver import (
    PreflightFailed,
    provisioning_enabled,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import poll_once, wait_task

schema_mod = pytest.importorskip("pvesim.schema")

SECRET = "planted-secret-7f3c9a1e"
NODE = "pve-test"
UNDECIDABLE = {"template_revision", "dhcp_available", "guest_readiness", "workflow_permitted"}
REPO = Path(__file__).resolve().parents[5]
ALL_PRIVS = sorted({r.privilege for rows in STAGE_PRIVILEGES.values() for r in rows})


def healthy_state() -> dict[str, t.Any]:
    return {
        "version": {"version": "9.1.3", "release": "9.1", "repoid": "0123abcd"},
        "template": {
            "template": 1,
            "scsi0": "local-lvm:base-9000-disk-0,size=8G",
            "ide2": "local-lvm:vm-9000-cloudinit,media=cdrom",
            "agent": "enabled=1,fstrim_cloned_disks=1",
            "digest": "d" * 40,
        },
        "storage": {
            "active": 1,
            "enabled": 1,
            "content": "images,rootdir",
            "avail": 100 * 1024**3,
            "total": 200 * 1024**3,
            "type": "lvmthin",
        },
        "bridges": [{"iface": "vmbr0", "type": "bridge", "active": 1}],
        "used_vmids": {9000},
        "privileges": {p: 1 for p in ALL_PRIVS},
        "errors": {},  # (method, path) -> (status, reason, body)
    }


class Datacenter:
    def __init__(self, state: dict[str, t.Any]) -> None:
        self.state = state

    def __call__(self, method: str, path: str, params: dict[str, t.Any]) -> tuple[int, str, t.Any]:
        s = self.state
        if (method, path) in s["errors"]:
            return s["errors"][(method, path)]
        if path == "/version":
            return 200, "OK", {"data": s["version"]}
        if path == f"/nodes/{NODE}/qemu/9000/config":
            if s["template"] is None:
                return 500, f"Configuration file 'nodes/{NODE}/qemu-server/9000.conf' does not exist", {"data": None}
            return 200, "OK", {"data": s["template"]}
        if path == f"/nodes/{NODE}/storage/local-lvm/status":
            if s["storage"] is None:
                return (
                    400,
                    "Parameter verification failed.",
                    {"data": None, "errors": {"storage": "No such storage.\n"}},
                )
            return 200, "OK", {"data": s["storage"]}
        if path == f"/nodes/{NODE}/storage":
            return 200, "OK", {"data": [dict(s["storage"] or {}, storage="local-lvm")] if s["storage"] else []}
        if path == f"/nodes/{NODE}/network":
            return 200, "OK", {"data": s["bridges"]}
        if path == "/cluster/nextid":
            vmid = int(params["vmid"])
            if vmid in s["used_vmids"]:
                return (
                    400,
                    "Parameter verification failed.",
                    {"data": None, "errors": {"vmid": f"VM {vmid} already exists\n"}},
                )
            return 200, "OK", {"data": vmid}
        if path == "/access/permissions":
            return 200, "OK", {"data": {params["path"]: dict(s["privileges"])}}
        return 501, "Method not implemented", {"data": None}


def planned(**changes: t.Any) -> t.Any:
    doc = definition()
    doc.update(changes)
    return build_plan(catalog=dump(catalog()), definition=dump(doc), target_vmid=201)


def run(
    state: dict[str, t.Any],
    *,
    fail_on: str = "never",
    environ: dict[str, str] | None = None,
    plan: t.Any = None,
    fingerprint: str | None = "ab" * 32,
) -> tuple[dict[str, str], dict[str, t.Any], RecordingAdapter]:
    adapter = RecordingAdapter(Datacenter(state))
    settings = build_settings(
        host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET, fingerprint=fingerprint
    )
    result = run_preflight(
        plan or planned(),
        settings,
        environ=environ or {},
        fail_on=fail_on,
        client_factory=lambda s: ProxmoxClient(s, adapter=adapter, sleep=lambda x: None),
    )
    assert_schema_valid(adapter)
    assert SECRET not in json.dumps(result)
    return {c["code"]: c["status"] for c in result["checks"]}, result, adapter


def assert_schema_valid(adapter: RecordingAdapter) -> None:
    schema = schema_mod.Schema.load()
    for method, path, params in adapter.sent:
        assert method == "GET" or path == "/access/ticket", (method, path)
        errors = schema.validate(method, path, params)
        assert not errors, (method, path, params, errors)


def expect(overrides: dict[str, str]) -> dict[str, str]:
    statuses = {code: "passed" for code in CHECK_CODES}
    statuses.update({code: "unknown" for code in UNDECIDABLE})
    statuses.update(overrides)
    return statuses


def test_healthy() -> None:
    checks, result, adapter = run(healthy_state())
    assert checks == expect({})
    assert list(checks) == list(CHECK_CODES)
    assert result["plan_hash"] == planned().plan_hash
    assert result["vmid_reserved"] is False and result["creation_enabled"] is False and result["changed"] is False
    assert result["provider_scope_id"].startswith("pve:")
    assert not [key for key in result if key != key.lower()]  # every return key in snake_case
    assert result["capabilities"] == {
        "pve_major": 9,
        "pve_minor": 1,
        "resize_returns_upid": True,
        "agent_exec_array": True,
        "guest_agent_privileges": "VM.GuestAgent.*",
    }
    assert result["summary"] == {"passed": 14, "failed": 0, "unknown": 4}
    paths = [p["path"] for m, pth, p in adapter.sent if pth == "/access/permissions"]
    assert paths == ["/vms/9000", "/vms/201", "/storage/local-lvm", f"/nodes/{NODE}", "/sdn/zones/localnetwork/vmbr0"]


def test_pve8_capabilities_and_privileges() -> None:
    state = healthy_state()
    state["version"] = {"version": "8.4.1", "release": "8.4", "repoid": "0123abcd"}
    state["privileges"] = {p: 1 for p in ALL_PRIVS if not p.startswith("VM.GuestAgent") and p != "VM.Monitor"}
    checks, result = run(state)[:2]
    assert checks["privileges"] == "failed"  # VM.Monitor is needed on PVE 8
    assert "VM.Monitor on /vms/201 (readiness)" in next(
        c["message"] for c in result["checks"] if c["code"] == "privileges"
    )
    assert result["capabilities"]["guest_agent_privileges"] == "VM.Monitor"
    state["privileges"]["VM.Monitor"] = 1
    assert run(state)[0] == expect({})


def _mutate(key: str, value: t.Any) -> dict[str, t.Any]:
    state = healthy_state()
    state[key] = value
    return state


TEMPLATE_UNKNOWN = {
    c: "unknown" for c in ("template_is_template", "template_disk", "template_cloudinit_drive", "template_guest_agent")
}
STORAGE_UNKNOWN = {c: "unknown" for c in ("storage_active", "storage_images", "storage_capacity")}


@pytest.mark.parametrize(
    "state,overrides",
    [
        (
            _mutate("version", {"version": "7.4.3", "release": "7.4", "repoid": "0123abcd"}),
            {"version_supported": "failed"},
        ),
        (_mutate("version", {"repoid": "0123abcd"}), {"version_supported": "unknown"}),
        (_mutate("template", None), {"template_exists": "failed", **TEMPLATE_UNKNOWN}),
        (_mutate("template", {**healthy_state()["template"], "template": 0}), {"template_is_template": "failed"}),
        (
            _mutate("template", {**healthy_state()["template"], "scsi0": "local-lvm:base-9000-disk-0,size=10G"}),
            {"template_disk": "failed"},
        ),
        (
            _mutate("template", {**healthy_state()["template"], "scsi0": "local-lvm:base-9000-disk-0"}),
            {"template_disk": "unknown"},
        ),
        (
            _mutate("template", {k: v for k, v in healthy_state()["template"].items() if k != "scsi0"}),
            {"template_disk": "failed"},
        ),
        (
            _mutate("template", {k: v for k, v in healthy_state()["template"].items() if k != "ide2"}),
            {"template_cloudinit_drive": "failed"},
        ),
        (_mutate("template", {**healthy_state()["template"], "agent": "0"}), {"template_guest_agent": "failed"}),
        (_mutate("template", {**healthy_state()["template"], "agent": "1"}), {}),
        (
            _mutate("template", {k: v for k, v in healthy_state()["template"].items() if k != "agent"}),
            {"template_guest_agent": "failed"},
        ),
        (_mutate("storage", None), {"storage_exists": "failed", **STORAGE_UNKNOWN}),
        (
            _mutate("storage", {**healthy_state()["storage"], "active": 0}),
            {"storage_active": "failed", "storage_capacity": "unknown"},
        ),
        (
            _mutate("storage", {**healthy_state()["storage"], "enabled": 0}),
            {"storage_active": "failed", "storage_capacity": "unknown"},
        ),
        (_mutate("storage", {**healthy_state()["storage"], "content": "iso,vztmpl"}), {"storage_images": "failed"}),
        (_mutate("storage", {**healthy_state()["storage"], "avail": 19 * 1024**3}), {"storage_capacity": "failed"}),
        (
            _mutate("storage", {"type": "lvmthin"}),
            {"storage_active": "unknown", "storage_images": "unknown", "storage_capacity": "unknown"},
        ),
        (_mutate("bridges", [{"iface": "vmbr1", "type": "bridge"}]), {"bridge_exists": "failed"}),
        (_mutate("used_vmids", {9000, 201}), {"vmid_free": "failed"}),
        (_mutate("privileges", {p: 1 for p in ALL_PRIVS if p != "SDN.Use"}), {"privileges": "failed"}),
    ],
    ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) and "version" not in v else None,
)
def test_failed_and_unknown_conditions(state: dict[str, t.Any], overrides: dict[str, str]) -> None:
    checks = run(state)[0]
    assert checks == expect(overrides)


ENDPOINT_ERRORS = [
    (403, "Permission check failed (/vms/9000, VM.Audit)", "unknown"),
    (500, "Internal Server Error", "unknown"),
    (596, "Broken pipe", "unknown"),
    (501, "Method not implemented", "unknown"),
]


@pytest.mark.parametrize("status,reason,code_status", ENDPOINT_ERRORS)
def test_endpoint_errors_are_unknown(status: int, reason: str, code_status: str) -> None:
    for path, codes in [
        (f"/nodes/{NODE}/qemu/9000/config", {"template_exists": code_status, **TEMPLATE_UNKNOWN}),
        (f"/nodes/{NODE}/storage/local-lvm/status", {"storage_exists": code_status, **STORAGE_UNKNOWN}),
        (f"/nodes/{NODE}/network", {"bridge_exists": code_status}),
        ("/cluster/nextid", {"vmid_free": code_status}),
        ("/access/permissions", {"privileges": code_status}),
    ]:
        state = healthy_state()
        state["errors"][("GET", path)] = (status, reason, {"data": None})
        state["errors"][("GET", f"/nodes/{NODE}/storage")] = (status, reason, {"data": None})
        checks, _result, adapter = run(state)
        assert checks == expect(codes), path
        attempts = sum(1 for m, p, _params in adapter.sent if p == path)
        assert attempts == (3 if status in (500, 596) else 1), path


def test_disabled_storage_without_status_falls_back_to_list() -> None:
    state = healthy_state()
    state["storage"] = {**state["storage"], "enabled": 0, "active": 0, "avail": 0}
    state["errors"][("GET", f"/nodes/{NODE}/storage/local-lvm/status")] = (
        500,
        "storage 'local-lvm' is disabled",
        {"data": None},
    )
    checks = run(state)[0]
    assert checks == expect({"storage_active": "failed", "storage_capacity": "unknown"})
    state["storage"] = None  # not in the (permission-filtered) list either: unknown, never failed
    state["errors"][("GET", f"/nodes/{NODE}/storage/local-lvm/status")] = (500, "Internal Server Error", {"data": None})
    checks = run(state)[0]
    assert checks == expect({"storage_exists": "unknown", **STORAGE_UNKNOWN})


def test_privileges_message_names_path_privilege_and_stage() -> None:
    state = healthy_state()
    state["privileges"] = {
        p: 1 for p in ALL_PRIVS if p not in ("VM.Allocate", "VM.Snapshot", "Datastore.AllocateSpace")
    }
    result = run(state)[1]
    message = next(c["message"] for c in result["checks"] if c["code"] == "privileges")
    assert "VM.Allocate on /vms/201 (clone)" in message
    assert "Datastore.AllocateSpace on /storage/local-lvm (clone)" in message
    assert "VM.Snapshot" not in message  # no snapshot requested: not required
    with_snapshot = run(state, plan=planned(snapshotAfterProvisioning=True))[1]
    assert "VM.Snapshot on /vms/201 (snapshot)" in next(
        c["message"] for c in with_snapshot["checks"] if c["code"] == "privileges"
    )


def test_a_plan_with_two_profiles_checks_the_profile_privileges_once() -> None:
    """Two profile steps are two steps of the registry's one profile row: the privileges check runs (no unknown stage),
    names the profile stage once, and passes when the guest-agent privileges are held."""
    profiled = catalog()
    profiled["images"][1]["distroFamily"] = "debian"  # the debian-13 mapping
    doc = definition()
    doc["profiles"] = [{"name": "ssh-hardening"}]  # base comes with it (required)
    declarations = [path.read_text(encoding="utf-8") for path in sorted((REPO / "examples/profiles").glob("*.yml"))]
    plan = build_plan(catalog=dump(profiled), definition=dump(doc), target_vmid=201, profiles=declarations)
    assert [step.get("name") for step in plan.plan["steps"] if step["kind"] == "profile"] == [
        "profile:base",
        "profile:ssh-hardening",
    ]
    assert run(healthy_state(), plan=plan)[0]["privileges"] == "passed"
    state = healthy_state()
    state["privileges"] = {p: 1 for p in ALL_PRIVS if p != "VM.GuestAgent.Unrestricted"}
    checks, result, _adapter = run(state, plan=plan)
    message = next(c["message"] for c in result["checks"] if c["code"] == "privileges")
    assert checks["privileges"] == "failed" and message.count("profile") == 1, message


@pytest.mark.parametrize(
    "status,reason,api", [(401, "invalid token value!", "failed"), (500, "Internal Server Error", "unknown")]
)
def test_version_errors_make_everything_unknown(status: int, reason: str, api: str) -> None:
    state = healthy_state()
    state["errors"][("GET", "/version")] = (status, reason, {"data": None})
    checks, result, adapter = run(state)
    assert checks == {c: ("unknown" if c != "api_reachable" else api) for c in CHECK_CODES}
    assert {p for _m, p, _params in adapter.sent} == {"/version"}


def test_fail_on() -> None:
    state = healthy_state()
    run(state, fail_on="failed")
    run(state, fail_on="unknown")  # the four undecidable checks do not count
    state["bridges"] = []
    with pytest.raises(PreflightFailed) as info:
        run(state, fail_on="failed")
    result = info.value.to_result()
    assert result["error_code"] == "preflight_failed" and result["checks"][11]["status"] == "failed"
    assert result["plan_hash"] and result["msg"]
    failed = [c["code"] for c in result["checks"] if c["status"] == "failed"]
    assert failed and result["error_details"]["failed_checks"] == failed
    assert result["msg"].endswith("Checks failed: %s." % ", ".join(failed))  # the message names what to fix
    run(state, fail_on="never")
    state = healthy_state()
    state["errors"][("GET", "/cluster/nextid")] = (500, "Internal Server Error", {"data": None})
    run(state, fail_on="failed")
    with pytest.raises(PreflightFailed) as info:
        run(state, fail_on="unknown")
    unknown = info.value.to_result()["msg"].split("Checks unknown: ", 1)[1]
    assert "vmid_free" in unknown and "template_revision" not in unknown  # only the unknowns that count
    with pytest.raises(InputError):
        run(state, fail_on="sometimes")


@pytest.mark.parametrize("value,expected", [(None, False), ("false", False), ("true", True)])
def test_creation_gate(value: str | None, expected: bool) -> None:
    environ = {} if value is None else {"VMANYWARE_PROVISIONING_ENABLED": value}
    assert provisioning_enabled(environ) is expected
    assert run(healthy_state(), environ=environ)[1]["creation_enabled"] is expected


ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


def test_creation_enabled_says_what_it_means() -> None:
    assert run(healthy_state(), environ=ON)[1]["creation_blockers"] == []
    snapshot = planned(snapshotAfterProvisioning=True)
    result = run(healthy_state(), environ=ON, plan=snapshot)[1]
    assert result["creation_enabled"] is False and result["creation_blockers"] == ["snapshot_disabled"]
    assert (
        run(healthy_state(), environ=dict(ON, VMANYWARE_SNAPSHOTS_ENABLED="true"), plan=snapshot)[1]["creation_enabled"]
        is True
    )
    unattested = planned(image="ubuntu-24.04")
    result = run(healthy_state(), environ=ON, plan=unattested)[1]
    assert result["creation_enabled"] is False and result["creation_blockers"] == ["attestation_required"]
    assert run(healthy_state(), environ={}, plan=unattested)[1]["creation_blockers"] == [
        "provisioning_disabled",
        "attestation_required",
    ]


def test_unverified_tls_is_refused_before_anything_is_sent() -> None:
    """validate_certs false, no pin, no opt-in: tls_unverified before a client exists; the token never leaves."""
    adapter = RecordingAdapter(Datacenter(healthy_state()))
    built: list[t.Any] = []
    settings = build_settings(
        host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET, validate_certs=False
    )
    with pytest.raises(ConfigurationError) as info:
        run_preflight(
            planned(),
            settings,
            environ=ON,
            fail_on="never",
            client_factory=lambda s: built.append(s) or ProxmoxClient(s, adapter=adapter),
        )
    assert info.value.code == "tls_unverified" and info.value.details == {"rule": "verified_tls_required"}
    assert built == [] and adapter.sent == []


class _ForgingClient(ProxmoxClient):
    """A client claiming a provider scope: the preflight must not report one read over unverified TLS."""

    @property
    def provider_scope_id(self) -> str | None:
        return "pve:" + "0" * 64


def test_unverified_read_only_opt_in_reads_with_gets_and_marks_the_result() -> None:
    adapter = RecordingAdapter(Datacenter(healthy_state()))
    settings = build_settings(
        host="pve.example.org",
        token_id="automation@pve!vmanyware",
        token_secret=SECRET,
        validate_certs=False,
        unverified_tls_read_only=True,
    )
    result = run_preflight(
        planned(), settings, environ=ON, fail_on="never", client_factory=lambda s: _ForgingClient(s, adapter=adapter)
    )
    reachable = result["checks"][0]
    assert reachable["code"] == "api_reachable" and reachable["status"] == "passed"
    assert "UNVERIFIED" in reachable["message"] and "verified TLS" not in reachable["message"]
    assert (
        result["tls_verified"] is False
        and result["creation_enabled"] is False
        and result["creation_blockers"] == ["tls_unverified"]
    )
    assert result["provider_scope_id"] is None and result["warnings"] == [UNVERIFIED_TLS_WARNING]
    assert adapter.sent and {method for method, _path, _params in adapter.sent} == {"GET"}
    verified = run(healthy_state(), environ=ON)[1]
    assert (
        verified["tls_verified"] is True
        and "verified TLS" in verified["checks"][0]["message"]
        and "warnings" not in verified
    )


def test_unverified_read_only_opt_in_never_sends_a_password() -> None:
    adapter = RecordingAdapter(Datacenter(healthy_state()))
    settings = build_settings(
        host="pve.example.org",
        user="root@pam",
        password="pw-" + SECRET,
        validate_certs=False,
        unverified_tls_read_only=True,
    )
    with pytest.raises(ConfigurationError) as info:
        run_preflight(
            planned(), settings, environ=ON, fail_on="never", client_factory=lambda s: ProxmoxClient(s, adapter=adapter)
        )
    assert info.value.code == "tls_unverified" and info.value.details == {"rule": "password"} and adapter.sent == []


@pytest.mark.parametrize("value", ["True", "1", "yes", " true", "TRUE"])
def test_creation_gate_invalid_before_network(value: str) -> None:
    adapter = RecordingAdapter(Datacenter(healthy_state()))
    settings = build_settings(host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET)
    with pytest.raises(ConfigurationError) as info:
        run_preflight(
            planned(),
            settings,
            environ={"VMANYWARE_PROVISIONING_ENABLED": value},
            client_factory=lambda s: ProxmoxClient(s, adapter=adapter),
        )
    assert info.value.code == "configuration_error"
    assert adapter.sent == []


def test_parse_size() -> None:
    assert parse_size_bytes("8G") == 8 * 1024**3
    assert parse_size_bytes("512M") == 512 * 1024**2
    assert parse_size_bytes("1.5T") == int(1.5 * 1024**4)
    assert parse_size_bytes("4096") == 4096
    assert parse_size_bytes("8 GiB") is None


def test_task_requests_are_schema_valid() -> None:
    upid = "UPID:pve-test:0000A1B2:0012D687:6650F00D:qmclone:9000:automation@pve!vmanyware:"
    statuses = iter([{"status": "running"}, {"status": "stopped", "exitstatus": "clone failed"}])

    def responder(method: str, path: str, params: dict[str, t.Any]) -> tuple[int, str, t.Any]:
        if path.endswith("/status"):
            return 200, "OK", {"data": next(statuses, {"status": "stopped", "exitstatus": "OK"})}
        return 200, "OK", {"data": [{"n": 1, "t": "TASK ERROR: clone failed"}], "total": 30}

    adapter = RecordingAdapter(responder)
    client = ProxmoxClient(build_settings(host="pve", token_id="a@pve!tk", token_secret=SECRET), adapter=adapter)
    clock = [0.0]
    outcome = wait_task(
        client, upid, timeout=30, clock=lambda: clock[0], sleep=lambda s: clock.__setitem__(0, clock[0] + s)
    )
    assert outcome.status == "failed" and outcome.log_tail == ("TASK ERROR: clone failed",)
    assert poll_once(client, upid).status == "ok"
    assert [p for _m, p, _params in adapter.sent][0] == f"/nodes/pve-test/tasks/{upid}/status"
    assert_schema_valid(adapter)


def test_login_request_is_schema_valid() -> None:
    def responder(method: str, path: str, params: dict[str, t.Any]) -> tuple[int, str, t.Any]:
        if path == "/access/ticket":
            return 200, "OK", {"data": {"ticket": "PVE:x", "CSRFPreventionToken": "c", "username": "root@pam"}}
        return 200, "OK", {"data": {"version": "9.1.3", "release": "9.1", "repoid": "0123abcd"}}

    adapter = RecordingAdapter(responder)
    client = ProxmoxClient(build_settings(host="pve", user="root@pam", password=SECRET), adapter=adapter)
    client.get("/version")
    assert adapter.sent[0][0:2] == ("POST", "/access/ticket")
    schema = schema_mod.Schema.load()
    for method, path, params in adapter.sent:
        assert not schema.validate(method, path, params)


def test_plan_copy_not_mutated() -> None:
    plan = planned()
    before = copy.deepcopy(plan.plan)
    run(healthy_state(), plan=plan)
    assert plan.plan == before


def test_refused_connection_is_reported_as_refused() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    settings = build_settings(
        host="127.0.0.1",
        port=port,
        token_id="automation@pve!vmanyware",
        token_secret=SECRET,
        fingerprint="ab" * 32,
        timeout=2,
    )
    result = run_preflight(
        planned(),
        settings,
        environ={},
        fail_on="never",
        client_factory=lambda s: ProxmoxClient(s, sleep=lambda x: None),
    )
    api = next(c for c in result["checks"] if c["code"] == "api_reachable")
    assert api["status"] == "failed" and "refused" in api["message"] and "timed out" not in api["message"]
    assert "within the timeout" not in api["message"]
