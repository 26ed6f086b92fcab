# SPDX-License-Identifier: GPL-3.0-or-later
"""The filter plugins share the module_utils implementation and fail with safe messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.filter.definition_hash import FilterModule as DefinitionHashModule
from ansible_collections.vmanyware.proxmox.plugins.filter.definition_hash import definition_hash
from ansible_collections.vmanyware.proxmox.plugins.filter.plan_hash import plan_hash
from ansible_collections.vmanyware.proxmox.plugins.filter.validate_catalog import validate_catalog
from ansible_collections.vmanyware.proxmox.plugins.filter.validate_definition import validate_definition

REPO = Path(__file__).resolve().parents[4]
DEFINITION_TEXT = (REPO / "examples/definition.yml").read_text()
CATALOG_TEXT = (REPO / "examples/catalog.yml").read_text()
DEFINITION_HASH = "109cb47497a9c1740f37adc432f0f14bd3fd31d43e2bf67d435a696a44345366"
PLAN_HASH = "5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df"


def test_hash_filters() -> None:
    assert definition_hash(DEFINITION_TEXT) == DEFINITION_HASH
    assert definition_hash(yaml.safe_load(DEFINITION_TEXT)) == DEFINITION_HASH
    assert definition_hash(DEFINITION_TEXT.encode()) == DEFINITION_HASH
    mapping = validate_catalog(CATALOG_TEXT)["images"][0]
    assert plan_hash(DEFINITION_HASH, mapping, 201) == PLAN_HASH
    assert (
        plan_hash(DEFINITION_HASH, dict(reversed(list(mapping.items()))), 201) == PLAN_HASH
    )  # normalized to catalog order
    assert DefinitionHashModule().filters() == {"definition_hash": definition_hash}


def test_validate_filters() -> None:
    assert validate_definition(DEFINITION_TEXT)["snapshotAfterProvisioning"] is False
    assert validate_catalog(yaml.safe_load(CATALOG_TEXT)) == validate_catalog(CATALOG_TEXT)


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda: definition_hash(DEFINITION_TEXT.replace("cores: 2", "cores: 98765")), "invalid_definition"),
        (lambda: definition_hash(["PLANTEDxyzzy"]), "invalid_definition"),
        (lambda: validate_definition("PLANTEDxyzzy: [\n"), "invalid_definition"),
        (lambda: validate_catalog(CATALOG_TEXT.replace("vmbr0", "PLANTEDxyzzy-bridge")), "invalid_catalog"),
        (lambda: plan_hash("PLANTEDxyzzy", validate_catalog(CATALOG_TEXT)["images"][0], 201), "invalid_plan"),
        (lambda: plan_hash(DEFINITION_HASH, {"image": "PLANTEDxyzzy"}, 201), "invalid_catalog"),
        (lambda: plan_hash(DEFINITION_HASH, validate_catalog(CATALOG_TEXT)["images"][0], 9000), "invalid_target_vmid"),
        (
            lambda: plan_hash(DEFINITION_HASH, validate_catalog(CATALOG_TEXT)["images"][0], 98765432101),
            "invalid_target_vmid",
        ),
    ],
)
def test_filter_errors_are_safe(call: object, code: str) -> None:
    with pytest.raises(AnsibleFilterError) as info:
        call()  # type: ignore[operator]
    message = str(info.value)
    assert "error_code=%s" % code in message
    assert "PLANTED" not in message and "98765" not in message
