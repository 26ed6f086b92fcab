# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one Proxmox VE HTTP client of the collection.

Design choice: the client talks to the API through ``requests`` directly, with a thin
proxmoxer-compatible path builder (``client.api.nodes("pve").qemu(100).config.get()``) on top,
and builds the token ``Authorization`` header itself (one line; proxmoxer is not a dependency:
docs/development.md). proxmoxer's own session cannot give the control this collection needs: its ticket login posts
through the module-level ``requests.post`` (outside any pinned adapter and with the
environment's CA bundle), it keeps ``trust_env`` on, it reads whole bodies without a bound, it
cannot pin a certificate during the handshake, and it cannot tell "nothing was sent" from
"sent, reply lost". So this module owns:

- TLS: verified unless ``validate_certs`` is explicitly false; ``session.trust_env`` is off and
  ``verify=`` is passed per request (REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE never override
  ``ca_path``); an optional SHA-256 pin is checked by urllib3 (``assert_fingerprint``) right
  after the handshake, before any request byte (so before any credential) is written. A pin
  replaces the CA chain check (the usual self-signed PVE certificate). No request (so no token, no
  password) is ever sent over TLS that neither a CA nor a pin verifies (``tls_unverified``), except GETs
  with an API token under the explicit ``unverified_tls_read_only`` opt-in (``tls_refusal``); no
  provider scope is computed from an unverified certificate (``provider_scope_id``). The trust anchor, in order:
  the pin, else ``ca_path``, else the operating system's trust store (``truststore``, as pip
  uses it; without that package, OpenSSL's default paths), never certifi's bundle. A client bound to a certificate
  (``bound_certificate``: the one an operation's provider scope was computed from) compares the leaf of every new
  connection with it right after the handshake, before any byte is written (``certificate_changed``).
- "not sent" by fact, not by exception type: the adapter's connections record, per request, whether a new
  connection was made and which leaf it presented, and whether any byte of the request was written. Only a failure
  before the first byte is "not sent" (``transport_lost``, ``tls_verification_failed``, ``certificate_changed``);
  any failure after it (a TLS error or reset while reading the reply, a timeout, a reply over the bound, an
  undecodable reply) leaves the outcome unknown (``reply_lost``, ``response_too_large``, ``unexpected_response``).
- proxies: none. A proxy the environment configures for the API's URL (``https_proxy``/``all_proxy``
  without a matching ``no_proxy``) is refused (``proxy_not_supported``), not silently bypassed.
- bounded, streamed responses (``max_response_bytes``) and a per-request timeout;
- no retry of any mutation; bounded retries with backoff for GETs on connection errors and 5xx;
- typed errors with fixed codes (``_errors.py``); no raw provider body, no secret in any error.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import re
import socket
import ssl
import time
import typing as t
import warnings
from urllib.parse import quote

from .._core import crash as _crash
from .._core.errors import ConfigurationError, ProviderError
from .._core.protocols import ApiVerbs
from .._core.redaction import redact

try:
    import requests
    import requests.adapters
    import requests.utils
    import requests.exceptions
    import urllib3
    import urllib3.connection
    import urllib3.connectionpool
    import urllib3.exceptions
    import urllib3.poolmanager
except ImportError:  # pragma: no cover - exercised by the sanity import test only
    HAS_REQUESTS = False
    _BaseAdapter: t.Any = object
    _BaseConnection: t.Any = object
    _BasePool: t.Any = object
    _BasePoolManager: t.Any = object
    _BaseSSLFailure: t.Any = Exception
else:
    HAS_REQUESTS = True
    _BaseAdapter = requests.adapters.HTTPAdapter
    _BaseConnection = urllib3.connection.HTTPSConnection
    _BasePool = urllib3.connectionpool.HTTPSConnectionPool
    _BasePoolManager = urllib3.poolmanager.PoolManager
    _BaseSSLFailure = urllib3.exceptions.SSLError

try:
    import truststore
except ImportError:  # pragma: no cover - requirements.txt installs it; OpenSSL's default paths then
    HAS_TRUSTSTORE = False
else:
    HAS_TRUSTSTORE = True

DEFAULT_PORT = 8006
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024
GET_ATTEMPTS = 3
GET_BACKOFF = (0.2, 0.6)
MUTATING_METHODS = frozenset({"POST", "PUT", "DELETE"})
_CHUNK = 64 * 1024

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_TOKEN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9.\-_]+$")
_USERID = re.compile(r"^[^\s:/!]+@[A-Za-z][A-Za-z0-9.\-_]+$")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*|[A-Za-z0-9._-]+)$")
_PERM_CHECK = re.compile(r"Permission check failed \((/[^,()\s]*), ([A-Za-z][A-Za-z0-9.]*)\)")
# "CT is locked (...)": pve-container's refusal (AbstractConfig::check_lock names the guest type), like qemu-server's "VM is locked".
_LOCKED = re.compile(r"(?:VM|CT) is locked \(([a-z-]+)\)|can't lock file .* got timeout", re.IGNORECASE)
_NOT_FOUND = re.compile(r"does not exist|no such (vm|task|storage|file|node)", re.IGNORECASE)
_CONFLICT = re.compile(r"detected modified configuration|checksum mismatch|digest mismatch|already exists", re.IGNORECASE)
# Guest agent failures (HTTP 500), classified into fixed tokens for ``details['agent']`` (the text is never forwarded).
# qemu-server's ``PVE::QemuServer::Agent::agent_available`` dies with the first three before the agent command is sent;
# ``... has been disabled`` and ``Failed to execute child process`` are the agent's own refusal to spawn: nothing ran.
_AGENT_REASONS = (
    (re.compile(r"QEMU guest agent is not running"), "not_running"),
    (re.compile(r"guest-exec has been disabled|command guest-\S+ has been disabled"), "exec_disabled"),
    (re.compile(r"No QEMU guest agent configured"), "not_configured"),
    (re.compile(r"Invalid parameter 'pid'"), "unknown_pid"),
    (re.compile(r"Failed to execute child process"), "exec_failed"),
    (re.compile(r"failed to open file"), "file_not_found"),
    (re.compile(r"VM \d+ is not running"), "vm_not_running"),
)
# The agent tokens that prove the request's command never reached (or never started in) the guest: pre-check refusals.
PRECHECK_AGENT_REASONS = frozenset({"not_running", "exec_disabled", "not_configured", "exec_failed", "vm_not_running"})

RequestLog = t.Callable[[str, str, t.Mapping[str, t.Any], t.Optional[int]], None]


@dataclasses.dataclass(frozen=True)
class ConnectionSettings:
    """Plain connection values; modules build it with ``_argspec.connection_settings``.

    ``token_user`` is ``user@realm`` and ``token_name`` the bare token name (never the secret).
    ``fingerprint`` is the normalized pin (64 lowercase hex digits) or ``None``.
    """

    host: str
    port: int = DEFAULT_PORT
    user: str | None = None
    token_name: str | None = None
    token_secret: str | None = dataclasses.field(default=None, repr=False)
    password: str | None = dataclasses.field(default=None, repr=False)
    validate_certs: bool = True
    ca_path: str | None = None
    fingerprint: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    unverified_tls_read_only: bool = False
    # The leaf certificate (SHA-256, 64 lowercase hex) every new connection must present: set by ``bind_certificate``
    # for a run bound to an operation (the certificate its provider scope was computed from), else ``None``.
    bound_certificate: str | None = None

    @property
    def tls_verified(self) -> bool:
        """True when a CA (``validate_certs``, ``ca_path`` or the system CAs) or a SHA-256 pin proves the server's identity."""
        return bool(self.fingerprint) or bool(self.validate_certs)

    @property
    def base_url(self) -> str:
        return f"https://{_url_host(self.host)}:{self.port}/api2/json"

    @property
    def uses_token(self) -> bool:
        return self.token_name is not None


def _url_host(host: str) -> str:
    host = host.strip().lower()
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def normalize_fingerprint(value: str) -> str:
    """``AB:CD:...`` or ``abcd...`` (64 hex digits, any case) -> 64 lowercase hex digits."""
    text = value.strip().lower().replace(":", "")
    if not _HEX64.match(text):
        raise ConfigurationError("api_fingerprint must be a SHA-256 fingerprint: 64 hex digits, optionally colon-separated.",
                                 path="api_fingerprint")
    return text


def parse_token_id(token_id: str, user: str | None) -> tuple[str, str]:
    """Accept ``user@realm!name`` or a bare ``name`` together with ``api_user``; return (user, name)."""
    token_id = token_id.strip()
    if "!" in token_id:
        token_user, _sep, name = token_id.partition("!")
        if not _USERID.match(token_user):
            raise ConfigurationError("api_token_id must be user@realm!name or a bare token name.", path="api_token_id")
        if user and user.strip() != token_user:
            raise ConfigurationError("api_user does not match the user in api_token_id.", path="api_user")
    else:
        if not user:
            raise ConfigurationError("A bare api_token_id needs api_user (user@realm).", path="api_user")
        token_user, name = user.strip(), token_id
        if not _USERID.match(token_user):
            raise ConfigurationError("api_user must have the form user@realm.", path="api_user")
    if not _TOKEN_NAME.match(name):
        raise ConfigurationError("api_token_id must be user@realm!name or a bare token name.", path="api_token_id")
    return token_user, name


def validate_endpoint(host: str | None, port: int | None, timeout: float | None) -> tuple[str, int, float]:
    """``api_host``, ``api_port``, ``api_timeout`` checked and defaulted (``configuration_error`` otherwise)."""
    if not host or not host.strip():
        raise ConfigurationError("api_host is not set: give the api_host option or set PROXMOX_HOST.", path="api_host",
                                 details={"rule": "required", "environment": "PROXMOX_HOST"})
    if not _HOST.match(host.strip()):
        raise ConfigurationError("api_host must be a host name or IP address without scheme, port or path.", path="api_host")
    port = DEFAULT_PORT if port is None else int(port)
    if not 1 <= port <= 65535:
        raise ConfigurationError("api_port must be between 1 and 65535.", path="api_port")
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not 0 < timeout <= 3600:
        raise ConfigurationError("api_timeout must be greater than 0 and at most 3600 seconds.", path="api_timeout")
    return host, port, timeout


def require_readable_ca(ca_path: str | None) -> None:
    """``configuration_error`` unless ``ca_path`` is unset or a readable file."""
    if ca_path is not None:
        try:
            with open(ca_path, "rb"):
                pass
        except OSError:
            raise ConfigurationError("ca_path is not a readable file.", path="ca_path") from None


def refuse_environment_proxy(host: str, port: int) -> None:
    """``proxy_not_supported`` when the environment routes ``https://host:port`` through a proxy.

    The client connects directly (``trust_env`` off): a proxy would break what the client promises about a
    request (nothing sent vs. reply lost, the pin checked before any byte). Rather than bypassing a configured
    proxy silently, it is refused; ``no_proxy`` naming the host (as requests matches it) lets the connection go direct.
    """
    if not HAS_REQUESTS:
        return
    proxies = requests.utils.get_environ_proxies("https://%s:%d/" % (host, port))
    if proxies.get("https") or proxies.get("all"):
        raise ConfigurationError(
            "A proxy is configured for the Proxmox API (https_proxy or all_proxy); the collection connects directly only: "
            "add the host to no_proxy.", code="proxy_not_supported", path="api_host")


def system_trust_context() -> ssl.SSLContext:
    """The operating system's trust store: ``truststore`` (as pip), else OpenSSL's default verify paths."""
    if HAS_TRUSTSTORE:
        context: ssl.SSLContext = truststore.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return context
    return ssl.create_default_context(ssl.Purpose.SERVER_AUTH)


def build_settings(
    *,
    host: str | None,
    port: int | None = DEFAULT_PORT,
    user: str | None = None,
    token_id: str | None = None,
    token_secret: str | None = None,
    password: str | None = None,
    validate_certs: bool = True,
    ca_path: str | None = None,
    fingerprint: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    unverified_tls_read_only: bool = False,
) -> ConnectionSettings:
    """Validate raw option values into ``ConnectionSettings`` (``configuration_error`` otherwise)."""
    host, port, timeout = validate_endpoint(host, port, timeout)
    token_user: str | None = None
    token_name: str | None = None
    if token_id or token_secret:
        if not (token_id and token_secret):
            raise ConfigurationError("api_token_id and api_token_secret must be given together.", path="api_token_secret")
        token_user, token_name = parse_token_id(token_id, user)
    elif password:
        if not user or not _USERID.match(user.strip()):
            raise ConfigurationError("Password authentication needs api_user of the form user@realm.", path="api_user")
        token_user = user.strip()
    else:
        raise ConfigurationError("Configure an API token (api_token_id, api_token_secret) or api_user with api_password.",
                                 path="api_token_id")
    require_readable_ca(ca_path)
    refuse_environment_proxy(host.strip().lower(), port)
    return ConnectionSettings(
        host=host.strip().lower(),
        port=port,
        user=token_user,
        token_name=token_name,
        token_secret=token_secret if token_name else None,
        password=None if token_name else password,
        validate_certs=bool(validate_certs),
        ca_path=ca_path,
        fingerprint=normalize_fingerprint(fingerprint) if fingerprint else None,
        timeout=timeout,
        max_response_bytes=int(max_response_bytes),
        unverified_tls_read_only=bool(unverified_tls_read_only),
    )


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
UNVERIFIED_TLS_WARNING = ("Read over UNVERIFIED TLS (unverified_tls_read_only): the server's identity is not proven, so these results may "
                          "come from another host; no provider scope was computed. Configure ca_path or api_fingerprint before provisioning.")


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
        failure = _error("tls_verification_failed", "The server certificate did not match the configured CA or fingerprint pin.",
                         method="CONNECT", path="/")
    except OSError as exc:
        failure = _connect_failure(exc, "CONNECT", "/")
    if failure is not None:
        raise failure
    if not der:
        raise _error("tls_verification_failed", "The server presented no certificate.", method="CONNECT", path="/")
    return hashlib.sha256(der).hexdigest()


@dataclasses.dataclass
class ExchangeFacts:
    """What the transport did for one request attempt, recorded as it happened (never inferred from an exception).

    ``connected``: a new connection was opened for it and its TLS handshake completed; ``leaf_sha256``: the leaf
    certificate that connection presented; ``certificate_changed``: that leaf was not the bound one, and the connection
    was closed before any byte was written; ``written``: at least one byte of the request was handed to the socket
    (from then on the request may have reached Proxmox, whatever fails next).
    """

    connected: bool = False
    leaf_sha256: str | None = None
    certificate_changed: bool = False
    written: bool = False


class CertificateChangedError(_BaseSSLFailure):  # type: ignore[misc]
    """A new connection presented another leaf certificate than the bound one (raised before any byte is written)."""


class _RecordingConnection(_BaseConnection):  # type: ignore[misc]
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


class _RecordingPool(_BasePool):  # type: ignore[misc]
    ConnectionCls = _RecordingConnection
    recorder: PinnedTLSAdapter | None = None

    def _new_conn(self) -> t.Any:
        conn = super()._new_conn()
        conn.recorder = self.recorder
        return conn


class _RecordingPoolManager(_BasePoolManager):  # type: ignore[misc]
    def __init__(self, recorder: PinnedTLSAdapter, **kwargs: t.Any) -> None:
        super().__init__(**kwargs)
        self.recorder = recorder
        self.pool_classes_by_scheme: dict[str, t.Any] = {"http": urllib3.connectionpool.HTTPConnectionPool, "https": _RecordingPool}

    def _new_pool(self, scheme: str, host: str, port: int, request_context: dict[str, t.Any] | None = None) -> t.Any:
        pool = super()._new_pool(scheme, host, port, request_context)
        if isinstance(pool, _RecordingPool):
            pool.recorder = self.recorder
        return pool


class PinnedTLSAdapter(_BaseAdapter):  # type: ignore[misc]
    """An ``HTTPAdapter`` whose connections check the server certificate during the handshake and record each exchange.

    urllib3 compares ``assert_fingerprint`` (the pin) right after the TLS handshake, inside ``connect()``; then the
    connection compares its leaf with ``bound_certificate`` when one is set. Either mismatch aborts before the request
    line, headers or credentials are written. ``facts`` (reset by ``begin``) records what happened for the current
    request: the client classifies a failure by it. urllib3's own retries are off (``max_retries=0``): retry policy
    lives in the client.
    """

    def __init__(self, fingerprint: str | None = None, bound_certificate: str | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
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
        self.poolmanager = _RecordingPoolManager(self, num_pools=connections, maxsize=maxsize, block=block, **pool_kwargs)

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


class _Resource:
    """proxmoxer-style path builder: ``client.api.nodes("pve").qemu(100).config.get()``."""

    def __init__(self, client: ProxmoxClient, path: str = "") -> None:
        self._client = client
        self._path = path

    def __getattr__(self, name: str) -> _Resource:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Resource(self._client, f"{self._path}/{name}")

    def __call__(self, *segments: t.Any) -> _Resource:
        path = self._path
        for segment in segments:
            path = f"{path}/{segment}"
        return _Resource(self._client, path)

    def get(self, **params: t.Any) -> t.Any:
        return self._client.get(self._path, **params)

    def post(self, **params: t.Any) -> t.Any:
        return self._client.post(self._path, **params)

    def put(self, **params: t.Any) -> t.Any:
        return self._client.put(self._path, **params)

    def delete(self, **params: t.Any) -> t.Any:
        return self._client.delete(self._path, **params)


def _error(code: str, message: str, *, method: str, path: str, status: int | None = None, **details: t.Any) -> ProviderError:
    """A ProviderError whose details name the request (``method``, ``endpoint``) and status: never a body."""
    info: dict[str, t.Any] = {"method": method, "endpoint": path}
    if status is not None:
        info["status"] = status
    info.update(details)
    return ProviderError(message, code=code, details=info)


def map_http_error(method: str, path: str, status: int, reason: str, body: t.Any) -> ProviderError:
    """Map a PVE error response to a typed error; only safe facts go into the error.

    PVE puts its message in the HTTP reason phrase and (format json) in ``message``; parameter
    errors come as ``errors: {name: text}``. Texts are read to classify, never forwarded.

    ``details['precheck']`` is True only when the reply proves a refusal before any effect
    (docs/stages.md, "Outcomes of a send"): pve-common's RESTHandler answers 401/403 (authentication and
    the permission check), 400 (parameter verification), 404 and 501 (no such method) before it calls the
    handler; inside a handler a lock that was not obtained, an object that already exists or does not
    exist, and the guest agent checks (``PRECHECK_AGENT_REASONS``) refuse before the work starts. Any other
    reply (a plain 500 such as ``guest-exec failed - got timeout``, 503, 596, ...) says nothing about the
    effect: the request's outcome is unknown and goes to reads.
    """
    message = ""
    errors: dict[str, t.Any] = {}
    if isinstance(body, dict):
        if isinstance(body.get("message"), str):
            message = body["message"]
        if isinstance(body.get("errors"), dict):
            errors = body["errors"]
    text = f"{reason or ''}\n{message}"
    error_texts = " ".join(str(v) for v in errors.values())
    names = sorted(str(k) for k in errors)
    ctx: dict[str, t.Any] = {"method": method, "path": path, "status": status}
    if status == 401:
        return _error("auth_failed", "Proxmox rejected the credentials.", precheck=True, **ctx)
    if status == 403:
        match = _PERM_CHECK.search(text)
        err = _error("permission_denied", "The token lacks a privilege on a path.", precheck=True, **ctx)
        if match:
            err.details["path"] = match.group(1)
            err.details["privilege"] = match.group(2)
        return err
    if status == 400:
        if _CONFLICT.search(error_texts) or _CONFLICT.search(text):
            return _error("conflict", "Proxmox reports that the object already exists or changed concurrently.", parameters=names,
                          precheck=True, **ctx)
        return _error("parameter_invalid", "Proxmox rejected a request parameter.", parameters=names, precheck=True, **ctx)
    if status == 404:
        return _error("not_found", "The requested object does not exist.", precheck=True, **ctx)
    lock = _LOCKED.search(text)
    if lock:
        extra_lock: dict[str, t.Any] = {"lock": lock.group(1)} if lock.group(1) else {}
        return _error("locked", "The target is locked by another task.", precheck=True, **ctx, **extra_lock)
    if _CONFLICT.search(text):
        return _error("conflict", "Proxmox reports that the object already exists or changed concurrently.", precheck=True, **ctx)
    if status >= 500 and _NOT_FOUND.search(text):
        return _error("not_found", "The requested object does not exist.", precheck=True, **ctx)
    if status >= 500:
        for pattern, token in _AGENT_REASONS:
            if pattern.search(text):
                return _error("server_error", "Proxmox answered with a server error.", agent=token,
                              precheck=token in PRECHECK_AGENT_REASONS, **ctx)
        return _error("server_error", "Proxmox answered with a server error.", precheck=status == 501, **ctx)
    return _error("unexpected_response", "Proxmox answered with an unexpected HTTP status.", precheck=False, **ctx)


def _exception_chain(exc: BaseException) -> t.Iterator[BaseException]:
    """``exc`` and every exception it wraps (causes, contexts, arguments, urllib3 retry reasons), once each."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        item = stack.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        yield item
        if HAS_REQUESTS and isinstance(item, urllib3.exceptions.MaxRetryError):
            stack.append(item.reason)
        stack.extend(a for a in getattr(item, "args", ()) if isinstance(a, BaseException))
        stack.append(item.__cause__)
        stack.append(item.__context__)


# Why no connection was made, as operators read it (``error_details.reason`` of ``transport_lost``).
CONNECT_FAILURE_TEXTS = {
    "connection_refused": "The connection was refused: nothing accepts connections on api_host:api_port (wrong port, or the API is down).",
    "connect_timeout": "The connection timed out before it was established (host down, firewall, or a wrong address).",
    "name_resolution": "The host name in api_host could not be resolved.",
    "network_unreachable": "The network or host of api_host is unreachable.",
    "connect_failed": "The connection failed before the request could reach Proxmox.",
}


def connect_failure_reason(exc: BaseException) -> str:
    """The reason key (``CONNECT_FAILURE_TEXTS``) of a failure to connect, from the exception chain."""
    chain = list(_exception_chain(exc))
    # Most specific first: urllib3's NewConnectionError is a ConnectTimeoutError subclass even when
    # the socket error under it is a refusal, so the underlying OS error decides.
    if any(isinstance(item, ConnectionRefusedError) for item in chain):
        return "connection_refused"
    if any(isinstance(item, socket.gaierror) for item in chain) or (
            HAS_REQUESTS and any(isinstance(item, urllib3.exceptions.NameResolutionError) for item in chain)):
        return "name_resolution"
    if any(isinstance(item, OSError) and item.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) for item in chain):
        return "network_unreachable"
    if any(isinstance(item, (TimeoutError, socket.timeout)) for item in chain) or (
            HAS_REQUESTS and any(isinstance(item, urllib3.exceptions.ConnectTimeoutError)
                                 and not isinstance(item, urllib3.exceptions.NewConnectionError) for item in chain)):
        return "connect_timeout"
    return "connect_failed"


def _connect_failure(exc: BaseException, method: str, path: str) -> ProviderError:
    reason = connect_failure_reason(exc)
    return _error("transport_lost", CONNECT_FAILURE_TEXTS[reason], method=method, path=path, reason=reason)


def _is_connect_phase(exc: BaseException) -> bool:
    """True when a requests ConnectionError happened before any request byte was sent (by exception type: only for a
    transport that records no ``ExchangeFacts``)."""
    connect_errors = (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NameResolutionError)
    return any(isinstance(item, connect_errors) for item in _exception_chain(exc))


def _is_handshake_refusal(exc: BaseException) -> bool:
    """True when the exception chain holds a certificate verification failure (only a handshake raises those)."""
    return any(isinstance(item, (ssl.SSLCertVerificationError, ssl.CertificateError)) for item in _exception_chain(exc))


REPLY_LOST_TEXT = "The request was sent but its reply was lost; the outcome is unknown."
CERTIFICATE_CHANGED_TEXT = ("The server presented another certificate than the one the operation's provider scope was computed from; "
                            "nothing was sent.")
TLS_REFUSED_TEXT = "The server certificate did not match the configured CA or fingerprint pin."


def transport_failure(exc: BaseException, facts: ExchangeFacts | None, method: str, path: str) -> ProviderError:
    """The typed error of a request that raised before a response arrived, decided by what the transport recorded.

    Not sent (the first byte of the request was never written): ``certificate_changed`` (the new connection's leaf is
    not the bound one), ``tls_verification_failed`` (the handshake failed), ``transport_lost`` (no connection).
    Anything after the first byte (a TLS error or reset while reading the reply, a read timeout) is ``reply_lost``.
    Without facts (a transport that records none), only a connect-phase exception or a certificate verification
    failure counts as not sent; any other failure is unknown.
    """
    if facts is not None:
        if facts.certificate_changed:
            return _error("certificate_changed", CERTIFICATE_CHANGED_TEXT, method=method, path=path)
        if facts.written:
            return _error("reply_lost", REPLY_LOST_TEXT, method=method, path=path)
        if HAS_REQUESTS and isinstance(exc, requests.exceptions.SSLError):
            return _error("tls_verification_failed", TLS_REFUSED_TEXT, method=method, path=path)
        return _connect_failure(exc, method, path)
    if HAS_REQUESTS and isinstance(exc, requests.exceptions.SSLError) and _is_handshake_refusal(exc):
        return _error("tls_verification_failed", TLS_REFUSED_TEXT, method=method, path=path)
    if HAS_REQUESTS and (isinstance(exc, requests.exceptions.ConnectTimeout) or (
            isinstance(exc, requests.exceptions.ConnectionError) and not isinstance(exc, requests.exceptions.SSLError)
            and _is_connect_phase(exc))):
        return _connect_failure(exc, method, path)
    return _error("reply_lost", REPLY_LOST_TEXT, method=method, path=path)


class ProxmoxClient(ApiVerbs):
    """Typed, bounded access to the PVE API.

    ``get``/``post``/``put``/``delete`` (path positional-only, so ``path=`` can be an API parameter) return the
    response's ``data``; ``request`` returns the whole
    JSON envelope (``data``, ``total`` ...). ``request_log`` (optional) is called once per attempt with
    ``(method, path, redacted params, HTTP status or None)``.
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        *,
        request_log: RequestLog | None = None,
        adapter: t.Any = None,
        sleep: t.Callable[[float], None] = time.sleep,
        clock: t.Callable[[], float] = time.monotonic,
    ) -> None:
        if not HAS_REQUESTS:
            raise ConfigurationError("The Python library requests is required.")
        self.settings = settings
        self._request_log = request_log
        self._sleep = sleep
        self._clock = clock
        self._session = requests.Session()
        self._session.trust_env = False
        self._session.verify = self._verify
        self._session.headers["Accept"] = "application/json"
        system_store = settings.validate_certs and not settings.fingerprint and not settings.ca_path
        self._adapter = adapter if adapter is not None else PinnedTLSAdapter(
            settings.fingerprint, settings.bound_certificate, system_trust_context() if system_store else None)
        self._session.mount("https://", self._adapter)
        self._ticket: tuple[str, str] | None = None
        # Read once per client: the test-only crash hook costs one ``is None`` test per request when unset.
        self._crash_at = _crash.HttpCrashPoint.from_environment(_crash.crash_at())
        self.observed_fingerprint: str | None = None
        self.api = _Resource(self)

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ProxmoxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def provider_scope_id(self) -> str | None:
        return provider_scope_id(self.settings, self.observed_fingerprint)

    @property
    def _verify(self) -> bool | str:
        if self.settings.fingerprint:
            return False  # the pin is the trust anchor, checked by urllib3 during the handshake
        if not self.settings.validate_certs:
            return False
        return self.settings.ca_path or True

    # -- public verbs (get/post/put/delete: ApiVerbs) ---------------------------------------------------
    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        """Send one request (GETs retried on connection errors and 5xx); return the JSON envelope."""
        method = method.upper()
        params = {k: v for k, v in (params or {}).items() if v is not None}
        if not path.startswith("/"):
            path = "/" + path
        refusal = tls_refusal(self.settings, method, path)
        if refusal is not None:  # before the login and the request: nothing is sent, nothing is logged
            raise refusal
        attempts = GET_ATTEMPTS if method == "GET" else 1
        for attempt in range(attempts):
            try:
                return self._send_once(method, path, params)
            except ProviderError as err:
                retryable = err.code in ("transport_lost", "reply_lost") or (
                    err.code == "server_error" and err.details.get("status") != 501)
                if method != "GET" or not retryable or attempt + 1 >= attempts:
                    raise
                self._sleep(GET_BACKOFF[min(attempt, len(GET_BACKOFF) - 1)])
        raise AssertionError("unreachable")  # pragma: no cover

    # -- internals -------------------------------------------------------------------------------------------
    def _log(self, method: str, path: str, params: t.Mapping[str, t.Any], status: int | None) -> None:
        if self._request_log is not None:
            self._request_log(method, path, redact(params), status)

    def _auth(self, method: str) -> tuple[t.Any, dict[str, str], dict[str, str]]:
        settings = self.settings
        if settings.uses_token:
            return None, {"Authorization": "PVEAPIToken=%s!%s=%s" % (settings.user, settings.token_name, settings.token_secret)}, {}
        if self._ticket is None:
            self._login()
        if self._ticket is None:  # pragma: no cover - _login sets it or raises
            raise AssertionError("no ticket after login")
        ticket, csrf = self._ticket
        headers = {"CSRFPreventionToken": csrf} if method != "GET" else {}
        return None, headers, {"PVEAuthCookie": ticket}

    def _login(self) -> None:
        params = {"username": self.settings.user, "password": self.settings.password}
        data = self._exchange("POST", "/access/ticket", params, auth=None, headers={}, cookies={}).get("data")
        if not isinstance(data, dict) or not isinstance(data.get("ticket"), str) or not isinstance(data.get("CSRFPreventionToken"), str):
            raise _error("unexpected_response", "Proxmox answered the login with an unexpected body.", method="POST", path="/access/ticket")
        if data.get("NeedTFA"):
            raise _error("auth_failed", "The user requires a second factor; use an API token.", method="POST", path="/access/ticket")
        self._ticket = (data["ticket"], data["CSRFPreventionToken"])

    def _send_once(self, method: str, path: str, params: dict[str, t.Any]) -> dict[str, t.Any]:
        auth, headers, cookies = self._auth(method)
        return self._exchange(method, path, params, auth=auth, headers=headers, cookies=cookies)

    def _exchange(self, method: str, path: str, params: dict[str, t.Any], *, auth: t.Any, headers: dict[str, str],
                  cookies: dict[str, str]) -> dict[str, t.Any]:
        refusal = tls_refusal(self.settings, method, path)  # every exchange, the login included
        if refusal is not None:
            raise refusal
        url = self.settings.base_url + quote(path, safe="/:@!=,._~-")
        encoded = {k: _encode_value(v) for k, v in params.items()}
        query, form = (encoded, None) if method in ("GET", "DELETE") else (None, encoded)
        timeout = self.settings.timeout
        started = self._clock()
        # Errors are built inside the except blocks but raised outside them, so no exception from
        # requests/urllib3 (whose ``request`` carries the Authorization header) stays chained as context.
        failure: ProviderError | None = None
        response: t.Any = None
        if self._crash_at is not None:
            self._crash_at.check("before_send", method, path)
        begin = getattr(self._adapter, "begin", None)
        facts: ExchangeFacts | None = begin() if begin is not None else None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                response = self._session.request(
                    method, url, params=query, data=form, auth=auth, headers=headers, cookies=cookies,
                    verify=self._verify, timeout=(timeout, timeout), stream=True, allow_redirects=False,
                )
        except requests.exceptions.RequestException as exc:
            failure = transport_failure(exc, facts, method, path)
        if failure is not None:
            self._log(method, path, params, None)
            raise failure
        try:
            self._observe_certificate(response, facts)
            body = self._read_bounded(response, method, path, started)
        finally:
            response.close()
            self._log(method, path, params, response.status_code)
        if self._crash_at is not None:
            self._crash_at.check("after_reply", method, path)
        parsed: t.Any = None
        if body:
            try:
                parsed = json.loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                parsed = None
        status = response.status_code
        if status >= 300:
            raise map_http_error(method, path, status, response.reason or "", parsed)
        if not isinstance(parsed, dict) or "data" not in parsed:
            raise _error("unexpected_response", "Proxmox answered with a body the collection does not understand.",
                         method=method, path=path, status=status)
        return parsed

    def _read_bounded(self, response: t.Any, method: str, path: str, started: float) -> bytes:
        limit = self.settings.max_response_bytes
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise _error("response_too_large", "The response exceeded the configured size bound.",
                         method=method, path=path, status=response.status_code, limit=limit)
        chunks: list[bytes] = []
        size = 0
        lost = False
        try:
            for chunk in response.raw.stream(_CHUNK, decode_content=True):
                size += len(chunk)
                if size > limit:
                    raise _error("response_too_large", "The response exceeded the configured size bound.",
                                 method=method, path=path, status=response.status_code, limit=limit)
                chunks.append(chunk)
                if self._clock() - started > self.settings.timeout:
                    raise _error("reply_lost", "The reply did not arrive within the timeout; the outcome is unknown.",
                                 method=method, path=path, status=response.status_code)
        except ProviderError:
            raise
        except (urllib3.exceptions.HTTPError, OSError, requests.exceptions.RequestException):
            lost = True
        if lost:
            raise _error("reply_lost", REPLY_LOST_TEXT, method=method, path=path, status=response.status_code)
        return b"".join(chunks)

    def _observe_certificate(self, response: t.Any, facts: ExchangeFacts | None) -> None:
        if self.observed_fingerprint is not None:
            return
        if facts is not None:
            self.observed_fingerprint = facts.leaf_sha256  # None on a reused connection (its leaf was seen when it was made)
            return
        try:  # a transport that records nothing (tests mount their own adapter)
            sock = response.raw.connection.sock
            der = sock.getpeercert(binary_form=True)
        except Exception:  # pylint: disable=broad-exception-caught
            return
        if der:
            self.observed_fingerprint = hashlib.sha256(der).hexdigest()


def _encode_value(value: t.Any) -> t.Any:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (list, tuple)):
        return [_encode_value(v) for v in value]
    return value
