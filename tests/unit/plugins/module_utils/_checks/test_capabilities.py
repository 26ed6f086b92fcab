# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The capability report's rules: version gates, placement, alternatives, and the API facts it relies on (official schema)."""

from __future__ import annotations

import typing as t

import pytest
from pve_fake import FakeClient
from pve_stubs import RecordingAdapter

from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.capabilities import (
    TEMPLATE_BUILD_NEEDS,
    capabilities,
    run_report,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import UNVERIFIED_TLS_WARNING
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError, ProviderError

schema_mod = pytest.importorskip("pvesim.schema")

ALL_VM = [
    "VM.Allocate",
    "VM.Audit",
    "VM.Clone",
    "VM.PowerMgmt",
    "VM.Snapshot",
    "VM.GuestAgent.Audit",
    "VM.GuestAgent.Unrestricted",
    "VM.Monitor",
    *("VM.Config." + x for x in ("CPU", "Memory", "Disk", "Network", "Options", "Cloudinit", "HWType")),
]


def stub(answers: dict[str, t.Any]) -> FakeClient:
    """Answers GETs from a dict (an unlisted path: None); a value that is a ProviderError code string ``error:<code>`` raises it."""
    routes = {
        path: ProviderError(code=answer[len("error:") :])
        if isinstance(answer, str) and answer.startswith("error:")
        else answer
        for path, answer in answers.items()
    }
    return FakeClient(routes, default=None)


def answers(version: str = "9.1.3", permissions: t.Any = None, **extra: t.Any) -> dict[str, t.Any]:
    base: dict[str, t.Any] = {
        "/version": {"version": version, "release": version.rsplit(".", 1)[0]},
        "/cluster/status": [
            {"type": "node", "name": "n1", "online": 1, "local": 1},
            {"type": "node", "name": "n2", "online": 0},
        ],
        "/nodes": [{"node": "n1", "status": "online"}, {"node": "n2", "status": "offline"}],
        "/nodes/n1/storage": [
            {"storage": "lvm", "content": "images,rootdir", "active": 1, "enabled": 1},
            {"storage": "nfs", "content": "import,iso,vztmpl,snippets", "active": 1, "shared": 1},
        ],
        "/nodes/n1/network": [{"iface": "vmbr0"}],
        "/cluster/resources": [
            {"type": "qemu", "vmid": 9000, "node": "n1", "template": 1},
            {"type": "qemu", "vmid": 100, "node": "n1"},
        ],
        "/cluster/sdn/vnets": [],
        "/access/permissions": permissions
        if permissions is not None
        else {
            "/vms": {p: 1 for p in ALL_VM},
            "/storage": {p: 1 for p in ("Datastore.AllocateSpace", "Datastore.AllocateTemplate", "Datastore.Audit")},
            "/sdn/zones/localnetwork": {"SDN.Use": 1},
            "/nodes": {"Sys.Audit": 1, "Sys.AccessNetwork": 1},
        },
    }
    base.update(extra)
    return base


def ops(result: dict[str, t.Any]) -> dict[str, dict[str, t.Any]]:
    return {item["operation"]: item for item in result["operations"]}


def test_everything_granted_on_pve9() -> None:
    client = stub(answers())
    result = run_report(client)
    found = ops(result)
    assert {name: item["status"] for name, item in found.items()} == {
        "vm_provisioning": "available",
        "template_build": "available",
        "containers": "unavailable",
        "cleanup": "available",
    }
    assert found["template_build"]["placement"] == {"node": "n1", "import": "nfs", "storage": "lvm", "bridge": "vmbr0"}
    assert found["vm_provisioning"]["placement"]["template"] == 9000
    assert [r["kind"] for r in found["containers"]["reasons"]] == ["api"] and found["containers"]["via"] == "ssh"
    assert "/nodes/n2/storage" not in client.paths()  # offline nodes are not read
    assert result["nodes"][1] == {
        "node": "n2",
        "online": False,
        "local": False,
        "templates": [],
        "storages": [],
        "bridges": [],
        "readable": False,
    }


@pytest.mark.parametrize(
    ("version", "via", "status"),
    [("8.3.5", "ssh", "unavailable"), ("8.4.1", "api", "available"), ("9.0.0", "api", "available")],
)
def test_template_build_version_gate(version: str, via: str, status: str) -> None:
    build = ops(run_report(stub(answers(version))))["template_build"]
    assert (build["via"], build["status"]) == (via, status)


def test_unsupported_major_and_unreadable_permissions() -> None:
    found = ops(run_report(stub(answers("7.4.3", permissions="error:permission_denied"))))
    reasons = [r["message"] for r in found["cleanup"]["reasons"]]
    assert "The Proxmox VE major version is not supported (supported: 8 or 9)." in reasons
    assert "The token's effective privileges could not be read (GET /access/permissions)." in reasons


def test_download_privilege_alternative_and_one_entry_per_privilege() -> None:
    perms = answers()["/access/permissions"]
    perms["/nodes"] = {"Sys.Audit": 1}
    assert any(
        r.get("privilege") == "Sys.AccessNetwork"
        for r in ops(run_report(stub(answers(permissions=perms))))["template_build"]["reasons"]
    )
    perms["/"] = {
        "Sys.Audit": 0,
        "Sys.Modify": 0,
    }  # exact entry on / (not propagated): the older alternative of download-url
    assert ops(run_report(stub(answers(permissions=perms))))["template_build"]["status"] == "available"
    perms = answers()["/access/permissions"]
    perms["/vms"] = {p: 1 for p in ALL_VM if p != "VM.GuestAgent.Unrestricted"}
    missing = list(ops(run_report(stub(answers(permissions=perms))))["vm_provisioning"]["reasons"])
    assert len(missing) == 1 and missing[0]["path"] == "/vms"
    assert (
        missing[0]["purpose"]
        == "readiness: wait for the guest agent and cloud-init; packages: install packages through the guest agent; "
        "profile: run the definition's profiles (Ansible roles) through the guest agent"
    )


def test_no_storage_with_content_or_no_template() -> None:
    extra = {"/nodes/n1/storage": [{"storage": "lvm", "content": "rootdir", "active": 1}], "/cluster/resources": []}
    found = ops(run_report(stub(answers(**extra)), template_vmid=9000))
    kinds = {(r["kind"], r.get("content")) for r in found["vm_provisioning"]["reasons"]}
    assert kinds == {("template", None), ("storage_content", "images")}
    assert found["vm_provisioning"]["placement"] is None


def test_auth_failure_is_the_connection_test_failing() -> None:
    with pytest.raises(ProviderError):
        run_report(stub({"/version": "error:auth_failed"}))


# -- the Proxmox VE facts the report states, checked against the official 9.1.3 schema ---------------------------


def test_download_url_needs_exactly_what_the_table_says() -> None:
    check = schema_mod.Schema.load().paths["/nodes/{node}/storage/{storage}/download-url"]["POST"].permissions["check"]
    assert check == [
        "and",
        ["perm", "/storage/{storage}", ["Datastore.AllocateTemplate"]],
        ["or", ["perm", "/", ["Sys.Audit", "Sys.Modify"]], ["perm", "/nodes/{node}", ["Sys.AccessNetwork"]]],
    ]
    download = [need for need in TEMPLATE_BUILD_NEEDS if "download-url" in need.purpose]
    assert [(n.path, n.privilege, n.alternatives) for n in download] == [
        ("/storage/{import}", "Datastore.AllocateTemplate", ()),
        ("/nodes/{node}", "Sys.AccessNetwork", (("/", ("Sys.Audit", "Sys.Modify")),)),
    ]


def test_snippets_and_container_exec_are_not_in_the_api() -> None:
    schema = schema_mod.Schema.load()
    for path in ("/nodes/{node}/storage/{storage}/download-url", "/nodes/{node}/storage/{storage}/upload"):
        content = schema.paths[path]["POST"].info["parameters"]["properties"]["content"]["enum"]
        assert "import" in content and "snippets" not in content
    assert not [path for path in schema.paths if path.startswith("/nodes/{node}/lxc/{vmid}") and "exec" in path]
    assert "/nodes/{node}/qemu/{vmid}/agent/exec" in schema.paths


# -- verified TLS (issue 31) -------------------------------------------------------------------------------------------------

SECRET = "00000000-test-secret-0000-000000000000"


def _adapter() -> RecordingAdapter:
    table = answers()
    return RecordingAdapter(lambda method, path, params: (200, "OK", {"data": table.get(path)}))


class _ForgingClient(ProxmoxClient):
    """A client claiming a provider scope: a report read over unverified TLS must not carry one."""

    @property
    def provider_scope_id(self) -> str | None:
        return "pve:" + "0" * 64


def test_unverified_tls_is_refused_before_anything_is_sent() -> None:
    adapter = _adapter()
    built: list[t.Any] = []
    settings = build_settings(
        host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET, validate_certs=False
    )
    with pytest.raises(ConfigurationError) as info:
        capabilities(settings, client_factory=lambda s: built.append(s) or ProxmoxClient(s, adapter=adapter))
    assert info.value.code == "tls_unverified" and built == [] and adapter.sent == []
    password = build_settings(
        host="pve.example.org",
        user="root@pam",
        password="pw-" + SECRET,
        validate_certs=False,
        unverified_tls_read_only=True,
    )
    with pytest.raises(ConfigurationError) as info:
        capabilities(password, client_factory=lambda s: built.append(s) or ProxmoxClient(s, adapter=adapter))
    assert (
        info.value.code == "tls_unverified"
        and info.value.details["rule"] == "password"
        and built == []
        and adapter.sent == []
    )


def test_unverified_read_only_opt_in_reads_with_gets_only_and_marks_the_report() -> None:
    adapter = _adapter()
    settings = build_settings(
        host="pve.example.org",
        token_id="automation@pve!vmanyware",
        token_secret=SECRET,
        validate_certs=False,
        unverified_tls_read_only=True,
    )
    result = capabilities(settings, client_factory=lambda s: _ForgingClient(s, adapter=adapter))
    assert (
        result["tls_verified"] is False
        and result["provider_scope_id"] is None
        and result["warnings"] == [UNVERIFIED_TLS_WARNING]
    )
    assert ops(result)["vm_provisioning"]["status"] == "available"
    assert adapter.sent and {method for method, _path, _params in adapter.sent} == {"GET"}
    verified = capabilities(
        build_settings(
            host="pve.example.org", token_id="automation@pve!vmanyware", token_secret=SECRET, fingerprint="ab" * 32
        ),
        client_factory=lambda s: _ForgingClient(s, adapter=_adapter()),
    )
    assert (
        verified["tls_verified"] is True
        and verified["provider_scope_id"] == "pve:" + "0" * 64
        and "warnings" not in verified
    )
