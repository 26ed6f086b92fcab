# SPDX-License-Identifier: GPL-3.0-or-later
"""Every rule of the v1 template catalog and environment definition, table-driven.

Each refusal asserts the fixed code, the field path and the rule, and that the offending
value appears neither in ``str(error)`` nor in ``error.to_result()``.
"""

from __future__ import annotations

import base64
import json
import os
import typing as t

import pytest
from format_samples import (
    DELETE,
    ED25519_KEY,
    PLANTED,
    catalog,
    definition,
    dump,
    ed25519_pool,
    generated_keys,
    key_line,
    mapping,
    mutated,
    ssh_string,
)

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats import yaml_strict
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import (
    parse_definition,
    validate_definition,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog, validate_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import RULE_TEXTS, FormatError


def assert_refused(err: VmanywareError, code: str, path: str, rule: str, planted: t.Any = None) -> None:
    assert isinstance(err, FormatError)
    assert (err.code, err.path, err.details["rule"]) == (code, path, rule), (err.code, err.path, err.details)
    assert err.code in ERROR_CODES
    rendered_error = str(err) + json.dumps(err.to_result(), ensure_ascii=False)
    # every planted string in the tables contains "planted" (values, unknown keys, key comments)
    assert "planted" not in rendered_error.lower()
    if planted is not None and not isinstance(planted, bool):
        rendered = planted if isinstance(planted, str) else json.dumps(planted)
        if len(rendered) >= 5:  # shorter values (0, 3, "p") say nothing
            assert rendered not in rendered_error


# --------------------------------------------------------------------------- catalog

M = ("images", 1)  # the mutated mapping (index 1: paths must say images[1])
IDU = M + ("imageDefaultUser",)

CATALOG_CASES: list[tuple[str, tuple[t.Any, ...], t.Any, str, str]] = [
    # (id, path in document, new value, expected error path, rule)
    ("apiVersion-wrong", ("apiVersion",), "vmanyware.dev/v2", "apiVersion", "const"),
    ("apiVersion-missing", ("apiVersion",), DELETE, "apiVersion", "required"),
    ("kind-wrong", ("kind",), "Environment", "kind", "const"),
    ("kind-missing", ("kind",), DELETE, "kind", "required"),
    ("images-missing", ("images",), DELETE, "images", "required"),
    ("images-not-list", ("images",), {"image": "x"}, "images", "type"),
    ("images-null", ("images",), None, "images", "type"),
    ("unknown-top", ("planted-key-name",), 1, "$", "unknown_field"),
    ("mapping-not-mapping", M, "plantedmappingtext", "images[1]", "type"),
    ("unknown-in-mapping", M + ("planted-key-name",), "x", "images[1]", "unknown_field"),
    ("image-uppercase", M + ("image",), "Plantedimage", "images[1].image", "pattern"),
    ("image-empty", M + ("image",), "", "images[1].image", "pattern"),
    ("image-too-long", M + ("image",), "p" * 65, "images[1].image", "pattern"),
    ("image-underscore", M + ("image",), "planted_image", "images[1].image", "pattern"),
    ("image-int", M + ("image",), 987613, "images[1].image", "type"),
    ("node-leading-hyphen", M + ("node",), "-plantednode", "images[1].node", "pattern"),
    ("node-too-long", M + ("node",), "n" * 64, "images[1].node", "pattern"),
    ("node-space", M + ("node",), "planted node", "images[1].node", "pattern"),
    ("node-empty", M + ("node",), "", "images[1].node", "pattern"),
    ("vmid-too-small", M + ("templateVmid",), 99, "images[1].templateVmid", "minimum"),
    ("vmid-too-large", M + ("templateVmid",), 1000000000, "images[1].templateVmid", "maximum"),
    ("vmid-bool", M + ("templateVmid",), True, "images[1].templateVmid", "type"),
    ("vmid-float", M + ("templateVmid",), 9876.0, "images[1].templateVmid", "type"),
    ("vmid-string", M + ("templateVmid",), "98761", "images[1].templateVmid", "type"),
    ("version-too-long", M + ("templateVersion",), "v" * 129, "images[1].templateVersion", "pattern"),
    ("version-space", M + ("templateVersion",), "planted version", "images[1].templateVersion", "pattern"),
    ("version-slash", M + ("templateVersion",), "planted/version", "images[1].templateVersion", "pattern"),
    ("version-empty", M + ("templateVersion",), "", "images[1].templateVersion", "pattern"),
    ("storage-too-long", M + ("storage",), "s" * 65, "images[1].storage", "pattern"),
    ("storage-leading-underscore", M + ("storage",), "_plantedstorage", "images[1].storage", "pattern"),
    ("storage-slash", M + ("storage",), "planted/storage", "images[1].storage", "pattern"),
    ("bridge-too-long", M + ("bridge",), "plantedbridge123", "images[1].bridge", "pattern"),
    ("bridge-leading-dot", M + ("bridge",), ".plantedbr", "images[1].bridge", "pattern"),
    ("bridge-empty", M + ("bridge",), "", "images[1].bridge", "pattern"),
    ("diskdevice-ide", M + ("diskDevice",), "ide0", "images[1].diskDevice", "enum"),
    ("diskdevice-scsi1", M + ("diskDevice",), "scsi1", "images[1].diskDevice", "enum"),
    ("diskdevice-int", M + ("diskDevice",), 0, "images[1].diskDevice", "type"),
    ("sourcedisk-too-small", M + ("sourceDiskGiB",), 3, "images[1].sourceDiskGiB", "minimum"),
    ("sourcedisk-too-large", M + ("sourceDiskGiB",), 4097, "images[1].sourceDiskGiB", "maximum"),
    ("sourcedisk-float", M + ("sourceDiskGiB",), 8.0, "images[1].sourceDiskGiB", "type"),
    ("sourcedisk-bool", M + ("sourceDiskGiB",), True, "images[1].sourceDiskGiB", "type"),
    ("guestuser-uppercase", M + ("guestUser",), "Plantedu", "images[1].guestUser", "pattern"),
    ("guestuser-digit-first", M + ("guestUser",), "1planted", "images[1].guestUser", "pattern"),
    ("guestuser-too-long", M + ("guestUser",), "u" * 33, "images[1].guestUser", "pattern"),
    ("guestuser-at", M + ("guestUser",), "planted@u", "images[1].guestUser", "pattern"),
    ("idu-not-mapping", IDU, "plantedattestation", "images[1].imageDefaultUser", "type"),
    ("idu-unknown", IDU + ("planted-key-name",), True, "images[1].imageDefaultUser", "unknown_field"),
    ("idu-name-mismatch", IDU + ("name",), "plantedname", "images[1].imageDefaultUser.name", "default_user_mismatch"),
    ("idu-name-pattern", IDU + ("name",), "Planted", "images[1].imageDefaultUser.name", "pattern"),
    (
        "idu-version-mismatch",
        IDU + ("templateVersion",),
        "planted-version",
        "images[1].imageDefaultUser.templateVersion",
        "template_version_mismatch",
    ),
    ("idu-password-false", IDU + ("passwordLocked",), False, "images[1].imageDefaultUser.passwordLocked", "const"),
    ("idu-password-string", IDU + ("passwordLocked",), "true", "images[1].imageDefaultUser.passwordLocked", "type"),
    ("idu-password-int", IDU + ("passwordLocked",), 1, "images[1].imageDefaultUser.passwordLocked", "type"),
    ("idu-keys-false", IDU + ("noAuthorizedKeys",), False, "images[1].imageDefaultUser.noAuthorizedKeys", "const"),
    ("idu-keys-null", IDU + ("noAuthorizedKeys",), None, "images[1].imageDefaultUser.noAuthorizedKeys", "type"),
]
CATALOG_CASES += [
    ("missing-" + field, M + (field,), DELETE, "images[1].%s" % field, "required")
    for field in (
        "image",
        "node",
        "templateVmid",
        "templateVersion",
        "storage",
        "bridge",
        "diskDevice",
        "sourceDiskGiB",
        "guestUser",
    )
]
CATALOG_CASES += [
    ("idu-missing-" + field, IDU + (field,), DELETE, "images[1].imageDefaultUser.%s" % field, "required")
    for field in ("name", "templateVersion", "passwordLocked", "noAuthorizedKeys")
]


@pytest.mark.parametrize(
    ("document_path", "value", "path", "rule"),
    [case[1:] for case in CATALOG_CASES],
    ids=[case[0] for case in CATALOG_CASES],
)
def test_catalog_rule(document_path: tuple[t.Any, ...], value: t.Any, path: str, rule: str) -> None:
    document = mutated(catalog(), document_path, value)
    with pytest.raises(FormatError) as info:
        parse_catalog(text=dump(document))
    assert_refused(info.value, "invalid_catalog", path, rule, None if value is DELETE else value)
    # the same rule applies to an already parsed structure (filters take dicts)
    with pytest.raises(FormatError) as info:
        validate_catalog(document)
    assert_refused(info.value, "invalid_catalog", path, rule)


def test_catalog_valid_and_normalized() -> None:
    source = catalog()
    source["images"][1] = dict(reversed(list(source["images"][1].items())))  # field order in the file does not matter
    result = parse_catalog(text=dump(source))
    assert result == catalog()
    assert list(result["images"][1]) == list(mapping())
    assert list(result["images"][1]["imageDefaultUser"]) == [
        "name",
        "templateVersion",
        "passwordLocked",
        "noAuthorizedKeys",
    ]
    assert "imageDefaultUser" not in result["images"][0]


def test_catalog_empty_images_is_valid() -> None:
    assert parse_catalog(text="apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages: []\n")["images"] == []


def test_catalog_all_disk_devices_and_bounds() -> None:
    for device in ("scsi0", "virtio0", "sata0"):
        parse_catalog(text=dump(mutated(catalog(), M + ("diskDevice",), device)))
    for field, value in (
        ("templateVmid", 100),
        ("templateVmid", 999999999),
        ("sourceDiskGiB", 4),
        ("sourceDiskGiB", 4096),
    ):
        parse_catalog(text=dump(mutated(catalog(), M + (field,), value)))
    for field, value in (
        ("image", "i" * 64),
        ("node", "n" * 63),
        ("storage", "s" * 64),
        ("bridge", "b" * 15),
        ("templateVersion", "v" * 128),
    ):
        parse_catalog(text=dump(mutated(catalog(), ("images", 0, field), value)))
    document = mutated(mutated(catalog(), M + ("guestUser",), "_" + "u" * 31), IDU + ("name",), "_" + "u" * 31)
    parse_catalog(text=dump(document))


def test_catalog_limit_of_128_mappings() -> None:
    def many(count: int) -> dict[str, t.Any]:
        document = catalog()
        document["images"] = [mapping(image="image-%d" % index) for index in range(count)]
        return document

    assert len(parse_catalog(text=dump(many(128)))["images"]) == 128
    with pytest.raises(FormatError) as info:
        parse_catalog(text=dump(many(129)))
    assert_refused(info.value, "invalid_catalog", "images", "max_items")


def test_catalog_duplicate_image() -> None:
    document = catalog()
    document["images"].append(mapping(templateVmid=9100))
    with pytest.raises(FormatError) as info:
        parse_catalog(text=dump(document))
    assert_refused(info.value, "invalid_catalog", "images[2].image", "duplicate_image")


def test_catalog_default_user_root() -> None:
    document = mutated(mutated(catalog(), M + ("guestUser",), "root"), IDU + ("name",), "root")
    with pytest.raises(FormatError) as info:
        parse_catalog(text=dump(document))
    assert_refused(info.value, "invalid_catalog", "images[1].imageDefaultUser.name", "default_user_root")


# --------------------------------------------------------------------------- YAML level (both formats)

VALID_CATALOG_TEXT = dump(catalog())

YAML_CASES: list[tuple[str, str, str]] = [
    # (id, text, rule); PLANTED appears in each text and must not come back
    ("duplicate-top", VALID_CATALOG_TEXT + "kind: %s\n" % PLANTED, "duplicate_key"),
    ("duplicate-nested", "images:\n  - image: a\n    bridge: vmbr0\n    bridge: %s\n" % PLANTED, "duplicate_key"),
    (
        "duplicate-deep",
        "images:\n- image: a\n  imageDefaultUser:\n    name: debian\n    name: %s\n" % PLANTED,
        "duplicate_key",
    ),
    ("duplicate-quoted", "'kind': a\n\"kind\": %s\n" % PLANTED, "duplicate_key"),
    (
        "duplicate-flow",
        "apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages: [{image: a, image: %s}]\n" % PLANTED,
        "duplicate_key",
    ),
    ("anchor", VALID_CATALOG_TEXT.replace("bridge: vmbr0", "bridge: &%s vmbr0" % PLANTED, 1), "anchor"),
    ("alias", "x: &a %s\ny: *a\n" % PLANTED, "anchor"),
    ("alias-undefined", "x: *%s\n" % PLANTED, "alias"),
    ("tag-str", VALID_CATALOG_TEXT.replace("bridge: vmbr0", "bridge: !!str %s" % PLANTED, 1), "explicit_tag"),
    ("tag-custom", "apiVersion: !%s vmanyware.dev/v1\n" % PLANTED, "explicit_tag"),
    ("tag-nonspecific", "apiVersion: ! %s\n" % PLANTED, "explicit_tag"),
    ("tag-python", "x: !!python/object:os.system %s\n" % PLANTED, "explicit_tag"),
    ("tag-on-mapping", "x: !!map {a: %s}\n" % PLANTED, "explicit_tag"),
    ("multiple-documents", VALID_CATALOG_TEXT + "---\n%s: 1\n" % PLANTED, "multiple_documents"),
    ("multiple-documents-explicit", "--- %s\n--- b\n" % PLANTED, "multiple_documents"),
    ("syntax-unclosed", "images: [%s\n" % PLANTED, "yaml_syntax"),
    ("syntax-bad-indent", "a:\n  b: %s\n c: 1\n" % PLANTED, "yaml_syntax"),
    ("syntax-tab", "a:\n\t- %s\n" % PLANTED, "yaml_syntax"),
    ("non-printable", "a: %s\x07\n" % PLANTED, "yaml_syntax"),
    ("too-deep", "x: " + "[" * 40 + PLANTED + "]" * 40 + "\n", "too_deep"),
    ("key-int", "1: %s\n" % PLANTED, "key_type"),
    ("key-bool", "true: %s\n" % PLANTED, "key_type"),
    ("key-null", "~: %s\n" % PLANTED, "key_type"),
    ("key-complex", "? [a, b]\n: %s\n" % PLANTED, "key_type"),
]


@pytest.mark.parametrize(("text", "rule"), [case[1:] for case in YAML_CASES], ids=[case[0] for case in YAML_CASES])
@pytest.mark.parametrize("kind", ["catalog", "definition"])
def test_yaml_level_refusals(kind: str, text: str, rule: str) -> None:
    parse = parse_catalog if kind == "catalog" else parse_definition
    with pytest.raises(FormatError) as info:
        parse(text=text)
    assert_refused(info.value, "invalid_" + kind, "$", rule, PLANTED)


def test_yaml_syntax_error_keeps_only_the_position() -> None:
    with pytest.raises(FormatError) as info:
        parse_catalog(text="apiVersion: vmanyware.dev/v1\nimages: [%s\n" % PLANTED)
    assert set(info.value.details) == {"rule", "line", "column"}
    assert info.value.details["line"] >= 2


def test_depth_limit_allows_32_levels() -> None:
    # the root mapping is level 1; 31 nested lists make 32 levels
    with pytest.raises(FormatError) as info:
        parse_catalog(text="x: " + "[" * 31 + "]" * 31 + "\n")
    assert info.value.details["rule"] == "unknown_field"
    with pytest.raises(FormatError) as info:
        parse_catalog(text="x: " + "[" * 32 + "]" * 32 + "\n")
    assert info.value.details["rule"] == "too_deep"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "type"),
        ("# only a comment\n", "type"),
        ("---\n...\n", "type"),
        ("- a\n- b\n", "type"),
        ("plain text\n", "type"),
    ],
)
def test_documents_that_are_not_mappings(text: str, rule: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_definition(text=text)
    assert_refused(info.value, "invalid_definition", "$", rule)


def test_yaml_11_booleans_and_numbers_are_not_resolved() -> None:
    document = catalog()
    for spelling in ("yes", "on", "True", "TRUE", "y"):
        text = dump(document).replace("passwordLocked: true", "passwordLocked: %s" % spelling)
        with pytest.raises(FormatError) as info:
            parse_catalog(text=text)
        assert_refused(info.value, "invalid_catalog", "images[1].imageDefaultUser.passwordLocked", "type")
    for spelling in ("0x2328", "0o21450", "021450", "9_000", "2:30:00", "9000.0", "9e3", ".inf", "null", "~"):
        text = dump(document).replace("templateVmid: 9000", "templateVmid: %s" % spelling)
        with pytest.raises(FormatError) as info:
            parse_catalog(text=text)
        assert_refused(info.value, "invalid_catalog", "images[1].templateVmid", "type")
    # quoted "true" is a string, plain true a boolean; a YAML 1.1 boolean word is a plain string
    assert yaml_strict.load_strict_yaml(
        b"a: 'true'\nb: true\nc: no\nd: +12\ne: -0\nf: 2024-01-01\n", code="invalid_catalog"
    ) == {
        "a": "true",
        "b": True,
        "c": "no",
        "d": 12,
        "e": 0,
        "f": "2024-01-01",
    }


def test_merge_keys_are_plain_unknown_keys() -> None:
    with pytest.raises(FormatError) as info:
        parse_catalog(text="<<: {images: []}\napiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages: []\n")
    assert_refused(info.value, "invalid_catalog", "$", "unknown_field")


def test_size_limit_counts_bytes() -> None:
    padding = 64 * 1024 - len(VALID_CATALOG_TEXT.encode()) - 1
    exact = VALID_CATALOG_TEXT + "#" + "x" * (padding - 1) + "\n"
    assert len(exact.encode()) == 64 * 1024
    parse_catalog(text=exact)
    with pytest.raises(FormatError) as info:
        parse_catalog(text=exact + "#")
    assert_refused(info.value, "invalid_catalog", "$", "too_large")
    # multi-byte characters count as bytes, not characters
    wide = VALID_CATALOG_TEXT + "# " + "\u00e9" * (33 * 1024) + "\n"
    assert len(wide) < 64 * 1024 < len(wide.encode())
    with pytest.raises(FormatError) as info:
        parse_catalog(text=wide)
    assert info.value.details["rule"] == "too_large"


def test_non_utf8_is_refused() -> None:
    for data in (b"apiVersion: \xff\xfe\n", VALID_CATALOG_TEXT.encode("utf-16"), b"a: \xc3\n"):
        with pytest.raises(FormatError) as info:
            parse_catalog(text=data)
        assert_refused(info.value, "invalid_catalog", "$", "not_utf8")
    with pytest.raises(FormatError) as info:
        parse_catalog(text="a: \udcff\n")  # a lone surrogate cannot be UTF-8
    assert_refused(info.value, "invalid_catalog", "$", "not_utf8")


def test_files(tmp_path: t.Any) -> None:
    good = tmp_path / "catalog.yml"
    good.write_text(VALID_CATALOG_TEXT, encoding="utf-8")
    assert parse_catalog(path=str(good)) == catalog()
    assert parse_catalog(path=good) == catalog()

    big = tmp_path / "big.yml"
    big.write_bytes(VALID_CATALOG_TEXT.encode() + b"#" * (64 * 1024))
    latin = tmp_path / "latin1.yml"
    latin.write_bytes(VALID_CATALOG_TEXT.replace("debian", "d\u00e9bian").encode("latin-1"))
    secret_dir = tmp_path / PLANTED
    secret_dir.mkdir()
    cases = [
        (tmp_path / ("missing-" + PLANTED), "unreadable"),
        (secret_dir, "unreadable"),
        (big, "too_large"),
        (latin, "not_utf8"),
    ]
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        cases.append((fifo, "unreadable"))
    if os.geteuid() != 0:
        locked = tmp_path / "locked.yml"
        locked.write_text(VALID_CATALOG_TEXT)
        locked.chmod(0)
        cases.append((locked, "unreadable"))
    for path, rule in cases:
        with pytest.raises(FormatError) as info:
            parse_catalog(path=str(path))
        assert_refused(info.value, "invalid_catalog", "$", rule, PLANTED)


def test_exactly_one_source() -> None:
    for kwargs in ({}, {"text": "a: 1", "path": "/x"}):
        with pytest.raises(FormatError) as info:
            parse_definition(**kwargs)
        assert_refused(info.value, "invalid_definition", "$", "source")


def test_missing_pyyaml_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_strict, "HAS_YAML", False)
    with pytest.raises(VmanywareError) as info:
        parse_catalog(text=VALID_CATALOG_TEXT)
    assert info.value.code == "configuration_error"


# --------------------------------------------------------------------------- definition

R = ("resources",)
K = ("access", "sshPublicKeys")
P = ("packages",)


def _blob(key: str) -> bytes:
    return base64.b64decode(key.split(" ")[1])


def _ssh_cases() -> list[tuple[str, tuple[t.Any, ...], t.Any, str, str]]:
    keys = generated_keys()
    ed_blob = _blob(keys["ed25519"])
    p256_blob = _blob(keys["p256"])
    p384_blob = _blob(keys["p384"])
    path = "access.sshPublicKeys[0]"
    comment = "planted-comment-" + PLANTED
    curve_swapped = ssh_string(b"ecdsa-sha2-nistp256") + ssh_string(b"nistp384") + p384_blob[4 + 19 + 4 + 8 :]
    return [
        ("ssh-not-string", K + (0,), 12345678, path, "type"),
        ("ssh-options-prefix", K + (0,), 'command="%s" %s' % (PLANTED, ED25519_KEY), path, "pattern"),
        ("ssh-leading-space", K + (0,), " " + ED25519_KEY + PLANTED, path, "pattern"),
        ("ssh-newline-comment", K + (0,), ED25519_KEY + "\n" + PLANTED, path, "pattern"),
        ("ssh-tab", K + (0,), ED25519_KEY.replace(" ", "\t", 1) + PLANTED, path, "pattern"),
        ("ssh-no-blob", K + (0,), "ssh-ed25519 ", path, "pattern"),
        (
            "ssh-dss",
            K + (0,),
            key_line("ssh-dss", ssh_string(b"ssh-dss") + b"x" * 40, comment),
            path,
            "ssh_key_type_unsupported",
        ),
        (
            "ssh-sk",
            K + (0,),
            key_line("sk-ssh-ed25519@openssh.com", ed_blob, comment),
            path,
            "ssh_key_type_unsupported",
        ),
        ("ssh-bad-padding", K + (0,), "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI " + comment, path, "ssh_key_encoding"),
        ("ssh-type-mismatch", K + (0,), key_line("ssh-rsa", ed_blob, comment), path, "ssh_key_type_mismatch"),
        (
            "ssh-type-mismatch-ecdsa",
            K + (0,),
            key_line("ecdsa-sha2-nistp384", p256_blob, comment),
            path,
            "ssh_key_type_mismatch",
        ),
        (
            "ssh-curve-mismatch",
            K + (0,),
            key_line("ecdsa-sha2-nistp256", curve_swapped, comment),
            path,
            "ssh_key_curve_mismatch",
        ),
        (
            "ssh-ecdsa-short-point",
            K + (0,),
            key_line("ecdsa-sha2-nistp256", p256_blob[:-1][:-64] + ssh_string(b"\x04" + b"\x01" * 63), comment),
            path,
            "ssh_key_invalid",
        ),
        ("ssh-rsa-1024", K + (0,), keys["rsa1024"] + " " + comment, path, "ssh_key_too_short"),
        (
            "ssh-ed25519-31-bytes",
            K + (0,),
            key_line("ssh-ed25519", ssh_string(b"ssh-ed25519") + ssh_string(b"k" * 31), comment),
            path,
            "ssh_key_invalid",
        ),
        (
            "ssh-ed25519-trailing",
            K + (0,),
            key_line("ssh-ed25519", ed_blob + b"\x00", comment),
            path,
            "ssh_key_invalid",
        ),
        ("ssh-ed25519-truncated", K + (0,), key_line("ssh-ed25519", ed_blob[:-5], comment), path, "ssh_key_invalid"),
        (
            "ssh-rsa-negative",
            K + (0,),
            key_line(
                "ssh-rsa", ssh_string(b"ssh-rsa") + ssh_string(b"\x01\x00\x01") + ssh_string(b"\x80" * 300), comment
            ),
            path,
            "ssh_key_invalid",
        ),
        (
            "ssh-rsa-even-exponent",
            K + (0,),
            key_line(
                "ssh-rsa", ssh_string(b"ssh-rsa") + ssh_string(b"\x02") + ssh_string(b"\x00" + b"\xc1" * 300), comment
            ),
            path,
            "ssh_key_invalid",
        ),
        ("ssh-empty-blob", K + (0,), "ssh-ed25519 AAAA " + comment, path, "ssh_key_invalid"),
    ]


DEFINITION_CASES: list[tuple[str, tuple[t.Any, ...], t.Any, str, str]] = [
    ("apiVersion-wrong", ("apiVersion",), "v1", "apiVersion", "const"),
    ("kind-wrong", ("kind",), "TemplateCatalog", "kind", "const"),
    ("unknown-top", ("planted-key-name",), "x", "$", "unknown_field"),
    ("name-uppercase", ("name",), "Planted-lab", "name", "pattern"),
    ("name-leading-hyphen", ("name",), "-plantedlab", "name", "pattern"),
    ("name-trailing-hyphen", ("name",), "plantedlab-", "name", "pattern"),
    ("name-underscore", ("name",), "planted_lab", "name", "pattern"),
    ("name-too-long", ("name",), "n" * 64, "name", "pattern"),
    ("name-dot", ("name",), "planted.lab", "name", "pattern"),
    ("name-empty", ("name",), "", "name", "pattern"),
    ("image-pattern", ("image",), "Planted image", "image", "pattern"),
    ("resources-not-mapping", R, [1, 2], "resources", "type"),
    ("resources-unknown", R + ("planted-key-name",), 1, "resources", "unknown_field"),
    ("cores-zero", R + ("cores",), 0, "resources.cores", "minimum"),
    ("cores-too-many", R + ("cores",), 987129, "resources.cores", "maximum"),
    ("cores-float", R + ("cores",), 2.0, "resources.cores", "type"),
    ("cores-bool", R + ("cores",), True, "resources.cores", "type"),
    ("cores-string", R + ("cores",), "98712", "resources.cores", "type"),
    ("memory-too-small", R + ("memoryMiB",), 255, "resources.memoryMiB", "minimum"),
    ("memory-too-large", R + ("memoryMiB",), 4194305, "resources.memoryMiB", "maximum"),
    ("disk-too-small", R + ("diskGiB",), 3, "resources.diskGiB", "minimum"),
    ("disk-too-large", R + ("diskGiB",), 4097, "resources.diskGiB", "maximum"),
    ("access-not-mapping", ("access",), "plantedaccess", "access", "type"),
    ("access-unknown", ("access", "planted-key-name"), [], "access", "unknown_field"),
    ("keys-not-list", K, ED25519_KEY, "access.sshPublicKeys", "type"),
    ("keys-empty", K, [], "access.sshPublicKeys", "min_items"),
    ("packages-not-list", P, {"name": "git"}, "packages", "type"),
    ("package-not-mapping", P + (1,), "plantedpkg", "packages[1]", "type"),
    ("package-unknown", P + (1, "planted-key-name"), "x", "packages[1]", "unknown_field"),
    ("package-missing-name", P + (1, "name"), DELETE, "packages[1].name", "required"),
    ("package-uppercase", P + (1, "name"), "Plantedpkg", "packages[1].name", "pattern"),
    ("package-one-char", P + (1, "name"), "p", "packages[1].name", "pattern"),
    ("package-removal", P + (1, "name"), "plantedpkg-", "packages[1].name", "pattern"),
    ("package-equals", P + (1, "name"), "plantedpkg=1.0", "packages[1].name", "pattern"),
    ("package-release", P + (1, "name"), "plantedpkg/bookworm", "packages[1].name", "pattern"),
    ("package-glob", P + (1, "name"), "plantedpkg*", "packages[1].name", "pattern"),
    ("package-arch", P + (1, "name"), "plantedpkg:amd64", "packages[1].name", "pattern"),
    ("package-leading-hyphen", P + (1, "name"), "-plantedpkg", "packages[1].name", "pattern"),
    ("package-too-long", P + (1, "name"), "p" * 129, "packages[1].name", "pattern"),
    ("version-range", P + (1, "version"), ">=1.0planted", "packages[1].version", "pattern"),
    ("version-equals", P + (1, "version"), "=1.0planted", "packages[1].version", "pattern"),
    ("version-release", P + (1, "version"), "1.0/planted", "packages[1].version", "pattern"),
    ("version-glob", P + (1, "version"), "1.0planted*", "packages[1].version", "pattern"),
    ("version-removal", P + (1, "version"), "1.0planted-", "packages[1].version", "pattern"),
    ("version-letter-first", P + (1, "version"), "planted1.0", "packages[1].version", "pattern"),
    ("version-space", P + (1, "version"), "1.0 planted", "packages[1].version", "pattern"),
    ("version-empty", P + (1, "version"), "", "packages[1].version", "pattern"),
    ("version-float", P + (1, "version"), 12.1, "packages[1].version", "type"),
    ("version-too-long", P + (1, "version"), "1" * 130, "packages[1].version", "pattern"),
    ("snapshot-string", ("snapshotAfterProvisioning",), "plantedyes", "snapshotAfterProvisioning", "type"),
    ("snapshot-int", ("snapshotAfterProvisioning",), 1, "snapshotAfterProvisioning", "type"),
    ("snapshot-null", ("snapshotAfterProvisioning",), None, "snapshotAfterProvisioning", "type"),
]
DEFINITION_CASES += [
    ("missing-" + field, (field,), DELETE, field, "required")
    for field in ("apiVersion", "kind", "name", "image", "resources", "access")
]
DEFINITION_CASES += [
    ("missing-" + field, R + (field,), DELETE, "resources." + field, "required")
    for field in ("cores", "memoryMiB", "diskGiB")
]
DEFINITION_CASES += [("missing-keys", K, DELETE, "access.sshPublicKeys", "required")]


@pytest.mark.parametrize(
    ("document_path", "value", "path", "rule"),
    [case[1:] for case in DEFINITION_CASES + _ssh_cases()],
    ids=[case[0] for case in DEFINITION_CASES + _ssh_cases()],
)
def test_definition_rule(document_path: tuple[t.Any, ...], value: t.Any, path: str, rule: str) -> None:
    document = mutated(definition(), document_path, value)
    with pytest.raises(FormatError) as info:
        parse_definition(text=dump(document))
    assert_refused(info.value, "invalid_definition", path, rule, None if value is DELETE else value)
    if isinstance(value, str) and "planted-comment-" in value:
        # key comments are never echoed, whatever the key's fault
        assert "planted-comment" not in str(info.value)
    with pytest.raises(FormatError) as info:
        validate_definition(document)
    assert_refused(info.value, "invalid_definition", path, rule)


def test_definition_key_count_limits() -> None:
    pool = list(ed25519_pool())
    assert len(parse_definition(text=dump(mutated(definition(), K, pool[:16])))["access"]["sshPublicKeys"]) == 16
    with pytest.raises(FormatError) as info:
        parse_definition(text=dump(mutated(definition(), K, pool[:17])))
    assert_refused(info.value, "invalid_definition", "access.sshPublicKeys", "max_items")


def test_definition_duplicate_key_and_package() -> None:
    same_key_other_comment = ED25519_KEY.rsplit(" ", 1)[0] + " " + PLANTED
    with pytest.raises(FormatError) as info:
        parse_definition(text=dump(mutated(definition(), K, [ED25519_KEY, same_key_other_comment])))
    assert_refused(info.value, "invalid_definition", "access.sshPublicKeys[1]", "duplicate_ssh_key", PLANTED)
    packages = [{"name": "git"}, {"name": "git", "version": "1:2.47.2-0.1"}]
    with pytest.raises(FormatError) as info:
        parse_definition(text=dump(mutated(definition(), P, packages)))
    assert_refused(info.value, "invalid_definition", "packages[1].name", "duplicate_package")


def test_definition_package_count_limit() -> None:
    packages = [{"name": "pkg%d" % index} for index in range(65)]
    assert len(parse_definition(text=dump(mutated(definition(), P, packages[:64])))["packages"]) == 64
    with pytest.raises(FormatError) as info:
        parse_definition(text=dump(mutated(definition(), P, packages)))
    assert_refused(info.value, "invalid_definition", "packages", "max_items")


def test_definition_accepts_every_key_type_and_form() -> None:
    keys = generated_keys()
    lines = [
        keys["ed25519"],
        keys["p256"] + " bob",
        keys["p384"] + " carol@host with spaces",
        keys["p521"],
        keys["rsa2048"] + " dave\u00e9",
    ]
    result = parse_definition(text=dump(mutated(definition(), K, lines)))
    assert result["access"]["sshPublicKeys"] == lines


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("g++", "4:14.2.0-1"),
        ("libstdc++6", "14.2.0-19"),
        ("python3.13", "3.13.5-2"),
        ("linux-image-amd64", "6.12.38+deb13u1"),
        ("build-essential", "12.10"),
        ("zz", "1.0~rc1-1~bpo12+1"),
        ("a0", "0"),
    ],
)
def test_definition_accepts_debian_package_syntax(name: str, version: str) -> None:
    result = parse_definition(text=dump(mutated(definition(), P, [{"name": name, "version": version}])))
    assert result["packages"] == [{"name": name, "version": version}]


def test_definition_defaults_applied() -> None:
    document = definition()
    del document["packages"]
    del document["snapshotAfterProvisioning"]
    result = parse_definition(text=dump(document))
    assert result["packages"] == []
    assert result["snapshotAfterProvisioning"] is False
    assert result == {**definition(), "packages": []}
    assert "version" not in parse_definition(text=dump(definition()))["packages"][0]


def test_definition_boundaries() -> None:
    for path, value in (
        (R + ("cores",), 1),
        (R + ("cores",), 128),
        (R + ("memoryMiB",), 256),
        (R + ("memoryMiB",), 4194304),
        (R + ("diskGiB",), 4),
        (R + ("diskGiB",), 4096),
        (("name",), "a"),
        (("name",), "a" * 63),
        (("name",), "1lab"),
    ):
        parse_definition(text=dump(mutated(definition(), path, value)))


def test_error_codes_used_are_registered() -> None:
    for rule in RULE_TEXTS:
        assert FormatError("invalid_definition", "$", rule).code in ERROR_CODES


@pytest.mark.parametrize(
    "key,named",
    [
        ("snapshotAfterProvisoning", True),
        ("cpu_count", True),
        ("not a key!", False),
        ("ssh-ed25519 AAAAC3", False),
        ("x" * 65, False),
    ],
)
def test_unknown_field_is_named_only_when_a_plain_identifier(key: str, named: bool) -> None:
    document = definition()
    document[key] = "planted value"
    with pytest.raises(FormatError) as info:
        parse_definition(text=dump(document))
    assert (info.value.path, info.value.details["rule"]) == ("$", "unknown_field")
    assert (key in info.value.message) is named
    assert "planted value" not in info.value.message and "planted" not in json.dumps(info.value.to_result())


def test_mapping_input_is_validated_as_data() -> None:
    """A dict (from group_vars) gives the same result as its YAML text; it is never turned into text."""
    assert parse_definition(text=definition()) == parse_definition(text=dump(definition()))
    assert parse_catalog(text=catalog()) == parse_catalog(text=dump(catalog()))
    document = definition()
    document["snapshotAfterProvisioning"] = False
    assert parse_definition(text=document)["snapshotAfterProvisioning"] is False
    document["snapshotAfterProvisioning"] = "false"  # a string stays a string: refused as data, by its field
    with pytest.raises(FormatError) as info:
        parse_definition(text=document)
    assert (info.value.path, info.value.details["rule"]) == ("snapshotAfterProvisioning", "type")
    with pytest.raises(FormatError) as info:
        parse_definition(text={**definition(), 1: "x"})
    assert info.value.details["rule"] == "key_type"
    with pytest.raises(FormatError) as info:
        parse_definition(text={**definition(), "name": object()})
    assert info.value.details["rule"] == "type"
    with pytest.raises(FormatError) as info:
        parse_catalog(text=catalog(), path="/nonexistent")
    assert info.value.details["rule"] == "source"
    nested: dict = {}
    for _level in range(40):
        nested = {"x": nested}
    with pytest.raises(FormatError) as info:
        parse_catalog(text=nested)
    assert info.value.details["rule"] == "too_deep"
    with pytest.raises(FormatError) as info:
        parse_catalog(text={"x": "y" * (64 * 1024)})
    assert info.value.details["rule"] == "too_large"


def test_a_mapping_may_name_a_pool() -> None:
    """``pool`` is optional: a catalog without it normalizes (and hashes) exactly as before."""
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import plan_hash

    plain = parse_catalog(text=dump(catalog()))
    assert all("pool" not in mapping for mapping in plain["images"])
    pooled = catalog()
    pooled["images"][1]["pool"] = "vmanyware/lab"
    parsed = parse_catalog(text=dump(pooled))
    assert parsed["images"][1]["pool"] == "vmanyware/lab" and list(parsed["images"][1])[-2:] == [
        "pool",
        "imageDefaultUser",
    ]
    assert plan_hash("0" * 64, parsed["images"][1], 201) != plan_hash("0" * 64, plain["images"][1], 201)
    for bad in ("a/b/c/d", "with space", "", "x" * 65, "a//b"):
        pooled["images"][1]["pool"] = bad
        with pytest.raises(FormatError) as info:
            parse_catalog(text=dump(pooled))
        assert (info.value.path, info.value.details["rule"]) in (
            ("images[1].pool", "pattern"),
            ("images[1].pool", "min_length"),
        )
