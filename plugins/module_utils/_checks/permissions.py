# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one table of privileges each stage needs, and the endpoints each stage calls, derived from the stage registry.

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

from .._stages.registry import BRIDGE as _BRIDGE
from .._stages.registry import NODE as _NODE
from .._stages.registry import STORAGE as _STORAGE
from .._stages.registry import TARGET as _TARGET
from .._stages.registry import TEMPLATE_VM as _TEMPLATE
from .._stages.registry import VM, Requirement, stages_in_order  # Requirement: re-exported


# The stage rows come from the stage registry (``_stages``); ``audit`` (the reads every run does) and ``cleanup``
# (vmanyware_cleanup, not a plan step) are the two groups of privileges that are not one provisioning stage's.
_VM_STAGES = stages_in_order(VM)

AUDIT_PRIVILEGES = (
    Requirement(_TEMPLATE, "VM.Audit"),
    Requirement(_TARGET, "VM.Audit"),
    Requirement(_STORAGE, "Datastore.Audit"),
    Requirement(_NODE, "Sys.Audit"),
)
CLEANUP_PRIVILEGES = (
    Requirement(_TARGET, "VM.Allocate"),
    Requirement(_TARGET, "VM.PowerMgmt"),
)
STAGE_PRIVILEGES: dict[str, tuple[Requirement, ...]] = {
    "audit": AUDIT_PRIVILEGES,
    **{spec.kind: spec.privileges for spec in _VM_STAGES},
    "cleanup": CLEANUP_PRIVILEGES,
}

STAGE_ORDER = ("audit", *(spec.kind for spec in _VM_STAGES), "cleanup")


@dataclasses.dataclass(frozen=True)
class EndpointUse:
    """An endpoint the collection calls; ``vmid`` says whether ``{vmid}`` is the template or the target."""

    method: str
    path: str
    stage: str
    vmid: str = "target"


_AUDIT_ENDPOINTS: tuple[EndpointUse, ...] = (
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
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/pending", "audit"),
    EndpointUse("GET", "/nodes/{node}/qemu/{vmid}/cloudinit/dump", "audit"),
    EndpointUse("GET", "/nodes/{node}/tasks", "audit"),
)
_CLEANUP_ENDPOINTS: tuple[EndpointUse, ...] = (
    EndpointUse("POST", "/nodes/{node}/qemu/{vmid}/status/stop", "cleanup"),
    EndpointUse("DELETE", "/nodes/{node}/qemu/{vmid}", "cleanup"),
)
ENDPOINTS: tuple[EndpointUse, ...] = (
    _AUDIT_ENDPOINTS
    + tuple(EndpointUse(use.method, use.path, spec.kind, use.vmid) for spec in _VM_STAGES for use in spec.endpoints)
    + _CLEANUP_ENDPOINTS
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
    "node": "<node>",
    "template": "<template-vmid>",
    "target": "<target-vmid>",
    "storage": "<storage>",
    "bridge": "<bridge>",
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
    return [first + ("\\" if len(chunks) > 1 else "")] + [
        f'"{c}"' + ("\\" if i < len(chunks) - 2 else "") for i, c in enumerate(chunks[1:])
    ]


def render_permissions_doc() -> str:
    """The text of ``docs/permissions.md``, generated from ``STAGE_PRIVILEGES``."""
    lines = [
        "<!-- GENERATED by `python tools/gen_permissions_doc.py` from plugins/module_utils/_checks/permissions.py: do not edit. -->",
        "# Permissions of the API token",
        "",
        "The collection needs one API token. These are the privileges each stage uses, on which ACL path,",
        "taken from the privilege table in `plugins/module_utils/_checks/permissions.py` (the table the",
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
        "```",
        "",
        "## A pool instead of VMIDs",
        "",
        "When the catalog mapping names a `pool`, the clone puts the VM into that pool, and Proxmox VE",
        "evaluates a pool member's `/vms/<vmid>` with the pool's ACL as well. Grant the",
        f"`{_ROLE_NAMES[_TARGET]}` role once on `/pool/<pool>` instead of on each `/vms/<target-vmid>`;",
        "the preflight's `privileges` check then accepts every `/vms/<target-vmid>` privilege held on",
        "`/pool/<pool>` (docs/quickstart.md walks through it):",
        "",
        "```sh",
        "pveum pool add <pool>",
        f"pveum acl modify /pool/<pool> --users '<user@realm>' --roles {_ROLE_NAMES[_TARGET]}",
        f"pveum acl modify /pool/<pool> --tokens '<user@realm!token>' --roles {_ROLE_NAMES[_TARGET]}",
    ]
    lines += [
        "```",
        "",
        "## Proxmox VE 8",
        "",
        "On PVE 8 the guest agent stages use `VM.Monitor` instead of `VM.GuestAgent.*`:",
        "",
        "```sh",
    ]
    roles8 = role_privileges(8)
    lines += _role_add(_ROLE_NAMES[_TARGET], roles8[_TARGET])
    lines += [
        "```",
        "",
        "## Privileges by stage",
        "",
        "| Stage | ACL path | Privilege | PVE |",
        "| --- | --- | --- | --- |",
    ]
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
        'Named networks and placement (docs/networks.md, docs/operations.md "Placement") only add reads: the address check',
        "and `vmanyware_address` read every guest's configuration (`VM.Audit` on the guests; unreadable ones make",
        "`address_free` unknown), a VLAN-tagged NIC's bridge is read on the node (`Sys.Audit` on `/nodes/{node}`), and",
        "`vmanyware_placement` reads the HA manager status (`Sys.Audit` on `/`; without it every node is",
        "`maintenance_unknown`) and each node's storage status (`Datastore.Audit`). A clone with `target` to another node needs",
        "the clone privileges above on the template's and the target's paths, and `SDN.Use` on the tagged bridge's VLAN",
        "(`/sdn/zones/localnetwork/{bridge}/{tag}`, inherited from the bridge's path).",
        "",
    ]
    return "\n".join(lines)
