# SPDX-License-Identifier: GPL-3.0-or-later
"""Test helpers for the client tests: generated TLS material, a stub HTTPS server, a recording transport.

Import the fixtures into a test module (`from pve_stubs import stub_server, ...`).
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import io
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
import typing as t
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
import requests
import requests.adapters
import urllib3
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


# The extensions a strict verifier requires (Python 3.13 sets ssl.VERIFY_X509_STRICT by default, urllib3 2.3+ too):
# key usage and subject key identifier on a CA, authority key identifier on what it signs, as Proxmox VE's own certificates.
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str) -> tuple[t.Any, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


class TlsMaterial(t.NamedTuple):
    ca_path: str  # CA that signed the server certificate
    other_ca_path: str  # an unrelated CA
    cert_path: str
    key_path: str
    fingerprint: str  # SHA-256 of the server certificate (lowercase hex)
    alt_cert_path: str  # a second server certificate for the same names from the same CA
    alt_key_path: str
    alt_fingerprint: str


def _leaf(ca_key: t.Any, ca_cert: x509.Certificate, base: Path, stem: str) -> tuple[str, str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = base / (stem + "-cert.pem"), base / (stem + "-key.pem")
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path), hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


@pytest.fixture(scope="session")
def tls_material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    base = tmp_path_factory.mktemp("tls")
    ca_key, ca_cert = _ca("vmanyware test CA")
    _other_key, other_cert = _ca("unrelated CA")
    paths = {name: base / name for name in ("ca.pem", "other.pem")}
    paths["ca.pem"].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths["other.pem"].write_bytes(other_cert.public_bytes(serialization.Encoding.PEM))
    cert_path, key_path, fingerprint = _leaf(ca_key, ca_cert, base, "server")
    alt_cert, alt_key, alt_fingerprint = _leaf(ca_key, ca_cert, base, "server-alt")
    return TlsMaterial(
        str(paths["ca.pem"]),
        str(paths["other.pem"]),
        cert_path,
        key_path,
        fingerprint,
        alt_cert,
        alt_key,
        alt_fingerprint,
    )


class Reply(t.NamedTuple):
    status: int = 200
    reason: str = "OK"
    body: t.Any = None  # JSON-serializable, or bytes
    delay: float = 0.0
    drop: bool = False  # close the connection without any reply
    headers: dict[str, str] = {}
    tls_abort: bool = False  # instead of a reply, a TLS record the client cannot decrypt (a TLS error while it reads)


class RecordedRequest(t.NamedTuple):
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class StubServer:
    """A tiny HTTPS server: ``behavior(request) -> Reply``; records every request line that arrived.

    ``swap_from``: from this accepted connection on (1-based), the handshake presents the alternate certificate
    (``tls.alt_cert_path``, same names, same CA).
    """

    def __init__(self, tls: TlsMaterial, behavior: t.Callable[[RecordedRequest], Reply]) -> None:
        self.requests: list[RecordedRequest] = []
        self.connections = 0
        self.swap_from: int | None = None
        self.behavior = behavior
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: t.Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                rec = RecordedRequest(self.command, parts.path, dict(parse_qsl(parts.query)), dict(self.headers), body)
                stub.requests.append(rec)
                reply = stub.behavior(rec)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if reply.tls_abort:
                    self.close_connection = True
                    os.write(self.connection.fileno(), b"\x17\x03\x03\x00\x40" + os.urandom(64))  # under the TLS layer
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status, reply.reason)
                self.send_header("Content-Type", "application/json")
                if "Content-Length" not in reply.headers:
                    self.send_header("Content-Length", str(len(data)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[socket.socket, t.Any]:
                sock, addr = super().get_request()
                stub.connections += 1
                return sock, addr

            def handle_error(self, request: t.Any, client_address: t.Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert_path, tls.key_path)
        alternate = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        alternate.load_cert_chain(tls.alt_cert_path, tls.alt_key_path)

        def pick(sock: t.Any, _name: str | None, _context: ssl.SSLContext) -> None:  # called even without SNI
            if stub.swap_from is not None and stub.connections >= stub.swap_from:
                sock.context = alternate

        context.sni_callback = pick
        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_server(tls_material: TlsMaterial) -> t.Iterator[t.Callable[..., StubServer]]:
    servers: list[StubServer] = []

    def make(behavior: t.Callable[[RecordedRequest], Reply] | None = None) -> StubServer:
        server = StubServer(
            tls_material, behavior or (lambda r: Reply(body={"data": {"version": "9.1.3", "release": "9.1"}}))
        )
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.close()


class RecordingAdapter(requests.adapters.BaseAdapter):
    """A transport recording each PreparedRequest and answering from ``responder(method, path, params)``."""

    def __init__(self, responder: t.Callable[[str, str, dict[str, t.Any]], tuple[int, str, t.Any]]) -> None:
        super().__init__()
        self.responder = responder
        self.sent: list[tuple[str, str, dict[str, t.Any]]] = []

    @staticmethod
    def decode(request: requests.PreparedRequest) -> tuple[str, str, dict[str, t.Any]]:
        parts = urlsplit(request.url or "")
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        if request.body:
            body = request.body if isinstance(request.body, str) else request.body.decode()
            pairs += parse_qsl(body, keep_blank_values=True)
        params: dict[str, t.Any] = {}
        for key, value in pairs:
            if key in params:
                params[key] = (params[key] if isinstance(params[key], list) else [params[key]]) + [value]
            else:
                params[key] = value
        path = parts.path
        from urllib.parse import unquote

        return (request.method or "", unquote(path[len("/api2/json") :]), params)

    def send(self, request: requests.PreparedRequest, **kwargs: t.Any) -> requests.Response:
        method, path, params = self.decode(request)
        self.sent.append((method, path, params))
        status, reason, body = self.responder(method, path, params)
        data = json.dumps(body).encode()
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(data),
            status=status,
            reason=reason,
            preload_content=False,
            headers={"Content-Type": "application/json"},
        )
        response = requests.Response()
        response.status_code = status
        response.reason = reason
        response.raw = raw
        response.headers = requests.structures.CaseInsensitiveDict(raw.headers)
        response.url = request.url or ""
        response.request = request
        return response

    def close(self) -> None:
        pass


def _token_settings(port: int, **overrides: t.Any) -> t.Any:
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings

    values: dict[str, t.Any] = {
        "host": "127.0.0.1",
        "port": port,
        "token_id": "automation@pve!vmanyware",
        "token_secret": "00000000-test-secret-0000-000000000000",
        "timeout": 5,
    }
    values.update(overrides)
    return build_settings(**values)


@pytest.fixture
def fixtures_dir() -> Path:
    return Path(__file__).resolve().parents[3] / "unit" / "fixtures"


@pytest.fixture
def make_settings() -> t.Callable[..., t.Any]:
    """``make_settings(port, **overrides)``: token ConnectionSettings for 127.0.0.1."""
    return _token_settings
