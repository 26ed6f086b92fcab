# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""cloud-init 25.1 inside the guest: status.json stages, ``cloud-init status [--long] [--wait]``."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from .model import CLOUDINIT_STAGES, GuestBase, Outcome

_WAIT_POLL = 0.25  # cloud-init's ``status --wait`` sleeps this long between two reads of its status


class CloudinitStatus(GuestBase):
    """cloud-init's progress through its stages on the guest's uptime, and its status command."""

    def _datasource(self) -> str:
        return "DataSourceNoCloud [seed=/dev/sr0]"

    def _status_v1(self, now: float) -> dict[str, Any] | None:
        done = self.cloudinit_done_at
        if now < CLOUDINIT_STAGES[0][1] * done:
            return None
        v1: dict[str, Any] = {"datasource": None, "stage": None}
        for name, start_frac, end_frac in CLOUDINIT_STAGES:
            start, end = round(start_frac * done, 2), round(end_frac * done, 2)
            stage: dict[str, Any] = {"errors": [], "recoverable_errors": {}, "start": None, "finished": None}
            if now >= start:
                stage["start"] = start
                if now >= end:
                    stage["finished"] = end
                    if name == "modules-final":
                        if self.faults.cloudinit_error:
                            stage["errors"] = [self.faults.cloudinit_error_message]
                        if self.faults.cloudinit_recoverable_error:
                            stage["recoverable_errors"] = {
                                "WARNING": ["Running module package_update_upgrade_install failed"]
                            }
                else:
                    v1["stage"] = name
            if name == "init" and stage["finished"] is not None:
                v1["datasource"] = self._datasource()
            v1[name] = stage
        return v1

    def _ci_details(self, now: float) -> dict[str, Any]:
        v1 = self._status_v1(now)
        done = now >= self.cloudinit_done_at
        if v1 is None:
            running = "not started"
            v1 = {}
        else:
            running = "done" if done else "running"
        errors: list[str] = []
        recoverable: dict[str, list[str]] = {}
        latest = 0.0
        for key in sorted(v1):
            info = v1[key]
            if isinstance(info, dict):
                errors.extend(info.get("errors", []))
                for kind, msgs in info.get("recoverable_errors", {}).items():
                    recoverable.setdefault(kind, []).extend(msgs)
                latest = max(latest, info.get("start") or 0, info.get("finished") or 0)
        condition = "error" if errors else ("degraded" if recoverable else "healthy")
        if condition == "error":
            status, extended = "error", f"error - {running}"
        elif condition == "degraded" and running in ("done", "running"):
            status, extended = running, f"degraded {running}"
        else:
            status, extended = running, running
        if v1.get("datasource"):
            detail = str(v1["datasource"])
        elif v1.get("stage"):
            detail = f"Running in stage: {v1['stage']}"
        else:
            detail = "Cloud-init enabled by systemd cloud-init-generator"
        last_update = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(latest)) if latest else ""
        exitcode = 1 if condition == "error" else (2 if condition == "degraded" else 0)
        return {
            "status": status,
            "extended_status": extended,
            "boot_status_code": "enabled-by-generator",
            "detail": detail,
            "errors": errors,
            "recoverable_errors": recoverable,
            "last_update": last_update,
            "running": running,
            "exitcode": exitcode,
        }

    @staticmethod
    def _ci_text(details: Mapping[str, Any], long: bool) -> str:
        out = f"status: {details['status']}\n"
        if not long:
            return out
        errors = "".join(f"\n\t- {e}" for e in details["errors"]) if details["errors"] else " []"
        if details["recoverable_errors"]:
            parts = [
                f"{k}:\n\t- " + "\n\t- ".join(m.replace("\n", " ") for m in v)
                for k, v in details["recoverable_errors"].items()
            ]
            recoverable = "\n" + "\n".join(parts)
        else:
            recoverable = " {}"
        last = f"last_update: {details['last_update']}\n" if details["last_update"] else ""
        return (
            out + f"extended_status: {details['extended_status']}\nboot_status_code: {details['boot_status_code']}\n"
            f"{last}detail: {details['detail']}\nerrors:{errors}\nrecoverable_errors:{recoverable}\n"
        )

    def _cmd_cloud_init(self, argv: list[str], env: dict[str, str], stdin: str | None, now: float) -> Outcome:
        args = argv[1:]
        if not args or args[0] != "status":
            return Outcome(
                2,
                "",
                "usage: /usr/bin/cloud-init [-h] [--version] [--debug] [--force] [--all-stages] {status,...} ...\n",
            )
        long = wait = False
        i = 1
        while i < len(args):
            arg = args[i]
            if arg in ("-l", "--long"):
                long = True
            elif arg in ("-w", "--wait"):
                wait = True
            elif arg in ("-lw", "-wl"):
                long = wait = True
            elif arg == "--format" and i + 1 < len(args) and args[i + 1] == "tabular":
                i += 1
            elif arg == "--format=tabular":
                pass
            else:
                return Outcome(
                    2,
                    "",
                    f"usage: /usr/bin/cloud-init status [-h] [--format {{json,tabular,yaml}}] [-l] [-w]\n"
                    f"/usr/bin/cloud-init status: error: unrecognized arguments: {arg}\n",
                )
            i += 1
        if wait:
            return self._wait(now, long)
        details = self._ci_details(now)
        return Outcome(details["exitcode"], self._ci_text(details, long))

    def _wait(self, start: float, long: bool) -> Outcome:
        """``status --wait``: cloud-init's loop (cloudinit/cmd/status.py ``handle_status_args``), on the guest's uptime.

        It reads the status at once; while "not started"/"running" it prints a dot, reads again, sleeps 0.25 s and checks
        that last read, so the j-th dot's read comes at ``start + (j - 1) * 0.25`` and the command ends 0.25 s after the
        first read that is neither. Then a newline (only with ``--wait``) and the status text, exit 0/1/2 as without it.
        An already finished cloud-init answers like a plain ``status``; otherwise the command keeps running (``waits``)
        and its end is found at each exec-status from the guest's state then.
        """
        if start >= self.cloudinit_done_at:
            details = self._ci_details(start)
            return Outcome(details["exitcode"], "\n" + self._ci_text(details, long))

        def ended(now: float) -> Outcome | None:
            dots = 1 + max(0, math.ceil((self.cloudinit_done_at - start) / _WAIT_POLL - 1e-9))
            last_read = start + (dots - 1) * _WAIT_POLL
            duration = dots * _WAIT_POLL + self.timing.exec_default
            if now < start + duration:
                return None
            details = self._ci_details(last_read)
            return Outcome(details["exitcode"], "." * dots + "\n" + self._ci_text(details, long), duration=duration)

        return Outcome(0, waits=ended)
