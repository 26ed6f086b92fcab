# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The journal directory's layout (docs/journal.md, "File layout"): where it is, and what lives where.

``<journal_dir>/op-*.json`` the operation documents; ``targets/`` and ``keys/`` the claim files
(``target_key``, idempotency-key hash); ``locks/`` one lock file per operation (``.lock`` at the
top is the journal-wide lock); ``leases/`` the VMID leases (``_vmid``); ``address-claims/`` and
``address-leases/`` the static addresses operations plan and those leased for ``address: auto``
(``_operation/addresses.py``); ``placement-leases/`` the nodes placement chose for reviewed plans, by target VMID
(``_journal/placement_leases.py``). Every directory is private to the user running the collection.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import typing as t

from .._core.errors import ConfigurationError, InputError
from .document import JournalError, validate_operation_id

ENV_JOURNAL_DIR = "VMANYWARE_JOURNAL_DIR"

_OPERATION_FILE = re.compile(r"\Aop-[a-z2-7]{26}\.json\Z")


def target_key(scope: str, vmid: int) -> str:
    """Claim file name stem of a target: SHA-256 of compact JSON ``[scope, vmid]``.

    VMIDs are unique per Proxmox cluster, so the node is recorded in the claim but is not part
    of the key: two operations can never hold the same VMID in one provider scope, whatever node.
    """
    return hashlib.sha256(json.dumps([scope, int(vmid)], separators=(",", ":")).encode("utf-8")).hexdigest()


def address_key(scope: str, family: str, address: str) -> str:
    """Claim and lease file name stem of a static address: SHA-256 of compact JSON ``[scope, family, address]``
    (the address in canonical form, without a prefix)."""
    return hashlib.sha256(json.dumps([scope, family, address], separators=(",", ":")).encode("utf-8")).hexdigest()


def resolve_journal_dir(option: str | None, environ: t.Mapping[str, str]) -> str:
    """The journal directory: ``option`` > ``$VMANYWARE_JOURNAL_DIR`` > ``$XDG_STATE_HOME/vmanyware/journal``
    > ``~/.local/state/vmanyware/journal``. Explicit paths must be absolute; a relative
    ``XDG_STATE_HOME`` is ignored, as the XDG specification requires.
    """
    if option:
        if "\x00" in option or not os.path.isabs(option):
            raise InputError(
                "journal_dir must be an absolute path.", path="journal_dir", details={"rule": "absolute_path"}
            )
        return os.path.normpath(option)
    from_env = environ.get(ENV_JOURNAL_DIR)
    if from_env:
        if "\x00" in from_env or not os.path.isabs(from_env):
            raise ConfigurationError(
                "VMANYWARE_JOURNAL_DIR must be an absolute path.",
                path=ENV_JOURNAL_DIR,
                details={"rule": "absolute_path"},
            )
        return os.path.normpath(from_env)
    state_home = environ.get("XDG_STATE_HOME")
    if state_home and "\x00" not in state_home and os.path.isabs(state_home):
        return os.path.join(os.path.normpath(state_home), "vmanyware", "journal")
    home = environ.get("HOME") or os.path.expanduser("~")
    if not home or "\x00" in home or not os.path.isabs(home):
        raise ConfigurationError(
            "No journal directory: set journal_dir or VMANYWARE_JOURNAL_DIR.",
            path="journal_dir",
            details={"rule": "no_home"},
        )
    return os.path.join(os.path.normpath(home), ".local", "state", "vmanyware", "journal")


class JournalLayout:
    """The paths of one journal directory; ``create`` makes (or checks) its directories."""

    def __init__(self, journal_dir: str) -> None:
        if not isinstance(journal_dir, str) or "\x00" in journal_dir or not os.path.isabs(journal_dir):
            raise InputError(
                "journal_dir must be an absolute path.", path="journal_dir", details={"rule": "absolute_path"}
            )
        self.journal_dir = os.path.normpath(journal_dir)
        self.targets_dir = os.path.join(self.journal_dir, "targets")
        self.keys_dir = os.path.join(self.journal_dir, "keys")
        self.locks_dir = os.path.join(self.journal_dir, "locks")
        self.leases_dir = os.path.join(self.journal_dir, "leases")  # created by the first lease (_vmid)
        # Static addresses of operations (claims) and leased for address: auto (leases); created on first use.
        self.address_claims_dir = os.path.join(self.journal_dir, "address-claims")
        self.address_leases_dir = os.path.join(self.journal_dir, "address-leases")
        # The node placement chose for a reviewed plan, by its target VMID (_journal/placement_leases.py); first use.
        self.placement_leases_dir = os.path.join(self.journal_dir, "placement-leases")
        self.journal_lock_path = os.path.join(self.journal_dir, ".lock")

    def create(self) -> None:
        """Create the directories (mode 0700, parents too) or check that the existing ones are private (``configuration_error``)."""
        for directory in (self.journal_dir, self.targets_dir, self.keys_dir, self.locks_dir):
            _ensure_private_directory(directory)

    def operation_path(self, operation_id: str) -> str:
        return os.path.join(self.journal_dir, validate_operation_id(operation_id) + ".json")

    def operation_lock_path(self, operation_id: str) -> str:
        return os.path.join(self.locks_dir, operation_id + ".lock")

    def target_path(self, scope: str, vmid: int) -> str:
        """The claim file of a target."""
        return os.path.join(self.targets_dir, target_key(scope, vmid) + ".json")

    def key_path(self, key_hash: str) -> str:
        """The claim file of an idempotency key (by its hash)."""
        return os.path.join(self.keys_dir, key_hash + ".json")

    def lease_path(self, scope: str, vmid: int) -> str:
        """The VMID lease file of a target: the same key as its claim."""
        return os.path.join(self.leases_dir, target_key(scope, vmid) + ".json")

    def placement_lease_path(self, scope: str, vmid: int) -> str:
        """The placement lease file of a reviewed plan's target: the same key as its claim and its VMID lease."""
        return os.path.join(self.placement_leases_dir, target_key(scope, vmid) + ".json")

    def address_claim_path(self, scope: str, family: str, address: str) -> str:
        """The claim file of a static address an operation plans."""
        return os.path.join(self.address_claims_dir, address_key(scope, family, address) + ".json")

    def address_lease_path(self, scope: str, family: str, address: str) -> str:
        """The lease file of an address leased for ``address: auto``: the same key as its claim."""
        return os.path.join(self.address_leases_dir, address_key(scope, family, address) + ".json")

    def list_operations(self) -> list[str]:
        """Operation ids present in the directory, sorted; one directory scan, no file is parsed."""
        try:
            with os.scandir(self.journal_dir) as entries:
                names = [entry.name[:-5] for entry in entries if _OPERATION_FILE.match(entry.name)]
        except OSError:
            raise JournalError("The journal directory cannot be read.", code="io_error") from None
        return sorted(names)


def _ensure_private_directory(directory: str) -> None:
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        info = os.lstat(directory)
    except OSError:
        raise ConfigurationError(
            "The journal directory cannot be created or read.", path="journal_dir", details={"rule": "usable_directory"}
        ) from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigurationError(
            "The journal path is not a directory.", path="journal_dir", details={"rule": "directory"}
        )
    if info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise ConfigurationError(
            "The journal directory must be owned by the current user and not writable by others.",
            path="journal_dir",
            details={"rule": "private_directory"},
        )
