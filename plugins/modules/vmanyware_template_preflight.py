#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_template_preflight
short_description: Check a template build plan against Proxmox VE with read-only requests
version_added: 0.2.0
description:
  - Recomputes the template build plan from the same inputs as M(vmanyware.proxmox.vmanyware_template_plan), then checks it
    against Proxmox VE with bounded, verified-TLS C(GET) requests only. Nothing is created, changed or reserved.
  - TLS must be verified (O(validate_certs) with a CA file or the system CAs, or a O(api_fingerprint) pin); otherwise the module
    fails with C(tls_unverified) before sending anything, so the token never travels unverified. On a lab host
    O(unverified_tls_read_only=true) allows reading unverified with an API token (never a password) - GET requests only, enforced
    by the client - and marks the result (RV(tls_verified=false), a warning, RV(provider_scope_id=null)).
  - Each check has a fixed code and ends V(passed), V(failed) or V(unknown). What reads cannot prove stays V(unknown).
  - Building a template over the API needs Proxmox VE 8.4 or later and an import storage with content V(import).
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.template_build_inputs
  - vmanyware.proxmox.connection
  - vmanyware.proxmox.attributes
options:
  fail_on:
    description:
      - V(failed) fails the task (C(error_code=preflight_failed)) when any check failed.
      - V(unknown) also fails it when a check that reads could decide stayed unknown (C(image_reachable), C(image_checksum),
        C(build_network) and C(package_source) are always unknown and do not count).
      - V(never) never fails because of check results.
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
- name: Preflight a template build
  vmanyware.proxmox.vmanyware_template_preflight:
    template_build_path: files/template-build.yml
    api_host: pve.example.org
    api_token_id: automation@pve!vmanyware
    api_token_secret: "{{ vault_pve_token_secret }}"
    ca_path: files/pve-ca.pem
  register: template_preflight
"""

RETURN = r"""
plan_hash:
  description: The C(planHash) of the recomputed template build plan.
  returned: always
  type: str
template_build_hash:
  description: The C(templateBuildHash) of the validated document.
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
      description: One of V(api_reachable), V(version_supported), V(template_build_supported), V(import_storage_exists),
        V(import_storage_active), V(import_storage_content), V(storage_exists), V(storage_active), V(storage_images),
        V(bridge_exists), V(vmid_free), V(privileges), V(image_reachable), V(image_checksum), V(build_network),
        V(package_source).
      type: str
      returned: always
    status:
      description: V(passed), V(failed) or V(unknown).
      type: str
      returned: always
    message:
      description: Fixed text; for V(privileges) the missing privileges with their ACL path.
      type: str
      returned: always
summary:
  description: Counts of C(passed), C(failed) and C(unknown) checks.
  returned: always
  type: dict
creation_enabled:
  description:
    - Whether creating the template build operation is allowed now, that is RV(creation_blockers) is empty.
    - False when the provisioning gate is closed or when TLS is unverified.
  returned: always
  type: bool
creation_blockers:
  description:
    - The error codes creating the template build operation would fail with, in order (C(provisioning_disabled),
      C(tls_unverified)); empty when RV(creation_enabled) is true.
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
  description: On failure, the fixed error code (for example V(preflight_failed), V(tls_unverified), V(invalid_template_build)).
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
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.driver import (
    FAIL_ON_CHOICES,
    provisioning_enabled,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    TEMPLATE_BUILD_CONSTRAINTS,
    template_build_argument_spec,
    template_plan_from_params,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.template import run_template_preflight


def argument_spec() -> dict:
    spec = template_build_argument_spec()
    spec.update(connection_argument_spec())
    spec["fail_on"] = {"type": "str", "choices": list(FAIL_ON_CHOICES), "default": "failed"}
    return spec


def action(params, check_mode, diff) -> dict:
    provisioning_enabled(os.environ)  # a bad gate value fails before anything else
    planned = template_plan_from_params(params)
    return run_template_preflight(planned, connection_settings(params), environ=os.environ, fail_on=params["fail_on"])


ENTRY = ModuleEntry(
    argument_spec=argument_spec,
    action=action,
    libraries=("PyYAML", "jsonschema", "requests"),
    **TEMPLATE_BUILD_CONSTRAINTS,
)


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
