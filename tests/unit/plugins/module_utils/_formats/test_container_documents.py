# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Container mappings (guestType: container): schema, normalization, plan, template resolution."""

from __future__ import annotations

import copy
import typing as t

import pytest
from format_samples import catalog, definition, dump, mapping

from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.container import newest_match, version_key
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import (
    normalize_mapping,
    validate_catalog,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import FormatError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import plan_hash
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan


def container(**overrides: t.Any) -> dict[str, t.Any]:
    base: dict[str, t.Any] = {
        "image": "debian-12-ct",
        "guestType": "container",
        "node": "pve-test",
        "appliance": {"package": "debian-12-standard", "version": "12.*", "storage": "local"},
        "storage": "local-lvm",
        "bridge": "vmbr0",
        "guestUser": "root",
    }
    base.update(overrides)
    return {key: value for key, value in base.items() if value is not None}


def test_container_mapping_is_normalized_with_explicit_defaults() -> None:
    assert normalize_mapping(container()) == {
        "image": "debian-12-ct",
        "guestType": "container",
        "node": "pve-test",
        "appliance": {"package": "debian-12-standard", "version": "12.*", "storage": "local"},
        "storage": "local-lvm",
        "bridge": "vmbr0",
        "guestUser": "root",
        "unprivileged": True,
        "features": {"nesting": False},
    }
    ost = normalize_mapping(
        container(
            appliance=None,
            ostemplate="local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst",
            features={"nesting": True},
            unprivileged=False,
        )
    )
    assert ost["ostemplate"] == "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst" and "appliance" not in ost
    assert ost["features"] == {"nesting": True} and ost["unprivileged"] is False


def test_catalog_mixes_vm_and_container_mappings_and_vm_entries_are_unchanged() -> None:
    vm_only = validate_catalog(catalog())
    mixed_doc = catalog()
    mixed_doc["images"].append(container())
    mixed = validate_catalog(mixed_doc)
    assert mixed["images"][:2] == vm_only["images"]  # the VM mappings normalize exactly as before
    assert mixed["images"][2]["guestType"] == "container"


@pytest.mark.parametrize(
    ("mutation", "path", "rule"),
    [
        (
            {"ostemplate": "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst"},
            "images[2].ostemplate",
            "container_template_source",
        ),
        ({"appliance": "DROP"}, "images[2].ostemplate", "container_template_source"),
        ({"templateVmid": 9000}, "images[2]", "unknown_field"),
        ({"ostemplate": "local:iso/x.iso", "appliance": "DROP"}, "images[2].ostemplate", "pattern"),
        (
            {"appliance": {"package": "debian-12-standard", "version": "12.[0-9]", "storage": "local"}},
            "images[2].appliance.version",
            "pattern",
        ),
        ({"features": {"keyctl": True}}, "images[2].features", "unknown_field"),
        ({"unprivileged": "yes"}, "images[2].unprivileged", "type"),
        ({"storage": "DROP"}, "images[2].storage", "required"),
    ],
)
def test_container_mapping_refusals(mutation: dict[str, t.Any], path: str, rule: str) -> None:
    entry = container()
    for key, value in mutation.items():
        if value == "DROP":
            entry.pop(key)
        else:
            entry[key] = value
    doc = catalog()
    doc["images"].append(entry)
    with pytest.raises(FormatError) as raised:
        validate_catalog(doc)
    assert (raised.value.path, raised.value.rule) == (path, rule)
    assert "debian-12-standard_12" not in str(raised.value)  # no input value is echoed


def test_guest_type_other_than_container_is_refused() -> None:
    doc = catalog()
    doc["images"][0]["guestType"] = "vm"
    with pytest.raises(FormatError) as raised:
        validate_catalog(doc)
    assert (raised.value.path, raised.value.rule) == ("images[0]", "unknown_field")


def _container_plan(**overrides: t.Any) -> t.Any:
    doc = catalog()
    doc["images"].append(container(**overrides))
    spec = definition()
    spec["image"] = "debian-12-ct"
    spec["snapshotAfterProvisioning"] = True
    return build_plan(catalog=dump(doc), definition=dump(spec), target_vmid=320)


def test_container_plan_steps_and_hash() -> None:
    planned = _container_plan()
    plan = planned.plan
    assert plan["guestType"] == "container" and plan["diskExpansion"] is False
    assert [s["kind"] for s in plan["steps"]] == ["template", "create", "start", "readiness", "packages", "snapshot"]
    assert plan["source"] == planned.mapping and plan["guestUser"] == "root" and plan["storage"] == "local-lvm"
    assert planned.plan_hash == plan_hash(planned.definition_hash, planned.mapping, 320)


def test_ostemplate_plan_has_no_template_step() -> None:
    doc = catalog()
    entry = container(ostemplate="local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst")
    del entry["appliance"]
    doc["images"].append(entry)
    spec = definition()
    spec["image"] = "debian-12-ct"
    spec["packages"] = []
    planned = build_plan(catalog=dump(doc), definition=dump(spec), target_vmid=320)
    assert [s["kind"] for s in planned.plan["steps"]] == ["create", "start", "readiness"]
    other = copy.deepcopy(entry)
    other["features"] = {"nesting": True}
    doc["images"][-1] = other
    assert build_plan(catalog=dump(doc), definition=dump(spec), target_vmid=320).plan_hash != planned.plan_hash


def test_vm_plan_document_keeps_its_v1_fields() -> None:
    planned = build_plan(catalog=dump(catalog()), definition=dump(definition()), target_vmid=201)
    assert "guestType" not in planned.plan and planned.plan["diskExpansion"] is True
    assert planned.mapping == mapping()


def test_newest_match_orders_versions_like_debian() -> None:
    files = [
        "debian-12-standard_12.7-1_amd64.tar.zst",
        "debian-12-standard_12.12-1_amd64.tar.zst",
        "debian-13-standard_13.1-2_amd64.tar.zst",
        "debian-12-standard_12.2~rc1_amd64.tar.zst",
        "junk.tar.zst",
    ]
    assert newest_match("debian-12-standard", "12.*", files) == "debian-12-standard_12.12-1_amd64.tar.zst"
    assert newest_match("debian-12-standard", "12.7-*", files) == "debian-12-standard_12.7-1_amd64.tar.zst"
    assert newest_match("debian-12-standard", "11.*", files) is None
    assert version_key("12.2~rc1") < version_key("12.2") < version_key("12.10")
