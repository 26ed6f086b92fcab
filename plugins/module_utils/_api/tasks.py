# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""UPID parsing and task polling.

A PVE task id looks like ``UPID:node:pid:pstart:starttime:type:id:user:`` (pid, pstart and
starttime in hex). ``wait_task`` polls ``GET /nodes/{node}/tasks/{upid}/status`` until the task
stops or a wall-clock deadline passes: first after 0.25 s (no PVE task is done the moment it is
accepted), then at 0.5 s, 1 s, ...: each pause as long as the wait so far (the time polled doubles, so
a task's end is seen at most as late as it had run), capped at 0.5 s during the task's first minute
and at 1 s after (``poll_cap``).
Outcomes are distinct: ``ok``/``warnings`` (success), ``failed`` (with a sanitized log tail),
``timeout`` (still running at the deadline) and ``unobservable`` (the status could not be read).
``poll_once`` reads the status once, without waiting.
"""

from __future__ import annotations

import dataclasses
import re
import time
import typing as t

from .._core.errors import ProviderError, TaskError
from .._core.protocols import ApiClient
from .._core.redaction import redact_text

LOG_TAIL_LINES = 20
LOG_LINE_MAX = 240
FIRST_INTERVAL = 0.25
MAX_INTERVAL = 1.0
# The tasks a provisioning run waits for (clone, resize, start, snapshot, a guest's cloud-init) mostly end within a
# minute, and each one's end is on the run's critical path: noticed within half a second then. A longer task (a big
# copy, a package install) is polled once a second, half the requests, its end noticed within a second.
EARLY_MAX_INTERVAL = 0.5
EARLY_SECONDS = 60.0
MAX_CONSECUTIVE_POLL_ERRORS = 3
# Errors that can heal between polls; anything else makes the task unobservable at once.
_TRANSIENT = frozenset({"transport_lost", "reply_lost", "server_error", "response_too_large", "unexpected_response"})
_UPID = re.compile(
    r"^UPID:(?P<node>[A-Za-z0-9][A-Za-z0-9.-]*):(?P<pid>[0-9A-Fa-f]{1,16}):(?P<pstart>[0-9A-Fa-f]{1,16}):"
    r"(?P<starttime>[0-9A-Fa-f]{1,16}):(?P<type>[^:\s]+):(?P<id>[^:\s]*):(?P<user>[^:\s]+@[^:\s]+):"
)
_WARNINGS = re.compile(r"^WARNINGS: (\d+)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

SUCCESS_STATUSES = frozenset({"ok", "warnings"})


@dataclasses.dataclass(frozen=True)
class Upid:
    """A parsed task id; ``raw`` is the original string (not secret: it names the user, not the token secret)."""

    raw: str
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str


@dataclasses.dataclass(frozen=True)
class TaskOutcome:
    """Result of observing a task. ``status``: ok | warnings | failed | timeout | unobservable | running."""

    upid: str
    status: str
    exitstatus: str | None = None
    warnings: int = 0
    log_tail: tuple[str, ...] = ()

    @property
    def succeeded(self) -> bool:
        return self.status in SUCCESS_STATUSES

    @property
    def error_code(self) -> str | None:
        return {"failed": "task_failed", "timeout": "task_timeout", "unobservable": "task_unobservable"}.get(
            self.status
        )

    def to_result(self) -> dict[str, t.Any]:
        return {
            "upid": self.upid,
            "status": self.status,
            "exitstatus": self.exitstatus,
            "warnings": self.warnings,
            "log_tail": list(self.log_tail),
        }

    def raise_for_outcome(self) -> TaskOutcome:
        """Return self on success; raise ``TaskError`` (task_failed/timeout/unobservable) otherwise."""
        code = self.error_code
        if code is None:
            return self
        messages = {
            "task_failed": "A Proxmox task ended with an error.",
            "task_timeout": "A Proxmox task did not finish before the deadline.",
            "task_unobservable": "The task status could not be polled.",
        }
        raise TaskError(messages[code], code=code, details=self.to_result())


def parse_upid(value: t.Any) -> Upid:
    """Parse a UPID; anything malformed is ``unexpected_response`` (the value is not echoed)."""
    match = _UPID.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ProviderError("Proxmox returned a malformed task id (UPID).", code="unexpected_response")
    return Upid(
        raw=value,
        node=match.group("node"),
        pid=int(match.group("pid"), 16),
        pstart=int(match.group("pstart"), 16),
        starttime=int(match.group("starttime"), 16),
        type=match.group("type"),
        id=match.group("id"),
        user=match.group("user"),
    )


def sanitize_log_line(line: t.Any, max_length: int = LOG_LINE_MAX) -> str:
    """One line of Proxmox text as a result may show it: control characters stripped, secret-looking values redacted
    (``_redaction.redact_text``: the one list of secret-bearing keys) and the length capped at ``max_length``.

    The text is cut to a few times the cap before the redaction (a huge line costs no more than a long one); a value
    cut there is still redacted when its key is kept, and the cap comes after the redaction, so no part of a secret
    is shown.
    """
    text = redact_text(_CONTROL.sub("", str(line)[: max_length * 4]))
    return text if len(text) <= max_length else text[: max_length - 3] + "..."


def _status_path(upid: Upid, suffix: str) -> str:
    return f"/nodes/{upid.node}/tasks/{upid.raw}/{suffix}"


def read_log_tail(client: ApiClient, upid: Upid, lines: int = LOG_TAIL_LINES) -> tuple[str, ...]:
    """The last ``lines`` task log lines, sanitized; empty when the log cannot be read."""
    try:
        head = client.request("GET", _status_path(upid, "log"), {"start": 0, "limit": lines})
        entries = head.get("data") or []
        total = head.get("total")
        if isinstance(total, int) and total > lines:
            entries = (
                client.request("GET", _status_path(upid, "log"), {"start": total - lines, "limit": lines}).get("data")
                or []
            )
    except ProviderError:
        return ()
    texts = [e.get("t", "") for e in entries if isinstance(e, dict)]
    return tuple(sanitize_log_line(x) for x in texts[-lines:])


def _classify(upid: Upid, data: t.Any, client: ApiClient) -> TaskOutcome:
    if not isinstance(data, dict) or data.get("status") not in ("running", "stopped"):
        raise ProviderError("Proxmox answered the task status with an unexpected body.", code="unexpected_response")
    if data["status"] == "running":
        return TaskOutcome(upid=upid.raw, status="running")
    exitstatus = data.get("exitstatus")
    exitstatus = sanitize_log_line(exitstatus) if exitstatus is not None else None
    if exitstatus == "OK":
        return TaskOutcome(upid=upid.raw, status="ok", exitstatus=exitstatus)
    warn = _WARNINGS.match(exitstatus or "")
    if warn:
        return TaskOutcome(upid=upid.raw, status="warnings", exitstatus=exitstatus, warnings=int(warn.group(1)))
    return TaskOutcome(upid=upid.raw, status="failed", exitstatus=exitstatus, log_tail=read_log_tail(client, upid))


def poll_cap(age: float) -> float:
    """The longest pause between two reads of something that has been running ``age`` seconds."""
    return EARLY_MAX_INTERVAL if age < EARLY_SECONDS else MAX_INTERVAL


def next_pause(waited: float, age: float) -> float:
    """The pause before the next read of a task or guest command waited for ``waited`` seconds so far and running ``age``
    seconds: as long as the wait so far (at least ``FIRST_INTERVAL``), at most ``poll_cap(age)``. An end is so noticed
    at most as late as the time already waited, and within half a second in the first minute."""
    return min(max(FIRST_INTERVAL, waited), poll_cap(age))


def poll_once(client: ApiClient, upid: str | Upid) -> TaskOutcome:
    """One status GET: ``running``, a final outcome, or ``unobservable`` if the status cannot be read."""
    parsed = upid if isinstance(upid, Upid) else parse_upid(upid)
    try:
        data = client.get(_status_path(parsed, "status"))
    except ProviderError:
        return TaskOutcome(upid=parsed.raw, status="unobservable")
    try:
        return _classify(parsed, data, client)
    except ProviderError:
        return TaskOutcome(upid=parsed.raw, status="unobservable")


def wait_task(
    client: ApiClient,
    upid: str | Upid,
    *,
    timeout: float,
    clock: t.Callable[[], float] = time.monotonic,
    sleep: t.Callable[[float], None] = time.sleep,
    max_poll_errors: int = MAX_CONSECUTIVE_POLL_ERRORS,
    wall: t.Callable[[], float] = time.time,
) -> TaskOutcome:
    """Poll until the task stops, the deadline passes (``timeout``) or polling keeps failing (``unobservable``).

    The task's age (for ``poll_cap``) counts from its UPID's start time, so a task waited for again in a later run
    (a resumed operation, the next round of a wait budget) keeps the pace its age calls for."""
    parsed = upid if isinstance(upid, Upid) else parse_upid(upid)
    started = clock()
    deadline = started + timeout
    errors = 0
    sleep(min(FIRST_INTERVAL, max(0.0, deadline - clock())))
    while True:
        try:
            outcome = _classify(parsed, client.get(_status_path(parsed, "status")), client)
            errors = 0
        except ProviderError as err:
            errors += 1
            if err.code not in _TRANSIENT or errors >= max_poll_errors:
                return TaskOutcome(upid=parsed.raw, status="unobservable")
            outcome = None
        if outcome is not None and outcome.status != "running":
            return outcome
        remaining = deadline - clock()
        if remaining <= 0:
            return TaskOutcome(upid=parsed.raw, status="timeout")
        # as long as the wait so far: a 0.3 s task (a resize, a start) is seen at 0.5 s, not at 0.75 s
        interval = next_pause(clock() - started, wall() - parsed.starttime)
        sleep(min(interval, remaining))
