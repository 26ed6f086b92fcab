# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template-build stage ``stamp``: the template's description and tag record the build; the catalog mapping is derived
from it.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.pveconfig import int_value, tag_list
from ..._formats.catalog import normalize_mapping
from ..._formats.format_errors import FormatError
from ..._formats.template_build import baked_profiles_text
from ..._journal import stage as journal_stage
from ..._operation.create import instance_tag
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import common
from .common import GIB, observation_mismatch

TEMPLATE_TAG = "vmanyware-template"


# -- stamp -------------------------------------------------------------------------------------------
def stamp_description(operation: t.Mapping[str, t.Any], prepared_by: str) -> str:
    """The template's description: the binding lines, then what it was built from (no trailing whitespace)."""
    plan = operation["plan"]
    source = plan["source"]
    lines = [
        common.binding_description(operation),
        "vmanyware template",
        "image %s" % plan["image"],
        "url %s" % source["url"],
        "checksum %s:%s" % (source["checksumAlgorithm"], source["checksum"]),
        "templateVersion %s" % plan["templateVersion"],
        "buildOperation %s" % operation["operationId"],
        "packages %s" % ",".join(p["name"] for p in plan["packages"]),
        *(["bakedProfiles %s" % baked_profiles_text(plan["profiles"])] if plan.get("profiles") else []),
        "preparedBy %s"
        % (
            "stand-in (simulated guest: nothing was installed or verified)"
            if prepared_by == "stand-in"
            else prepared_by
        ),
    ]
    return "\n".join(lines)


def catalog_mapping(operation: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The catalog mapping of the built template, from the recorded evidence (docs/templates.md, "Output").

    ``sourceDiskGiB`` is the converted disk's observed size; ``imageDefaultUser`` only when the build
    itself verified the locked password and no authorized keys (never for a stand-in build).
    """
    mapping = dict(operation["mapping"])
    size = journal_stage(operation, "convert")["evidence"].get("diskSizeBytes")
    if not isinstance(size, int) or size % GIB:
        raise StageError(
            "The template's disk is not a whole number of GiB; the catalog needs sourceDiskGiB.",
            code="observation_mismatch",
            details={"stage": "stamp", "rule": "whole_gib"},
        )
    ordered = {
        key: mapping[key]
        for key in ("image", "node", "templateVmid", "templateVersion", "storage", "bridge", "diskDevice")
    }
    ordered.update(sourceDiskGiB=size // GIB, guestUser=mapping["guestUser"])
    if "distroFamily" in mapping:  # declared in the TemplateBuild (docs/profiles.md): profiles need it in the catalog
        ordered["distroFamily"] = mapping["distroFamily"]
    if mapping.get("bakedProfiles"):  # every one ran to a clean end in the preparation boot (docs/templates.md)
        for entry in mapping["bakedProfiles"]:
            if journal_stage(operation, "profile:" + entry["name"]).get("status") != "completed":
                raise StageError(
                    "A profile to bake has not completed; the template would not have it baked in.",
                    code="observation_mismatch",
                    details={"stage": "stamp", "rule": "profile_not_completed", "profile": entry["name"]},
                )
        ordered["bakedProfiles"] = [dict(entry) for entry in mapping["bakedProfiles"]]
    generalized = journal_stage(operation, "generalize")["evidence"]
    if (
        generalized.get("passwordLocked") is True
        and generalized.get("noAuthorizedKeys") is True
        and not generalized.get("standIn")
    ):
        ordered["imageDefaultUser"] = {
            "name": mapping["guestUser"],
            "templateVersion": mapping["templateVersion"],
            "passwordLocked": True,
            "noAuthorizedKeys": True,
        }
    try:
        return normalize_mapping(ordered)
    except FormatError as err:  # e.g. a 3 GiB image without diskGiB: the catalog needs at least 4
        raise StageError(
            "The built template cannot be catalogued (%s %s); declare diskGiB in the TemplateBuild."
            % (err.path, err.rule),
            code="observation_mismatch",
            details={"stage": "stamp", "rule": "catalog_mapping", "field": err.path},
        ) from None


class StampStage(StageLogic):
    """``PUT .../config``: tags ``vmanyware-template`` (plus the instance tag) and the stamp description."""

    kind = "stamp"

    def _wanted(self, ctx: StageContext) -> dict[str, str]:
        prepared_by = str(ctx.evidence("prepare").get("preparedBy"))
        return {
            "tags": "%s;%s" % (TEMPLATE_TAG, instance_tag(ctx.operation["operationId"])),
            "description": stamp_description(ctx.operation, prepared_by),
        }

    def preconditions(self, ctx: StageContext) -> None:
        config = common.read_config_or_none(ctx)
        if config is None or int_value(config.get("template")) != 1:
            raise StageError("The VM is not the converted template.", details={"stage": ctx.kind, "rule": "template"})
        if not common.is_ours(ctx, config) and config.get("description") != self._wanted(ctx)["description"]:
            raise StageError(
                "The template's description does not bind it to this operation.",
                details={"stage": ctx.kind, "rule": "description"},
            )
        ctx.facts["config"] = config
        catalog_mapping(ctx.operation)  # fails before anything is sent when the disk size cannot be catalogued

    def _applied(self, ctx: StageContext, config: t.Mapping[str, t.Any]) -> bool:
        wanted = self._wanted(ctx)
        return config.get("description") == wanted["description"] and set(tag_list(config.get("tags"))) == set(
            wanted["tags"].split(";")
        )

    def request(self, ctx: StageContext) -> Request | None:
        config = ctx.facts["config"]
        if self._applied(ctx, config):
            return None
        return Request("PUT", ctx.vm_path + "/config", dict(self._wanted(ctx), digest=config["digest"]))

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return None, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or not self._applied(ctx, config):
            raise observation_mismatch(ctx, "stamp")
        return {"digest": config.get("digest"), "catalogMapping": catalog_mapping(ctx.operation)}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        if config is not None and self._applied(ctx, config):
            return Resolution.applied()
        return Resolution.undecidable(
            "The reply to the stamp update was lost; check template %d's tags and description." % ctx.vmid
        )


def stamp_output(document: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``catalog_mapping`` and ``catalog_mapping_yaml`` of the operation ``document``'s completed stamp stage (else nothing)."""
    stamp: t.Mapping[str, t.Any] = next(
        (
            item
            for item in document.get("stages", [])
            if item.get("kind") == "stamp" and item.get("status") == "completed"
        ),
        {},
    )
    mapping = (stamp.get("evidence") or {}).get("catalogMapping")
    if not isinstance(mapping, dict):
        return {}
    return {"catalog_mapping": mapping, "catalog_mapping_yaml": mapping_yaml(mapping)}


def mapping_yaml(mapping: t.Mapping[str, t.Any]) -> str:
    """One catalog list item in catalog field order (plain scalars; every value is pattern-checked, so none needs quoting
    except a templateVersion YAML would read as a number, which is quoted)."""

    def scalar(value: t.Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        text = str(value)
        return '"%s"' % text if text[:1] in "+-.0123456789" or text in ("true", "false", "null", "~") else text

    lines = []
    for index, (key, value) in enumerate(mapping.items()):
        prefix = "- " if index == 0 else "  "
        if isinstance(value, dict):
            lines.append("%s%s:" % (prefix, key))
            lines.extend("    %s: %s" % (inner, scalar(item)) for inner, item in value.items())
        elif isinstance(value, list):  # bakedProfiles: a list of flat mappings
            lines.append("%s%s:" % (prefix, key))
            for entry in value:
                lines.extend(
                    "    %s%s: %s" % ("- " if position == 0 else "  ", inner, scalar(item))
                    for position, (inner, item) in enumerate(entry.items())
                )
        else:
            lines.append("%s%s: %s" % (prefix, key, scalar(value)))
    return "\n".join(lines) + "\n"
