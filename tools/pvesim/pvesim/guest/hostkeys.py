# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Deterministic SSH host keys of a simulated guest (a pure function of the VMID)."""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa


def _seed_bytes(vmid: int, purpose: str) -> bytes:
    return hashlib.sha256(f"pvesim:{vmid}:{purpose}".encode()).digest()


@functools.lru_cache(maxsize=256)
def _rsa_public_openssh(vmid: int) -> str:
    """A well-formed 3072-bit RSA public key: e=65537 and a seeded odd modulus with the top bit set.

    Only the public half of a simulated guest's key is ever shown, and clients only parse it and
    fingerprint it, so the modulus is not made from two primes: generating real 3072-bit keys in
    Python took seconds of the simulator's CPU per guest and slowed every concurrent request.
    """
    stream = b"".join(_seed_bytes(vmid, "rsa:%d" % block) for block in range(12))  # 12 x 32 bytes = 3072 bits
    modulus = int.from_bytes(stream, "big") | (1 << 3071) | 1
    key = rsa.RSAPublicNumbers(65537, modulus).public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@functools.lru_cache(maxsize=256)
def _small_public_openssh(vmid: int, keytype: str) -> str:
    if keytype == "ed25519":
        pub: Any = ed25519.Ed25519PrivateKey.from_private_bytes(_seed_bytes(vmid, "ed25519")).public_key()
    else:
        order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
        secret = int.from_bytes(_seed_bytes(vmid, "ecdsa"), "big") % (order - 1) + 1
        pub = ec.derive_private_key(secret, ec.SECP256R1()).public_key()
    return pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


KEY_INFO: dict[str, tuple[int, str]] = {"ed25519": (256, "ED25519"), "ecdsa": (256, "ECDSA"), "rsa": (3072, "RSA")}


def host_public_keys(vmid: int, types: Sequence[str] = ("ed25519", "ecdsa", "rsa")) -> dict[str, str]:
    """Deterministic OpenSSH host public keys (``type base64``, no comment) for a VMID."""
    return {t: (_rsa_public_openssh(vmid) if t == "rsa" else _small_public_openssh(vmid, t)) for t in types}


def key_fingerprint(public_line: str) -> str:
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
