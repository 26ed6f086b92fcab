# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Automatic VMID allocation: reserve the lowest free VMID of a range with a lease (docs/operations.md, "Automatic VMIDs").

A lease is one JSON file in the journal directory (``leases/<target key>.json``, the key of the target
claim the VMID would get), created exclusively under the journal lock: of any number of processes
reserving at once, each gets its own VMID. When an operation is created for the VMID, the journal
removes the lease in the same locked step that writes the operation's target claim
(``JournalStore._supersede_lease``): from then on the VMID is held by the claim alone, and releasing the
claim (close, abandon, cleanup) is all that frees it. A lease ends on expiry, when it becomes a claim,
or with ``release`` (which drops the VMID's placement lease too, ``_journal/placement_leases.py``).

Free means: not listed by ``GET /cluster/resources`` (qemu VMs, templates, LXC containers), not held by
a live local operation or an unexpired lease, and accepted by ``GET /cluster/nextid?vmid=N`` (which sees
guests the token may not audit). Proxmox is only read.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import os
import re
import time
import typing as t

from .._core.errors import InputError, ProviderError, VmanywareError, snake_keys
from .._core.files import LocalFileError, create_json_exclusive, read_json_strict, remove_file_durable
from . import TIMESTAMP_FORMAT, JournalError, JournalStore, epoch_seconds
from .._core.protocols import ApiClient

LEASE_KIND = "vmanyware.dev/v1/VmidLease"
LEASE_KEYS = ("kind", "providerScopeId", "vmid", "owner", "purpose", "createdAt", "expiresAt")
PURPOSES = ("vm", "template")
STATES = ("reserved", "released")
DEFAULT_LEASE_SECONDS = 3600
MAX_LEASE_SECONDS = 7 * 24 * 3600
VMID_MIN = 100
VMID_MAX = 999999999
# Templates get their own range unless vmid_range says otherwise (the common 9000s convention).
TEMPLATE_RANGE = (9000, 9999)
# PVE's next-id defaults (datacenter.cfg): lower inclusive, upper exclusive.
NEXT_ID_DEFAULTS = (100, 1000 * 1000)
# VMIDs that GET /cluster/nextid may refuse in one call (guests the token cannot see) before giving up.
MAX_REFUSED = 32
MAX_LEASE_BYTES = 4096
_OWNER = re.compile(r"\A[^\x00-\x1f\x7f]{1,512}\Z")


# ---------------------------------------------------------------------------------------------
# inputs


def check_owner(owner: t.Any) -> str:
    """The lease owner: 1-512 characters without control characters (a label, never a secret)."""
    if not isinstance(owner, str) or not _OWNER.match(owner):
        raise InputError(
            "owner must be 1-512 characters without control characters.", path="owner", details={"rule": "format"}
        )
    return owner


def check_purpose(purpose: t.Any) -> str:
    if purpose not in PURPOSES:
        raise InputError("purpose must be vm or template.", path="purpose", details={"rule": "enum"})
    return t.cast(str, purpose)


def check_lease_seconds(seconds: t.Any) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= MAX_LEASE_SECONDS:
        raise InputError("lease_seconds must be 1-604800.", path="lease_seconds", details={"rule": "range"})
    return seconds


def check_vmid(vmid: t.Any, path: str = "vmid") -> int:
    if isinstance(vmid, bool) or not isinstance(vmid, int) or not VMID_MIN <= vmid <= VMID_MAX:
        raise InputError(code="invalid_target_vmid", path=path, details={"rule": "range"})
    return vmid


def check_range(value: t.Any) -> tuple[int, int] | None:
    """``vmid_range``: ``[lower, upper]``, both inclusive, within 100-999999999; ``None`` when not given."""
    if value is None or value == []:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise InputError("vmid_range must be [lower, upper].", path="vmid_range", details={"rule": "pair"})
    lower, upper = (check_vmid(item, "vmid_range") for item in value)
    if lower > upper:
        raise InputError("vmid_range must not end below its start.", path="vmid_range", details={"rule": "order"})
    return lower, upper


# ---------------------------------------------------------------------------------------------
# Proxmox reads


def _as_int(value: t.Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _unexpected(path: str) -> ProviderError:
    return ProviderError(
        "Proxmox answered with a body the collection does not understand.",
        code="unexpected_response",
        details={"method": "GET", "path": path},
    )


def used_vmids(client: ApiClient) -> set[int]:
    """Every VMID ``GET /cluster/resources?type=vm`` lists: qemu VMs, templates and LXC containers alike."""
    data = client.get("/cluster/resources", type="vm")
    if not isinstance(data, list):
        raise _unexpected("/cluster/resources")
    used: set[int] = set()
    for item in data:
        vmid = _as_int(item.get("vmid")) if isinstance(item, dict) else None
        if vmid is None:
            raise _unexpected("/cluster/resources")
        used.add(vmid)
    return used


def datacenter_range(client: ApiClient) -> tuple[int, int] | None:
    """The datacenter's ``next-id`` range as inclusive bounds, or ``None`` when it is not set (or not visible).

    PVE returns ``next-id`` only to tokens with ``Sys.Audit`` on ``/``; ``upper`` is exclusive there.
    """
    data = client.get("/cluster/options")
    if not isinstance(data, dict):
        raise _unexpected("/cluster/options")
    next_id = data.get("next-id")
    if next_id is None:
        return None
    if not isinstance(next_id, dict):
        raise _unexpected("/cluster/options")
    lower = _as_int(next_id.get("lower", NEXT_ID_DEFAULTS[0]))
    upper = _as_int(next_id.get("upper", NEXT_ID_DEFAULTS[1]))
    if lower is None or upper is None or not VMID_MIN <= lower < upper <= VMID_MAX + 1:
        raise _unexpected("/cluster/options")
    return lower, upper - 1


def accepted_by_proxmox(client: ApiClient, vmid: int) -> bool:
    """``GET /cluster/nextid?vmid=N``: true when Proxmox answers N (free now), false when it reports N taken."""
    try:
        data = client.get("/cluster/nextid", vmid=vmid)
    except ProviderError as err:
        if err.code == "conflict":
            return False
        raise
    if _as_int(data) != vmid:
        raise _unexpected("/cluster/nextid")
    return True


def resolve_range(client: ApiClient, purpose: str, option: tuple[int, int] | None) -> dict[str, t.Any]:
    """``{lower, upper, source}``: the option, else the template range for templates, else next-id, else 100-999999999."""
    if option is not None:
        return {"lower": option[0], "upper": option[1], "source": "option"}
    if purpose == "template":
        return {"lower": TEMPLATE_RANGE[0], "upper": TEMPLATE_RANGE[1], "source": "template_default"}
    datacenter = datacenter_range(client)
    if datacenter is not None:
        return {"lower": datacenter[0], "upper": datacenter[1], "source": "next_id"}
    return {"lower": VMID_MIN, "upper": VMID_MAX, "source": "default"}


# ---------------------------------------------------------------------------------------------
# the lease files


def lease_timestamp(epoch: float) -> str:
    """A lease's ``createdAt``/``expiresAt``: UTC in the journal's timestamp format."""
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(TIMESTAMP_FORMAT)


def _corrupt_lease(path: str) -> JournalError:
    return JournalError(
        "A VMID lease file is not valid; it was left untouched.",
        code="journal_corrupt",
        details={"lease": os.path.basename(path)},
    )


def read_lease(
    path: str,
    *,
    kind: str,
    keys: tuple[str, ...],
    valid: t.Callable[[dict[str, t.Any]], bool],
    corrupt: t.Callable[[str], JournalError],
) -> dict[str, t.Any] | None:
    """A lease file (a VMID's here, an address's in ``_operation/addresses.py``): ``None`` when there is none; exactly
    ``keys`` in order, the ``kind``, ``valid`` fields and parseable ``createdAt``/``expiresAt``, else ``corrupt``."""
    try:
        lease = read_json_strict(path, MAX_LEASE_BYTES, follow_symlinks=False)
    except LocalFileError as err:
        if err.code == "not_found":
            return None
        raise corrupt(path) from None
    if not isinstance(lease, dict) or tuple(lease) != keys or lease["kind"] != kind or not valid(lease):
        raise corrupt(path)
    try:
        epoch_seconds(lease["createdAt"])
        epoch_seconds(lease["expiresAt"])
    except (TypeError, ValueError):
        raise corrupt(path) from None
    return lease


def lease_paths(directory: str) -> list[str]:
    """The lease files in ``directory`` (VMID, address or placement leases), by name; none when it does not exist yet.
    Hidden files (an atomic write's temporary file) are not leases."""
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json") and not n.startswith("."))
    except FileNotFoundError:
        return []
    except OSError:
        raise JournalError("The journal directory cannot be read.", code="io_error") from None
    return [os.path.join(directory, name) for name in names]


class LeaseBook:
    """The leases of one provider scope in one journal directory. Writers hold ``store.journal_lock()``."""

    def __init__(self, store: JournalStore, scope: str, clock: t.Callable[[], float] = time.time) -> None:
        self.store = store
        self.scope = scope
        self.clock = clock

    def path(self, vmid: int) -> str:
        return self.store.lease_path(self.scope, vmid)

    def read_file(self, path: str) -> dict[str, t.Any] | None:
        return read_lease(
            path,
            kind=LEASE_KIND,
            keys=LEASE_KEYS,
            valid=lambda lease: (
                isinstance(lease["providerScopeId"], str)
                and _as_int(lease["vmid"]) is not None
                and isinstance(lease["owner"], str)
                and lease["purpose"] in PURPOSES
            ),
            corrupt=_corrupt_lease,
        )

    def read(self, vmid: int) -> dict[str, t.Any] | None:
        lease = self.read_file(self.path(vmid))
        if lease is not None and (lease["providerScopeId"] != self.scope or lease["vmid"] != vmid):
            raise _corrupt_lease(self.path(vmid))
        return lease

    def live(self, lease: t.Mapping[str, t.Any]) -> bool:
        return epoch_seconds(lease["expiresAt"]) > self.clock()

    def owned(self, owner: str, purpose: str) -> list[dict[str, t.Any]]:
        """This scope's leases of ``owner`` for ``purpose`` (expired ones too), lowest VMID first."""
        found = []
        for path in lease_paths(self.store.leases_dir):
            lease = self.read_file(path)
            if (
                lease is not None
                and lease["providerScopeId"] == self.scope
                and lease["owner"] == owner
                and lease["purpose"] == purpose
            ):
                found.append(lease)
        return sorted(found, key=lambda item: item["vmid"])

    def new(self, vmid: int, owner: str, purpose: str, seconds: int) -> dict[str, t.Any]:
        now = self.clock()
        return {
            "kind": LEASE_KIND,
            "providerScopeId": self.scope,
            "vmid": vmid,
            "owner": owner,
            "purpose": purpose,
            "createdAt": lease_timestamp(now),
            "expiresAt": lease_timestamp(now + seconds),
        }

    def create(self, lease: t.Mapping[str, t.Any]) -> bool:
        try:
            os.makedirs(self.store.leases_dir, mode=0o700, exist_ok=True)
            return create_json_exclusive(self.path(lease["vmid"]), dict(lease))
        except LocalFileError:
            raise JournalError("A VMID lease file cannot be written.", code="io_error") from None

    def remove(self, lease: t.Mapping[str, t.Any]) -> None:
        """Remove ``lease`` if the file still holds exactly it (another process may have replaced an expired one)."""
        if self.read(lease["vmid"]) == dict(lease):
            remove_file_durable(self.path(lease["vmid"]))


# ---------------------------------------------------------------------------------------------
# reserve and release


def _result(
    scope: str,
    vmid: int,
    *,
    lease: t.Mapping[str, t.Any] | None,
    changed: bool,
    reused: bool,
    claimed_by: str | None = None,
    vmid_range: t.Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    # The lease file keeps its camelCase fields; the module returns them in snake_case like every return key.
    return {
        "changed": changed,
        "vmid": vmid,
        "reused": reused,
        "claimed_by": claimed_by,
        "lease": snake_keys(dict(lease)) if lease is not None else None,
        "vmid_range": dict(vmid_range) if vmid_range else None,
        "provider_scope_id": scope,
    }


def _taken(vmid: int, rule: str, **details: t.Any) -> VmanywareError:
    return VmanywareError(
        "VMID %d is taken (%s); nothing was reserved." % (vmid, rule.replace("_", " ")),
        code="vmid_taken",
        details=dict(details, vmid=vmid, rule=rule),
    )


class Reservation:
    """One ``reserve`` call: the reads, the lease book and the caller's options."""

    def __init__(
        self,
        store: JournalStore,
        client: ApiClient,
        *,
        owner: str,
        purpose: str,
        lease_seconds: int,
        check_mode: bool,
        clock: t.Callable[[], float],
    ) -> None:
        self.store = store
        self.client = client
        self.owner = owner
        self.purpose = purpose
        self.lease_seconds = lease_seconds
        self.check_mode = check_mode
        self.used = used_vmids(client)  # the first request: afterwards the provider scope is known
        scope = client.provider_scope_id
        if not scope:
            raise VmanywareError("The provider scope could not be determined.", code="internal_error")
        self.book = LeaseBook(store, scope, clock)

    @property
    def scope(self) -> str:
        return self.book.scope

    def mine(self, lease: t.Mapping[str, t.Any] | None) -> bool:
        return lease is not None and lease["owner"] == self.owner and lease["purpose"] == self.purpose

    def lock(self) -> t.ContextManager[None]:
        return self.store.journal_lock()

    def take(self, vmid: int, expired: dict[str, t.Any] | None) -> dict[str, t.Any]:
        """Under the lock: write a new lease for ``vmid`` (replacing an expired one); check mode writes nothing."""
        lease = self.book.new(vmid, self.owner, self.purpose, self.lease_seconds)
        if not self.check_mode:
            if expired is not None:
                self.book.remove(expired)
            if not self.book.create(lease):  # pragma: no cover - under the journal lock
                raise _taken(vmid, "leased")
        return lease

    def retract(self, lease: t.Mapping[str, t.Any]) -> None:
        if not self.check_mode:
            with self.lock():
                self.book.remove(lease)

    def verified(self, lease: dict[str, t.Any]) -> bool:
        """Ask Proxmox about a fresh lease's VMID; a refused or failed check retracts the lease."""
        try:
            accepted = accepted_by_proxmox(self.client, lease["vmid"])
        except VmanywareError:
            self.retract(lease)
            raise
        if not accepted:
            self.retract(lease)
        return accepted

    # -- a given VMID (the apply run: the confirmation names it) -----------------------------------
    def given(self, vmid: int) -> dict[str, t.Any]:
        with self.lock():
            holder = self.store.target_holder(self.scope, vmid)
            if holder is not None:
                # The lease already became this operation's target claim; creating it again is the journal's decision.
                return _result(self.scope, vmid, lease=None, changed=False, reused=True, claimed_by=holder)
            current = self.book.read(vmid)
            if current is not None and self.book.live(current):
                if not self.mine(current):
                    raise _taken(vmid, "leased_by_another_owner", expiresAt=current["expiresAt"])
                if vmid in self.used:
                    raise _taken(vmid, "on_proxmox")
                lease, reused = current, True
            else:
                if vmid in self.used:
                    raise _taken(vmid, "on_proxmox")
                lease, reused = self.take(vmid, current), False
        if reused:
            if not accepted_by_proxmox(self.client, vmid):
                self.retract(lease)  # another client took it: the lease protects nothing any more
                raise _taken(vmid, "on_proxmox")
        elif not self.verified(lease):
            raise _taken(vmid, "on_proxmox")
        return _result(self.scope, vmid, lease=lease, changed=not reused, reused=reused)

    # -- the lowest free VMID of a range ------------------------------------------------------------
    def reuse(self) -> dict[str, t.Any] | None:
        """This owner's live lease (the review run reserved it), unless Proxmox shows its VMID taken meanwhile."""
        with self.lock():
            live = [lease for lease in self.book.owned(self.owner, self.purpose) if self.book.live(lease)]
        for lease in live:
            if lease["vmid"] not in self.used and accepted_by_proxmox(self.client, lease["vmid"]):
                return lease
            self.retract(lease)  # another client took it: this lease protects nothing any more
        return None

    def lowest_free(
        self, vmid_range: t.Mapping[str, t.Any], refused: set[int]
    ) -> tuple[int, dict[str, t.Any] | None] | None:
        """Under the lock: the lowest VMID that no guest, live operation or live lease holds (and its expired lease)."""
        for vmid in range(vmid_range["lower"], vmid_range["upper"] + 1):
            if vmid in self.used or vmid in refused or self.store.target_holder(self.scope, vmid) is not None:
                continue
            lease = self.book.read(vmid)
            if lease is None or not self.book.live(lease):
                return vmid, lease
        return None

    def lowest(self, vmid_range: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        refused: set[int] = set()
        while len(refused) <= MAX_REFUSED:
            with self.lock():
                found = self.lowest_free(vmid_range, refused)
                if found is None:
                    break
                lease = self.take(*found)
            if self.verified(lease):
                return _result(
                    self.scope, lease["vmid"], lease=lease, changed=True, reused=False, vmid_range=vmid_range
                )
            refused.add(lease["vmid"])
        details = {"lower": vmid_range["lower"], "upper": vmid_range["upper"], "refusedByProxmox": len(refused)}
        raise VmanywareError(code="no_free_vmid", details=details)


def reserve(
    store: JournalStore,
    client: ApiClient,
    *,
    owner: str,
    purpose: str = "vm",
    vmid: int | None = None,
    vmid_range: t.Any = None,
    lease_seconds: int = DEFAULT_LEASE_SECONDS,
    check_mode: bool = False,
    clock: t.Callable[[], float] = time.time,
) -> dict[str, t.Any]:
    """Reserve a VMID for ``owner`` and return the module result (Proxmox is only read).

    With ``vmid`` (the apply run: the confirmation names it): this owner's live lease is reused; a VMID that
    already became an operation's target claim is returned with ``claimed_by``; an expired or missing lease is
    taken again when the VMID is still free; anything else is ``vmid_taken``. Without ``vmid``: this owner's
    live lease for ``purpose`` is reused, else the lowest free VMID of the range is leased.
    """
    checked = (check_owner(owner), check_purpose(purpose), check_lease_seconds(lease_seconds), check_range(vmid_range))
    wanted = check_vmid(vmid) if vmid is not None else None
    run = Reservation(
        store,
        client,
        owner=checked[0],
        purpose=checked[1],
        lease_seconds=checked[2],
        check_mode=check_mode,
        clock=clock,
    )
    if wanted is not None:
        return run.given(wanted)
    existing = run.reuse()
    if existing is not None:
        return _result(run.scope, existing["vmid"], lease=existing, changed=False, reused=True)
    return run.lowest(resolve_range(client, checked[1], checked[3]))


def release(
    store: JournalStore,
    scope: str,
    *,
    owner: str,
    purpose: str = "vm",
    vmid: int | None = None,
    check_mode: bool = False,
    clock: t.Callable[[], float] = time.time,
) -> dict[str, t.Any]:
    """Remove ``owner``'s leases for ``purpose`` in ``scope`` (only ``vmid``'s when given), and the placement lease of each
    released VMID (``_journal/placement_leases.py``) with it; operation claims are never touched."""
    book = LeaseBook(store, scope, clock)
    owner, purpose = check_owner(owner), check_purpose(purpose)
    wanted = check_vmid(vmid) if vmid is not None else None
    with store.journal_lock():
        leases = [lease for lease in book.owned(owner, purpose) if wanted is None or lease["vmid"] == wanted]
        if not check_mode:
            for lease in leases:
                book.remove(lease)
                store.drop_placement_lease(scope, lease["vmid"])  # the reviewed plan placed for this VMID is gone
    return {"changed": bool(leases), "released": [lease["vmid"] for lease in leases], "provider_scope_id": scope}
