# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A throw-away CA and two server certificates for 127.0.0.1 / localhost (EC P-256, fast to make)."""

from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _write(path: str, data: bytes, mode: int = 0o644) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def make_certs(directory: str, node: str = "pve-test") -> dict[str, str]:
    """Create ``pvesim-ca.pem``, ``pve-ssl.pem`` and ``pve-ssl.key`` (and ``pve-ssl-alt.pem``/``.key``, a second server
    certificate from the same CA, presented under the ``cert_swap`` fault); returns paths and the fingerprints
    (``alt_`` prefixed for the alternate one).

    ``fingerprint_sha256`` is the SHA-256 of the server certificate (DER) as colon-separated
    uppercase hex pairs, the way the PVE GUI shows certificate fingerprints.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Manager CA (pvesim)"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Proxmox Virtual Environment (pvesim)"),
        ]
    )
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    os.makedirs(directory, exist_ok=True)
    ca_file = os.path.join(directory, "pvesim-ca.pem")
    _write(ca_file, ca_cert.public_bytes(serialization.Encoding.PEM))
    out = {"ca_file": ca_file}
    # The server certificate, and an alternate one for the same names from the same CA (fault ``cert_swap``).
    for prefix, name in (("", "pve-ssl"), ("alt_", "pve-ssl-alt")):
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "PVE Cluster Node"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"{node}.local"),
            ]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"), x509.DNSName(node)]
                ),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        cert_file = os.path.join(directory, name + ".pem")
        key_file = os.path.join(directory, name + ".key")
        _write(cert_file, cert.public_bytes(serialization.Encoding.PEM))
        _write(
            key_file,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            0o600,
        )
        fp = cert.fingerprint(hashes.SHA256()).hex().upper()
        out.update(
            {
                prefix + "cert_file": cert_file,
                prefix + "key_file": key_file,
                prefix + "fingerprint_sha256": ":".join(fp[i : i + 2] for i in range(0, len(fp), 2)),
            }
        )
    return out
