# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Callback of the peer-suite harness (run.sh): one JSON line per task result in $PEER_TASKLOG (task, file:line, status,
the module's message), so every task of a target is counted, not only the recap's totals."""

from __future__ import annotations

import json
import os
import typing as t

from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tasklog"
    CALLBACK_NEEDS_ENABLED = False

    def _write(self, result: t.Any, status: str) -> None:
        msg = result._result.get("msg", "")  # pylint: disable=protected-access
        with open(os.environ["PEER_TASKLOG"], "a", encoding="utf-8") as handle:
            entry = {"task": result._task.get_name(), "path": result._task.get_path(), "status": status}  # pylint: disable=protected-access
            entry["msg"] = msg[:400] if isinstance(msg, str) else str(msg)[:400]
            handle.write(json.dumps(entry) + "\n")

    def v2_runner_on_ok(self, result: t.Any) -> None:
        self._write(result, "changed" if result._result.get("changed") else "ok")  # pylint: disable=protected-access

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        del ignore_errors
        self._write(result, "failed")

    def v2_runner_on_skipped(self, result: t.Any) -> None:
        self._write(result, "skipped")
