# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The adoption hook of a stage: what GET-only reads prove about it when its journal was lost.

``_adopt`` (``vmanyware_operation`` ``state: adopt``) walks the plan's stages in order and asks each
stage's logic (built from the stage registry) for a ``Decision``: a stage that can judge itself from
reads mixes in ``AdoptionHook`` and overrides ``adopt``; any other stage runs again (``pending``).
``Observations`` are the reads of one adoption, shared by every hook and made at most once each; its
client sends GETs only (``_adopt.ReadOnlyClient``). The per-stage rules are in docs/operations.md
("Recovering a lost journal").

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import typing as t

from .._api.pveconfig import pending_keys, read_pending, read_status
from .._core.protocols import ApiClient
from .common import find_tasks
from .protocol import StageContext

UNCERTAIN_CODE = "outcome_uncertain"
NOT_JUDGED = "Adoption does not judge this stage; it runs again."


@dataclasses.dataclass
class Decision:
    """What reads prove about one stage: ``completed`` (evidence, upid), ``pending`` or ``uncertain`` (message)."""

    status: str
    reason: str
    evidence: dict[str, t.Any] = dataclasses.field(default_factory=dict)
    upid: str | None = None

    def observed(self) -> dict[str, t.Any]:
        """The entry ``adopted_operation_document`` takes."""
        entry: dict[str, t.Any] = {
            "status": self.status,
            "evidence": dict(self.evidence, adopted=True) if self.status == "completed" else {},
            "upid": self.upid,
        }
        if self.status == "uncertain":
            entry["failure"] = {"code": UNCERTAIN_CODE, "message": self.reason}
        return entry


class Observations:
    """The reads of one adoption (GET only, each made at most once)."""

    def __init__(self, document: dict[str, t.Any], client: ApiClient, config: dict[str, t.Any]) -> None:
        self.document = document
        self.client = client
        self.config = config
        self._cache: dict[t.Any, t.Any] = {}

    def context(self, kind: str) -> StageContext:
        """A context on the scratch document (no stage dispatched: task lookups are not bounded by a dispatch time)."""
        return StageContext(operation=self.document, client=self.client, kind=kind)

    def once(self, key: t.Any, read: t.Callable[[], t.Any]) -> t.Any:
        """``read()`` the first time ``key`` is asked for, its remembered result afterwards."""
        if key not in self._cache:
            self._cache[key] = read()
        return self._cache[key]

    @property
    def power(self) -> str:
        ctx = self.context("start")
        return t.cast(str, self.once("status", lambda: str(read_status(ctx.client, ctx.vm_path).get("status"))))

    @property
    def pending_keys(self) -> list[str]:
        ctx = self.context("resources")
        return t.cast("list[str]", self.once("pending", lambda: pending_keys(read_pending(ctx.client, ctx.vm_path))))

    def tasks(self, kind: str, task_type: str, task_vmid: int) -> list[dict[str, t.Any]]:
        """Our tasks (exactly our token) of ``task_type`` on ``task_vmid``, newest first."""
        return t.cast(
            "list[dict[str, t.Any]]",
            self.once(("tasks", task_type, task_vmid), lambda: find_tasks(self.context(kind), task_type, task_vmid)),
        )

    @property
    def start_evidenced(self) -> bool:
        """The VM runs, or a ``qmstart`` task of our token for it is listed."""
        return self.power == "running" or bool(self.tasks("start", "qmstart", self.context("start").vmid))


def single_ok(tasks: list[dict[str, t.Any]]) -> str | None:
    """The UPID of the one listed task when exactly one exists and it succeeded (optional evidence)."""
    return t.cast(str, tasks[0]["upid"]) if len(tasks) == 1 and tasks[0]["ok"] is True else None


class AdoptionHook:
    """Mixed into a stage's logic that judges itself from reads; the defaults are those of a stage that does not."""

    def adopt(self, obs: Observations) -> Decision:
        """The decision for this stage when every earlier stage is completed."""
        return Decision("pending", NOT_JUDGED)

    def adoption_note(self, obs: Observations) -> str:
        """Said after "Stages complete in order: ..." when an earlier stage is not completed (this stage is pending then)."""
        return ""


def adoption_hook(logic: t.Any) -> AdoptionHook:
    """``logic`` itself when it has the hook, else the defaults (the stage runs again)."""
    return logic if isinstance(logic, AdoptionHook) else AdoptionHook()
