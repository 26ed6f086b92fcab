#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vmanyware_certificate_info
short_description: Show the TLS certificate a Proxmox VE API endpoint presents, before pinning or trusting it
version_added: 0.2.0
description:
  - Connects to O(api_host):O(api_port) and completes TLS handshakes only. No HTTP request is sent and no credential is
    used or accepted, so the module is safe to run against a host whose certificate is not trusted yet.
  - Returns the presented chain (subject, issuer, SANs, validity and SHA-256 fingerprint of each certificate, the fingerprint
    in the colon-separated upper-case form C(pvenode cert info) prints), whether the chain verifies against O(ca_path) and
    against the system's CA store (host name checked), and RV(pin_candidate).
  - RV(pin_candidate) is the fingerprint of the leaf certificate, the one pveproxy serves (C(pve-ssl.pem), or
    C(pveproxy-ssl.pem) with a custom or ACME certificate). C(pvenode cert info) lists C(pve-root-ca.pem) first; its
    fingerprint is not a usable pin. Compare RV(pin_candidate) with the node's own output before saving it as O(api_fingerprint).
  - Expired, not yet valid and wrong-host-name certificates are flagged in RV(certificate_warnings).
  - See C(docs/onboarding.md) in the collection.
author:
  - vmanyware developers (@vmanyware)
extends_documentation_fragment:
  - vmanyware.proxmox.attributes
options:
  api_host:
    description:
      - Host name or IP address of the Proxmox VE node, without scheme, port or path.
      - Falls back to E(PROXMOX_HOST).
    type: str
    required: true
  api_port:
    description: TCP port of the API. Falls back to E(PROXMOX_PORT).
    type: int
    default: 8006
  ca_path:
    description:
      - A PEM CA file to verify the chain against (for example the cluster's C(pve-root-ca.pem)), reported in RV(verification).
      - Falls back to E(PROXMOX_CA_PATH).
    type: path
  api_fingerprint:
    description:
      - An expected SHA-256 fingerprint (64 hex digits, optionally colon-separated); RV(pin_matches) says whether the leaf has it.
      - Falls back to E(PROXMOX_FINGERPRINT).
    type: str
  api_timeout:
    description: Seconds for each connection and handshake. Falls back to E(PROXMOX_TIMEOUT).
    type: float
    default: 30
attributes:
  check_mode:
    support: full
    details: The module only reads; check mode makes the same handshakes and returns the same result.
  diff_mode:
    support: none
  idempotent:
    support: full
requirements:
  - cryptography
"""

EXAMPLES = r"""
- name: Show the certificate of a new node before trusting it
  vmanyware.proxmox.vmanyware_certificate_info:
    api_host: pve.example.org
  register: certificate

- name: Print the fingerprint to compare with 'pvenode cert info' (pve-ssl.pem or pveproxy-ssl.pem) on the node
  ansible.builtin.debug:
    msg: "{{ certificate.pin_candidate }} {{ certificate.certificate_warnings }}"

- name: Check a pin that is already configured
  vmanyware.proxmox.vmanyware_certificate_info:
    api_host: pve.example.org
    api_fingerprint: "{{ pve_fingerprint }}"
  register: pinned
  failed_when: not pinned.pin_matches
"""

RETURN = r"""
host:
  description: The host that was contacted (lower case).
  returned: success
  type: str
port:
  description: The port that was contacted.
  returned: success
  type: int
chain:
  description: The presented certificates, leaf first (only the leaf when the controller's Python cannot read the chain).
  returned: success
  type: list
  elements: dict
  contains:
    subject:
      description: Subject distinguished name (RFC 4514).
      type: str
      returned: always
    issuer:
      description: Issuer distinguished name (RFC 4514).
      type: str
      returned: always
    san_dns:
      description: DNS names of the subject alternative name extension.
      type: list
      elements: str
      returned: always
    san_ip:
      description: IP addresses of the subject alternative name extension.
      type: list
      elements: str
      returned: always
    not_before:
      description: Start of validity, UTC, C(YYYY-MM-DDTHH:MM:SSZ).
      type: str
      returned: always
    not_after:
      description: End of validity, UTC, C(YYYY-MM-DDTHH:MM:SSZ).
      type: str
      returned: always
    fingerprint_sha256:
      description: SHA-256 of the DER certificate, colon-separated upper-case hex (C(AB:CD:...)).
      type: str
      returned: always
    self_signed:
      description: Whether subject and issuer are the same.
      type: bool
      returned: always
    is_ca:
      description: Whether the certificate is a CA (basic constraints).
      type: bool
      returned: always
    expired:
      description: Whether the validity ended.
      type: bool
      returned: always
    not_yet_valid:
      description: Whether the validity has not started.
      type: bool
      returned: always
    host_matches:
      description: Whether the certificate names O(api_host) (IP SAN for an address, DNS SAN otherwise).
      type: bool
      returned: always
pin_candidate:
  description: The leaf's SHA-256 fingerprint (colon form), the value for O(vmanyware.proxmox.vmanyware_preflight#module:api_fingerprint).
  returned: success
  type: str
  sample: "3A:9F:...:0C"
pin_matches:
  description: Whether the leaf has O(api_fingerprint); V(null) when none was given.
  returned: success
  type: bool
verification:
  description: Whether the chain verifies (host name included) against each trust source.
  returned: success
  type: dict
  contains:
    ca_path:
      description: >-
        C(verified) (bool) and C(reason) (V(null), V(expired), V(not_yet_valid), V(hostname_mismatch), V(untrusted) or
        V(handshake_failed)) for O(ca_path); V(null) without O(ca_path).
      type: dict
      returned: always
    system_store:
      description: The same for the controller's system CA store.
      type: dict
      returned: always
expired:
  description: Whether the leaf has expired.
  returned: success
  type: bool
not_yet_valid:
  description: Whether the leaf is not valid yet.
  returned: success
  type: bool
host_matches:
  description: Whether the leaf names O(api_host).
  returned: success
  type: bool
certificate_warnings:
  description: Fixed sentences for an expired, not yet valid or wrong-host-name leaf.
  returned: success
  type: list
  elements: str
error_code:
  description: On failure, the fixed error code (V(transport_lost), V(tls_verification_failed), V(configuration_error)).
  returned: failure
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_argument_spec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.certificate import inspect_endpoint
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import validate_endpoint
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry, run_entry

# No credential option at all: the module must never be able to send one.
OPTIONS = ("api_host", "api_port", "ca_path", "api_fingerprint", "api_timeout")


def argument_spec() -> dict:
    spec = {name: value for name, value in connection_argument_spec().items() if name in OPTIONS}
    spec["api_host"]["required"] = True
    return spec


def action(params, check_mode, diff) -> dict:
    params = {
        name: (None if value == "" else value) for name, value in params.items()
    }  # an empty environment variable is unset
    host, port, timeout = validate_endpoint(params["api_host"], params["api_port"], params["api_timeout"])
    return inspect_endpoint(
        host, port, ca_path=params["ca_path"], timeout=timeout, fingerprint=params["api_fingerprint"]
    )


ENTRY = ModuleEntry(argument_spec=argument_spec, action=action, libraries=("cryptography",))


def main() -> None:
    run_entry(AnsibleModule(**ENTRY.module_kwargs()), ENTRY)


if __name__ == "__main__":
    main()
