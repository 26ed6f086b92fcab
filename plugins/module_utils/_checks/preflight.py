# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Read-only preflight of a plan: what bounded, verified-TLS GETs can prove about it (a VM's checks here, a container
plan's in ``container.py``, both run by the check driver of ``driver.py``).

Every check has a fixed code and ends ``passed``, ``failed`` or ``unknown``. Nothing that was
not read and understood becomes ``passed``: an unavailable endpoint, a missing permission to
read or missing metadata is ``unknown`` (``failed`` only where the answer is definite). Check
messages are fixed application text (plus ACL paths and privilege names, which are not secret);
provider bodies and configuration values are never forwarded.
"""

from __future__ import annotations

import re
import typing as t

from .._api.client import ProxmoxClient
from .._api.pveconfig import parse_property_string, parse_size_bytes
from .._api.settings import ConnectionSettings
from .._core.errors import InputError, ProviderError
from .._core.protocols import ApiClient
from .._formats.template_build import stamp_revision
from .._operation.create import creation_blockers
from .clone_source import online_nodes, shared_flags, source_shared, target_storage_shared
from .container import ContainerPreflight
from .driver import (
    FAIL_ON_CHOICES,
    GIB,
    ADDRESS_UNDECIDABLE,
    GUEST_UNDECIDABLE,
    SUPPORTED_MAJORS,
    Check,
    Preflight,
    collect_checks,
    preflight_result,
    truthy,
)
from .permissions import effective_privileges, required_privileges

CHECK_CODES = (
    "api_reachable",
    "version_supported",
    "template_exists",
    "template_is_template",
    "template_disk",
    "template_cloudinit_drive",
    "template_guest_agent",
    "storage_exists",
    "storage_active",
    "storage_images",
    "storage_capacity",
    "bridge_exists",
    "vmid_free",
    "privileges",
    "template_revision",
    "dhcp_available",
    "guest_readiness",
    "workflow_permitted",
)
# Checks no read can ever decide: always unknown, and not counted by fail_on=unknown (a container plan's are a subset).
UNDECIDABLE = {
    "template_revision": "The template revision is the operator's catalog label; reads cannot prove the template matches it.",
    **GUEST_UNDECIDABLE,
}
# A plan that clones to another node (``clone.method: target``, docs/operations.md "Placement") adds these after the
# template checks: the target node is online, and the template's volumes are on shared storage.
CLONE_TARGET_CODES = ("target_node_online", "clone_source_shared", "clone_storage_shared")

_DRIVE_KEY = re.compile(r"^(ide|scsi|sata)\d+$")


class VmPreflight(Preflight):
    CHECK_CODES = CHECK_CODES
    UNDECIDABLE = UNDECIDABLE
    STORAGE_CONTENT = (
        "storage_images",
        "images",
        "The storage accepts VM disk images.",
        "The storage does not accept VM disk images (content type images).",
    )

    def __init__(self, client: ApiClient, plan: t.Mapping[str, t.Any], tls_verified: bool = True) -> None:
        super().__init__(client, plan, tls_verified)
        self.stamp: tuple[str, str] | None = None
        # The template is read on its own node; the guest's storage, bridge and privileges are checked on the target.
        self.source_node: str = self.source["node"]
        self.template_config: t.Mapping[str, t.Any] | None = None

    def _clone_target(self) -> bool:
        clone = self.plan.get("clone")
        return isinstance(clone, dict) and clone.get("method") == "target"

    def codes(self) -> tuple[str, ...]:
        """The network's checks (the driver's), and after the template checks the clone-to-another-node ones."""
        codes = list(super().codes())
        if self._clone_target():
            index = codes.index("template_guest_agent") + 1
            codes[index:index] = CLONE_TARGET_CODES
        return tuple(codes)

    def read_checks(self) -> None:
        self.template()
        if self._clone_target():
            self.clone_target()
        self.storage()
        self.bridge()
        self.network_checks()
        self.vmid()
        self.privileges()

    def clone_target(self) -> None:
        """A clone to another node: that node online (``GET /nodes``) and every template volume on shared storage (the
        storage list of the template's node), which Proxmox requires (``clone_source.py``)."""
        online = online_nodes(self.client)
        if online is None:
            self.set("target_node_online", "unknown", "The cluster's nodes could not be read.")
        elif online.get(self.node):
            self.set("target_node_online", "passed", "The target node is online.")
        elif self.node in online:
            self.set("target_node_online", "failed", "The target node is offline.")
        else:
            self.set("target_node_online", "failed", "The target node is not a node of the cluster.")
        self.set(
            "clone_storage_shared", *target_storage_shared(self.plan["storage"], shared_flags(self.client, self.node))
        )
        if self.template_config is None:
            self.set("clone_source_shared", "unknown", "Not checked: the template's configuration could not be read.")
            return
        status, message = source_shared(self.template_config, shared_flags(self.client, self.source_node))
        self.set("clone_source_shared", status, message)

    def mark_undecidable(self) -> None:
        super().mark_undecidable()
        if self.stamp is not None:
            # Only the two pattern-checked stamp fields are shown; still unknown: a description is not proof of content.
            version, operation = self.stamp
            same = "equals" if version == self.source["templateVersion"] else "differs from"
            self.set(
                "template_revision",
                "unknown",
                "The template's stamp (docs/templates.md) names templateVersion %s, built by operation %s; it "
                "%s the catalog's templateVersion. A description is not proof of the template's content."
                % (version, operation, same),
            )

    def template(self) -> None:
        codes = ("template_is_template", "template_disk", "template_cloudinit_drive", "template_guest_agent")
        vmid = self.source["templateVmid"]
        try:
            config = self.client.get(f"/nodes/{self.source_node}/qemu/{vmid}/config")
        except ProviderError as err:
            if err.code == "not_found":
                self.set("template_exists", "failed", "The template VMID does not exist on the mapped node.")
                self.unknown(codes, "Not checked: the template does not exist.")
            elif err.code == "permission_denied":
                self.set(
                    "template_exists", "unknown", "The token may not read the template's configuration (VM.Audit)."
                )
                self.unknown(codes, "Not checked: the template's configuration could not be read.")
            else:
                self.set("template_exists", "unknown", "The template's configuration could not be read.")
                self.unknown(codes, "Not checked: the template's configuration could not be read.")
            return
        if not isinstance(config, dict):
            self.set("template_exists", "unknown", "The template's configuration could not be understood.")
            self.unknown(codes, "Not checked: the template's configuration could not be understood.")
            return
        self.set("template_exists", "passed", "The template VMID exists on the mapped node.")
        self.template_config = config
        self.stamp = stamp_revision(config.get("description"))
        if truthy(config.get("template")):
            self.set("template_is_template", "passed", "The source VM is a template.")
        else:
            self.set("template_is_template", "failed", "The source VM is not marked as a template.")
        self.template_disk(config)
        drives = [k for k in config if _DRIVE_KEY.match(k) and "cloudinit" in str(config[k]).split(",", 1)[0]]
        if drives:
            self.set("template_cloudinit_drive", "passed", "The template has a cloud-init drive.")
        else:
            self.set(
                "template_cloudinit_drive",
                "failed",
                "The template has no cloud-init drive (ideN/scsiN/sataN with a cloudinit volume).",
            )
        agent = config.get("agent")
        if agent is None:
            self.set("template_guest_agent", "failed", "The QEMU guest agent is not enabled in the template.")
        elif truthy(parse_property_string(agent, "enabled").get("enabled")):
            self.set("template_guest_agent", "passed", "The QEMU guest agent is enabled in the template.")
        else:
            self.set("template_guest_agent", "failed", "The QEMU guest agent is not enabled in the template.")

    def template_disk(self, config: t.Mapping[str, t.Any]) -> None:
        device = self.source["diskDevice"]
        value = config.get(device)
        if value is None:
            self.set("template_disk", "failed", f"The template has no disk on the declared device {device}.")
            return
        props = parse_property_string(value, "file")
        if props.get("media") == "cdrom" or "cloudinit" in props.get("file", ""):
            self.set("template_disk", "failed", f"The declared device {device} of the template is not a disk.")
            return
        size = parse_size_bytes(props["size"]) if "size" in props else None
        if size is None:
            self.set(
                "template_disk",
                "unknown",
                f"The template's disk on {device} does not record a size the collection understands.",
            )
        elif size == self.source["sourceDiskGiB"] * GIB:
            self.set("template_disk", "passed", f"The template's disk on {device} has the catalog's sourceDiskGiB.")
        else:
            self.set(
                "template_disk",
                "failed",
                f"The template's disk on {device} differs in size from the catalog's sourceDiskGiB.",
            )

    def privileges(self) -> None:
        # one entry per kind: a plan has one profile step per profile, all of the registry's one profile row
        stages = list(dict.fromkeys(["audit"] + [step["kind"] for step in self.plan["steps"]]))
        rows = required_privileges(
            stages,
            major=self.major if self.major in SUPPORTED_MAJORS else 9,
            node=self.node,
            template_vmid=self.source["templateVmid"],
            target_vmid=self.plan["target"]["vmid"],
            storage=self.plan["storage"],
            bridge=self.plan["bridge"],
        )
        held: dict[str, set[str]] = {}
        target = "/vms/%d" % self.plan["target"]["vmid"]
        pool = self.source.get("pool")
        # A VM cloned into a pool is a member from its creation: privileges on /pool/<pool> count for it (clone checks
        # VM.Allocate on /vms/<newid> or /pool/<pool>; every later request inherits the pool's ACL).
        pool_path = "/pool/%s" % pool if pool else None
        for path in dict.fromkeys([row.path for row in rows] + ([pool_path] if pool_path else [])):
            try:
                data = self.client.get("/access/permissions", path=path)
            except ProviderError:
                self.set("privileges", "unknown", "The token's effective privileges could not be read.")
                return
            if not isinstance(data, dict):
                self.set("privileges", "unknown", "The token's effective privileges could not be understood.")
                return
            held[path] = effective_privileges(data, path)
        if pool_path:
            held[target] = held[target] | held[pool_path]
        missing = [row for row in rows if row.privilege not in held[row.path]]
        if not missing:
            self.set("privileges", "passed", "The token holds every privilege the planned stages need.")
            return
        seen: list[str] = []
        for row in missing:
            where = f"{row.path} or {pool_path}" if pool_path and row.path == target else row.path
            text = f"{row.privilege} on {where} ({row.stage})"
            if text not in seen:
                seen.append(text)
        self.set("privileges", "failed", "The token lacks: " + "; ".join(seen) + ".")


def run_checks(
    client: ApiClient, plan: t.Mapping[str, t.Any], tls_verified: bool = True
) -> tuple[list[Check], dict[str, t.Any]]:
    """Run every check of a VM or container plan through ``client`` (GETs only); return the ordered checks and the capabilities."""
    family = ContainerPreflight if plan.get("guestType") == "container" else VmPreflight
    return family(client, plan, tls_verified).run()


def run_preflight(
    planned: t.Any,
    settings: ConnectionSettings,
    *,
    environ: t.Mapping[str, str],
    fail_on: str = "failed",
    client_factory: t.Callable[[ConnectionSettings], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """The preflight result for a ``PlannedEnvironment``; raises ``PreflightFailed`` per ``fail_on``."""
    checks, capabilities, scope, blockers, tls_verified = collect_checks(
        settings,
        fail_on=fail_on,
        client_factory=client_factory,
        blockers_of=lambda: creation_blockers(planned.plan, planned.mapping, environ),
        checks_of=lambda client, verified: run_checks(client, planned.plan, verified),
    )
    return preflight_result(
        {"plan_hash": planned.plan["planHash"]},
        checks,
        capabilities,
        scope=scope,
        blockers=blockers,
        tls_verified=tls_verified,
        fail_on=fail_on,
        undecidable={**UNDECIDABLE, **ADDRESS_UNDECIDABLE},
    )


def preflight_of_recorded(
    client: ApiClient,
    plan: t.Mapping[str, t.Any],
    mapping: t.Mapping[str, t.Any],
    *,
    environ: t.Mapping[str, str],
    provisioning_option: bool | None = None,
    fail_on: str = "failed",
) -> dict[str, t.Any]:
    """The preflight of a recorded operation's plan and mapping snapshots, through ``client`` (one that already proved
    verified TLS and the operation's provider: ``vmanyware_provision``'s); the same checks and result as ``run_preflight``,
    raising ``PreflightFailed`` per ``fail_on``."""
    if fail_on not in FAIL_ON_CHOICES:
        raise InputError("fail_on must be one of failed, unknown, never.", path="preflight_fail_on")
    blockers = creation_blockers(plan, mapping, environ, provisioning_option)
    checks, capabilities = run_checks(client, plan, True)
    return preflight_result(
        {"plan_hash": plan["planHash"]},
        checks,
        capabilities,
        scope=client.provider_scope_id,
        blockers=blockers,
        tls_verified=True,
        fail_on=fail_on,
        undecidable={**UNDECIDABLE, **ADDRESS_UNDECIDABLE},
    )
