# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""TLS: verification by CA file or SHA-256 pin, the adapter that records per-request facts (connected, the leaf
certificate, bytes written), the certificate binding of a provider scope, and the refusals that keep a credential off
an unverified connection.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import socket
import ssl
import typing as t

from .._core.errors import ConfigurationError, ProviderError
from .http_errors import ExchangeFacts, connect_failure, provider_error
from .libraries import BaseAdapter, BaseConnection, BasePool, BasePoolManager, BaseSSLFailure, urllib3
from .settings import ConnectionSettings, normalize_fingerprint, system_trust_context

# Fixed texts of ``tls_unverified`` per rule (``details.rule``); the code's own text is the ``verified_tls_required`` one.
UNVERIFIED_TLS_TEXTS = {
    "verified_tls_required": "TLS is not verified (validate_certs is false and no api_fingerprint pin is set), so no credential is "
    "sent: configure a CA file (ca_path), the system CAs or a SHA-256 pin.",
    "read_only": "The connection is unverified (unverified_tls_read_only): only GET requests are sent over it; this request was not sent.",
    "password": "A password is never sent over unverified TLS (the login posts it): use an API token, or verify TLS with a CA file or a pin.",
    "scope": "A provider scope, a VMID lease, an operation or a stage needs verified TLS (a CA file or a SHA-256 pin); "
    "unverified_tls_read_only covers read-only checks only. Nothing was sent.",
}


# The warning every result read under ``unverified_tls_read_only`` carries (with ``tls_verified: false``).
UNVERIFIED_TLS_WARNING = (
    "Read over UNVERIFIED TLS (unverified_tls_read_only): the server's identity is not proven, so these results may "
    "come from another host; no provider scope was computed. Configure ca_path or api_fingerprint before provisioning."
)


def _unverified(rule: str, **details: t.Any) -> ConfigurationError:
    """A connection setting, not a provider answer: no ``except ProviderError`` (retries, reads, stage outcomes) can take it
    for something Proxmox said; it always ends the module."""
    return ConfigurationError(UNVERIFIED_TLS_TEXTS[rule], code="tls_unverified", details=dict(details, rule=rule))


def tls_refusal(settings: ConnectionSettings, method: str, path: str) -> ConfigurationError | None:
    """Why ``method path`` may not be sent over ``settings``' connection (a ``tls_unverified`` error), or ``None`` when it may.

    Verified TLS (a CA or a pin) allows every request. Unverified TLS allows nothing, except GETs under the explicit
    ``unverified_tls_read_only`` opt-in; the password login (``POST /access/ticket``) is never sent unverified.
    """
    if settings.tls_verified:
        return None
    if not settings.unverified_tls_read_only:
        return _unverified("verified_tls_required", method=method, endpoint=path)
    if path == "/access/ticket" or not settings.uses_token:
        return _unverified("password", method=method, endpoint=path)
    if method != "GET":
        return _unverified("read_only", method=method, endpoint=path)
    return None


def require_tls_for_reads(settings: ConnectionSettings) -> None:
    """``tls_unverified`` unless the connection is verified, or unverified under the read-only opt-in with an API token.

    For the read-only checks (preflights, capabilities), before any client is built: nothing is sent when this raises.
    """
    if settings.tls_verified:
        return
    if not settings.unverified_tls_read_only:
        raise _unverified("verified_tls_required")
    if not settings.uses_token:
        raise _unverified("password")


def require_verified_connection(settings: ConnectionSettings) -> None:
    """``tls_unverified`` unless a CA or a pin verifies the connection; the read-only opt-in does not count here.

    For whatever writes, leases or binds to a provider (operations, stages, cleanup, VMID leases, provider scopes).
    """
    if not settings.tls_verified:
        raise _unverified("scope" if settings.unverified_tls_read_only else "verified_tls_required")


def mark_tls(result: dict[str, t.Any], tls_verified: bool) -> dict[str, t.Any]:
    """``result`` with ``tls_verified``, and, when read unverified, the ``UNVERIFIED_TLS_WARNING`` among its ``warnings``."""
    result["tls_verified"] = tls_verified
    if not tls_verified:
        result["warnings"] = list(result.get("warnings") or []) + [UNVERIFIED_TLS_WARNING]
    return result


def provider_scope_id(settings: ConnectionSettings, certificate_sha256: str | None) -> str | None:
    """``pve:`` + SHA-256 of compact JSON {apiUrl, certificateSha256, user}; ``None`` without a certificate, and
    ``None`` over unverified TLS: a certificate nobody verified identifies no provider."""
    fingerprint = settings.fingerprint or certificate_sha256
    if not fingerprint or not settings.tls_verified:
        return None
    doc = {"apiUrl": settings.base_url, "certificateSha256": normalize_fingerprint(fingerprint), "user": settings.user}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "pve:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def bind_certificate(settings: ConnectionSettings, certificate_sha256: str) -> ConnectionSettings:
    """``settings`` whose client refuses any new connection presenting another leaf than ``certificate_sha256``
    (``certificate_changed``, checked after the handshake and before any byte of a request is written)."""
    return dataclasses.replace(settings, bound_certificate=normalize_fingerprint(certificate_sha256))


def certificate_fingerprint(settings: ConnectionSettings) -> str:
    """SHA-256 (lowercase hex) of the server certificate, without sending any request.

    With a pin (``api_fingerprint``) the pin itself is returned and nothing is contacted. Otherwise one
    TLS connection to ``host:port`` is opened and verified exactly as the client verifies
    (``ca_path``, else the operating system's trust store; host name checked; no verification when
    ``validate_certs`` is false), the handshake completes, the peer certificate is read, and the
    connection is closed before any HTTP byte is written. Failures: ``tls_verification_failed``
    (certificate or handshake refused) and ``transport_lost`` (no connection).
    """
    if settings.fingerprint:
        return settings.fingerprint
    host = settings.host[1:-1] if settings.host.startswith("[") else settings.host
    if settings.validate_certs:
        # Only the configured CA file, or the system trust store as the client uses it (never the environment's overrides).
        if settings.ca_path:
            context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.ca_path)
        else:
            context = system_trust_context()
    else:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    failure: ProviderError | None = None
    der: bytes | None = None
    try:
        with socket.create_connection((host, settings.port), timeout=settings.timeout) as raw:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                der = tls.getpeercert(binary_form=True)
    except (ssl.SSLError, ssl.CertificateError):
        failure = provider_error(
            "tls_verification_failed",
            "The server certificate did not match the configured CA or fingerprint pin.",
            method="CONNECT",
            path="/",
        )
    except OSError as exc:
        failure = connect_failure(exc, "CONNECT", "/")
    if failure is not None:
        raise failure
    if not der:
        raise provider_error(
            "tls_verification_failed", "The server presented no certificate.", method="CONNECT", path="/"
        )
    return hashlib.sha256(der).hexdigest()


class CertificateChangedError(BaseSSLFailure):  # type: ignore[misc]
    """A new connection presented another leaf certificate than the bound one (raised before any byte is written)."""


class _RecordingConnection(BaseConnection):  # type: ignore[misc]
    """An HTTPS connection that reports its handshake and its first write to the adapter that owns its pool."""

    recorder: PinnedTLSAdapter | None = None

    def connect(self) -> None:
        super().connect()  # TCP, TLS handshake, and with a pin urllib3's assert_fingerprint
        if self.recorder is not None:
            self.recorder.connected(self)

    def send(self, data: t.Any) -> None:
        # http.client's one write path (request line, headers, body): mark before the first byte can leave.
        if self.sock is None:
            self.connect()
        if self.recorder is not None:
            self.recorder.wrote()
        super().send(data)


class _RecordingPool(BasePool):  # type: ignore[misc]
    ConnectionCls = _RecordingConnection
    recorder: PinnedTLSAdapter | None = None

    def _new_conn(self) -> t.Any:
        conn = super()._new_conn()
        conn.recorder = self.recorder
        return conn


class _RecordingPoolManager(BasePoolManager):  # type: ignore[misc]
    def __init__(self, recorder: PinnedTLSAdapter, **kwargs: t.Any) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder
        self.pool_classes_by_scheme: dict[str, t.Any] = {
            "http": urllib3.connectionpool.HTTPConnectionPool,
            "https": _RecordingPool,
        }

    def _new_pool(self, scheme: str, host: str, port: int, request_context: dict[str, t.Any] | None = None) -> t.Any:
        pool = super()._new_pool(scheme, host, port, request_context)
        if isinstance(pool, _RecordingPool):
            pool.recorder = self.recorder
        return pool


class PinnedTLSAdapter(BaseAdapter):  # type: ignore[misc]
    """An ``HTTPAdapter`` whose connections check the server certificate during the handshake and record each exchange.

    urllib3 compares ``assert_fingerprint`` (the pin) right after the TLS handshake, inside ``connect()``; then the
    connection compares its leaf with ``bound_certificate`` when one is set. Either mismatch aborts before the request
    line, headers or credentials are written. ``facts`` (reset by ``begin``) records what happened for the current
    request: the client classifies a failure by it. urllib3's own retries are off (``max_retries=0``): retry policy
    lives in the client.
    """

    def __init__(
        self,
        fingerprint: str | None = None,
        bound_certificate: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._fingerprint = fingerprint
        self._bound = bound_certificate
        self._ssl_context = ssl_context  # the system trust store (no pin, no ca_path)
        self.facts = ExchangeFacts()
        super().__init__(max_retries=0, pool_connections=1, pool_maxsize=2)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: t.Any) -> None:
        if self._fingerprint:
            pool_kwargs["assert_fingerprint"] = self._fingerprint
        if self._ssl_context is not None:
            pool_kwargs["ssl_context"] = self._ssl_context
        self._pool_connections = connections
        self._pool_maxsize = maxsize
        self._pool_block = block
        self.poolmanager = _RecordingPoolManager(
            self, num_pools=connections, maxsize=maxsize, block=block, **pool_kwargs
        )

    def begin(self) -> ExchangeFacts:
        """Start recording one request attempt."""
        self.facts = ExchangeFacts()
        return self.facts

    def connected(self, conn: t.Any) -> None:
        """A new connection completed its handshake: record its leaf; refuse it (closed, nothing written) when unbound."""
        der = conn.sock.getpeercert(binary_form=True) if conn.sock is not None else None
        leaf = hashlib.sha256(der).hexdigest() if der else None
        self.facts.connected = True
        self.facts.leaf_sha256 = leaf
        if self._bound is not None and leaf != self._bound:
            self.facts.certificate_changed = True
            conn.close()
            raise CertificateChangedError("the server presented another certificate than the bound one")

    def wrote(self) -> None:
        self.facts.written = True

    def cert_verify(self, conn: t.Any, url: str, verify: t.Any, cert: t.Any) -> None:
        super().cert_verify(conn, url, verify, cert)
        if self._ssl_context is not None:
            conn.ca_certs = None  # the system store alone, not requests' certifi bundle on top
