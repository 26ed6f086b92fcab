# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Inspect the certificate chain a Proxmox VE API endpoint presents, before anyone trusts it.

Only TLS handshakes are made: no HTTP byte and no credential is ever written. One unverified
handshake reads the presented chain; one handshake per trust source (``ca_path``, the system
store) says whether the chain verifies there, with the host name checked. Each certificate is
described with its subject, issuer, SANs, validity and SHA-256 fingerprint in the colon-separated
upper-case form ``pvenode cert info`` prints (``AB:CD:...``), which ``api_fingerprint`` accepts.

The pin candidate is the *leaf*: the certificate pveproxy serves (``pve-ssl.pem``, or
``pveproxy-ssl.pem`` when a custom or ACME certificate is installed). ``pvenode cert info`` lists
``pve-root-ca.pem`` first; pinning that fingerprint never matches the handshake.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
import ssl
import typing as t

from .settings import normalize_fingerprint, require_readable_ca
from .._core.errors import ProviderError

try:
    from cryptography import x509
    from cryptography.x509.oid import ExtensionOID, NameOID
except ImportError:  # pragma: no cover - exercised by the sanity import test only
    HAS_CRYPTOGRAPHY = False
else:
    HAS_CRYPTOGRAPHY = True

# OpenSSL X509_V_ERR_* codes -> fixed reasons (the verify message itself is never forwarded).
_VERIFY_REASONS = {
    9: "not_yet_valid",
    10: "expired",
    62: "hostname_mismatch",
    64: "hostname_mismatch",
}  # 64: IP address mismatch


def colon_fingerprint(der: bytes) -> str:
    """SHA-256 of a DER certificate as ``AB:CD:...`` (PVE's ``X509_get_fingerprint(cert, 'sha256')`` form)."""
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


def _utc(cert: t.Any, name: str) -> datetime.datetime:
    value = getattr(cert, name + "_utc", None)  # cryptography >= 42
    if value is None:
        value = getattr(cert, name).replace(tzinfo=datetime.timezone.utc)
    return t.cast(datetime.datetime, value)


def _sans(cert: t.Any) -> tuple[list[str], list[str]]:
    try:
        ext = cert.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    except x509.ExtensionNotFound:
        return [], []
    return list(ext.get_values_for_type(x509.DNSName)), [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def _is_ca(cert: t.Any) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS).value.ca)
    except x509.ExtensionNotFound:
        return False


def host_matches(
    host: str, dns_names: t.Sequence[str], ip_names: t.Sequence[str], common_names: t.Sequence[str] = ()
) -> bool:
    """RFC 6125 matching as TLS clients do it: IPs against IP SANs, names against DNS SANs (one left-most ``*``)."""
    host = host.strip("[]").rstrip(".").lower()
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        return any(ipaddress.ip_address(ip) == address for ip in ip_names)
    for pattern in dns_names or common_names:  # the CN counts only without any DNS SAN
        pattern = pattern.rstrip(".").lower()
        if pattern == host:
            return True
        if pattern.startswith("*.") and "." in host and host.split(".", 1)[1] == pattern[2:] and host.split(".", 1)[0]:
            return True
    return False


def describe(der: bytes, host: str, now: datetime.datetime) -> dict[str, t.Any]:
    """One certificate: subject, issuer, SANs, validity, fingerprint and the flags that matter for trust."""
    cert = x509.load_der_x509_certificate(der)
    dns_names, ip_names = _sans(cert)
    not_before, not_after = _utc(cert, "not_valid_before"), _utc(cert, "not_valid_after")
    common_names = [str(attr.value) for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    return {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "san_dns": dns_names,
        "san_ip": ip_names,
        "not_before": not_before.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "not_after": not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "fingerprint_sha256": colon_fingerprint(der),
        "self_signed": cert.subject == cert.issuer,
        "is_ca": _is_ca(cert),
        "expired": now > not_after,
        "not_yet_valid": now < not_before,
        "host_matches": host_matches(host, dns_names, ip_names, common_names),
    }


def _chain_der(tls: ssl.SSLSocket) -> list[bytes]:
    """The presented chain, leaf first (Python 3.13 has it public; 3.10-3.12 privately; else the leaf only)."""
    getter = getattr(tls, "get_unverified_chain", None)
    if getter is not None:
        return [bytes(item) for item in getter() or []]
    private = getattr(getattr(tls, "_sslobj", None), "get_unverified_chain", None)
    if private is not None:
        try:
            return [item.public_bytes(ssl._ssl.ENCODING_DER) for item in private() or []]  # type: ignore[attr-defined]  # pylint: disable=protected-access
        except (AttributeError, ValueError):
            pass
    leaf = tls.getpeercert(binary_form=True)
    return [leaf] if leaf else []


def _handshake(host: str, port: int, context: ssl.SSLContext, timeout: float) -> list[bytes]:
    """Connect, complete the TLS handshake, read the chain and close: no application data is written."""
    with socket.create_connection((host, port), timeout=timeout) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return _chain_der(tls)


def verify_with(host: str, port: int, context: ssl.SSLContext, timeout: float) -> dict[str, t.Any]:
    """``{"verified": bool, "reason": None | expired | not_yet_valid | hostname_mismatch | untrusted | handshake_failed}``."""
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    try:
        _handshake(host, port, context, timeout)
    except ssl.SSLCertVerificationError as err:
        return {"verified": False, "reason": _VERIFY_REASONS.get(getattr(err, "verify_code", 0), "untrusted")}
    except ssl.CertificateError:
        return {"verified": False, "reason": "hostname_mismatch"}
    except (ssl.SSLError, OSError):
        return {"verified": False, "reason": "handshake_failed"}
    return {"verified": True, "reason": None}


def inspect_endpoint(
    host: str,
    port: int,
    *,
    ca_path: str | None = None,
    timeout: float = 10.0,
    fingerprint: str | None = None,
    now: datetime.datetime | None = None,
) -> dict[str, t.Any]:
    """The module result of ``vmanyware_certificate_info`` (see its RETURN)."""
    pin = normalize_fingerprint(fingerprint) if fingerprint else None
    require_readable_ca(ca_path)
    address = host.strip().strip("[]").lower()
    inspect = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    inspect.check_hostname = False
    inspect.verify_mode = ssl.CERT_NONE
    failure: ProviderError | None = None
    chain: list[bytes] = []
    try:
        chain = _handshake(address, port, inspect, timeout)
    except ssl.SSLError:
        failure = ProviderError(
            "The server did not complete a TLS handshake.",
            code="tls_verification_failed",
            details={"method": "CONNECT", "path": "/"},
        )
    except OSError:
        failure = ProviderError(code="transport_lost", details={"method": "CONNECT", "path": "/"})
    if failure is not None:
        raise failure
    if not chain:
        raise ProviderError(
            "The server presented no certificate.",
            code="tls_verification_failed",
            details={"method": "CONNECT", "path": "/"},
        )
    moment = now or datetime.datetime.now(datetime.timezone.utc)
    described = [describe(der, address, moment) for der in chain]
    leaf = described[0]
    verification: dict[str, t.Any] = {
        "ca_path": verify_with(address, port, ssl.create_default_context(cafile=ca_path), timeout) if ca_path else None,
        "system_store": verify_with(address, port, ssl.create_default_context(), timeout),
    }
    warnings = []
    if leaf["expired"]:
        warnings.append("The server certificate has expired.")
    if leaf["not_yet_valid"]:
        warnings.append("The server certificate is not valid yet.")
    if not leaf["host_matches"]:
        warnings.append("The server certificate does not name the configured api_host (SAN).")
    pin_candidate = leaf["fingerprint_sha256"]
    return {
        "changed": False,
        "host": address,
        "port": port,
        "chain": described,
        "pin_candidate": pin_candidate,
        "pin_matches": None if pin is None else normalize_fingerprint(pin_candidate) == pin,
        "verification": verification,
        "expired": leaf["expired"],
        "not_yet_valid": leaf["not_yet_valid"],
        "host_matches": leaf["host_matches"],
        "certificate_warnings": warnings,
    }
