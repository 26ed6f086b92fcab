# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The v1 plan document, its steps, and the plan input options shared by every module.

``build_plan`` is the one entry point: it reads and validates the catalog and the definition,
selects the image mapping, checks the target VMID and the disk size, and returns a
``PlannedEnvironment`` with the plan document and both hashes. It never contacts Proxmox:
``liveVerified`` and ``vmidReserved`` are always false in a plan built here.

This is a private module_utils file: not a public API (but the API other module_utils use).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import typing as t

from .._core.errors import InputError
from .definition import validate_definition
from .format_errors import FormatError
from .key_sources import apply_key_sources, check_key_sources
from .presets import Preset, beside_catalog_reader, load_presets, merge_preset
from .profiles import (
    PlannedProfile,
    Profile,
    check_distro_families,
    choose_template,
    plan_profiles,
    profiles_reader,
    requested_identities,
    resolve_profiles,
)
from .yaml_strict import load_document
from .catalog import is_container, parse_catalog
from .networks import FAMILIES, planned_nic
from .hashing import definition_hash as compute_definition_hash
from .hashing import plan_hash as compute_plan_hash
from .schemas import API_VERSION, NODE_PATTERN, VMID_MAX, VMID_MIN
from .._stages.registry import CONTAINER, VM, planned_steps

PROVIDER = "proxmox-ve"
NETWORK = "ipv4-dhcp"
# A definition's targetNode (and the roles' target_node) asking placement to choose the node.
AUTO_NODE = "auto"
# How the new guest's clone reaches its node (the plan's ``clone.method``, docs/operations.md "Placement").
PER_NODE_TEMPLATE = "per-node-template"
CLONE_TARGET = "target"
_NODE = re.compile(NODE_PATTERN)


def plan_input_argument_spec() -> dict[str, dict[str, t.Any]]:
    """The plan input options (documented by the ``vmanyware.proxmox.plan_inputs`` doc fragment)."""
    return {
        "catalog_path": {"type": "path"},
        "catalog": {"type": "raw"},
        "definition_path": {"type": "path"},
        "definition": {"type": "raw"},
        "target_vmid": {"type": "int", "required": True},
        "addresses": {"type": "dict"},
        # The concrete node the guest goes to (placement, docs/operations.md); absent: the mapping's node, and the plan
        # and every hash are exactly what they were before the option existed.
        "target_node": {"type": "str"},
        # Presets (docs/profiles.md): read only when the definition names one; absent, presets_path defaults to the
        # catalog file's presets directory when it exists.
        "presets_path": {"type": "path"},
        "presets": {"type": "list", "elements": "raw"},
        # Profile declarations (docs/profiles.md): read only when the definition requests profiles; absent,
        # profiles_path defaults to the catalog file's profiles directory when it exists.
        "profiles_path": {"type": "path"},
        "profiles": {"type": "list", "elements": "raw"},
        # The operator's SSH key sources, [{name, path}]; absent or empty, the plan and every hash are as before.
        "ssh_key_sources": {"type": "list", "elements": "dict", "no_log": False},  # public keys, not secrets
    }


PLAN_INPUT_MUTUALLY_EXCLUSIVE = (
    ("catalog_path", "catalog"),
    ("definition_path", "definition"),
    ("presets_path", "presets"),
    ("profiles_path", "profiles"),
)
PLAN_INPUT_REQUIRED_ONE_OF = (("catalog_path", "catalog"), ("definition_path", "definition"))
# ``ModuleEntry`` keyword arguments of every module that takes the plan inputs.
PLAN_INPUT_CONSTRAINTS: dict[str, t.Any] = {
    "mutually_exclusive": PLAN_INPUT_MUTUALLY_EXCLUSIVE,
    "required_one_of": PLAN_INPUT_REQUIRED_ONE_OF,
}


@dataclasses.dataclass(frozen=True)
class PlannedEnvironment:
    """A validated definition, its selected mapping, the v1 plan document and both hashes."""

    definition: dict[str, t.Any]
    mapping: dict[str, t.Any]
    plan: dict[str, t.Any]
    definition_hash: str
    plan_hash: str


@dataclasses.dataclass(frozen=True)
class EffectiveDefinition:
    """The validated definition merged with its preset and given its key sources' keys; ``preset_fields``: the fields
    the preset gave (``None`` without a preset); ``keys``: the key listing (``None`` without key sources);
    ``profiles``: the profiles' run list (``None`` when the definition requests none)."""

    definition: dict[str, t.Any]
    preset_fields: list[str] | None
    keys: list[dict[str, t.Any]] | None
    profiles: list[PlannedProfile] | None = None


def presets_reader(
    presets_path: str | os.PathLike[str] | None,
    presets: t.Any,
    catalog_path: str | os.PathLike[str] | None,
) -> t.Callable[[], dict[str, Preset]]:
    """Reads the presets when called: inline ``presets``, else ``presets_path``, else the ``presets`` directory beside
    the catalog file when it exists, else none."""
    return beside_catalog_reader(load_presets, presets, presets_path, catalog_path, "presets")


def effective_definition(
    *,
    definition: str | t.Mapping[str, t.Any] | None = None,
    definition_path: str | os.PathLike[str] | None = None,
    presets: t.Callable[[], t.Mapping[str, Preset]] = dict,
    ssh_key_sources: t.Any = None,
    profiles: t.Callable[[], t.Mapping[str, Profile]] = dict,
) -> EffectiveDefinition:
    """Read the definition, merge it over the preset it names (``presets_reader``), validate the merged definition (a
    refusal names the merged field and, in ``error_details.preset``, the preset), pin the profiles it requests to their
    declarations (``profiles_reader``, called only then) and add the key sources' keys (docs/profiles.md). Without a
    preset, profiles and key sources the definition is exactly ``parse_definition``'s."""
    sources = check_key_sources(ssh_key_sources)
    request = load_document(text=definition, path=definition_path, code="invalid_definition")
    merged, fields = merge_preset(request, presets)
    try:
        validated = validate_definition(merged)
    except FormatError as err:
        if fields is not None:  # located in the merged definition; the preset is named, no value is
            err.details["preset"] = merged["preset"]["name"]
        raise
    planned = None
    if validated.get("profiles"):
        validated["profiles"], planned = resolve_profiles(validated["profiles"], profiles)
    if not sources:
        return EffectiveDefinition(validated, fields, None, planned)
    with_keys, keys = apply_key_sources(validated, sources)
    return EffectiveDefinition(with_keys, fields, keys, planned)


def definition_from_params(params: t.Mapping[str, t.Any]) -> EffectiveDefinition:
    """``effective_definition`` from a module's plan input options (the new ones may be absent from its spec)."""
    return effective_definition(
        definition=params["definition"],
        definition_path=params["definition_path"],
        presets=presets_reader(params.get("presets_path"), params.get("presets"), params.get("catalog_path")),
        ssh_key_sources=params.get("ssh_key_sources") or None,
        profiles=profiles_reader(params.get("profiles_path"), params.get("profiles"), params.get("catalog_path")),
    )


def plan_steps(
    definition: t.Mapping[str, t.Any], mapping: t.Mapping[str, t.Any], profiles: t.Sequence[str] = ()
) -> list[dict[str, t.Any]]:
    """The ordered provisioning steps (1-based ``position``) for a definition and its mapping (the stage registry's
    conditions), where the registry's ``profile`` row stands one step per profile that runs (``name``:
    ``profile:<name>``), in run order (docs/profiles.md), for a VM and a container alike."""
    family = CONTAINER if is_container(mapping) else VM
    inputs = {"definition": definition, "mapping": mapping, "profiles": list(profiles)}
    return planned_steps(family, inputs)


def check_target_vmid(target_vmid: t.Any, template_vmid: int | None = None) -> int:
    """Refuse (``invalid_target_vmid``) a VMID outside 100-999999999 or equal to the template's."""
    if isinstance(target_vmid, bool) or not isinstance(target_vmid, int) or not VMID_MIN <= target_vmid <= VMID_MAX:
        raise InputError(code="invalid_target_vmid", path="target_vmid", details={"rule": "range"})
    if template_vmid is not None and target_vmid == template_vmid:
        raise InputError(
            "The target VMID equals the template VMID of the selected mapping.",
            code="invalid_target_vmid",
            path="target_vmid",
            details={"rule": "equals_template_vmid"},
        )
    return int(target_vmid)


def check_target_node(target_node: t.Any) -> str | None:
    """A concrete node name or ``None`` (``invalid_target_node``: ``auto`` is resolved by placement before planning)."""
    if target_node is None:
        return None
    if not isinstance(target_node, str) or not _NODE.match(target_node):
        raise InputError(code="invalid_target_node", path="target_node", details={"rule": "format"})
    if target_node == AUTO_NODE:
        raise InputError(
            "target_node auto is resolved by vmanyware_placement before planning; plan with the node it chose.",
            code="invalid_target_node",
            path="target_node",
            details={"rule": "placement_first"},
        )
    return target_node


def requested_node(definition: t.Mapping[str, t.Any], target_node: str | None) -> str | None:
    """The concrete node a plan targets from the definition's ``targetNode`` and the ``target_node`` input: they must
    agree (``target_node_conflict``); a definition asking for ``auto`` needs the node placement chose
    (``placement_required``); neither: ``None`` (the mapping's node)."""
    wanted = definition.get("targetNode")
    if wanted == AUTO_NODE and target_node is None:
        raise InputError(
            "The definition asks for targetNode auto: run placement (vmanyware_placement) and plan with its node.",
            code="placement_required",
            path="targetNode",
            details={"rule": "placement_first"},
        )
    if wanted not in (None, AUTO_NODE) and target_node is not None and wanted != target_node:
        raise InputError(code="target_node_conflict", path="target_node", details={"rule": "equals_definition"})
    return target_node if target_node is not None else t.cast("str | None", wanted if wanted != AUTO_NODE else None)


def select_template(
    catalog: t.Mapping[str, t.Any],
    image: str,
    target_node: str | None = None,
    requested: frozenset[tuple[str, int, str]] = frozenset(),
) -> tuple[dict[str, t.Any], dict[str, t.Any]]:
    """The catalog mapping for ``image`` (``image_not_mapped`` when there is none) and the plan's ``templateChoice``.

    Without ``target_node``: the image's mapping on its first mapping's node, exactly as recorded. With it: the image's
    mapping on that node (a per-node template), else the one on the first mapping's node plus ``targetNode`` (a clone
    with Proxmox's ``target`` parameter, which needs the template on shared storage: preflight ``clone_source_shared``).
    ``targetNode`` is in the hashed mapping only when the guest does not go to the template's node. Several mappings of
    the image on that node (they differ in ``bakedProfiles``): the one with the most ``requested`` profiles baked in
    (``profiles.choose_template``).
    """
    mappings = [mapping for mapping in catalog["images"] if mapping["image"] == image]
    if not mappings:
        raise InputError(code="image_not_mapped", path="image", details={"rule": "not_in_catalog"})
    on_target = [mapping for mapping in mappings if mapping["node"] == target_node]
    if target_node is None or on_target:
        node = mappings[0]["node"] if target_node is None else target_node
        return choose_template([mapping for mapping in mappings if mapping["node"] == node], requested)
    chosen, choice = choose_template(
        [mapping for mapping in mappings if mapping["node"] == mappings[0]["node"]], requested
    )
    if is_container(chosen):
        raise InputError(
            "A container is created on its mapping's node; map the image on the target node.",
            code="invalid_target_node",
            path="target_node",
            details={"rule": "container_mapping_on_node"},
        )
    chosen["targetNode"] = target_node
    return chosen, choice


def select_mapping(
    catalog: t.Mapping[str, t.Any],
    image: str,
    target_node: str | None = None,
    requested: frozenset[tuple[str, int, str]] = frozenset(),
) -> dict[str, t.Any]:
    """The catalog mapping for ``image`` (``select_template``)."""
    return select_template(catalog, image, target_node, requested)[0]


def check_addresses(addresses: t.Any) -> dict[str, str]:
    """The plan input ``addresses``: the addresses leased for ``address: auto``, ``{ipv4: A, ipv6: A}`` (either)."""
    if addresses is None:
        return {}
    if not isinstance(addresses, t.Mapping) or set(addresses) - set(FAMILIES):
        raise InputError("addresses may name ipv4 and ipv6 only.", path="addresses", details={"rule": "keys"})
    if not all(isinstance(value, str) for value in addresses.values()):
        raise InputError("addresses must be strings.", path="addresses", details={"rule": "type"})
    return {str(key): str(value) for key, value in addresses.items()}


def target_node_of(mapping: t.Mapping[str, t.Any]) -> str:
    """The node the new guest goes to: the mapping's ``targetNode`` when placed elsewhere, else the template's node."""
    return t.cast(str, mapping.get("targetNode", mapping["node"]))


def resolve_mapping(
    catalog: t.Mapping[str, t.Any],
    definition: t.Mapping[str, t.Any],
    target_node: str | None = None,
    leased: t.Mapping[str, str] | None = None,
) -> dict[str, t.Any]:
    """The mapping a plan records: the catalog's for the definition's image (on ``target_node``, ``select_mapping``),
    with the NIC of the definition's network (``network``, docs/networks.md) when it names one; without, exactly the
    catalog's mapping. ``leased``: the addresses leased for ``address: auto``. Among several mappings of the image on the
    node, the one with the most of the definition's (pinned) profiles baked in (docs/profiles.md, "Template choice")."""
    mapping = select_mapping(catalog, definition["image"], target_node, requested_identities(definition))
    nic = planned_nic(catalog, definition, leased)
    if nic is not None:
        mapping["network"] = nic
    return mapping


def recorded_leases(mapping: t.Mapping[str, t.Any]) -> dict[str, str]:
    """The addresses a recorded mapping's NIC got from a pool (``address: auto``): resolving the definition again with
    them must give the recorded mapping (the write gates' catalog re-check, a repeat's comparison)."""
    nic: t.Mapping[str, t.Any] = mapping["network"] if isinstance(mapping.get("network"), dict) else {}
    return {
        family: str(nic[family]["address"]).split("/", 1)[0]
        for family in FAMILIES
        if isinstance(nic.get(family), dict) and nic[family].get("leased")
    }


def network_summary(mapping: t.Mapping[str, t.Any]) -> str:
    """The plan's ``network``: ``ipv4-dhcp`` (every plan without a named network), else each configured family's mode
    joined by ``+`` (``ipv4-static+ipv6-slaac``, ``ipv6-static``)."""
    if "network" not in mapping:
        return NETWORK
    nic = planned_network(mapping)
    return "+".join("%s-%s" % (f, nic[f]["mode"]) for f in FAMILIES if nic.get(f, {}).get("mode", "none") != "none")


def planned_network(mapping: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The NIC of a recorded plan mapping; a mapping without one (every plan before networks) is the mapping's bridge
    with IPv4 DHCP."""
    nic = mapping.get("network")
    if isinstance(nic, dict):
        return dict(nic)
    return {"bridge": mapping["bridge"], "ipv4": {"mode": "dhcp"}}


def check_repeat_mapping(
    catalog: t.Mapping[str, t.Any],
    definition: t.Mapping[str, t.Any],
    recorded: t.Mapping[str, t.Any],
    target_node: str | None = None,
) -> None:
    """A repeat plans a recorded operation's definition again (the provision role's ``provision_repeat_operation``): the
    current catalog must still map its image, exactly as the ``recorded`` mapping, its network included
    (``repeat_image_removed``, ``repeat_mapping_changed`` naming the fields that differ, never their values)."""
    image = definition["image"]
    if not any(mapping["image"] == image for mapping in catalog["images"]):
        raise InputError(code="repeat_image_removed", path="image", details={"rule": "in_current_catalog"})
    try:
        current = resolve_mapping(catalog, definition, target_node, recorded_leases(recorded))
    except InputError as err:
        if err.details.get("rule") != "outside_pool":
            raise
        current = {**recorded, "network": None}  # the recorded lease is no longer in the network's pool
    changed = sorted(key for key in set(current) | set(recorded) if current.get(key) != recorded.get(key))
    if changed:
        raise InputError(
            code="repeat_mapping_changed", path="catalog", details={"rule": "mapping_as_recorded", "fields": changed}
        )


def plan_document(
    definition: t.Mapping[str, t.Any],
    mapping: t.Mapping[str, t.Any],
    target_vmid: int,
    definition_hash: str,
    plan_hash: str,
    placed: bool = False,
    effective: EffectiveDefinition | None = None,
    choice: t.Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    """The v1 plan document (docs/formats.md, "Plan v1"); ``placed``: a target node was given, and ``clone`` says how
    the guest reaches it; ``effective``: the preset's fields, the key listing and the profiles (docs/profiles.md);
    ``choice``: the ``templateChoice`` (recorded with profiles, or among several templates)."""
    resources = definition["resources"]
    profiles = plan_profiles(mapping, effective.profiles) if effective is not None and effective.profiles else None
    document = {
        "apiVersion": API_VERSION,
        "kind": "Plan",
        "definitionName": definition["name"],
        "definitionHash": definition_hash,
        "planHash": plan_hash,
        "provider": PROVIDER,
        "source": copy.deepcopy(dict(mapping)),
        "target": {"node": target_node_of(mapping), "vmid": target_vmid, "name": definition["name"]},
        "resources": {
            "cores": resources["cores"],
            "memoryMiB": resources["memoryMiB"],
            "diskGiB": resources["diskGiB"],
        },
        "storage": mapping["storage"],
        "bridge": planned_network(mapping)["bridge"],
        "guestUser": mapping["guestUser"],
        "network": network_summary(mapping),
        "access": {"sshPublicKeyCount": len(definition["access"]["sshPublicKeys"])},
        "packages": [dict(package) for package in definition["packages"]],
        "snapshotAfterProvisioning": definition["snapshotAfterProvisioning"],
        "diskExpansion": not is_container(mapping) and resources["diskGiB"] > mapping["sourceDiskGiB"],
        "steps": plan_steps(definition, mapping, [entry["name"] for entry in profiles or [] if entry["run"]]),
        "liveVerified": False,
        "vmidReserved": False,
    }
    if is_container(mapping):  # VM plans keep exactly their v1 fields
        document["guestType"] = "container"
    if "network" in mapping:  # a named network; plans without one keep exactly their v1 fields
        document["nic"] = planned_network(mapping)
    if placed or "targetNode" in mapping:  # a plan without a target node keeps exactly its v1 fields
        method = CLONE_TARGET if "targetNode" in mapping else PER_NODE_TEMPLATE
        document["clone"] = {"method": method, "sourceNode": mapping["node"]}
    if "preset" in definition:  # a definition without a preset keeps exactly its v1 plan
        document["preset"] = dict(definition["preset"], fields=list(effective.preset_fields or []) if effective else [])
    if effective is not None and effective.keys is not None:  # without key sources the plan is exactly as before
        document["access"]["sshPublicKeys"] = copy.deepcopy(effective.keys)
    if profiles is not None:  # a definition requesting no profiles keeps exactly its v1 plan
        document["profiles"] = profiles
    if choice is not None and (profiles is not None or choice["candidates"] > 1):
        document["templateChoice"] = dict(choice)
    return document


def build_plan(
    *,
    catalog: str | t.Mapping[str, t.Any] | None = None,
    catalog_path: str | os.PathLike[str] | None = None,
    definition: str | t.Mapping[str, t.Any] | None = None,
    definition_path: str | os.PathLike[str] | None = None,
    target_vmid: int,
    target_node: str | None = None,
    repeat_mapping: t.Mapping[str, t.Any] | None = None,
    addresses: t.Mapping[str, str] | None = None,
    presets_path: str | os.PathLike[str] | None = None,
    presets: t.Any = None,
    ssh_key_sources: t.Any = None,
    profiles_path: str | os.PathLike[str] | None = None,
    profiles: t.Any = None,
) -> PlannedEnvironment:
    """Validate the inputs and build the plan; raise an ``InputError`` with a fixed code otherwise.

    Exactly one of ``catalog``/``catalog_path`` and one of ``definition``/``definition_path``
    must be given (``invalid_plan`` otherwise). Codes: ``invalid_catalog``,
    ``invalid_definition``, ``invalid_target_vmid``, ``image_not_mapped``,
    ``disk_shrink_unsupported``, ``network_not_in_catalog``, ``invalid_network_address``, ``invalid_plan``,
    ``invalid_target_node``, ``target_node_conflict``, ``placement_required``; with
    ``repeat_mapping`` (the mapping a repeated operation recorded)
    ``repeat_image_removed`` and ``repeat_mapping_changed`` (``check_repeat_mapping``); with a preset or key sources
    (``effective_definition``) ``invalid_preset``, ``preset_not_found``, ``preset_version_mismatch`` and
    ``invalid_ssh_key_source``; with profiles (docs/profiles.md) ``invalid_profile``, ``profile_not_found``,
    ``profile_version_mismatch``, ``invalid_profile_vars``, ``profile_requires_cycle``, ``profile_distro_unsupported``
    and ``distro_family_not_recorded``.
    """
    if (catalog is None) == (catalog_path is None):
        raise InputError(
            "Exactly one of catalog and catalog_path must be given.",
            code="invalid_plan",
            path="catalog",
            details={"rule": "one_source"},
        )
    if (definition is None) == (definition_path is None):
        raise InputError(
            "Exactly one of definition and definition_path must be given.",
            code="invalid_plan",
            path="definition",
            details={"rule": "one_source"},
        )
    check_target_vmid(target_vmid)
    given_node = check_target_node(target_node)
    parsed_catalog = parse_catalog(text=catalog, path=catalog_path)
    effective = effective_definition(
        definition=definition,
        definition_path=definition_path,
        presets=presets_reader(presets_path, presets, catalog_path),
        ssh_key_sources=ssh_key_sources or None,
        profiles=profiles_reader(profiles_path, profiles, catalog_path),
    )
    parsed_definition = effective.definition
    node = requested_node(parsed_definition, given_node)
    if repeat_mapping is not None:
        check_repeat_mapping(parsed_catalog, parsed_definition, repeat_mapping, node)
    mapping = resolve_mapping(parsed_catalog, parsed_definition, node, check_addresses(addresses))
    choice = select_template(parsed_catalog, parsed_definition["image"], node, requested_identities(parsed_definition))[
        1
    ]
    if effective.profiles:  # VMs and containers alike (docs/profiles.md, "Profiles on containers")
        check_distro_families(mapping, effective.profiles)
    vmid = check_target_vmid(target_vmid, mapping.get("templateVmid"))
    if not is_container(mapping) and parsed_definition["resources"]["diskGiB"] < mapping["sourceDiskGiB"]:
        raise InputError(
            code="disk_shrink_unsupported", path="resources.diskGiB", details={"rule": "at_least_source_disk"}
        )
    if parsed_definition["image"] != mapping["image"]:  # pragma: no cover - select_mapping guarantees it
        raise InputError(code="invalid_plan", path="image", details={"rule": "mapping_mismatch"})
    def_hash = compute_definition_hash(parsed_definition)
    hash_of_plan = compute_plan_hash(def_hash, mapping, vmid)
    return PlannedEnvironment(
        definition=parsed_definition,
        mapping=mapping,
        plan=plan_document(
            parsed_definition,
            mapping,
            vmid,
            def_hash,
            hash_of_plan,
            placed=node is not None,
            effective=effective,
            choice=choice,
        ),
        definition_hash=def_hash,
        plan_hash=hash_of_plan,
    )


def plan_from_params(params: t.Mapping[str, t.Any]) -> PlannedEnvironment:
    """``build_plan`` from a module's plan input options (and ``repeat_mapping``, ``vmanyware_plan``'s, when given)."""
    return build_plan(
        catalog=params["catalog"],
        catalog_path=params["catalog_path"],
        definition=params["definition"],
        definition_path=params["definition_path"],
        target_vmid=params["target_vmid"],
        target_node=params.get("target_node") or None,
        repeat_mapping=params.get("repeat_mapping"),
        addresses=params.get("addresses"),
        presets_path=params.get("presets_path"),
        presets=params.get("presets"),
        ssh_key_sources=params.get("ssh_key_sources"),
        profiles_path=params.get("profiles_path"),
        profiles=params.get("profiles"),
    )
