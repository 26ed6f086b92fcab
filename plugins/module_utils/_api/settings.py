# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The connection settings (``ConnectionSettings``) and their validation: endpoint, token, CA file or SHA-256 pin, proxies refused, the system trust store.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import re
import ssl

from .._core.errors import ConfigurationError
from .libraries import HAS_REQUESTS, HAS_TRUSTSTORE, requests, truststore

DEFAULT_PORT = 8006


DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


_TOKEN_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9.\-_]+$")


_USERID = re.compile(r"^[^\s:/!]+@[A-Za-z][A-Za-z0-9.\-_]+$")


_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*|[A-Za-z0-9._-]+)$")


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
        raise ConfigurationError(
            "api_fingerprint must be a SHA-256 fingerprint: 64 hex digits, optionally colon-separated.",
            path="api_fingerprint",
        )
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
        raise ConfigurationError(
            "api_host is not set: give the api_host option or set PROXMOX_HOST.",
            path="api_host",
            details={"rule": "required", "environment": "PROXMOX_HOST"},
        )
    if not _HOST.match(host.strip()):
        raise ConfigurationError(
            "api_host must be a host name or IP address without scheme, port or path.", path="api_host"
        )
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
            "add the host to no_proxy.",
            code="proxy_not_supported",
            path="api_host",
        )


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
            raise ConfigurationError(
                "api_token_id and api_token_secret must be given together.", path="api_token_secret"
            )
        token_user, token_name = parse_token_id(token_id, user)
    elif password:
        if not user or not _USERID.match(user.strip()):
            raise ConfigurationError("Password authentication needs api_user of the form user@realm.", path="api_user")
        token_user = user.strip()
    else:
        raise ConfigurationError(
            "Configure an API token (api_token_id, api_token_secret) or api_user with api_password.",
            path="api_token_id",
        )
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
