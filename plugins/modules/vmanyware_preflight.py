#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_preflight
short_description: Check a plan against a Proxmox VE datacenter with read-only requests
version_added: 0.1.0
description:
  - Recomputes the plan from the same inputs as M(vmanyware.proxmox.vmanyware_plan), then checks it against Proxmox VE with
    bounded, verified-TLS C(GET) requests only. Nothing is created, changed or reserved.
  - TLS must be verified (O(validate_certs) with a CA file or the system CAs, or a O(api_fingerprint) pin); otherwise the module
    fails with C(tls_unverified) before sending anything, so the token never travels unverified. On a lab host
    O(unverified_tls_read_only=true) allows reading unverified with an API token (never a password) - GET requests only, enforced
    by the client - and marks the result (RV(tls_verified=false), a warning, RV(provider_scope_id=null)).
  - Each check has a fixed code and ends V(passed), V(failed) or V(unknown). What reads cannot prove stays V(unknown).
  - Check messages are fixed text; provider responses and configuration values are not returned.
  - The token's required privileges are listed in C(docs/permissions.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.plan_inputs
  - vmanyware.proxmox.plan_inputs.definition_sources
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  fail_on:
    description:
      - V(failed) fails the task (C(error_code=preflight_failed)) when any check failed.
      - V(unknown) also fails it when a check that reads could decide stayed unknown (C(template_revision), C(dhcp_available),
        C(guest_readiness) and C(workflow_permitted) are always unknown and do not count).
      - V(never) never fails because of check results.
      - The failure result still contains RV(checks) and the other return values.
    type: str
    choices: [failed, unknown, never]
    default: failed
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode runs the same requests and returns the same result.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - PyYAML
  - jsonschema
  - requests
  - truststore
notes:
  - E(VMANYWARE_PROVISIONING_ENABLED) must be unset, V(true) or V(false); any other value fails with C(configuration_error)
    before any request is sent.
"""

EXAMPLES = r"""
- name: Preflight a plan
  vmanyware.proxmox.vmanyware_preflight:
    catalog_path: files/catalog.yml
    definition_path: files/kernel-lab.yml
    target_vmid: 201
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem
  register: preflight

- name: Report checks that could not be decided
  ansible.builtin.debug:
    msg: "{{ preflight.checks | selectattr('status', 'equalto', 'unknown') | map(attribute='code') | list }}"
"""

RETURN = r"""
plan_hash:
  description: The C(planHash) of the recomputed plan.
  returned: always
  type: str
provider_scope_id:
  description:
    - C(pve:) and the SHA-256 of the API URL, the certificate SHA-256 fingerprint and the token's C(user@realm);
      not secret.
    - V(null) when no certificate was pinned or observed (the API was not reached), and always V(null) when read
      under O(unverified_tls_read_only) (a certificate nobody verified identifies no provider).
  returned: always
  type: str
checks:
  description: The checks in fixed order.
  returned: always
  type: list
  elements: dict
  contains:
    code:
      description: One of V(api_reachable), V(version_supported), V(template_exists), V(template_is_template), V(template_disk),
        V(template_cloudinit_drive), V(template_guest_agent), V(storage_exists), V(storage_active), V(storage_images),
        V(storage_capacity), V(bridge_exists), V(vmid_free), V(privileges), V(template_revision), V(dhcp_available),
        V(guest_readiness), V(workflow_permitted).
      type: str
      returned: always
    status:
      description: V(passed), V(failed) or V(unknown).
      type: str
      returned: always
    message:
      description: Fixed text; for V(privileges) the missing privileges with their ACL path and stage.
      type: str
      returned: always
summary:
  description: Counts of C(passed), C(failed) and C(unknown) checks.
  returned: always
  type: dict
creation_enabled:
  description:
    - Whether creating an operation for this plan is allowed now, that is RV(creation_blockers) is empty.
    - False when the provisioning gate is closed, when the plan declares a final snapshot and the snapshots gate
      is closed, when the mapping lacks a validated C(imageDefaultUser) attestation, or when TLS is unverified.
  returned: always
  type: bool
creation_blockers:
  description:
    - The error codes creating an operation for this plan would fail with, in order (C(provisioning_disabled), C(snapshot_disabled),
      C(attestation_required), C(tls_unverified)); empty when RV(creation_enabled) is true.
  returned: always
  type: list
  elements: str
tls_verified:
  description:
    - Whether the connection's TLS was verified (a CA file or the system CAs with O(validate_certs), or a fingerprint
      pin).
    - With O(validate_certs=false) and no pin the preflight fails with C(tls_unverified) before sending anything,
      unless O(unverified_tls_read_only=true) (GET requests with an API token only); then this is V(false), C(api_reachable)
      says so, the result carries a warning, and RV(creation_blockers) lists C(tls_unverified).
  returned: always
  type: bool
vmid_reserved:
  description: Always V(false); a preflight reserves nothing.
  returned: always
  type: bool
capabilities:
  description: Version-dependent behaviour of the Proxmox VE API (all V(null) when the version is unknown).
  returned: always
  type: dict
  contains:
    pve_major:
      description: Major version.
      type: int
      returned: always
    pve_minor:
      description: Minor version.
      type: int
      returned: always
    resize_returns_upid:
      description: Whether a disk resize returns a task id (PVE 8 and later).
      type: bool
      returned: always
    agent_exec_array:
      description: Whether the guest agent C(exec) endpoint takes the command as an array.
      type: bool
      returned: always
    guest_agent_privileges:
      description: V(VM.GuestAgent.*) (PVE 9) or V(VM.Monitor) (PVE 8).
      type: str
      returned: always
error_code:
  description: On failure, the fixed error code (for example V(preflight_failed), V(tls_unverified), V(configuration_error),
    V(invalid_definition)).
  returned: failure
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    connection_argument_spec,
    connection_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import (
    PLAN_INPUT_CONSTRAINTS,
    plan_from_params,
    plan_input_argument_spec,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import run_preflight
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.driver import (
    FAIL_ON_CHOICES,
    provisioning_enabled,
)


def argument_spec() -> dict:
    spec = plan_input_argument_spec()
    spec.update(connection_argument_spec())
    spec["fail_on"] = {"type": "str", "choices": list(FAIL_ON_CHOICES), "default": "failed"}
    return spec


def action(params, check_mode, diff) -> dict:
    provisioning_enabled(os.environ)  # a bad gate value fails before anything else
    planned = plan_from_params(params)
    return run_preflight(planned, connection_settings(params), environ=os.environ, fail_on=params["fail_on"])


ENTRY = ModuleEntry(
    argument_spec=argument_spec, action=action, libraries=("PyYAML", "jsonschema", "requests"), **PLAN_INPUT_CONSTRAINTS
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
