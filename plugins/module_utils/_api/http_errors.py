# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How a failed exchange becomes an error with a fixed code: Proxmox's HTTP errors (with ``details['precheck']`` when
the reply proves a pre-check refusal) and transport failures (not sent only when no byte of the request was written).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import errno
import re
import socket
import ssl
import typing as t

from .._core.errors import ProviderError
from .libraries import HAS_REQUESTS, requests, urllib3

_PERM_CHECK = re.compile(r"Permission check failed \((/[^,()\s]*), ([A-Za-z][A-Za-z0-9.]*)\)")


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


# "CT is locked (...)": pve-container's refusal (AbstractConfig::check_lock names the guest type), like qemu-server's "VM is locked".
_LOCKED = re.compile(r"(?:VM|CT) is locked \(([a-z-]+)\)|can't lock file .* got timeout", re.IGNORECASE)


_NOT_FOUND = re.compile(r"does not exist|no such (vm|task|storage|file|node)", re.IGNORECASE)


_CONFLICT = re.compile(
    r"detected modified configuration|checksum mismatch|digest mismatch|already exists", re.IGNORECASE
)


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


def provider_error(
    code: str, message: str, *, method: str, path: str, status: int | None = None, **details: t.Any
) -> ProviderError:
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
        return provider_error("auth_failed", "Proxmox rejected the credentials.", precheck=True, **ctx)
    if status == 403:
        match = _PERM_CHECK.search(text)
        err = provider_error("permission_denied", "The token lacks a privilege on a path.", precheck=True, **ctx)
        if match:
            err.details["path"] = match.group(1)
            err.details["privilege"] = match.group(2)
        return err
    if status == 400:
        if _CONFLICT.search(error_texts) or _CONFLICT.search(text):
            return provider_error(
                "conflict",
                "Proxmox reports that the object already exists or changed concurrently.",
                parameters=names,
                precheck=True,
                **ctx,
            )
        return provider_error(
            "parameter_invalid", "Proxmox rejected a request parameter.", parameters=names, precheck=True, **ctx
        )
    if status == 404:
        return provider_error("not_found", "The requested object does not exist.", precheck=True, **ctx)
    lock = _LOCKED.search(text)
    if lock:
        extra_lock: dict[str, t.Any] = {"lock": lock.group(1)} if lock.group(1) else {}
        return provider_error("locked", "The target is locked by another task.", precheck=True, **ctx, **extra_lock)
    if _CONFLICT.search(text):
        return provider_error(
            "conflict", "Proxmox reports that the object already exists or changed concurrently.", precheck=True, **ctx
        )
    if status >= 500 and _NOT_FOUND.search(text):
        return provider_error("not_found", "The requested object does not exist.", precheck=True, **ctx)
    if status >= 500:
        for pattern, token in _AGENT_REASONS:
            if pattern.search(text):
                return provider_error(
                    "server_error",
                    "Proxmox answered with a server error.",
                    agent=token,
                    precheck=token in PRECHECK_AGENT_REASONS,
                    **ctx,
                )
        return provider_error("server_error", "Proxmox answered with a server error.", precheck=status == 501, **ctx)
    return provider_error(
        "unexpected_response", "Proxmox answered with an unexpected HTTP status.", precheck=False, **ctx
    )


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
        HAS_REQUESTS and any(isinstance(item, urllib3.exceptions.NameResolutionError) for item in chain)
    ):
        return "name_resolution"
    if any(isinstance(item, OSError) and item.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) for item in chain):
        return "network_unreachable"
    if any(isinstance(item, (TimeoutError, socket.timeout)) for item in chain) or (
        HAS_REQUESTS
        and any(
            isinstance(item, urllib3.exceptions.ConnectTimeoutError)
            and not isinstance(item, urllib3.exceptions.NewConnectionError)
            for item in chain
        )
    ):
        return "connect_timeout"
    return "connect_failed"


def connect_failure(exc: BaseException, method: str, path: str) -> ProviderError:
    reason = connect_failure_reason(exc)
    return provider_error("transport_lost", CONNECT_FAILURE_TEXTS[reason], method=method, path=path, reason=reason)


def _is_connect_phase(exc: BaseException) -> bool:
    """True when a requests ConnectionError happened before any request byte was sent (by exception type: only for a
    transport that records no ``ExchangeFacts``)."""
    connect_errors = (
        urllib3.exceptions.NewConnectionError,
        urllib3.exceptions.ConnectTimeoutError,
        urllib3.exceptions.NameResolutionError,
    )
    return any(isinstance(item, connect_errors) for item in _exception_chain(exc))


def _is_handshake_refusal(exc: BaseException) -> bool:
    """True when the exception chain holds a certificate verification failure (only a handshake raises those)."""
    return any(isinstance(item, (ssl.SSLCertVerificationError, ssl.CertificateError)) for item in _exception_chain(exc))


REPLY_LOST_TEXT = "The request was sent but its reply was lost; the outcome is unknown."


CERTIFICATE_CHANGED_TEXT = (
    "The server presented another certificate than the one the operation's provider scope was computed from; "
    "nothing was sent."
)


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
            return provider_error("certificate_changed", CERTIFICATE_CHANGED_TEXT, method=method, path=path)
        if facts.written:
            return provider_error("reply_lost", REPLY_LOST_TEXT, method=method, path=path)
        if HAS_REQUESTS and isinstance(exc, requests.exceptions.SSLError):
            return provider_error("tls_verification_failed", TLS_REFUSED_TEXT, method=method, path=path)
        return connect_failure(exc, method, path)
    if HAS_REQUESTS and isinstance(exc, requests.exceptions.SSLError) and _is_handshake_refusal(exc):
        return provider_error("tls_verification_failed", TLS_REFUSED_TEXT, method=method, path=path)
    if HAS_REQUESTS and (
        isinstance(exc, requests.exceptions.ConnectTimeout)
        or (
            isinstance(exc, requests.exceptions.ConnectionError)
            and not isinstance(exc, requests.exceptions.SSLError)
            and _is_connect_phase(exc)
        )
    ):
        return connect_failure(exc, method, path)
    return provider_error("reply_lost", REPLY_LOST_TEXT, method=method, path=path)


# Codes with which Proxmox (or the transport) proves the request changed nothing. The transport's three are raised only
# when no byte of the request was written (``_client.transport_failure``); a failure after the first byte is ambiguous.
NOT_APPLIED_CODES = frozenset(
    {
        "transport_lost",
        "tls_verification_failed",
        "certificate_changed",
        "auth_failed",
        "permission_denied",
        "parameter_invalid",
        "conflict",
        "not_found",
        "locked",
    }
)


def agent_reason(err: ProviderError) -> str | None:
    """The fixed token ``map_http_error`` derived from a guest agent failure (``not_running``, ``exec_disabled``...)."""
    return t.cast("str | None", err.details.get("agent"))


def proves_not_applied(err: ProviderError) -> bool:
    """True when ``err`` proves the request changed nothing, so it may be sent again.

    Without an HTTP status it is the transport's verdict (``NOT_APPLIED_CODES``: nothing was sent); with one, only a reply
    ``map_http_error`` classified as a pre-check refusal (``details['precheck']``, fixed tokens, never the text).
    Any other reply to a request that starts work (a plain 500, 503, 596, a reply over the size bound) leaves its
    outcome unknown: reads decide, else the stage is ``uncertain``.
    """
    if err.details.get("status") is None:
        return err.code in NOT_APPLIED_CODES
    return err.details.get("precheck") is True
