# SPDX-License-Identifier: GPL-3.0-or-later
"""build_plan: the plan document, its steps, hashes and refusals."""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest
from format_samples import PLANTED, catalog, definition, dump, mutated

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    PlannedEnvironment,
    build_plan,
    plan_input_argument_spec,
    plan_steps,
)

REPO = Path(__file__).resolve().parents[5]
EXAMPLE_DEFINITION_HASH = "109cb47497a9c1740f37adc432f0f14bd3fd31d43e2bf67d435a696a44345366"
EXAMPLE_PLAN_HASH = "5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df"


def plan(
    definition_doc: dict[str, t.Any] | None = None, catalog_doc: dict[str, t.Any] | None = None, vmid: t.Any = 201
) -> PlannedEnvironment:
    return build_plan(
        catalog=dump(catalog_doc if catalog_doc is not None else catalog()),
        definition=dump(definition_doc if definition_doc is not None else definition()),
        target_vmid=vmid,
    )


def test_examples_plan() -> None:
    planned = build_plan(
        catalog_path=str(REPO / "examples/catalog.yml"),
        definition_path=str(REPO / "examples/definition.yml"),
        target_vmid=201,
    )
    assert (planned.definition_hash, planned.plan_hash) == (EXAMPLE_DEFINITION_HASH, EXAMPLE_PLAN_HASH)
    assert planned == plan()  # inline text and files give the same result
    document = planned.plan
    assert list(document) == [
        "apiVersion",
        "kind",
        "definitionName",
        "definitionHash",
        "planHash",
        "provider",
        "source",
        "target",
        "resources",
        "storage",
        "bridge",
        "guestUser",
        "network",
        "access",
        "packages",
        "snapshotAfterProvisioning",
        "diskExpansion",
        "steps",
        "liveVerified",
        "vmidReserved",
    ]
    assert document["apiVersion"] == "vmanyware.dev/v1" and document["kind"] == "Plan"
    assert document["definitionHash"] == EXAMPLE_DEFINITION_HASH and document["planHash"] == EXAMPLE_PLAN_HASH
    assert document["source"] == planned.mapping == catalog()["images"][1]
    assert document["target"] == {"node": "pve-test", "vmid": 201, "name": "kernel-lab"}
    assert document["resources"] == {"cores": 2, "memoryMiB": 2048, "diskGiB": 20}
    assert (document["storage"], document["bridge"], document["guestUser"], document["network"]) == (
        "local-lvm",
        "vmbr0",
        "debian",
        "ipv4-dhcp",
    )
    assert document["access"] == {"sshPublicKeyCount": 1}
    assert "AAAA" not in json.dumps(document)  # keys are counted, never copied into the plan
    assert document["packages"] == [{"name": "build-essential"}, {"name": "git"}]
    assert document["diskExpansion"] is True and document["snapshotAfterProvisioning"] is False
    assert [step["kind"] for step in document["steps"]] == [
        "clone",
        "resources",
        "disk",
        "cloudinit",
        "seed",
        "start",
        "readiness",
        "packages",
    ]
    assert [step["position"] for step in document["steps"]] == list(range(1, 9))
    assert document["liveVerified"] is False and document["vmidReserved"] is False
    json.dumps(document)  # plain JSON types only


def test_steps_follow_the_declaration() -> None:
    minimal = mutated(mutated(definition(), ("resources", "diskGiB"), 8), ("packages",), [])
    assert [step["kind"] for step in plan(minimal).plan["steps"]] == [
        "clone",
        "resources",
        "cloudinit",
        "seed",
        "start",
        "readiness",
    ]
    assert plan(minimal).plan["diskExpansion"] is False
    full = mutated(definition(), ("snapshotAfterProvisioning",), True)
    assert [step["kind"] for step in plan(full).plan["steps"]][-2:] == ["packages", "snapshot"]
    assert plan_steps(plan(full).definition, plan(full).mapping)[-1] == {"position": 9, "kind": "snapshot"}


def test_result_is_isolated_from_callers() -> None:
    planned = plan()
    planned.plan["source"]["node"] = "changed"
    assert planned.mapping["node"] == "pve-test"
    with pytest.raises(AttributeError):
        planned.plan_hash = "x"  # type: ignore[misc]


def test_hash_inputs() -> None:
    base = plan()
    assert plan(vmid=202).definition_hash == base.definition_hash
    assert plan(vmid=202).plan_hash != base.plan_hash
    other = catalog()
    other["images"][1]["storage"] = "local-zfs"
    assert plan(catalog_doc=other).plan_hash != base.plan_hash
    unrelated = catalog()
    unrelated["images"][0]["storage"] = "local-zfs"  # another image's mapping is not part of this plan
    assert plan(catalog_doc=unrelated).plan_hash == base.plan_hash


REFUSALS = [
    ("vmid-low", {}, None, 99, "invalid_target_vmid", "target_vmid"),
    ("vmid-high", {}, None, 1000000000, "invalid_target_vmid", "target_vmid"),
    ("vmid-template", {}, None, 9000, "invalid_target_vmid", "target_vmid"),
    ("vmid-bool", {}, None, True, "invalid_target_vmid", "target_vmid"),
    ("vmid-string", {}, None, "201", "invalid_target_vmid", "target_vmid"),
    ("image-not-mapped", {("image",): "plantedimage"}, None, 201, "image_not_mapped", "image"),
    ("disk-shrink", {("resources", "diskGiB"): 7}, None, 201, "disk_shrink_unsupported", "resources.diskGiB"),
    ("bad-definition", {("name",): "Planted"}, None, 201, "invalid_definition", "name"),
    ("bad-catalog", {}, ("images", 1, "bridge", "plantedbridge1234"), 201, "invalid_catalog", "images[1].bridge"),
    ("empty-catalog", {}, ("images", "EMPTY", None), 201, "image_not_mapped", "image"),
]


@pytest.mark.parametrize(
    ("changes", "catalog_change", "vmid", "code", "path"),
    [case[1:] for case in REFUSALS],
    ids=[case[0] for case in REFUSALS],
)
def test_refusals(
    changes: dict[tuple[str, ...], t.Any], catalog_change: t.Any, vmid: t.Any, code: str, path: str
) -> None:
    document = definition()
    for key_path, value in changes.items():
        document = mutated(document, key_path, value)
    catalog_doc = catalog()
    if catalog_change is not None:
        if catalog_change[1] == "EMPTY":
            catalog_doc["images"] = []
        else:
            catalog_doc = mutated(catalog_doc, catalog_change[:-1], catalog_change[-1])
    with pytest.raises(InputError) as info:
        plan(document, catalog_doc, vmid)
    assert (info.value.code, info.value.path) == (code, path)
    assert "planted" not in (str(info.value) + json.dumps(info.value.to_result())).lower()


def test_disk_equal_to_source_is_fine() -> None:
    assert plan(mutated(definition(), ("resources", "diskGiB"), 8)).plan["diskExpansion"] is False


@pytest.mark.parametrize(
    "kwargs",
    [
        {"definition": "x", "target_vmid": 201},
        {"catalog": "x", "catalog_path": "/x", "definition": "x", "target_vmid": 201},
        {"catalog": "x", "target_vmid": 201},
        {"catalog": "x", "definition": "x", "definition_path": "/x", "target_vmid": 201},
    ],
)
def test_exactly_one_source_each(kwargs: dict[str, t.Any]) -> None:
    with pytest.raises(InputError) as info:
        build_plan(**kwargs)
    assert info.value.code == "invalid_plan"


def test_argument_spec() -> None:
    spec = plan_input_argument_spec()
    assert spec == {
        "catalog_path": {"type": "path"},
        "catalog": {"type": "raw"},
        "definition_path": {"type": "path"},
        "definition": {"type": "raw"},
        "target_vmid": {"type": "int", "required": True},
        "target_node": {"type": "str"},
        "addresses": {"type": "dict"},
        "presets_path": {"type": "path"},
        "presets": {"type": "list", "elements": "raw"},
        "ssh_key_sources": {"type": "list", "elements": "dict", "no_log": False},
        "profiles_path": {"type": "path"},
        "profiles": {"type": "list", "elements": "raw"},
    }
    assert spec is not plan_input_argument_spec()  # callers may extend their copy


def test_planted_comment_never_reaches_the_plan() -> None:
    document = mutated(
        definition(), ("access", "sshPublicKeys", 0), definition()["access"]["sshPublicKeys"][0] + PLANTED
    )
    assert PLANTED not in json.dumps(plan(document).plan)


def _repeat(catalog_doc: dict[str, t.Any], recorded: dict[str, t.Any]) -> PlannedEnvironment:
    return build_plan(
        catalog=dump(catalog_doc), definition=dump(definition()), target_vmid=202, repeat_mapping=recorded
    )


def test_a_repeat_plans_only_what_the_current_catalog_still_maps_as_recorded() -> None:
    recorded = plan().mapping  # the mapping the first operation was confirmed with
    assert _repeat(catalog(), recorded).mapping == recorded  # unchanged catalog: the same source
    # The template was taken out of the catalog since the first run.
    removed = catalog()
    removed["images"] = [mapping for mapping in removed["images"] if mapping["image"] != recorded["image"]]
    with pytest.raises(InputError) as info:
        _repeat(removed, recorded)
    assert info.value.code == "repeat_image_removed" and info.value.path == "image"
    assert info.value.details == {"rule": "in_current_catalog"}
    # Still mapped, but to another template and storage: refused, the fields named (not their values).
    changed = catalog()
    mapping = next(item for item in changed["images"] if item["image"] == recorded["image"])
    mapping["templateVmid"] = 9001
    mapping["storage"] = "fast-pool"
    with pytest.raises(InputError) as info:
        _repeat(changed, recorded)
    assert info.value.code == "repeat_mapping_changed" and info.value.details == {
        "rule": "mapping_as_recorded",
        "fields": ["storage", "templateVmid"],
    }
    assert "9001" not in json.dumps(info.value.to_result()) and "fast-pool" not in json.dumps(info.value.to_result())
    # Without repeat_mapping the changed catalog plans as usual (a fresh plan, its own review).
    assert plan(catalog_doc=changed).mapping["templateVmid"] == 9001
