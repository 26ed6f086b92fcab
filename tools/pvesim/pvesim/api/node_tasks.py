# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/nodes/{node}/tasks``: list, status, log, stop (pve-manager API2/Tasks.pm)."""

from __future__ import annotations

import re
import typing as t

from ..tasks import Task
from .core import ApiError, Call, Sim, perm_error, route


def _task_visible(sim: Sim, subject: str, task: Task) -> bool:
    if sim.has(subject, f"/nodes/{task.node}", ["Sys.Audit"]):
        return True
    if "!" in task.user:
        return subject in (task.user, task.user.split("!")[0])
    return subject == task.user


def _get_task(sim: Sim, call: Call, audit: bool = True) -> Task:
    sim.check_node(call)
    upid = str(call.params["upid"])
    if not re.fullmatch(
        r"UPID:[a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:(-?[0-9A-Fa-f]{8}):"
        r"[^:\s]+:[^:\s]*:[^:\s]+:",
        upid,
    ):
        raise ApiError(500, "unable to parse worker upid")
    task = sim.tasks.get(upid)
    if task is None or task.node != sim.call_node(call):  # each node keeps its own task log
        raise ApiError(
            500, f"unable to open file '/var/log/pve/tasks/{upid[-3:-1]}/{upid}' - No such file or directory"
        )
    if audit and not _task_visible(sim, call.subject, task):
        raise perm_error(f"/nodes/{task.node}, Sys.Audit")
    return task


@route("GET", "/nodes/{node}/tasks")
def task_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    node = sim.call_node(call)
    res, total = sim.tasks.list(call.params, lambda task: task.node == node and _task_visible(sim, call.subject, task))
    call.extra["total"] = total
    return res


@route("GET", "/nodes/{node}/tasks/{upid}")
def task_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    _get_task(sim, call)
    return [{"name": "log"}, {"name": "status"}]


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def task_status(sim: Sim, call: Call) -> dict[str, t.Any]:
    return _get_task(sim, call).status_dict()


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def task_log(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    task = _get_task(sim, call)
    if call.bool("download") and (call.params.get("start") is not None or call.params.get("limit") is not None):
        raise ApiError(500, "'download' cannot be used together with 'start' or 'limit' parameters")
    start = call.int("start", 0) or 0
    limit = call.int("limit", 50)
    limit = 50 if limit is None else limit
    lines = list(task.lines) or ["no content"]
    total = len(lines)
    res = [{"n": i + 1, "t": line} for i, line in enumerate(lines)][start : start + limit]
    call.extra["total"] = total
    return res


@route("DELETE", "/nodes/{node}/tasks/{upid}")
def task_stop(sim: Sim, call: Call) -> None:
    task = _get_task(sim, call, audit=False)
    if call.subject not in (task.user, task.user.split("!")[0]):
        sim.require(call.subject, f"/nodes/{task.node}", ["Sys.Modify"])
    return None
