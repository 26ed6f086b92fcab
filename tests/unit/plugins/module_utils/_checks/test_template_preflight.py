# SPDX-License-Identifier: GPL-3.0-or-later
"""Template build preflight against a scripted datacenter (GETs only, every request schema-validated)."""

from __future__ import annotations

import copy
import json
import typing as t

import pytest
import yaml
from pve_stubs import RecordingAdapter
from test_template_build_document import minimal

from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.capabilities import TEMPLATE_BUILD_NEEDS
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import UNVERIFIED_TLS_WARNING
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import (
    UNDECIDABLE as PREFLIGHT_UNDECIDABLE,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.driver import PreflightFailed
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import build_template_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.template import (
    CHECK_CODES,
    UNDECIDABLE,
    run_template_preflight,
)

schema_mod = pytest.importorskip("pvesim.schema")

SECRET = "planted-secret-7f3c9a1e"
NODE = "pve-test"
ALL_PRIVS = sorted({need.privilege for need in TEMPLATE_BUILD_NEEDS})


def healthy_state() -> dict[str, t.Any]:
    return {
        "version": {"version": "8.4.1", "release": "8.4", "repoid": "0123abcd"},
        "storages": {
            "local": {"active": 1, "enabled": 1, "content": "iso,vztmpl,import", "avail": 50 * 1024**3, "type": "dir"},
            "local-lvm": {
                "active": 1,
                "enabled": 1,
                "content": "images,rootdir",
                "avail": 100 * 1024**3,
                "type": "lvmthin",
            },
        },
        "bridges": [{"iface": "vmbr0", "type": "bridge", "active": 1}],
        "used_vmids": set(),
        "privileges": {p: 1 for p in ALL_PRIVS},
    }


class Datacenter:
    def __init__(self, state: dict[str, t.Any]) -> None:
        self.state = state

    def __call__(self, method: str, path: str, params: dict[str, t.Any]) -> tuple[int, str, t.Any]:
        s = self.state
        if path == "/version":
            return 200, "OK", {"data": s["version"]}
        prefix = f"/nodes/{NODE}/storage/"
        if path.startswith(prefix) and path.endswith("/status"):
            name = path[len(prefix) : -len("/status")]
            if name not in s["storages"]:
                return (
                    400,
                    "Parameter verification failed.",
                    {"data": None, "errors": {"storage": "No such storage.\n"}},
                )
            return 200, "OK", {"data": s["storages"][name]}
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


def run(
    state: dict[str, t.Any], *, fail_on: str = "never", **changes: t.Any
) -> tuple[dict[str, str], dict[str, t.Any]]:
    adapter = RecordingAdapter(Datacenter(state))
    settings = build_settings(
        host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET, fingerprint="ab" * 32
    )
    planned = build_template_plan(text=yaml.safe_dump(minimal(**changes)))
    result = run_template_preflight(
        planned,
        settings,
        environ={},
        fail_on=fail_on,
        client_factory=lambda s: ProxmoxClient(s, adapter=adapter, sleep=lambda x: None),
    )
    schema = schema_mod.Schema.load()
    for method, path, params in adapter.sent:
        assert method == "GET", (method, path)
        assert not schema.validate(method, path, params), (method, path, params)
    assert SECRET not in json.dumps(result)
    assert result["plan_hash"] == planned.plan_hash and result["template_build_hash"] == planned.template_build_hash
    return {c["code"]: c["status"] for c in result["checks"]}, result


def expect(**overrides: str) -> dict[str, str]:
    statuses = {code: ("unknown" if code in UNDECIDABLE else "passed") for code in CHECK_CODES}
    statuses.update(overrides)
    return statuses


def test_healthy_pve_8_4() -> None:
    checks, result = run(healthy_state())
    assert checks == expect()
    assert list(checks) == list(CHECK_CODES)
    assert result["summary"] == {"passed": 12, "failed": 0, "unknown": 4}
    assert result["creation_enabled"] is False and result["vmid_reserved"] is False and result["changed"] is False


def test_pve_8_3_cannot_build_over_the_api() -> None:
    state = healthy_state()
    state["version"] = {"version": "8.3.5", "release": "8.3"}
    checks, _result = run(state)
    assert checks == expect(template_build_supported="failed")
    with pytest.raises(PreflightFailed):
        run(state, fail_on="failed")


def test_import_storage_without_import_content_and_missing_storage() -> None:
    state = healthy_state()
    state["storages"]["local"]["content"] = "iso,vztmpl"
    assert run(state)[0] == expect(import_storage_content="failed")
    state = healthy_state()
    del state["storages"]["local"]
    assert run(state)[0] == expect(
        import_storage_exists="failed", import_storage_active="unknown", import_storage_content="unknown"
    )
    state = healthy_state()
    state["storages"]["local-lvm"]["active"] = 0
    assert run(state)[0] == expect(storage_active="failed")


def test_vmid_bridge_and_privileges() -> None:
    state = healthy_state()
    state["used_vmids"] = {9000}
    state["bridges"] = []
    state["privileges"].pop("Datastore.AllocateTemplate")
    checks, result = run(state)
    assert checks == expect(vmid_free="failed", bridge_exists="failed", privileges="failed")
    message = next(c["message"] for c in result["checks"] if c["code"] == "privileges")
    assert message == "The token lacks: Datastore.AllocateTemplate on /storage/local."


def test_unknown_fails_only_when_asked() -> None:
    state = healthy_state()
    state["version"] = {"release": "something"}
    checks, _result = run(copy.deepcopy(state))
    assert checks["version_supported"] == "unknown" and checks["template_build_supported"] == "unknown"
    with pytest.raises(PreflightFailed):
        run(state, fail_on="unknown")


def test_vm_preflight_reports_the_template_stamp_but_stays_unknown() -> None:
    import test_preflight as vm  # the VM preflight's scripted datacenter

    state = vm.healthy_state()
    stamp = (
        "vmanyware operation op-%s\nvmanyware template\nimage debian-13\ntemplateVersion debian-13-cloud-20261016\nbuildOperation op-%s"
        % ("a" * 26, "b" * 26)
    )
    state["template"]["description"] = stamp
    checks, result = vm.run(state)[:2]
    revision = next(c for c in result["checks"] if c["code"] == "template_revision")
    assert revision["status"] == "unknown" and checks["template_revision"] == "unknown"
    assert (
        "templateVersion debian-13-cloud-20261016, built by operation op-%s; it equals the catalog's" % ("b" * 26)
        in revision["message"]
    )
    state["template"]["description"] = stamp.replace("debian-13-cloud-20261016", "other")
    assert (
        "it differs from the catalog's"
        in next(c for c in vm.run(state)[1]["checks"] if c["code"] == "template_revision")["message"]
    )
    # A stamp field without its exact form is not shown at all (descriptions are free text).
    state["template"]["description"] = stamp.replace("debian-13-cloud-20261016", "PLANTED secret text")
    message = next(c for c in vm.run(state)[1]["checks"] if c["code"] == "template_revision")["message"]
    assert "PLANTED" not in message and message == PREFLIGHT_UNDECIDABLE["template_revision"]


# -- verified TLS (issue 31) -------------------------------------------------------------------------------------------------


def test_unverified_tls_is_refused_before_anything_is_sent() -> None:
    adapter = RecordingAdapter(Datacenter(healthy_state()))
    built: list[t.Any] = []
    settings = build_settings(
        host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET, validate_certs=False
    )
    planned = build_template_plan(text=yaml.safe_dump(minimal()))
    with pytest.raises(ConfigurationError) as info:
        run_template_preflight(
            planned,
            settings,
            environ={},
            fail_on="never",
            client_factory=lambda s: built.append(s) or ProxmoxClient(s, adapter=adapter),
        )
    assert info.value.code == "tls_unverified" and built == [] and adapter.sent == []


def test_unverified_read_only_opt_in_reads_with_gets_only_and_marks_the_result() -> None:
    adapter = RecordingAdapter(Datacenter(healthy_state()))
    settings = build_settings(
        host="pve.example.org",
        token_id="automation@pve!vmanyware",
        token_secret=SECRET,
        validate_certs=False,
        unverified_tls_read_only=True,
    )
    planned = build_template_plan(text=yaml.safe_dump(minimal()))
    result = run_template_preflight(
        planned,
        settings,
        environ={"VMANYWARE_PROVISIONING_ENABLED": "true"},
        fail_on="never",
        client_factory=lambda s: ProxmoxClient(s, adapter=adapter, sleep=lambda x: None),
    )
    assert (
        result["tls_verified"] is False
        and result["provider_scope_id"] is None
        and result["warnings"] == [UNVERIFIED_TLS_WARNING]
    )
    assert result["creation_blockers"] == ["tls_unverified"] and result["creation_enabled"] is False
    assert adapter.sent and {method for method, _path, _params in adapter.sent} == {"GET"}
