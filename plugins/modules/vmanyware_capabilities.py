#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_capabilities
short_description: Connection test - what this Proxmox VE and this token can do, with read-only requests
version_added: 0.2.0
description:
  - Reads, with C(GET) requests only, the Proxmox VE version, the cluster name and its nodes (online or not), per online node
    its storages with their content types (V(images), V(rootdir), V(import), V(snippets), V(vztmpl), V(iso)) and its bridges,
    the SDN VNets, and the token's effective privileges (C(GET /access/permissions)).
  - From those it says, per operation, whether the collection can run it here over the API (RV(operations)).
    V(vm_provisioning) is the collection's own stages; V(template_build) is building a template from a cloud image;
    V(containers) is creating and provisioning a container; V(cleanup) is deleting a VM the collection created.
  - Each operation is V(available) or V(unavailable) with reasons, each a missing privilege (with ACL path and purpose),
    a missing storage content type, no bridge, or a Proxmox VE version too old.
  - Per version, C(via) says where the operation works at all - building a template over the API needs Proxmox VE 8.4 or later and a
    storage with content V(import) (V(ssh) before 8.4); commands inside a container and writing snippets are never possible over the API.
  - A new VM's privileges are read on C(/vms) (the ACL a new VMID inherits); give O(template_vmid) to check the template's own ACL.
  - TLS must be verified (O(validate_certs) with a CA file or the system CAs, or a O(api_fingerprint) pin); otherwise the module
    fails with C(tls_unverified) before sending anything. On a lab host O(unverified_tls_read_only=true) allows reading unverified
    with an API token (never a password) - GET requests only, enforced by the client - and marks the result (RV(tls_verified=false),
    a warning, RV(provider_scope_id=null)). M(vmanyware.proxmox.vmanyware_certificate_info) needs neither (it sends no credential).
  - See C(docs/onboarding.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.node_ssh
  - vmanyware.proxmox.attributes
options:
  template_vmid:
    description: The catalog template's VMID, to check V(VM.Clone) and V(VM.Audit) on its own ACL path instead of C(/vms).
    type: int
  node_ssh:
    description:
      - The node SSH route's settings (connection plugin P(vmanyware.proxmox.pct#connection), docs/containers.md). When given, each online
        node is probed read-only over SSH (login with the verified host key and the dedicated key, then C(pct help)) and
        RV(node_ssh) says per node whether the route is usable, with a fixed reason code. Without it nothing is attempted
        and every node is V(not_configured).
    type: dict
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode sends the same requests and returns the same result.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - requests
  - truststore
"""

EXAMPLES = r"""
- name: Test the connection and list what works here
  vmanyware.proxmox.vmanyware_capabilities:
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    api_fingerprint: "{{ pve_fingerprint }}"
    template_vmid: 9000
  register: capabilities

- name: Print the operations as a table
  ansible.builtin.debug:
    msg: "{{ capabilities.operations | vmanyware.proxmox.check_table }}"
"""

RETURN = r"""
version:
  description: C(version) (text), C(major) and C(minor) of Proxmox VE (V(null) when unreadable).
  returned: success
  type: dict
cluster:
  description: C(name) and C(quorate) of the cluster (V(null) on a single node), C(readable) (V(false) without V(Sys.Audit) on C(/)).
  returned: success
  type: dict
nodes:
  description: Every node with C(online), C(local), C(readable), its C(storages) and C(bridges).
  returned: success
  type: list
  elements: dict
  contains:
    node:
      description: Node name.
      type: str
      returned: always
    online:
      description: Whether the node is online.
      type: bool
      returned: always
    storages:
      description: C(storage), C(type), C(content) (list of content types), C(shared), C(active) for each storage the token may see.
      type: list
      elements: dict
      returned: always
    bridges:
      description: Names of the node's bridges (Linux and OVS).
      type: list
      elements: str
      returned: always
vnets:
  description: SDN VNets the token may audit (C(vnet), C(zone), C(alias)); V(null) when the list could not be read.
  returned: success
  type: list
  elements: dict
privileges:
  description: The token's effective privileges per ACL path (from C(GET /access/permissions)); V(null) when unreadable.
  returned: success
  type: dict
operations:
  description: One entry per operation.
  returned: success
  type: list
  elements: dict
  contains:
    operation:
      description: V(vm_provisioning), V(template_build), V(containers) or V(cleanup).
      type: str
      returned: always
    status:
      description: V(available) or V(unavailable).
      type: str
      returned: always
    via:
      description: Where the operation works on this Proxmox VE version, V(api) or V(ssh) (needs a shell on the node).
      type: str
      returned: always
    placement:
      description: The node, storages and bridge the evaluation found best (V(null) when no node qualifies).
      type: dict
      returned: always
    reasons:
      description: >-
        Why the operation is unavailable, each with C(kind) (V(privilege), V(storage_content), V(bridge), V(node), V(version), V(api))
        and C(message); privilege reasons also have C(path), C(privilege) and C(purpose).
      type: list
      elements: dict
      returned: always
summary:
  description: Counts of C(available) and C(unavailable) operations.
  returned: success
  type: dict
tls_verified:
  description: Whether TLS was verified (a CA or a pin); V(false) only under O(unverified_tls_read_only), with a warning.
  returned: success
  type: bool
node_ssh:
  description:
    - The node SSH route per node (C(pct exec) over SSH) - C(configured) (whether O(node_ssh) was given) and C(nodes), each with
      C(node), C(status) (V(usable), V(unusable) or V(not_configured)) and C(reason) (V(null) when usable, V(not_configured),
      V(node_offline), or a C(node_ssh_*) error code of docs/errors.md), and the C(host) and C(port) probed.
  returned: success
  type: dict
provider_scope_id:
  description: The provider scope id of this connection (see C(docs/connection.md)); V(null) when read over unverified TLS.
  returned: success
  type: str
error_code:
  description: On failure, the fixed error code (for example V(tls_verification_failed), V(tls_unverified), V(auth_failed), V(transport_lost)).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    connection_argument_spec,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.node_ssh import node_ssh_argument_spec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.capabilities import capabilities
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry


def argument_spec() -> dict:
    spec = connection_argument_spec()
    spec["template_vmid"] = {"type": "int"}
    spec["node_ssh"] = node_ssh_argument_spec()
    return spec


def action(params, check_mode, diff) -> dict:
    return capabilities(
        connection_settings(params), template_vmid=params.get("template_vmid"), node_ssh=params.get("node_ssh")
    )


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action, libraries=("requests",))


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
