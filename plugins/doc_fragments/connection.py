# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Documentation of the shared connection options (``plugins/module_utils/_api/argspec.py``)."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The ``vmanyware.proxmox.connection`` doc fragment."""

    DOCUMENTATION = r"""
options:
  api_host:
    description:
      - Host name or IP address of the Proxmox VE API (no scheme, port or path).
      - If not set, the value of the E(PROXMOX_HOST) environment variable is used.
    type: str
  api_port:
    description:
      - TCP port of the Proxmox VE API.
      - If not set, the value of the E(PROXMOX_PORT) environment variable is used.
    type: int
    default: 8006
  api_user:
    description:
      - The user, as C(user@realm). Needed with O(api_password), and with a bare token name in O(api_token_id).
      - If not set, the value of the E(PROXMOX_USER) environment variable is used.
    type: str
  api_token_id:
    description:
      - The API token, either the full id C(user@realm!name) or the bare C(name) together with O(api_user).
      - If not set, the value of the E(PROXMOX_TOKEN_ID) environment variable is used.
    type: str
  api_token_secret:
    description:
      - The API token secret. Never logged or returned.
      - If not set, the value of the E(PROXMOX_TOKEN_SECRET) environment variable is used.
    type: str
  api_password:
    description:
      - The password of O(api_user), when no API token is configured. API tokens are recommended.
      - If not set, the value of the E(PROXMOX_PASSWORD) environment variable is used.
    type: str
  validate_certs:
    description:
      - Verify the server certificate. The trust anchor, in this order - the O(api_fingerprint) pin; else O(ca_path); else the operating
        system's trust store (through the C(truststore) package, as pip does), so a CA installed with C(update-ca-certificates) works.
      - With V(false) and no O(api_fingerprint) pin nothing is sent (no token, no password) and every module fails with
        C(tls_unverified), except the read-only checks under O(unverified_tls_read_only).
      - E(REQUESTS_CA_BUNDLE) and E(CURL_CA_BUNDLE) are ignored; configure O(ca_path) instead.
      - If not set, the value of the E(PROXMOX_VALIDATE_CERTS) environment variable is used.
    type: bool
    default: true
  ca_path:
    description:
      - A PEM file with the CA certificate(s) to verify the server certificate against.
      - If not set, the value of the E(PROXMOX_CA_PATH) environment variable is used.
    type: path
  api_fingerprint:
    description:
      - SHA-256 fingerprint pin of the server certificate, as 64 hex digits, optionally colon-separated, any case.
      - The pin is checked during the TLS handshake, before any credential or request is sent, and replaces the CA chain check.
      - If not set, the value of the E(PROXMOX_FINGERPRINT) environment variable is used.
    type: str
  api_timeout:
    description:
      - Timeout of each HTTP request, in seconds (connect, and the whole reply).
      - If not set, the value of the E(PROXMOX_TIMEOUT) environment variable is used, else that of E(PROXMOX_API_TIMEOUT) (community.proxmox's name).
    type: float
    default: 30
  unverified_tls_read_only:
    description:
      - Lab hosts only. Allows the read-only checks (M(vmanyware.proxmox.vmanyware_preflight),
        M(vmanyware.proxmox.vmanyware_template_preflight), M(vmanyware.proxmox.vmanyware_capabilities)) to send the API token
        over TLS that neither a CA nor a pin verifies (O(validate_certs=false), no O(api_fingerprint)).
      - The client then sends GET requests only and refuses any other request before it is sent; a password is never sent
        (the login posts it), so an API token is required.
      - Every result read this way has C(tls_verified=false), a warning, and no provider scope (C(provider_scope_id=null)).
      - It never applies to what writes or binds to a provider (operations, stages, M(vmanyware.proxmox.vmanyware_provision),
        M(vmanyware.proxmox.vmanyware_cleanup), M(vmanyware.proxmox.vmanyware_vmid)), which refuse unverified TLS with C(tls_unverified).
      - Ignored when TLS is verified.
      - If not set, the value of the E(PROXMOX_UNVERIFIED_TLS_READ_ONLY) environment variable is used.
    type: bool
    default: false
notes:
  - Plain HTTP is never used. Mutations are never retried; idempotent reads are retried at most three times.
  - The API is always contacted directly. When the environment configures a proxy for its URL (E(https_proxy) or E(all_proxy), either
    case, without a matching E(no_proxy) entry), the module fails with C(proxy_not_supported) before any connection; add the host to
    E(no_proxy).
"""
