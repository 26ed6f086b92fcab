# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared setup for the guest stage tests against the simulator (imported by basename)."""

from __future__ import annotations

import copy
import dataclasses
import os
import typing as t
from pathlib import Path

import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageLogic, StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage

REPO = Path(__file__).resolve().parents[2]
VMID = 201
NODE = "pve-test"
VM = "/nodes/%s/qemu/%d" % (NODE, VMID)
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
EARLY: dict[str, t.Callable[[], StageLogic]] = {"clone": CloneStage, "resources": ResourcesStage, "disk": DiskStage}


def settings_for(conn: dict[str, t.Any], token: str = "full") -> t.Any:
    return build_settings(
        host=conn["host"],
        port=conn["port"],
        token_id=conn["tokens"][token]["id"],
        token_secret=conn["tokens"][token]["secret"],
        ca_path=conn["ca_file"],
        timeout=10,
    )


def playbook_env(pvesim: t.Any, journal: Path, **extra: str) -> dict[str, str]:
    """The environment of a real ``ansible-playbook`` run against the simulator: the full token by ``PROXMOX_*``
    variables (CA-verified), the journal directory, provisioning enabled, no colour; ``extra`` added."""
    conn = pvesim.connection
    return dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        VMANYWARE_JOURNAL_DIR=str(journal),
        VMANYWARE_PROVISIONING_ENABLED="true",
        ANSIBLE_NOCOLOR="1",
        **extra,
    )


def catalog_text(attested: bool = True) -> str:
    data = yaml.safe_load((REPO / "examples/catalog.yml").read_text(encoding="utf-8"))
    if not attested:
        del data["images"][0]["imageDefaultUser"]
    return yaml.safe_dump(data)


def definition_text(packages: list[dict[str, str]] | None = None, snapshot: bool = False) -> str:
    data = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    data["packages"] = [] if packages is None else packages
    data["snapshotAfterProvisioning"] = snapshot
    return yaml.safe_dump(data)


@dataclasses.dataclass
class Env:
    store: JournalStore
    client: ProxmoxClient
    operation_id: str
    kinds: list[str]

    def run(self, logic: StageLogic, **settings: t.Any) -> dict[str, t.Any]:
        settings.setdefault("environ", ON)
        return StageRunner(self.store, self.client, logic, StageSettings(**settings)).run(self.operation_id)

    def stage(self, kind: str) -> dict[str, t.Any]:
        return self.store.stage(self.store.load(self.operation_id), kind)

    @property
    def document(self) -> dict[str, t.Any]:
        return self.store.load(self.operation_id)


def create(
    tmp_path: Path,
    conn: dict[str, t.Any],
    *,
    attested: bool = True,
    packages: list[dict[str, str]] | None = None,
    snapshot: bool = False,
) -> Env:
    """An operation for VM 201 (created in the journal directly, so a non-attested mapping is possible)."""
    planned = build_plan(
        catalog=catalog_text(attested), definition=definition_text(packages, snapshot), target_vmid=VMID
    )
    return record(tmp_path, conn, planned)


def record(tmp_path: Path, conn: dict[str, t.Any], planned: t.Any, vmid: int = VMID, node: str = NODE) -> Env:
    """An operation of ``planned`` recorded in ``tmp_path``'s journal directly (no gates, no confirmation check)."""
    client = ProxmoxClient(settings_for(conn))
    client.get("/version")
    store = JournalStore(str(tmp_path / "journal"))
    kinds = [step["kind"] for step in planned.plan["steps"]]
    document, _created = store.create_operation(
        idempotency_key="test-%s" % planned.plan_hash,
        provider_scope_id=client.provider_scope_id,
        definition=planned.definition,
        mapping=planned.mapping,
        plan=planned.plan,
        confirmation={"confirmed": True},
        target_node=node,
        target_vmid=vmid,
        stage_kinds=kinds,
    )
    return Env(store, client, document["operationId"], kinds)


def run_clone_stages(env: Env) -> None:
    """The real clone, resources and (when planned) disk stages: what the guest stages start from."""
    for kind in env.kinds[: env.kinds.index("cloudinit")]:
        result = env.run(EARLY[kind]())
        assert result["done"], result


def prepared(tmp_path: Path, conn: dict[str, t.Any], **kwargs: t.Any) -> Env:
    env = create(tmp_path, conn, **kwargs)
    run_clone_stages(env)
    return env


def mutations(pvesim: t.Any) -> list[tuple[str, str]]:
    return [(e["method"], e["path"]) for e in pvesim.requests() if e["method"] != "GET"]


def deep(value: t.Any) -> t.Any:
    return copy.deepcopy(value)


def operation_before_profiles(source: dict[str, t.Any], journal: Path) -> str:
    """Another operation on an already provisioned guest with ``source``'s plan (its profiles and steps), in a journal
    of its own: every stage before the profiles completed as the first operation left them, with its readiness
    handoff (address, guest user), so a test runs the profile stages again."""
    plan = copy.deepcopy(source["plan"])
    store = JournalStore(str(journal))
    scope = source["providerScopeId"]
    document, _created = store.create_operation(
        idempotency_key=None,
        provider_scope_id=scope,
        definition=source["definition"],
        mapping=source["mapping"],
        plan=plan,
        confirmation=expected_confirmation(plan, scope),
        target_node=source["target"]["node"],
        target_vmid=source["target"]["vmid"],
        stage_kinds=[step.get("name") or step["kind"] for step in plan["steps"]],
    )
    operation_id = t.cast(str, document["operationId"])
    for item in document["stages"]:
        if item["kind"].startswith("profile:"):
            break
        store.record_dispatch(operation_id, item["kind"], {"method": "TEST"})
        store.record_completed(operation_id, item["kind"], {})
    store.set_handoff(operation_id, source["handoff"])
    return operation_id
