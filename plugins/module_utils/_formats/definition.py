# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Environment definition v1: validation (JSON Schema, SSH keys, unique packages) and normalization with defaults.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import copy
import os
import typing as t

from .format_errors import DEFINITION, FormatError, check_document_schema
from .schemas import API_VERSION, DEFINITION_SCHEMA_V1
from .ssh_keys import check_ssh_public_key
from .yaml_strict import load_document


def validate_definition(data: t.Any) -> dict[str, t.Any]:
    """Validate a parsed definition; return it normalized with defaults applied.

    Defaults: ``packages`` becomes ``[]`` and ``snapshotAfterProvisioning`` ``false`` when
    absent; a package ``version``, ``targetNode`` and ``network`` stay absent when not given.
    """
    check_document_schema(DEFINITION_SCHEMA_V1, data, DEFINITION)
    keys: set[tuple[str, bytes]] = set()
    for index, line in enumerate(data["access"]["sshPublicKeys"]):
        path = "access.sshPublicKeys[%d]" % index
        identity = check_ssh_public_key(line, path)
        if identity in keys:
            raise FormatError(DEFINITION, path, "duplicate_ssh_key")
        keys.add(identity)
    packages: list[dict[str, str]] = []
    names: set[str] = set()
    for index, package in enumerate(data.get("packages", [])):
        if package["name"] in names:
            raise FormatError(DEFINITION, "packages[%d].name" % index, "duplicate_package")
        names.add(package["name"])
        entry = {"name": str(package["name"])}
        if "version" in package:
            entry["version"] = str(package["version"])
        packages.append(entry)
    resources = data["resources"]
    access: dict[str, t.Any] = {"sshPublicKeys": [str(line) for line in data["access"]["sshPublicKeys"]]}
    if "excludeKeySources" in data["access"]:  # optional (docs/profiles.md): absent, the definition is as before
        excluded = [str(name) for name in data["access"]["excludeKeySources"]]
        for index, name in enumerate(excluded):
            if name in excluded[:index]:
                raise FormatError(DEFINITION, "access.excludeKeySources[%d]" % index, "duplicate_key_source")
        access["excludeKeySources"] = excluded
    normalized = {
        "apiVersion": API_VERSION,
        "kind": "Environment",
        "name": str(data["name"]),
        "image": str(data["image"]),
        "resources": {
            "cores": int(resources["cores"]),
            "memoryMiB": int(resources["memoryMiB"]),
            "diskGiB": int(resources["diskGiB"]),
        },
        "access": access,
        "packages": packages,
        "snapshotAfterProvisioning": bool(data.get("snapshotAfterProvisioning", False)),
    }
    if "targetNode" in data:  # optional: without it the definition (and its hash) is exactly as before
        normalized["targetNode"] = str(data["targetNode"])
    if "network" in data:  # optional: without it the definition (and its hash) is exactly as before
        network: dict[str, t.Any] = {"name": str(data["network"]["name"])}
        for family in ("ipv4", "ipv6"):
            if family in data["network"]:
                network[family] = {"address": str(data["network"][family]["address"])}
        normalized["network"] = network
    if "preset" in data:  # the preset it was merged with (presets.py); absent, the definition is exactly as before
        normalized["preset"] = {
            key: data["preset"][key] for key in ("name", "version", "hash") if key in data["preset"]
        }
    if "profiles" in data:  # optional (docs/profiles.md): absent, the definition is exactly as before
        fields = ("name", "version", "declarationHash", "vars", "requiredBy")
        normalized["profiles"] = [
            {key: copy.deepcopy(entry[key]) for key in fields if key in entry} for entry in data["profiles"]
        ]
    return normalized


def parse_definition(
    *, text: str | bytes | t.Mapping[str, t.Any] | None = None, path: str | os.PathLike[str] | None = None
) -> dict[str, t.Any]:
    """Read, parse and validate a v1 Environment from inline ``text`` (YAML, or a mapping) or a file ``path``."""
    return validate_definition(load_document(text=text, path=path, code=DEFINITION))
