# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What every stage module shares: its options, and running one stage with the journal and client.

A stage module is ``ENTRY = stage_entry(lambda params: SomeStageLogic())`` plus the standard
``main()``; everything else (option handling, provider scope binding, the protocol, facts, safe
failures) happens here.
"""

from __future__ import annotations

import contextlib
import copy
import os
import typing as t

from ansible.module_utils.basic import env_fallback
from .._api.admission import DEFAULT_STORAGE_CONCURRENCY, ENV_STORAGE_CONCURRENCY, check_concurrency
from .._api.argspec import connection_argument_spec, connection_settings
from .._core.cancel import Cancellation
from .._api.client import ProxmoxClient
from .._core.errors import InputError, VmanywareError
from .._journal import JournalStore, resolve_journal_dir, validate_document
from .module import ModuleEntry
from .._formats.catalog import parse_catalog
from .._operation.create import PREVIEW_FACT  # noqa: F401  # pylint: disable=unused-import  # for plugin_utils (runtime only)
from .._operation.create import PROVISIONING_GATE, SNAPSHOTS_GATE, bind_scope, public_view, require_verified_tls
from .._core.protocols import OperationStore
from .._stages.runner import OfflineClient, StageRunner
from .._stages.protocol import StageLogic, StageSettings


def journal_argument_spec() -> dict[str, dict[str, t.Any]]:
    """``journal_dir`` (doc fragment ``vmanyware.proxmox.stage.journal``)."""
    return {"journal_dir": {"type": "path"}}


def stage_argument_spec() -> dict[str, dict[str, t.Any]]:
    """Options of every stage module (doc fragment ``vmanyware.proxmox.stage``) plus connection and journal."""
    spec: dict[str, dict[str, t.Any]] = {
        "operation_id": {"type": "str"},
        "preview_operation": {"type": "dict"},
        "wait_budget": {"type": "float"},
        "timeout": {"type": "float"},
        "lock_wait": {"type": "float", "default": 60.0},
        "set_operation_fact": {"type": "bool", "default": False},
        "storage_concurrency": {
            "type": "int",
            "default": DEFAULT_STORAGE_CONCURRENCY,
            "fallback": (env_fallback, [ENV_STORAGE_CONCURRENCY]),
        },
        "provisioning_enabled": {"type": "bool"},
        "catalog_path": {"type": "path"},
        "catalog": {"type": "raw"},  # YAML text or a mapping, as for the plan inputs
    }
    spec.update(journal_argument_spec())
    spec.update(connection_argument_spec())
    return spec


def open_store(journal_dir: str | None) -> JournalStore:
    return JournalStore(resolve_journal_dir(journal_dir, os.environ))


class PreviewStore:
    """Check mode without a recorded operation: one in-memory document, read-only.

    The stage runner never writes in check mode; a write here would be a bug, so it fails loudly.
    """

    def __init__(self, document: t.Mapping[str, t.Any]) -> None:
        try:
            validate_document(document)
        except Exception:  # pylint: disable=broad-exception-caught  # any rule violation: not a preview document
            raise InputError(
                "preview_operation is not an operation document from vmanyware_operation in check mode.",
                path="preview_operation",
                details={"rule": "operation_document"},
            ) from None
        self.document = copy.deepcopy(dict(document))

    def load(self, operation_id: str) -> dict[str, t.Any]:
        return copy.deepcopy(self.document)

    # Everything else of ``OperationStore`` writes (or, for admission control, takes a slot): refused.
    @property
    def journal_dir(self) -> str:
        _refuse_write()

    def record_dispatch(self, operation_id: str, kind: str, request_summary: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        _refuse_write()

    def record_not_sent(self, operation_id: str, kind: str) -> dict[str, t.Any]:
        _refuse_write()

    def record_submitted(
        self, operation_id: str, kind: str, upid: str | None, evidence: t.Mapping[str, t.Any] | None = None
    ) -> dict[str, t.Any]:
        _refuse_write()

    def record_evidence(self, operation_id: str, kind: str, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        _refuse_write()

    def record_completed(
        self, operation_id: str, kind: str, evidence: t.Mapping[str, t.Any] | None = None
    ) -> dict[str, t.Any]:
        _refuse_write()

    def record_failed(self, operation_id: str, kind: str, code: str, message: str) -> dict[str, t.Any]:
        _refuse_write()

    def record_uncertain(self, operation_id: str, kind: str, code: str, message: str) -> dict[str, t.Any]:
        _refuse_write()

    def set_handoff(self, operation_id: str, handoff: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        _refuse_write()

    def update_operation_status(
        self, operation_id: str, status: str, *, expected_status: str | None = None
    ) -> dict[str, t.Any]:
        _refuse_write()


def _refuse_write() -> t.NoReturn:
    raise VmanywareError("A preview tried to write to the journal.", code="internal_error")


def _store_and_operation(params: t.Mapping[str, t.Any], check_mode: bool) -> tuple[OperationStore, str]:
    """The journal and the operation id; in check mode, the preview document when it is the operation named (or none is)."""
    operation_id = params.get("operation_id")
    preview = params.get("preview_operation")
    if preview and check_mode:
        store = PreviewStore(preview)
        if not operation_id or operation_id == store.document["operationId"]:
            return store, store.document["operationId"]
    if operation_id:
        return open_store(params.get("journal_dir")), operation_id
    raise InputError(
        "operation_id is required (preview_operation is accepted in check mode only).",
        path="operation_id",
        details={"rule": "required"},
    )


def stage_settings(params: t.Mapping[str, t.Any], *, check_mode: bool, diff: bool) -> StageSettings:
    """The runner's settings from the stage options (the catalog parsed when given); the cancel check watches the
    controller the action plugin named (``_cancel``)."""
    catalog = None
    if params.get("catalog") or params.get("catalog_path"):
        catalog = parse_catalog(
            text=params.get("catalog") or None, path=None if params.get("catalog") else params["catalog_path"]
        )
    return StageSettings(
        check_mode=check_mode,
        diff=diff,
        wait_budget=params.get("wait_budget"),
        timeout=params.get("timeout"),
        lock_wait=params.get("lock_wait") or 0.0,
        storage_concurrency=check_concurrency(params.get("storage_concurrency", DEFAULT_STORAGE_CONCURRENCY)),
        gate_options={
            PROVISIONING_GATE: params.get("provisioning_enabled"),
            SNAPSHOTS_GATE: params.get("snapshots_enabled"),
        },
        catalog=catalog,
        cancel_check=Cancellation.from_environment(),
    )


@contextlib.contextmanager
def cancel_scope(settings: StageSettings) -> t.Iterator[None]:
    """While the run sends: SIGTERM and SIGINT only mark it cancelled, so it stops at the next safe point (``_cancel``)."""
    if isinstance(settings.cancel_check, Cancellation):
        with settings.cancel_check.signals():
            yield
    else:
        yield


def with_stage_client(
    params: t.Mapping[str, t.Any],
    check_mode: bool,
    run: t.Callable[[t.Any, str, t.Any], dict[str, t.Any]],
    client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """``run(store, operation_id, client)`` once the provider is proven to be the operation's; the client closed after.

    A compact result (no evidence), facts only with ``set_operation_fact``.
    """
    store, operation_id = _store_and_operation(params, check_mode)
    operation = store.load(operation_id)
    connection = connection_settings(params)
    require_verified_tls(connection)
    connection = bind_scope(
        connection, operation
    )  # every connection of the client: the certificate the scope was computed from
    client = client_factory(connection)
    try:
        result = run(store, operation_id, client)
    finally:
        client.close()
    if params.get("set_operation_fact"):
        result["ansible_facts"] = {"vmanyware_operation": public_view(store.load(operation_id))}
    return result


def run_stage(
    params: t.Mapping[str, t.Any],
    logic: StageLogic,
    *,
    check_mode: bool,
    diff: bool,
    client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient,
) -> dict[str, t.Any]:
    """Run ``logic`` for ``params['operation_id']``; a compact result (no evidence), facts only with ``set_operation_fact``.

    The full record, evidence included, is the journal's (``vmanyware_operation_info`` with ``evidence: true``).
    """
    settings = stage_settings(params, check_mode=check_mode, diff=diff)
    if params.get("write_check"):
        # a write outside Proxmox comes next (the role's apt over SSH): only the gates and the catalog, nothing sent or recorded
        store, operation_id = _store_and_operation(params, check_mode)
        checked = StageRunner(store, OfflineClient(), logic, settings).check_write_allowed(operation_id)
        checked["stage"] = {key: value for key, value in checked["stage"].items() if key != "evidence"}
        return checked

    def run(store: t.Any, operation_id: str, client: t.Any) -> dict[str, t.Any]:
        with cancel_scope(settings):
            result = StageRunner(store, client, logic, settings).run(operation_id)
        result["stage"] = {key: value for key, value in result["stage"].items() if key != "evidence"}
        return result

    return with_stage_client(params, check_mode, run, client_factory)


def stage_entry(
    logic: t.Callable[[t.Mapping[str, t.Any]], StageLogic], extra_options: dict[str, dict[str, t.Any]] | None = None
) -> ModuleEntry:
    """A stage module: the shared stage options (plus ``extra_options``) and ``run_stage`` of ``logic(params)``."""

    def argument_spec() -> dict[str, dict[str, t.Any]]:
        spec = stage_argument_spec()
        spec.update(copy.deepcopy(extra_options or {}))
        return spec

    def action(params: t.Mapping[str, t.Any], check_mode: bool, diff: bool) -> dict[str, t.Any]:
        return run_stage(params, logic(params), check_mode=check_mode, diff=diff)

    return ModuleEntry(
        argument_spec=argument_spec,
        action=action,
        libraries=("requests",),
        mutually_exclusive=(("catalog_path", "catalog"),),
    )
