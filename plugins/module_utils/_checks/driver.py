# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The check driver the VM, container and template preflights run on.

``Preflight`` runs one family's checks: the API and version first, then the family's reads
(``read_checks``) or, when the API did not answer, ``unknown`` for every check not yet set; the
checks no read can decide are always ``unknown``. Every check has a fixed code and ends
``passed``, ``failed`` or ``unknown``: nothing that was not read and understood becomes
``passed``. Also here: the checks the VM and container families share (storage, bridge, VMID),
``collect_checks`` (gates, TLS, one client), the result every preflight returns and ``fail_on``.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import typing as t

from .._api.http_errors import CONNECT_FAILURE_TEXTS
from .._api.settings import ConnectionSettings
from .._api.tls import mark_tls, require_tls_for_reads
from .._core.errors import ERROR_CODES, InputError, ProviderError, VmanywareError, snake_keys
from .._core.protocols import ApiClient
from .._formats.networks import planned_address, static_families
from .._operation.addresses import scan_guests
from .._operation.create import PROVISIONING_GATE, SNAPSHOTS_GATE, read_gate

SUPPORTED_MAJORS = (8, 9)
GIB = 1024**3
FAIL_ON_CHOICES = ("failed", "unknown", "never")
# Checks of a new guest (VM or container) no read can ever decide: always unknown, and not counted by fail_on=unknown.
GUEST_UNDECIDABLE = {
    "dhcp_available": "DHCP on the bridge cannot be verified by reading the Proxmox API.",
    "guest_readiness": "Guest readiness is only observable after the VM has been created and started.",
    "workflow_permitted": "Change approval and maintenance windows are outside what the Proxmox API can show.",
}
# A static address: what the reads of every guest cannot prove (docs/networks.md); replaces dhcp_available.
ADDRESS_UNDECIDABLE = {
    "address_outside_proxmox": "Reads of Proxmox's guests cannot prove that no host outside Proxmox uses the address.",
}
NOT_REACHABLE = "Not checked: the API is not reachable with the configured credentials and TLS settings."

_VERSION = re.compile(r"^(\d+)\.(\d+)")


@dataclasses.dataclass
class Check:
    code: str
    status: str
    message: str

    def to_result(self) -> dict[str, str]:
        return {"code": self.code, "status": self.status, "message": self.message}


class PreflightFailed(VmanywareError):
    """``preflight_failed``; the failure result still carries the checks and the other fields."""

    default_code = "preflight_failed"

    def __init__(self, result: t.Mapping[str, t.Any], counted_unknown: t.Sequence[str] = ()) -> None:
        failed = [check["code"] for check in result["checks"] if check["status"] == "failed"]
        parts = ["failed: " + ", ".join(failed)] if failed else []
        parts += ["unknown: " + ", ".join(counted_unknown)] if counted_unknown else []
        message = "%s Checks %s." % (ERROR_CODES["preflight_failed"], "; ".join(parts)) if parts else None
        super().__init__(
            message,
            code="preflight_failed",
            details={
                "failed": result["summary"]["failed"],
                "unknown": result["summary"]["unknown"],
                "failed_checks": failed,
            },
        )
        self.result = dict(result)

    def to_result(self) -> dict[str, t.Any]:
        merged = dict(self.result)
        merged.update(super().to_result())
        return merged


def provisioning_enabled(environ: t.Mapping[str, str]) -> bool:
    """Both gates read (a bad value is a ``configuration_error`` before anything else); the provisioning gate's value."""
    read_gate(environ, SNAPSHOTS_GATE)
    return read_gate(environ, PROVISIONING_GATE)


def truthy(value: t.Any) -> bool:
    return value in (1, True, "1", "on", "yes", "true")


def capabilities_for(major: int | None, minor: int | None) -> dict[str, t.Any]:
    """PVE-version capabilities; ``None`` values when the version is unknown."""
    if major is None:
        return {
            "pve_major": None,
            "pve_minor": None,
            "resize_returns_upid": None,
            "agent_exec_array": None,
            "guest_agent_privileges": None,
        }
    return {
        "pve_major": major,
        "pve_minor": minor,
        # qemu-server 8.0 (PVE 8.0) made PUT .../resize spawn a worker and return a UPID.
        "resize_returns_upid": major >= 8,
        # agent/exec takes `command` as an array (repeated form parameter) since PVE 6.2.
        "agent_exec_array": major >= 7,
        "guest_agent_privileges": "VM.GuestAgent.*" if major >= 9 else "VM.Monitor",
    }


class Preflight:
    """One run of a family's checks through one client (GETs only); a family names its codes and reads."""

    CHECK_CODES: t.ClassVar[tuple[str, ...]]  # the result's checks, in this order
    UNDECIDABLE: t.ClassVar[t.Mapping[str, str]]  # code -> the fixed text of a check no read can decide
    # (check code, content type, passed text, failed text) of the storage content check: VMs need images, containers rootdir.
    STORAGE_CONTENT: t.ClassVar[tuple[str, str, str, str]]

    def __init__(self, client: ApiClient, plan: t.Mapping[str, t.Any], tls_verified: bool = True) -> None:
        self.client = client
        self.tls_verified = tls_verified
        self.plan = plan
        self.source = plan["source"]
        self.node = plan["target"]["node"]
        self.checks: dict[str, Check] = {}
        self.major: int | None = None
        self.minor: int | None = None

    def codes(self) -> tuple[str, ...]:
        """This plan's checks, in result order. A named network adds its checks after ``bridge_exists``:
        ``bridge_vlan_aware`` (a VLAN tag) and ``address_free`` (a static address, whose ``address_outside_proxmox``
        replaces ``dhcp_available``)."""
        nic = self.plan.get("nic")
        if not isinstance(nic, dict):
            return self.CHECK_CODES
        added = (("bridge_vlan_aware",) if "vlan" in nic else ()) + (("address_free",) if self._static() else ())
        codes = list(self.CHECK_CODES)
        index = codes.index("bridge_exists") + 1
        codes[index:index] = added
        if self._static():
            codes[codes.index("dhcp_available")] = "address_outside_proxmox"
        return tuple(codes)

    def undecidable(self) -> t.Mapping[str, str]:
        """This plan's checks no read can decide, with their fixed texts."""
        if not self._static():
            return self.UNDECIDABLE
        return {**{k: v for k, v in self.UNDECIDABLE.items() if k != "dhcp_available"}, **ADDRESS_UNDECIDABLE}

    def _static(self) -> bool:
        nic = self.plan.get("nic")
        return isinstance(nic, dict) and bool(static_families(nic))

    def network_checks(self) -> None:
        """The named network's checks (after ``bridge_exists``), when the plan's NIC asks for them."""
        if "bridge_vlan_aware" in self.codes():
            self.bridge_vlan_aware()
        if self._static():
            self.address_free()

    def bridge_vlan_aware(self) -> None:
        """A tagged NIC needs a VLAN-aware bridge (the catalog network's VLAN, docs/networks.md)."""
        code = "bridge_vlan_aware"
        if self.checks.get("bridge_exists") is None or self.checks["bridge_exists"].status != "passed":
            self.set(code, "unknown", "Not checked: the bridge was not found on the mapped node.")
            return
        try:
            entry = self.client.get(f"/nodes/{self.node}/network/{self.plan['bridge']}")
        except ProviderError:
            self.set(code, "unknown", "The bridge's settings could not be read.")
            return
        if not isinstance(entry, dict):
            self.set(code, "unknown", "The bridge's settings could not be understood.")
        elif truthy(entry.get("bridge_vlan_aware")):
            self.set(code, "passed", "The bridge is VLAN-aware: the planned VLAN tag applies.")
        else:
            self.set(code, "failed", "The bridge is not VLAN-aware; the network's VLAN tag needs a VLAN-aware bridge.")

    def address_free(self) -> None:
        """No guest Proxmox knows declares a planned static address (``ipconfigN`` of VMs, ``netN`` of containers)."""
        code = "address_free"
        nic = self.plan["nic"]
        wanted = {str(ipaddress.ip_address(planned_address(nic, family) or "")) for family in static_families(nic)}
        scan = scan_guests(self.client)
        if scan.problem is not None:
            self.set(code, "unknown", scan.problem)
            return
        holders = sorted(scan.declared[address] for address in wanted if address in scan.declared)
        if holders:
            self.set(code, "failed", "Guest %d declares a planned address." % holders[0])
        elif scan.unread:
            self.set(
                code,
                "unknown",
                "%d of %d guests could not be read; none of the others declares the address."
                % (scan.unread, scan.listed),
            )
        else:
            self.set(code, "passed", "None of the %d guests the token can see declares the address." % scan.listed)

    def run(self) -> tuple[list[Check], dict[str, t.Any]]:
        """Every check: the checks in ``codes()`` order and the PVE-version capabilities."""
        if self.version():
            self.read_checks()
        else:
            self.unknown(
                [c for c in self.codes() if c not in self.checks and c not in self.undecidable()], NOT_REACHABLE
            )
        self.mark_undecidable()
        return [self.checks[code] for code in self.codes()], capabilities_for(self.major, self.minor)

    def read_checks(self) -> None:
        """The family's checks once the API answered ``GET /version``."""
        raise NotImplementedError

    def mark_undecidable(self) -> None:
        for code, message in self.undecidable().items():
            self.set(code, "unknown", message)

    def set(self, code: str, status: str, message: str) -> None:
        self.checks[code] = Check(code, status, message)

    def unknown(self, codes: t.Iterable[str], message: str) -> None:
        for code in codes:
            self.set(code, "unknown", message)

    # -- checks the families share (storage: the VM and container ones) -------------------------------
    def version(self) -> bool:
        try:
            data = self.client.get("/version")
        except ProviderError as err:
            if err.code == "tls_verification_failed":
                self.set(
                    "api_reachable",
                    "failed",
                    "TLS verification failed: the server certificate does not match the CA or fingerprint pin.",
                )
            elif err.code == "auth_failed":
                self.set(
                    "api_reachable",
                    "failed",
                    "The API answered but rejected the credentials (expired, revoked or wrong token).",
                )
            elif err.code == "transport_lost":
                self.set(
                    "api_reachable", "failed", CONNECT_FAILURE_TEXTS.get(err.details.get("reason", ""), err.message)
                )
            elif err.code == "reply_lost":
                self.set(
                    "api_reachable", "failed", "The API accepted the connection but did not answer within the timeout."
                )
            else:
                self.set("api_reachable", "unknown", "The API answered GET /version with an error.")
            self.set("version_supported", "unknown", "The Proxmox VE version could not be read.")
            return False
        if self.tls_verified:
            self.set("api_reachable", "passed", "The API answered with verified TLS and accepted the credentials.")
        else:
            self.set(
                "api_reachable",
                "passed",
                "The API answered and accepted the credentials over UNVERIFIED TLS (unverified_tls_read_only: "
                "GET requests only): the server's identity is not proven.",
            )
        version = data.get("version") if isinstance(data, dict) else None
        match = _VERSION.match(version) if isinstance(version, str) else None
        if match is None:
            release = data.get("release") if isinstance(data, dict) else None
            match = _VERSION.match(release) if isinstance(release, str) else None
        if match is None:
            self.set(
                "version_supported",
                "unknown",
                "The API did not report a Proxmox VE version the collection understands.",
            )
            return True
        self.major, self.minor = int(match.group(1)), int(match.group(2))
        if self.major in SUPPORTED_MAJORS:
            self.set("version_supported", "passed", "The Proxmox VE major version is supported (8 or 9).")
        else:
            self.set(
                "version_supported", "failed", "The Proxmox VE major version is not supported (supported: 8 or 9)."
            )
        return True

    def storage(self) -> None:
        codes = ("storage_active", self.STORAGE_CONTENT[0], "storage_capacity")
        storage = self.plan["storage"]
        try:
            status = self.client.get(f"/nodes/{self.node}/storage/{storage}/status")
        except ProviderError as err:
            missing = err.code == "not_found" or (
                err.code == "parameter_invalid" and "storage" in err.details.get("parameters", [])
            )
            if missing:
                self.set("storage_exists", "failed", "The storage does not exist on the mapped node.")
                self.unknown(codes, "Not checked: the storage does not exist.")
                return
            if err.code == "permission_denied":
                self.set("storage_exists", "unknown", "The token may not read the storage status (Datastore.Audit).")
                self.unknown(codes, "Not checked: the storage status could not be read.")
                return
            # e.g. a disabled storage has no status: its entry in the node's storage list still proves it exists
            # (absence from that permission-filtered list proves nothing).
            status = self._storage_from_list(storage)
            if status is None:
                self.set("storage_exists", "unknown", "The storage status could not be read.")
                self.unknown(codes, "Not checked: the storage status could not be read.")
                return
        if not isinstance(status, dict):
            self.set("storage_exists", "unknown", "The storage status could not be understood.")
            self.unknown(codes, "Not checked: the storage status could not be understood.")
            return
        self.set("storage_exists", "passed", "The storage exists on the mapped node.")
        enabled, active = status.get("enabled"), status.get("active")
        if active is None:
            self.set("storage_active", "unknown", "The storage status does not say whether it is active.")
        elif truthy(active) and (enabled is None or truthy(enabled)):
            self.set("storage_active", "passed", "The storage is enabled and active.")
        else:
            self.set("storage_active", "failed", "The storage is disabled or not active.")
        content = status.get("content")
        code, content_type, passed, failed = self.STORAGE_CONTENT
        if not isinstance(content, str):
            self.set(code, "unknown", "The storage status does not list its content types.")
        elif content_type in [c.strip() for c in content.split(",")]:
            self.set(code, "passed", passed)
        else:
            self.set(code, "failed", failed)
        avail = status.get("avail")
        needed = self.plan["resources"]["diskGiB"] * GIB
        if self.checks["storage_active"].status != "passed":
            self.set(
                "storage_capacity",
                "unknown",
                "Not checked: the available space of a storage that is not active is not meaningful.",
            )
        elif isinstance(avail, bool) or not isinstance(avail, (int, float)):
            self.set("storage_capacity", "unknown", "The storage status does not report its available space.")
        elif avail >= needed:
            self.set("storage_capacity", "passed", "The storage has room for the requested disk.")
        else:
            self.set("storage_capacity", "failed", "The storage has less available space than the requested disk.")

    def _storage_from_list(self, storage: str) -> dict[str, t.Any] | None:
        try:
            entries = self.client.get(f"/nodes/{self.node}/storage", storage=storage)
        except ProviderError:
            return None
        if isinstance(entries, list):
            for entry in entries:
                if isinstance(entry, dict) and entry.get("storage") == storage:
                    return entry
        return None

    def bridge(self) -> None:
        try:
            interfaces = self.client.get(f"/nodes/{self.node}/network", type="any_bridge")
        except ProviderError:
            self.set("bridge_exists", "unknown", "The node's network interfaces could not be read.")
            return
        if not isinstance(interfaces, list):
            self.set("bridge_exists", "unknown", "The node's network interfaces could not be understood.")
        elif any(isinstance(i, dict) and i.get("iface") == self.plan["bridge"] for i in interfaces):
            self.set("bridge_exists", "passed", "The bridge exists on the mapped node.")
        else:
            self.set("bridge_exists", "failed", "The bridge does not exist on the mapped node.")

    def vmid(self) -> None:
        vmid = self.plan["target"]["vmid"]
        try:
            data = self.client.get("/cluster/nextid", vmid=vmid)
        except ProviderError as err:
            if err.code == "conflict":
                self.set("vmid_free", "failed", "The target VMID is already in use in the cluster.")
            else:
                self.set("vmid_free", "unknown", "Whether the target VMID is free could not be read.")
            return
        try:
            free = int(data) == vmid
        except (TypeError, ValueError):
            free = False
        if free:
            self.set("vmid_free", "passed", "The target VMID is free now (it is not reserved).")
        else:
            self.set("vmid_free", "unknown", "The API answered the VMID query with an unexpected value.")


def collect_checks(
    settings: ConnectionSettings,
    *,
    fail_on: str,
    client_factory: t.Callable[[ConnectionSettings], t.Any],
    blockers_of: t.Callable[[], list[str]],
    checks_of: t.Callable[[t.Any, bool], tuple[list[Check], dict[str, t.Any]]],
) -> tuple[list[Check], dict[str, t.Any], t.Any, list[str], bool]:
    """``fail_on``, then the creation blockers (the gates: before any network use), then one client for ``checks_of``.

    Returns (checks, capabilities, provider scope id, creation blockers, TLS verified). Unverified TLS (neither a CA
    nor a pin) is refused (``tls_unverified``) before any client is built, unless ``unverified_tls_read_only`` (with
    an API token; the client then sends GETs only): then the scope is ``None`` and ``tls_unverified`` is a blocker.
    """
    if fail_on not in FAIL_ON_CHOICES:
        raise InputError("fail_on must be one of failed, unknown, never.", path="fail_on")
    blockers = blockers_of()
    require_tls_for_reads(
        settings
    )  # unverified: refused before any client exists, unless the read-only opt-in (GETs, a token)
    tls_verified = settings.tls_verified
    if not tls_verified:
        blockers.append("tls_unverified")
    client = client_factory(settings)
    try:
        checks, capabilities = checks_of(client, tls_verified)
        scope = client.provider_scope_id if tls_verified else None  # never a scope from an unverified certificate
    finally:
        client.close()
    return checks, capabilities, scope, blockers, tls_verified


def preflight_result(
    hashes: t.Mapping[str, str],
    checks: t.Sequence[Check],
    capabilities: t.Mapping[str, t.Any],
    *,
    scope: t.Any,
    blockers: list[str],
    tls_verified: bool,
    fail_on: str,
    undecidable: t.Container[str],
) -> dict[str, t.Any]:
    """A preflight's result (its module's return values; ``hashes`` name the checked plan), or ``PreflightFailed`` carrying it
    per ``fail_on``."""
    result: dict[str, t.Any] = {
        "changed": False,
        **hashes,
        "provider_scope_id": scope,
        "checks": [c.to_result() for c in checks],
        "summary": summarize(checks),
        "creation_enabled": not blockers,
        "creation_blockers": blockers,
        "tls_verified": tls_verified,
        "vmid_reserved": False,
        "capabilities": snake_keys(capabilities),
    }
    return enforce_fail_on(mark_tls(result, tls_verified), checks, fail_on, undecidable)


def summarize(checks: t.Sequence[Check]) -> dict[str, int]:
    return {s: sum(1 for c in checks if c.status == s) for s in ("passed", "failed", "unknown")}


def enforce_fail_on(
    result: dict[str, t.Any], checks: t.Sequence[Check], fail_on: str, undecidable: t.Container[str]
) -> dict[str, t.Any]:
    """``result``, or ``PreflightFailed`` carrying it when ``fail_on`` says the checks do not pass."""
    decidable_unknown = [c.code for c in checks if c.status == "unknown" and c.code not in undecidable]
    if (fail_on in ("failed", "unknown") and result["summary"]["failed"]) or (
        fail_on == "unknown" and decidable_unknown
    ):
        raise PreflightFailed(result, decidable_unknown if fail_on == "unknown" else ())
    return result
