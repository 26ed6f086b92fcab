# SPDX-License-Identifier: GPL-3.0-or-later
"""What the automatic VMID tests share: ``reserve``/``release`` in process against the simulator."""

from __future__ import annotations

import typing as t
from pathlib import Path

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.vmid import release, reserve

REPO = Path(__file__).resolve().parents[2]
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


class Reserver:
    """``reserve``/``release`` in process with the simulator's full token and one journal."""

    def __init__(self, pvesim: t.Any, tmp_path: Path) -> None:
        conn = pvesim.connection
        self.pvesim = pvesim
        self.journal = tmp_path / "journal"
        # module options of the simulator's full token, usable by the stage modules as well
        self.params: dict[str, t.Any] = {
            "api_host": "127.0.0.1",
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
            "validate_certs": True,
            "api_timeout": 10,
            "journal_dir": str(self.journal),
            "lock_wait": 0.0,
        }
        self.settings = connection_settings(self.params)
        self.scope = provider_scope_id(self.settings, certificate_fingerprint(self.settings))
        self.store = open_store(str(self.journal))

    def reserve(self, owner: str, **options: t.Any) -> dict[str, t.Any]:
        with ProxmoxClient(self.settings) as client:
            return reserve(self.store, client, owner=owner, **options)

    def release(self, owner: str, **options: t.Any) -> dict[str, t.Any]:
        return release(self.store, self.scope, owner=owner, **options)

    def create_operation(self, vmid: int) -> dict[str, t.Any]:
        planned = build_plan(
            catalog_path=REPO / "examples/catalog.yml",
            definition_path=REPO / "examples/definition.yml",
            target_vmid=vmid,
        )
        return create_operation(
            self.store,
            planned=planned,
            provider_scope_id=self.scope,
            confirmation=expected_confirmation(planned.plan, self.scope),
            idempotency_key=None,
            environ=ON,
        )

    def leases(self) -> list[str]:
        leases = self.journal / "leases"
        return sorted(path.name for path in leases.iterdir()) if leases.exists() else []
