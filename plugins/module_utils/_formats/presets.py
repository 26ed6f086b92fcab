# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Presets v1 (docs/profiles.md, "Presets"): named, versioned definition fragments a definition starts from.

A preset is a strict document (``kind: Preset``, ``name``, integer ``version``, a ``spec`` fragment of
``PRESET_FIELDS``). A definition naming one (``preset: {name, version?, hash?}``) is merged over it field by field:
mappings merge recursively, scalars and lists of the request replace the preset's. The merged (effective)
definition records ``preset: {name, version, hash}`` (hash: the canonical SHA-256 of the preset), so the definition
hash, and with it the plan hash, covers the preset. Presets are read only when a definition names one.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import typing as t

from .._core.errors import InputError
from .format_errors import DEFINITION, PRESET, FormatError, check_document_schema
from .hashing import canonical_json, sha256_hex
from .schemas import API_VERSION, DEFINITION_SCHEMA_V1, DNS_LABEL_PATTERN, _integer, _string
from .yaml_strict import load_document

# The definition fields a preset may carry (the preset's schema takes each one's definition schema); a preset's
# ``profiles`` is replaced by the definition's, as every list is.
PRESET_FIELDS: tuple[str, ...] = ("image", "resources", "network", "profiles")
MAX_PRESETS = 256
PRESET_SUFFIXES = (".yml", ".yaml")
# A file name that may appear in an error path (it is the operator's, but only a plain one is repeated).
PLAIN_FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}\Z")


def _partial(schema: t.Any) -> t.Any:
    """A definition field's schema with every ``required`` dropped: a preset may give part of a mapping."""
    if isinstance(schema, dict):
        return {key: _partial(value) for key, value in schema.items() if key != "required"}
    if isinstance(schema, list):
        return [_partial(item) for item in schema]
    return schema


PRESET_SCHEMA_V1: dict[str, t.Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://vmanyware.dev/schemas/preset-v1.schema.json",
    "title": "vmanyware Preset v1",
    "description": "A named, versioned fragment of an environment definition. See docs/profiles.md.",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "version", "spec"],
    "properties": {
        "apiVersion": {"type": "string", "const": API_VERSION},
        "kind": {"type": "string", "const": "Preset"},
        "name": _string(DNS_LABEL_PATTERN, "1-63 characters, a lowercase DNS label; definitions name it."),
        "version": _integer(1, 999999999, "The preset's version, an integer 1-999999999; a definition may pin it."),
        "spec": {
            "type": "object",
            "description": "The definition fields the preset gives (image, resources, network, profiles); the definition's own win.",
            "additionalProperties": False,
            "properties": {field: _partial(DEFINITION_SCHEMA_V1["properties"][field]) for field in PRESET_FIELDS},
        },
    },
}
# Only the request's ``preset`` reference, checked before the merge (the rest is checked on the merged definition).
_REFERENCE_SCHEMA: dict[str, t.Any] = {
    "type": "object",
    "properties": {"preset": DEFINITION_SCHEMA_V1["properties"]["preset"]},
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """A validated preset: its name, version, canonical hash and spec fragment."""

    name: str
    version: int
    hash: str
    spec: dict[str, t.Any]


def validate_preset(data: t.Any) -> Preset:
    """A parsed preset document validated (``invalid_preset``); its hash is that of the validated document."""
    spec = data.get("spec") if isinstance(data, dict) else None
    if isinstance(spec, dict):
        for key in spec:
            if key in DEFINITION_SCHEMA_V1["properties"] and key not in PRESET_FIELDS:
                raise FormatError(PRESET, "spec.%s" % key, "preset_field_not_allowed")
    check_document_schema(PRESET_SCHEMA_V1, data, PRESET)
    document = {
        "apiVersion": API_VERSION,
        "kind": "Preset",
        "name": str(data["name"]),
        "version": int(data["version"]),
        "spec": copy.deepcopy(data["spec"]),
    }
    return Preset(document["name"], document["version"], sha256_hex(canonical_json(document)), document["spec"])


N = t.TypeVar("N")


def load_named_documents(
    validate: t.Callable[[t.Any], N],
    *,
    code: str,
    path: str | os.PathLike[str] | None,
    documents: t.Any,
    options: tuple[str, str],
    rules: tuple[str, str],
) -> list[tuple[str, N]]:
    """Named documents (presets, profiles) of a directory ``path`` (its ``*.yml``/``*.yaml`` files, in name order) or of
    inline ``documents`` (a list of YAML texts or mappings), each validated and with its error label (a plain file
    name, else ``<directory option>[N]``, or ``<inline option>[N]``); ``options``: the (directory, inline) option
    names; ``rules``: the (too many, duplicate name) rules. Neither source: none."""
    directory, inline = options
    # (label for errors, inline document, file path): one of the two
    sources: list[tuple[str, t.Any, str | None]] = []
    if documents is not None:
        if not isinstance(documents, (list, tuple)):
            raise FormatError(code, inline, "type", "must be a list of documents")
        sources = [("%s[%d]" % (inline, index), item, None) for index, item in enumerate(documents)]
    elif path is not None:
        if not os.path.isdir(path):
            raise FormatError(code, directory, "not_a_directory")
        try:
            names = sorted(name for name in os.listdir(path) if name.endswith(PRESET_SUFFIXES))
        except OSError:
            raise FormatError(code, directory, "unreadable") from None
        sources = [
            (name if PLAIN_FILE_NAME.match(name) else "%s[%d]" % (directory, position), None, os.path.join(path, name))
            for position, name in enumerate(names)
        ]
    if len(sources) > MAX_PRESETS:
        raise FormatError(code, directory if documents is None else inline, rules[0])
    loaded: list[tuple[str, N]] = []
    names_seen: set[str] = set()
    for label, item, file_path in sources:
        try:
            document = validate(load_document(text=item, path=file_path, code=code))
        except FormatError as err:
            raise err.located(code, label if err.path == "$" else "%s:%s" % (label, err.path)) from None
        name = getattr(document, "name")
        if name in names_seen:
            raise FormatError(code, "%s:name" % label, rules[1])
        names_seen.add(name)
        loaded.append((label, document))
    return loaded


def beside_catalog_reader(
    load: t.Callable[..., dict[str, N]],
    documents: t.Any,
    path: str | os.PathLike[str] | None,
    catalog_path: str | os.PathLike[str] | None,
    directory: str,
) -> t.Callable[[], dict[str, N]]:
    """Reads with ``load`` when called: inline ``documents``, else the directory ``path``, else the directory named
    ``directory`` beside the catalog file when it exists, else none (presets and profiles are found alike)."""

    def read() -> dict[str, N]:
        if documents is not None:
            return load(documents=documents)
        if path is not None:
            return load(path=path)
        if catalog_path is not None:
            beside = os.path.join(os.path.dirname(os.path.abspath(os.fspath(catalog_path))), directory)
            if os.path.isdir(beside):
                return load(path=beside)
        return {}

    return read


def load_presets(*, path: str | os.PathLike[str] | None = None, documents: t.Any = None) -> dict[str, Preset]:
    """The presets of a directory ``path`` or of ``documents`` (``load_named_documents``), by name; neither: none."""
    loaded = load_named_documents(
        validate_preset,
        code=PRESET,
        path=path,
        documents=documents,
        options=("presets_path", "presets"),
        rules=("too_many_presets", "duplicate_preset"),
    )
    return {preset.name: preset for _label, preset in loaded}


def merge(base: t.Any, override: t.Any) -> t.Any:
    """``override`` over ``base``: mappings merge key by key (recursively); any other value of ``override`` wins."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = copy.deepcopy(base)
        for key, value in override.items():
            merged[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(override)


def merge_preset(data: t.Any, presets: t.Callable[[], t.Mapping[str, Preset]]) -> tuple[t.Any, list[str] | None]:
    """The definition document ``data`` merged over the preset it names (``presets`` is called only then), with
    ``preset: {name, version, hash}`` recorded, and the fields the preset gave (``preset_fields``); a document naming
    none is returned as it is, with ``None``.

    Codes: ``invalid_definition`` (the reference itself), ``preset_not_found``, ``preset_version_mismatch``."""
    if not isinstance(data, dict) or "preset" not in data:
        return data, None
    check_document_schema(_REFERENCE_SCHEMA, {"preset": data["preset"]}, DEFINITION)
    reference = data["preset"]
    preset = presets().get(reference["name"])
    if preset is None:
        raise InputError(code="preset_not_found", path="preset.name", details={"rule": "not_among_presets"})
    if "version" in reference and reference["version"] != preset.version:
        raise InputError(
            code="preset_version_mismatch",
            path="preset.version",
            details={"rule": "pinned_version", "version": preset.version},
        )
    if "hash" in reference and reference["hash"] != preset.hash:
        raise InputError(code="preset_version_mismatch", path="preset.hash", details={"rule": "pinned_hash"})
    request = {key: value for key, value in data.items() if key != "preset"}
    merged = merge(preset.spec, request)
    merged["preset"] = {"name": preset.name, "version": preset.version, "hash": preset.hash}
    return merged, preset_fields(preset.spec, request)


def preset_fields(spec: t.Mapping[str, t.Any], request: t.Any, prefix: str = "") -> list[str]:
    """The dotted paths of the leaves of a preset's ``spec`` the ``request`` does not give (the fields the preset gave)."""
    fields: list[str] = []
    for key, value in spec.items():
        path = prefix + key
        given = request.get(key) if isinstance(request, dict) else None
        if isinstance(value, dict) and isinstance(given, dict):
            fields.extend(preset_fields(value, given, path + "."))
        elif not isinstance(request, dict) or key not in request:
            fields.append(path)
    return fields
