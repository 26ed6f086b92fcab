# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_template_plan and vmanyware_template_preflight through Ansible's option handling (in-process entry)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_template_plan, vmanyware_template_preflight
from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import run_entry_in_process

REPO = Path(__file__).resolve().parents[4]
EXAMPLE = str(REPO / "examples" / "template-build.yml")


def test_plan_module_returns_the_plan_and_both_hashes() -> None:
    result = run_entry_in_process(
        vmanyware_template_plan.ENTRY,
        "vmanyware_template_plan",
        {"template_build_path": EXAMPLE},
        check_mode=True,
        diff=False,
    )
    assert "failed" not in result and result["changed"] is False
    assert result["plan"]["kind"] == "TemplateBuildPlan" and result["plan"]["planHash"] == result["plan_hash"]
    assert result["plan"]["templateBuildHash"] == result["template_build_hash"]


def test_plan_module_refuses_auto_and_bad_documents_with_fixed_codes() -> None:
    text = Path(EXAMPLE).read_text(encoding="utf-8").replace("templateVmid: 9000", "templateVmid: auto")
    result = run_entry_in_process(
        vmanyware_template_plan.ENTRY, "vmanyware_template_plan", {"template_build": text}, check_mode=False, diff=False
    )
    assert result["failed"] and result["error_code"] == "invalid_template_build"
    assert result["error_details"]["rule"] == "auto_needs_allocation" and result["error_path"] == "templateVmid"
    both = run_entry_in_process(
        vmanyware_template_plan.ENTRY,
        "vmanyware_template_plan",
        {"template_build": text, "template_build_path": EXAMPLE},
        check_mode=False,
        diff=False,
    )
    assert both["failed"] and "mutually exclusive" in both["msg"]


def test_preflight_module_checks_the_gate_and_the_document_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    args = {
        "template_build": "kind: Nope\n",
        "api_host": "127.0.0.1",
        "api_port": 9,
        "api_token_id": "a@pve!b",
        "api_token_secret": "canary-secret-value",
        "validate_certs": False,
    }
    monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", "yes")
    result = run_entry_in_process(
        vmanyware_template_preflight.ENTRY, "vmanyware_template_preflight", args, check_mode=True, diff=False
    )
    assert result["failed"] and result["error_code"] == "configuration_error"
    monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", "false")
    result = run_entry_in_process(
        vmanyware_template_preflight.ENTRY, "vmanyware_template_preflight", args, check_mode=True, diff=False
    )
    assert result["failed"] and result["error_code"] == "invalid_template_build"
    assert "canary-secret-value" not in str(result)
