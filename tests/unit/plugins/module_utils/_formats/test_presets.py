# SPDX-License-Identifier: GPL-3.0-or-later
"""Presets (docs/profiles.md, "Presets"): loading, merging, the plan's record and hashes, every refusal."""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest
from format_samples import PLANTED, catalog, definition, dump

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import RULE_TEXTS
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import canonical_json, sha256_hex
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import PlannedEnvironment, build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.presets import (
    PRESET_FIELDS,
    PRESET_SCHEMA_V1,
    load_presets,
    merge,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.schemas import schema_json

REPO = Path(__file__).resolve().parents[5]


def preset(name: str = "small-lab", version: int = 3, **spec: t.Any) -> dict[str, t.Any]:
    body = spec or {"image": "debian-13", "resources": {"cores": 4, "memoryMiB": 4096, "diskGiB": 16}}
    return {"apiVersion": "vmanyware.dev/v1", "kind": "Preset", "name": name, "version": version, "spec": body}


def request(**overrides: t.Any) -> dict[str, t.Any]:
    document = definition()
    del document["image"]
    document["resources"] = {"diskGiB": 20}
    document["preset"] = {"name": "small-lab"}
    document.update(overrides)
    return document


def plan(definition_doc: t.Any, presets: t.Any = None, **kwargs: t.Any) -> PlannedEnvironment:
    return build_plan(
        catalog=dump(catalog()),
        definition=dump(definition_doc),
        target_vmid=201,
        presets=[preset()] if presets is None else presets,
        **kwargs,
    )


def refusal(definition_doc: t.Any, presets: t.Any = None) -> InputError:
    with pytest.raises(InputError) as caught:
        plan(definition_doc, presets)
    assert PLANTED not in str(caught.value) and PLANTED not in json.dumps(caught.value.details)
    return caught.value


def test_merge_is_field_by_field() -> None:
    base = {
        "resources": {"cores": 4, "memoryMiB": 4096},
        "image": "a",
        "network": {"name": "lan", "ipv4": {"address": "auto"}},
    }
    override = {"resources": {"cores": 2}, "network": {"name": "dmz"}, "packages": [{"name": "git"}]}
    assert merge(base, override) == {
        "resources": {"cores": 2, "memoryMiB": 4096},
        "image": "a",
        "network": {"name": "dmz", "ipv4": {"address": "auto"}},
        "packages": [{"name": "git"}],
    }
    assert merge({"list": [1, 2]}, {"list": [3]}) == {"list": [3]}  # lists of the request replace
    assert merge({"a": {"b": 1}}, {"a": 5}) == {"a": 5}  # a scalar of the request replaces a mapping


def test_plan_shows_the_merged_definition_and_records_the_preset() -> None:
    planned = plan(request())
    assert planned.definition["image"] == "debian-13"
    assert planned.definition["resources"] == {"cores": 4, "memoryMiB": 4096, "diskGiB": 20}  # the request's disk wins
    expected_hash = sha256_hex(canonical_json(preset()))
    assert planned.definition["preset"] == {"name": "small-lab", "version": 3, "hash": expected_hash}
    assert planned.plan["preset"] == {
        "name": "small-lab",
        "version": 3,
        "hash": expected_hash,
        "fields": ["image", "resources.cores", "resources.memoryMiB"],
    }
    assert planned.plan["resources"] == {"cores": 4, "memoryMiB": 4096, "diskGiB": 20}
    # the same definition written out in full (and the record) is the same definition: the hash covers the preset
    full = definition()
    full["resources"] = {"cores": 4, "memoryMiB": 4096, "diskGiB": 20}
    full["preset"] = planned.definition["preset"]
    assert plan(full).definition_hash == planned.definition_hash


def test_a_changed_preset_changes_both_hashes() -> None:
    first = plan(request())
    second = plan(request(), presets=[preset(version=4)])
    third = plan(request(), presets=[preset(image="debian-13", resources={"cores": 8, "memoryMiB": 4096})])
    assert len({first.plan_hash, second.plan_hash, third.plan_hash}) == 3
    assert len({first.definition_hash, second.definition_hash, third.definition_hash}) == 3


def test_without_a_preset_nothing_changes(tmp_path: Path) -> None:
    """A definition without a preset plans exactly as before presets existed, with or without presets given."""
    before = build_plan(catalog=dump(catalog()), definition=dump(definition()), target_vmid=201)
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "broken.yml").write_text("not: [a preset", encoding="utf-8")  # never read
    (tmp_path / "catalog.yml").write_text(dump(catalog()), encoding="utf-8")
    after = build_plan(catalog_path=str(tmp_path / "catalog.yml"), definition=dump(definition()), target_vmid=201)
    assert after == before and "preset" not in after.plan
    assert plan(definition(), presets=[preset(), preset("other")]) == before


def test_presets_beside_the_catalog_and_the_example(tmp_path: Path) -> None:
    planned = build_plan(
        catalog_path=str(REPO / "examples/catalog.yml"),
        definition_path=str(REPO / "examples/definition-preset.yml"),
        target_vmid=201,
    )
    assert planned.plan["preset"]["name"] == "build-box"
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "a.yml").write_text(dump(preset()), encoding="utf-8")
    (tmp_path / "presets" / "README.txt").write_text(PLANTED, encoding="utf-8")  # not a preset file: ignored
    assert set(load_presets(path=tmp_path / "presets")) == {"small-lab"}
    (tmp_path / "catalog.yml").write_text(dump(catalog()), encoding="utf-8")
    beside = build_plan(catalog_path=str(tmp_path / "catalog.yml"), definition=dump(request()), target_vmid=201)
    assert beside.plan_hash == plan(request()).plan_hash
    explicit = build_plan(
        catalog=dump(catalog()), definition=dump(request()), target_vmid=201, presets_path=str(tmp_path / "presets")
    )
    assert explicit.plan_hash == beside.plan_hash


def test_version_and_hash_pins() -> None:
    assert plan(request(preset={"name": "small-lab", "version": 3})).plan["preset"]["version"] == 3
    err = refusal(request(preset={"name": "small-lab", "version": 2}))
    assert (err.code, err.path, err.details) == (
        "preset_version_mismatch",
        "preset.version",
        {"rule": "pinned_version", "version": 3},
    )
    err = refusal(request(preset={"name": "small-lab", "hash": "0" * 64}))
    assert (err.code, err.path, err.details["rule"]) == ("preset_version_mismatch", "preset.hash", "pinned_hash")


def test_unknown_preset() -> None:
    err = refusal(request(preset={"name": "nosuch"}))
    assert (err.code, err.path, err.details["rule"]) == ("preset_not_found", "preset.name", "not_among_presets")
    err = refusal(request(), presets=[])
    assert err.code == "preset_not_found"


def test_invalid_reference() -> None:
    err = refusal(request(preset={"name": "small-lab", "extra": PLANTED}))
    assert (err.code, err.path, err.details["rule"]) == ("invalid_definition", "preset", "unknown_field")
    err = refusal(request(preset="small-lab"))
    assert (err.code, err.path, err.details["rule"]) == ("invalid_definition", "preset", "type")


def test_duplicate_presets_are_refused(tmp_path: Path) -> None:
    err = refusal(request(), presets=[preset(), preset(version=9)])
    assert (err.code, err.path, err.details["rule"]) == ("invalid_preset", "presets[1]:name", "duplicate_preset")
    (tmp_path / "a.yml").write_text(dump(preset()), encoding="utf-8")
    (tmp_path / "b.yaml").write_text(dump(preset()), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_presets(path=tmp_path)
    assert (caught.value.code, caught.value.path) == ("invalid_preset", "b.yaml:name")


@pytest.mark.parametrize("field", ["access", "name", "packages", "targetNode", "snapshotAfterProvisioning"])
def test_a_field_a_preset_may_not_carry(field: str) -> None:
    document = preset()
    document["spec"][field] = PLANTED
    err = refusal(request(), presets=[document])
    assert (err.code, err.path, err.details["rule"]) == (
        "invalid_preset",
        "presets[0]:spec.%s" % field,
        "preset_field_not_allowed",
    )


def test_preset_schema_refusals_are_located(tmp_path: Path) -> None:
    err = refusal(request(), presets=[preset(resources={"cores": 0})])
    assert (err.code, err.path, err.details["rule"]) == ("invalid_preset", "presets[0]:spec.resources.cores", "minimum")
    err = refusal(request(), presets=[dict(preset(), kind="Environment")])
    assert (err.code, err.path, err.details["rule"]) == ("invalid_preset", "presets[0]:kind", "const")
    err = refusal(request(), presets=[dict(preset(), version="3")])
    assert (err.code, err.path, err.details["rule"]) == ("invalid_preset", "presets[0]:version", "type")
    (tmp_path / "bad.yml").write_text("name: [" + PLANTED + "\nkind: {", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_presets(path=tmp_path)
    assert (caught.value.code, caught.value.path, caught.value.details["rule"]) == (
        "invalid_preset",
        "bad.yml",
        "yaml_syntax",
    )
    assert caught.value.details["line"] >= 1 and PLANTED not in str(caught.value)
    with pytest.raises(InputError) as caught:
        load_presets(path=tmp_path / "nosuch")
    assert (caught.value.path, caught.value.details["rule"]) == ("presets_path", "not_a_directory")


def test_the_merged_definition_is_validated_at_the_merged_field() -> None:
    err = refusal(request(resources={"diskGiB": 20, "cores": 500}))
    assert (err.code, err.path, err.details) == (
        "invalid_definition",
        "resources.cores",
        {"rule": "maximum", "preset": "small-lab"},
    )
    err = refusal(request(), presets=[preset(image="debian-13", resources={"cores": 2})])  # neither gives memoryMiB
    assert (err.code, err.path, err.details["rule"]) == ("invalid_definition", "resources.memoryMiB", "required")
    err = refusal(request(resources=PLANTED))  # a scalar of the request replaces the preset's mapping
    assert (err.code, err.path, err.details["rule"]) == ("invalid_definition", "resources", "type")


def test_preset_schema_file_and_fields() -> None:
    assert PRESET_FIELDS == ("image", "resources", "network", "profiles")
    path = REPO / "docs/schemas/preset-v1.schema.json"
    assert path.read_text(encoding="utf-8") == schema_json(PRESET_SCHEMA_V1), "regenerate with schema_json()"


def test_codes_and_rules_are_documented() -> None:
    for code in ("invalid_preset", "preset_not_found", "preset_version_mismatch", "invalid_ssh_key_source"):
        assert code in ERROR_CODES
    for rule in ("duplicate_preset", "preset_field_not_allowed", "not_a_directory", "too_many_presets"):
        assert rule in RULE_TEXTS
