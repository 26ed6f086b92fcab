# SPDX-License-Identifier: GPL-3.0-or-later
"""Profiles (docs/profiles.md, "Profiles"): declarations, run order, pins and hashes, template choice, every refusal."""

from __future__ import annotations

import copy
import json
import typing as t
from pathlib import Path

import pytest
from format_samples import PLANTED, catalog, definition, dump, mapping

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import RULE_TEXTS
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import canonical_json, sha256_hex
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import PlannedEnvironment, build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.profiles import (
    CHOICE_REASONS,
    PROFILE_SCHEMA_V1,
    load_profiles,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.schemas import schema_json

REPO = Path(__file__).resolve().parents[5]


def declaration(name: str, version: int = 1, **fields: t.Any) -> dict[str, t.Any]:
    document = {
        "apiVersion": "vmanyware.dev/v1",
        "kind": "Profile",
        "name": name,
        "version": version,
        "role": "vmanyware.proxmox.profile_" + name.replace("-", "_"),
        "distroFamilies": ["debian"],
    }
    document.update(fields)
    return document


def declarations() -> list[dict[str, t.Any]]:
    return [
        declaration("base", variables={"motd": {"type": "str", "default": "hi"}}),
        declaration("ssh-hardening", requires=["base"], lockoutRisk=True),
        declaration(
            "docker-host",
            version=3,
            requires=["base"],
            variables={"users": {"type": "list", "default": []}, "port": {"type": "int", "required": True}},
        ),
        declaration("guest-user", perGuest=True),
    ]


def profiled_catalog(*mappings: dict[str, t.Any]) -> dict[str, t.Any]:
    document = catalog()
    document["images"] = [mapping(distroFamily="debian")] if not mappings else list(mappings)
    return document


def request(*entries: dict[str, t.Any], **fields: t.Any) -> dict[str, t.Any]:
    document = definition()
    document["profiles"] = list(entries)
    document.update(fields)
    return document


def plan(
    definition_doc: t.Any, profiles: t.Any = None, catalog_doc: t.Any = None, **kwargs: t.Any
) -> PlannedEnvironment:
    return build_plan(
        catalog=dump(catalog_doc if catalog_doc is not None else profiled_catalog()),
        definition=dump(definition_doc),
        target_vmid=201,
        profiles=declarations() if profiles is None else profiles,
        **kwargs,
    )


def refusal(definition_doc: t.Any, profiles: t.Any = None, catalog_doc: t.Any = None) -> InputError:
    with pytest.raises(InputError) as caught:
        plan(definition_doc, profiles, catalog_doc)
    text = str(caught.value) + json.dumps(caught.value.details)
    assert PLANTED not in text
    return caught.value


def hash_of(document: dict[str, t.Any]) -> str:
    return sha256_hex(canonical_json(document))


def baked(name: str, version: int = 1, document: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    source = document or next(d for d in declarations() if d["name"] == name)
    return {"name": name, "version": version, "declarationHash": hash_of(source)}


def test_examples_load_and_plan() -> None:
    loaded = load_profiles(path=REPO / "examples/profiles")
    assert set(loaded) == {"base", "ssh-hardening"}
    assert loaded["ssh-hardening"].lockout_risk and loaded["ssh-hardening"].requires == ("base",)
    assert loaded["base"].role == "vmanyware.proxmox.profile_base"
    planned = build_plan(
        catalog_path=str(REPO / "examples/catalog-profiles.yml"),
        definition_path=str(REPO / "examples/definition-profiles.yml"),
        target_vmid=201,
    )  # the declarations are read from the profiles directory beside the catalog
    assert [(p["name"], p["baked"], p["run"]) for p in planned.plan["profiles"]] == [
        ("base", True, False),
        ("ssh-hardening", False, True),
    ]
    assert planned.plan["templateChoice"] == {
        "templateVmid": 9010,
        "bakedRequested": 1,
        "candidates": 2,
        "reason": "most_requested_baked",
    }


def test_schema_file_and_codes() -> None:
    path = REPO / "docs/schemas/profile-v1.schema.json"
    assert path.read_text(encoding="utf-8") == schema_json(PROFILE_SCHEMA_V1), "regenerate with schema_json()"
    for code in (
        "invalid_profile",
        "profile_not_found",
        "profile_version_mismatch",
        "invalid_profile_vars",
        "profile_requires_cycle",
        "profile_distro_unsupported",
        "distro_family_not_recorded",
    ):
        assert code in ERROR_CODES
    for rule in ("duplicate_profile", "duplicate_profile_request", "unknown_variable", "variable_type"):
        assert rule in RULE_TEXTS
    assert set(CHOICE_REASONS) == {
        "single_template",
        "most_requested_baked",
        "fewest_other_baked",
        "lowest_template_vmid",
    }


def test_without_profiles_nothing_changes(tmp_path: Path) -> None:
    """A definition requesting no profiles plans byte for byte as before, whatever declarations are around."""
    before = build_plan(catalog=dump(catalog()), definition=dump(definition()), target_vmid=201)
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "broken.yml").write_text("not: [a profile", encoding="utf-8")  # never read
    (tmp_path / "catalog.yml").write_text(dump(catalog()), encoding="utf-8")
    after = build_plan(catalog_path=str(tmp_path / "catalog.yml"), definition=dump(definition()), target_vmid=201)
    assert after == before
    assert json.dumps(after.plan, sort_keys=False) == json.dumps(before.plan, sort_keys=False)
    assert "profiles" not in after.plan and "templateChoice" not in after.plan
    assert all(set(step) == {"position", "kind"} for step in after.plan["steps"])
    inline = build_plan(
        catalog=dump(catalog()), definition=dump(definition()), target_vmid=201, profiles=declarations()
    )
    assert inline == before
    # a catalog recording distroFamily and baked profiles of another image changes nothing for this one
    other = catalog()
    other["images"][0]["bakedProfiles"] = [baked("base")]
    assert build_plan(catalog=dump(other), definition=dump(definition()), target_vmid=201).plan_hash == before.plan_hash


def test_run_order_requires_first_stable_lockout_last() -> None:
    planned = plan(
        request(
            {"name": "ssh-hardening"},
            {"name": "guest-user"},
            {"name": "docker-host", "vars": {"port": 2375, "users": ["debian"]}},
        )
    )
    assert [p["name"] for p in planned.plan["profiles"]] == ["base", "guest-user", "docker-host", "ssh-hardening"]
    by_name = {p["name"]: p for p in planned.plan["profiles"]}
    assert by_name["base"]["requiredBy"] == ["docker-host", "ssh-hardening"]
    assert "requiredBy" not in by_name["docker-host"]
    assert by_name["docker-host"]["vars"] == {"users": ["debian"], "port": 2375}
    assert by_name["base"]["vars"] == {"motd": "hi"}  # defaults of a profile added by requires
    assert by_name["ssh-hardening"]["lockoutRisk"] is True
    steps = [step.get("name", step["kind"]) for step in planned.plan["steps"]]
    assert steps[steps.index("packages") + 1 :] == [
        "profile:base",
        "profile:guest-user",
        "profile:docker-host",
        "profile:ssh-hardening",
    ]
    # a profile requiring a lockout risk runs after it, so after every other profile too
    profiles = declarations() + [declaration("audit", requires=["ssh-hardening"])]
    late = plan(request({"name": "audit"}, {"name": "guest-user"}), profiles=profiles)
    assert [p["name"] for p in late.plan["profiles"]] == ["base", "guest-user", "ssh-hardening", "audit"]


def test_profile_steps_come_before_the_snapshot() -> None:
    planned = plan(request({"name": "base"}, snapshotAfterProvisioning=True))
    kinds = [step.get("name", step["kind"]) for step in planned.plan["steps"]]
    assert kinds[-3:] == ["packages", "profile:base", "snapshot"]
    assert [step["position"] for step in planned.plan["steps"]] == list(range(1, len(kinds) + 1))


def test_effective_definition_pins_every_profile_and_plans_again_identically() -> None:
    planned = plan(request({"name": "ssh-hardening"}))
    assert planned.definition["profiles"] == [
        {"name": "ssh-hardening", "version": 1, "declarationHash": hash_of(declarations()[1])},
        {"name": "base", "version": 1, "declarationHash": hash_of(declarations()[0]), "requiredBy": ["ssh-hardening"]},
    ]
    again = plan(planned.definition)  # a repeat plans the recorded (effective) definition
    assert (again.definition_hash, again.plan_hash, again.plan) == (
        planned.definition_hash,
        planned.plan_hash,
        planned.plan,
    )
    assert plan(request({"name": "ssh-hardening"})).plan_hash == planned.plan_hash  # stable


def test_a_changed_declaration_changes_both_hashes_even_one_added_by_requires() -> None:
    before = plan(request({"name": "ssh-hardening"}))
    changed = declarations()
    changed[0]["variables"]["motd"]["default"] = "changed"  # base: only required, not requested
    after = plan(request({"name": "ssh-hardening"}), profiles=changed)
    assert after.definition_hash != before.definition_hash and after.plan_hash != before.plan_hash
    # and the recorded definition of the first plan refuses the changed declaration
    err = refusal(before.definition, profiles=changed)
    assert (err.code, err.path, err.details) == (
        "profile_version_mismatch",
        "profiles[1].declarationHash",
        {"rule": "pinned_hash"},
    )


@pytest.mark.parametrize(
    ("entries", "code", "path", "rule"),
    [
        ([{"name": "nope"}], "profile_not_found", "profiles[0].name", "not_among_profiles"),
        ([{"name": "base"}, {"name": "base"}], "invalid_definition", "profiles[1].name", "duplicate_profile_request"),
        (
            [{"name": "base", "vars": {"colour": PLANTED}}],
            "invalid_profile_vars",
            "profiles[0].vars.colour",
            "unknown_variable",
        ),
        ([{"name": "base", "vars": {"motd": 5}}], "invalid_profile_vars", "profiles[0].vars.motd", "variable_type"),
        (
            [{"name": "docker-host", "vars": {"port": True}}],
            "invalid_profile_vars",
            "profiles[0].vars.port",
            "variable_type",
        ),
        (
            [{"name": "docker-host", "vars": {"users": {}}}],
            "invalid_profile_vars",
            "profiles[0].vars.users",
            "variable_type",
        ),
        ([{"name": "docker-host"}], "invalid_profile_vars", "profiles[0].vars", "required_variable"),
        ([{"name": "base", "version": 2}], "profile_version_mismatch", "profiles[0].version", "pinned_version"),
        (
            [{"name": "base", "declarationHash": "0" * 64}],
            "profile_version_mismatch",
            "profiles[0].declarationHash",
            "pinned_hash",
        ),
        (
            [{"name": "base", "requiredBy": ["ssh-hardening"]}],
            "invalid_definition",
            "profiles[0].requiredBy",
            "required_by",
        ),
        ([{"name": "base", "vars": PLANTED}], "invalid_definition", "profiles[0].vars", "type"),
        ([{"name": PLANTED}], "invalid_definition", "profiles[0].name", "pattern"),
    ],
)
def test_request_refusals(entries: list[dict[str, t.Any]], code: str, path: str, rule: str) -> None:
    err = refusal(request(*entries))
    assert (err.code, err.path, err.details["rule"]) == (code, path, rule)


def test_requires_refusals() -> None:
    cycle = [
        declaration("a", requires=["b"]),
        declaration("b", requires=["c"]),
        declaration("c", requires=["a"]),
    ]
    err = refusal(request({"name": "a"}), profiles=cycle)
    assert (err.code, err.path, err.details) == (
        "profile_requires_cycle",
        "profiles[2]:requires[0]",
        {"rule": "requires_cycle"},
    )
    err = refusal(request({"name": "a"}), profiles=[declaration("a", requires=["gone"])])
    assert (err.code, err.path, err.details) == (
        "profile_not_found",
        "profiles[0]:requires[0]",
        {"rule": "required_profile_unknown"},
    )
    # a profile added by requires gets only defaults: one with a required variable must be requested explicitly
    needs = [declaration("a", requires=["b"]), declaration("b", variables={"key": {"type": "str", "required": True}})]
    err = refusal(request({"name": "a"}), profiles=needs)
    assert (err.code, err.path, err.details["rule"]) == (
        "invalid_profile_vars",
        "profiles[1]:variables.key",
        "required_variable",
    )


def test_distro_family_refusals() -> None:
    err = refusal(request({"name": "ssh-hardening"}), catalog_doc=profiled_catalog(mapping(distroFamily="rhel")))
    assert (err.code, err.path, err.details) == (
        "profile_distro_unsupported",
        "profiles[0]:distroFamilies",
        {"rule": "distro_family", "position": 1},
    )
    err = refusal(request({"name": "base"}), catalog_doc=catalog())
    assert (err.code, err.path, err.details["rule"]) == (
        "distro_family_not_recorded",
        "image",
        "distro_family_not_recorded",
    )
    assert "record" in str(err) and "distroFamily" in str(err)


def container_catalog(**fields: t.Any) -> dict[str, t.Any]:
    document = catalog()
    document["images"] = [
        {
            "image": "debian-13",
            "guestType": "container",
            "node": "pve-test",
            "ostemplate": "local:vztmpl/debian-13-standard.tar.zst",
            "storage": "local-lvm",
            "bridge": "vmbr0",
            "guestUser": "root",
            **fields,
        }
    ]
    return document


def test_a_container_plan_runs_profiles_in_run_order_between_packages_and_snapshot() -> None:
    """Containers run profiles too (docs/profiles.md, "Profiles on containers"): no refusal at plan time, the steps
    have one profile:<name> step each in run order (the lockout-risk profile last), after packages and before snapshot;
    the transport is chosen at the profile stage, not in the plan (so it is not hashed)."""
    wanted = request(
        {"name": "ssh-hardening"},
        {"name": "base", "vars": {"motd": "ct"}},
        packages=[{"name": "git"}],
        snapshotAfterProvisioning=True,
    )
    planned = plan(wanted, catalog_doc=container_catalog(distroFamily="debian"))
    assert planned.plan["guestType"] == "container"
    assert [p["name"] for p in planned.plan["profiles"]] == ["base", "ssh-hardening"]
    assert all(p["run"] and not p["baked"] for p in planned.plan["profiles"])
    assert [step.get("name", step["kind"]) for step in planned.plan["steps"]] == [
        "create",
        "start",
        "readiness",
        "packages",
        "profile:base",
        "profile:ssh-hardening",
        "snapshot",
    ]
    assert planned.plan["templateChoice"] == {"bakedRequested": 0, "candidates": 1, "reason": "single_template"}
    assert "transport" not in json.dumps(planned.plan)
    # the container mapping still needs its OS family, and the family must fit every profile
    err = refusal(request({"name": "base"}), catalog_doc=container_catalog())
    assert (err.code, err.details["rule"]) == ("distro_family_not_recorded", "distro_family_not_recorded")
    err = refusal(request({"name": "base"}), catalog_doc=container_catalog(distroFamily="rhel"))
    assert (err.code, err.path) == ("profile_distro_unsupported", "profiles[0]:distroFamilies")
    assert "container_profiles_unsupported" not in ERROR_CODES


@pytest.mark.parametrize(
    ("documents", "path", "rule"),
    [
        ([declaration("base"), declaration("base", version=2)], "profiles[1]:name", "duplicate_profile"),
        ([declaration("base", version=PLANTED)], "profiles[0]:version", "type"),
        ([declaration("base", colour=PLANTED)], "profiles[0]", "unknown_field"),
        ([declaration("base", distroFamilies=[])], "profiles[0]:distroFamilies", "min_items"),
        ([declaration("base", variables={"x": {"type": "float"}})], "profiles[0]:variables.x.type", "enum"),
        ([declaration("base", variables={"x": {"type": "int"}})], "profiles[0]:variables.x", "variable_default"),
        (
            [declaration("base", variables={"x": {"type": "int", "default": 1, "required": True}})],
            "profiles[0]:variables.x",
            "variable_default",
        ),
        (
            [declaration("base", variables={"x": {"type": "int", "default": PLANTED}})],
            "profiles[0]:variables.x.default",
            "variable_type",
        ),
        (
            [declaration("base", variables={"Bad": {"type": "int", "default": 1}})],
            "profiles[0]:variables.Bad",
            "variable_name",
        ),
        ([declaration("base", requires=["base"])], "profiles[0]:requires[0]", "duplicate_requires"),
        (["kind: [Profile"], "profiles[0]", "yaml_syntax"),
        (PLANTED, "profiles", "type"),
    ],
)
def test_declaration_refusals(documents: t.Any, path: str, rule: str) -> None:
    err = refusal(request({"name": "base"}), profiles=documents)
    assert (err.code, err.path, err.details["rule"]) == ("invalid_profile", path, rule)


def test_declarations_from_a_directory(tmp_path: Path) -> None:
    folder = tmp_path / "profiles"
    folder.mkdir()
    for document in declarations():
        (folder / (document["name"] + ".yml")).write_text(dump(document), encoding="utf-8")
    (folder / "notes.txt").write_text(PLANTED, encoding="utf-8")  # not a declaration file: ignored
    from_dir = build_plan(
        catalog=dump(profiled_catalog()),
        definition=dump(request({"name": "ssh-hardening"})),
        target_vmid=201,
        profiles_path=str(folder),
    )
    assert from_dir == plan(request({"name": "ssh-hardening"}))
    (folder / "zz.yml").write_text(dump(declaration("base", version=9)), encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load_profiles(path=folder)
    assert (caught.value.code, caught.value.path) == ("invalid_profile", "zz.yml:name")
    with pytest.raises(InputError) as caught:
        load_profiles(path=tmp_path / "missing")
    assert (caught.value.code, caught.value.path, caught.value.details["rule"]) == (
        "invalid_profile",
        "profiles_path",
        "not_a_directory",
    )


def two_templates(first_baked: list[dict[str, t.Any]], second_baked: list[dict[str, t.Any]]) -> dict[str, t.Any]:
    first = mapping(distroFamily="debian", templateVmid=9020)
    second = mapping(distroFamily="debian", templateVmid=9010)
    if first_baked:
        first["bakedProfiles"] = first_baked
    if second_baked:
        second["bakedProfiles"] = second_baked
    return profiled_catalog(first, second)


def test_template_choice_most_requested_baked_and_the_skip() -> None:
    cat = two_templates([baked("base")], [])
    planned = plan(request({"name": "ssh-hardening"}), catalog_doc=cat)
    assert planned.mapping["templateVmid"] == 9020
    assert planned.plan["templateChoice"] == {
        "templateVmid": 9020,
        "bakedRequested": 1,
        "candidates": 2,
        "reason": "most_requested_baked",
    }
    assert [(p["name"], p["baked"], p["run"]) for p in planned.plan["profiles"]] == [
        ("base", True, False),
        ("ssh-hardening", False, True),
    ]
    assert [step.get("name") for step in planned.plan["steps"] if step["kind"] == "profile"] == [
        "profile:ssh-hardening"
    ]
    # a baked profile with another declaration hash does not count (nor is it skipped)
    stale = two_templates([{"name": "base", "version": 1, "declarationHash": "f" * 64}], [])
    other = plan(request({"name": "ssh-hardening"}), catalog_doc=stale)
    assert other.plan["templateChoice"]["reason"] == "fewest_other_baked" and other.mapping["templateVmid"] == 9010
    assert all(p["run"] for p in other.plan["profiles"])


def test_template_choice_ties_and_per_guest() -> None:
    cat = two_templates([baked("guest-user")], [baked("guest-user")] + [baked("base")])
    # neither requested profile set wins: fewer profiles not requested wins
    planned = plan(request({"name": "guest-user"}), catalog_doc=cat)
    assert (planned.mapping["templateVmid"], planned.plan["templateChoice"]["reason"]) == (9020, "fewest_other_baked")
    entry = planned.plan["profiles"][0]
    assert (entry["baked"], entry["perGuest"], entry["run"]) == (True, True, True)  # per-guest: runs again
    # without profiles, a definition gets the template with nothing baked when there is one
    plain = build_plan(catalog=dump(two_templates([baked("base")], [])), definition=dump(definition()), target_vmid=201)
    assert plain.mapping["templateVmid"] == 9010 and plain.plan["templateChoice"]["reason"] == "fewest_other_baked"
    tie = two_templates([baked("base")], [baked("guest-user")])
    tied = plan(request({"name": "ssh-hardening"}, {"name": "guest-user"}), catalog_doc=tie)
    assert (tied.mapping["templateVmid"], tied.plan["templateChoice"]["reason"]) == (9010, "lowest_template_vmid")
    single = plan(request({"name": "base"}))
    assert single.plan["templateChoice"] == {
        "templateVmid": 9000,
        "bakedRequested": 0,
        "candidates": 1,
        "reason": "single_template",
    }


def test_template_choice_on_a_target_node() -> None:
    here = mapping(distroFamily="debian", templateVmid=9010, node="pve-a")
    there = mapping(distroFamily="debian", templateVmid=9020, node="pve-b", bakedProfiles=[baked("base")])
    cat = profiled_catalog(here, there)
    on_b = plan(request({"name": "base"}), catalog_doc=cat, target_node="pve-b")
    assert on_b.mapping["templateVmid"] == 9020 and not on_b.plan["profiles"][0]["run"]
    # no mapping on the target node: today's rule (the first mapping's node, cloned with target)
    elsewhere = plan(request({"name": "base"}), catalog_doc=cat, target_node="pve-c")
    assert (elsewhere.mapping["templateVmid"], elsewhere.mapping["targetNode"]) == (9010, "pve-c")


def test_catalog_rules_for_profiles() -> None:
    same = two_templates([baked("base")], [baked("base")])
    with pytest.raises(InputError) as caught:
        parse_catalog(text=dump(same))
    assert (caught.value.code, caught.value.path, caught.value.details["rule"]) == (
        "invalid_catalog",
        "images[1].image",
        "duplicate_image",
    )
    repeated = two_templates([baked("base"), baked("base")], [])
    with pytest.raises(InputError) as caught:
        parse_catalog(text=dump(repeated))
    assert (caught.value.path, caught.value.details["rule"]) == (
        "images[0].bakedProfiles[1].name",
        "duplicate_baked_profile",
    )
    parsed = parse_catalog(text=dump(two_templates([baked("base")], [])))
    assert list(parsed["images"][0])[-2:] == ["distroFamily", "bakedProfiles"]
    containers = catalog()
    containers["images"] = [
        {
            "image": "alpine",
            "guestType": "container",
            "node": "pve-test",
            "ostemplate": "local:vztmpl/alpine.tar.xz",
            "storage": "local-lvm",
            "bridge": "vmbr0",
            "guestUser": "root",
            "distroFamily": "alpine",
        }
    ]
    assert parse_catalog(text=dump(containers))["images"][0]["distroFamily"] == "alpine"


def test_a_preset_may_carry_profiles_and_the_request_replaces_them() -> None:
    preset = {
        "apiVersion": "vmanyware.dev/v1",
        "kind": "Preset",
        "name": "hardened",
        "version": 1,
        "spec": {"profiles": [{"name": "ssh-hardening"}]},
    }
    with_preset = request(preset={"name": "hardened"})
    del with_preset["profiles"]
    planned = plan(with_preset, presets=[preset])
    assert [p["name"] for p in planned.plan["profiles"]] == ["base", "ssh-hardening"]
    assert "profiles" in planned.plan["preset"]["fields"]
    replaced = plan(request({"name": "guest-user"}, preset={"name": "hardened"}), presets=[preset])
    assert [p["name"] for p in replaced.plan["profiles"]] == ["guest-user"]


def test_no_value_is_echoed_in_a_plan_refusal() -> None:
    documents = copy.deepcopy(declarations())
    documents[0]["variables"]["motd"]["description"] = PLANTED
    err = refusal(request({"name": "base", "vars": {"motd": [PLANTED]}}), profiles=documents)
    assert err.code == "invalid_profile_vars"


def test_the_registry_profile_row_becomes_one_step_per_profile_before_the_snapshot() -> None:
    """The registry's ``profile`` row (between packages and snapshot) stands one step per profile that runs."""
    assert plan(request({"name": "guest-user"}, snapshotAfterProvisioning=True)).plan["steps"][-2:] == [
        {"position": 9, "kind": "profile", "name": "profile:guest-user"},
        {"position": 10, "kind": "snapshot"},
    ]
    plain = build_plan(catalog=dump(catalog()), definition=dump(definition()), target_vmid=201).plan["steps"]
    assert all(step["kind"] != "profile" for step in plain)
