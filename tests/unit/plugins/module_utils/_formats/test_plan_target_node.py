# SPDX-License-Identifier: GPL-3.0-or-later
"""The plan input target_node and the definition's targetNode: per-node templates, clones with ``target``, refusals,
and every hash unchanged without a target node (docs/operations.md, "Placement")."""

from __future__ import annotations

import typing as t

import pytest
from format_samples import catalog, definition, dump, mapping

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import FormatError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    PlannedEnvironment,
    build_plan,
    plan_from_params,
    resolve_mapping,
)


def per_node_catalog() -> dict[str, t.Any]:
    """debian-13 on pve-test (template 9000) and on pve-test2 (template 9100)."""
    doc = catalog()
    doc["images"].append(mapping(node="pve-test2", templateVmid=9100))
    return doc


def plan(
    target_node: str | None = None, catalog_doc: dict[str, t.Any] | None = None, **definition_fields: t.Any
) -> PlannedEnvironment:
    doc = definition()
    doc.update(definition_fields)
    return build_plan(
        catalog=dump(catalog_doc if catalog_doc is not None else catalog()),
        definition=dump(doc),
        target_vmid=201,
        target_node=target_node,
    )


def test_without_target_node_every_hash_and_the_document_are_unchanged() -> None:
    before = plan()
    # a catalog that also maps the image on another node plans the first mapping, exactly as before
    after = plan(catalog_doc=per_node_catalog())
    assert (after.definition_hash, after.plan_hash, after.plan, after.mapping) == (
        before.definition_hash,
        before.plan_hash,
        before.plan,
        before.mapping,
    )
    assert "clone" not in before.plan and "targetNode" not in before.mapping
    params = {"catalog": dump(catalog()), "catalog_path": None, "definition": dump(definition())}
    assert plan_from_params({**params, "definition_path": None, "target_vmid": 201}).plan_hash == before.plan_hash


def test_target_node_of_the_template_keeps_the_hash_and_names_the_method() -> None:
    before = plan()
    same = plan("pve-test")
    assert (same.plan_hash, same.mapping) == (before.plan_hash, before.mapping)
    assert same.plan["clone"] == {"method": "per-node-template", "sourceNode": "pve-test"}
    assert same.plan["target"]["node"] == "pve-test"


def test_per_node_template_is_cloned_on_its_node() -> None:
    planned = plan("pve-test2", per_node_catalog())
    assert planned.mapping["node"] == "pve-test2" and planned.mapping["templateVmid"] == 9100
    assert "targetNode" not in planned.mapping
    assert planned.plan["target"]["node"] == "pve-test2"
    assert planned.plan["clone"] == {"method": "per-node-template", "sourceNode": "pve-test2"}
    assert planned.plan["source"]["templateVmid"] == 9100


def test_other_node_clones_with_target_and_hashes_the_node() -> None:
    before = plan()
    planned = plan("pve-test3", per_node_catalog())
    assert planned.mapping == {**before.mapping, "targetNode": "pve-test3"}
    assert list(planned.mapping)[-1] == "targetNode"  # appended: catalog field order otherwise
    assert planned.plan["target"]["node"] == "pve-test3"
    assert planned.plan["clone"] == {"method": "target", "sourceNode": "pve-test"}
    assert planned.plan_hash != before.plan_hash and planned.definition_hash == before.definition_hash


def test_definition_target_node() -> None:
    pinned = plan(catalog_doc=per_node_catalog(), targetNode="pve-test2")
    assert pinned.definition["targetNode"] == "pve-test2" and pinned.plan["target"]["node"] == "pve-test2"
    assert plan("pve-test2", per_node_catalog(), targetNode="pve-test2").plan_hash == pinned.plan_hash
    auto = plan("pve-test3", targetNode="auto")
    assert auto.plan["target"]["node"] == "pve-test3" and auto.definition["targetNode"] == "auto"
    assert "targetNode" not in plan().definition  # absent stays absent: the definition hash is as before


@pytest.mark.parametrize(
    ("target_node", "fields", "code", "rule"),
    [
        ("auto", {}, "invalid_target_node", "placement_first"),
        ("bad node", {}, "invalid_target_node", "format"),
        (None, {"targetNode": "auto"}, "placement_required", "placement_first"),
        ("pve-test3", {"targetNode": "pve-test2"}, "target_node_conflict", "equals_definition"),
    ],
)
def test_refusals(target_node: str | None, fields: dict[str, t.Any], code: str, rule: str) -> None:
    with pytest.raises(InputError) as info:
        plan(target_node, **fields)
    assert (info.value.code, info.value.details["rule"]) == (code, rule)


def test_definition_target_node_schema() -> None:
    with pytest.raises(FormatError) as info:
        plan(targetNode="-bad")
    assert info.value.code == "invalid_definition"


def test_catalog_allows_an_image_once_per_node() -> None:
    assert len(parse_catalog(text=dump(per_node_catalog()))["images"]) == 3
    doc = per_node_catalog()
    doc["images"].append(mapping(node="pve-test2", templateVmid=9200))
    with pytest.raises(FormatError) as info:
        parse_catalog(text=dump(doc))
    assert info.value.code == "invalid_catalog" and info.value.details["rule"] == "duplicate_image"


def test_container_mapping_is_not_placed_elsewhere() -> None:
    doc = catalog()
    doc["images"] = [
        {
            "image": "debian-12-ct",
            "guestType": "container",
            "node": "pve-test",
            "ostemplate": "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst",
            "storage": "local-lvm",
            "bridge": "vmbr0",
            "guestUser": "root",
        }
    ]
    parsed = parse_catalog(text=dump(doc))
    defn = {**definition(), "image": "debian-12-ct"}
    assert resolve_mapping(parsed, defn, "pve-test")["node"] == "pve-test"
    with pytest.raises(InputError) as info:
        resolve_mapping(parsed, defn, "pve-test2")
    assert info.value.details["rule"] == "container_mapping_on_node"
