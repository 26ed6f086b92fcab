# SPDX-License-Identifier: GPL-3.0-or-later
"""Profiles baked by a template build (docs/templates.md, "Baking profiles"): the document, the refusals, the hashed
build, the plan's profiles and steps, the recorded mapping, the journal's stages."""

from __future__ import annotations

import copy
import json
import typing as t
from pathlib import Path

import pytest
import yaml
from test_profiles import declaration, declarations
from test_template_build_document import EXAMPLE, EXAMPLE_BUILD_HASH, EXAMPLE_PLAN_HASH, PLANTED, minimal

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import FormatError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import template_build_mapping
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.profiles import load_profiles
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    PlannedTemplateBuild,
    build_template_plan,
    template_plan_from_params,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.document import recorded_hashes_match
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import (
    create_template_operation,
    expected_template_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import TEMPLATE, stage_kinds


def planned(
    profiles: list[dict[str, t.Any]] | None = None, documents: t.Any = None, **changes: t.Any
) -> PlannedTemplateBuild:
    document = minimal(distroFamily="debian", **changes)
    if profiles is not None:
        document["profiles"] = profiles
    return build_template_plan(
        text=yaml.safe_dump(document), profiles=declarations() if documents is None else documents
    )


def refusal(profiles: list[dict[str, t.Any]], documents: t.Any = None, **changes: t.Any) -> InputError:
    with pytest.raises(InputError) as caught:
        planned(profiles, documents, **changes)
    return caught.value


def test_without_profiles_the_build_plan_and_hashes_are_as_before(tmp_path: Path) -> None:
    example = build_template_plan(path=str(EXAMPLE))
    assert (example.template_build_hash, example.plan_hash) == (EXAMPLE_BUILD_HASH, EXAMPLE_PLAN_HASH)
    assert "profiles" not in example.build and "profiles" not in example.plan
    assert [step["kind"] for step in example.plan["steps"]] == [k for k in stage_kinds(TEMPLATE) if k != "profile"]
    # declarations are read only when the build bakes profiles: a broken directory changes nothing, nor an empty list
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.yml").write_text("kind: [", encoding="utf-8")
    text = EXAMPLE.read_text(encoding="utf-8")
    for build in (
        build_template_plan(text=text, profiles_path=str(broken)),
        build_template_plan(text=yaml.safe_dump(dict(yaml.safe_load(text), profiles=[])), profiles_path=str(broken)),
    ):
        assert json.dumps(build.plan, sort_keys=True) == json.dumps(example.plan, sort_keys=True)
        assert (build.template_build_hash, build.plan_hash) == (EXAMPLE_BUILD_HASH, EXAMPLE_PLAN_HASH)
    assert template_build_mapping(example.build, 9000, "scsi0").keys() == {
        "image", "node", "templateVmid", "templateVersion", "storage", "bridge", "diskDevice", "guestUser"
    }  # fmt: skip


def test_the_build_records_the_resolved_profiles_and_the_plan_runs_them_after_prepare() -> None:
    build = planned([{"name": "ssh-hardening"}, {"name": "docker-host", "vars": {"port": 2375}}])
    known = load_profiles(documents=declarations())
    assert build.build["profiles"] == [
        {"name": "base", "version": 1, "declarationHash": known["base"].hash, "vars": {"motd": "hi"},
         "requiredBy": ["docker-host", "ssh-hardening"]},  # run order
        {"name": "docker-host", "version": 3, "declarationHash": known["docker-host"].hash,
         "vars": {"users": [], "port": 2375}},
        {"name": "ssh-hardening", "version": 1, "declarationHash": known["ssh-hardening"].hash, "vars": {}},
    ]  # fmt: skip
    entries = build.plan["profiles"]
    assert [entry["name"] for entry in entries] == ["base", "docker-host", "ssh-hardening"]  # lockout risk last
    assert entries[1] == {
        "name": "docker-host", "version": 3, "role": "vmanyware.proxmox.profile_docker_host",
        "declarationHash": known["docker-host"].hash, "vars": {"users": [], "port": 2375},
        "perGuest": False, "lockoutRisk": False,
    }  # fmt: skip
    names = [step.get("name", step["kind"]) for step in build.plan["steps"]]
    assert names == [
        "download", "create", "configure", "start", "prepare",
        "profile:base", "profile:docker-host", "profile:ssh-hardening",
        "generalize", "shutdown", "unconfigure", "convert", "stamp",
    ]  # fmt: skip
    assert [step["position"] for step in build.plan["steps"]] == list(range(1, 14))
    assert build.plan["steps"][5] == {"position": 6, "kind": "profile", "name": "profile:base"}
    mapping = template_build_mapping(build.build, build.vmid, "scsi0")
    assert mapping["bakedProfiles"] == [
        {"name": entry["name"], "version": entry["version"], "declarationHash": entry["declarationHash"]}
        for entry in entries
    ]


def test_the_hashes_cover_each_profile_its_variables_and_its_declaration() -> None:
    first = planned([{"name": "ssh-hardening"}])
    assert planned([{"name": "ssh-hardening"}]).plan_hash == first.plan_hash
    assert first.template_build_hash != planned().template_build_hash
    changed_vars = planned([{"name": "ssh-hardening"}, {"name": "base", "vars": {"motd": "other"}}])
    # the same vars as the default, given explicitly: the resolved build is the same
    explicit = planned([{"name": "base", "vars": {"motd": "hi"}}, {"name": "ssh-hardening"}])
    defaults = planned([{"name": "base"}, {"name": "ssh-hardening"}])
    assert explicit.template_build_hash == defaults.template_build_hash
    documents = declarations()
    documents[0]["variables"]["motd"]["description"] = "a description changes the declaration hash"
    changed_required = planned([{"name": "ssh-hardening"}], documents)  # base only added by requires
    documents = declarations()
    documents[1]["version"] = 2
    bumped = planned([{"name": "ssh-hardening"}], documents)
    hashes = {first.plan_hash, changed_vars.plan_hash, changed_required.plan_hash, bumped.plan_hash}
    assert len(hashes) == 4


def test_declarations_default_to_the_profiles_directory_beside_the_build_file(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    for document in declarations():
        (tmp_path / "profiles" / ("%s.yml" % document["name"])).write_text(yaml.safe_dump(document), encoding="utf-8")
    path = tmp_path / "template-build.yml"
    path.write_text(yaml.safe_dump(minimal(distroFamily="debian", profiles=[{"name": "base"}])), encoding="utf-8")
    params = {"template_build": None, "template_build_path": str(path), "profiles_path": None, "profiles": None}
    beside = template_plan_from_params(params)
    assert [entry["name"] for entry in beside.plan["profiles"]] == ["base"]
    inline = template_plan_from_params(dict(params, profiles=declarations()))
    assert inline.plan_hash == beside.plan_hash
    # inline text has no directory beside it: no declarations, so the profile is unknown
    with pytest.raises(InputError) as caught:
        template_plan_from_params(dict(params, template_build=path.read_text(), template_build_path=None))
    assert (caught.value.code, caught.value.path) == ("profile_not_found", "profiles[0].name")


@pytest.mark.parametrize(
    ("profiles", "code", "path", "rule"),
    [
        ([{"name": "nginx"}], "profile_not_found", "profiles[0].name", "not_among_profiles"),
        ([{"name": "base", "vars": {"motd": 1}}], "invalid_profile_vars", "profiles[0].vars.motd", "variable_type"),
        ([{"name": "base", "vars": {"port": 1}}], "invalid_profile_vars", "profiles[0].vars.port", "unknown_variable"),
        ([{"name": "docker-host"}], "invalid_profile_vars", "profiles[0].vars", "required_variable"),
        ([{"name": "base"}, {"name": "base"}], "invalid_definition", "profiles[1].name", "duplicate_profile_request"),
        ([{"name": "base", "version": 2}], "profile_version_mismatch", "profiles[0].version", "pinned_version"),
        ([{"name": "base", "requiredBy": ["x"]}], "invalid_template_build", "profiles[0]", "unknown_field"),
    ],
)
def test_refusals(profiles: list[dict[str, t.Any]], code: str, path: str, rule: str) -> None:
    err = refusal(profiles)
    assert (err.code, err.path, err.details["rule"]) == (code, path, rule)


def test_a_required_variable_is_fine_when_the_build_gives_it() -> None:
    build = planned([{"name": "docker-host", "vars": {"port": 2376}}])
    assert build.plan["profiles"][1]["vars"] == {"users": [], "port": 2376}


def test_distro_family_refusals() -> None:
    documents = declarations() + [declaration("rhel-only", distroFamilies=["rhel"])]
    err = refusal([{"name": "base"}, {"name": "rhel-only"}], documents)
    assert (err.code, err.path, err.details) == (
        "profile_distro_unsupported",
        "profiles[4]:distroFamilies",
        {"rule": "distro_family", "position": 2},
    )
    document = minimal(profiles=[{"name": "base"}])  # no distroFamily
    with pytest.raises(InputError) as caught:
        build_template_plan(text=yaml.safe_dump(document), profiles=declarations())
    assert (caught.value.code, caught.value.path) == ("distro_family_not_recorded", "distroFamily")
    assert "distroFamily" in str(caught.value)


def test_a_per_guest_profile_may_be_baked() -> None:
    entry = planned([{"name": "guest-user"}]).plan["profiles"][0]
    assert entry["perGuest"] is True  # the deploy plan runs it again (docs/profiles.md, "Plan")


def test_no_value_is_echoed() -> None:
    err = refusal([{"name": "base", "vars": {"motd": [PLANTED]}}])
    assert PLANTED not in str(err) and PLANTED not in json.dumps(err.details)
    with pytest.raises(FormatError) as caught:
        planned([{"name": "base", "vars": {}, PLANTED + " !": 1}])  # not a plain field name: never named
    assert PLANTED not in str(caught.value) + caught.value.path


def test_the_journal_records_one_profile_stage_each_and_its_hashes_hold(tmp_path: Path) -> None:
    build = planned([{"name": "ssh-hardening"}])
    store = JournalStore(str(tmp_path / "journal"))
    result = create_template_operation(
        store,
        planned=build,
        provider_scope_id="pve:test",
        confirmation=expected_template_confirmation(build.plan, "pve:test"),
        idempotency_key=None,
        environ={"VMANYWARE_PROVISIONING_ENABLED": "true"},
    )
    document = store.load(result["operation_id"])
    kinds = [item["kind"] for item in document["stages"]]
    assert kinds[4:8] == ["prepare", "profile:base", "profile:ssh-hardening", "generalize"]
    assert document["mapping"]["bakedProfiles"][1]["name"] == "ssh-hardening"
    assert document["definition"]["profiles"] == build.build["profiles"]
    assert recorded_hashes_match(document)
    edited = copy.deepcopy(document)
    edited["mapping"]["bakedProfiles"].pop()
    assert not recorded_hashes_match(edited)
