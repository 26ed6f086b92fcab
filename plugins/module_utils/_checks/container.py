# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read-only preflight of a container plan (``guestType: container``), same rules as the VM one.

Checks: the API and version, ``container_template`` (the ``ostemplate`` volume present, or the
newest appliance version matching the catalog's glob present or downloadable), the root disk
storage (exists, active, ``rootdir`` content, capacity), the bridge, the VMID, and the token's
privileges for the container stages. The newest match is taken over the node's appliance index
(``GET /nodes/{node}/aplinfo``) and the template storage's ``vztmpl`` content together.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

# pylint: disable=redundant-keyword-arg  # pylint misreads the fields of Need, a dataclass extending Requirement (positional path and
# privilege, keyword purpose and alternatives); mypy checks these calls.

import fnmatch
import re
import typing as t

from .capabilities import CONTAINER_NEEDS, Need
from .._core.errors import ProviderError
from .permissions import effective_privileges
from .driver import GUEST_UNDECIDABLE, SUPPORTED_MAJORS, Preflight
from .._core.protocols import ApiClient

CONTAINER_CHECK_CODES = (
    "api_reachable",
    "version_supported",
    "container_template",
    "storage_exists",
    "storage_active",
    "storage_rootdir",
    "storage_capacity",
    "bridge_exists",
    "vmid_free",
    "privileges",
    "dhcp_available",
    "guest_readiness",
    "workflow_permitted",
)
# "<package>_<version>_<arch>.tar.<compression>", the appliance file names of pveam and aplinfo
_TEMPLATE_FILE = re.compile(r"^(?P<package>[^_/]+)_(?P<version>[^_/]+)_[^_/]+\.tar\.(?:gz|xz|zst)$")
DOWNLOAD_NEED = Need(
    "/storage/{vztmpl}", "Datastore.AllocateTemplate", purpose="download the appliance template (aplinfo)"
)
PRIVILEGED_NEED = Need("/", "Sys.Modify", purpose="create a privileged container (unprivileged: false)")


def version_key(version: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key close to Debian's version order: ``~`` first, then the end of the version, letters, digit runs (numerically)."""
    key: list[tuple[int, int, str]] = []
    for part in re.findall(r"\d+|[A-Za-z]+|~", version):
        if part == "~":
            key.append((0, 0, ""))
        elif part.isdigit():
            key.append((3, int(part), ""))
        else:
            key.append((2, 0, part))
    key.append((1, 0, ""))  # the end: after "~" (12.2~rc1 < 12.2), before anything more (12.2 < 12.2.1)
    return tuple(key)


def newest_match(package: str, pattern: str, candidates: t.Iterable[str]) -> str | None:
    """The template file name of the newest version of ``package`` whose version matches the glob ``pattern``."""
    best: tuple[tuple[tuple[int, int, str], ...], str] | None = None
    for name in candidates:
        match = _TEMPLATE_FILE.match(name)
        if (
            match is None
            or match.group("package") != package
            or not fnmatch.fnmatchcase(match.group("version"), pattern)
        ):
            continue
        key = (version_key(match.group("version")), name)
        if best is None or key > best:
            best = key
    return best[1] if best else None


class ContainerPreflight(Preflight):
    CHECK_CODES = CONTAINER_CHECK_CODES
    UNDECIDABLE = GUEST_UNDECIDABLE
    STORAGE_CONTENT = (
        "storage_rootdir",
        "rootdir",
        "The storage accepts container root disks.",
        "The storage does not accept container root disks (content type rootdir).",
    )

    def __init__(self, client: ApiClient, plan: t.Mapping[str, t.Any], tls_verified: bool = True) -> None:
        super().__init__(client, plan, tls_verified)
        self.resolved: str | None = None

    def read_checks(self) -> None:
        self.template()
        self.storage()
        self.bridge()
        self.network_checks()
        self.vmid()
        self.privileges()

    def template_storage(self) -> str:
        if "ostemplate" in self.source:
            return str(self.source["ostemplate"]).split(":", 1)[0]
        return str(self.source["appliance"]["storage"])

    def _vztmpl_files(self) -> list[str] | str:
        """File names in the template storage's vztmpl content, or a failure text."""
        storage = self.template_storage()
        try:
            content = self.client.get(f"/nodes/{self.node}/storage/{storage}/content", content="vztmpl")
        except ProviderError as err:
            if err.code == "permission_denied":
                return "The token may not list the template storage (Datastore.Audit or Datastore.AllocateSpace)."
            return "The template storage's content could not be read."
        if not isinstance(content, list):
            return "The template storage's content could not be understood."
        prefix = f"{storage}:vztmpl/"
        return [
            str(e["volid"])[len(prefix) :]
            for e in content
            if isinstance(e, dict) and str(e.get("volid", "")).startswith(prefix)
        ]

    def template(self) -> None:
        files = self._vztmpl_files()
        if "ostemplate" in self.source:
            name = str(self.source["ostemplate"]).split(":vztmpl/", 1)[1]
            if isinstance(files, str):
                self.set("container_template", "unknown", files)
            elif name in files:
                self.resolved = name
                self.set("container_template", "passed", "The ostemplate volume is on its storage.")
            else:
                self.set(
                    "container_template",
                    "failed",
                    "The ostemplate volume is not on its storage (an appliance mapping downloads it).",
                )
            return
        appliance = self.source["appliance"]
        try:
            index = self.client.get(f"/nodes/{self.node}/aplinfo")
        except ProviderError:
            index = None
        offered = (
            [str(e["template"]) for e in index if isinstance(e, dict) and isinstance(e.get("template"), str)]
            if isinstance(index, list)
            else []
        )
        local = files if isinstance(files, list) else []
        self.resolved = newest_match(appliance["package"], appliance["version"], [*offered, *local])
        if self.resolved is None:
            if index is None or isinstance(files, str):
                self.set(
                    "container_template",
                    "unknown",
                    "No matching template was found, and the appliance index or the template "
                    "storage could not be read.",
                )
            else:
                self.set(
                    "container_template",
                    "failed",
                    "No appliance version matches the catalog's package and version glob.",
                )
        elif self.resolved in local:
            self.set("container_template", "passed", f"Resolved to {self.resolved}, present on the template storage.")
        elif isinstance(files, str):
            self.set("container_template", "unknown", f"Resolved to {self.resolved}; " + files[0].lower() + files[1:])
        else:
            self.set(
                "container_template",
                "passed",
                f"Resolved to {self.resolved}, downloadable from the appliance index (template stage).",
            )

    def needs(self) -> list[Need]:
        needs = list(CONTAINER_NEEDS)
        if any(step["kind"] == "template" for step in self.plan["steps"]):
            needs.append(DOWNLOAD_NEED)
        if not self.source.get("unprivileged", True):
            needs.append(PRIVILEGED_NEED)
        return needs

    def privileges(self) -> None:
        values = {
            "target": self.plan["target"]["vmid"],
            "rootdir": self.plan["storage"],
            "vztmpl": self.template_storage(),
            "bridge": self.plan["bridge"],
            "node": self.node,
        }
        held: dict[str, set[str]] = {}

        def holds(path: str, privileges: t.Iterable[str]) -> bool | None:
            if path not in held:
                try:
                    data = self.client.get("/access/permissions", path=path)
                except ProviderError:
                    return None
                if not isinstance(data, dict):
                    return None
                held[path] = effective_privileges(data, path)
            return any(p in held[path] for p in privileges)

        missing: list[str] = []
        major = self.major if self.major in SUPPORTED_MAJORS else 9
        for need in self.needs():
            if not need.applies_to(major):
                continue
            path = need.path.format(**values)
            found = holds(path, [need.privilege])
            for alt_path, alt_privileges in need.alternatives:
                if found is False:
                    found = holds(alt_path.format(**values), alt_privileges)
            if found is None:
                self.set("privileges", "unknown", "The token's effective privileges could not be read.")
                return
            text = f"{need.privilege} on {path} ({need.purpose})"
            if not found and text not in missing:
                missing.append(text)
        if missing:
            self.set("privileges", "failed", "The token lacks: " + "; ".join(missing) + ".")
        else:
            self.set("privileges", "passed", "The token holds every privilege the container stages need.")
