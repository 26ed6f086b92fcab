# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Profiles v1 (docs/profiles.md, "Profiles"): an Ansible role plus a small declaration a definition requests by name.

A declaration (``kind: Profile``) names the role, the distro families it supports, its typed variables, the profiles
it requires, and two flags: ``perGuest`` (runs again even when baked into the template) and ``lockoutRisk`` (may cut
the connection off, so it runs after every other). ``resolve_profiles`` turns a definition's request into the run
list (requires first, stable by request order, lockout risks last) and into the pinned entries the effective
definition records (``name``, ``version``, ``declarationHash``; the profiles added because another requires them with
``requiredBy``), so the definition hash, and with it the plan hash, covers every declaration that runs.
``choose_template`` picks among an image's mappings on one node the one with the most requested profiles baked in.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import typing as t

from .._core.errors import InputError
from .catalog import baked_identities, is_container
from .format_errors import DEFINITION, FormatError, check_document_schema
from .hashing import canonical_json, sha256_hex
from .presets import beside_catalog_reader, load_named_documents
from .profile_schemas import DISTRO_FAMILY_PATTERN, MAX_PROFILES, PROFILE_NAME_PATTERN
from .schemas import API_VERSION, PLAIN_KEY, _integer, _string

PROFILE = "invalid_profile"
VARS = "invalid_profile_vars"
NOT_FOUND = "profile_not_found"
MISMATCH = "profile_version_mismatch"
CYCLE = "profile_requires_cycle"
DISTRO = "profile_distro_unsupported"
NOT_RECORDED = "distro_family_not_recorded"
VARIABLE_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "list": (list,),
    "dict": (dict,),
}
MAX_VARIABLES = 64
_VARIABLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}\Z")
# FQCN (namespace.collection.role) or a plain role name.
ROLE_PATTERN = (
    r"^(?:[a-z_][a-z0-9_]{0,63}\.[a-z_][a-z0-9_]{0,63}\.[a-z_][a-z0-9_]{0,63}|[A-Za-z0-9_][A-Za-z0-9_-]{0,99})$"
)

PROFILE_SCHEMA_V1: dict[str, t.Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://vmanyware.dev/schemas/profile-v1.schema.json",
    "title": "vmanyware Profile v1",
    "description": "An Ansible role a definition requests by name, with typed variables. See docs/profiles.md.",
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "name", "version", "role", "distroFamilies"],
    "properties": {
        "apiVersion": {"type": "string", "const": API_VERSION},
        "kind": {"type": "string", "const": "Profile"},
        "name": _string(PROFILE_NAME_PATTERN, "1-63 characters, a lowercase DNS label; definitions name it."),
        "version": _integer(1, 999999999, "The profile's version, an integer 1-999999999."),
        "role": _string(ROLE_PATTERN, "The Ansible role that implements the profile: a FQCN or a role name."),
        "distroFamilies": {
            "type": "array",
            "description": "The OS families the profile supports (the catalog mapping's distroFamily).",
            "minItems": 1,
            "maxItems": 16,
            "items": _string(DISTRO_FAMILY_PATTERN, "An OS family such as debian or rhel."),
        },
        "variables": {
            "type": "object",
            "description": "The profile's typed variables by name ([a-z_][a-z0-9_]*, at most 64).",
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "required": ["type"],
                "properties": {
                    "type": {"type": "string", "enum": list(VARIABLE_TYPES)},
                    "default": {"description": "The value when the definition gives none (of the variable's type)."},
                    "required": {"type": "boolean", "description": "true: the definition must give it (no default)."},
                    "description": {"type": "string", "maxLength": 1024},
                },
            },
        },
        "requires": {
            "type": "array",
            "description": "Profiles that run before this one (added to the run list when not requested).",
            "maxItems": MAX_PROFILES,
            "items": _string(PROFILE_NAME_PATTERN, "The name of a profile."),
        },
        "perGuest": {"type": "boolean", "description": "Touches per-guest state: runs again even when baked in."},
        "lockoutRisk": {"type": "boolean", "description": "May cut the connection off (SSH hardening): runs last."},
        "description": {"type": "string", "maxLength": 1024},
    },
}


@dataclasses.dataclass(frozen=True)
class Profile:
    """A validated profile declaration and its canonical hash."""

    name: str
    version: int
    role: str
    distro_families: tuple[str, ...]
    variables: dict[str, dict[str, t.Any]]
    requires: tuple[str, ...]
    per_guest: bool
    lockout_risk: bool
    hash: str
    label: str = ""  # where it was read (a file name or profiles[N]), for refusals

    def identity(self) -> tuple[str, int, str]:
        return (self.name, self.version, self.hash)


@dataclasses.dataclass(frozen=True)
class PlannedProfile:
    """A profile of the run list: its declaration, its typed variables, and who requires it when not requested."""

    profile: Profile
    vars: dict[str, t.Any]
    required_by: list[str] | None


def _is_type(value: t.Any, name: str) -> bool:
    """Whether ``value`` is of the declared variable type (a boolean is not an int)."""
    return isinstance(value, VARIABLE_TYPES[name]) and not (name == "int" and isinstance(value, bool))


def validate_profile(data: t.Any) -> Profile:
    """A parsed declaration validated (``invalid_profile``); its hash is that of the validated document."""
    check_document_schema(PROFILE_SCHEMA_V1, data, PROFILE)
    variables = data.get("variables", {})
    if len(variables) > MAX_VARIABLES:
        raise FormatError(PROFILE, "variables", "too_many_variables")
    for name, spec in variables.items():
        path = "variables.%s" % name if PLAIN_KEY.match(name) else "variables"
        if not _VARIABLE_NAME.match(name):
            raise FormatError(PROFILE, path, "variable_name")
        if spec.get("required", False) == ("default" in spec):
            raise FormatError(PROFILE, path, "variable_default")
        if "default" in spec and not _is_type(spec["default"], spec["type"]):
            raise FormatError(PROFILE, path + ".default", "variable_type")
    requires = list(data.get("requires", []))
    for index, name in enumerate(requires):
        if name in requires[:index] or name == data["name"]:
            raise FormatError(PROFILE, "requires[%d]" % index, "duplicate_requires")
    document = copy.deepcopy(dict(data))
    return Profile(
        name=str(data["name"]),
        version=int(data["version"]),
        role=str(data["role"]),
        distro_families=tuple(str(family) for family in data["distroFamilies"]),
        variables=copy.deepcopy(dict(variables)),
        requires=tuple(str(name) for name in requires),
        per_guest=bool(data.get("perGuest", False)),
        lockout_risk=bool(data.get("lockoutRisk", False)),
        hash=sha256_hex(canonical_json(document)),
    )


def load_profiles(*, path: str | os.PathLike[str] | None = None, documents: t.Any = None) -> dict[str, Profile]:
    """The declarations of a directory ``path`` or of inline ``documents`` (as presets are read), by name."""
    loaded = load_named_documents(
        validate_profile,
        code=PROFILE,
        path=path,
        documents=documents,
        options=("profiles_path", "profiles"),
        rules=("too_many_profiles", "duplicate_profile"),
    )
    return {profile.name: dataclasses.replace(profile, label=label) for label, profile in loaded}


def profiles_reader(
    profiles_path: str | os.PathLike[str] | None, profiles: t.Any, catalog_path: str | os.PathLike[str] | None
) -> t.Callable[[], dict[str, Profile]]:
    """Reads the declarations when called: inline ``profiles``, else ``profiles_path``, else the ``profiles`` directory
    beside the catalog file when it exists, else none."""
    return beside_catalog_reader(load_profiles, profiles, profiles_path, catalog_path, "profiles")


def _typed_vars(profile: Profile, given: t.Mapping[str, t.Any], path: str | None) -> dict[str, t.Any]:
    """The request's variables over the declaration's defaults, each of its declared type (``invalid_profile_vars``);
    ``path``: the request entry (``None``: added by requires, so only defaults)."""
    for name, value in given.items():
        where = "%s.vars.%s" % (path, name) if PLAIN_KEY.match(name) else "%s.vars" % path
        if name not in profile.variables:
            raise FormatError(VARS, where, "unknown_variable")
        if not _is_type(value, profile.variables[name]["type"]):
            raise FormatError(VARS, where, "variable_type")
    typed: dict[str, t.Any] = {}
    for name, spec in profile.variables.items():
        if name in given:
            typed[name] = copy.deepcopy(given[name])
        elif "default" in spec:
            typed[name] = copy.deepcopy(spec["default"])
        elif path is None:  # a profile added by requires gets no vars: the definition must request it with them
            raise FormatError(VARS, "%s:variables.%s" % (profile.label, name), "required_variable")
        else:
            raise FormatError(VARS, "%s.vars" % path, "required_variable")
    return typed


def _pinned(profile: Profile, entry: t.Mapping[str, t.Any], path: str) -> None:
    if "version" in entry and entry["version"] != profile.version:
        raise InputError(
            code=MISMATCH, path=path + ".version", details={"rule": "pinned_version", "version": profile.version}
        )
    if "declarationHash" in entry and entry["declarationHash"] != profile.hash:
        raise InputError(code=MISMATCH, path=path + ".declarationHash", details={"rule": "pinned_hash"})


def resolve_profiles(
    request: t.Sequence[t.Mapping[str, t.Any]], declarations: t.Callable[[], t.Mapping[str, Profile]]
) -> tuple[list[dict[str, t.Any]], list[PlannedProfile]]:
    """The effective definition's ``profiles`` (pinned) and the run list of a definition's (validated) request;
    ``declarations`` is called only when the request is not empty.

    Codes: ``invalid_definition`` (a repeated name; a recorded ``requiredBy`` that no longer holds), ``invalid_profile``,
    ``profile_not_found``, ``profile_version_mismatch``, ``profile_requires_cycle``, ``invalid_profile_vars``."""
    if not request:
        return [], []
    known = declarations()
    requested: dict[str, int] = {}
    for index, entry in enumerate(request):
        path = "profiles[%d]" % index
        if any(earlier["name"] == entry["name"] for earlier in request[:index]):
            raise FormatError(DEFINITION, path + ".name", "duplicate_profile_request")
        if entry["name"] not in known:
            raise InputError(code=NOT_FOUND, path=path + ".name", details={"rule": "not_among_profiles"})
        _pinned(known[entry["name"]], entry, path)
        if "requiredBy" not in entry:
            requested[entry["name"]] = index
        elif "vars" in entry:
            raise FormatError(DEFINITION, path + ".vars", "required_by")
    order: list[str] = []
    state: dict[str, str] = {}

    def visit(name: str) -> None:
        state[name] = "visiting"
        profile = known[name]
        for position, needed in enumerate(profile.requires):
            where = "%s:requires[%d]" % (profile.label, position)
            if needed not in known:
                raise InputError(code=NOT_FOUND, path=where, details={"rule": "required_profile_unknown"})
            if state.get(needed) == "visiting":
                raise InputError(code=CYCLE, path=where, details={"rule": "requires_cycle"})
            if needed not in state:
                visit(needed)
        state[name] = "done"
        order.append(name)

    for name in requested:
        if name not in state:
            visit(name)
    # Lockout risks (and whatever requires one) run after every other profile, so a run never locks itself out first.
    late: set[str] = set()
    for name in order:  # requires come first in ``order``, so one pass sees every dependency's verdict
        if known[name].lockout_risk or any(needed in late for needed in known[name].requires):
            late.add(name)
    order = [name for name in order if name not in late] + [name for name in order if name in late]
    planned: list[PlannedProfile] = []
    for name in order:
        required_by = None if name in requested else [n for n in order if name in known[n].requires]
        position = requested.get(name)
        given = request[position].get("vars", {}) if position is not None else {}
        entry_path = "profiles[%d]" % position if position is not None else None
        planned.append(PlannedProfile(known[name], _typed_vars(known[name], given, entry_path), required_by))
    for index, entry in enumerate(request):
        if "requiredBy" in entry:
            match = [p for p in planned if p.profile.name == entry["name"]]
            if not match or match[0].required_by != list(entry["requiredBy"]):
                raise FormatError(DEFINITION, "profiles[%d].requiredBy" % index, "required_by")
    return _pins(request, requested, planned), planned


def _pins(
    request: t.Sequence[t.Mapping[str, t.Any]], requested: t.Mapping[str, int], planned: t.Sequence[PlannedProfile]
) -> list[dict[str, t.Any]]:
    """The effective definition's entries: the requested ones in request order (their vars as given), then those added
    by requires in run order, each pinned to the declaration that runs."""
    by_name = {p.profile.name: p for p in planned}
    pins: list[dict[str, t.Any]] = []
    for name, index in requested.items():
        profile = by_name[name].profile
        entry: dict[str, t.Any] = {"name": name, "version": profile.version, "declarationHash": profile.hash}
        if "vars" in request[index]:
            entry["vars"] = copy.deepcopy(dict(request[index]["vars"]))
        pins.append(entry)
    for item in planned:
        if item.required_by is not None:
            profile = item.profile
            pins.append(
                {
                    "name": profile.name,
                    "version": profile.version,
                    "declarationHash": profile.hash,
                    "requiredBy": list(item.required_by),
                }
            )
    return pins


def requested_identities(definition: t.Mapping[str, t.Any]) -> frozenset[tuple[str, int, str]]:
    """The (name, version, declarationHash) an effective definition pins: what a baked template must match."""
    return frozenset(
        (e["name"], e["version"], e["declarationHash"])
        for e in definition.get("profiles", [])
        if "version" in e and "declarationHash" in e
    )


# templateChoice reasons (docs/profiles.md, "Template choice"): code -> fixed text.
CHOICE_REASONS = {
    "single_template": "the only template of the image on the node",
    "most_requested_baked": "the template with the most requested profiles baked in",
    "fewest_other_baked": "as many requested profiles baked in as another, and fewer profiles not requested",
    "lowest_template_vmid": "as many requested and other profiles baked in as another, and the lowest template VMID",
}


def choose_template(
    candidates: t.Sequence[t.Mapping[str, t.Any]], requested: frozenset[tuple[str, int, str]]
) -> tuple[dict[str, t.Any], dict[str, t.Any]]:
    """Among mappings of one image on one node: the most requested profiles baked in, then the fewest others, then
    the lowest template VMID; and the plan's ``templateChoice``."""

    def score(mapping: t.Mapping[str, t.Any]) -> tuple[int, int, int]:
        baked = baked_identities(mapping)
        return (-len(baked & requested), len(baked - requested), int(mapping.get("templateVmid", 0)))

    ranked = sorted(candidates, key=score)
    chosen = ranked[0]
    if len(ranked) == 1:
        reason = "single_template"
    else:
        first, second = score(chosen), score(ranked[1])
        reason = (
            "most_requested_baked"
            if first[0] != second[0]
            else ("fewest_other_baked" if first[1] != second[1] else "lowest_template_vmid")
        )
    choice: dict[str, t.Any] = {
        "templateVmid": chosen.get("templateVmid"),
        "bakedRequested": len(baked_identities(chosen) & requested),
        "candidates": len(ranked),
        "reason": reason,
    }
    if is_container(chosen):
        choice.pop("templateVmid")
    return copy.deepcopy(dict(chosen)), choice


def check_distro_families(mapping: t.Mapping[str, t.Any], planned: t.Sequence[PlannedProfile]) -> None:
    """Every profile that runs supports the mapping's ``distroFamily`` (``profile_distro_unsupported``); a mapping
    without one cannot run profiles (``distro_family_not_recorded``)."""
    family = mapping.get("distroFamily")
    if family is None:
        raise InputError(
            "The catalog mapping records no distroFamily; record the image's OS family (distroFamily) to plan profiles.",
            code=NOT_RECORDED,
            path="image",
            details={"rule": "distro_family_not_recorded"},
        )
    for index, item in enumerate(planned):
        if family not in item.profile.distro_families:
            raise InputError(
                code=DISTRO,
                path="%s:distroFamilies" % item.profile.label,
                details={"rule": "distro_family", "position": index + 1},
            )


def plan_profiles(mapping: t.Mapping[str, t.Any], planned: t.Sequence[PlannedProfile]) -> list[dict[str, t.Any]]:
    """The plan's ``profiles`` in run order: each with ``baked`` (the chosen template has it) and ``run``."""
    baked = baked_identities(mapping)
    entries: list[dict[str, t.Any]] = []
    for item in planned:
        profile = item.profile
        is_baked = profile.identity() in baked
        entry: dict[str, t.Any] = {
            "name": profile.name,
            "version": profile.version,
            "role": profile.role,
            "declarationHash": profile.hash,
            "vars": copy.deepcopy(item.vars),
        }
        if item.required_by is not None:
            entry["requiredBy"] = list(item.required_by)
        entry.update(
            {
                "perGuest": profile.per_guest,
                "lockoutRisk": profile.lockout_risk,
                "baked": is_baked,
                "run": not is_baked or profile.per_guest,
            }
        )
        entries.append(entry)
    return entries
