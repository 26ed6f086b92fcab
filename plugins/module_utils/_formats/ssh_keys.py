# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""SSH public keys of a definition (``access.sshPublicKeys``): each line decoded and checked as a key of its type.

The key data is read in the SSH wire format (RFC 4251): its declared type, an Ed25519 point,
an RSA exponent and modulus (at least 2048 bits), or an ECDSA curve and point; anything else
is a ``FormatError`` with a fixed ``ssh_key_*`` rule (the key and its comment never appear).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import binascii

from .format_errors import DEFINITION, FormatError


class _SshReader:
    """Reads SSH wire-format strings and mpints (RFC 4251 section 5)."""

    def __init__(self, blob: bytes) -> None:
        self._blob = blob
        self._offset = 0

    def string(self) -> bytes:
        if len(self._blob) - self._offset < 4:
            raise ValueError("truncated")
        length = int.from_bytes(self._blob[self._offset : self._offset + 4], "big")
        start = self._offset + 4
        if length > len(self._blob) - start:
            raise ValueError("truncated")
        self._offset = start + length
        return self._blob[start : self._offset]

    def mpint(self) -> int:
        raw = self.string()
        if raw and raw[0] & 0x80:
            raise ValueError("negative")
        if len(raw) > 1 and raw[0] == 0 and not raw[1] & 0x80:
            raise ValueError("not minimal")
        return int.from_bytes(raw, "big")

    @property
    def exhausted(self) -> bool:
        return self._offset == len(self._blob)


_ECDSA_CURVES = {
    "ecdsa-sha2-nistp256": (b"nistp256", 65),
    "ecdsa-sha2-nistp384": (b"nistp384", 97),
    "ecdsa-sha2-nistp521": (b"nistp521", 133),
}
SSH_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")


def check_ssh_public_key(line: str, path: str, code: str = DEFINITION) -> tuple[str, bytes]:
    """Decode and check one (pattern-valid) OpenSSH public key line; return (type, blob)."""
    parts = line.split(" ", 2)
    key_type = parts[0]
    if key_type not in SSH_KEY_TYPES:
        raise FormatError(code, path, "ssh_key_type_unsupported")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(code, path, "ssh_key_encoding") from None
    reader = _SshReader(blob)
    try:
        if reader.string() != key_type.encode("ascii"):
            raise FormatError(code, path, "ssh_key_type_mismatch")
        if key_type == "ssh-ed25519":
            if len(reader.string()) != 32:
                raise FormatError(code, path, "ssh_key_invalid")
        elif key_type == "ssh-rsa":
            exponent = reader.mpint()
            modulus = reader.mpint()
            if exponent < 3 or exponent % 2 == 0 or modulus % 2 == 0 or modulus.bit_length() > 16384:
                raise FormatError(code, path, "ssh_key_invalid")
            if modulus.bit_length() < 2048:
                raise FormatError(code, path, "ssh_key_too_short")
        else:
            curve, point_length = _ECDSA_CURVES[key_type]
            if reader.string() != curve:
                raise FormatError(code, path, "ssh_key_curve_mismatch")
            point = reader.string()
            if len(point) != point_length or point[0] != 0x04:
                raise FormatError(code, path, "ssh_key_invalid")
    except ValueError:
        raise FormatError(code, path, "ssh_key_invalid") from None
    if not reader.exhausted:
        raise FormatError(code, path, "ssh_key_invalid")
    return key_type, blob
