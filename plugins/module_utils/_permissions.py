# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one table of privileges each stage needs, and the endpoints each stage calls.

``STAGE_PRIVILEGES`` maps a stage (a plan step kind, plus ``audit`` for the reads every run
does) to ``Requirement`` rows: an ACL path template and a PVE privilege, optionally limited to
a PVE major version range. Path placeholders: ``{template}`` (template VMID), ``{target}``
(target VMID), ``{storage}``, ``{bridge}``, ``{node}``. ``ENDPOINTS`` lists every endpoint the
collection calls and the stage that calls it; a unit test walks the official schema's
``permissions.check`` blocks for those endpoints and asserts this table satisfies them.
``docs/permissions.md`` is generated from this table (``render_permissions_doc``).
"""

from __future__ import annotations

import dataclasses
import typing as t


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One privilege on one ACL path, for PVE majors ``min_major``..``max_major`` (inclusive, None = open)."""

    path: str
    privilege: str
    min_major: int | None = None
    max_major: int | None = None

    def applies_to(self, major: int) -> bool:
        return (self.min_major is None or major >= self.min_major) and (self.max_major is None or major <= self.max_major)


_TARGET = "/vms/{target}"
_TEMPLATE = "/vms/{template}"
_STORAGE = "/storage/{storage}"
_BRIDGE = "/sdn/zones/localnetwork/{bridge}"
_NODE = "/nodes/{node}"

_GUEST_AGENT = (
    Requirement(_TARGET, "VM.GuestAgent.Audit", min_major=9),
    Requirement(_TARGET, "VM.GuestAgent.Unrestricted", min_major=9),
    Requirement(_TARGET, "VM.Monitor", max_major=8),
)

STAGE_PRIVILEGES: dict[str, tuple[Requirement, ...]] = {
    "audit": (
        Requirement(_TEMPLATE, "VM.Audit"),
        Requirement(_TARGET, "VM.Audit"),
        Requirement(_STORAGE, "Datastore.Audit"),
        Requirement(_NODE, "Sys.Audit"),
    ),
    "clone": (
        Requirement(_TEMPLATE, "VM.Clone"),
        Requirement(_TARGET, "VM.Allocate"),
        Requirement(_STORAGE, "Datastore.AllocateSpace"),
        Requirement(_BRIDGE, "SDN.Use"),
    ),
    "resources": (
        Requirement(_TARGET, "VM.Config.CPU"),
        Requirement(_TARGET, "VM.Config.Memory"),
        Requirement(_TARGET, "VM.Config.Options"),
    ),
    "disk": (
        Requirement(_TARGET, "VM.Config.Disk"),
        Requirement(_STORAGE, "Datastore.AllocateSpace"),
    ),
    "cloudinit": (
        Requirement(_TARGET, "VM.Config.Cloudinit"),
        Requirement(_TARGET, "VM.Config.Network"),
    ),
    "seed": (Requirement(_TARGET, "VM.Config.Cloudinit"),),
    "start": (Requirement(_TARGET, "VM.PowerMgmt"),),
    "readiness": _GUEST_AGENT,
    "packages": _GUEST_AGENT,
    "snapshot": (Requirement(_TARGET, "VM.Snapshot"),),
    # vmanyware_cleanup (not a plan step): removing the guest of a failed, uncertain or abandoned operation.
    "cleanup": (
        Requirement(_TARGET, "VM.Allocate"),
        Requirement(_TARGET, "VM.PowerMgmt"),
    ),
}

STAGE_ORDER = ("audit", "clone", "resources", "disk", "cloudinit", "seed", "start", "readiness", "packages", "snapshot", "cleanup")


@dataclasses.dataclass(frozen=True)
class EndpointUse:
    """An endpoint the collection calls; ``vmid`` says whether ``{vmid}`` is the template or the target."""

    method: str
    path: str
    stage: str
    vmid: str = "target"


ENDPOINTS: tuple[EndpointUse, ...] = (
    EndpointUse("GET", "/version", "audit"),
    EndpointUse("GET", "/access/permissions", "audit"),
    EndpointUse("GET", "/cluster/nextid", "audit"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/config", "audit", vmid="template"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/config", "audit"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/status/current", "audit"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/snapshot", "audit"),
    EndpointUse("GET", "/nodes/{node}/storage/{storage}/status", "audit"),
    EndpointUse("GET", "/nodes/{node}/network", "audit"),
    EndpointUse("GET", "/nodes/{node}/tasks/{upid}/status", "audit"),
    EndpointUse("GET", "/nodes/{node}/tasks/{upid}/log", "audit"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/clone", "clone", vmid="template"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/config", "resources"),
    EndpointUse("PUT", "/nodes/{node}/qemu/{vmid}/config", "resources"),
    EndpointUse("PUT", "/nodes/{node}/qemu/{vmid}/resize", "disk"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/pending", "audit"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/cloudinit/dump", "audit"),
    EndpointUse("GET", "/nodes/{node}/tasks", "audit"),
    EndpointUse("PUT", "/nodes/{node}/qemu/{vmid}/config", "cloudinit"),
    EndpointUse("PUT", "/nodes/{node}/qemu/{vmid}/cloudinit", "seed"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/status/start", "start"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/agent/ping", "readiness"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces", "readiness"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/agent/exec", "readiness"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status", "readiness"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/agent/file-read", "readiness"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/agent/exec", "packages"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/agent/exec-status", "packages"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/snapshot", "snapshot"),
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/status/stop", "cleanup"),
    EndpointUse("DELETE", "/nodes/{node}/qemu/{vmid}", "cleanup"),
)


@dataclasses.dataclass(frozen=True)
class ResolvedRequirement:
    stage: str
    path: str
    privilege: str


def required_privileges(
    stages: t.Iterable[str], *, major: int, node: str, template_vmid: int, target_vmid: int, storage: str, bridge: str
) -> list[ResolvedRequirement]:
    """Concrete (stage, ACL path, privilege) rows for ``stages`` on PVE ``major``, in table order."""
    values = {"node": node, "template": template_vmid, "target": target_vmid, "storage": storage, "bridge": bridge}
    rows: list[ResolvedRequirement] = []
    for stage in stages:
        for req in STAGE_PRIVILEGES[stage]:
            if req.applies_to(major):
                rows.append(ResolvedRequirement(stage, req.path.format(**values), req.privilege))
    return rows


def effective_privileges(permissions: t.Mapping[str, t.Any], path: str) -> set[str]:
    """Privileges on ``path`` from a ``GET /access/permissions`` map (path -> {privilege: propagate}).

    An exact entry wins (what PVE returns for ``?path=``); otherwise the nearest ancestor's
    propagating privileges apply.
    """
    entry = permissions.get(path)
    if isinstance(entry, t.Mapping):
        return {str(k) for k in entry}
    parts = path.rstrip("/").split("/")
    while len(parts) > 1:
        parts.pop()
        parent = "/".join(parts) or "/"
        entry = permissions.get(parent)
        if isinstance(entry, t.Mapping):
            return {str(k) for k, v in entry.items() if v in (1, True, "1")}
    return set()


def role_privileges(major: int = 9) -> dict[str, list[str]]:
    """Privileges per ACL path template over every stage (sorted), for the generated doc."""
    by_path: dict[str, set[str]] = {}
    for stage in STAGE_ORDER:
        for req in STAGE_PRIVILEGES[stage]:
            if req.applies_to(major):
                by_path.setdefault(req.path, set()).add(req.privilege)
    return {path: sorted(privs) for path, privs in by_path.items()}


_ROLE_NAMES = {
    _TARGET: "VmanywareProvisioner",
    _TEMPLATE: "VmanywareTemplateReader",
    _STORAGE: "VmanywareStorage",
    _BRIDGE: "VmanywareBridge",
    _NODE: "VmanywareNodeAudit",
}
_DOC_PLACEHOLDERS = {
    "node": "<node>", "template": "<template-vmid>", "target": "<target-vmid>", "storage": "<storage>", "bridge": "<bridge>",
}


def _role_add(role: str, privileges: list[str], width: int = 100) -> list[str]:
    """``pveum role add`` with the privilege list split into adjacent quoted shell strings (short lines)."""
    chunks: list[str] = []
    current = ""
    for index, privilege in enumerate(privileges):
        item = privilege + ("," if index < len(privileges) - 1 else "")
        if current and len(current) + len(item) > width:
            chunks.append(current)
            current = ""
        current += item
    chunks.append(current)
    first = f'pveum role add {role} --privs "{chunks[0]}"'
    return [first + ("\\" if len(chunks) > 1 else "")] + [f'"{c}"' + ("\\" if i < len(chunks) - 2 else "") for i, c in enumerate(chunks[1:])]


def render_permissions_doc() -> str:
    """The text of ``docs/permissions.md``, generated from ``STAGE_PRIVILEGES``."""
    lines = [
        "<!-- GENERATED by `python tools/gen_permissions_doc.py` from plugins/module_utils/_permissions.py: do not edit. -->",
        "# Permissions of the API token",
        "",
        "The collection needs one API token. These are the privileges each stage uses, on which ACL path,",
        "taken from the privilege table in `plugins/module_utils/_permissions.py` (the table the",
        "preflight's `privileges` check evaluates, and a unit test checks against the official API schema).",
        "",
        "## Least-privilege roles (Proxmox VE 9)",
        "",
        "One role per ACL path, so no privilege is granted where it is not used. Replace the `<...>`",
        "placeholders; with a privilege-separated token (`--privsep 1`) grant the same ACLs to the user",
        "and to the token (the token gets the intersection).",
        "",
        "```sh",
    ]
    roles9 = role_privileges(9)
    for path, privs in roles9.items():
        lines += _role_add(_ROLE_NAMES[path], privs)
    for path in roles9:
        concrete = path.format(**_DOC_PLACEHOLDERS)
        lines.append(f"pveum acl modify {concrete} --users '<user@realm>' --roles {_ROLE_NAMES[path]}")
        lines.append(f"pveum acl modify {concrete} --tokens '<user@realm!token>' --roles {_ROLE_NAMES[path]}")
    lines += [
        "```", "", "## A pool instead of VMIDs", "",
        "When the catalog mapping names a `pool`, the clone puts the VM into that pool, and Proxmox VE",
        "evaluates a pool member's `/vms/<vmid>` with the pool's ACL as well. Grant the",
        f"`{_ROLE_NAMES[_TARGET]}` role once on `/pool/<pool>` instead of on each `/vms/<target-vmid>`;",
        "the preflight's `privileges` check then accepts every `/vms/<target-vmid>` privilege held on",
        "`/pool/<pool>` (docs/quickstart.md walks through it):", "", "```sh",
        "pveum pool add <pool>",
        f"pveum acl modify /pool/<pool> --users '<user@realm>' --roles {_ROLE_NAMES[_TARGET]}",
        f"pveum acl modify /pool/<pool> --tokens '<user@realm!token>' --roles {_ROLE_NAMES[_TARGET]}",
    ]
    lines += ["```", "", "## Proxmox VE 8", "", "On PVE 8 the guest agent stages use `VM.Monitor` instead of `VM.GuestAgent.*`:", "", "```sh"]
    roles8 = role_privileges(8)
    lines += _role_add(_ROLE_NAMES[_TARGET], roles8[_TARGET])
    lines += ["```", "", "## Privileges by stage", "", "| Stage | ACL path | Privilege | PVE |", "| --- | --- | --- | --- |"]
    for stage in STAGE_ORDER:
        for req in STAGE_PRIVILEGES[stage]:
            if req.min_major is None and req.max_major is None:
                versions = "8, 9"
            elif req.min_major is not None:
                versions = f">= {req.min_major}"
            else:
                versions = f"<= {req.max_major}"
            lines.append(f"| {stage} | `{req.path}` | `{req.privilege}` | {versions} |")
    lines += [
        "",
        "`snapshot` is needed only when the definition requests a snapshot; `disk` only when the disk grows;",
        "`packages` only when packages are declared. The preflight checks exactly the stages of the plan.",
        "`cleanup` is `vmanyware_cleanup` (not a plan step): it reads the token's privileges on the guest (a VM, or a",
        "container operation's container: both are `/vms/{target}`) before it sends anything and needs `VM.PowerMgmt` only",
        "to stop a running guest (`stop: true`).",
        "",
    ]
    return "\n".join(lines)
