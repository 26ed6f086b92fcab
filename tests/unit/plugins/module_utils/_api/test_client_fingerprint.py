# SPDX-License-Identifier: GPL-3.0-or-later
"""certificate_fingerprint: the provider's certificate without any HTTP request."""

from __future__ import annotations

import socket
import typing as t

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError
from pve_stubs import make_settings, stub_server, tls_material  # noqa: F401  pylint: disable=unused-import


def test_verified_handshake_sends_no_request(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    settings = make_settings(server.port, ca_path=tls_material.ca_path)
    assert certificate_fingerprint(settings) == tls_material.fingerprint
    assert server.requests == []
    with ProxmoxClient(settings) as client:
        client.get("/version")
        assert client.provider_scope_id == provider_scope_id(settings, certificate_fingerprint(settings))


def test_pin_is_used_without_connecting(make_settings: t.Any) -> None:
    pin = "AB:" * 31 + "AB"
    assert certificate_fingerprint(make_settings(1, fingerprint=pin)) == "ab" * 32


def test_unverified_when_validate_certs_is_false(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    assert certificate_fingerprint(make_settings(server.port, validate_certs=False)) == tls_material.fingerprint


def test_wrong_ca_is_a_tls_failure(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    with pytest.raises(ProviderError) as info:
        certificate_fingerprint(make_settings(server.port, ca_path=tls_material.other_ca_path))
    assert info.value.code == "tls_verification_failed" and server.requests == []


def test_closed_port_is_transport_lost(make_settings: t.Any, tls_material: t.Any) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(ProviderError) as info:
        certificate_fingerprint(make_settings(port, ca_path=tls_material.ca_path))
    assert info.value.code == "transport_lost"
