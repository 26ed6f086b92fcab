# SPDX-License-Identifier: GPL-3.0-or-later
"""The shipped JSON Schema files equal the module_utils dicts, are valid 2020-12 schemas, and agree with jsonschema."""

from __future__ import annotations

import copy
import json
import re
import typing as t
from pathlib import Path

import jsonschema
import pytest
from format_samples import catalog, definition, mutated
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.schemas import (
    CATALOG_SCHEMA_V1,
    DEFINITION_SCHEMA_V1,
    SchemaViolation,
    check_schema,
    schema_json,
)

REPO = Path(__file__).resolve().parents[5]
SHIPPED = [("catalog-v1.schema.json", CATALOG_SCHEMA_V1), ("environment-v1.schema.json", DEFINITION_SCHEMA_V1)]
SUPPORTED_KEYWORDS = {
    "$schema",
    "$id",
    "$defs",
    "$ref",
    "title",
    "description",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "const",
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "items",
    "minItems",
    "maxItems",
    "if",
    "then",
    "else",  # guestType: container selects the container mapping (_located follows the branch)
}


@pytest.mark.parametrize(("name", "schema"), SHIPPED)
def test_shipped_schema_file_equals_the_dict(name: str, schema: dict[str, t.Any]) -> None:
    path = REPO / "docs" / "schemas" / name
    assert path.read_text(encoding="utf-8") == schema_json(schema), "regenerate with schema_json() (docs/formats.md)"
    assert json.loads(path.read_text(encoding="utf-8")) == schema


@pytest.mark.parametrize(("name", "schema"), SHIPPED)
def test_schema_is_valid_and_uses_only_interpreted_keywords(name: str, schema: dict[str, t.Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)

    def walk(node: t.Any, in_properties: bool = False) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if not in_properties:
                    assert key in SUPPORTED_KEYWORDS, key
                if key == "pattern":
                    assert value.startswith("^") and value.endswith("$"), value
                    re.compile(value)
                walk(value, in_properties=(key in ("properties", "$defs")) and not in_properties)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(schema)


def _jsonschema_accepts(schema: dict[str, t.Any], value: t.Any) -> bool:
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _ours_accepts(schema: dict[str, t.Any], value: t.Any) -> bool:
    try:
        check_schema(schema, value)
    except SchemaViolation:
        return False
    return True


def _paths(value: t.Any, prefix: tuple[t.Any, ...] = ()) -> list[tuple[t.Any, ...]]:
    result = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            result += _paths(child, prefix + (key,))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            result += _paths(child, prefix + (index,))
    return result


# leaves without floats (ours is stricter: 2.0 is not an integer) and without newlines (re.search vs. fullmatch)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-10, max_value=5000)
    | st.sampled_from([0, 99, 100, 128, 129, 4096, 4097, 999999999, 10**9])
    | st.text(st.characters(codec="ascii", exclude_characters="\n\r"), max_size=20)
    | st.sampled_from(
        [
            "debian-13",
            "scsi0",
            "sata0",
            "vmanyware.dev/v1",
            "Environment",
            "TemplateCatalog",
            "git",
            "1.0-1",
            "ssh-ed25519 AAAA",
        ]
    )
)
values = st.recursive(
    leaves,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["name", "x", "image"]), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
@pytest.mark.parametrize(
    ("schema", "sample"),
    [(CATALOG_SCHEMA_V1, catalog), (DEFINITION_SCHEMA_V1, definition)],
    ids=["catalog", "definition"],
)
def test_interpreter_agrees_with_jsonschema(
    schema: dict[str, t.Any], sample: t.Callable[[], dict[str, t.Any]], data: st.DataObject
) -> None:
    document = sample()
    assert _ours_accepts(schema, document) and _jsonschema_accepts(schema, document)
    path = data.draw(st.sampled_from(_paths(document)))
    changed = mutated(document, path, data.draw(values))
    assert _ours_accepts(schema, copy.deepcopy(changed)) == _jsonschema_accepts(schema, changed)
