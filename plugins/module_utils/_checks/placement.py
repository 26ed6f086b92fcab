# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Placement: the node ``target_node: auto`` resolves to, chosen by one documented rule from GETs only
(docs/operations.md, "Placement (``target_node: auto``)").

Candidates are the cluster's nodes (``GET /nodes``). A node qualifies when all of these hold, each read, never assumed:

1. online (``GET /nodes``), and not in HA maintenance (``GET /cluster/ha/status/manager_status``: the CRM's
   ``node_status`` or the node's LRM ``mode`` says ``maintenance``; unreadable: ``maintenance_unknown``);
2. the storage of the node's mapping exists there, is enabled and active and takes the guest's content (``images``, or
   ``rootdir`` for a container);
3. the NIC's bridge exists there, VLAN-aware when the NIC has a VLAN tag;
4. the template is reachable: the catalog maps the image on that node (a per-node template), or the image's first
   mapping's template has every volume on shared storage (a clone with Proxmox's ``target``; never for a container);
5. free memory (``maxmem - mem``) and the storage's ``avail``, each minus what the journal's confirmed but unfinished
   operations (``_journal/pending.py``) and the live placement leases of other reviewed plans
   (``_journal/placement_leases.py``) on that node ask for, cover the definition's memory and disk.

Among qualifying nodes: fewest expected guests (running guests of ``GET /cluster/resources?type=vm``, plus the pending
operations and the other plans' placement leases on the node, each VMID once), then most free memory (after the
subtraction), then node name. ``prefer`` (the node an apply run's confirmation names) is kept when it qualifies, so the
plan, and so the confirmation, stay what was reviewed. It is examined first, and while it qualifies the other nodes'
storage and bridge are not read (``not_examined`` lists them: the rule keeps it whatever they say); when it no longer
qualifies every node is examined, the rule chooses (``preferred_kept`` false) and the confirmation then no longer
matches (``plan_changed``). No node qualifies: ``no_node_qualifies`` with
every candidate's reasons. Reasons are fixed codes and texts; provider bodies are never forwarded.

The journal is reached only through ``PlacementJournal`` (``_core/protocols.py``; checks never import the journal): the
Proxmox reads come first, then, under the journal lock, the pending operations and leases are read, the node is chosen
and, for a plan whose target VMID is given, its placement lease is written (replaced), so concurrent reviews serialize
and each counts the ones before it (docs/operations.md, "Placement leases").

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import typing as t

from .._core.errors import InputError, ProviderError, VmanywareError
from .._core.protocols import ApiClient, PlacementJournal
from .._formats.catalog import is_container
from .._formats.networks import pool_placeholders
from .._formats.plan import check_target_node, check_target_vmid, planned_network, resolve_mapping
from .clone_source import PASSED, shared_flags, source_shared

MIB = 1024**2
GIB = 1024**3
RULE = "online, not in maintenance, storage and bridge there, template reachable, memory and storage free after the "
RULE += "journal's pending operations and placement leases; then fewest expected guests (running + pending + leased), "
RULE += "most free memory, node name"
# The fixed text of every reason a node does not qualify (result ``candidates[].reasons``, docs/operations.md).
REASONS = {
    "offline": "The node is offline.",
    "maintenance": "The node is in HA maintenance mode.",
    "maintenance_unknown": "The HA manager status could not be read (Sys.Audit on /): maintenance mode is unknown.",
    "storage_missing": "The storage does not exist on the node.",
    "storage_inactive": "The storage is disabled or not active on the node.",
    "storage_content": "The storage does not take the guest's disks (content type).",
    "storage_not_shared": "The plan's storage is not shared, and a clone to another node must go to shared storage.",
    "storage_unknown": "The storage status on the node could not be read.",
    "bridge_missing": "The bridge does not exist on the node.",
    "bridge_not_vlan_aware": "The bridge is not VLAN-aware, and the network has a VLAN tag.",
    "bridge_unknown": "The node's network interfaces could not be read.",
    "template_unreachable": "No catalog mapping on the node, and the template is not on shared storage.",
    "template_unknown": "No catalog mapping on the node, and whether the template is on shared storage is unknown.",
    "memory_short": "Free memory, after the journal's pending operations and leases, is less than the definition's memory.",
    "memory_unknown": "The node does not report its memory.",
    "storage_space_short": "Free storage, after the journal's pending operations and leases, is less than the definition's disk.",
    "storage_space_unknown": "The storage does not report its available space.",
}


@dataclasses.dataclass
class Candidate:
    """One node and what the reads said about it."""

    node: str
    reasons: list[str] = dataclasses.field(default_factory=list)
    clone: str | None = None  # per-node-template | target
    running_guests: int = 0
    pending_guests: int = 0  # confirmed, unfinished operations on the node whose guest is not running yet
    leased_guests: int = 0  # other reviewed plans' live placement leases on the node (no guest, no operation yet)
    free_memory: int | None = None
    free_storage: int | None = None
    storage: str | None = None  # the storage of the node's mapping: pending operations on it are subtracted
    running: frozenset[int] = frozenset()  # the VMIDs running there: a pending operation's running guest counts once

    @property
    def expected_guests(self) -> int:
        """The rule's first ordering key: the guests the node will run once what the journal expects exists."""
        return self.running_guests + self.pending_guests + self.leased_guests

    def counts(self) -> str:
        return "%d expected: %d running, %d pending, %d leased" % (
            self.expected_guests,
            self.running_guests,
            self.pending_guests,
            self.leased_guests,
        )

    def why(self, chosen: Candidate | None, kept: bool) -> str:
        """The fixed text of why the node was or was not chosen, with the counts the rule compared."""
        if self.reasons:
            return " ".join(REASONS[code] for code in self.reasons)
        if chosen is None:  # pragma: no cover - a qualifying node always leaves a chosen one
            return "qualifies"
        if self is chosen:
            if kept:
                return "chosen: the node the confirmation names, and it still qualifies (%s guests)" % self.counts()
            return "chosen: fewest expected guests (%s), then most free memory, then name" % self.counts()
        if self.expected_guests > chosen.expected_guests:
            return "qualifies; more expected guests than the chosen node (%s, chosen %d)" % (
                self.counts(),
                chosen.expected_guests,
            )
        if (self.free_memory or 0) < (chosen.free_memory or 0):
            return "qualifies; as many expected guests as the chosen node (%d), less free memory" % self.expected_guests
        return (
            "qualifies; ties with the chosen node (%d expected guests, as much free memory), whose name sorts first"
            % (self.expected_guests)
        )

    def to_result(self, chosen: Candidate | None, kept: bool = False) -> dict[str, t.Any]:
        return {
            "node": self.node,
            "qualifies": not self.reasons,
            "chosen": self is chosen,
            "reasons": list(self.reasons),
            "reason": self.why(chosen, kept),
            "clone": self.clone,
            "running_guests": self.running_guests,
            "pending_guests": self.pending_guests,
            "leased_guests": self.leased_guests,
            "expected_guests": self.expected_guests,
            "free_memory_bytes": self.free_memory,
            "free_storage_bytes": self.free_storage,
        }


def _as_int(value: t.Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def _truthy(value: t.Any) -> bool:
    return value in (1, True, "1", "on", "yes", "true")


def _unexpected(path: str) -> ProviderError:
    return ProviderError(
        "Proxmox answered with a body the collection does not understand.",
        code="unexpected_response",
        details={"method": "GET", "path": path},
    )


class Placement:
    """One placement run: the plan's inputs (parsed catalog and definition), the client, the journal (pending
    operations and placement leases)."""

    def __init__(
        self,
        client: ApiClient,
        catalog: t.Mapping[str, t.Any],
        definition: t.Mapping[str, t.Any],
        journal: PlacementJournal,
    ) -> None:
        self.client = client
        self.catalog = catalog
        self.definition = definition
        self.journal = journal
        self.leased = pool_placeholders(catalog, definition)  # address: auto does not change the bridge or VLAN
        self.first = resolve_mapping(catalog, definition, None, self.leased)  # image_not_mapped when there is none
        self.mapped_nodes = {m["node"] for m in catalog["images"] if m["image"] == definition["image"]}
        self._shared: str | None = None  # source_shared status of the first mapping's template, read once

    # -- cluster-wide reads ---------------------------------------------------------------------------------------
    def nodes(self) -> dict[str, dict[str, t.Any]]:
        data = self.client.get("/nodes")
        if not isinstance(data, list):
            raise _unexpected("/nodes")
        return {str(e["node"]): e for e in data if isinstance(e, dict) and isinstance(e.get("node"), str)}

    def maintenance(self) -> dict[str, bool] | None:
        """``node -> in maintenance`` from the HA manager; None when it cannot be read (a token without Sys.Audit on /)."""
        try:
            data = self.client.get("/cluster/ha/status/manager_status")
        except ProviderError:
            return None
        if not isinstance(data, dict):
            return None
        status = (data.get("manager_status") or {}).get("node_status") or {}
        lrm = data.get("lrm_status") or {}
        if not isinstance(status, dict) or not isinstance(lrm, dict):
            return None
        names = set(status) | set(lrm)
        return {
            str(name): status.get(name) == "maintenance"
            or (isinstance(lrm.get(name), dict) and lrm[name].get("mode") == "maintenance")
            for name in names
        }

    def running_guests(self) -> dict[str, frozenset[int]]:
        """``node -> the VMIDs running there`` (VMs and containers)."""
        data = self.client.get("/cluster/resources", type="vm")
        if not isinstance(data, list):
            raise _unexpected("/cluster/resources")
        running: dict[str, set[int]] = {}
        for index, entry in enumerate(data):
            if isinstance(entry, dict) and entry.get("status") == "running" and isinstance(entry.get("node"), str):
                vmid = _as_int(entry.get("vmid"))
                running.setdefault(entry["node"], set()).add(vmid if vmid is not None else -1 - index)
        return {node: frozenset(vmids) for node, vmids in running.items()}

    # -- per node -------------------------------------------------------------------------------------------------
    def template_reachable(self, node: str, mapping: t.Mapping[str, t.Any]) -> tuple[str | None, str | None]:
        """(clone method, reason code): a mapping on the node, or the first mapping's template on shared storage."""
        if node in self.mapped_nodes:
            return "per-node-template", None
        if is_container(mapping):
            return None, "template_unreachable"
        if self._shared is None:
            source = self.first["node"]
            try:
                config = self.client.get("/nodes/%s/qemu/%d/config" % (source, self.first["templateVmid"]))
            except ProviderError:
                config = None
            if isinstance(config, dict):
                self._shared = source_shared(config, shared_flags(self.client, source))[0]
            else:
                self._shared = "unknown"
        if self._shared == PASSED:
            return "target", None
        return None, "template_unreachable" if self._shared == "failed" else "template_unknown"

    def storage(self, candidate: Candidate, node: str, mapping: t.Mapping[str, t.Any]) -> None:
        storage = mapping["storage"]
        try:
            status = self.client.get("/nodes/%s/storage/%s/status" % (node, storage))
        except ProviderError as err:
            missing = err.code == "not_found" or (
                err.code == "parameter_invalid" and "storage" in err.details.get("parameters", [])
            )
            candidate.reasons.append("storage_missing" if missing else "storage_unknown")
            return
        if not isinstance(status, dict):
            candidate.reasons.append("storage_unknown")
            return
        if not _truthy(status.get("active")) or status.get("enabled") not in (None, 1, True, "1"):
            candidate.reasons.append("storage_inactive")
        wanted = "rootdir" if is_container(mapping) else "images"
        content = status.get("content")
        if not isinstance(content, str) or wanted not in [c.strip() for c in content.split(",")]:
            candidate.reasons.append("storage_content")
        if candidate.clone == "target" and not _truthy(status.get("shared")):
            candidate.reasons.append("storage_not_shared")  # qemu-server: can't clone to non-shared storage
        candidate.free_storage = _as_int(status.get("avail"))

    def bridge(self, candidate: Candidate, node: str, nic: t.Mapping[str, t.Any]) -> None:
        try:
            interfaces = self.client.get("/nodes/%s/network" % node, type="any_bridge")
        except ProviderError:
            candidate.reasons.append("bridge_unknown")
            return
        if not isinstance(interfaces, list):
            candidate.reasons.append("bridge_unknown")
            return
        entry = next((i for i in interfaces if isinstance(i, dict) and i.get("iface") == nic["bridge"]), None)
        if entry is None:
            candidate.reasons.append("bridge_missing")
        elif "vlan" in nic and not _truthy(entry.get("bridge_vlan_aware")):
            candidate.reasons.append("bridge_not_vlan_aware")

    def examine(
        self, node: str, entry: t.Mapping[str, t.Any], maintenance: dict[str, bool] | None, running: frozenset[int]
    ) -> Candidate:
        candidate = Candidate(node, running_guests=len(running), running=running)
        if entry.get("status") != "online":
            candidate.reasons.append("offline")
            return candidate
        if maintenance is None:
            candidate.reasons.append("maintenance_unknown")
        elif maintenance.get(node):
            candidate.reasons.append("maintenance")
        try:
            mapping = resolve_mapping(self.catalog, self.definition, node, self.leased)
        except InputError:  # a container image not mapped on this node
            mapping = dict(self.first)
        candidate.clone, unreachable = self.template_reachable(node, mapping)
        if unreachable:
            candidate.reasons.append(unreachable)
        self.storage(candidate, node, mapping)
        self.bridge(candidate, node, planned_network(mapping))
        maxmem, mem = _as_int(entry.get("maxmem")), _as_int(entry.get("mem"))
        candidate.free_memory = maxmem - mem if maxmem is not None and mem is not None else None
        candidate.storage = mapping["storage"]
        return candidate

    def subtract(
        self,
        candidate: Candidate,
        pending: t.Sequence[t.Mapping[str, t.Any]],
        leases: t.Sequence[t.Mapping[str, t.Any]] = (),
    ) -> None:
        """Count the pending operations and leases on the node (each VMID once, a running guest not again); free memory
        and storage minus what they ask for (disks on the node's storage only), then the thresholds."""
        counted: set[t.Any] = set(candidate.running)
        candidate.pending_guests = self.new_guests(candidate.node, pending, counted)
        candidate.leased_guests = self.new_guests(candidate.node, leases, counted)
        if "offline" in candidate.reasons:
            return
        mine = [p for p in list(pending) + list(leases) if p.get("node") == candidate.node]
        if candidate.free_memory is None:
            candidate.reasons.append("memory_unknown")
        else:
            candidate.free_memory -= sum(int(p.get("memoryMiB", 0)) for p in mine) * MIB
            if candidate.free_memory < int(self.definition["resources"]["memoryMiB"]) * MIB:
                candidate.reasons.append("memory_short")
        if not any(r.startswith("storage_") for r in candidate.reasons):
            if candidate.free_storage is None:
                candidate.reasons.append("storage_space_unknown")
            else:
                candidate.free_storage -= (
                    sum(int(p.get("diskGiB", 0)) for p in mine if p.get("storage") == candidate.storage) * GIB
                )
                if candidate.free_storage < int(self.definition["resources"]["diskGiB"]) * GIB:
                    candidate.reasons.append("storage_space_short")

    @staticmethod
    def new_guests(node: str, entries: t.Sequence[t.Mapping[str, t.Any]], counted: set[t.Any]) -> int:
        """How many of ``entries`` (pending operations or leases) are on ``node`` with a VMID not ``counted`` yet; those
        VMIDs are then counted (an entry without a VMID always counts)."""
        found = 0
        for entry in entries:
            vmid = entry.get("vmid")
            if entry.get("node") == node and (vmid is None or vmid not in counted):
                found += 1
                counted.add(vmid)
        return found

    def run(self, prefer: str | None, vmid: int | None) -> dict[str, t.Any]:
        entries = self.nodes()  # the first request: afterwards the provider scope is known
        maintenance = self.maintenance()
        running = self.running_guests()
        scope = self.client.provider_scope_id
        if not scope:
            raise VmanywareError("The provider scope could not be determined.", code="internal_error")

        def examine(nodes: t.Iterable[str]) -> list[Candidate]:
            return [self.examine(node, entries[node], maintenance, running.get(node, frozenset())) for node in nodes]

        if prefer in entries:
            # The apply run's confirmed node first: the rule keeps it while it qualifies, whatever the others say, so
            # their storage and bridge are read only when it no longer does (2 requests per other node saved).
            others = [node for node in sorted(entries) if node != prefer]
            result = self.choose(examine([prefer]), prefer, vmid, scope, not_examined=others)
            if result is not None:
                return result
        result = self.choose(examine(sorted(entries)), prefer, vmid, scope)
        if result is None:  # pragma: no cover - without not_examined a choice is made or no_node_qualifies raised
            raise VmanywareError("Placement made no choice.", code="internal_error")
        return result

    def choose(
        self,
        candidates: list[Candidate],
        prefer: str | None,
        vmid: int | None,
        scope: str,
        not_examined: t.Sequence[str] | None = None,
    ) -> dict[str, t.Any] | None:
        """Subtract what the journal expects, choose and hold the lease: one locked section. With ``not_examined``
        (only the preferred node examined) None, and nothing written, when that node does not qualify."""
        # The whole journal is read before the lock (it may hold thousands of operations); under the lock only what was
        # created meanwhile. What the journal expects, the choice and the lease are then one locked section: a
        # concurrent review waits here and then counts this one's lease.
        self.journal.pending(scope)
        with self.journal.locked():
            pending = self.journal.pending(scope)
            leases = self.journal.leases(scope, exclude_vmid=vmid)
            for candidate in candidates:
                self.subtract(candidate, pending, leases)
            if not_examined is not None and candidates[0].reasons:
                return None  # the preferred node no longer qualifies: every node is examined and the rule chooses
            try:
                result = decide(candidates, prefer, scope)
            except VmanywareError:
                if vmid is not None:
                    self.journal.drop(scope, vmid)  # a failed review holds no node: its earlier lease ends
                raise
            result.update(lease=None, lease_written=False, not_examined=list(not_examined or ()))
            if vmid is not None:
                chosen = next(c for c in candidates if c.node == result["node"])
                held = self.journal.hold(scope, vmid, self.choice(chosen))
                result.update(lease=public_lease(held["lease"]), lease_written=held["written"], changed=held["changed"])
        return result

    def choice(self, chosen: Candidate) -> dict[str, t.Any]:
        """What a lease counts for the chosen node: the guest's memory and disk on the node's storage."""
        resources = self.definition["resources"]
        return {
            "node": chosen.node,
            "storage": chosen.storage,
            "memoryMiB": int(resources["memoryMiB"]),
            "diskGiB": int(resources["diskGiB"]),
        }


def public_lease(lease: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A placement lease as the module returns it (snake_case keys; the file keeps its camelCase fields)."""
    return {
        "vmid": lease["vmid"],
        "node": lease["node"],
        "storage": lease["storage"],
        "memory_mib": lease["memoryMiB"],
        "disk_gib": lease["diskGiB"],
        "created_at": lease["createdAt"],
        "expires_at": lease["expiresAt"],
        "provider_scope_id": lease["providerScopeId"],
    }


def rank(candidates: t.Sequence[Candidate]) -> list[Candidate]:
    """The qualifying candidates in the rule's order: fewest expected guests, most free memory, node name."""
    qualifying = [c for c in candidates if not c.reasons]
    return sorted(qualifying, key=lambda c: (c.expected_guests, -(c.free_memory or 0), c.node))


def decide(candidates: t.Sequence[Candidate], prefer: str | None, scope: str) -> dict[str, t.Any]:
    """The module result: the chosen node (``prefer`` when it qualifies) and every candidate with its reasons."""
    ranked = rank(candidates)
    if not ranked:
        raise VmanywareError(
            code="no_node_qualifies",
            details={"candidates": [{"node": c.node, "reasons": list(c.reasons)} for c in candidates]},
        )
    kept = prefer is not None and any(c.node == prefer for c in ranked)
    chosen = next(c for c in ranked if c.node == prefer) if kept else ranked[0]
    return {
        "changed": False,
        "placed": True,
        "node": chosen.node,
        "clone": chosen.clone,
        "preferred_kept": kept if prefer is not None else None,
        "candidates": [c.to_result(chosen, kept) for c in candidates],
        "order": [c.node for c in ranked],
        "rule": RULE,
        "provider_scope_id": scope,
    }


def _check_vmid(vmid: t.Any) -> int:
    try:
        return check_target_vmid(vmid)
    except InputError:
        raise InputError(code="invalid_target_vmid", path="vmid", details={"rule": "range"}) from None


def place(
    client: ApiClient,
    catalog: t.Mapping[str, t.Any],
    definition: t.Mapping[str, t.Any],
    *,
    journal: PlacementJournal,
    vmid: int | None = None,
    prefer: str | None = None,
) -> dict[str, t.Any]:
    """Choose the node for the definition's guest (the module ``vmanyware_placement``); Proxmox is only read.

    ``journal``: the pending operations and placement leases (``_journal/placement_leases.py``, ``PlacementLedger``);
    ``vmid``: the reviewed plan's target VMID: its lease is written (replaced) with the choice and never counted;
    without it nothing is written; ``prefer``: the node an apply run's confirmation names (kept when it still qualifies).
    """
    preferred = check_target_node(prefer) if prefer else None
    target_vmid = _check_vmid(vmid) if vmid is not None else None
    wanted = definition.get("targetNode")
    if wanted not in (None, "auto"):
        raise InputError(
            "The definition names its node (targetNode): plan with that node; placement is for targetNode auto.",
            code="target_node_conflict",
            path="targetNode",
            details={"rule": "placement_for_auto"},
        )
    return Placement(client, catalog, definition, journal).run(preferred, target_vmid)


def placement_requested(target_node: str | None, definition: t.Mapping[str, t.Any]) -> bool:
    """Whether a run places the guest: the role's ``target_node`` is ``auto``, or it is unset and the definition asks
    for ``targetNode: auto``. Anything else plans without reading Proxmox for it (``not_placed``)."""
    if target_node:
        return target_node == "auto"
    return definition.get("targetNode") == "auto"


def not_placed(target_node: str | None, definition: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The result of a run that does not place: the node asked for (the role's, else the definition's), or ``None``
    for the mapping's node; nothing was read."""
    node = target_node or definition.get("targetNode")
    return {
        "changed": False,
        "placed": False,
        "node": node,
        "clone": None,
        "preferred_kept": None,
        "candidates": [],
        "not_examined": [],
        "order": [],
        "rule": RULE,
        "lease": None,
        "lease_written": False,
    }
