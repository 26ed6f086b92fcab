# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Canonical JSON (RFC 8785, JCS) and the two hashes of the v1 formats.

``definitionHash`` is the SHA-256 (lowercase hex) of the JCS form of the validated definition
with defaults applied. ``planHash`` is the SHA-256 of the compact JSON array
``[definitionHash, mapping, targetVmid]`` (mapping in catalog field order). See docs/formats.md.
A template build (docs/templates.md) hashes its TemplateBuild the same way (``templateBuildHash``)
and its ``planHash`` over ``[templateBuildHash, templateVmid]`` (``template_plan_hash``).
The journal recomputes both hashes of every operation it loads (``_journal.document.recorded_hashes_match``).

The JCS implementation covers the value types the formats produce (str, int, bool, None,
list, dict with str keys); floats are refused because no v1 field is a float. It does not
need the ``rfc8785`` package (tests cross-check against it).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import hashlib
import json
import typing as t

# RFC 8785 numbers are IEEE 754 doubles: integers beyond 2**53 - 1 would lose precision.
_MAX_SAFE_INTEGER = 2**53 - 1
_SHORT_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"}


def _jcs_string(value: str) -> str:
    out = ['"']
    for char in value:
        code = ord(char)
        if code in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[code])
        elif code < 0x20:
            out.append("\\u%04x" % code)
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("lone surrogate in string")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


def _utf16_key(key: str) -> bytes:
    # RFC 8785 section 3.2.3: properties are sorted by their UTF-16 code units.
    return key.encode("utf-16-be")


def _jcs(value: t.Any, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if not -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER:
            raise ValueError("integer outside the IEEE 754 safe range")
        out.append(str(int(value)))
    elif isinstance(value, str):
        out.append(_jcs_string(value))
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _jcs(item, out)
        out.append("]")
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise TypeError("object keys must be strings")
        out.append("{")
        for index, key in enumerate(sorted(value, key=_utf16_key)):
            if index:
                out.append(",")
            out.append(_jcs_string(key))
            out.append(":")
            _jcs(value[key], out)
        out.append("}")
    else:
        raise TypeError("unsupported type for canonical JSON")


def canonical_json(value: t.Any) -> bytes:
    """Return the RFC 8785 canonical JSON serialization of ``value`` as UTF-8 bytes."""
    out: list[str] = []
    _jcs(value, out)
    return "".join(out).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def definition_hash(definition: t.Mapping[str, t.Any]) -> str:
    """SHA-256 hex of the JCS form of a *validated* definition (defaults applied)."""
    return sha256_hex(canonical_json(dict(definition)))


def plan_hash_bytes(definition_hash_hex: str, mapping: t.Mapping[str, t.Any], target_vmid: int) -> bytes:
    """The exact bytes that ``planHash`` is computed over (compact JSON, mapping order kept)."""
    return json.dumps(
        [definition_hash_hex, dict(mapping), int(target_vmid)],
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    ).encode("utf-8")


def plan_hash(definition_hash_hex: str, mapping: t.Mapping[str, t.Any], target_vmid: int) -> str:
    """SHA-256 hex of ``[definitionHash, mapping, targetVmid]`` as compact JSON.

    The mapping must already be in catalog field order (``_formats.normalize_mapping``).
    """
    return sha256_hex(plan_hash_bytes(definition_hash_hex, mapping, target_vmid))


def template_plan_hash_bytes(build_hash_hex: str, template_vmid: int) -> bytes:
    """The exact bytes the ``planHash`` of a template build is computed over: compact JSON ``[templateBuildHash, templateVmid]``."""
    return json.dumps([build_hash_hex, int(template_vmid)], separators=(",", ":")).encode("ascii")


def template_plan_hash(build_hash_hex: str, template_vmid: int) -> str:
    """SHA-256 hex of ``template_plan_hash_bytes``: the ``planHash`` of a TemplateBuildPlan."""
    return sha256_hex(template_plan_hash_bytes(build_hash_hex, template_vmid))


def template_build_mapping(build: t.Mapping[str, t.Any], template_vmid: int, disk_device: str) -> dict[str, t.Any]:
    """The catalog mapping a template build operation records (``_template_operation.journal_snapshots``).

    Not hashed itself: it is derived from the hashed TemplateBuild and VMID, so the journal checks a recorded one
    against this derivation (``_journal.document.recorded_hashes_match``).
    """
    mapping = {
        "image": build["image"],
        "node": build["node"],
        "templateVmid": template_vmid,
        "templateVersion": build["templateVersion"],
        "storage": build["storage"],
        "bridge": build["bridge"],
        "diskDevice": disk_device,
        "guestUser": build["guestUser"],
    }
    if "distroFamily" in build:  # the OS family the operator declared (docs/profiles.md); absent, as before
        mapping["distroFamily"] = build["distroFamily"]
    if build.get("profiles"):  # the profiles the build bakes (docs/templates.md, "Baking profiles"); absent, as before
        mapping["bakedProfiles"] = [
            {"name": entry["name"], "version": entry["version"], "declarationHash": entry["declarationHash"]}
            for entry in build["profiles"]
        ]
    return mapping
