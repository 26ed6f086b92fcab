# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""TemplateBuild v1: the document that says how to build a template from a cloud image, and its plan.

Loading is the same strict YAML subset as the catalog and the definition (``_formats``); the
JSON Schema is ``TEMPLATE_BUILD_SCHEMA_V1`` (rendered to ``docs/schemas/template-build-v1.schema.json``),
followed by the semantic rules a schema cannot express (checksum length per algorithm, no
credentials in the URL, a usable build address). Every refusal is a ``FormatError`` with code
``invalid_template_build``, a path and a fixed rule; no input value is ever part of an error.

``templateBuildHash`` is the SHA-256 of the JCS form of the validated document with defaults
applied; ``planHash`` is the SHA-256 of the compact JSON ``[templateBuildHash, templateVmid]``
(docs/templates.md). Planning never contacts Proxmox.

Profiles to bake (docs/templates.md, "Baking profiles") are read with the plan's declaration inputs
(``_formats.profiles``); the hashed build records each one that runs as ``{name, version,
declarationHash, vars}`` in run order, and the plan gains one ``profile:<name>`` step each after
``prepare``. Without ``profiles`` the build, the plan and both hashes are exactly as before.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import os
import re
import typing as t
import urllib.parse

from .._core.errors import InputError
from .yaml_strict import load_strict_yaml, read_source
from .format_errors import RULE_TEXTS, FormatError, check_document_schema
from .hashing import definition_hash, template_plan_hash
from .profile_schemas import DEFINITION_PROFILES, DISTRO_FAMILY
from .profiles import NOT_RECORDED, Profile, check_distro_families, plan_profiles, profiles_reader, resolve_profiles
from .schemas import (
    API_VERSION,
    BRIDGE_PATTERN,
    DEFINITION_SCHEMA_V1,
    GUEST_USER_PATTERN,
    IMAGE_PATTERN,
    NODE_PATTERN,
    STORAGE_PATTERN,
    TEMPLATE_VERSION_PATTERN,
    VMID_MAX,
    VMID_MIN,
)
from .._stages.registry import TEMPLATE, planned_steps

TEMPLATE_BUILD = "invalid_template_build"
GUEST_AGENT_PACKAGE = "qemu-guest-agent"
PROVIDER = "proxmox-ve"
DISK_DEVICE = "scsi0"
CHECKSUM_LENGTHS = {"sha256": 64, "sha512": 128}
IMAGE_FORMATS = ("qcow2", "raw", "vmdk")
MACHINE_DEFAULTS: dict[str, t.Any] = {
    "type": "q35",
    "bios": "ovmf",
    "scsihw": "virtio-scsi-single",
    "serialConsole": True,
    "cores": 2,
    "memoryMiB": 2048,
}

URL_PATTERN = r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,2040}$"
CHECKSUM_PATTERN = r"^(?:[0-9a-f]{64}|[0-9a-f]{128})$"
IPV4_PREFIX_PATTERN = r"^(?:[0-9]{1,3}\.){3}[0-9]{1,3}/[0-9]{1,2}$"
IPV4_PATTERN = r"^(?:[0-9]{1,3}\.){3}[0-9]{1,3}$"

_RULE_TEXTS = {
    "checksum_length": "does not have the length of the declared checksum algorithm (sha256: 64, sha512: 128 hex digits)",
    "url_credentials": "must not carry a user name or password (they would be recorded in the journal and the template)",
    "url_host": "does not name a host",
    "build_address_invalid": "is not a usable IPv4 host address with a prefix length of 8-30",
    "gateway_outside_network": "is not inside the build address's network",
    "gateway_equals_address": "must differ from the build address",
    "auto_needs_allocation": "auto needs VMID allocation (vmanyware_vmid), which this collection version does not include; "
    "declare the template VMID",
}


def _refuse(path: str, rule: str) -> FormatError:
    return FormatError(TEMPLATE_BUILD, path, rule, _RULE_TEXTS.get(rule, RULE_TEXTS.get(rule)))


_PACKAGES_SCHEMA = DEFINITION_SCHEMA_V1["properties"]["packages"]
# A build requests profiles as a definition does (name, vars, optional pins), without the plan-recorded requiredBy.
_BUILD_PROFILES: dict[str, t.Any] = dict(
    DEFINITION_PROFILES,
    description="The profiles to bake into the template, run in the preparation boot (docs/templates.md).",
    items=dict(
        DEFINITION_PROFILES["items"],
        properties={k: v for k, v in DEFINITION_PROFILES["items"]["properties"].items() if k != "requiredBy"},
    ),
)


def _string(pattern: str, description: str) -> dict[str, t.Any]:
    return {"type": "string", "description": description, "pattern": pattern}


TEMPLATE_BUILD_SCHEMA_V1: dict[str, t.Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://vmanyware.dev/schemas/template-build-v1.schema.json",
    "title": "vmanyware TemplateBuild v1",
    "description": "How to build a Proxmox VE template from a cloud image. See docs/templates.md for the rules a schema cannot express.",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "apiVersion",
        "kind",
        "image",
        "source",
        "node",
        "storage",
        "importStorage",
        "bridge",
        "templateVmid",
        "templateVersion",
        "guestUser",
        "buildAddress",
    ],
    "properties": {
        "apiVersion": {"type": "string", "const": API_VERSION},
        "kind": {"type": "string", "const": "TemplateBuild"},
        "image": _string(
            IMAGE_PATTERN, "1-64 lowercase letters, digits, dots or hyphens; the catalog image identifier."
        ),
        "source": {
            "type": "object",
            "additionalProperties": False,
            "required": ["url", "checksum", "checksumAlgorithm"],
            "properties": {
                "url": _string(
                    URL_PATTERN,
                    "An http or https URL of the cloud image, at most 2048 characters, without credentials.",
                ),
                "checksum": _string(
                    CHECKSUM_PATTERN, "The image's checksum as lowercase hex (64 digits for sha256, 128 for sha512)."
                ),
                "checksumAlgorithm": {
                    "type": "string",
                    "description": "The checksum algorithm.",
                    "enum": ["sha256", "sha512"],
                },
                "format": {
                    "type": "string",
                    "description": "The image's disk format (default qcow2).",
                    "enum": list(IMAGE_FORMATS),
                },
            },
        },
        "node": _string(
            NODE_PATTERN, "1-63 letters, digits, dots, underscores or hyphens, starting with a letter or digit."
        ),
        "storage": _string(STORAGE_PATTERN, "The storage of the template's disks (content images)."),
        "importStorage": _string(
            STORAGE_PATTERN, "The storage the image is downloaded into (content import, PVE 8.4 or later)."
        ),
        "bridge": _string(
            BRIDGE_PATTERN, "1-15 letters, digits, dots, underscores or hyphens, starting with a letter or digit."
        ),
        "templateVmid": {
            "description": "VMID of the template, 100-999999999, or auto (needs VMID allocation).",
            "anyOf": [
                {"type": "integer", "minimum": VMID_MIN, "maximum": VMID_MAX},
                {"type": "string", "const": "auto"},
            ],
        },
        "templateVersion": _string(
            TEMPLATE_VERSION_PATTERN, "1-128 letters, digits, dots, underscores, plus signs or hyphens."
        ),
        "diskGiB": {
            "type": "integer",
            "description": "Grow the imported disk to this size in GiB, 4-4096 (catalogs need at least 4; "
            "stock cloud images are often 2-3 GiB). Absent: the image's own size.",
            "minimum": 4,
            "maximum": 4096,
        },
        "machine": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "type": {"type": "string", "description": "Machine type (only q35).", "const": "q35"},
                "bios": {"type": "string", "description": "Firmware (only ovmf, with an EFI disk).", "const": "ovmf"},
                "scsihw": {
                    "type": "string",
                    "description": "SCSI controller (only virtio-scsi-single).",
                    "const": "virtio-scsi-single",
                },
                "serialConsole": {
                    "type": "boolean",
                    "description": "Add serial0 and use it as the display (default true).",
                },
                "cores": {
                    "type": "integer",
                    "description": "Cores of the preparation boot, 1-128.",
                    "minimum": 1,
                    "maximum": 128,
                },
                "memoryMiB": {
                    "type": "integer",
                    "description": "Memory of the preparation boot in MiB, 512-65536.",
                    "minimum": 512,
                    "maximum": 65536,
                },
            },
        },
        "guestUser": _string(
            GUEST_USER_PATTERN, "The image's default user (not root); the build logs in as this user."
        ),
        "packages": _PACKAGES_SCHEMA,
        "distroFamily": DISTRO_FAMILY,
        "profiles": _BUILD_PROFILES,
        "buildAddress": {
            "type": "object",
            "additionalProperties": False,
            "required": ["address", "gateway"],
            "properties": {
                "address": _string(
                    IPV4_PREFIX_PATTERN,
                    "The IPv4 address with prefix length of the preparation boot, e.g. 192.0.2.50/24.",
                ),
                "gateway": _string(
                    IPV4_PATTERN, "The IPv4 gateway of the preparation boot, inside the address's network."
                ),
            },
        },
    },
}


def _check_source(source: t.Mapping[str, t.Any]) -> None:
    if len(source["checksum"]) != CHECKSUM_LENGTHS[source["checksumAlgorithm"]]:
        raise _refuse("source.checksum", "checksum_length")
    parsed = urllib.parse.urlsplit(source["url"])
    if "@" in parsed.netloc:
        raise _refuse("source.url", "url_credentials")
    if not parsed.hostname:
        raise _refuse("source.url", "url_host")


def _check_build_address(build: t.Mapping[str, t.Any]) -> None:
    try:
        interface = ipaddress.IPv4Interface(build["address"])
    except ValueError:
        raise _refuse("buildAddress.address", "build_address_invalid") from None
    network = interface.network
    if not 8 <= network.prefixlen <= 30 or interface.ip in (network.network_address, network.broadcast_address):
        raise _refuse("buildAddress.address", "build_address_invalid")
    try:
        gateway = ipaddress.IPv4Address(build["gateway"])
    except ValueError:
        raise _refuse("buildAddress.gateway", "gateway_outside_network") from None
    if gateway not in network or gateway in (network.network_address, network.broadcast_address):
        raise _refuse("buildAddress.gateway", "gateway_outside_network")
    if gateway == interface.ip:
        raise _refuse("buildAddress.gateway", "gateway_equals_address")


def _packages(declared: t.Sequence[t.Mapping[str, t.Any]]) -> list[dict[str, str]]:
    """The declared packages in order, ``qemu-guest-agent`` first when not declared."""
    packages: list[dict[str, str]] = []
    names: set[str] = set()
    for index, package in enumerate(declared):
        if package["name"] in names:
            raise _refuse("packages[%d].name" % index, "duplicate_package")
        names.add(package["name"])
        entry = {"name": str(package["name"])}
        if "version" in package:
            entry["version"] = str(package["version"])
        packages.append(entry)
    if GUEST_AGENT_PACKAGE not in names:
        packages.insert(0, {"name": GUEST_AGENT_PACKAGE})
    return packages


def validate_template_build(data: t.Any) -> dict[str, t.Any]:
    """Validate a parsed TemplateBuild; return it normalized with defaults applied.

    Defaults: ``source.format`` qcow2; every ``machine`` field (``MACHINE_DEFAULTS``); ``packages``
    always lists ``qemu-guest-agent`` (first, when not declared).
    """
    check_document_schema(TEMPLATE_BUILD_SCHEMA_V1, data, TEMPLATE_BUILD)
    if data["guestUser"] == "root":
        raise _refuse("guestUser", "default_user_root")
    _check_source(data["source"])
    _check_build_address(data["buildAddress"])
    source = data["source"]
    machine = dict(MACHINE_DEFAULTS)
    machine.update(data.get("machine", {}))
    vmid = data["templateVmid"]
    normalized: dict[str, t.Any] = {
        "apiVersion": API_VERSION,
        "kind": "TemplateBuild",
        "image": str(data["image"]),
        "source": {
            "url": str(source["url"]),
            "checksum": str(source["checksum"]),
            "checksumAlgorithm": str(source["checksumAlgorithm"]),
            "format": str(source.get("format", "qcow2")),
        },
        "node": str(data["node"]),
        "storage": str(data["storage"]),
        "importStorage": str(data["importStorage"]),
        "bridge": str(data["bridge"]),
        "templateVmid": vmid if vmid == "auto" else int(vmid),
        "templateVersion": str(data["templateVersion"]),
        **({"diskGiB": int(data["diskGiB"])} if "diskGiB" in data else {}),
        "machine": {
            "type": str(machine["type"]),
            "bios": str(machine["bios"]),
            "scsihw": str(machine["scsihw"]),
            "serialConsole": bool(machine["serialConsole"]),
            "cores": int(machine["cores"]),
            "memoryMiB": int(machine["memoryMiB"]),
        },
        "guestUser": str(data["guestUser"]),
        "packages": _packages(data.get("packages", [])),
        "buildAddress": {
            "address": str(data["buildAddress"]["address"]),
            "gateway": str(data["buildAddress"]["gateway"]),
        },
    }
    if "distroFamily" in data:  # optional (docs/profiles.md): absent, the build and its hashes are as before
        normalized["distroFamily"] = str(data["distroFamily"])
    if data.get("profiles"):  # the request; build_template_plan replaces it by the resolved profiles. Empty = absent
        normalized["profiles"] = copy.deepcopy(list(data["profiles"]))
    return normalized


def resolve_build_profiles(
    build: t.Mapping[str, t.Any], declarations: t.Callable[[], t.Mapping[str, Profile]]
) -> tuple[dict[str, t.Any], list[dict[str, t.Any]]]:
    """The build with its ``profiles`` request resolved (what ``templateBuildHash`` covers) and the plan's ``profiles``.

    The rules are the definition's (``resolve_profiles``: ``profile_not_found``, ``invalid_profile_vars``, ...; a
    required variable needs a value in the build), and every profile must support the build's ``distroFamily``, which
    a build that bakes profiles must declare (``distro_family_not_recorded``, path ``distroFamily``). Each resolved
    entry is ``{name, version, declarationHash, vars}`` (vars typed, request over defaults), plus ``requiredBy`` for one
    added because others require it, in run order. ``declarations`` is called only when profiles are requested."""
    if not build.get("profiles"):
        return dict(build), []
    _pins, planned = resolve_profiles(build["profiles"], declarations)
    if "distroFamily" not in build:
        raise InputError(
            "The TemplateBuild bakes profiles but declares no distroFamily; declare the image's OS family.",
            code=NOT_RECORDED,
            path="distroFamily",
            details={"rule": "distro_family_not_recorded"},
        )
    check_distro_families(build, planned)
    entries = [
        {key: value for key, value in entry.items() if key not in ("baked", "run")}
        for entry in plan_profiles({}, planned)
    ]
    resolved = [
        {key: entry[key] for key in ("name", "version", "declarationHash", "vars", "requiredBy") if key in entry}
        for entry in entries
    ]
    return dict(build, profiles=resolved), entries


def parse_template_build(
    *, text: str | bytes | None = None, path: str | os.PathLike[str] | None = None
) -> dict[str, t.Any]:
    """Read, parse and validate a v1 TemplateBuild from inline ``text`` or a file ``path``."""
    return validate_template_build(
        load_strict_yaml(read_source(text=text, path=path, code=TEMPLATE_BUILD), code=TEMPLATE_BUILD)
    )


def template_build_hash(build: t.Mapping[str, t.Any]) -> str:
    """SHA-256 hex of the JCS form of a *validated* TemplateBuild (defaults applied): the definitionHash rule
    (``_hashing.definition_hash``), which the journal uses to check a template build operation's recorded hashes."""
    return definition_hash(build)


def import_file_name(build: t.Mapping[str, t.Any]) -> str:
    """The file name in the import storage: the image and the first 16 checksum digits, so one checksum is one file.

    Every character is one Proxmox keeps when it normalizes a download's file name.
    """
    source = build["source"]
    return "vmanyware-%s-%s.%s" % (build["image"], source["checksum"][:16], source["format"])


def import_volume(build: t.Mapping[str, t.Any]) -> str:
    return "%s:import/%s" % (build["importStorage"], import_file_name(build))


def template_vm_name(vmid: int) -> str:
    """The VM name during the build (a valid DNS name whatever the image identifier is)."""
    return "vmanyware-template-%d" % vmid


STAMP_MARKER = "vmanyware template"
_OPERATION_ID = re.compile(r"^op-[a-z2-7]{26}$")


def stamp_revision(description: t.Any) -> tuple[str, str] | None:
    """(templateVersion, build operation id) of a template's stamp, only when both have their exact form (else None)."""
    stamp = read_stamp(description)
    if stamp is None:
        return None
    version, operation = stamp.get("templateVersion", ""), stamp.get("buildOperation", "")
    if re.match(TEMPLATE_VERSION_PATTERN, version) and _OPERATION_ID.match(operation):
        return version, operation
    return None


def read_stamp(description: t.Any) -> dict[str, str] | None:
    """The stamp fields of a template description (``templateVersion``, ``buildOperation``, ``url``, ...), or None."""
    if not isinstance(description, str) or "\nvmanyware template\n" not in description:
        return None
    stamp: dict[str, str] = {}
    for line in description.split("vmanyware template\n", 1)[1].split("\n"):
        key, _sep, value = line.partition(" ")
        if key and value:
            stamp[key] = value
    return stamp


_BAKED_ENTRY = re.compile(r"^([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)@([1-9][0-9]{0,8}):([0-9a-f]{64})$")


def baked_profiles_text(baked: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    """The stamp's ``bakedProfiles`` value: ``name@version:declarationHash`` per baked profile, comma-separated."""
    return ",".join("%s@%d:%s" % (entry["name"], entry["version"], entry["declarationHash"]) for entry in baked)


def stamp_baked_profiles(description: t.Any) -> list[dict[str, t.Any]] | None:
    """The ``bakedProfiles`` a template's stamp records (the catalog mapping's shape), ``[]`` when it records none,
    ``None`` when the description is no stamp or the line is not in its exact form."""
    stamp = read_stamp(description)
    if stamp is None:
        return None
    if "bakedProfiles" not in stamp:
        return []
    baked: list[dict[str, t.Any]] = []
    for item in stamp["bakedProfiles"].split(","):
        match = _BAKED_ENTRY.match(item)
        if match is None:
            return None
        baked.append({"name": match.group(1), "version": int(match.group(2)), "declarationHash": match.group(3)})
    return baked


@dataclasses.dataclass(frozen=True)
class PlannedTemplateBuild:
    """A validated TemplateBuild, its plan document and both hashes."""

    build: dict[str, t.Any]
    plan: dict[str, t.Any]
    template_build_hash: str
    plan_hash: str

    @property
    def vmid(self) -> int:
        return int(self.plan["target"]["vmid"])


def template_plan_document(
    build: t.Mapping[str, t.Any],
    vmid: int,
    build_hash: str,
    plan_hash: str,
    profiles: t.Sequence[t.Mapping[str, t.Any]] = (),
) -> dict[str, t.Any]:
    """The TemplateBuildPlan v1 document (docs/templates.md, "Plan"); ``profiles``: the plan's entries of the profiles
    to bake (``resolve_build_profiles``), each with a ``profile:<name>`` step right after ``prepare``."""
    names = [entry["name"] for entry in profiles]
    steps = planned_steps(TEMPLATE, {"build": build, "profiles": names})
    document = {
        "apiVersion": API_VERSION,
        "kind": "TemplateBuildPlan",
        "image": build["image"],
        "templateBuildHash": build_hash,
        "planHash": plan_hash,
        "provider": PROVIDER,
        "source": dict(build["source"], importVolume=import_volume(build)),
        "target": {"node": build["node"], "vmid": vmid, "name": template_vm_name(vmid)},
        "storage": build["storage"],
        "importStorage": build["importStorage"],
        "bridge": build["bridge"],
        "diskDevice": DISK_DEVICE,
        "machine": dict(build["machine"]),
        "guestUser": build["guestUser"],
        "packages": [dict(package) for package in build["packages"]],
        "buildAddress": dict(build["buildAddress"]),
        "templateVersion": build["templateVersion"],
        **({"resources": {"diskGiB": build["diskGiB"]}} if "diskGiB" in build else {}),
        # The registry's template stages; disk (grow the imported disk) only when diskGiB is declared.
        "steps": steps,
        "liveVerified": False,
        "vmidReserved": False,
    }
    if profiles:  # a build baking no profiles keeps exactly its v1 plan
        document["profiles"] = [copy.deepcopy(dict(entry)) for entry in profiles]
    return document


def build_template_plan(
    *,
    text: str | bytes | None = None,
    path: str | os.PathLike[str] | None = None,
    profiles_path: str | os.PathLike[str] | None = None,
    profiles: t.Any = None,
) -> PlannedTemplateBuild:
    """Validate a TemplateBuild and plan it offline; ``invalid_template_build`` for every refusal of the document.

    ``templateVmid: auto`` is valid in the document but cannot be planned before VMID allocation
    exists (rule ``auto_needs_allocation``). Profile declarations (read only when the build requests profiles):
    inline ``profiles``, else ``profiles_path``, else the ``profiles`` directory beside the TemplateBuild file
    ``path`` when it exists.
    """
    if (text is None) == (path is None):
        raise InputError(
            "Exactly one of template_build and template_build_path must be given.",
            code="invalid_plan",
            path="template_build",
            details={"rule": "one_source"},
        )
    build = parse_template_build(text=text, path=path)
    if build["templateVmid"] == "auto":
        raise _refuse("templateVmid", "auto_needs_allocation")
    vmid = int(build["templateVmid"])
    build, entries = resolve_build_profiles(build, profiles_reader(profiles_path, profiles, path))
    build_hash = template_build_hash(build)
    plan_hash = template_plan_hash(build_hash, vmid)
    return PlannedTemplateBuild(
        build=build,
        plan=template_plan_document(build, vmid, build_hash, plan_hash, entries),
        template_build_hash=build_hash,
        plan_hash=plan_hash,
    )


def template_build_argument_spec() -> dict[str, dict[str, t.Any]]:
    """The TemplateBuild input options (documented by the ``vmanyware.proxmox.template_build_inputs`` doc fragment);
    the profile declarations are read as the plan reads them (``profiles_path``, ``profiles``)."""
    return {
        "template_build_path": {"type": "path"},
        "template_build": {"type": "str"},
        "profiles_path": {"type": "path"},
        "profiles": {"type": "list", "elements": "raw"},
    }


TEMPLATE_BUILD_CONSTRAINTS: dict[str, t.Any] = {
    "mutually_exclusive": (("template_build_path", "template_build"), ("profiles_path", "profiles")),
    "required_one_of": (("template_build_path", "template_build"),),
}


def template_plan_from_params(params: t.Mapping[str, t.Any]) -> PlannedTemplateBuild:
    return build_template_plan(
        text=params["template_build"],
        path=params["template_build_path"],
        profiles_path=params.get("profiles_path"),
        profiles=params.get("profiles"),
    )
