# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The interfaces the logic depends on: the Proxmox API client, the operation store, a stage record, placement's journal.

The logic takes these Protocols rather than the concrete classes, so the collection's client
(``_client.ProxmoxClient``), adoption's read-only wrapper, check mode's in-memory store and the unit
tests' fake client are all checked against one contract by mypy (``make typecheck``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t


class ClientIdentity(t.Protocol):
    """Whose requests a client sends (``_client.ConnectionSettings``): PVE writes it into the UPIDs of their tasks."""

    @property
    def user(self) -> str | None:
        """``user@realm``."""

    @property
    def token_name(self) -> str | None:
        """The API token's name (never its secret); None for a ticket login."""


class ApiClient(t.Protocol):
    """What the logic may use of a Proxmox API client.

    ``get``/``post``/``put``/``delete`` return the response's ``data`` (``path`` is positional-only, so
    ``path=`` can be an API parameter); ``request`` returns the whole JSON envelope (``data``, ``total``...).
    """

    @property
    def settings(self) -> ClientIdentity:
        """The connection values; the logic reads only whose tasks are ours."""

    @property
    def provider_scope_id(self) -> str | None:
        """The provider scope id of the endpoint reached (None before the first reply observed its certificate)."""

    def get(self, path: str, /, **params: t.Any) -> t.Any: ...

    def post(self, path: str, /, **params: t.Any) -> t.Any: ...

    def put(self, path: str, /, **params: t.Any) -> t.Any: ...

    def delete(self, path: str, /, **params: t.Any) -> t.Any: ...

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]: ...


class ApiVerbs:
    """``get``/``post``/``put``/``delete`` as the ``data`` of ``request``: one implementation for every ``ApiClient``."""

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        raise NotImplementedError

    def get(self, path: str, /, **params: t.Any) -> t.Any:
        return self.request("GET", path, params).get("data")

    def post(self, path: str, /, **params: t.Any) -> t.Any:
        return self.request("POST", path, params).get("data")

    def put(self, path: str, /, **params: t.Any) -> t.Any:
        return self.request("PUT", path, params).get("data")

    def delete(self, path: str, /, **params: t.Any) -> t.Any:
        return self.request("DELETE", path, params).get("data")


class StageFailure(t.TypedDict):
    """Why a stage is ``failed`` or ``uncertain``: a fixed error code and its message."""

    code: str
    message: str


class StageRecord(t.TypedDict):
    """One entry of an operation document's ``stages`` (docs/journal.md; validated by ``_journal``)."""

    position: int  # 1-based, the plan step's number
    kind: str
    status: str  # one of _journal.STAGE_STATUSES
    submissionStarted: bool
    attempts: int
    dispatchedAt: str | None
    completedAt: str | None
    upid: str | None
    request: dict[str, t.Any] | None  # the redacted summary of what was (or may have been) sent
    evidence: dict[str, t.Any]
    failure: StageFailure | None


class OperationStore(t.Protocol):
    """What the stage protocol may use of the journal (``_journal.JournalStore``; check mode: ``PreviewStore``).

    Every ``record_*`` call is one atomic, validated transition and returns the new document.
    """

    @property
    def journal_dir(self) -> str: ...

    def load(self, operation_id: str) -> dict[str, t.Any]: ...

    def record_dispatch(
        self, operation_id: str, kind: str, request_summary: t.Mapping[str, t.Any]
    ) -> dict[str, t.Any]: ...

    def record_not_sent(self, operation_id: str, kind: str) -> dict[str, t.Any]: ...

    def record_submitted(
        self, operation_id: str, kind: str, upid: str | None, evidence: t.Mapping[str, t.Any] | None = None
    ) -> dict[str, t.Any]: ...

    def record_evidence(self, operation_id: str, kind: str, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any]: ...

    def record_completed(
        self, operation_id: str, kind: str, evidence: t.Mapping[str, t.Any] | None = None
    ) -> dict[str, t.Any]: ...

    def record_failed(self, operation_id: str, kind: str, code: str, message: str) -> dict[str, t.Any]: ...

    def record_uncertain(self, operation_id: str, kind: str, code: str, message: str) -> dict[str, t.Any]: ...

    def set_handoff(self, operation_id: str, handoff: t.Mapping[str, t.Any]) -> dict[str, t.Any]: ...

    def update_operation_status(
        self, operation_id: str, status: str, *, expected_status: str | None = None
    ) -> dict[str, t.Any]: ...


class PlacementJournal(t.Protocol):
    """What placement may use of the journal (``_journal/placement_leases.py``, ``PlacementLedger``): the pending
    operations and the placement leases, read and written under the journal lock (``locked``), so concurrent reviews
    serialize and each counts the leases of those before it. ``pending`` may also be called before the lock, to read
    the whole journal there: the call under the lock may then read only what changed."""

    def locked(self) -> t.ContextManager[None]: ...

    def pending(self, scope: str) -> list[dict[str, t.Any]]: ...

    def leases(self, scope: str, *, exclude_vmid: int | None = None) -> list[dict[str, t.Any]]: ...

    def hold(self, scope: str, vmid: int, choice: t.Mapping[str, t.Any]) -> dict[str, t.Any]: ...

    def drop(self, scope: str, vmid: int) -> bool: ...
