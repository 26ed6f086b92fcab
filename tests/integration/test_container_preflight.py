# SPDX-License-Identifier: GPL-3.0-or-later
"""The container preflight (``_checks/container.py``) against the simulator: GETs only, each check decided or unknown."""

from __future__ import annotations

import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vmid_support import REPO, Reserver  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import run_checks  # noqa: E402

pytestmark = pytest.mark.integration
TEMPLATE_ACL = {"/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]}  # pvesim.lxc.TEMPLATE_STORAGE_ACL


def _plan(vmid: int = 320, **mapping: t.Any) -> t.Any:
    catalog = yaml.safe_load((REPO / "examples/catalog-containers.yml").read_text(encoding="utf-8"))
    catalog["images"][0].update(mapping)
    for key in [k for k, v in catalog["images"][0].items() if v is None]:
        del catalog["images"][0][key]
    definition = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    definition["image"] = "debian-12-ct"
    return build_plan(catalog=yaml.safe_dump(catalog), definition=yaml.safe_dump(definition), target_vmid=vmid)


def _checks(reserver: Reserver, planned: t.Any) -> dict[str, tuple[str, str]]:
    with ProxmoxClient(reserver.settings) as client:
        checks, _capabilities = run_checks(client, planned.plan)
    return {c.code: (c.status, c.message) for c in checks}


def _full_acl(pvesim: t.Any) -> None:
    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel

    pvesim.set_token(pvesim.connection["tokens"]["full"]["id"], privileges={**FULL_TOKEN_ACL, **TEMPLATE_ACL})


def test_appliance_resolves_to_the_newest_match_downloadable_then_present(pvesim: t.Any, tmp_path: Path) -> None:
    reserver = Reserver(pvesim, tmp_path)
    _full_acl(pvesim)
    checks = _checks(reserver, _plan())
    assert checks["container_template"] == (
        "passed",
        "Resolved to debian-12-standard_12.12-1_amd64.tar.zst, downloadable from the appliance index (template stage).",
    )
    for code in (
        "api_reachable",
        "version_supported",
        "storage_exists",
        "storage_active",
        "storage_rootdir",
        "storage_capacity",
        "bridge_exists",
        "vmid_free",
        "privileges",
    ):
        assert checks[code][0] == "passed", (code, checks[code])
    assert checks["dhcp_available"][0] == "unknown"
    upid = pvesim.root_call(
        "POST", "/nodes/pve-test/aplinfo", storage="local", template="debian-12-standard_12.12-1_amd64.tar.zst"
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(
        task["upid"] == upid and task["status"] == "stopped" for task in pvesim.tasks()
    ):
        time.sleep(0.05)
    assert _checks(reserver, _plan())["container_template"][1].endswith("present on the template storage.")
    token = pvesim.connection["tokens"]["full"]["id"]
    assert {e["method"] for e in pvesim.requests() if e["token"] == token} == {"GET"}  # the preflight only reads


def test_failures_are_definite_and_unreadable_is_unknown(pvesim: t.Any, tmp_path: Path) -> None:
    reserver = Reserver(pvesim, tmp_path)
    # the demo token cannot list the template storage nor download into it
    checks = _checks(reserver, _plan())
    # the index alone resolves the version; whether it is already there stays open
    assert checks["container_template"] == (
        "unknown",
        "Resolved to debian-12-standard_12.12-1_amd64.tar.zst; the token may not list "
        "the template storage (Datastore.Audit or Datastore.AllocateSpace).",
    )
    assert checks["privileges"][0] == "failed"
    assert (
        "Datastore.AllocateTemplate on /storage/local (download the appliance template (aplinfo))"
        in checks["privileges"][1]
    )
    _full_acl(pvesim)
    checks = _checks(
        reserver, _plan(appliance={"package": "debian-12-standard", "version": "11.*", "storage": "local"})
    )
    assert checks["container_template"] == (
        "failed",
        "No appliance version matches the catalog's package and version glob.",
    )
    checks = _checks(reserver, _plan(appliance=None, ostemplate="local:vztmpl/debian-13-standard_13.1-2_amd64.tar.zst"))
    assert checks["container_template"][0] == "failed"
    checks = _checks(reserver, _plan(storage="local"))
    assert checks["storage_rootdir"][0] in ("failed", "unknown")
    pvesim.add_container(320, name="taken")
    assert _checks(reserver, _plan())["vmid_free"][0] == "failed"
    checks = _checks(reserver, _plan(vmid=321, unprivileged=False))
    assert checks["privileges"][0] == "failed" and "Sys.Modify on /" in checks["privileges"][1]


def test_unverified_tls_refused_or_read_only_marked(pvesim: t.Any, tmp_path: Path) -> None:
    """The container preflight: validate_certs false and no pin sends nothing; the read-only opt-in sends GETs only, marks
    the result and computes no provider scope."""
    import dataclasses  # pylint: disable=import-outside-toplevel

    from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError  # pylint: disable=import-outside-toplevel
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import run_preflight  # pylint: disable=import-outside-toplevel

    reserver = Reserver(pvesim, tmp_path)
    _full_acl(pvesim)
    unverified = dataclasses.replace(reserver.settings, validate_certs=False, ca_path=None)
    pvesim.clear_requests()
    with pytest.raises(ConfigurationError) as info:
        run_preflight(_plan(), unverified, environ={}, fail_on="never")
    assert info.value.code == "tls_unverified" and pvesim.requests() == []
    result = run_preflight(
        _plan(), dataclasses.replace(unverified, unverified_tls_read_only=True), environ={}, fail_on="never"
    )
    assert result["tls_verified"] is False and result["provider_scope_id"] is None and result["warnings"]
    assert "tls_unverified" in result["creation_blockers"]
    assert {c["code"]: c["status"] for c in result["checks"]}["container_template"] == "passed"
    assert pvesim.requests() and {e["method"] for e in pvesim.requests()} == {"GET"}
