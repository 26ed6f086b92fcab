# SPDX-License-Identifier: GPL-3.0-or-later
"""TemplateBuild v1: strict validation, defaults, hash vectors, the offline plan and the shipped schema file."""

from __future__ import annotations

import copy
import hashlib
import json
import typing as t
from pathlib import Path

import jsonschema
import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import FormatError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import (
    canonical_json,
    template_plan_hash_bytes,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.schemas import schema_json
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import TEMPLATE, stage_kinds
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    TEMPLATE_BUILD_SCHEMA_V1,
    build_template_plan,
    import_file_name,
    parse_template_build,
    template_build_hash,
    validate_template_build,
)

REPO = Path(__file__).resolve().parents[5]
EXAMPLE = REPO / "examples" / "template-build.yml"
PLANTED = "PLANTEDxyzzy"
SHA256 = "a" * 64
# Fixed vectors of examples/template-build.yml (docs/templates.md, "Hashes").
EXAMPLE_BUILD_HASH = "3c141777a20d13d64060cf72459dbed700e14a52efd87a19f3b4a5a3bcf539c5"
EXAMPLE_PLAN_HASH = "601e4baf6724f8261da1bc5799b58e62d8174f852d6e3db9a7cbe4541ecd0afb"


def minimal(**overrides: t.Any) -> dict[str, t.Any]:
    doc: dict[str, t.Any] = {
        "apiVersion": "vmanyware.dev/v1",
        "kind": "TemplateBuild",
        "image": "debian-13",
        "source": {"url": "http://127.0.0.1:8080/debian.qcow2", "checksum": SHA256, "checksumAlgorithm": "sha256"},
        "node": "pve-test",
        "storage": "local-lvm",
        "importStorage": "local",
        "bridge": "vmbr0",
        "templateVmid": 9000,
        "templateVersion": "debian-13-test",
        "guestUser": "debian",
        "buildAddress": {"address": "192.0.2.50/24", "gateway": "192.0.2.1"},
    }
    doc.update(overrides)
    return doc


def refused(doc: t.Any) -> FormatError:
    with pytest.raises(FormatError) as info:
        validate_template_build(doc)
    assert info.value.code == "invalid_template_build"
    assert PLANTED not in json.dumps(info.value.to_result())
    return info.value


def test_example_parses_with_its_fixed_hashes() -> None:
    planned = build_template_plan(path=str(EXAMPLE))
    assert planned.template_build_hash == EXAMPLE_BUILD_HASH
    assert hashlib.sha256(canonical_json(planned.build)).hexdigest() == EXAMPLE_BUILD_HASH
    assert template_plan_hash_bytes(EXAMPLE_BUILD_HASH, 9000) == ('["%s",9000]' % EXAMPLE_BUILD_HASH).encode()
    assert (
        planned.plan_hash
        == EXAMPLE_PLAN_HASH
        == hashlib.sha256(('["%s",9000]' % EXAMPLE_BUILD_HASH).encode()).hexdigest()
    )


def test_defaults_are_applied_and_the_guest_agent_is_always_baked_in() -> None:
    build = validate_template_build(minimal(packages=[{"name": "curl"}]))
    assert build["source"]["format"] == "qcow2"
    assert build["machine"] == {
        "type": "q35",
        "bios": "ovmf",
        "scsihw": "virtio-scsi-single",
        "serialConsole": True,
        "cores": 2,
        "memoryMiB": 2048,
    }
    assert build["packages"] == [{"name": "qemu-guest-agent"}, {"name": "curl"}]
    assert validate_template_build(minimal())["packages"] == [{"name": "qemu-guest-agent"}]
    pinned = validate_template_build(
        minimal(packages=[{"name": "curl"}, {"name": "qemu-guest-agent", "version": "1:10.0.0-1"}])
    )
    assert pinned["packages"] == [{"name": "curl"}, {"name": "qemu-guest-agent", "version": "1:10.0.0-1"}]


def test_hash_ignores_presentation_but_not_values() -> None:
    doc = minimal()
    text = yaml.safe_dump(doc, sort_keys=False)
    reordered = "# a comment\n" + yaml.safe_dump(
        dict(reversed(list(doc.items()))), sort_keys=True, default_flow_style=True
    )
    first = build_template_plan(text=text)
    assert build_template_plan(text=reordered).template_build_hash == first.template_build_hash
    # explicit defaults are the same document
    explicit = minimal(
        machine={
            "type": "q35",
            "bios": "ovmf",
            "scsihw": "virtio-scsi-single",
            "serialConsole": True,
            "cores": 2,
            "memoryMiB": 2048,
        },
        packages=[{"name": "qemu-guest-agent"}],
    )
    explicit["source"]["format"] = "qcow2"
    assert build_template_plan(text=yaml.safe_dump(explicit)).template_build_hash == first.template_build_hash
    for changed in (
        minimal(templateVersion="other"),
        minimal(templateVmid=9001),
        minimal(machine={"serialConsole": False}),
    ):
        assert build_template_plan(text=yaml.safe_dump(changed)).plan_hash != first.plan_hash


@pytest.mark.parametrize(
    ("mutate", "path", "rule"),
    [
        (lambda d: d.update(kind="TemplateCatalog"), "kind", "const"),
        (lambda d: d.update(extra=PLANTED), "$", "unknown_field"),
        (lambda d: d["source"].update(extra=PLANTED), "source", "unknown_field"),
        (lambda d: d.pop("buildAddress"), "buildAddress", "required"),
        (lambda d: d.update(templateVmid=99), "templateVmid", "any_of"),
        (lambda d: d.update(templateVmid="9000"), "templateVmid", "any_of"),
        (lambda d: d.update(templateVmid=True), "templateVmid", "any_of"),
        (lambda d: d.update(templateVmid=PLANTED), "templateVmid", "any_of"),
        (lambda d: d["source"].update(checksumAlgorithm="md5"), "source.checksumAlgorithm", "enum"),
        (lambda d: d["source"].update(checksum=SHA256.upper()), "source.checksum", "pattern"),
        (lambda d: d["source"].update(checksum="a" * 128), "source.checksum", "checksum_length"),
        (lambda d: d["source"].update(checksumAlgorithm="sha512"), "source.checksum", "checksum_length"),
        (lambda d: d["source"].update(url="ftp://example.org/x.qcow2"), "source.url", "pattern"),
        (lambda d: d["source"].update(url="https://example.org/x y.qcow2"), "source.url", "pattern"),
        (
            lambda d: d["source"].update(url="https://user:%s@example.org/x.qcow2" % PLANTED),
            "source.url",
            "url_credentials",
        ),
        (lambda d: d["source"].update(url="https:///x.qcow2"), "source.url", "url_host"),
        (lambda d: d["source"].update(format="iso"), "source.format", "enum"),
        (lambda d: d.update(machine={"type": "pc"}), "machine.type", "const"),
        (lambda d: d.update(machine={"bios": "seabios"}), "machine.bios", "const"),
        (lambda d: d.update(machine={"scsihw": "lsi"}), "machine.scsihw", "const"),
        (lambda d: d.update(machine={"memoryMiB": 256}), "machine.memoryMiB", "minimum"),
        (lambda d: d.update(diskGiB=3), "diskGiB", "minimum"),
        (lambda d: d.update(guestUser="root"), "guestUser", "default_user_root"),
        (lambda d: d.update(packages=[{"name": "curl"}, {"name": "curl"}]), "packages[1].name", "duplicate_package"),
        (lambda d: d.update(packages=[{"name": "curl", "version": ">= 1"}]), "packages[0].version", "pattern"),
        (lambda d: d["buildAddress"].update(address="192.0.2.50"), "buildAddress.address", "pattern"),
        (lambda d: d["buildAddress"].update(address="192.0.2.300/24"), "buildAddress.address", "build_address_invalid"),
        (lambda d: d["buildAddress"].update(address="192.0.2.0/24"), "buildAddress.address", "build_address_invalid"),
        (lambda d: d["buildAddress"].update(address="192.0.2.255/24"), "buildAddress.address", "build_address_invalid"),
        (lambda d: d["buildAddress"].update(address="192.0.2.50/31"), "buildAddress.address", "build_address_invalid"),
        (lambda d: d["buildAddress"].update(gateway="198.51.100.1"), "buildAddress.gateway", "gateway_outside_network"),
        (lambda d: d["buildAddress"].update(gateway="192.0.2.50"), "buildAddress.gateway", "gateway_equals_address"),
    ],
)
def test_refusals_name_path_and_rule_without_echoing_input(
    mutate: t.Callable[[dict[str, t.Any]], t.Any], path: str, rule: str
) -> None:
    doc = copy.deepcopy(minimal())
    mutate(doc)
    error = refused(doc)
    assert (error.path, error.rule) == (path, rule)
    assert error.message.startswith(ERROR_CODES["invalid_template_build"])


def test_yaml_level_refusals_use_the_template_build_code() -> None:
    with pytest.raises(FormatError) as info:
        parse_template_build(text="a: &x 1\nb: *x\n")
    assert (info.value.code, info.value.rule) == ("invalid_template_build", "anchor")
    with pytest.raises(FormatError) as info:
        parse_template_build(text=yaml.safe_dump(minimal()) + "image: again\n")
    assert info.value.rule == "duplicate_key"


def test_auto_is_valid_but_needs_allocation_to_plan() -> None:
    assert validate_template_build(minimal(templateVmid="auto"))["templateVmid"] == "auto"
    with pytest.raises(FormatError) as info:
        build_template_plan(text=yaml.safe_dump(minimal(templateVmid="auto")))
    assert (info.value.code, info.value.path, info.value.rule) == (
        "invalid_template_build",
        "templateVmid",
        "auto_needs_allocation",
    )


def test_exactly_one_source() -> None:
    with pytest.raises(InputError) as info:
        build_template_plan()
    assert info.value.code == "invalid_plan"


def test_plan_document() -> None:
    planned = build_template_plan(text=yaml.safe_dump(minimal()))
    plan = planned.plan
    assert plan["kind"] == "TemplateBuildPlan" and plan["planHash"] == planned.plan_hash
    assert plan["target"] == {"node": "pve-test", "vmid": 9000, "name": "vmanyware-template-9000"}
    assert plan["source"]["importVolume"] == "local:import/vmanyware-debian-13-aaaaaaaaaaaaaaaa.qcow2"
    assert import_file_name(planned.build) == "vmanyware-debian-13-aaaaaaaaaaaaaaaa.qcow2"
    assert [step["kind"] for step in plan["steps"]] == [
        kind for kind in stage_kinds(TEMPLATE) if kind not in ("disk", "profile")
    ]  # no diskGiB declared, no profiles baked
    grown = build_template_plan(text=yaml.safe_dump(minimal(diskGiB=8))).plan
    assert [step["kind"] for step in grown["steps"]] == [k for k in stage_kinds(TEMPLATE) if k != "profile"] and grown[
        "resources"
    ] == {"diskGiB": 8}
    assert plan["liveVerified"] is False and plan["vmidReserved"] is False
    assert planned.vmid == 9000


def test_shipped_schema_file_and_example_agree() -> None:
    path = REPO / "docs" / "schemas" / "template-build-v1.schema.json"
    assert path.read_text(encoding="utf-8") == schema_json(TEMPLATE_BUILD_SCHEMA_V1), (
        "regenerate with schema_json() (docs/templates.md)"
    )
    jsonschema.Draft202012Validator.check_schema(TEMPLATE_BUILD_SCHEMA_V1)
    example = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(TEMPLATE_BUILD_SCHEMA_V1).validate(example)
    assert template_build_hash(validate_template_build(example)) == EXAMPLE_BUILD_HASH
