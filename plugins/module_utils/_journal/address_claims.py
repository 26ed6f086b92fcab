# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The address claims of ``JournalStore`` (docs/networks.md, "Address pools and leases").

An operation whose plan has static addresses claims each (``address-claims/``, a claim file like its target's) in the
same locked step that claims its target, and drops the address leases they came from; a second unreleased operation
planning the same address fails with ``conflicting_operation`` (``claim: address``). Releasing the operation removes
its address claims.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import ipaddress
import os
import typing as t

from .._core.files import remove_file_durable
from .._formats.networks import planned_address, static_families
from .layout import JournalLayout


class AddressClaims:
    """Mixed into ``JournalStore``: its claim primitives, applied to a plan's static addresses."""

    layout: JournalLayout

    def _read_claim(self, path: str) -> str | None:
        raise NotImplementedError  # JournalStore's

    def _claim(self, path: str, operation_id: str) -> bool:
        raise NotImplementedError  # JournalStore's

    def _load_or_none(self, operation_id: str) -> dict[str, t.Any] | None:
        raise NotImplementedError  # JournalStore's

    def _free_target(self, target_path: str, claim: str = "target") -> None:
        raise NotImplementedError  # JournalStore's

    def _address_claim_paths(self, scope: str, mapping: t.Mapping[str, t.Any]) -> list[str]:
        """The claim files of the static addresses a plan's NIC has (none without a named network)."""
        nic = mapping.get("network")
        if not isinstance(nic, dict):
            return []
        return [
            self.layout.address_claim_path(scope, family, str(ipaddress.ip_address(planned_address(nic, family) or "")))
            for family in static_families(nic)
        ]

    def address_holder(self, scope: str, family: str, address: str) -> str | None:
        """The unreleased operation whose plan has the static ``address`` (canonical, no prefix), if any."""
        holder = self._read_claim(self.layout.address_claim_path(scope, family, address))
        if holder is None:
            return None
        document = self._load_or_none(holder)
        return None if document is None or document["release"] is not None else holder

    def _claim_addresses(self, document: t.Mapping[str, t.Any]) -> None:
        """Claim the plan's static addresses for the operation (under the journal lock) and drop their address leases,
        as the target claim supersedes the VMID lease; an idempotent replay completes what a crash cut short."""
        operation_id, scope = document["operationId"], document["target"]["scope"]
        for path in self._address_claim_paths(scope, document["mapping"]):
            if self._read_claim(path) != operation_id:
                self._free_target(path, claim="address")
                os.makedirs(self.layout.address_claims_dir, mode=0o700, exist_ok=True)
                self._claim(path, operation_id)
            lease = os.path.join(self.layout.address_leases_dir, os.path.basename(path))
            remove_file_durable(lease)

    def _release_addresses(self, document: t.Mapping[str, t.Any]) -> None:
        """Remove the address claims the released operation holds."""
        for path in self._address_claim_paths(document["target"]["scope"], document["mapping"]):
            if self._read_claim(path) == document["operationId"]:
                remove_file_durable(path)
