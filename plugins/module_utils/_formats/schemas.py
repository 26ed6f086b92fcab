# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""JSON Schemas of the v1 template catalog and environment definition, and their validator.

module_utils are shipped to modules without data files, so the schemas live here as Python
dicts; ``docs/schemas/*.schema.json`` are byte-for-byte renderings of them
(``json.dumps(schema, indent=2) + "\\n"``), kept equal by a unit test.

``check_schema`` validates with jsonschema (Draft 2020-12) and reports the *first*
violation in the schema's field order as ``(path, rule, text)``: the path of the field
(``images[3].bridge``), a fixed rule name and a fixed text. It never uses jsonschema's
messages (they quote the input). One deliberate strictness beyond plain JSON Schema:
``integer`` excludes floats such as ``2.0`` (and booleans). Every ``pattern`` is anchored
(``^...$``) so any JSON Schema validator reads the shipped files the same way.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import json
import re
import typing as t

from .._core.errors import ConfigurationError
from .profile_schemas import BAKED_PROFILES, DEFINITION_PROFILES, DISTRO_FAMILY

try:
    import jsonschema
    import jsonschema.validators

    HAS_JSONSCHEMA = True
except ImportError:  # pragma: no cover - reported by the module through missing_required_lib
    HAS_JSONSCHEMA = False

API_VERSION = "vmanyware.dev/v1"

IMAGE_PATTERN = r"^[a-z0-9.-]{1,64}$"
NODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
TEMPLATE_VERSION_PATTERN = r"^[A-Za-z0-9._+-]{1,128}$"
STORAGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
BRIDGE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$"
# PVE's pve-poolid format (nested pools a/b/c since PVE 8.1); at most 64 characters here.
POOL_PATTERN = r"^(?=.{1,64}$)[A-Za-z0-9_-]+(?:/[A-Za-z0-9_-]+){0,2}$"
GUEST_USER_PATTERN = r"^[a-z_][a-z0-9_-]{0,31}$"
DNS_LABEL_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
# Debian policy 5.6.1, minus a trailing "-" (apt reads "name-" as "remove name").
PACKAGE_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9+.-]{0,126}[a-z0-9+.])$"
# Debian policy 5.6.12: [epoch:]upstream[-revision]; no colon in upstream, no trailing "-",
# no "=", "/", "*", spaces or comparison operators.
PACKAGE_VERSION_PATTERN = r"^(?:[0-9]{1,9}:)?[0-9](?:[A-Za-z0-9.+~-]{0,118}[A-Za-z0-9.+~])?$"
# "<type> <base64>[ <comment>]": the blob is decoded and checked semantically (ssh_keys.py).
SSH_KEY_PATTERN = (
    r"^[a-z0-9@.-]{1,64} [A-Za-z0-9+/]{1,16384}={0,2}(?: [^\u0000-\u0020\u007f][^\u0000-\u001f\u007f]{0,1023})?$"
)

# A container template volume: STORAGE:vztmpl/FILE.tar.{gz,xz,zst} (what pveam and aplinfo store).
OSTEMPLATE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}:vztmpl/[A-Za-z0-9][A-Za-z0-9._+-]{0,199}\.tar\.(?:gz|xz|zst)$"
# An appliance package of GET /nodes/{node}/aplinfo ("debian-12-standard").
APPLIANCE_PATTERN = r"^[a-z0-9][a-z0-9.+-]{0,126}[a-z0-9]$"
# A version glob: literal version characters plus "*" for any run ("12.*", "13.1-*").
VERSION_GLOB_PATTERN = r"^[A-Za-z0-9.+~*-]{1,64}$"

# Dotted-quad IPv4 (each octet 0-255, no leading zeros) and an IPv4 subnet in CIDR notation; networks.py checks the
# arithmetic (a subnet's host bits, an address inside it).
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4_PATTERN = r"^%s(?:\.%s){3}$" % (_OCTET, _OCTET)
IPV4_CIDR_PATTERN = r"^%s(?:\.%s){3}/(?:3[0-2]|[12]?[0-9])$" % (_OCTET, _OCTET)
# IPv6 text (hex groups, "::", an embedded dotted quad) and an IPv6 prefix; networks.py parses them (the pattern
# only bounds the characters and length).
IPV6_PATTERN = r"^[0-9A-Fa-f:.]{2,45}$"
IPV6_CIDR_PATTERN = r"^[0-9A-Fa-f:.]{2,45}/(?:12[0-8]|1[01][0-9]|[1-9]?[0-9])$"
# A DNS search domain: dot-separated lowercase DNS labels, at most 253 characters.
DOMAIN_PATTERN = r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"

SHA256_HEX_PATTERN = r"^[0-9a-f]{64}$"
VMID_MIN = 100
VMID_MAX = 999999999


def _string(pattern: str, description: str, max_length: int | None = None) -> dict[str, t.Any]:
    schema: dict[str, t.Any] = {"type": "string", "description": description, "pattern": pattern}
    if max_length is not None:
        schema["maxLength"] = max_length
    return schema


def _integer(minimum: int, maximum: int, description: str) -> dict[str, t.Any]:
    return {"type": "integer", "description": description, "minimum": minimum, "maximum": maximum}


def _dns_servers(pattern: str, description: str) -> dict[str, t.Any]:
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": 3,
        "description": "1-3 DNS server addresses (static only).",
        "items": _string(pattern, description),
    }


def _address_pool(pattern: str, description: str) -> dict[str, t.Any]:
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": 16,
        "description": "Ranges (first to last, inclusive) that address: auto leases from (static only).",
        "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["first", "last"],
            "properties": {"first": _string(pattern, description), "last": _string(pattern, description)},
        },
    }


def _definition_address(pattern: str, family: str) -> dict[str, t.Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["address"],
        "properties": {
            "address": _string(
                "^(?:auto|%s)$" % pattern[1:-1],
                "The guest's %s address in the network's subnet, or auto: one leased from the network's pool "
                "(static only)." % family,
            ),
        },
    }


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
        "networks": {
            "type": "array",
            "maxItems": 64,
            "description": "Named networks a definition may pick (network.name); see docs/networks.md.",
            "items": {"$ref": "#/$defs/network"},
        },
        "images": {
            "type": "array",
            "maxItems": 128,
            # guestType: container selects the container mapping; without it a mapping is a VM template's.
            "items": {
                "if": {
                    "type": "object",
                    "required": ["guestType"],
                    "properties": {"guestType": {"const": "container"}},
                },
                "then": {"$ref": "#/$defs/containerMapping"},
                "else": {"$ref": "#/$defs/mapping"},
            },
        },
    },
    "$defs": {
        "network": {
            "type": "object",
            "description": "A network a guest's one NIC joins: the bridge, an optional VLAN tag and MTU, how IPv4 is set.",
            "additionalProperties": False,
            "required": ["name", "bridge", "ipv4"],
            "properties": {
                "name": _string(DNS_LABEL_PATTERN, "1-63 characters, a lowercase DNS label; unique in the catalog."),
                "bridge": _string(
                    BRIDGE_PATTERN,
                    "1-15 letters, digits, dots, underscores or hyphens, starting with a letter or digit.",
                ),
                "vlan": _integer(1, 4094, "VLAN tag of the NIC, 1-4094; the bridge must be VLAN-aware."),
                "mtu": _integer(576, 65520, "MTU of the NIC, 576-65520; absent, the bridge's."),
                "ipv4": {
                    "type": "object",
                    "description": "dhcp: the guest asks for an address; static: the definition gives one in subnet (or "
                    "auto: leased from pool); none: no IPv4.",
                    "additionalProperties": False,
                    "required": ["mode"],
                    "properties": {
                        "mode": {"type": "string", "enum": ["dhcp", "static", "none"]},
                        "subnet": _string(IPV4_CIDR_PATTERN, "The IPv4 subnet in CIDR notation (static only)."),
                        "gateway": _string(
                            IPV4_PATTERN, "The default gateway, an address in the subnet (static only)."
                        ),
                        "dns": _dns_servers(IPV4_PATTERN, "An IPv4 address."),
                        "searchDomain": _string(DOMAIN_PATTERN, "The DNS search domain (static only)."),
                        "pool": _address_pool(IPV4_PATTERN, "An IPv4 address of the subnet."),
                    },
                },
                "ipv6": {
                    "type": "object",
                    "description": "static: the definition gives an address in subnet (or auto: leased from pool); "
                    "slaac or dhcp: the guest configures itself from the router's prefix (subnet, when given, is "
                    "that prefix); none (or absent): no IPv6 beyond link-local.",
                    "additionalProperties": False,
                    "required": ["mode"],
                    "properties": {
                        "mode": {"type": "string", "enum": ["dhcp", "slaac", "static", "none"]},
                        "subnet": _string(
                            IPV6_CIDR_PATTERN, "The IPv6 prefix in CIDR notation, e.g. 2001:db8:42::/64."
                        ),
                        "gateway": _string(IPV6_PATTERN, "The default gateway (static only)."),
                        "dns": _dns_servers(IPV6_PATTERN, "An IPv6 address."),
                        "searchDomain": _string(DOMAIN_PATTERN, "The DNS search domain (static only)."),
                        "pool": _address_pool(IPV6_PATTERN, "An IPv6 address of the subnet."),
                    },
                },
            },
        },
        "mapping": {
            "type": "object",
            "additionalProperties": False,
            "required": [
                "image",
                "node",
                "templateVmid",
                "templateVersion",
                "storage",
                "bridge",
                "diskDevice",
                "sourceDiskGiB",
                "guestUser",
            ],
            "properties": {
                "image": _string(IMAGE_PATTERN, "1-64 lowercase letters, digits, dots or hyphens."),
                "node": _string(
                    NODE_PATTERN, "1-63 letters, digits, dots, underscores or hyphens, starting with a letter or digit."
                ),
                "templateVmid": _integer(VMID_MIN, VMID_MAX, "VMID of the template, 100-999999999."),
                "templateVersion": _string(
                    TEMPLATE_VERSION_PATTERN, "1-128 letters, digits, dots, underscores, plus signs or hyphens."
                ),
                "storage": _string(
                    STORAGE_PATTERN,
                    "1-64 letters, digits, dots, underscores or hyphens, starting with a letter or digit.",
                ),
                "bridge": _string(
                    BRIDGE_PATTERN,
                    "1-15 letters, digits, dots, underscores or hyphens, starting with a letter or digit.",
                ),
                "diskDevice": {
                    "type": "string",
                    "description": "Disk the template boots from.",
                    "enum": ["scsi0", "virtio0", "sata0"],
                },
                "sourceDiskGiB": _integer(4, 4096, "Size of the template's disk in GiB, 4-4096."),
                "guestUser": _string(
                    GUEST_USER_PATTERN,
                    "1-32 lowercase letters, digits, underscores or hyphens, starting with a lowercase letter or underscore.",
                ),
                "pool": _string(
                    POOL_PATTERN,
                    "Optional resource pool the VM is cloned into (PVE pool id, up to three levels a/b/c).",
                ),
                "imageDefaultUser": {"$ref": "#/$defs/imageDefaultUser"},
                "distroFamily": DISTRO_FAMILY,
                "bakedProfiles": BAKED_PROFILES,
            },
        },
        "containerMapping": {
            "type": "object",
            "description": "An LXC container made from an ostemplate volume or the newest matching appliance; see docs/containers.md.",
            "additionalProperties": False,
            "required": ["image", "guestType", "node", "storage", "bridge", "guestUser"],
            "properties": {
                "image": _string(IMAGE_PATTERN, "1-64 lowercase letters, digits, dots or hyphens."),
                "guestType": {"type": "string", "const": "container"},
                "node": _string(
                    NODE_PATTERN, "1-63 letters, digits, dots, underscores or hyphens, starting with a letter or digit."
                ),
                "ostemplate": _string(
                    OSTEMPLATE_PATTERN, "A container template volume STORAGE:vztmpl/FILE.tar.gz|xz|zst.", 264
                ),
                "appliance": {"$ref": "#/$defs/appliance"},
                "storage": _string(
                    STORAGE_PATTERN,
                    "1-64 letters, digits, dots, underscores or hyphens, starting with a letter or digit.",
                ),
                "bridge": _string(
                    BRIDGE_PATTERN,
                    "1-15 letters, digits, dots, underscores or hyphens, starting with a letter or digit.",
                ),
                "guestUser": _string(
                    GUEST_USER_PATTERN,
                    "1-32 lowercase letters, digits, underscores or hyphens, starting with a lowercase letter or underscore.",
                ),
                "unprivileged": {
                    "type": "boolean",
                    "description": "Default true; false needs Sys.Modify on / and root-equivalent trust.",
                },
                "features": {
                    "type": "object",
                    "description": "Container features, each explicit; only nesting (for docker and systemd inside).",
                    "additionalProperties": False,
                    "properties": {"nesting": {"type": "boolean"}},
                },
                "distroFamily": DISTRO_FAMILY,
            },
        },
        "appliance": {
            "type": "object",
            "description": "An appliance of the node's index (pveam): the newest version matching the glob, kept in storage (vztmpl).",
            "additionalProperties": False,
            "required": ["package", "version", "storage"],
            "properties": {
                "package": _string(APPLIANCE_PATTERN, "An appliance package name such as debian-12-standard."),
                "version": _string(VERSION_GLOB_PATTERN, "A version or a glob with * such as 12.*, 1-64 characters."),
                "storage": _string(
                    STORAGE_PATTERN,
                    "1-64 letters, digits, dots, underscores or hyphens, starting with a letter or digit.",
                ),
            },
        },
        "imageDefaultUser": {
            "type": "object",
            "description": "Operator attestation about the image's default user; name must equal guestUser (not root), templateVersion the mapping's.",
            "additionalProperties": False,
            "required": ["name", "templateVersion", "passwordLocked", "noAuthorizedKeys"],
            "properties": {
                "name": _string(
                    GUEST_USER_PATTERN,
                    "1-32 lowercase letters, digits, underscores or hyphens, starting with a lowercase letter or underscore.",
                ),
                "templateVersion": _string(
                    TEMPLATE_VERSION_PATTERN, "1-128 letters, digits, dots, underscores, plus signs or hyphens."
                ),
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
                "excludeKeySources": {
                    "type": "array",
                    "description": "Names of the operator's SSH key sources whose keys this guest does not get (docs/profiles.md).",
                    "maxItems": 16,
                    "items": _string(DNS_LABEL_PATTERN, "The name of a configured SSH key source."),
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
                    "name": _string(
                        PACKAGE_NAME_PATTERN, "A Debian package name (2-128 characters, not ending in a hyphen)."
                    ),
                    "version": _string(
                        PACKAGE_VERSION_PATTERN,
                        "An exact Debian version [epoch:]upstream[-revision]; no ranges or selectors.",
                    ),
                },
            },
        },
        "snapshotAfterProvisioning": {"type": "boolean"},
        "targetNode": _string(
            NODE_PATTERN, "auto (placement chooses the node) or the node the guest goes to; absent, the mapping's node."
        ),
        "network": {
            "type": "object",
            "description": "The catalog network the NIC joins; absent, the mapping's bridge with IPv4 DHCP.",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": _string(DNS_LABEL_PATTERN, "The name of a catalog network."),
                "ipv4": _definition_address(IPV4_PATTERN, "IPv4"),
                "ipv6": _definition_address(IPV6_PATTERN, "IPv6"),
            },
        },
        "preset": {
            "type": "object",
            "description": "The preset this definition starts from (docs/profiles.md); its own fields win.",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": _string(DNS_LABEL_PATTERN, "The name of a preset."),
                "version": _integer(1, 999999999, "The preset version this definition pins, 1-999999999."),
                "hash": _string(
                    SHA256_HEX_PATTERN, "The preset's canonical SHA-256 (lowercase hex) this definition pins."
                ),
            },
        },
        "profiles": DEFINITION_PROFILES,
    },
}

# A key that may be named in an error: a plain identifier, as a misspelt field name is.
PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_TYPE_NAMES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "boolean": "true or false",
}
# JSON Schema keyword -> the rule name errors report (docs/formats.md).
_RULES = {
    "type": "type",
    "const": "const",
    "enum": "enum",
    "pattern": "pattern",
    "minLength": "min_length",
    "maxLength": "max_length",
    "minimum": "minimum",
    "maximum": "maximum",
    "minItems": "min_items",
    "maxItems": "max_items",
    "required": "required",
    "additionalProperties": "unknown_field",
    "anyOf": "any_of",
}
# Within one field, violations are reported in this order (type first: nothing else is meaningful then).
_KEYWORD_ORDER = (
    "anyOf",
    "type",
    "const",
    "enum",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "additionalProperties",
    "required",
)


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


def _validator_class() -> t.Any:
    """Draft 2020-12, with ``integer`` meaning a Python int that is not a bool (``2.0`` is refused)."""
    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)


def _text(error: t.Any, schema: dict[str, t.Any]) -> str:
    keyword, expected = error.validator, error.validator_value
    if keyword == "type":
        return "must be %s" % _TYPE_NAMES[expected]
    if keyword == "const":
        return "must be exactly %s" % json.dumps(expected)
    if keyword == "enum":
        return "must be one of %s" % ", ".join(expected)
    if keyword in ("pattern", "anyOf"):
        return "does not have the required form: %s" % schema.get("description", "see the schema")
    if keyword == "additionalProperties":
        # The key is input: it is named only when it is a plain identifier (a misspelt field), never otherwise.
        unknown = sorted(str(key) for key in error.instance if key not in schema.get("properties", {}))
        if unknown and PLAIN_KEY.match(unknown[0]):
            return "contains the field %s, which is not part of the v1 format" % unknown[0]
        return "contains a field that is not part of the v1 format"
    if keyword == "required":
        return "is required"
    bounds = {
        "minLength": "must have at least %d characters",
        "maxLength": "must have at most %d characters",
        "minimum": "must be at least %d",
        "maximum": "must be at most %d",
        "minItems": "must have at least %d entries",
        "maxItems": "must have at most %d entries",
    }
    text: str = bounds[keyword] % expected
    return text


def _located(root: dict[str, t.Any], error: t.Any) -> tuple[tuple[t.Any, ...], str, tuple[int, ...]]:
    """(path elements, dotted path, sort key following the schema's field order) of one error."""
    elements = list(error.absolute_path)
    if error.validator == "required":
        missing = [key for key in error.validator_value if key not in error.instance]
        elements.append(missing[0])
    order: list[int] = []
    node = root
    # if/then/else (the container mapping): follow the branch the error came from.
    branch = "then" if "then" in list(error.absolute_schema_path) else "else"
    for element in elements:
        while "$ref" in node or "if" in node:
            node = root["$defs"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node[branch]
        if isinstance(element, int):
            order.append(element)
            node = node.get("items", {})
        else:
            names = list(node.get("properties", {}))
            order.append(names.index(element) if element in names else len(names))
            node = node.get("properties", {}).get(element, {})
    path = "$"
    for element in elements:
        path = join_path(path, element)
    # An unknown field is reported at its mapping, before the mapping's own fields.
    tail = -1 if error.validator == "additionalProperties" else _KEYWORD_ORDER.index(error.validator)
    return tuple(elements), path, tuple(order) + (tail,)


def check_schema(schema: dict[str, t.Any], value: t.Any) -> None:
    """Raise ``SchemaViolation`` for the first violation of ``schema`` by ``value`` (in the schema's field order).

    Validation is jsonschema's (Draft 2020-12); only the error's location and keyword are used,
    never its message, which quotes the input.
    """
    if not HAS_JSONSCHEMA:
        raise ConfigurationError(
            "The Python library jsonschema is required on the controller.", details={"rule": "missing_library"}
        )
    errors = list(_validator_class()(schema).iter_errors(value))
    if not errors:
        return
    located = sorted((_located(schema, error) + (error,) for error in errors), key=lambda item: item[2])
    _elements, path, _order, error = located[0]
    raise SchemaViolation(path, _RULES[error.validator], _text(error, error.schema))


def schema_json(schema: dict[str, t.Any]) -> str:
    """The exact text of the shipped ``docs/schemas/*.schema.json`` file."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
