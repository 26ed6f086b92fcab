# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read-only preflight of a TemplateBuildPlan: what GETs can prove before a template is built.

Same discipline as the VM preflight (``preflight.py``), on the same check driver (``driver.py``):
fixed check codes, each ``passed``, ``failed`` or ``unknown``; nothing unread becomes ``passed``;
messages are fixed text. The template build needs PVE 8.4 or later (``download-url`` into a
storage with content ``import``), so the version check is stricter here; the privileges are the
template build's (``capabilities.TEMPLATE_BUILD_NEEDS``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .capabilities import TEMPLATE_BUILD_MINIMUM, TEMPLATE_BUILD_NEEDS, Report
from .._api.client import ProxmoxClient
from .._api.settings import ConnectionSettings
from .._core.errors import ProviderError
from .driver import SUPPORTED_MAJORS, Preflight, collect_checks, preflight_result, provisioning_enabled, truthy

CHECK_CODES = (
    "api_reachable",
    "version_supported",
    "template_build_supported",
    "import_storage_exists",
    "import_storage_active",
    "import_storage_content",
    "storage_exists",
    "storage_active",
    "storage_images",
    "bridge_exists",
    "vmid_free",
    "privileges",
    "image_reachable",
    "image_checksum",
    "build_network",
    "package_source",
)
UNDECIDABLE = {
    "image_reachable": "Whether the node can fetch the image URL is only known when the download runs.",
    "image_checksum": "Only the download proves that the image matches the declared checksum.",
    "build_network": "Whether the build address is free and routed on the bridge cannot be read from the Proxmox API.",
    "package_source": "Whether the guest reaches a package repository from the build address is only known in the preparation boot.",
}


class TemplatePreflight(Preflight):
    CHECK_CODES = CHECK_CODES
    UNDECIDABLE = UNDECIDABLE

    def read_checks(self) -> None:
        self.build_version()
        self.storage_checks(self.plan["importStorage"], "import_storage", "import")
        self.storage_checks(self.plan["storage"], "storage", "images")
        self.bridge()
        self.vmid()
        self.build_privileges()

    def build_version(self) -> None:
        if self.major is None:
            self.set("template_build_supported", "unknown", "The Proxmox VE version could not be read.")
        elif (self.major, self.minor or 0) >= TEMPLATE_BUILD_MINIMUM and self.major in SUPPORTED_MAJORS:
            self.set(
                "template_build_supported",
                "passed",
                "Proxmox VE 8.4 or later can download an image into an import storage.",
            )
        else:
            self.set(
                "template_build_supported",
                "failed",
                "Building a template over the API needs Proxmox VE 8.4 or later (download-url with content import).",
            )

    def storage_checks(self, storage: str, prefix: str, content: str) -> None:
        exists, active, offers = (
            f"{prefix}_exists",
            f"{prefix}_active",
            f"{prefix}_{'content' if content == 'import' else content}",
        )
        which = "import storage" if content == "import" else "storage"
        rest = (active, offers)
        try:
            status: t.Any = self.client.get(f"/nodes/{self.node}/storage/{storage}/status")
        except ProviderError as err:
            if err.code == "not_found" or (
                err.code == "parameter_invalid" and "storage" in err.details.get("parameters", [])
            ):
                self.set(exists, "failed", f"The {which} does not exist on the node.")
                self.unknown(rest, f"Not checked: the {which} does not exist.")
                return
            status = None if err.code == "permission_denied" else self._storage_from_list(storage)
            if status is None:
                self.set(exists, "unknown", f"The {which} status could not be read (Datastore.Audit).")
                self.unknown(rest, f"Not checked: the {which} status could not be read.")
                return
        if not isinstance(status, dict):
            self.set(exists, "unknown", f"The {which} status could not be understood.")
            self.unknown(rest, f"Not checked: the {which} status could not be understood.")
            return
        self.set(exists, "passed", f"The {which} exists on the node.")
        enabled, is_active = status.get("enabled"), status.get("active")
        if is_active is None:
            self.set(active, "unknown", f"The {which} status does not say whether it is active.")
        elif truthy(is_active) and (enabled is None or truthy(enabled)):
            self.set(active, "passed", f"The {which} is enabled and active.")
        else:
            self.set(active, "failed", f"The {which} is disabled or not active.")
        listed = status.get("content")
        if not isinstance(listed, str):
            self.set(offers, "unknown", f"The {which} status does not list its content types.")
        elif content in [part.strip() for part in listed.split(",")]:
            self.set(offers, "passed", f"The {which} has content type {content}.")
        else:
            self.set(offers, "failed", f"The {which} does not have content type {content}.")

    def build_privileges(self) -> None:
        report = Report(self.client)
        values = {
            "node": self.node,
            "storage": self.plan["storage"],
            "import": self.plan["importStorage"],
            "bridge": self.plan["bridge"],
            "target": str(self.plan["target"]["vmid"]),
        }
        major = self.major if self.major in SUPPORTED_MAJORS else 9
        needs = [need for need in TEMPLATE_BUILD_NEEDS if need.applies_to(major)]
        paths = [need.path.format(**values) for need in needs] + [
            alt.format(**values) for need in needs for alt, _p in need.alternatives
        ]
        for path in dict.fromkeys(paths):
            try:
                data = self.client.get("/access/permissions", path=path)
            except ProviderError:
                self.set("privileges", "unknown", "The token's effective privileges could not be read.")
                return
            if not isinstance(data, dict):
                self.set("privileges", "unknown", "The token's effective privileges could not be understood.")
                return
            report.permissions[path] = data.get(path, {})
        missing = report.missing(needs, values)
        if not missing:
            self.set("privileges", "passed", "The token holds every privilege the template build needs.")
        else:
            self.set(
                "privileges",
                "failed",
                "The token lacks: " + "; ".join(f"{m['privilege']} on {m['path']}" for m in missing) + ".",
            )


def run_template_preflight(
    planned: t.Any,
    settings: ConnectionSettings,
    *,
    environ: t.Mapping[str, str],
    fail_on: str = "failed",
    client_factory: t.Callable[[ConnectionSettings], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """The preflight result of a ``PlannedTemplateBuild`` (snake_case keys); raises ``PreflightFailed`` per ``fail_on``."""
    checks, capabilities, scope, blockers, tls_verified = collect_checks(
        settings,
        fail_on=fail_on,
        client_factory=client_factory,
        blockers_of=lambda: [] if provisioning_enabled(environ) else ["provisioning_disabled"],
        checks_of=lambda client, verified: TemplatePreflight(client, planned.plan, verified).run(),
    )
    return preflight_result(
        {"plan_hash": planned.plan_hash, "template_build_hash": planned.template_build_hash},
        checks,
        capabilities,
        scope=scope,
        blockers=blockers,
        tls_verified=tls_verified,
        fail_on=fail_on,
        undecidable=UNDECIDABLE,
    )
