#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_address
short_description: Lease static addresses from a catalog network's pool for a definition that sets C(address) to V(auto)
version_added: 0.3.0
description:
  - For each address family (IPv4, IPv6) whose C(network) in the definition sets C(address) to V(auto), leases the lowest address of the
    catalog network's C(pool) that is free and returns it (RV(addresses)), so that a plan can be built with it
    (M(vmanyware.proxmox.vmanyware_plan)'s O(vmanyware.proxmox.vmanyware_plan#module:addresses)). Proxmox is only read; the
    reservation is a lease file in the journal directory.
  - Free means not the subnet's network, broadcast or gateway address; not declared by any guest Proxmox shows
    (C(GET /cluster/resources) and each guest's configuration, C(ipconfigN) of VMs and C(netN) of containers); not planned by an
    unreleased operation of the journal (its address claim); and not leased to another owner.
  - Leases are created under the journal lock, so concurrent reservations (forks, processes, AWX slices sharing the journal) get
    distinct addresses. The same O(owner) gets its live lease back (RV(reused)).
  - When an operation is created whose plan has the address, the lease becomes that operation's address claim; releasing the
    operation (closing, abandoning or cleaning it up) frees the address. A lease otherwise ends on expiry (O(lease_seconds)) or with
    O(state=released).
  - A definition without C(network), or without an C(address) of V(auto), reserves nothing and sends nothing (RV(addresses) is empty).
  - Both states need verified TLS (a CA file or a O(api_fingerprint) pin), as leases belong to a provider scope.
  - See "Address pools and leases" in C(docs/networks.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.stage.journal
  - vmanyware.proxmox.plan_inputs.definition_sources
  - vmanyware.proxmox.attributes
options:
  state:
    description:
      - V(reserved) reserves (or reuses) the addresses the definition leaves to the pool.
      - V(released) removes O(owner)'s address leases (operations' address claims are never touched); it sends no API request.
    type: str
    choices: [reserved, released]
    default: reserved
  owner:
    description:
      - Who holds the leases, for example the definition file. 1-512 characters without control characters; not a secret.
      - A review run and its apply run pass the same owner, so the apply run reuses the review run's leases.
    type: str
    required: true
  catalog_path:
    description: Path to the template catalog (YAML or JSON) that declares the network. Needed with O(state=reserved).
    type: path
  catalog:
    description: The template catalog as a string or mapping. Mutually exclusive with O(catalog_path).
    type: raw
  definition_path:
    description: Path to the environment definition. Needed with O(state=reserved).
    type: path
  definition:
    description: The environment definition as a string or mapping. Mutually exclusive with O(definition_path).
    type: raw
  addresses:
    description:
      - Reserve exactly these addresses, by C(ipv4) and C(ipv6) (the ones a confirmation names). O(owner)'s live lease is reused; an
        address already planned by an operation is returned with RV(claimed_by); an address free again after its lease expired
        is leased anew. Anything else fails with C(address_taken).
    type: dict
  lease_seconds:
    description: How long a new lease lasts (1-604800 seconds). A reused lease keeps its expiry.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    details:
      - Makes the same reads and returns the addresses it would lease; writes no lease.
  diff_mode:
    support: none
  idempotent:
    support: full
    details:
      - The same owner gets the same live leases back with C(changed=false).
requirements:
  - requests
  - truststore
notes:
  - A lease protects an address against other automatic allocations through the same journal directory. A host outside Proxmox
    may still use it; the preflight says so (C(address_outside_proxmox) is always C(unknown)).
"""

EXAMPLES = r"""
- name: Lease the addresses the definition leaves to the pool (review run)
  vmanyware.proxmox.vmanyware_address:
    owner: /srv/envs/web.yml
    catalog_path: files/catalog.yml
    definition_path: /srv/envs/web.yml
  register: leased

- name: Plan with them
  vmanyware.proxmox.vmanyware_plan:
    catalog_path: files/catalog.yml
    definition_path: /srv/envs/web.yml
    target_vmid: 201
    addresses: "{{ leased.addresses }}"

- name: Give the leases back
  vmanyware.proxmox.vmanyware_address:
    owner: /srv/envs/web.yml
    state: released
"""

RETURN = r"""
addresses:
  description: The leased addresses by family (C(ipv4), C(ipv6)), without prefix; empty when the definition asks for none.
  returned: with O(state=reserved)
  type: dict
  sample: {"ipv4": "192.0.2.100"}
network:
  description: The catalog network the definition names; V(null) without one.
  returned: with O(state=reserved)
  type: str
reused:
  description: Per family, whether an existing lease (or an operation's claim) was returned instead of a new lease.
  returned: with O(state=reserved)
  type: dict
claimed_by:
  description: Per family, the operation whose address claim the lease has become (with O(addresses) only).
  returned: with O(state=reserved)
  type: dict
leases:
  description: Per family, the lease as stored (keys in snake_case); absent for an address held by an operation's claim.
  returned: with O(state=reserved)
  type: dict
guests_unread:
  description: How many guests' configurations could not be read (their addresses were not seen); the preflight reports them.
  returned: when an address was reserved
  type: int
released:
  description: The leases removed (or, in check mode, that would be), each with C(family), C(address) and C(network).
  returned: with O(state=released)
  type: list
  elements: dict
provider_scope_id:
  description: The provider scope of the leases.
  returned: when an address was reserved, and with O(state=released)
  type: str
error_code:
  description: On failure, the fixed error code, for example V(no_free_address), V(address_taken), V(invalid_network_address),
    V(network_not_in_catalog), V(tls_unverified), V(journal_locked).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    connection_argument_spec,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import InputError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    check_addresses,
    definition_from_params,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.vmid import (
    DEFAULT_LEASE_SECONDS,
    STATES,
    check_lease_seconds,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.addresses import (
    no_leases,
    release,
    reserve_for_definition,
    wants_leases,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    require_verified_tls,
    verified_scope,
)
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
            "state": {"type": "str", "choices": list(STATES), "default": "reserved"},
            "owner": {"type": "str", "required": True},
            "catalog_path": {"type": "path"},
            "catalog": {"type": "raw"},
            "definition_path": {"type": "path"},
            "definition": {"type": "raw"},
            "presets_path": {"type": "path"},
            "presets": {"type": "list", "elements": "raw"},
            "profiles_path": {"type": "path"},
            "profiles": {"type": "list", "elements": "raw"},
            "addresses": {"type": "dict"},
            "lease_seconds": {"type": "int", "default": DEFAULT_LEASE_SECONDS},
        }
    )
    return spec


def action(params, check_mode, diff) -> dict:
    if params["state"] == "released":
        settings = connection_settings(params)
        require_verified_tls(settings)  # a lease is bound to a verified provider scope; nothing is sent otherwise
        return release(
            open_store(params["journal_dir"]), verified_scope(settings), owner=params["owner"], check_mode=check_mode
        )
    for source in ("catalog", "definition"):
        if params[source] is None and params[source + "_path"] is None:
            raise InputError(
                "state=reserved needs the %s (%s or %s_path)." % (source, source, source),
                path=source,
                details={"rule": "required"},
            )
    catalog = parse_catalog(text=params["catalog"], path=params["catalog_path"])
    definition = definition_from_params(params).definition  # merged with its preset (docs/profiles.md)
    if not wants_leases(catalog, definition):  # offline: no connection, no journal (the plan role calls this always)
        return no_leases(definition)
    settings = connection_settings(params)
    require_verified_tls(settings)
    store = open_store(params["journal_dir"])
    with ProxmoxClient(settings) as client:
        return reserve_for_definition(
            store,
            client,
            catalog=catalog,
            definition=definition,
            owner=params["owner"],
            addresses=check_addresses(params["addresses"]),
            lease_seconds=check_lease_seconds(params["lease_seconds"]),
            check_mode=check_mode,
        )


ENTRY = ModuleEntry(
    argument_spec=argument_spec,
    action=action,
    libraries=("requests",),
    mutually_exclusive=(
        ("catalog_path", "catalog"),
        ("definition_path", "definition"),
        ("presets_path", "presets"),
        ("profiles_path", "profiles"),
    ),
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
