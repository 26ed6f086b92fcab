# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared sample data for the format, hashing and plan tests (imported by basename)."""

from __future__ import annotations

import base64
import copy
import functools
import struct
import typing as t

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

# A fixed key (generated once with the cryptography package); also in examples/definition.yml.
ED25519_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop"
PLANTED = "PLANTEDxyzzy"


def _openssh(public_key: t.Any) -> str:
    return public_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


@functools.lru_cache(maxsize=None)
def generated_keys() -> dict[str, str]:
    """Fresh public keys of every supported (and one too short) kind, without comments."""
    return {
        "ed25519": _openssh(ed25519.Ed25519PrivateKey.generate().public_key()),
        "p256": _openssh(ec.generate_private_key(ec.SECP256R1()).public_key()),
        "p384": _openssh(ec.generate_private_key(ec.SECP384R1()).public_key()),
        "p521": _openssh(ec.generate_private_key(ec.SECP521R1()).public_key()),
        "rsa2048": _openssh(rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()),
        "rsa1024": _openssh(rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key()),
    }


@functools.lru_cache(maxsize=None)
def ed25519_pool(count: int = 20) -> tuple[str, ...]:
    return tuple(_openssh(ed25519.Ed25519PrivateKey.generate().public_key()) for _index in range(count))


def ssh_string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def key_line(key_type: str, blob: bytes, comment: str | None = None) -> str:
    line = "%s %s" % (key_type, base64.b64encode(blob).decode())
    return line if comment is None else line + " " + comment


def mapping(**overrides: t.Any) -> dict[str, t.Any]:
    base: dict[str, t.Any] = {
        "image": "debian-13",
        "node": "pve-test",
        "templateVmid": 9000,
        "templateVersion": "debian-13-cloud-20261016",
        "storage": "local-lvm",
        "bridge": "vmbr0",
        "diskDevice": "scsi0",
        "sourceDiskGiB": 8,
        "guestUser": "debian",
        "imageDefaultUser": {
            "name": "debian",
            "templateVersion": "debian-13-cloud-20261016",
            "passwordLocked": True,
            "noAuthorizedKeys": True,
        },
    }
    base.update(overrides)
    return base


def catalog() -> dict[str, t.Any]:
    other = mapping(image="ubuntu-24.04", templateVmid=9001, templateVersion="ubuntu-2404-20260101", guestUser="ubuntu")
    del other["imageDefaultUser"]
    return {"apiVersion": "vmanyware.dev/v1", "kind": "TemplateCatalog", "images": [other, mapping()]}


def definition() -> dict[str, t.Any]:
    return {
        "apiVersion": "vmanyware.dev/v1",
        "kind": "Environment",
        "name": "kernel-lab",
        "image": "debian-13",
        "resources": {"cores": 2, "memoryMiB": 2048, "diskGiB": 20},
        "access": {"sshPublicKeys": [ED25519_KEY]},
        "packages": [{"name": "build-essential"}, {"name": "git"}],
        "snapshotAfterProvisioning": False,
    }


def dump(value: t.Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, width=100000)


def mutated(document: dict[str, t.Any], path: tuple[t.Any, ...], value: t.Any) -> dict[str, t.Any]:
    """A deep copy of ``document`` with ``path`` set to ``value`` (or deleted for DELETE)."""
    result = copy.deepcopy(document)
    target = result
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return result


DELETE = object()
