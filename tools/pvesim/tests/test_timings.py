# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The configurable time model (``--timings FILE``, ``GET/PUT /_pvesim/timings``) and the admin
task list with real end times (``GET /_pvesim/tasks``)."""

from __future__ import annotations

import json
import tempfile
import time

import pytest
import requests

from pvesim.testing import PvesimAdmin, start_server, stop_server

from .conftest import Api

N = "/nodes/pve-test"


def test_put_timings_changes_task_durations_until_reset(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.set_speed(10)
    before = pvesim.timings()
    assert before["tasks"]["qmclone_full"] == 8.0 and before["guest"]["agent_up_after"] == 8.0
    after = pvesim.set_timings(tasks={"qmclone_full": 5.0, "qmconfig": 0}, guest={"agent_up_after": 1.0})
    assert after["tasks"]["qmclone_full"] == 5.0 and after["tasks"]["qmconfig"] == 0.0
    assert after["guest"]["agent_up_after"] == 1.0 and after["guest"]["dhcp_after_agent"] == 2.0
    assert pvesim.timings() == after

    upid = api.data(api.post(f"{N}/qemu/9000/clone", newid=301, full=1, storage="local-lvm"))
    status = api.wait(upid)
    assert status["exitstatus"] == "OK"
    tasks = {task["upid"]: task for task in pvesim.tasks()}
    task = tasks[upid]
    assert task["type"] == "qmclone" and task["status"] == "stopped" and task["exitstatus"] == "OK"
    # 5 simulated seconds at speed 10: 0.5 s real (scheduling slack allowed upwards only)
    assert 0.45 <= task["ended"] - task["created"] < 3.0, task

    # the guest timing default reaches a guest started afterwards: at speed 1 the agent is up 0.5 s
    # after boot (the default, 8 s, would miss the 4 s deadline)
    pvesim.set_speed(1)
    pvesim.set_timings(tasks={"qmstart": 0}, guest={"agent_up_after": 0.5})
    api.run("POST", f"{N}/qemu/301/status/start")
    deadline = time.monotonic() + 4
    while api.post(f"{N}/qemu/301/agent/ping").status_code != 200:
        assert time.monotonic() < deadline, "agent did not come up with agent_up_after=0.5"
        time.sleep(0.05)

    pvesim.reset()
    assert pvesim.timings() == before


def test_put_timings_validates_everything_first(pvesim: PvesimAdmin) -> None:
    before = pvesim.timings()
    for body in (
        {"tasks": {"qmclone_full": 1, "nope": 2}},
        {"guest": {"agent_never": True}},
        {"tasks": {"resize": -1}},
        {"tasks": {"resize": "2"}},
        {"other": {}},
    ):
        with pytest.raises(RuntimeError, match="HTTP 400"):
            pvesim._call("PUT", "/timings", body)  # pylint: disable=protected-access
    assert pvesim.timings() == before


def test_timings_file_at_start_survives_reset() -> None:
    with tempfile.TemporaryDirectory(prefix="pvesim-timings-") as tmp:
        path = f"{tmp}/timings.json"
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(
                {
                    "tasks": {"qmclone_full": 20, "qmconfig": 0, "resize": 2, "qmstart": 3, "qmsnapshot": 2},
                    "guest": {"agent_up_after": 8, "dhcp_after_agent": 2, "cloudinit_done_after_boot": 15},
                },
                fh,
            )
        proc, conn = start_server(f"{tmp}/state", speed=50, extra=["--timings", path])
        try:
            admin = PvesimAdmin(conn)
            got = admin.timings()
            assert (
                got["tasks"]["qmclone_full"] == 20.0
                and got["tasks"]["qmconfig"] == 0.0
                and got["tasks"]["qmstart"] == 3.0
            )
            assert got["guest"]["cloudinit_done_after_boot"] == 15.0
            admin.set_timings(tasks={"qmclone_full": 1})
            admin.reset()
            assert admin.timings() == got
            resp = requests.get(conn["admin_url"] + "/tasks", verify=conn["ca_file"], timeout=10)
            assert resp.status_code == 403
        finally:
            stop_server(proc)
