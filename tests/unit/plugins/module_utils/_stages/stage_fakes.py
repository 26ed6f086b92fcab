# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for the stage unit tests: recorded PVE replies, a scripted client and journal set-up (no simulator).

Import with ``from stage_fakes import ...`` (pytest puts this directory on ``sys.path``).
"""

from __future__ import annotations

import copy
import json
import types
import typing as t
from pathlib import Path

from pvesim.schema import Schema

from ansible_collections.vmanyware.proxmox.plugins.module_utils._client import map_http_error
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import expected_confirmation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import StageContext

REPO = Path(__file__).resolve().parents[5]
FIXTURES = REPO / "tests" / "unit" / "fixtures"
PVE = json.loads((FIXTURES / "pve_vm.json").read_text(encoding="utf-8"))
_ERRORS = {case["name"]: case for case in json.loads((FIXTURES / "pve_errors.json").read_text(encoding="utf-8"))["cases"]}
SCOPE = "pve:" + "c" * 64
VM = "/nodes/pve-test/qemu/201"
TEMPLATE = "/nodes/pve-test/qemu/9000"
_SCHEMA: list[Schema] = []


def schema() -> Schema:
    if not _SCHEMA:
        _SCHEMA.append(Schema.load())
    return _SCHEMA[0]


def fixture(name: str) -> t.Any:
    return copy.deepcopy(PVE[name])


def pve_error(name: str, method: str = "GET", path: str = "/") -> Exception:
    """The typed error the client raises for a recorded PVE error response."""
    case = _ERRORS[name]
    return map_http_error(method, path, case["status"], case["reason"], case["body"])


class FakeClient:
    """GETs answered from ``routes`` (path -> data, exception or callable(params)); mutations from ``replies``.

    Every request (GET and mutation) is recorded in ``log`` as (method, path, params) and must validate
    against the official schema.
    """

    def __init__(self, routes: dict[str, t.Any], replies: list[t.Any] | None = None, user: str = "vmanyware@pve", token: str | None = "full"):
        self.routes = routes
        self.replies = list(replies or [])
        self.log: list[tuple[str, str, dict[str, t.Any]]] = []
        self.settings = types.SimpleNamespace(user=user, token_name=token)

    def _check(self, method: str, path: str, params: t.Mapping[str, t.Any]) -> None:
        wire = {k: (1 if v is True else 0 if v is False else v) for k, v in params.items()}
        errors = schema().validate(method, path, wire)
        assert errors == [], (method, path, [str(e) for e in errors])

    def get(self, path: str, /, **params: t.Any) -> t.Any:
        self.log.append(("GET", path, dict(params)))
        self._check("GET", path, params)
        if path not in self.routes:
            raise AssertionError("unexpected GET " + path)
        value = self.routes[path]
        if callable(value) and not isinstance(value, type):
            value = value(params)
        if isinstance(value, BaseException):
            raise value
        return copy.deepcopy(value)

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        if method == "GET":
            return {"data": self.get(path, **dict(params or {}))}
        self.log.append((method, path, dict(params or {})))
        self._check(method, path, dict(params or {}))
        reply = self.replies.pop(0)
        if callable(reply):
            reply = reply()
        if isinstance(reply, BaseException):
            raise reply
        return {"data": reply}

    def mutations(self) -> list[tuple[str, str, dict[str, t.Any]]]:
        return [entry for entry in self.log if entry[0] != "GET"]


def planned(disk_gib: int = 20) -> t.Any:
    definition = (REPO / "examples/definition.yml").read_text(encoding="utf-8").replace("diskGiB: 20", "diskGiB: %d" % disk_gib)
    return build_plan(catalog_path=REPO / "examples/catalog.yml", definition=definition, target_vmid=201)


def new_operation(store: JournalStore, disk_gib: int = 20) -> str:
    plan = planned(disk_gib)
    document, _created = store.create_operation(
        idempotency_key=None, provider_scope_id=SCOPE, definition=plan.definition, mapping=plan.mapping, plan=plan.plan,
        confirmation=expected_confirmation(plan.plan, SCOPE), target_node="pve-test", target_vmid=201,
        stage_kinds=[step["kind"] for step in plan.plan["steps"]])
    return t.cast(str, document["operationId"])


def complete(store: JournalStore, operation_id: str, kind: str, evidence: dict[str, t.Any], upid: str | None = None) -> None:
    store.record_dispatch(operation_id, kind, {"method": "TEST"})
    store.record_submitted(operation_id, kind, upid)
    store.record_completed(operation_id, kind, evidence)


def dispatch(store: JournalStore, operation_id: str, kind: str) -> None:
    """Record a dispatch (as the runner does right before sending)."""
    store.record_dispatch(operation_id, kind, {"method": "TEST"})


def context(store: JournalStore, operation_id: str, kind: str, client: FakeClient) -> StageContext:
    return StageContext(operation=store.load(operation_id), client=client, kind=kind)
