# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixed hash vectors, and the JCS implementation cross-checked against the rfc8785 package."""

from __future__ import annotations

import hashlib
import typing as t

import pytest
import rfc8785
from format_samples import definition, mapping
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import (
    canonical_json,
    definition_hash,
    plan_hash,
    plan_hash_bytes,
)

EXAMPLE_DEFINITION_HASH = "109cb47497a9c1740f37adc432f0f14bd3fd31d43e2bf67d435a696a44345366"
EXAMPLE_PLAN_HASH = "5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df"
EXAMPLE_PLAN_HASH_WITHOUT_ATTESTATION = "c0b0b2ab085d4e3591a49bf0c806f2e642100da06d335bfbf635d60e2457373c"
EXAMPLE_CANONICAL = (
    '{"access":{"sshPublicKeys":["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop"]},'
    '"apiVersion":"vmanyware.dev/v1","image":"debian-13","kind":"Environment","name":"kernel-lab",'
    '"packages":[{"name":"build-essential"},{"name":"git"}],"resources":{"cores":2,"diskGiB":20,"memoryMiB":2048},'
    '"snapshotAfterProvisioning":false}'
)


def test_definition_hash_vector() -> None:
    assert canonical_json(definition()).decode() == EXAMPLE_CANONICAL
    assert definition_hash(definition()) == EXAMPLE_DEFINITION_HASH
    assert hashlib.sha256(EXAMPLE_CANONICAL.encode()).hexdigest() == EXAMPLE_DEFINITION_HASH


def test_plan_hash_vectors() -> None:
    expected = (
        '["109cb47497a9c1740f37adc432f0f14bd3fd31d43e2bf67d435a696a44345366",{"image":"debian-13","node":"pve-test","templateVmid":9000,'
        '"templateVersion":"debian-13-cloud-20261016","storage":"local-lvm","bridge":"vmbr0","diskDevice":"scsi0","sourceDiskGiB":8,'
        '"guestUser":"debian","imageDefaultUser":{"name":"debian","templateVersion":"debian-13-cloud-20261016","passwordLocked":true,'
        '"noAuthorizedKeys":true}},201]'
    )
    assert plan_hash_bytes(EXAMPLE_DEFINITION_HASH, mapping(), 201).decode() == expected
    assert plan_hash(EXAMPLE_DEFINITION_HASH, mapping(), 201) == EXAMPLE_PLAN_HASH
    assert hashlib.sha256(expected.encode()).hexdigest() == EXAMPLE_PLAN_HASH


def test_plan_hash_without_attestation_is_the_plain_serialization() -> None:
    plain = mapping()
    del plain["imageDefaultUser"]
    serialized = plan_hash_bytes(EXAMPLE_DEFINITION_HASH, plain, 201).decode()
    assert "imageDefaultUser" not in serialized
    assert serialized.endswith('"sourceDiskGiB":8,"guestUser":"debian"},201]')
    assert plan_hash(EXAMPLE_DEFINITION_HASH, plain, 201) == EXAMPLE_PLAN_HASH_WITHOUT_ATTESTATION


def test_plan_hash_keeps_mapping_order() -> None:
    reordered = dict(reversed(list(mapping().items())))
    assert plan_hash(EXAMPLE_DEFINITION_HASH, reordered, 201) != EXAMPLE_PLAN_HASH  # callers must normalize first


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [True, False, None]}, '{"a":[true,false,null],"b":1}'),
        ('\u20ac$\u000f\nA\'B"\\\\"/', '"\u20ac$\\u000f\\nA\'B\\"\\\\\\\\\\"/"'),
        (
            {"\u20ac": 1, "\r": 2, "\U0001f600": 3, "\ufb33": 4, "1": 5, "\u0080": 6, "\u00f6": 7},
            '{"\\r":2,"1":5,"\u0080":6,"\u00f6":7,"\u20ac":1,"\U0001f600":3,"\ufb33":4}',
        ),
        ([-0, 9007199254740991, -9007199254740991], "[0,9007199254740991,-9007199254740991]"),
        ("\u2028\u007f\b\t\f", '"\u2028\u007f\\b\\t\\f"'),
        ({}, "{}"),
        ([], "[]"),
    ],
)
def test_canonical_json_vectors(value: t.Any, expected: str) -> None:
    assert canonical_json(value) == expected.encode("utf-8")
    assert canonical_json(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("value", [1.5, 2**53, -(2**53), {1: "x"}, "\ud800", object()])
def test_canonical_json_refuses(value: t.Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        canonical_json(value)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.text(st.characters(exclude_categories=("Cs",))),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(st.text(st.characters(exclude_categories=("Cs",)), max_size=6), children, max_size=5)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_canonical_json_matches_rfc8785(value: t.Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_runtime_does_not_need_rfc8785() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats import hashing as hashing_module

    with open(hashing_module.__file__, encoding="utf-8") as handle:
        assert "rfc8785" not in "".join(line for line in handle if line.startswith(("import", "from")))
