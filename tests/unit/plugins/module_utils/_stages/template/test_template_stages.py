# SPDX-License-Identifier: GPL-3.0-or-later
"""Template build stage helpers: the attestation decision, the catalog mapping and its YAML, the stamp."""

from __future__ import annotations

import copy
import re
import typing as t

import pytest
import yaml
from pve_fake import FakeClient
from test_template_build_document import minimal

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import new_operation_document
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageContext
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    build_template_plan,
    stamp_revision,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import journal_snapshots
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.template.stamp import (
    catalog_mapping,
    mapping_yaml,
    stamp_description,
    stamp_output,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.template.generalize import (
    GeneralizeStage,
    parse_passwd_status,
)

GIB = 1024**3
OPERATION_ID = "op-" + "a" * 26


def operation(
    disk_bytes: int = 8 * GIB,
    generalized: dict[str, t.Any] | None = None,
    profile_documents: t.Any = None,
    **changes: t.Any,
) -> dict[str, t.Any]:
    """A template build operation document with the evidence the stamp reads; ``profile_documents``: the declarations
    of the profiles the build (``changes``) bakes."""
    planned = build_template_plan(text=yaml.safe_dump(minimal(diskGiB=8, **changes)), profiles=profile_documents)
    definition, mapping, plan = journal_snapshots(planned)
    document = new_operation_document(
        OPERATION_ID,
        None,
        {"scope": "pve:x", "node": "pve-test", "vmid": 9000},
        {"definition": definition, "mapping": mapping, "plan": plan, "confirmation": {}},
        [step.get("name") or step["kind"] for step in plan["steps"]],
        "2026-12-01T00:00:00.000000Z",
    )
    stages = {item["kind"]: item for item in document["stages"]}
    stages["convert"]["evidence"] = {"diskSizeBytes": disk_bytes}
    default = {"standIn": False, "passwordLocked": True, "noAuthorizedKeys": True}
    stages["generalize"]["evidence"] = generalized if generalized is not None else default
    stages["prepare"]["evidence"] = {"preparedBy": "ssh"}
    return document


@pytest.mark.parametrize(
    ("line", "locked"),
    [
        ("debian L 2026-12-01 0 99999 7 -1", True),
        ("debian P 2026-12-01 0 99999 7 -1", False),
        ("debian NP 2026-12-01 0 99999 7 -1", False),
        ("debianx L 2026-12-01 0 99999 7 -1", False),
        ("", False),
    ],
)
def test_passwd_status(line: str, locked: bool) -> None:
    assert parse_passwd_status(line, "debian") is locked


def test_generalize_decides_the_attestation_from_the_guest_report() -> None:
    ctx = StageContext(
        operation=operation(), client=FakeClient(), kind="generalize"
    )  # a client that answers nothing: observe reads nothing
    assert GeneralizeStage("ssh", "debian L 2026-12-01", 0).observe(ctx) == {
        "standIn": False,
        "passwordLocked": True,
        "noAuthorizedKeys": True,
    }
    assert GeneralizeStage("ssh", "debian P 2026-12-01", 1).observe(ctx) == {
        "standIn": False,
        "passwordLocked": False,
        "noAuthorizedKeys": False,
    }
    assert GeneralizeStage("stand-in", None, None).observe(ctx) == {
        "standIn": True,
        "passwordLocked": None,
        "noAuthorizedKeys": None,
    }


def test_catalog_mapping_and_its_yaml_are_a_valid_catalog_entry() -> None:
    mapping = catalog_mapping(operation())
    assert mapping["sourceDiskGiB"] == 8 and mapping["imageDefaultUser"] == {
        "name": "debian",
        "templateVersion": "debian-13-test",
        "passwordLocked": True,
        "noAuthorizedKeys": True,
    }
    text = mapping_yaml(mapping)
    catalog = parse_catalog(
        text="apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages:\n" + re.sub(r"(?m)^", "  ", text)
    )
    assert catalog["images"] == [mapping]
    numeric = catalog_mapping(operation(templateVersion="13.1"))
    assert '  templateVersion: "13.1"' in mapping_yaml(numeric)  # quoted, else YAML reads a float
    assert (
        stamp_output({"stages": [{"kind": "stamp", "status": "completed", "evidence": {"catalogMapping": mapping}}]})[
            "catalog_mapping"
        ]
        == mapping
    )
    assert (
        stamp_output({"stages": [{"kind": "stamp", "status": "submitted", "evidence": {"catalogMapping": mapping}}]})
        == {}
    )
    assert stamp_output({"stages": [{"kind": "stamp", "status": "pending", "evidence": {}}]}) == {}


def test_catalog_mapping_records_the_declared_distro_family() -> None:
    """A TemplateBuild that declares distroFamily prints it in the catalog mapping (profiles need it); one that does
    not prints the mapping exactly as before, since the build itself never reads the guest's OS (docs/profiles.md)."""
    assert "distroFamily" not in catalog_mapping(operation())
    mapping = catalog_mapping(operation(distroFamily="debian"))
    assert mapping["distroFamily"] == "debian"
    text = mapping_yaml(mapping)
    catalog = parse_catalog(
        text="apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages:\n" + re.sub(r"(?m)^", "  ", text)
    )
    assert catalog["images"] == [mapping]


@pytest.mark.parametrize(
    "generalized",
    [
        {"standIn": True, "passwordLocked": None, "noAuthorizedKeys": None},
        {"standIn": False, "passwordLocked": False, "noAuthorizedKeys": True},
        {"standIn": False, "passwordLocked": True, "noAuthorizedKeys": False},
    ],
)
def test_no_attestation_without_verification(generalized: dict[str, t.Any]) -> None:
    assert "imageDefaultUser" not in catalog_mapping(operation(generalized=generalized))


def test_a_disk_the_catalog_cannot_hold_is_refused() -> None:
    for size in (3 * GIB, 8 * GIB + 1):
        with pytest.raises(StageError) as info:
            catalog_mapping(operation(disk_bytes=size))
        assert info.value.code == "observation_mismatch"


def test_stamp_round_trip_shows_only_exact_forms() -> None:
    document = operation()
    description = stamp_description(document, "ssh")
    assert not description.endswith((" ", "\n")) and "checksum sha256:" + "a" * 64 in description
    assert stamp_revision(description) == ("debian-13-test", OPERATION_ID)
    assert "preparedBy stand-in (simulated guest" in stamp_description(copy.deepcopy(document), "stand-in")
    assert stamp_revision(description.replace(OPERATION_ID + "\n", "op-bad\n")) is None
    assert stamp_revision("just a description") is None and stamp_revision(None) is None
