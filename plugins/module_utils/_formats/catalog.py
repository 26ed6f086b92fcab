# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template catalog v1: validation (JSON Schema, then the rules a schema cannot express) and normalization.

A catalog maps image identifiers to templates (VM mappings) or appliance templates (container
mappings, ``guestType: container``); ``normalize_mapping`` checks one mapping on its own. A
VM mapping's normalized form has exactly the fields it always had, so its hashes never change.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import os
import typing as t

from .format_errors import CATALOG, FormatError, check_document_schema
from .networks import catalog_networks
from .schemas import API_VERSION, CATALOG_SCHEMA_V1
from .yaml_strict import load_document

_MAPPING_FIELDS = (
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
_INT_FIELDS = frozenset(("templateVmid", "sourceDiskGiB"))
_MAPPING_SCHEMA = {"$defs": CATALOG_SCHEMA_V1["$defs"], **CATALOG_SCHEMA_V1["properties"]["images"]["items"]}
CONTAINER = "container"


def is_container(mapping: t.Mapping[str, t.Any]) -> bool:
    """Whether a (normalized) mapping declares ``guestType: container``; VM mappings have no guestType."""
    return mapping.get("guestType") == CONTAINER


def _container_rules(mapping: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    """A container mapping in catalog field order, defaults applied (unprivileged, no features)."""
    if ("ostemplate" in mapping) == ("appliance" in mapping):
        raise FormatError(code, "ostemplate" if path == "$" else path + ".ostemplate", "container_template_source")
    result: dict[str, t.Any] = {"image": str(mapping["image"]), "guestType": CONTAINER, "node": str(mapping["node"])}
    if "ostemplate" in mapping:
        result["ostemplate"] = str(mapping["ostemplate"])
    else:
        appliance = mapping["appliance"]
        result["appliance"] = {
            "package": str(appliance["package"]),
            "version": str(appliance["version"]),
            "storage": str(appliance["storage"]),
        }
    result.update(
        {
            "storage": str(mapping["storage"]),
            "bridge": str(mapping["bridge"]),
            "guestUser": str(mapping["guestUser"]),
            "unprivileged": bool(mapping.get("unprivileged", True)),
            "features": {"nesting": bool((mapping.get("features") or {}).get("nesting", False))},
        }
    )
    if "distroFamily" in mapping:  # optional (docs/profiles.md): absent, the mapping is exactly as before
        result["distroFamily"] = str(mapping["distroFamily"])
    return result


def _baked_profiles(baked: t.Any, path: str, code: str) -> list[dict[str, t.Any]]:
    """A mapping's ``bakedProfiles`` normalized (name, version, declarationHash); a name at most once."""
    prefix = "bakedProfiles" if path == "$" else path + ".bakedProfiles"
    entries: list[dict[str, t.Any]] = []
    for index, entry in enumerate(baked):
        if any(seen["name"] == entry["name"] for seen in entries):
            raise FormatError(code, "%s[%d].name" % (prefix, index), "duplicate_baked_profile")
        entries.append(
            {
                "name": str(entry["name"]),
                "version": int(entry["version"]),
                "declarationHash": str(entry["declarationHash"]),
            }
        )
    return entries


def baked_identities(mapping: t.Mapping[str, t.Any]) -> frozenset[tuple[str, int, str]]:
    """The (name, version, declarationHash) of each profile baked into a mapping's template."""
    return frozenset((e["name"], e["version"], e["declarationHash"]) for e in mapping.get("bakedProfiles", []))


def _mapping_rules(mapping: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    """Semantic rules of one (schema-valid) mapping; returns it in catalog field order.

    A VM mapping's normalized form has exactly the fields it always had, so its hashes never change.
    """
    if is_container(mapping):
        return _container_rules(mapping, path, code)
    result: dict[str, t.Any] = {}
    for field in _MAPPING_FIELDS:
        result[field] = int(mapping[field]) if field in _INT_FIELDS else str(mapping[field])
    if mapping.get("pool") is not None:  # optional: absent, the mapping (and every hash over it) is as before
        result["pool"] = str(mapping["pool"])
    attestation = mapping.get("imageDefaultUser")
    if attestation is not None:
        prefix = "imageDefaultUser" if path == "$" else path + ".imageDefaultUser"
        if attestation["name"] == "root":
            raise FormatError(code, prefix + ".name", "default_user_root")
        if attestation["name"] != result["guestUser"]:
            raise FormatError(code, prefix + ".name", "default_user_mismatch")
        if attestation["templateVersion"] != result["templateVersion"]:
            raise FormatError(code, prefix + ".templateVersion", "template_version_mismatch")
        result["imageDefaultUser"] = {
            "name": str(attestation["name"]),
            "templateVersion": str(attestation["templateVersion"]),
            "passwordLocked": True,
            "noAuthorizedKeys": True,
        }
    if "distroFamily" in mapping:  # optional (docs/profiles.md): absent, the mapping (and its hashes) is as before
        result["distroFamily"] = str(mapping["distroFamily"])
    if "bakedProfiles" in mapping:
        result["bakedProfiles"] = _baked_profiles(mapping["bakedProfiles"], path, code)
    return result


def validate_catalog(data: t.Any) -> dict[str, t.Any]:
    """Validate a parsed catalog; return it normalized (plain types, catalog field order)."""
    check_document_schema(CATALOG_SCHEMA_V1, data, CATALOG)
    # One image may map to a template on each node (per-node templates, docs/operations.md "Placement"), and to several
    # on one node only when they differ in the profiles baked in (the plan picks among them, docs/profiles.md): the
    # same image twice on one node with the same baked profiles is ambiguous.
    seen: dict[tuple[str, str], list[frozenset[tuple[str, int, str]]]] = {}
    images: list[dict[str, t.Any]] = []
    for index, mapping in enumerate(data["images"]):
        path = "images[%d]" % index
        normalized = _mapping_rules(mapping, path, CATALOG)
        baked = seen.setdefault((mapping["image"], mapping["node"]), [])
        if baked_identities(normalized) in baked:
            raise FormatError(CATALOG, path + ".image", "duplicate_image")
        baked.append(baked_identities(normalized))
        images.append(normalized)
    catalog: dict[str, t.Any] = {"apiVersion": API_VERSION, "kind": "TemplateCatalog", "images": images}
    if "networks" in data:  # optional: a catalog without it normalizes exactly as before
        catalog["networks"] = catalog_networks(data["networks"], CATALOG)
    return catalog


def normalize_mapping(mapping: t.Any) -> dict[str, t.Any]:
    """Validate one catalog mapping on its own (code ``invalid_catalog``); return it in field order."""
    check_document_schema(_MAPPING_SCHEMA, mapping, CATALOG)
    return _mapping_rules(mapping, "$", CATALOG)


def parse_catalog(
    *, text: str | bytes | t.Mapping[str, t.Any] | None = None, path: str | os.PathLike[str] | None = None
) -> dict[str, t.Any]:
    """Read, parse and validate a v1 TemplateCatalog from inline ``text`` (YAML, or a mapping) or a file ``path``."""
    return validate_catalog(load_document(text=text, path=path, code=CATALOG))
