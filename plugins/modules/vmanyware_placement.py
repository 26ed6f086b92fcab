#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_placement
short_description: Choose the cluster node for a definition's guest by a documented rule (target_node auto), reading Proxmox only
version_added: 0.3.0
description:
  - Chooses the node a definition's guest goes to, so that a plan can be built for C(target_node=auto) with a concrete node
    (RV(node)); the plan, its C(planHash) and the confirmation then bind that node exactly as a node chosen by hand.
  - Proxmox is only read (C(GET /nodes), C(GET /cluster/ha/status/manager_status), C(GET /cluster/resources), and per node its
    storage status and network interfaces; the template's configuration and its node's storages when the guest may be cloned to
    another node). The journal is read (its confirmed but unfinished operations and the placement leases of other reviewed
    plans); with O(vmid) this plan's placement lease is written to it.
  - A node qualifies when it is online, not in HA maintenance mode, has the plan's storage (enabled, active, content C(images))
    and bridge (VLAN-aware when the network has a VLAN tag), the template is reachable from it (the catalog maps the image on
    that node, or the template's volumes are all on shared storage so Proxmox can clone it there with C(target)), and its free
    memory and storage space, minus what the journal's confirmed but unfinished operations and the other plans' live placement
    leases on that node ask for, cover the definition's memory and disk.
  - Among qualifying nodes the one with the fewest expected guests wins (running guests, plus the journal's pending operations and
    the other plans' live placement leases on the node), then the most free memory, then the node name. RV(candidates) lists
    every node with its counts and the reason it was or was not chosen.
  - With O(vmid), the choice is recorded as a placement lease for that VMID in the same journal-locked section in which the other
    leases were read, so reviews run at once (parallel forks, before anything is confirmed) serialize and spread over the nodes
    instead of all choosing the same one. A repeated review of the VMID replaces its lease. The lease ends when the operation for
    the VMID is created, after O(lease_seconds), or when the VMID lease of the VMID is released.
  - See "Placement" and "Placement leases" in C(docs/operations.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.plan_inputs.definition_sources
  - vmanyware.proxmox.attributes
options:
  catalog_path:
    description: Path of the template catalog (v1), as for M(vmanyware.proxmox.vmanyware_plan). Exactly one of this and O(catalog).
    type: path
  catalog:
    description: The template catalog as YAML text or a dictionary, as for M(vmanyware.proxmox.vmanyware_plan).
    type: raw
  definition_path:
    description: Path of the environment definition (v1). Exactly one of this and O(definition).
    type: path
  definition:
    description:
      - The environment definition as YAML text or a dictionary.
      - Its C(targetNode), when present, must be V(auto); a definition naming its node is planned for that node, and placement
        refuses it with C(target_node_conflict).
    type: raw
  prefer:
    description:
      - The node an apply run's confirmation names (C(targetNode)). When it still qualifies it is returned (RV(preferred_kept=true)),
        so the plan, and so the confirmation, stay what was reviewed; otherwise the rule chooses and RV(preferred_kept) is V(false)
        (the confirmation then no longer matches, and the run stops with C(plan_changed)).
    type: str
  target_node:
    description:
      - What the run asks for, as the roles' C(target_node) says it. V(auto) places the guest. A node name, or nothing while the
        definition's C(targetNode) is not V(auto), does not place it - nothing is read and RV(node) is that node (or V(null), meaning the
        mapping's) with RV(placed=false) - so the roles call this module on every run.
      - Unset, the definition's C(targetNode) decides (V(auto) places).
    type: str
  vmid:
    description:
      - The target VMID of the plan being reviewed (the roles pass the reserved or given VMID). The chosen node is then held by a
        placement lease for this VMID, which other reviews count and this VMID's own reviews do not; a repeated review replaces
        it, and a review where no node qualifies removes it.
      - Without it no lease is written; the other plans' leases are still counted.
    type: int
  lease_seconds:
    description:
      - How long the placement lease written for O(vmid) lives (1-604800). The roles pass their VMID lease time
        (C(vmid_lease_seconds)), so a review's VMID and node are held alike.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details:
      - Check mode makes the same reads and returns the same node, and writes no placement lease (RV(lease_written=false)).
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - Proxmox is only read; the same cluster and journal state gives the same node. A repeated review of the same O(vmid)
        renews its lease (C(changed) is V(false) unless the node or the resources it counts changed).
requirements:
  - requests
  - truststore
  - PyYAML
  - jsonschema
notes:
  - Needs verified TLS (a CA or a O(api_fingerprint) pin), since the journal's pending operations and leases are counted per provider
    scope.
  - HA maintenance mode is read from C(GET /cluster/ha/status/manager_status), which needs C(Sys.Audit) on C(/); without it every
    node is excluded with V(maintenance_unknown).
"""

EXAMPLES = r"""
- name: Choose a node (review run) and hold it for VMID 201, so reviews running at the same time spread
  vmanyware.proxmox.vmanyware_placement:
    catalog_path: files/catalog.yml
    definition_path: /srv/envs/kernel-lab.yml
    vmid: 201
  register: placed

- name: Plan for the chosen node
  vmanyware.proxmox.vmanyware_plan:
    catalog_path: files/catalog.yml
    definition_path: /srv/envs/kernel-lab.yml
    target_vmid: 201
    target_node: "{{ placed.node }}"

- name: Apply run - keep the confirmed node while it still qualifies
  vmanyware.proxmox.vmanyware_placement:
    catalog_path: files/catalog.yml
    definition_path: /srv/envs/kernel-lab.yml
    prefer: "{{ provision_confirmation.targetNode }}"
    vmid: "{{ provision_confirmation.targetVmid }}"
"""

RETURN = r"""
placed:
  description: Whether the guest was placed (O(target_node=auto), or the definition's C(targetNode) V(auto)); V(false) when nothing was read.
  returned: success
  type: bool
node:
  description: The chosen node; without placement the node asked for, or V(null) (the mapping's node).
  returned: success
  type: str
  sample: pve-test2
clone:
  description: How the guest reaches the chosen node, V(per-node-template) (the catalog maps the image there) or V(target).
  returned: success
  type: str
preferred_kept:
  description: With O(prefer), whether that node still qualified and was kept; V(null) without O(prefer).
  returned: success
  type: bool
not_examined:
  description:
    - The nodes whose storage and bridge were not read because O(prefer) was examined first and still qualifies, sorted by
      name; empty otherwise (every node examined, or nothing placed).
  returned: success
  type: list
  elements: str
  sample: [pve-test, pve-test3]
candidates:
  description:
    - Every node examined, sorted by name, with what the reads said. That is every node of the cluster, except when O(prefer)
      still qualifies. Then only that node is examined (the rule keeps it whatever the others say), and RV(not_examined) lists
      the others.
  returned: success
  type: list
  elements: dict
  contains:
    node:
      description: The node.
      type: str
      returned: always
    qualifies:
      description: Whether the node qualifies.
      type: bool
      returned: always
    chosen:
      description: Whether it is RV(node).
      type: bool
      returned: always
    reasons:
      description: The fixed codes of what excludes it (empty when it qualifies), as listed in C(docs/operations.md).
      type: list
      elements: str
      returned: always
    reason:
      description:
        - Why it was or was not chosen, a fixed text with the numbers the rule compared. The chosen node's text starts with
          C(chosen:) and names its expected guests (running, pending, leased); a qualifying node ranked after it says whether it
          has more expected guests, as many with less free memory, or ties and sorts after it by name; a node that does not
          qualify gets the texts of its RV(candidates[].reasons).
      type: str
      returned: always
    clone:
      description: V(per-node-template), V(target) or V(null) (the template is not reachable, or the node was not examined).
      type: str
      returned: always
    running_guests:
      description: Running guests on the node.
      type: int
      returned: always
    pending_guests:
      description: The journal's confirmed but unfinished operations on the node whose guest is not running yet.
      type: int
      returned: always
    leased_guests:
      description: Live placement leases of other reviewed plans on the node (this plan's own O(vmid) is never counted).
      type: int
      returned: always
    expected_guests:
      description: RV(candidates[].running_guests) + RV(candidates[].pending_guests) + RV(candidates[].leased_guests), the rule's
        first ordering key.
      type: int
      returned: always
    free_memory_bytes:
      description: Free memory after the journal's pending operations and leases; V(null) when unknown or not examined.
      type: int
      returned: always
    free_storage_bytes:
      description: The storage's available space after the journal's pending operations and leases; V(null) when unknown.
      type: int
      returned: always
order:
  description: The qualifying nodes in the rule's order.
  returned: success
  type: list
  elements: str
rule:
  description: The rule in one line.
  returned: success
  type: str
provider_scope_id:
  description: The provider scope whose pending operations and leases were counted.
  returned: success
  type: str
lease:
  description:
    - With O(vmid), the placement lease written for it (in check mode, the lease that would have been written); V(null) without
      O(vmid) or when the guest was not placed.
  returned: success
  type: dict
  contains:
    vmid:
      description: The plan's target VMID.
      type: int
      returned: always
    node:
      description: The chosen node, which the lease holds.
      type: str
      returned: always
    storage:
      description: The storage of the node's mapping, where the lease counts the disk.
      type: str
      returned: always
    memory_mib:
      description: The memory the lease counts on the node (the definition's C(memoryMiB)).
      type: int
      returned: always
    disk_gib:
      description: The disk the lease counts on the storage (the definition's C(diskGiB)).
      type: int
      returned: always
    created_at:
      description: When the lease was written (UTC).
      type: str
      returned: always
    expires_at:
      description: When the lease ends unless the operation is created or the VMID lease released before (O(lease_seconds) later).
      type: str
      returned: always
    provider_scope_id:
      description: The provider scope of the lease.
      type: str
      returned: always
lease_written:
  description: Whether RV(lease) was written to the journal; V(false) without O(vmid), without placement, and in check mode.
  returned: success
  type: bool
error_code:
  description: On failure, the fixed error code, for example V(no_node_qualifies), V(target_node_conflict), V(tls_unverified).
  returned: failure
  type: str
error_details:
  description: With V(no_node_qualifies), C(candidates) (each C(node) and its C(reasons)).
  returned: failure, when available
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    connection_argument_spec,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.placement import (
    not_placed,
    place,
    placement_requested,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    PLAN_INPUT_CONSTRAINTS,
    definition_from_params,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.placement_leases import (
    DEFAULT_LEASE_SECONDS,
    PlacementLedger,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import require_verified_tls
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import (
    journal_argument_spec,
    open_store,
)


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(journal_argument_spec())
    spec.update(
        {
            "catalog_path": {"type": "path"},
            "catalog": {"type": "raw"},
            "definition_path": {"type": "path"},
            "definition": {"type": "raw"},
            "presets_path": {"type": "path"},
            "presets": {"type": "list", "elements": "raw"},
            "profiles_path": {"type": "path"},
            "profiles": {"type": "list", "elements": "raw"},
            "prefer": {"type": "str"},
            "target_node": {"type": "str"},
            "vmid": {"type": "int"},
            "lease_seconds": {"type": "int", "default": DEFAULT_LEASE_SECONDS},
        }
    )
    return spec


def action(params, check_mode, diff) -> dict:
    catalog = parse_catalog(text=params["catalog"], path=params["catalog_path"])
    definition = definition_from_params(params).definition  # merged with its preset (docs/profiles.md)
    if not placement_requested(params["target_node"], definition):  # offline: the roles call this on every run
        return not_placed(params["target_node"], definition)
    store = open_store(params["journal_dir"])
    ledger = PlacementLedger(store, lease_seconds=params["lease_seconds"], check_mode=check_mode)
    settings = connection_settings(params)
    # pending operations and leases are counted per verified provider scope; nothing is sent otherwise
    require_verified_tls(settings)
    with ProxmoxClient(settings) as client:
        return place(
            client,
            catalog,
            definition,
            journal=ledger,
            vmid=params["vmid"],
            prefer=params["prefer"] or None,
        )


ENTRY = ModuleEntry(
    argument_spec=argument_spec,
    action=action,
    libraries=("requests", "PyYAML", "jsonschema"),
    **PLAN_INPUT_CONSTRAINTS,
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
