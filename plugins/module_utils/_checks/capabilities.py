# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The connection test: what this Proxmox VE and this token can do, read with GETs only.

Reads the version, the cluster and its nodes (``/cluster/status``, else ``/nodes``), per online
node its storages with their content types and its bridges, the SDN VNets and the token's
effective privileges (``/access/permissions``). From those it says, per operation, whether the
collection can run it here over the API, and why not: a missing privilege (with ACL path and
purpose), a missing storage content type, no bridge, or a PVE version too old. Facts per PVE
version: building a template from a cloud image over the API needs PVE 8.4+ and a storage with
content ``import`` (``download-url`` into ``import``); snippets and commands inside a container
are never possible over the API (no upload for snippets, no exec for containers: SSH to the node). Given the node
SSH route's settings, it also probes that route per node (read-only: login with the verified host key, ``pct help``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

# pylint: disable=redundant-keyword-arg  # pylint misreads the fields of Need, a dataclass extending Requirement (positional path and
# privilege, keyword purpose and alternatives); mypy checks these calls.

import dataclasses
import itertools
import re
import typing as t

from .._api.client import ProxmoxClient
from .._api.node_ssh import NodeSshRoute, NodeSshSettings, node_settings
from .._api.tls import mark_tls, require_tls_for_reads
from .._api.settings import ConnectionSettings
from .._core.errors import NodeSshError, ProviderError
from .permissions import STAGE_ORDER, STAGE_PRIVILEGES, effective_privileges
from .driver import SUPPORTED_MAJORS
from .._core.protocols import ApiClient
from .._stages.registry import VM, Requirement, stages_in_order

TEMPLATE_BUILD_MINIMUM = (8, 4)
_VERSION = re.compile(r"^(\d+)\.(\d+)")

# Why each stage needs its privileges (the "purpose" of a missing privilege): the registry's, plus the reads every run does.
STAGE_PURPOSES = {
    "audit": "read the template, the new VM, the storage and the node's tasks",
    **{spec.kind: spec.purpose for spec in stages_in_order(VM)},
}


@dataclasses.dataclass(frozen=True)
class Need(Requirement):
    """A ``Requirement`` (privilege on an ACL path template, PVE majors) with its purpose; any of ``alternatives``
    (path, privileges) satisfies it too. Placeholders: ``{node}``, ``{storage}``, ``{bridge}``, ``{import}``,
    ``{template}``, ``{target}``, ``{rootdir}``, ``{vztmpl}``."""

    purpose: str = ""
    alternatives: tuple[tuple[str, tuple[str, ...]], ...] = ()


def _provisioning_needs() -> tuple[Need, ...]:
    """The provisioning rows of the stage privilege table (_permissions.py), each with its stage's purpose.

    Rows of other operations in that table (``cleanup``) are rated as their own operation below."""
    needs: list[Need] = []
    for stage in STAGE_ORDER:
        if stage not in STAGE_PURPOSES:
            continue
        for req in STAGE_PRIVILEGES[stage]:
            needs.append(
                Need(req.path, req.privilege, req.min_major, req.max_major, purpose=f"{stage}: {STAGE_PURPOSES[stage]}")
            )
    return tuple(needs)


_VM_CONFIG = (
    "VM.Config.CPU",
    "VM.Config.Memory",
    "VM.Config.Disk",
    "VM.Config.Network",
    "VM.Config.Options",
    "VM.Config.Cloudinit",
    "VM.Config.HWType",
)
# Reading an import/ISO/template volume needs "at least read access to storage" (pve-storage check_volume_access).
_READ_VOLUME = ("Datastore.AllocateSpace",)
TEMPLATE_BUILD_NEEDS: tuple[Need, ...] = (
    Need(
        "/storage/{import}",
        "Datastore.AllocateTemplate",
        purpose="download the cloud image into the import storage (download-url)",
    ),
    Need(
        "/nodes/{node}",
        "Sys.AccessNetwork",
        purpose="let the node fetch the image URL (download-url)",
        alternatives=(("/", ("Sys.Audit", "Sys.Modify")),),
    ),
    Need(
        "/storage/{import}",
        "Datastore.Audit",
        purpose="import the downloaded image as the VM disk (import-from)",
        alternatives=(("/storage/{import}", _READ_VOLUME),),
    ),
    Need("/vms/{target}", "VM.Allocate", purpose="create the template VM and convert it to a template"),
    Need("/vms/{target}", "VM.Audit", purpose="read the template VM's configuration and status"),
    *(Need("/vms/{target}", privilege, purpose="configure the template VM") for privilege in _VM_CONFIG),
    Need("/vms/{target}", "VM.PowerMgmt", purpose="boot the template VM once to install the guest agent"),
    Need(
        "/vms/{target}",
        "VM.GuestAgent.Unrestricted",
        purpose="install the guest agent inside the template VM",
        min_major=9,
    ),
    Need("/vms/{target}", "VM.Monitor", purpose="install the guest agent inside the template VM", max_major=8),
    Need("/storage/{storage}", "Datastore.AllocateSpace", purpose="allocate the template VM's disk"),
    Need("/sdn/zones/localnetwork/{bridge}", "SDN.Use", purpose="attach the template VM to the bridge"),
    Need("/nodes/{node}", "Sys.Audit", purpose="follow the node's tasks"),
)
_CT_CONFIG = ("VM.Config.CPU", "VM.Config.Memory", "VM.Config.Disk", "VM.Config.Network", "VM.Config.Options")
CONTAINER_NEEDS: tuple[Need, ...] = (
    Need("/vms/{target}", "VM.Allocate", purpose="create the container"),
    *(Need("/vms/{target}", privilege, purpose="configure the container") for privilege in _CT_CONFIG),
    Need("/vms/{target}", "VM.PowerMgmt", purpose="start the container"),
    Need("/storage/{rootdir}", "Datastore.AllocateSpace", purpose="allocate the container's root disk"),
    Need(
        "/storage/{vztmpl}",
        "Datastore.Audit",
        purpose="read the container template",
        alternatives=(("/storage/{vztmpl}", _READ_VOLUME),),
    ),
    Need("/sdn/zones/localnetwork/{bridge}", "SDN.Use", purpose="attach the container to the bridge"),
    Need("/nodes/{node}", "Sys.Audit", purpose="follow the node's tasks"),
)
CLEANUP_NEEDS: tuple[Need, ...] = (
    Need("/vms/{target}", "VM.Audit", purpose="read the VM's binding description before deleting it"),
    Need("/vms/{target}", "VM.PowerMgmt", purpose="stop the VM before deleting it"),
    Need("/vms/{target}", "VM.Allocate", purpose="delete the VM and its disks"),
    Need("/nodes/{node}", "Sys.Audit", purpose="follow the node's tasks"),
)


@dataclasses.dataclass(frozen=True)
class Operation:
    name: str
    needs: tuple[Need, ...]
    # placement slot -> content type a storage must offer (or "bridge")
    slots: tuple[tuple[str, str], ...]


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "vm_provisioning",
        _provisioning_needs(),
        (("template", "template"), ("storage", "images"), ("bridge", "bridge")),
    ),
    Operation(
        "template_build", TEMPLATE_BUILD_NEEDS, (("import", "import"), ("storage", "images"), ("bridge", "bridge"))
    ),
    Operation("containers", CONTAINER_NEEDS, (("rootdir", "rootdir"), ("vztmpl", "vztmpl"), ("bridge", "bridge"))),
    Operation("cleanup", CLEANUP_NEEDS, ()),
)


def parse_version(data: t.Any) -> tuple[str | None, int | None, int | None]:
    text = None
    for key in ("version", "release"):
        value = data.get(key) if isinstance(data, dict) else None
        match = _VERSION.match(value) if isinstance(value, str) else None
        if match:
            return value, int(match.group(1)), int(match.group(2))
        text = text or value
    return (text if isinstance(text, str) else None), None, None


def _content(value: t.Any) -> list[str]:
    return sorted(part.strip() for part in str(value or "").split(",") if part.strip())


def _truthy(value: t.Any) -> bool:
    return value in (1, True, "1")


class Report:
    """Reads everything once, then evaluates each operation."""

    def __init__(self, client: ApiClient, template_vmid: int | None = None) -> None:
        self.client = client
        self.template_vmid = template_vmid
        self.permissions: dict[str, t.Any] = {}
        self.permissions_readable = False

    def _get(self, path: str, **params: t.Any) -> tuple[t.Any, str | None]:
        try:
            return self.client.get(path, **params), None
        except ProviderError as err:
            if err.code in ("tls_verification_failed", "auth_failed", "transport_lost"):
                raise
            return None, err.code

    def read(self) -> dict[str, t.Any]:
        data = self.client.get("/version")  # the connection itself: TLS, credentials (errors fail the module)
        version, major, minor = parse_version(data)
        cluster: dict[str, t.Any] = {"name": None, "quorate": None, "readable": False}
        nodes: dict[str, dict[str, t.Any]] = {}
        status, _error = self._get("/cluster/status")
        if isinstance(status, list):
            cluster["readable"] = True
            for entry in status:
                if not isinstance(entry, dict):
                    continue
                if entry.get("type") == "cluster":
                    cluster["name"], cluster["quorate"] = entry.get("name"), _truthy(entry.get("quorate"))
                elif entry.get("type") == "node" and isinstance(entry.get("name"), str):
                    nodes[entry["name"]] = {
                        "node": entry["name"],
                        "online": _truthy(entry.get("online")),
                        "local": _truthy(entry.get("local")),
                    }
        listed, _error = self._get("/nodes")
        for entry in listed if isinstance(listed, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("node"), str):
                item = nodes.setdefault(entry["node"], {"node": entry["node"], "online": False, "local": None})
                item["online"] = item["online"] or entry.get("status") == "online"
        for name in sorted(nodes):
            self._read_node(nodes[name])
        guests, _error = self._get("/cluster/resources", type="vm")
        for entry in guests if isinstance(guests, list) else []:
            if (
                isinstance(entry, dict)
                and _truthy(entry.get("template"))
                and entry.get("type") == "qemu"
                and entry.get("node") in nodes
            ):
                nodes[entry["node"]].setdefault("templates", []).append(int(entry["vmid"]))
        vnets_data, vnet_error = self._get("/cluster/sdn/vnets")
        vnets = (
            None
            if vnet_error
            else [
                {"vnet": v.get("vnet"), "zone": v.get("zone"), "alias": v.get("alias")}
                for v in (vnets_data or [])
                if isinstance(v, dict)
            ]
        )
        perms, perm_error = self._get("/access/permissions")
        self.permissions_readable = perm_error is None and isinstance(perms, dict)
        self.permissions = perms if self.permissions_readable else {}
        return {
            "version": {"version": version, "major": major, "minor": minor},
            "cluster": cluster,
            "nodes": [nodes[name] for name in sorted(nodes)],
            "vnets": vnets,
            "privileges": {
                path: sorted(privs) for path, privs in sorted(self.permissions.items()) if isinstance(privs, dict)
            }
            if self.permissions_readable
            else None,
        }

    def _read_node(self, node: dict[str, t.Any]) -> None:
        node.setdefault("templates", [])
        node.update({"storages": [], "bridges": [], "readable": False})
        if not node["online"]:
            return
        storages, storage_error = self._get(f"/nodes/{node['node']}/storage")
        bridges, bridge_error = self._get(f"/nodes/{node['node']}/network", type="any_bridge")
        node["readable"] = storage_error is None and bridge_error is None
        for entry in storages if isinstance(storages, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("storage"), str):
                node["storages"].append(
                    {
                        "storage": entry["storage"],
                        "type": entry.get("type"),
                        "content": _content(entry.get("content")),
                        "shared": _truthy(entry.get("shared")),
                        "active": _truthy(entry.get("active")) and entry.get("enabled", 1) not in (0, "0", False),
                    }
                )
        node["bridges"] = sorted(
            entry["iface"]
            for entry in (bridges if isinstance(bridges, list) else [])
            if isinstance(entry, dict) and isinstance(entry.get("iface"), str)
        )

    # -- evaluation ------------------------------------------------------------------------------------
    def held(self, path: str) -> set[str]:
        return effective_privileges(self.permissions, path)

    def missing(self, needs: t.Iterable[Need], values: dict[str, str]) -> list[dict[str, t.Any]]:
        reasons: list[dict[str, t.Any]] = []
        for need in needs:
            path = _acl_path(need.path, values)
            if need.privilege in self.held(path):
                continue
            if any(set(privs) <= self.held(_acl_path(alt, values)) for alt, privs in need.alternatives):
                continue
            same = next((r for r in reasons if (r["path"], r["privilege"]) == (path, need.privilege)), None)
            if same is None:
                reasons.append(
                    {"kind": "privilege", "path": path, "privilege": need.privilege, "purpose": need.purpose}
                )
            elif need.purpose not in same["purpose"].split("; "):
                same["purpose"] += "; " + need.purpose  # one entry per privilege and path, with every purpose
        for reason in reasons:
            reason["message"] = f"{reason['privilege']} on {reason['path']} is missing: {reason['purpose']}."
        return reasons

    def evaluate(self, facts: dict[str, t.Any], operation: Operation) -> dict[str, t.Any]:
        major, minor = facts["version"]["major"], facts["version"]["minor"]
        result: dict[str, t.Any] = {
            "operation": operation.name,
            "status": "unavailable",
            "via": "api",
            "placement": None,
            "reasons": [],
        }
        reasons = result["reasons"]
        if major is None:
            reasons.append({"kind": "version", "message": "The Proxmox VE version could not be read."})
        elif major not in SUPPORTED_MAJORS:
            reasons.append(
                {"kind": "version", "message": "The Proxmox VE major version is not supported (supported: 8 or 9)."}
            )
        if operation.name == "template_build" and major is not None and (major, minor) < TEMPLATE_BUILD_MINIMUM:
            result["via"] = "ssh"
            reasons.append(
                {
                    "kind": "version",
                    "minimum": "8.4",
                    "message": "Downloading a cloud image into an import storage over the API "
                    "needs Proxmox VE 8.4 or later; on this version only a shell on the node (SSH) can build the template.",
                }
            )
        if operation.name == "containers":
            result["via"] = "ssh"
            reasons.append(
                {
                    "kind": "api",
                    "message": "Proxmox VE has no API to run commands inside a container (pct exec needs SSH to "
                    "the node); the collection works over the API only.",
                }
            )
        if not self.permissions_readable:
            reasons.append(
                {
                    "kind": "privilege",
                    "message": "The token's effective privileges could not be read (GET /access/permissions).",
                }
            )
        major_for_needs = major if major in SUPPORTED_MAJORS else 9
        needs = [need for need in operation.needs if need.applies_to(major_for_needs)]
        base = {"target": ""}
        best: tuple[dict[str, str], list[dict[str, t.Any]]] | None = None
        slot_failures: list[dict[str, t.Any]] = []
        online = [node for node in facts["nodes"] if node["online"]]
        if not online:
            reasons.append({"kind": "node", "message": "No cluster node is online and readable."})
        for node in online:
            choices: list[list[tuple[str, str]]] = []
            for slot, content in operation.slots:
                if content == "bridge":
                    options = [(slot, bridge) for bridge in node["bridges"]]
                elif content == "template":
                    options = [
                        (slot, str(vmid))
                        for vmid in sorted(node.get("templates", []))
                        if self.template_vmid is None or vmid == self.template_vmid
                    ]
                else:
                    options = [
                        (slot, s["storage"]) for s in node["storages"] if s["active"] and content in s["content"]
                    ]
                if not options:
                    slot_failures.append(_slot_failure(node["node"], content, self.template_vmid))
                choices.append(options)
            if any(not options for options in choices):
                continue
            for combination in itertools.product(*choices) if choices else [()]:
                values = dict(base, node=node["node"], **dict(combination))
                lacking = self.missing(needs, values)
                if best is None or len(lacking) < len(best[1]):
                    best = (values, lacking)
                if not lacking:
                    break
            if best is not None and not best[1]:
                break
        if best is None:
            reasons.extend(_unique(slot_failures))
        else:
            result["placement"] = {
                key: (int(value) if key == "template" else value) for key, value in best[0].items() if value
            }
            reasons.extend(best[1])
        if not reasons:
            result["status"] = "available"
        return result


def _slot_failure(node: str, content: str, template_vmid: int | None) -> dict[str, t.Any]:
    if content == "bridge":
        return {"kind": "bridge", "node": node, "message": f"Node {node} has no bridge."}
    if content == "template":
        which = f"template {template_vmid}" if template_vmid is not None else "template"
        return {
            "kind": "template",
            "node": node,
            "message": f"Node {node} has no VM {which} the token can see (VM.Audit).",
        }
    return {
        "kind": "storage_content",
        "node": node,
        "content": content,
        "message": f"Node {node} has no active storage with content type {content}.",
    }


def _acl_path(template: str, values: t.Mapping[str, str]) -> str:
    """A concrete ACL path; a new VM's unknown VMID leaves ``/vms``, whose ACL a new VM inherits."""
    return template.format(**values).rstrip("/") or "/"


def _unique(items: list[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    seen: list[dict[str, t.Any]] = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def run_report(client: ApiClient, *, template_vmid: int | None = None, tls_verified: bool = True) -> dict[str, t.Any]:
    """The ``vmanyware_capabilities`` result (reads only); read unverified: no provider scope, ``tls_verified`` false and a warning."""
    report = Report(client, template_vmid)
    facts = report.read()
    operations = [report.evaluate(facts, operation) for operation in OPERATIONS]
    summary = {
        status: sum(1 for item in operations if item["status"] == status) for status in ("available", "unavailable")
    }
    scope = client.provider_scope_id if tls_verified else None  # never a scope from an unverified certificate
    return mark_tls(
        dict(facts, changed=False, operations=operations, summary=summary, provider_scope_id=scope), tls_verified
    )


def node_ssh_report(
    nodes: t.Sequence[t.Mapping[str, t.Any]],
    options: t.Mapping[str, t.Any] | None,
    route_factory: t.Callable[[NodeSshSettings], NodeSshRoute] = NodeSshRoute,
) -> dict[str, t.Any]:
    """Per node, whether the node SSH route (``pct exec`` over SSH, docs/containers.md) is usable: a read-only probe
    (login with the verified host key, ``pct help``). Without ``options`` nothing is attempted: ``not_configured``."""
    if not options:
        rows = [{"node": node["node"], "status": "not_configured", "reason": "not_configured"} for node in nodes]
        return {"configured": False, "nodes": rows}
    rows = []
    for node in nodes:
        name = str(node["node"])
        settings = node_settings(options, name)
        row: dict[str, t.Any] = {"node": name, "host": settings.host, "port": settings.port}
        if not node.get("online"):
            rows.append({**row, "status": "unusable", "reason": "node_offline"})
            continue
        try:
            route_factory(settings).probe(None)
        except NodeSshError as err:
            rows.append({**row, "status": "unusable", "reason": err.code})
            continue
        rows.append({**row, "status": "usable", "reason": None})
    return {"configured": True, "nodes": rows}


def capabilities(
    settings: ConnectionSettings,
    *,
    template_vmid: int | None = None,
    node_ssh: t.Mapping[str, t.Any] | None = None,
    client_factory: t.Callable[[ConnectionSettings], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """``vmanyware_capabilities``: unverified TLS is refused (``tls_unverified``) before any client is built, unless
    ``unverified_tls_read_only`` with an API token (the client then sends GETs only). With ``node_ssh``, each node's
    SSH route is probed too (``node_ssh_report``)."""
    require_tls_for_reads(settings)
    with client_factory(settings) as client:
        result = run_report(client, template_vmid=template_vmid, tls_verified=settings.tls_verified)
    return dict(result, node_ssh=node_ssh_report(result["nodes"], node_ssh))
