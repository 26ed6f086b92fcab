# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""JSON Schemas of the v1 template catalog and environment definition, and their validator.

module_utils are shipped to modules without data files, so the schemas live here as Python
dicts; ``docs/schemas/*.schema.json`` are byte-for-byte renderings of them
(``json.dumps(schema, indent=2) + "\\n"``), kept equal by a unit test.

``check_schema`` interprets the subset of JSON Schema 2020-12 the schemas use (type,
properties, required, additionalProperties: false, const, enum, pattern, minLength,
maxLength, minimum, maximum, items, minItems, maxItems, local ``$ref``) and reports the
*first* violation as ``(path, rule, text)``: the path of the field (``images[3].bridge``),
a fixed rule name and a fixed text. It never looks at a value to build a message. Two
deliberate strictnesses beyond plain JSON Schema: ``integer`` excludes floats such as
``2.0`` (and booleans), and every ``pattern`` is anchored and must match the whole string.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import json
import re
import typing as t

API_VERSION = "vmanyware.dev/v1"

IMAGE_PATTERN = r"^[a-z0-9.-]{1,64}$"
NODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
TEMPLATE_VERSION_PATTERN = r"^[A-Za-z0-9._+-]{1,128}$"
STORAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
BRIDGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$"
GUEST_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,31}$"
DNS_LABEL_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
# Debian policy 5.6.1, minus a trailing "-" (apt reads "name-" as "remove name").
PACKAGE_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9+.-]{0,126}[a-z0-9+.])$"
# Debian policy 5.6.12: [epoch:]upstream[-revision]; no colon in upstream, no trailing "-",
# no "=", "/", "*", spaces or comparison operators.
PACKAGE_VERSION_PATTERN = r"^(?:[0-9]{1,9}:)?[0-9](?:[A-Za-z0-9.+~-]{0,118}[A-Za-z0-9.+~])?$"
# "<type> <base64>[ <comment>]": the blob is decoded and checked semantically (_formats.py).
SSH_KEY_PATTERN = r"^[a-z0-9@.-]{1,64} [A-Za-z0-9+/]{1,16384}={0,2}(?: [^\u0000-\u0020\u007f][^\u0000-\u001f\u007f]{0,1023})?$"

VMID_MIN = 100
VMID_MAX = 999999999


def _string(pattern: str, description: str, max_length: int | None = None) -> dict[str, t.Any]:
    schema: dict[str, t.Any] = {"type": "string", "description": description, "pattern": pattern}
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def _integer(minimum: int, maximum: int, description: str) -> dict[str, t.Any]:
    return {"type": "integer", "description": description, "minimum": minimum, "maximum": maximum}


CATALOG_SCHEMA_V1: dict[str, t.Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://vmanyware.dev/schemas/catalog-v1.schema.json",
    "title": "vmanyware TemplateCatalog v1",
    "description": "Maps image identifiers to Proxmox VE templates. See docs/formats.md for the semantic rules a schema cannot express.",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "images"],
    "properties": {
        "apiVersion": {"type": "string", "const": API_VERSION},
        "kind": {"type": "string", "const": "TemplateCatalog"},
        "images": {"type": "array", "maxItems": 128, "items": {"$ref": "#/$defs/mapping"}},
    },
    "$defs": {
        "mapping": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                "image", "node", "templateVmid", "templateVersion", "storage", "bridge", "diskDevice", "sourceDiskGiB", "guestUser",
            ],
            "properties": {
                "image": _string(IMAGE_PATTERN, "1-64 lowercase letters, digits, dots or hyphens."),
                "node": _string(NODE_PATTERN, "1-63 letters, digits, dots, underscores or hyphens, starting with a letter or digit."),
                "templateVmid": _integer(VMID_MIN, VMID_MAX, "VMID of the template, 100-999999999."),
                "templateVersion": _string(TEMPLATE_VERSION_PATTERN, "1-128 letters, digits, dots, underscores, plus signs or hyphens."),
                "storage": _string(STORAGE_PATTERN, "1-64 letters, digits, dots, underscores or hyphens, starting with a letter or digit."),
                "bridge": _string(BRIDGE_PATTERN, "1-15 letters, digits, dots, underscores or hyphens, starting with a letter or digit."),
                "diskDevice": {"type": "string", "description": "Disk the template boots from.", "enum": ["scsi0", "virtio0", "sata0"]},
                "sourceDiskGiB": _integer(4, 4096, "Size of the template's disk in GiB, 4-4096."),
                "guestUser": _string(
                    GUEST_USER_PATTERN, "1-32 lowercase letters, digits, underscores or hyphens, starting with a lowercase letter or underscore."
                ),
                "imageDefaultUser": {"$ref": "#/$defs/imageDefaultUser"},
            },
        },
        "imageDefaultUser": {
            "type": "object",
            "description": "Operator attestation about the image's default user; name must equal guestUser (not root), templateVersion the mapping's.",
            "additionalProperties": False,
            "required": ["name", "templateVersion", "passwordLocked", "noAuthorizedKeys"],
            "properties": {
                "name": _string(
                    GUEST_USER_PATTERN, "1-32 lowercase letters, digits, underscores or hyphens, starting with a lowercase letter or underscore."
                ),
                "templateVersion": _string(TEMPLATE_VERSION_PATTERN, "1-128 letters, digits, dots, underscores, plus signs or hyphens."),
                "passwordLocked": {"type": "boolean", "const": True},
                "noAuthorizedKeys": {"type": "boolean", "const": True},
            },
        },
    },
}

DEFINITION_SCHEMA_V1: dict[str, t.Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://vmanyware.dev/schemas/environment-v1.schema.json",
    "title": "vmanyware Environment v1",
    "description": "A reviewed environment definition. See docs/formats.md for the semantic rules a schema cannot express.",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "image", "resources", "access"],
    "properties": {
        "apiVersion": {"type": "string", "const": API_VERSION},
        "kind": {"type": "string", "const": "Environment"},
        "name": _string(DNS_LABEL_PATTERN, "1-63 characters, a lowercase DNS label; becomes the VM name."),
        "image": _string(IMAGE_PATTERN, "1-64 lowercase letters, digits, dots or hyphens; must match a catalog image."),
        "resources": {
            "type": "object",
            "additionalProperties": False,
            "required": ["cores", "memoryMiB", "diskGiB"],
            "properties": {
                "cores": _integer(1, 128, "Virtual CPU cores, 1-128."),
                "memoryMiB": _integer(256, 4194304, "Memory in MiB, 256-4194304."),
                "diskGiB": _integer(4, 4096, "Disk size in GiB, 4-4096, at least the mapping's sourceDiskGiB."),
            },
        },
        "access": {
            "type": "object",
            "additionalProperties": False,
            "required": ["sshPublicKeys"],
            "properties": {
                "sshPublicKeys": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 16,
                    "items": _string(
                        SSH_KEY_PATTERN,
                        "An OpenSSH public key line: ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa (>= 2048 bits), optional comment.",
                    ),
                },
            },
        },
        "packages": {
            "type": "array",
            "maxItems": 64,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": _string(PACKAGE_NAME_PATTERN, "A Debian package name (2-128 characters, not ending in a hyphen)."),
                    "version": _string(PACKAGE_VERSION_PATTERN, "An exact Debian version [epoch:]upstream[-revision]; no ranges or selectors."),
                },
            },
        },
        "snapshotAfterProvisioning": {"type": "boolean"},
    },
}

_TYPE_NAMES = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer", "boolean": "true or false"}


class SchemaViolation(Exception):
    """The first violation found: ``path``, fixed ``rule`` name and fixed ``text``."""

    def __init__(self, path: str, rule: str, text: str) -> None:
        self.path = path
        self.rule = rule
        self.text = text
        super().__init__(rule)


def join_path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return "$[%d]" % key if parent == "$" else "%s[%d]" % (parent, key)
    return key if parent == "$" else "%s.%s" % (parent, key)


def _is_type(value: t.Any, type_name: str) -> bool:
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "boolean":
        return isinstance(value, bool)
    raise ValueError("unsupported schema type")


def _resolve(root: dict[str, t.Any], schema: dict[str, t.Any]) -> dict[str, t.Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    prefix = "#/$defs/"
    if not ref.startswith(prefix):
        raise ValueError("only local $defs references are supported")
    return root["$defs"][ref[len(prefix):]]


def _check(root: dict[str, t.Any], schema: dict[str, t.Any], value: t.Any, path: str) -> None:
    schema = _resolve(root, schema)
    type_name = schema.get("type")
    if type_name is not None and not _is_type(value, type_name):
        raise SchemaViolation(path, "type", "must be %s" % _TYPE_NAMES[type_name])
    if "const" in schema and not (value == schema["const"] and isinstance(value, bool) == isinstance(schema["const"], bool)):
        raise SchemaViolation(path, "const", "must be exactly %s" % json.dumps(schema["const"]))
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaViolation(path, "enum", "must be one of %s" % ", ".join(schema["enum"]))
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise SchemaViolation(path, "min_length", "must have at least %d characters" % schema["minLength"])
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise SchemaViolation(path, "max_length", "must have at most %d characters" % schema["maxLength"])
        if "pattern" in schema and re.fullmatch(schema["pattern"], value) is None:
            raise SchemaViolation(path, "pattern", "does not have the required form: %s" % schema.get("description", "see the schema"))
    if isinstance(value, int) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaViolation(path, "minimum", "must be at least %d" % schema["minimum"])
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaViolation(path, "maximum", "must be at most %d" % schema["maximum"])
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaViolation(path, "min_items", "must have at least %d entries" % schema["minItems"])
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaViolation(path, "max_items", "must have at most %d entries" % schema["maxItems"])
        if "items" in schema:
            for index, item in enumerate(value):
                _check(root, schema["items"], item, join_path(path, index))
    if isinstance(value, dict):
        properties: dict[str, t.Any] = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            for key in value:
                if key not in properties:
                    # The unknown key itself is input: it is not named.
                    raise SchemaViolation(path, "unknown_field", "contains a field that is not part of the v1 format")
        required = schema.get("required", [])
        for key, subschema in properties.items():
            if key not in value:
                if key in required:
                    raise SchemaViolation(join_path(path, key), "required", "is required")
                continue
            _check(root, subschema, value[key], join_path(path, key))


def check_schema(schema: dict[str, t.Any], value: t.Any) -> None:
    """Raise ``SchemaViolation`` for the first violation of ``schema`` by ``value``."""
    _check(schema, schema, value, "$")


def schema_json(schema: dict[str, t.Any]) -> str:
    """The exact text of the shipped ``docs/schemas/*.schema.json`` file."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
