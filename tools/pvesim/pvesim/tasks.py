# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""PVE worker tasks: UPIDs, asynchronous workers, status, logs and the task list."""

from __future__ import annotations

import os
import threading
import time
import typing as t
from dataclasses import dataclass, field

from .clock import Clock


class TaskFailed(Exception):
    """Raised by a worker body: the task ends with this exit status text."""


@dataclass
class Task:
    upid: str
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    user: str  # user@realm or user@realm!token, as in the UPID
    lines: list[str] = field(default_factory=list)
    status: str = "running"
    exitstatus: str | None = None
    endtime: int | None = None
    # real epoch seconds (float) of creation and of the switch to "stopped": the admin task list
    # (``GET /_pvesim/tasks``) gives them for latency measurements; PVE's own fields are integers
    created_real: float = 0.0
    ended_real: float | None = None
    warnings: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    def log(self, line: str) -> None:
        self.lines.append(line)

    def warn(self, line: str) -> None:
        self.warnings += 1
        self.lines.append("WARN: " + line)

    def status_dict(self) -> dict[str, t.Any]:
        user, _sep, token = self.user.partition("!")
        res: dict[str, t.Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.type,
            "id": self.id,
            "user": user,
            "status": self.status,
        }
        if token:
            res["tokenid"] = token
        if self.status == "stopped":
            res["exitstatus"] = self.exitstatus
        return res

    def list_dict(self) -> dict[str, t.Any]:
        user, _sep, token = self.user.partition("!")
        res: dict[str, t.Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.type,
            "id": self.id,
            "user": user,
        }
        if token:
            res["tokenid"] = token
        if self.status == "stopped":
            res["status"] = self.exitstatus
            res["endtime"] = self.endtime
        return res


def status_type(status: str | None) -> str:
    """``upid_normalize_status_type``."""
    if status is None or status == "RUNNING":
        return "unknown"
    if status == "OK":
        return "ok"
    if status.startswith("WARNINGS:"):
        return "warning"
    return "error" if status else "unknown"


class TaskManager:
    """Owns the tasks; each worker runs in its own daemon thread."""

    def __init__(self, node: str, clock: Clock) -> None:
        self.node = node
        self.clock = clock
        self.lock = threading.Lock()
        self.tasks: dict[str, Task] = {}
        self.order: list[str] = []
        self._pid = 100000 + (os.getpid() % 50000)
        self._pstart = int(time.monotonic() * 100) % (1 << 31)
        self.stop_event = threading.Event()

    def clear(self) -> None:
        with self.lock:
            self.tasks.clear()
            self.order.clear()

    def get(self, upid: str) -> Task | None:
        with self.lock:
            return self.tasks.get(upid)

    def start(
        self,
        ttype: str,
        tid: str,
        user: str,
        body: t.Callable[[Task], None],
        on_finish: t.Callable[[Task], None] | None = None,
        node: str | None = None,
    ) -> Task:
        """Create a task and run ``body(task)`` in a thread. ``body`` raises ``TaskFailed``/any
        exception to fail; ``task.exitstatus`` may be preset (fault injection)."""
        with self.lock:
            self._pid += 1
            self._pstart += 7
            now = int(time.time())
            node = node or self.node  # the node that runs the worker (a proxied request runs on its own node)
            upid = f"UPID:{node}:{self._pid:08X}:{self._pstart:08X}:{now:08X}:{ttype}:{tid}:{user}:"
            task = Task(upid, node, self._pid, self._pstart, now, ttype, tid, user, created_real=time.time())
            self.tasks[upid] = task
            self.order.append(upid)

        def run() -> None:
            error: str | None = None
            try:
                body(task)
            except TaskFailed as exc:
                error = str(exc)
            except Exception as exc:  # pylint: disable=broad-except
                error = str(exc) or exc.__class__.__name__
            if error is not None:
                error = error.rstrip("\n")
                task.log(f"TASK ERROR: {error}")
                status = error
            elif task.exitstatus and task.exitstatus != "OK":
                status = task.exitstatus
                task.log(f"TASK {status}" if status.startswith("WARNINGS") else f"TASK ERROR: {status}")
            elif task.warnings:
                status = f"WARNINGS: {task.warnings}"
                task.log(f"TASK {status}")
            else:
                status = "OK"
                task.log("TASK OK")
            if on_finish is not None:
                try:
                    on_finish(task)
                except Exception:  # pylint: disable=broad-except
                    pass
            with self.lock:
                task.exitstatus = status
                task.ended_real = time.time()
                task.endtime = int(task.ended_real)
                task.status = "stopped"
            task.done.set()

        threading.Thread(target=run, name=f"task-{ttype}-{tid}", daemon=True).start()
        return task

    def admin_list(self) -> list[dict[str, t.Any]]:
        """Every task, oldest first, with the real (float) creation and end times."""
        with self.lock:
            tasks = [self.tasks[u] for u in self.order]
            return [
                {
                    "upid": task.upid,
                    "type": task.type,
                    "id": task.id,
                    "status": task.status,
                    "exitstatus": task.exitstatus,
                    "created": task.created_real,
                    "ended": task.ended_real,
                }
                for task in tasks
            ]

    def list(self, params: dict[str, t.Any], visible: t.Callable[[Task], bool]) -> tuple[list[dict[str, t.Any]], int]:
        """``GET /nodes/{node}/tasks`` with PVE's filters; returns (entries, total)."""
        start = int(params.get("start") or 0)
        limit = int(params.get("limit") if params.get("limit") is not None else 50)
        userfilter = params.get("userfilter")
        typefilter = params.get("typefilter")
        errors = str(params.get("errors") or "0") in ("1", "True", "true")
        source = params.get("source") or "archive"
        since = params.get("since")
        until = params.get("until")
        vmid = params.get("vmid")
        statusfilter = {"ok": True, "warning": True, "error": True, "unknown": True}
        if params.get("statusfilter") is not None and not errors:
            statusfilter = {k: False for k in statusfilter}
            for f in str(params["statusfilter"]).replace(";", ",").split(","):
                if f.strip():
                    statusfilter[f.strip().lower()] = True
        elif errors:
            statusfilter["ok"] = False
        count = 0
        res: list[dict[str, t.Any]] = []
        with self.lock:
            tasks = [self.tasks[u] for u in self.order]

        def keep(task: Task, status: str | None) -> bool:
            nonlocal count, limit
            if userfilter and str(userfilter).lower() not in task.user.split("!")[0].lower():
                return False
            if not visible(task):
                return False
            if typefilter and task.type != typefilter:
                return False
            if vmid and task.id != str(vmid):
                return False
            if since is not None and task.starttime < int(since):
                return False
            if until is not None and task.starttime > int(until):
                return False
            if not statusfilter.get(status_type(status), False):
                return False
            count += 1
            if count <= start or limit <= 0:
                return False
            limit -= 1
            return True

        if source in ("active", "all"):
            for task in tasks:
                if task.status == "running" and keep(task, None):
                    entry = task.list_dict()
                    entry["status"] = "RUNNING"
                    res.append(entry)
        if source != "active":
            for task in reversed(tasks):
                if task.status == "stopped" and keep(task, task.exitstatus):
                    res.append(task.list_dict())
        return res, count
