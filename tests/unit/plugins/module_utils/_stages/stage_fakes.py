# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the stage unit tests: recorded PVE replies, the fake client (``pve_fake``) and journal set-up (no simulator).

Import with ``from stage_fakes import ...`` (pytest puts this directory on ``sys.path``).
"""

from __future__ import annotations

import copy
import json
import sys
import typing as t
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pve_fake import FakeClient, assert_valid  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import map_http_error  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageContext  # noqa: E402

REPO = Path(__file__).resolve().parents[5]
FIXTURES = REPO / "tests" / "unit" / "fixtures"
PVE = json.loads((FIXTURES / "pve_vm.json").read_text(encoding="utf-8"))
_ERRORS = {
    case["name"]: case for case in json.loads((FIXTURES / "pve_errors.json").read_text(encoding="utf-8"))["cases"]
}
SCOPE = "pve:" + "c" * 64
VM = "/nodes/pve-test/qemu/201"
TEMPLATE = "/nodes/pve-test/qemu/9000"
__all__ = [
    "FakeClient",
    "assert_valid",
    "PVE",
    "SCOPE",
    "TEMPLATE",
    "VM",
    "complete",
    "context",
    "dispatch",
    "fixture",
    "new_operation",
    "planned",
    "pve_error",
]


def fixture(name: str) -> t.Any:
    return copy.deepcopy(PVE[name])


def pve_error(name: str, method: str = "GET", path: str = "/") -> Exception:
    """The typed error the client raises for a recorded PVE error response."""
    case = _ERRORS[name]
    return map_http_error(method, path, case["status"], case["reason"], case["body"])


def planned(disk_gib: int = 20) -> t.Any:
    definition = (
        (REPO / "examples/definition.yml").read_text(encoding="utf-8").replace("diskGiB: 20", "diskGiB: %d" % disk_gib)
    )
    return build_plan(catalog_path=REPO / "examples/catalog.yml", definition=definition, target_vmid=201)


def new_operation(store: JournalStore, disk_gib: int = 20) -> str:
    plan = planned(disk_gib)
    document, _created = store.create_operation(
        idempotency_key=None,
        provider_scope_id=SCOPE,
        definition=plan.definition,
        mapping=plan.mapping,
        plan=plan.plan,
        confirmation=expected_confirmation(plan.plan, SCOPE),
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=[step["kind"] for step in plan.plan["steps"]],
    )
    return t.cast(str, document["operationId"])


def complete(
    store: JournalStore, operation_id: str, kind: str, evidence: dict[str, t.Any], upid: str | None = None
) -> None:
    store.record_dispatch(operation_id, kind, {"method": "TEST"})
    store.record_submitted(operation_id, kind, upid)
    store.record_completed(operation_id, kind, evidence)


def dispatch(store: JournalStore, operation_id: str, kind: str) -> None:
    """Record a dispatch (as the runner does right before sending)."""
    store.record_dispatch(operation_id, kind, {"method": "TEST"})


def context(store: JournalStore, operation_id: str, kind: str, client: FakeClient) -> StageContext:
    return StageContext(operation=store.load(operation_id), client=client, kind=kind)
