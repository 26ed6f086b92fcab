# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Guest commands (docs/stages.md, "Guest commands"): a command runs through the QEMU guest agent inside a fixed
exec-marker wrapper, so reads can tell whether a command whose exec reply was lost ever started; an exec whose
outcome is unknown is never issued again.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .._api.http_errors import agent_reason, proves_not_applied
from .._api.tasks import next_pause
from .._core.errors import ProviderError
from .._core.protocols import ApiClient, OperationStore
from .outcomes import (
    DEFAULT_RESOLVE_WAIT,
    GuestCommand,
    GuestOutcome,
    StageError,
    StageUncertain,
    wall_clock,
)
from .protocol import StageContext, StageSettings

# -- the guest-side exec marker (docs/stages.md, "Guest commands") ----------------------------------------------
# Every guest command runs as ``/bin/sh -c EXEC_WRAPPER vmanyware <marker> <argv...>`` (POSIX sh; the argv are positional
# parameters, never interpolated). The wrapper creates ``<marker>.started`` exclusively (noclobber: one run per marker,
# ever), then refuses to run when ``<marker>.superseded`` exists (written by a resolver before it sends the command again),
# else runs the command; it ends by writing the exit code (or ``superseded``) to ``<marker>.exit`` (through a rename).
# A resolver reads ``.started``; when absent it writes ``.superseded`` and reads ``.started`` again: still absent proves
# the command never started and never will (a queued exec finds the superseded file after creating ``.started``).
EXEC_MARKER_PREFIX = "/var/lib/vmanyware-exec-"


EXEC_WRAPPER_NAME = "vmanyware"


EXEC_WRAPPER = (
    "m=$1; shift\n"
    '(set -C; : >"$m.started") 2>/dev/null || exit 125\n'
    'if [ -e "$m.superseded" ]; then c=superseded; else "$@"; c=$?; fi\n'
    'printf \'%s\\n\' "$c" >"$m.exit.tmp" && mv -f "$m.exit.tmp" "$m.exit"\n'
    'if [ "$c" = superseded ]; then exit 125; fi\n'
    'exit "$c"\n'
)


def exec_marker_path(operation_id: str, slot: str, attempt: int) -> str:
    """The marker of one attempt of one guest command (``attempt``: unique per operation and slot, e.g. ms of its issue)."""
    return "%s%s-%s-%d" % (EXEC_MARKER_PREFIX, operation_id, slot, attempt)


def wrap_guest_argv(marker: str, argv: t.Sequence[str]) -> list[str]:
    """The argument array sent to ``agent/exec``: the fixed wrapper, the marker, then ``argv`` as positional parameters."""
    return ["/bin/sh", "-c", EXEC_WRAPPER, EXEC_WRAPPER_NAME, marker, *argv]


def marker_of_argv(argv: t.Any) -> str | None:
    """The marker of a wrapped argument array (``wrap_guest_argv``); None for any other."""
    if (
        isinstance(argv, (list, tuple))
        and len(argv) >= 5
        and list(argv[:4]) == ["/bin/sh", "-c", EXEC_WRAPPER, EXEC_WRAPPER_NAME]
        and isinstance(argv[4], str)
        and argv[4].startswith(EXEC_MARKER_PREFIX)
    ):
        return argv[4]
    return None


class _MarkerUnreadable(Exception):
    """A marker file could not be read or written (agent down, a reply lost): the marker proves nothing."""


def _read_guest_file(ctx: StageContext, path: str) -> str | None:
    """``GET {vm}/agent/file-read``: the file's text; None when it does not exist; ``_MarkerUnreadable`` otherwise."""
    try:
        data = ctx.client.get(ctx.vm_path + "/agent/file-read", file=path)
    except ProviderError as err:
        if err.code == "not_found" or agent_reason(err) == "file_not_found":
            return None
        raise _MarkerUnreadable() from None
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, str):
        raise _MarkerUnreadable()
    return content


def _supersede(ctx: StageContext, path: str) -> None:
    """``POST {vm}/agent/file-write`` of ``<marker>.superseded``; repeatable, so a failed write is checked by reading it back."""
    try:
        ctx.client.post(ctx.vm_path + "/agent/file-write", file=path + ".superseded", content="superseded\n")
        return
    except ProviderError:
        pass
    if _read_guest_file(ctx, path + ".superseded") is None:
        raise _MarkerUnreadable()


def exec_marker_state(ctx: StageContext, path: str) -> tuple[str, int | None]:
    """Where the guest command of marker ``path`` stands, from its files in the guest (reads, and one supersede write).

    ``("never", None)``: it never started and never will (``.superseded`` written, ``.started`` still absent; or the
    wrapper found it superseded); ``("running", None)``: started, no exit code yet; ``("exited", code)``;
    ``("unreadable", None)``: the files could not be read, the outcome stays unknown.
    """
    try:
        if _read_guest_file(ctx, path + ".started") is None:
            _supersede(ctx, path)
            if _read_guest_file(ctx, path + ".started") is None:
                return "never", None
        text = _read_guest_file(ctx, path + ".exit")
    except _MarkerUnreadable:
        return "unreadable", None
    if text is None:
        return "running", None
    value = text.strip()
    if value == "superseded":
        return "never", None
    if value.isdigit():
        return "exited", int(value)
    return "unreadable", None


def _exec_lost(ctx: StageContext, command: GuestCommand, marker: str | None = None) -> StageUncertain:
    """The stage's uncertainty about an exec that may have started in the guest: it is never issued again."""
    request: dict[str, t.Any] = {
        "method": "POST",
        "path": ctx.vm_path + "/agent/exec",
        "params": {"command": list(command.argv)},
        "probe": command.name,
    }
    if marker is not None:
        request["marker"] = marker
    return StageUncertain(
        "reply_lost",
        "The reply to the guest-agent exec of %s was lost and its marker in the guest could not be read, "
        "so whether it ran is unknown; it is not repeated. Check the guest (the files %s.*), then re-run, or abandon "
        "the operation." % (command.name, marker or "vmanyware-exec"),
        request,
    )


def _exec_status(ctx: StageContext, pid: int) -> dict[str, t.Any] | None:
    """One ``GET {vm}/agent/exec-status``: None while running, else ``{exitcode, out, err}``.

    An exited status can be read once (QGA forgets it); ``ProviderError`` with ``agent=unknown_pid``
    tells the caller it was consumed (or never existed).
    """
    data = ctx.client.get(ctx.vm_path + "/agent/exec-status", pid=pid)
    if not isinstance(data, dict) or "exited" not in data:
        raise StageError("The guest agent answered exec-status with an unexpected body.", code="unexpected_response")
    if not data["exited"]:
        return None
    exitcode = data.get("exitcode")
    return {
        "exitcode": exitcode if isinstance(exitcode, int) else -1,
        "out": str(data.get("out-data") or ""),
        "err": str(data.get("err-data") or ""),
    }


class GuestExecution:
    """The runner's guest commands (``StageContext.guest_exec``), mixed into ``StageRunner``.

    They journal through the runner (its store, evidence and gate checks); the attributes and methods below are the
    runner's, declared here so each side stays typed.
    """

    client: ApiClient
    store: OperationStore
    settings: StageSettings

    def _refresh(self, ctx: StageContext, document: dict[str, t.Any]) -> None:
        raise NotImplementedError

    def _record_evidence(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> None:
        raise NotImplementedError

    def _require_write_allowed(self, ctx: StageContext) -> None:
        raise NotImplementedError

    def _stop_if_cancelled(self) -> None:
        raise NotImplementedError

    def guest_exec(
        self, ctx: StageContext, command: GuestCommand, deadline: float, started: float | None = None
    ) -> GuestOutcome:
        """The one way a stage runs a command in the guest (``StageContext.guest_exec``).

        Resume the PID journaled in ``command.slot`` by GET; else (the write checks first for a ``write`` command) journal
        the started marker (with the path of its marker in the guest), exec the wrapped command, journal the PID; then poll
        ``exec-status`` until the command exits, ``deadline`` (epoch) passes, or this run's wait budget (from ``started``)
        is spent. A marker without a PID (an ambiguous exec reply, a crash between exec and PID) is resolved through the
        guest-side marker files (``exec_marker_state``): never started -> sent afresh; started -> its exit code is awaited
        through the files; unreadable -> ``StageUncertain`` (the exec is never issued again).
        """
        if self.settings.check_mode:
            raise StageError("A guest command was requested in check mode.", code="internal_error")
        budget = self.settings.wait_budget
        budget_end = None if budget is None else (wall_clock() if started is None else started) + float(budget)
        since = wall_clock()  # when a marker lacks ``issuedAt`` (journaled by an older version)
        sent = False
        while True:
            marker = self._journaled_marker(ctx, command)
            if marker is None:
                now = wall_clock()
                if sent and now >= deadline:  # sent afresh (never started) only within the deadline and the wait budget
                    return GuestOutcome("timeout", None)
                if sent and budget_end is not None and now >= budget_end:
                    return GuestOutcome("running", None)
                sent = True
                marker = self._start_exec(ctx, command)
                self._pause(
                    marker, since, deadline, budget_end
                )  # it has hardly started: read its status after the first pause
            if marker.get("pid") is None:
                followed = self._follow_marker(ctx, command, marker, since, deadline, budget_end)
                if followed is None:
                    continue  # never started (or a repeatable command that exited): run it afresh
                return followed
            pid = t.cast(int, marker["pid"])
            try:
                status = _exec_status(ctx, pid)
            except ProviderError as err:
                if agent_reason(err) != "unknown_pid":
                    raise
                # Exited, its status consumed by a run that did not record it (or QGA forgot the PID).
                if command.repeatable:
                    self._record_evidence(ctx, {command.slot: None})
                    continue
                exitcode = None
                if isinstance(marker.get("file"), str):  # the wrapper recorded the exit code in the guest
                    state, code = exec_marker_state(ctx, marker["file"])
                    exitcode = code if state == "exited" else None
                self._record_evidence(ctx, {command.slot: dict(marker, exitcode=exitcode)})
                return GuestOutcome("exited", pid, exitcode)
            if status is not None:
                self._record_evidence(
                    ctx, {command.slot: None if command.repeatable else dict(marker, exitcode=status["exitcode"])}
                )
                return GuestOutcome("exited", pid, status["exitcode"], status["out"], status["err"])
            now = wall_clock()
            if now >= deadline:
                return GuestOutcome("timeout", pid)
            if budget_end is not None and now >= budget_end:
                return GuestOutcome("running", pid)
            self._pause(marker, since, deadline, budget_end)

    def _follow_marker(
        self,
        ctx: StageContext,
        command: GuestCommand,
        marker: dict[str, t.Any],
        since: float,
        deadline: float,
        budget_end: float | None,
    ) -> GuestOutcome | None:
        """A command whose PID is unknown, followed through its marker files in the guest (``exec_marker_state``).

        None: it never started (its journaled marker is cleared, so the caller sends it afresh), or a repeatable command
        exited (cleared too: run again for its output). Otherwise its outcome (``pid`` None; no output for a command
        followed this way). Unreadable files raise ``StageUncertain``.
        """
        path = t.cast(str, marker["file"])
        unreadable_since: float | None = None
        while True:
            state, code = exec_marker_state(ctx, path)
            if state == "unreadable":
                # The agent may be back in a moment (a busy or restarting agent): read again for a while, never exec again.
                now = wall_clock()
                unreadable_since = now if unreadable_since is None else unreadable_since
                if (
                    now >= deadline
                    or (budget_end is not None and now >= budget_end)
                    or now - unreadable_since >= DEFAULT_RESOLVE_WAIT
                ):
                    raise _exec_lost(ctx, command, path)
                self._pause(marker, since, deadline, budget_end)
                continue
            unreadable_since = None
            if state == "never" and not command.repeatable:
                # Only after ``.started`` was seen, in the race the wrapper settles by finding ``.superseded``: it did not
                # run. Never sent afresh from here (a non-repeatable command is the stage's request): the caller's reads decide.
                self._record_evidence(ctx, {command.slot: dict(marker, exitcode=None)})
                return GuestOutcome("exited", None)
            if state == "never" or (state == "exited" and command.repeatable):
                self._record_evidence(ctx, {command.slot: None})
                return None
            if state == "exited":
                self._record_evidence(ctx, {command.slot: dict(marker, exitcode=code)})
                return GuestOutcome("exited", None, code)
            now = wall_clock()
            if now >= deadline:
                return GuestOutcome("timeout", None)
            if budget_end is not None and now >= budget_end:
                return GuestOutcome("running", None)
            self._pause(marker, since, deadline, budget_end)

    def _pause(self, marker: t.Mapping[str, t.Any], since: float, deadline: float, budget_end: float | None) -> None:
        """Sleep before the next ``exec-status`` read, not past the deadline nor this run's wait budget (epoch).

        The schedule is the task polls' (``_tasks.next_pause``), counted from the command's journaled ``issuedAt``: the
        first read 0.25 s after the exec, then as long as the command has run, at most 0.5 s apart in its first minute and
        1 s after. A resumed PID (read at once) so goes on at the pace its running time gives, not from the start again."""
        now = wall_clock()
        issued = marker.get("issuedAt")
        ran = max(
            0.0, now - (float(issued) if isinstance(issued, (int, float)) and not isinstance(issued, bool) else since)
        )
        interval = next_pause(ran, ran)
        until = deadline if budget_end is None else min(deadline, budget_end)
        self.settings.sleep(min(interval, max(0.0, until - now)))

    def _journaled_marker(self, ctx: StageContext, command: GuestCommand) -> dict[str, t.Any] | None:
        """The marker of ``command`` with its PID, or with its guest-side marker file when the PID is unknown; None when none
        is running. A started exec with neither (journaled by an older version, without the wrapper) is uncertain."""
        marker = ctx.evidence().get(command.slot)
        if not isinstance(marker, dict) or marker.get("probe") != command.name or "exitcode" in marker:
            return None
        pid = marker.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            return dict(marker)
        if marker.get("submissionStarted"):
            if isinstance(marker.get("file"), str):
                return dict(marker, pid=None)
            raise _exec_lost(ctx, command)
        return None

    def _start_exec(self, ctx: StageContext, command: GuestCommand) -> dict[str, t.Any]:
        """``POST {vm}/agent/exec`` of the wrapped command, between the started marker and the PID (both journaled).

        The marker names its file in the guest (unique to the operation, the slot and this attempt) before the exec is sent.
        A reply that proves a pre-check refusal (``proves_not_applied``) clears it; any other failure, or a reply without a
        PID, returns it without a PID: the caller resolves it through the guest-side files."""
        if command.write:
            self._require_write_allowed(ctx)
        self._stop_if_cancelled()
        issued = round(wall_clock(), 3)
        path = exec_marker_path(ctx.operation["operationId"], command.slot, int(issued * 1000))
        marker: dict[str, t.Any] = {
            "probe": command.name,
            "pid": None,
            "submissionStarted": True,
            "issuedAt": issued,
            "file": path,
        }
        self._record_evidence(ctx, {command.slot: marker})
        try:
            data = self.client.post(ctx.vm_path + "/agent/exec", command=wrap_guest_argv(path, command.argv))
        except ProviderError as err:
            if not proves_not_applied(err):
                return marker  # it may run in the guest (``guest-exec failed - got timeout``): the marker decides
            self._record_evidence(ctx, {command.slot: None})  # a pre-check refusal: nothing started in the guest
            if agent_reason(err) == "exec_disabled":
                raise StageError(
                    "The guest agent refuses guest-exec; enable it in the guest's qemu-guest-agent configuration.",
                    code="guest_exec_unavailable",
                    details={"stage": ctx.kind},
                ) from None
            raise
        pid = data.get("pid") if isinstance(data, dict) else None
        if not isinstance(pid, int) or isinstance(pid, bool):
            return marker
        marker["pid"] = pid
        self._record_evidence(ctx, {command.slot: marker})
        return marker
