# SPDX-License-Identifier: GPL-3.0-or-later
"""The stamp of a template that baked profiles (docs/templates.md, "Baking profiles"): the description's
``bakedProfiles`` line, the catalog mapping's ``bakedProfiles`` in the shape the plan consumes, its YAML."""

from __future__ import annotations

import re
import typing as t

import pytest
from test_profiles import declarations
from test_template_stages import OPERATION_ID, operation

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import baked_identities, parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.profiles import (
    choose_template,
    load_profiles,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import stamp_baked_profiles
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.template.stamp import (
    catalog_mapping,
    mapping_yaml,
    stamp_description,
)


def baked_operation(completed: bool = True) -> dict[str, t.Any]:
    document = operation(profile_documents=declarations(), distroFamily="debian", profiles=[{"name": "ssh-hardening"}])
    for item in document["stages"]:
        if item["kind"].startswith("profile:") and completed:
            item.update(status="completed", evidence={"changed": 1, "ok": 3, "failed": 0})
    return document


def test_the_stamp_and_the_mapping_record_the_baked_profiles() -> None:
    known = load_profiles(documents=declarations())
    expected = [
        {"name": name, "version": known[name].version, "declarationHash": known[name].hash}
        for name in ("base", "ssh-hardening")
    ]
    document = baked_operation()
    description = stamp_description(document, "ssh")
    assert "\nbakedProfiles base@1:%s,ssh-hardening@1:%s\n" % (known["base"].hash, known["ssh-hardening"].hash) in (
        description
    )
    assert stamp_baked_profiles(description) == expected
    mapping = catalog_mapping(document)
    assert mapping["bakedProfiles"] == expected
    text = mapping_yaml(mapping)
    assert "  bakedProfiles:\n    - name: base\n      version: 1\n      declarationHash: " in text
    catalog = parse_catalog(
        text="apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages:\n" + re.sub(r"(?m)^", "  ", text)
    )
    assert catalog["images"] == [mapping]
    # the plan side reads it: a definition requesting both finds both baked in this template
    requested = frozenset(known[name].identity() for name in ("base", "ssh-hardening"))
    assert baked_identities(mapping) == requested
    bare = dict(mapping, templateVmid=9001)
    bare.pop("bakedProfiles")
    chosen, choice = choose_template([bare, mapping], requested)
    assert (chosen["templateVmid"], choice["reason"], choice["bakedRequested"]) == (9000, "most_requested_baked", 2)


def test_without_profiles_the_stamp_is_as_before() -> None:
    document = operation()
    description = stamp_description(document, "ssh")
    assert "bakedProfiles" not in description and stamp_baked_profiles(description) == []
    assert "bakedProfiles" not in catalog_mapping(document)


def test_a_profile_that_did_not_complete_is_not_recorded_as_baked() -> None:
    with pytest.raises(StageError) as caught:
        catalog_mapping(baked_operation(completed=False))
    assert caught.value.code == "observation_mismatch"
    assert caught.value.details == {"stage": "stamp", "rule": "profile_not_completed", "profile": "base"}


@pytest.mark.parametrize(
    "line",
    [
        "bakedProfiles base@1:" + "A" * 64,  # not lowercase hex
        "bakedProfiles base@0:" + "a" * 64,  # version 0
        "bakedProfiles base@1:" + "a" * 64 + ",",  # a trailing comma
        "bakedProfiles Base@1:" + "a" * 64,  # not a profile name
    ],
)
def test_only_the_exact_form_of_the_line_is_read(line: str) -> None:
    description = "binding\nvmanyware template\nbuildOperation %s\n%s" % (OPERATION_ID, line)
    assert stamp_baked_profiles(description) is None
    assert stamp_baked_profiles("not a stamp") is None
