# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The schema parts profiles add to the catalog and the definition (docs/profiles.md, "Profiles").

Kept apart from ``schemas.py`` (which includes them) so that file stays within the plugin size limit; they import
nothing, so ``schemas.py`` and ``profiles.py`` both read them without a cycle.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

# A profile's name: a lowercase DNS label (docs/profiles.md).
PROFILE_NAME_PATTERN = r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$"
# An OS family as the profiles and the catalog name it (debian, rhel, suse, alpine, ...).
DISTRO_FAMILY_PATTERN = r"^[a-z][a-z0-9_-]{0,31}$"
_SHA256 = r"^[0-9a-f]{64}$"
MAX_PROFILES = 32


def _name(description: str) -> dict[str, t.Any]:
    return {"type": "string", "description": description, "pattern": PROFILE_NAME_PATTERN}


def _version(description: str) -> dict[str, t.Any]:
    return {"type": "integer", "description": description, "minimum": 1, "maximum": 999999999}


def _hash(description: str) -> dict[str, t.Any]:
    return {"type": "string", "description": description, "pattern": _SHA256}


DISTRO_FAMILY: dict[str, t.Any] = {
    "type": "string",
    "description": "The OS family of the image (debian, rhel, ...): the profiles a plan runs must support it.",
    "pattern": DISTRO_FAMILY_PATTERN,
}
# The catalog mapping's profiles baked into its template (the template build's stamp records them).
BAKED_PROFILES: dict[str, t.Any] = {
    "type": "array",
    "description": "The profiles baked into the template; a plan skips those it requests (unless perGuest).",
    "maxItems": MAX_PROFILES,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "version", "declarationHash"],
        "properties": {
            "name": _name("The profile's name."),
            "version": _version("The profile's version that was baked, 1-999999999."),
            "declarationHash": _hash("The canonical SHA-256 (lowercase hex) of the declaration that was baked."),
        },
    },
}
# The definition's profiles (docs/profiles.md): the request; the effective definition pins each one it runs.
DEFINITION_PROFILES: dict[str, t.Any] = {
    "type": "array",
    "description": "The profiles to run after readiness, with their variables (docs/profiles.md).",
    "maxItems": MAX_PROFILES,
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": {
            "name": _name("The name of a profile declaration."),
            "version": _version("The profile version this definition pins, 1-999999999."),
            "declarationHash": _hash("The declaration's canonical SHA-256 (lowercase hex) this definition pins."),
            "vars": {"type": "object", "description": "The profile's variables (its declaration types them)."},
            "requiredBy": {
                "type": "array",
                "description": "Recorded by the plan: the profile was added because these require it (no vars).",
                "minItems": 1,
                "maxItems": MAX_PROFILES,
                "items": _name("The name of a profile that requires this one."),
            },
        },
    },
}
