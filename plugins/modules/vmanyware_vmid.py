#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_vmid
short_description: Reserve the lowest free VMID of a range with a lease in the local journal, or release such leases
version_added: 0.2.0
description:
  - Reserves a VMID for O(owner) and returns it (RV(vmid)), so that a plan can be built for C(target_vmid=auto). Proxmox is only
    read (C(GET /cluster/resources), C(GET /cluster/options), C(GET /cluster/nextid)); the reservation is a lease file in the
    journal directory.
  - Free means not listed by C(GET /cluster/resources) (qemu VMs, templates and LXC containers alike), not held by a live local
    operation or by another unexpired lease, and accepted by C(GET /cluster/nextid?vmid=N).
  - The range is O(vmid_range); else, for O(purpose=vm), the datacenter's C(next-id) setting (C(GET /cluster/options), visible
    only with C(Sys.Audit) on C(/)); else 100-999999999. Templates (O(purpose=template)) use O(vmid_range) or 9000-9999.
  - Leases are created exclusively under the journal lock, so any number of processes reserving at once get distinct VMIDs.
  - The same O(owner) gets its live lease back (RV(reused=true)). When an operation is created for the VMID, the lease becomes that
    operation's target claim; releasing the claim (closing or abandoning the operation) then frees the VMID. A lease otherwise ends
    on expiry (O(lease_seconds)) or with O(state=released).
  - A lease belongs to a provider scope, computed from the server certificate, so both states need verified TLS - O(validate_certs)
    with a CA file or the system CAs, or a O(api_fingerprint) pin; otherwise the module fails with C(tls_unverified) before any
    connection. O(unverified_tls_read_only) does not apply (a lease is never computed from an unverified certificate).
  - See "Automatic VMIDs" in C(docs/operations.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.attributes
options:
  state:
    description:
      - V(reserved) reserves (or reuses) a VMID.
      - V(released) removes O(owner)'s leases for O(purpose) (only O(vmid)'s when given), and with each the placement lease of that
        VMID (M(vmanyware.proxmox.vmanyware_placement) with O(vmanyware.proxmox.vmanyware_placement#module:vmid)); operations'
        target claims are never touched.
        It sends no API request (the provider is identified by its certificate, as M(vmanyware.proxmox.vmanyware_operation) does).
    type: str
    choices: [reserved, released]
    default: reserved
  owner:
    description:
      - Who holds the lease, for example the definition file. 1-512 characters without control characters; not a secret.
      - A review run and its apply run pass the same owner, so the apply run reuses the review run's lease.
    type: str
    required: true
  purpose:
    description: V(vm) for a new VM, V(template) for a template (its own range).
    type: str
    choices: [vm, template]
    default: vm
  vmid:
    description:
      - Reserve exactly this VMID (the one a confirmation names). O(owner)'s live lease on it is reused; a VMID that already became an
        operation's target claim is returned with RV(claimed_by); a VMID that is free again after its lease expired is leased anew.
      - Anything else fails with C(vmid_taken) (a guest holds it, or another owner's live lease).
    type: int
  vmid_range:
    description:
      - C([lower, upper]), both inclusive, within 100-999999999. Not used with O(vmid).
    type: list
    elements: int
  lease_seconds:
    description: How long a new lease lasts (1-604800 seconds). A reused lease keeps its expiry.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details:
      - Makes the same reads and returns the VMID it would reserve (or release); writes no lease.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - The same owner gets the same live lease back with C(changed=false).
requirements:
  - requests
  - truststore
notes:
  - A lease protects a VMID against other automatic allocations through the same journal directory. Another tool (or a person)
    may still take the VMID on Proxmox; the clone stage then stops with C(vmid_taken) and creates nothing.
"""

EXAMPLES = r"""
- name: Reserve a VMID for the definition (review run)
  vmanyware.proxmox.vmanyware_vmid:
    owner: /srv/envs/kernel-lab.yml
  register: reserved

- name: Plan with the concrete VMID
  vmanyware.proxmox.vmanyware_plan:
    catalog_path: files/catalog.yml
    definition_path: /srv/envs/kernel-lab.yml
    target_vmid: "{{ reserved.vmid }}"

- name: Apply run - reuse the lease of the confirmed VMID
  vmanyware.proxmox.vmanyware_vmid:
    owner: /srv/envs/kernel-lab.yml
    vmid: "{{ provision_confirmation.targetVmid }}"

- name: Reserve a template VMID in its own range
  vmanyware.proxmox.vmanyware_vmid:
    owner: template-build-debian-13
    purpose: template
    vmid_range: [9000, 9099]

- name: Give the lease back
  vmanyware.proxmox.vmanyware_vmid:
    owner: /srv/envs/kernel-lab.yml
    state: released
"""

RETURN = r"""
vmid:
  description: The reserved VMID.
  returned: with O(state=reserved)
  type: int
  sample: 104
reused:
  description: Whether an existing lease (or an operation's claim, see RV(claimed_by)) was returned instead of a new lease.
  returned: with O(state=reserved)
  type: bool
claimed_by:
  description: The operation whose target claim the lease has become (with O(vmid) only); V(null) otherwise.
  returned: with O(state=reserved)
  type: str
lease:
  description:
    - The lease as stored (keys in snake_case; the lease file keeps its camelCase).
    - V(null) when the VMID is held by an operation's claim (RV(claimed_by)).
  returned: with O(state=reserved)
  type: dict
  contains:
    vmid:
      description: The VMID.
      type: int
      returned: always
    owner:
      description: The lease owner.
      type: str
      returned: always
    purpose:
      description: V(vm) or V(template).
      type: str
      returned: always
    provider_scope_id:
      description: The provider scope the VMID belongs to.
      type: str
      returned: always
    created_at:
      description: When the lease was taken (UTC, ISO 8601).
      type: str
      returned: always
    expires_at:
      description: When the lease ends unless an operation was created for the VMID first (UTC, ISO 8601).
      type: str
      returned: always
vmid_range:
  description: The range searched, C(lower) and C(upper) (inclusive) and C(source) (V(option), V(next_id), V(template_default),
    V(default)); V(null) when a lease was reused or O(vmid) was given.
  returned: with O(state=reserved)
  type: dict
released:
  description: The VMIDs whose leases were (or, in check mode, would be) removed.
  returned: with O(state=released)
  type: list
  elements: int
provider_scope_id:
  description: The provider scope of the leases.
  returned: success
  type: str
error_code:
  description: On failure, the fixed error code, for example V(no_free_vmid), V(vmid_taken), V(tls_unverified), V(invalid_option), V(journal_locked).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    connection_argument_spec,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    require_verified_tls,
    verified_scope,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import (
    journal_argument_spec,
    open_store,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.vmid import (
    DEFAULT_LEASE_SECONDS,
    PURPOSES,
    STATES,
    release,
    reserve,
)


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec.update(journal_argument_spec())
    spec.update(
        {
            "state": {"type": "str", "choices": list(STATES), "default": "reserved"},
            "owner": {"type": "str", "required": True},
            "purpose": {"type": "str", "choices": list(PURPOSES), "default": "vm"},
            "vmid": {"type": "int"},
            "vmid_range": {"type": "list", "elements": "int"},
            "lease_seconds": {"type": "int", "default": DEFAULT_LEASE_SECONDS},
        }
    )
    return spec


def action(params, check_mode, diff) -> dict:
    store = open_store(params["journal_dir"])
    settings = connection_settings(params)
    require_verified_tls(settings)  # a lease is bound to a verified provider scope; nothing is sent otherwise
    if params["state"] == "released":
        scope = verified_scope(settings)
        return release(
            store, scope, owner=params["owner"], purpose=params["purpose"], vmid=params["vmid"], check_mode=check_mode
        )
    with ProxmoxClient(settings) as client:
        return reserve(
            store,
            client,
            owner=params["owner"],
            purpose=params["purpose"],
            vmid=params["vmid"],
            vmid_range=params["vmid_range"],
            lease_seconds=params["lease_seconds"],
            check_mode=check_mode,
        )


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action, libraries=("requests",))


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
