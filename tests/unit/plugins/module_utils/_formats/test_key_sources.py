# SPDX-License-Identifier: GPL-3.0-or-later
"""SSH key sources (docs/profiles.md, "SSH key sources"): files, directories, dedupe, exclusion, refusals, hashes."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import typing as t
from pathlib import Path

import pytest
from format_samples import ED25519_KEY, PLANTED, catalog, definition, dump, ed25519_pool, generated_keys

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.key_sources import fingerprint
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import PlannedEnvironment, build_plan


def plan(definition_doc: t.Any = None, sources: t.Any = None) -> PlannedEnvironment:
    return build_plan(
        catalog=dump(catalog()),
        definition=dump(definition_doc if definition_doc is not None else definition()),
        target_vmid=201,
        ssh_key_sources=sources,
    )


def refusal(sources: t.Any, definition_doc: t.Any = None) -> InputError:
    with pytest.raises(InputError) as caught:
        plan(definition_doc, sources)
    assert PLANTED not in str(caught.value) and PLANTED not in json.dumps(caught.value.details)
    return caught.value


def expected_fingerprint(line: str) -> str:
    digest = hashlib.sha256(base64.b64decode(line.split()[1])).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@pytest.fixture
def sources(tmp_path: Path) -> list[dict[str, str]]:
    """personal: one file; team: a directory of two *.pub files (one repeating the definition's key) and other files."""
    pool = ed25519_pool()
    (tmp_path / "me.pub").write_text("# mine\n\n%s me@desk\n" % pool[0], encoding="utf-8")
    team = tmp_path / "team"
    team.mkdir()
    (team / "b-bob.pub").write_text("%s bob\n%s\n" % (pool[1], ED25519_KEY.rsplit(" ", 1)[0]), encoding="utf-8")
    (team / "a-carol.pub").write_text("%s carol\r\n" % pool[2], encoding="utf-8")
    (team / "notes.txt").write_text(PLANTED, encoding="utf-8")  # not *.pub: not read
    return [{"name": "personal", "path": str(tmp_path / "me.pub")}, {"name": "team", "path": str(team)}]


def test_without_sources_the_plan_is_exactly_as_before() -> None:
    before = plan()
    assert plan(sources=[]) == before and plan(sources=None) == before
    assert before.plan["access"] == {"sshPublicKeyCount": 1}


def test_files_and_directories_in_order_with_dedupe(sources: list[dict[str, str]]) -> None:
    pool = ed25519_pool()
    planned = plan(sources=sources)
    assert planned.definition["access"]["sshPublicKeys"] == [
        ED25519_KEY,
        pool[0] + " me@desk",
        pool[2] + " carol",
        pool[1] + " bob",
    ]
    assert planned.plan["access"] == {
        "sshPublicKeyCount": 4,
        "sshPublicKeys": [
            {
                "type": "ssh-ed25519",
                "fingerprint": expected_fingerprint(ED25519_KEY),
                "sources": ["definition", "team"],
            },
            {"type": "ssh-ed25519", "fingerprint": expected_fingerprint(pool[0]), "sources": ["personal"]},
            {"type": "ssh-ed25519", "fingerprint": expected_fingerprint(pool[2]), "sources": ["team"]},
            {"type": "ssh-ed25519", "fingerprint": expected_fingerprint(pool[1]), "sources": ["team"]},
        ],
    }
    # the keys are in the definition, so both hashes cover them
    before = plan()
    assert planned.definition_hash != before.definition_hash and planned.plan_hash != before.plan_hash
    assert plan(sources=sources).plan_hash == planned.plan_hash  # stable
    # the recorded (effective) definition plans again to the same hashes, with or without the sources (a repeat)
    assert plan(planned.definition, sources).definition_hash == planned.definition_hash
    assert plan(planned.definition).definition_hash == planned.definition_hash


def test_fingerprint_is_openssh_s() -> None:
    assert fingerprint(base64.b64decode(ED25519_KEY.split()[1])) == expected_fingerprint(ED25519_KEY)


def test_exclusion(sources: list[dict[str, str]], tmp_path: Path) -> None:
    document = definition()
    document["access"]["excludeKeySources"] = ["team"]
    (tmp_path / "team" / "zz-bad.pub").write_text(PLANTED, encoding="utf-8")  # an excluded source is not read
    planned = plan(document, sources)
    assert [entry["sources"] for entry in planned.plan["access"]["sshPublicKeys"]] == [["definition"], ["personal"]]
    assert planned.definition["access"]["excludeKeySources"] == ["team"]
    err = refusal(sources, dict(document, access=dict(document["access"], excludeKeySources=["nosuch"])))
    assert (err.code, err.path, err.details["rule"]) == (
        "invalid_definition",
        "access.excludeKeySources[0]",
        "unknown_key_source",
    )
    err = refusal(sources, dict(document, access=dict(document["access"], excludeKeySources=["team", "team"])))
    assert (err.code, err.path, err.details["rule"]) == (
        "invalid_definition",
        "access.excludeKeySources[1]",
        "duplicate_key_source",
    )


def test_invalid_key_named_by_file_and_line(sources: list[dict[str, str]], tmp_path: Path) -> None:
    (tmp_path / "team" / "c-dave.pub").write_text("# dave\n%s\n" % generated_keys()["rsa1024"], encoding="utf-8")
    err = refusal(sources)
    assert (err.code, err.path, err.details) == (
        "invalid_ssh_key_source",
        "ssh_key_sources[1]:c-dave.pub",
        {"rule": "ssh_key_too_short", "line": 2},
    )
    (tmp_path / "team" / "c-dave.pub").write_text('from="10.0.0.1" %s %s\n' % (ED25519_KEY, PLANTED), encoding="utf-8")
    err = refusal(sources)
    assert (err.path, err.details) == ("ssh_key_sources[1]:c-dave.pub", {"rule": "ssh_key_line", "line": 1})
    (tmp_path / "me.pub").write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYA " + PLANTED, encoding="utf-8"
    )
    err = refusal(sources)
    assert (err.path, err.details["line"]) == ("ssh_key_sources[0]", 1) and err.details["rule"].startswith("ssh_key_")


def test_symlinks_unreadable_and_oversize(sources: list[dict[str, str]], tmp_path: Path) -> None:
    os.symlink(tmp_path / "me.pub", tmp_path / "link.pub")
    err = refusal([{"name": "linked", "path": str(tmp_path / "link.pub")}])
    assert (err.code, err.path, err.details["rule"]) == ("invalid_ssh_key_source", "ssh_key_sources[0]", "symlink")
    os.symlink(tmp_path / "me.pub", tmp_path / "team" / "m-link.pub")
    err = refusal(sources)
    assert (err.path, err.details["rule"]) == ("ssh_key_sources[1]:m-link.pub", "symlink")
    os.unlink(tmp_path / "team" / "m-link.pub")
    err = refusal([{"name": "gone", "path": str(tmp_path / "nosuch.pub")}])
    assert err.details["rule"] == "unreadable"
    (tmp_path / "big.pub").write_text(("%s\n" % ED25519_KEY) * 1000, encoding="utf-8")
    err = refusal([{"name": "big", "path": str(tmp_path / "big.pub")}])
    assert err.details["rule"] == "too_large"
    (tmp_path / "bin.pub").write_bytes(b"\xff\xfe" + PLANTED.encode())
    err = refusal([{"name": "bin", "path": str(tmp_path / "bin.pub")}])
    assert err.details["rule"] == "not_utf8"


def test_too_many_keys(tmp_path: Path) -> None:
    (tmp_path / "many.pub").write_text("\n".join(ed25519_pool()[:16]), encoding="utf-8")
    err = refusal([{"name": "many", "path": str(tmp_path / "many.pub")}])
    assert (err.code, err.path, err.details["rule"]) == ("invalid_ssh_key_source", "ssh_key_sources", "too_many_keys")


@pytest.mark.parametrize(
    ("value", "path", "rule"),
    [
        ("x", "ssh_key_sources", "type"),
        ([{"name": "a"}], "ssh_key_sources[0]", "type"),
        ([{"name": "Bad_Name", "path": "/x"}], "ssh_key_sources[0].name", "pattern"),
        ([{"name": "definition", "path": "/x"}], "ssh_key_sources[0].name", "reserved_key_source"),
        ([{"name": "a", "path": "/x"}, {"name": "a", "path": "/y"}], "ssh_key_sources[1].name", "duplicate_key_source"),
        ([{"name": "a", "path": ""}], "ssh_key_sources[0].path", "type"),
    ],
)
def test_option_refusals(value: t.Any, path: str, rule: str) -> None:
    err = refusal(value)
    assert (err.code, err.path, err.details["rule"]) == ("invalid_ssh_key_source", path, rule)
