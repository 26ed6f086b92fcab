# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container stage ``packages``: install the definition's packages (the role does the work over SSH; the stage records
what is installed).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..protocol import StageContext, StageLogic
from ..outcomes import Request, StageError, StageInProgress
from .common import power_state, require_ours


class ContainerPackagesStage(StageLogic):
    """Proxmox has no exec API for containers: the role installs the packages over SSH (``add_host`` with the operator's
    key, ``ansible.builtin.apt``) and passes what ``ansible.builtin.package_facts`` then reports. The stage sends nothing;
    it completes only when every declared package is installed (in its declared version, when one is declared)."""

    kind = "packages"
    task_type = None
    final_codes = frozenset({"package_version_missing"})

    def __init__(self, installed: t.Mapping[str, t.Any] | None = None) -> None:
        self.installed = {str(k): str(v) for k, v in (installed or {}).items()}

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> ContainerPackagesStage:
        """``installed``: what ``ansible.builtin.package_facts`` reported (or a plain name -> version mapping)."""
        return cls(installed_versions(options.get("installed")))

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        if power_state(ctx) != "running":
            raise StageError("The container is not running.", details={"stage": ctx.kind, "rule": "running"})

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if ctx.check_mode:
            raise StageInProgress({"phase": "check_mode", "note": "packages are installed over SSH by the role"})
        if not self.installed:
            raise StageError(
                "No installed package versions were given (the role passes ansible.builtin.package_facts).",
                details={"stage": ctx.kind, "rule": "installed_required"},
            )
        found: dict[str, str] = {}
        for package in ctx.definition["packages"]:
            version = self.installed.get(package["name"])
            if version is None or ("version" in package and version != package["version"]):
                raise StageError(
                    code="package_version_missing", details={"stage": ctx.kind, "package": package["name"]}
                )
            found[package["name"]] = version
        return {"installed": found, "installedBy": "ssh"}


def installed_versions(facts: t.Any) -> dict[str, str]:
    """Name -> version from ``ansible.builtin.package_facts`` (name -> [{version: ...}]) or a plain name -> version mapping."""
    result: dict[str, str] = {}
    for name, value in (facts if isinstance(facts, dict) else {}).items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            result[str(name)] = str(value[0].get("version"))
        elif isinstance(value, (str, int, float)):
            result[str(name)] = str(value)
    return result
