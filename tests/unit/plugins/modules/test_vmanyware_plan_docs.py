# SPDX-License-Identifier: GPL-3.0-or-later
"""vmanyware_plan: DOCUMENTATION (with its fragments) matches the argument spec; RETURN covers the result."""

from __future__ import annotations

import yaml

from ansible_collections.vmanyware.proxmox.plugins.doc_fragments.attributes import ModuleDocFragment as Attributes
from ansible_collections.vmanyware.proxmox.plugins.doc_fragments.plan_inputs import ModuleDocFragment as PlanInputs
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    build_plan,
    plan_input_argument_spec,
)
from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_plan


def test_documented_options_match_the_argument_spec() -> None:
    doc = yaml.safe_load(vmanyware_plan.DOCUMENTATION)
    # it contacts no host, so it takes no connection options (issue 32)
    assert doc["extends_documentation_fragment"] == [
        "vmanyware.proxmox.plan_inputs",
        "vmanyware.proxmox.plan_inputs.definition_sources",
        "vmanyware.proxmox.attributes",
    ]
    assert not {"api_host", "api_token_id", "validate_certs"} & set(vmanyware_plan.argument_spec())
    options = yaml.safe_load(PlanInputs.DOCUMENTATION)["options"]
    options.update(yaml.safe_load(PlanInputs.DEFINITION_SOURCES)["options"])
    spec = plan_input_argument_spec()
    assert set(options) == set(spec)
    for name, option in spec.items():
        assert options[name]["type"] == option["type"]
        assert options[name].get("required", False) == option.get("required", False)
        assert "default" not in options[name]
    attributes = yaml.safe_load(Attributes.DOCUMENTATION)["attributes"]
    assert set(attributes) == {"action", "check_mode", "diff_mode", "idempotent"}
    # the module adds the support of each attribute; the fragment carries the one shared by every module (action)
    assert (
        set(doc["attributes"]) == {"check_mode", "diff_mode", "idempotent"}
        and attributes["action"]["support"] == "full"
    )
    assert {name: value["support"] for name, value in doc["attributes"].items()} == {
        "check_mode": "full",
        "diff_mode": "none",
        "idempotent": "full",
    }


def test_return_documents_every_plan_key() -> None:
    returned = yaml.safe_load(vmanyware_plan.RETURN)
    assert {"plan", "plan_hash", "definition_hash", "error_code", "error_path", "error_details"} <= set(returned)
    from pathlib import Path

    repo = Path(__file__).resolve().parents[4]
    planned = build_plan(
        catalog_path=str(repo / "examples/catalog.yml"),
        definition_path=str(repo / "examples/definition.yml"),
        target_vmid=201,
    )
    with_preset = build_plan(
        catalog_path=str(repo / "examples/catalog.yml"),
        definition_path=str(repo / "examples/definition-preset.yml"),
        target_vmid=201,
    )
    with_profiles = build_plan(
        catalog_path=str(repo / "examples/catalog-profiles.yml"),
        definition_path=str(repo / "examples/definition-profiles.yml"),
        target_vmid=201,
    )
    assert set(returned["plan"]["contains"]) - {"profiles", "templateChoice"} == set(planned.plan) | {"preset"}
    assert set(planned.plan) | {"preset"} == set(with_preset.plan)
    assert set(planned.plan) | {"profiles", "templateChoice"} == set(with_profiles.plan)
    assert returned["plan_hash"]["sample"] == planned.plan_hash
    assert returned["definition_hash"]["sample"] == planned.definition_hash
