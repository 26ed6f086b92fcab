# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Static addresses in use, and address leases for ``address: auto`` (docs/networks.md, "Address pools and leases").

``scan_guests`` reads which static addresses the guests Proxmox shows declare (``ipconfigN`` of VMs, ``netN`` of
containers): the preflight's ``address_free`` check and the lease both use it. ``reserve`` leases, for every family a
definition's network asks ``auto`` for, the lowest address of the catalog network's pool that no guest declares, no
unreleased operation plans (its address claim) and no other owner leases; like a VMID lease it is a file in the journal
(``address-leases/``), created under the journal lock, so concurrent reservations get distinct addresses. Creating the
operation turns the lease into the operation's address claim (``JournalStore._claim_addresses``); releasing the
operation (closed, abandoned, cleaned up) frees the address, which the guest's own ``ipconfig0`` then declares if it
still exists. Proxmox is only read.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import time
import typing as t

from .._api.pveconfig import parse_property_string
from .._core.errors import InputError, ProviderError, VmanywareError, snake_keys
from .._core.files import LocalFileError, create_json_exclusive, remove_file_durable
from .._core.protocols import ApiClient
from .._formats.networks import (
    AUTO,
    FAMILIES,
    STATIC,
    catalog_network,
    in_pool,
    parse_address,
    parse_subnet,
    reserved_addresses,
)
from .._journal import JournalError, JournalStore, epoch_seconds
from .._journal.vmid import check_owner, lease_paths, lease_timestamp, read_lease

LEASE_KIND = "vmanyware.dev/v1/AddressLease"
LEASE_KEYS = ("kind", "providerScopeId", "network", "family", "address", "owner", "createdAt", "expiresAt")
# More guests than this and the scan reads none of their configurations: a bounded set of GETs.
MAX_GUESTS_READ = 500


# ---------------------------------------------------------------------------------------------
# what Proxmox's guests declare


def declared_addresses(config: t.Mapping[str, t.Any], guest_type: str) -> set[str]:
    """The static addresses a guest's configuration declares, in canonical form: ``ipconfigN`` ``ip=``/``ip6=`` of a
    VM, ``netN`` ``ip=``/``ip6=`` of a container (DHCP, SLAAC and manual declare none)."""
    pattern = re.compile(r"\Aipconfig\d+\Z" if guest_type == "qemu" else r"\Anet\d+\Z")
    found: set[str] = set()
    for key, value in config.items():
        if not (pattern.match(key) and isinstance(value, str)):
            continue
        fields = parse_property_string(value, "ip")
        for name in ("ip", "ip6"):
            try:
                found.add(str(ipaddress.ip_interface(fields.get(name, "")).ip))
            except ValueError:
                continue  # dhcp, auto, manual, absent
    return found


@dataclasses.dataclass
class GuestScan:
    """What one scan saw: ``declared`` maps an address to the VMID declaring it; ``unread`` guests were not readable."""

    listed: int = 0
    unread: int = 0
    declared: dict[str, int] = dataclasses.field(default_factory=dict)
    problem: str | None = None  # why nothing was read: the list failed, or too many guests


def scan_guests(client: ApiClient) -> GuestScan:
    """``GET /cluster/resources?type=vm`` and each listed guest's configuration (VM.Audit on it, or it is unread)."""
    scan = GuestScan()
    try:
        guests = client.get("/cluster/resources", type="vm")
    except ProviderError:
        scan.problem = "The cluster's guests could not be listed."
        return scan
    if not isinstance(guests, list):
        scan.problem = "The cluster's guest list could not be understood."
        return scan
    listed = [g for g in guests if isinstance(g, dict) and g.get("type") in ("qemu", "lxc") and g.get("node")]
    scan.listed = len(listed)
    if len(listed) > MAX_GUESTS_READ:
        scan.problem = "More guests than are read (%d); not checked." % MAX_GUESTS_READ
        return scan
    for guest in listed:
        try:
            config = client.get("/nodes/%s/%s/%s/config" % (guest["node"], guest["type"], guest["vmid"]))
        except ProviderError:
            scan.unread += 1
            continue
        if not isinstance(config, dict):
            scan.unread += 1
            continue
        for address in declared_addresses(config, guest["type"]):
            scan.declared.setdefault(address, int(guest["vmid"]))
    return scan


# ---------------------------------------------------------------------------------------------
# leases


def _corrupt(path: str) -> JournalError:
    return JournalError(
        "An address lease file is not valid; it was left untouched.",
        code="journal_corrupt",
        details={"lease": os.path.basename(path)},
    )


class AddressBook:
    """The address leases of one provider scope in one journal directory. Writers hold ``store.journal_lock()``."""

    def __init__(self, store: JournalStore, scope: str, clock: t.Callable[[], float] = time.time) -> None:
        self.store, self.scope, self.clock = store, scope, clock

    def path(self, family: str, address: str) -> str:
        return self.store.layout.address_lease_path(self.scope, family, address)

    def read_file(self, path: str) -> dict[str, t.Any] | None:
        return read_lease(
            path,
            kind=LEASE_KIND,
            keys=LEASE_KEYS,
            valid=lambda lease: lease["family"] in FAMILIES and all(isinstance(lease[key], str) for key in LEASE_KEYS),
            corrupt=_corrupt,
        )

    def read(self, family: str, address: str) -> dict[str, t.Any] | None:
        return self.read_file(self.path(family, address))

    def live(self, lease: t.Mapping[str, t.Any]) -> bool:
        return epoch_seconds(lease["expiresAt"]) > self.clock()

    def owned(self, owner: str, network: str, family: str) -> list[dict[str, t.Any]]:
        """This scope's live leases of ``owner`` in ``network`` for ``family``."""
        found = []
        for path in lease_paths(self.store.layout.address_leases_dir):
            lease = self.read_file(path)
            if (
                lease is not None
                and self.live(lease)
                and (
                    lease["providerScopeId"],
                    lease["owner"],
                    lease["network"],
                    lease["family"],
                )
                == (self.scope, owner, network, family)
            ):
                found.append(lease)
        return found

    def take(self, network: str, family: str, address: str, owner: str, seconds: int) -> dict[str, t.Any]:
        """Write a new lease (replacing an expired one)."""
        now = self.clock()
        lease = {
            "kind": LEASE_KIND,
            "providerScopeId": self.scope,
            "network": network,
            "family": family,
            "address": address,
            "owner": owner,
            "createdAt": lease_timestamp(now),
            "expiresAt": lease_timestamp(now + seconds),
        }
        path = self.path(family, address)
        try:
            os.makedirs(self.store.layout.address_leases_dir, mode=0o700, exist_ok=True)
            remove_file_durable(path)
            if not create_json_exclusive(path, lease):  # pragma: no cover - under the journal lock
                raise JournalError("An address lease file cannot be written.", code="io_error")
        except LocalFileError:
            raise JournalError("An address lease file cannot be written.", code="io_error") from None
        return lease

    def remove(self, lease: t.Mapping[str, t.Any]) -> None:
        if self.read(lease["family"], lease["address"]) == dict(lease):
            remove_file_durable(self.path(lease["family"], lease["address"]))


# ---------------------------------------------------------------------------------------------
# reserve and release


def _taken(family: str, rule: str) -> VmanywareError:
    return VmanywareError(
        "The %s address is taken (%s); nothing was reserved." % (family, rule.replace("_", " ")),
        code="address_taken",
        details={"family": family, "rule": rule},
    )


def _pool_addresses(family: str, settings: t.Mapping[str, t.Any]) -> t.Iterator[str]:
    """The pool's addresses in order, without the subnet's reserved ones (network, broadcast, gateway)."""
    subnet = parse_subnet(family, settings["subnet"])
    reserved = reserved_addresses(subnet, settings.get("gateway"))
    for item in settings["pool"]:
        first, last = int(parse_address(family, item["first"])), int(parse_address(family, item["last"]))
        for number in range(first, last + 1):
            address = ipaddress.ip_address(number) if family == "ipv4" else ipaddress.IPv6Address(number)
            if address not in reserved:
                yield str(address)


class AddressReservation:
    """One ``reserve`` call for one family: the guest scan, the lease book and the caller's options."""

    def __init__(
        self,
        store: JournalStore,
        book: AddressBook,
        scan: GuestScan,
        *,
        network: t.Mapping[str, t.Any],
        family: str,
        owner: str,
        lease_seconds: int,
        check_mode: bool,
    ) -> None:
        self.store, self.book, self.scan = store, book, scan
        self.network, self.family, self.settings = network["name"], family, network[family]
        self.owner, self.lease_seconds, self.check_mode = owner, lease_seconds, check_mode

    def _free(self, address: str) -> bool:
        if address in self.scan.declared or self.store.address_holder(self.book.scope, self.family, address):
            return False
        lease = self.book.read(self.family, address)
        return lease is None or not self.book.live(lease)

    def _lease(self, address: str) -> dict[str, t.Any]:
        if self.check_mode:
            return {"address": address, "owner": self.owner, "network": self.network, "family": self.family}
        return self.book.take(self.network, self.family, address, self.owner, self.lease_seconds)

    def given(self, text: str) -> dict[str, t.Any]:
        """The apply run: the address its confirmation binds. Reused, claimed already, or leased again if free."""
        try:
            address = str(parse_address(self.family, text))
        except ValueError:
            raise InputError(
                code="invalid_network_address", path="addresses." + self.family, details={"rule": "invalid_address"}
            ) from None
        if not in_pool(self.family, self.settings, ipaddress.ip_address(address)):
            raise InputError(
                code="invalid_network_address", path="addresses." + self.family, details={"rule": "outside_pool"}
            )
        holder = self.store.address_holder(self.book.scope, self.family, address)
        if holder is not None:
            return {"address": address, "reused": True, "changed": False, "claimed_by": holder, "lease": None}
        current = self.book.read(self.family, address)
        if current is not None and self.book.live(current):
            if current["owner"] != self.owner or current["network"] != self.network:
                raise _taken(self.family, "leased_by_another_owner")
            if address in self.scan.declared:
                raise _taken(self.family, "declared_by_a_guest")
            return {"address": address, "reused": True, "changed": False, "claimed_by": None, "lease": current}
        if address in self.scan.declared:
            raise _taken(self.family, "declared_by_a_guest")
        return {"address": address, "reused": False, "changed": True, "claimed_by": None, "lease": self._lease(address)}

    def lowest(self) -> dict[str, t.Any]:
        """This owner's live lease in the network (the review run took it), else the pool's lowest free address."""
        for lease in self.book.owned(self.owner, self.network, self.family):
            if lease["address"] not in self.scan.declared:
                return {
                    "address": lease["address"],
                    "reused": True,
                    "changed": False,
                    "claimed_by": None,
                    "lease": lease,
                }
            if not self.check_mode:
                self.book.remove(lease)  # a guest declares it now: the lease protects nothing any more
        for address in _pool_addresses(self.family, self.settings):
            if self._free(address):
                return {
                    "address": address,
                    "reused": False,
                    "changed": True,
                    "claimed_by": None,
                    "lease": self._lease(address),
                }
        raise VmanywareError(
            "The network's %s pool has no free address." % self.family,
            code="no_free_address",
            details={"network": self.network, "family": self.family},
        )


def auto_families(network: t.Mapping[str, t.Any], definition: t.Mapping[str, t.Any]) -> list[str]:
    """The families whose address the definition leaves to the pool (``address: auto``) in a static network."""
    chosen = definition.get("network") or {}
    return [
        family
        for family in FAMILIES
        if (chosen.get(family) or {}).get("address") == AUTO and (network.get(family) or {}).get("mode") == STATIC
    ]


def _check_network(network: t.Mapping[str, t.Any], family: str) -> None:
    if "pool" not in (network.get(family) or {}):
        raise InputError(
            "address: auto needs an address pool in the catalog network.",
            code="invalid_network_address",
            path="network.%s.address" % family,
            details={"rule": "no_pool"},
        )


def reserve(
    store: JournalStore,
    client: ApiClient,
    *,
    network: t.Mapping[str, t.Any],
    families: t.Sequence[str],
    owner: str,
    addresses: t.Mapping[str, str] | None = None,
    lease_seconds: int = 3600,
    check_mode: bool = False,
    clock: t.Callable[[], float] = time.time,
) -> dict[str, t.Any]:
    """Lease one address per family in ``families`` of the catalog ``network`` for ``owner`` (Proxmox is only read).

    With ``addresses`` (the apply run: the confirmation names them) each is reused, returned with ``claimed_by`` when
    an operation plans it already, or leased again when still free; anything else is ``address_taken``."""
    owner = check_owner(owner)
    for family in families:
        _check_network(network, family)
    scan = scan_guests(client) if families else GuestScan()
    scope = client.provider_scope_id if families else None
    result: dict[str, t.Any] = {"changed": False, "addresses": {}, "leases": {}, "claimed_by": {}, "reused": {}}
    if not families:
        result["provider_scope_id"] = client.provider_scope_id
        return result
    if not scope:
        raise VmanywareError("The provider scope could not be determined.", code="internal_error")
    book = AddressBook(store, scope, clock)
    with store.journal_lock():
        for family in families:
            run = AddressReservation(
                store,
                book,
                scan,
                network=network,
                family=family,
                owner=owner,
                lease_seconds=lease_seconds,
                check_mode=check_mode,
            )
            given = (addresses or {}).get(family)
            found = run.given(given) if given else run.lowest()
            result["addresses"][family] = found["address"]
            result["reused"][family] = found["reused"]
            result["changed"] = result["changed"] or found["changed"]
            if found["claimed_by"]:
                result["claimed_by"][family] = found["claimed_by"]
            if found["lease"] is not None:
                result["leases"][family] = snake_keys(dict(found["lease"]))
    result["provider_scope_id"] = scope
    result["guests_unread"] = scan.unread + (scan.listed if scan.problem else 0)
    return result


def release(
    store: JournalStore,
    scope: str,
    *,
    owner: str,
    network: str | None = None,
    check_mode: bool = False,
    clock: t.Callable[[], float] = time.time,
) -> dict[str, t.Any]:
    """Remove ``owner``'s address leases in ``scope`` (only ``network``'s when given); operations' claims stay."""
    owner = check_owner(owner)
    book = AddressBook(store, scope, clock)
    released = []
    with store.journal_lock():
        try:
            names = sorted(n for n in os.listdir(store.layout.address_leases_dir) if n.endswith(".json"))
        except FileNotFoundError:
            names = []
        for name in names:
            lease = book.read_file(os.path.join(store.layout.address_leases_dir, name))
            if lease is None or (lease["providerScopeId"], lease["owner"]) != (scope, owner):
                continue
            if network is not None and lease["network"] != network:
                continue
            released.append({"family": lease["family"], "address": lease["address"], "network": lease["network"]})
            if not check_mode:
                book.remove(lease)
    return {"changed": bool(released), "released": released, "provider_scope_id": scope}


def wants_leases(catalog: t.Mapping[str, t.Any], definition: t.Mapping[str, t.Any]) -> bool:
    """Whether a parsed definition's network leaves an address to its pool (``network_not_in_catalog`` for a network
    the catalog lacks)."""
    chosen = definition.get("network")
    return chosen is not None and bool(auto_families(catalog_network(catalog, chosen["name"]), definition))


def no_leases(definition: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The result of a reservation that needs no lease (and reads nothing)."""
    network = (definition.get("network") or {}).get("name")
    return {"changed": False, "addresses": {}, "leases": {}, "claimed_by": {}, "reused": {}, "network": network}


def reserve_for_definition(
    store: JournalStore,
    client: ApiClient,
    *,
    catalog: t.Mapping[str, t.Any],
    definition: t.Mapping[str, t.Any],
    owner: str,
    addresses: t.Mapping[str, str] | None = None,
    lease_seconds: int = 3600,
    check_mode: bool = False,
) -> dict[str, t.Any]:
    """``reserve`` for the families a parsed definition's network asks ``auto`` for; a definition without ``network``
    or without ``auto`` reserves nothing and reads nothing (``addresses`` empty: the plan needs none)."""
    if not wants_leases(catalog, definition):
        return no_leases(definition)
    network = catalog_network(catalog, definition["network"]["name"])
    result = reserve(
        store,
        client,
        network=network,
        families=auto_families(network, definition),
        owner=owner,
        addresses=addresses,
        lease_seconds=lease_seconds,
        check_mode=check_mode,
    )
    result["network"] = network["name"]
    return result
