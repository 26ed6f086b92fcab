# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Certificate inspection: chain description, flags, verification reasons, and that nothing but a handshake happens."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
import ssl
import threading
import typing as t
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.certificate import (
    colon_fingerprint,
    describe,
    host_matches,
    inspect_endpoint,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import normalize_fingerprint
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError
from pve_stubs import CA_KEY_USAGE

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_chain(
    tmp: Path,
    *,
    not_before: datetime.datetime = NOW - DAY,
    not_after: datetime.datetime = NOW + 30 * DAY,
    sans: t.Sequence[x509.GeneralName] = (x509.IPAddress(ipaddress.ip_address("127.0.0.1")),),
) -> dict[str, t.Any]:
    """A PVE-like pair: a root CA ('Proxmox Virtual Environment') and a node certificate signed by it."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Proxmox Virtual Environment"))
        .issuer_name(_name("Proxmox Virtual Environment"))
        .public_key(ca_key.public_key())
        .serial_number(1)
        .not_valid_before(NOW - 10 * DAY)
        .not_valid_after(NOW + 3650 * DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("pve-test.example"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp / "chain.pem").write_bytes(
        leaf.public_bytes(pem) + ca.public_bytes(pem)
    )  # like pveproxy-ssl.pem with its chain
    (tmp / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return {"ca": ca, "leaf": leaf, "dir": tmp}


class TLSOnlyServer:
    """Accepts TLS connections and records whether any application byte arrived (none may)."""

    def __init__(self, directory: Path) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(str(directory / "chain.pem"), str(directory / "key.pem"))
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = b""
        self.handshakes = 0
        self.stop = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                continue
            try:
                with self.context.wrap_socket(conn, server_side=True) as tls:
                    self.handshakes += 1
                    tls.settimeout(1.0)
                    try:
                        self.received += tls.recv(1024)
                    except (OSError, ssl.SSLError):
                        pass
            except (OSError, ssl.SSLError):
                continue

    def close(self) -> None:
        self.stop = True
        self.thread.join(timeout=2)
        self.sock.close()


@pytest.fixture()
def served(tmp_path: Path) -> t.Iterator[tuple[dict[str, t.Any], TLSOnlyServer]]:
    chain = make_chain(tmp_path)
    server = TLSOnlyServer(tmp_path)
    yield chain, server
    server.close()


def test_colon_fingerprint_is_pve_form_and_accepted_as_pin() -> None:
    der = b"certificate bytes"
    text = colon_fingerprint(der)
    assert text == ":".join(hashlib.sha256(der).hexdigest().upper()[i : i + 2] for i in range(0, 64, 2))
    assert len(text.split(":")) == 32 and text == text.upper()
    assert normalize_fingerprint(text) == hashlib.sha256(der).hexdigest()


def test_describe_flags(tmp_path: Path) -> None:
    expired = make_chain(tmp_path, not_before=NOW - 30 * DAY, not_after=NOW - DAY)["leaf"]
    der = expired.public_bytes(serialization.Encoding.DER)
    described = describe(der, "127.0.0.1", NOW)
    assert described["expired"] and not described["not_yet_valid"] and described["host_matches"]
    assert described["subject"] == "CN=pve-test.example" and described["issuer"] == "CN=Proxmox Virtual Environment"
    assert described["san_ip"] == ["127.0.0.1"] and described["san_dns"] == [] and not described["is_ca"]
    assert described["fingerprint_sha256"] == colon_fingerprint(der)
    future = make_chain(tmp_path, not_before=NOW + DAY)["leaf"].public_bytes(serialization.Encoding.DER)
    assert describe(future, "127.0.0.1", NOW)["not_yet_valid"]
    assert not describe(future, "pve.example.org", NOW)["host_matches"]


@pytest.mark.parametrize(
    ("host", "dns", "ips", "expected"),
    [
        ("pve1.example.org", ["pve1.example.org"], [], True),
        ("PVE1.example.org.", ["pve1.example.org"], [], True),
        ("pve1.example.org", ["*.example.org"], [], True),
        ("a.pve1.example.org", ["*.example.org"], [], False),
        ("pve2.example.org", ["pve1.example.org"], [], False),
        ("192.0.2.10", ["192.0.2.10"], [], False),  # an address matches IP SANs only
        ("192.0.2.10", [], ["192.0.2.10"], True),
        ("[2001:db8::1]", [], ["2001:db8:0::1"], True),
    ],
)
def test_host_matching(host: str, dns: list[str], ips: list[str], expected: bool) -> None:
    assert host_matches(host, dns, ips) is expected


def test_inspect_chain_pin_and_verification(served: tuple[dict[str, t.Any], TLSOnlyServer]) -> None:
    chain, server = served
    leaf_der = chain["leaf"].public_bytes(serialization.Encoding.DER)
    result = inspect_endpoint(
        "127.0.0.1",
        server.port,
        ca_path=str(chain["dir"] / "ca.pem"),
        timeout=5,
        fingerprint=hashlib.sha256(leaf_der).hexdigest(),
    )
    assert result["pin_candidate"] == colon_fingerprint(leaf_der) and result["pin_matches"] is True
    assert result["chain"][0]["fingerprint_sha256"] == result["pin_candidate"]
    assert len(result["chain"]) == 2  # leaf and root, as presented (Python >= 3.10 reads the whole chain)
    assert result["chain"][1]["is_ca"] and result["chain"][1]["self_signed"] and not result["chain"][0]["is_ca"]
    assert result["chain"][1]["fingerprint_sha256"] != result["pin_candidate"]  # the root CA is never the pin
    assert result["verification"]["ca_path"] == {"verified": True, "reason": None}
    assert result["verification"]["system_store"] == {"verified": False, "reason": "untrusted"}
    assert result["certificate_warnings"] == [] and result["changed"] is False
    assert server.received == b""  # handshakes only: no HTTP byte, so no credential either


def test_inspect_wrong_host_and_pin(tmp_path: Path) -> None:
    chain = make_chain(tmp_path, sans=[x509.DNSName("pve.example.org")])
    server = TLSOnlyServer(tmp_path)
    try:
        result = inspect_endpoint(
            "127.0.0.1", server.port, ca_path=str(tmp_path / "ca.pem"), timeout=5, fingerprint="00" * 32
        )
    finally:
        server.close()
    assert result["verification"]["ca_path"] == {"verified": False, "reason": "hostname_mismatch"}
    assert result["pin_matches"] is False and result["host_matches"] is False
    assert result["certificate_warnings"] == ["The server certificate does not name the configured api_host (SAN)."]
    assert chain["leaf"].subject.rfc4514_string() == result["chain"][0]["subject"]


def test_inspect_expired(tmp_path: Path) -> None:
    make_chain(tmp_path, not_before=NOW - 30 * DAY, not_after=NOW - DAY)
    server = TLSOnlyServer(tmp_path)
    try:
        result = inspect_endpoint("127.0.0.1", server.port, ca_path=str(tmp_path / "ca.pem"), timeout=5)
    finally:
        server.close()
    assert result["expired"] and result["verification"]["ca_path"] == {"verified": False, "reason": "expired"}
    assert "The server certificate has expired." in result["certificate_warnings"] and result["pin_matches"] is None


def test_inspect_nothing_listening() -> None:
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    with pytest.raises(ProviderError) as caught:
        inspect_endpoint("127.0.0.1", port, timeout=2)
    assert caught.value.code == "transport_lost"
