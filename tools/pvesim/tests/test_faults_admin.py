# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fault injection actions and the admin API contract."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import typing as t
import pytest
import requests

from pvesim.testing import PvesimAdmin, start_server, stop_server

from .conftest import Api

N = "/nodes/pve-test"


def test_http_error_nth_occurrence(api: Api, pvesim: PvesimAdmin) -> None:
    fid = pvesim.add_fault(
        method="GET", path=r"^/version$", action="http_error", occurrence=2, status=596, message="Connection timed out"
    )
    assert fid.startswith("fault-")
    assert api.get("/version").status_code == 200
    resp = api.get("/version")
    assert resp.status_code == 596 and resp.json()["message"] == "Connection timed out\n"
    assert api.get("/version").status_code == 200
    pvesim.add_fault(method="GET", path="/version", action="http_error", status=503)
    assert api.get("/version").status_code == 503
    assert api.get("/version").status_code == 503
    pvesim.clear_faults()
    assert api.get("/version").status_code == 200


def test_drop_reply_commits_mutation(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="drop_reply", occurrence=1)
    with pytest.raises(requests.exceptions.ConnectionError):
        api.post(f"{N}/qemu/9000/clone", newid=201, full=1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        resp = api.get(f"{N}/qemu/201/config")
        if resp.status_code == 200 and "lock" not in resp.json()["data"]:
            break
        time.sleep(0.05)
    assert resp.status_code == 200  # the clone happened although the client saw a reset
    assert pvesim.requests(method="POST")[-1]["status"] == "dropped"


def test_drop_request_changes_nothing(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="drop_request", occurrence=1)
    with pytest.raises(requests.exceptions.ConnectionError):
        api.post(f"{N}/qemu/9000/clone", newid=201, full=1)
    time.sleep(0.3)
    assert api.get(f"{N}/qemu/201/config").status_code != 200  # nothing was cloned
    assert [t for t in pvesim.tasks() if t.get("type") == "qmclone"] == []
    assert pvesim.requests(method="POST")[-1]["status"] == "request_dropped"
    assert api.post(f"{N}/qemu/9000/clone", newid=201, full=1).status_code == 200  # only the first matching request


def test_delay(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="GET", path="/version", action="delay", seconds=0.3)
    start = time.monotonic()
    assert api.get("/version").status_code == 200
    assert time.monotonic() - start >= 0.3


def test_task_error_and_warnings(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(
        method="POST", path="/clone$", action="task_error", occurrence=1, message="clone failed: simulated"
    )
    st = api.run("POST", f"{N}/qemu/9000/clone", newid=201, full=1)
    assert st["exitstatus"] == "clone failed: simulated"
    assert api.get(f"{N}/qemu/201/config").status_code == 500
    pvesim.add_fault(method="POST", path="/clone$", action="task_warnings", count=2)
    st = api.run("POST", f"{N}/qemu/9000/clone", newid=202, full=1)
    assert st["exitstatus"] == "WARNINGS: 2"
    log = api.data(api.get(f"{N}/tasks/{st['upid']}/log"))
    assert log[-1]["t"] == "TASK WARNINGS: 2"
    assert len(api.data(api.get(f"{N}/tasks", statusfilter="warning"))) == 1


def test_lock_timeout_vm_locked_checksum(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path="/clone$", action="lock_timeout", occurrence=1)
    resp = api.post(f"{N}/qemu/9000/clone", newid=201, full=1)
    assert resp.status_code == 500
    assert resp.json()["message"] == "can't lock file '/var/lock/qemu-server/lock-201.conf' - got timeout\n"
    assert api.run("POST", f"{N}/qemu/9000/clone", newid=201, full=1)["exitstatus"] == "OK"
    pvesim.add_fault(method="PUT", path="/config$", action="vm_locked", occurrence=1, lock="backup")
    resp = api.put(f"{N}/qemu/201/config", description="x")
    assert resp.status_code == 500 and resp.json()["message"] == "VM is locked (backup)\n"
    pvesim.add_fault(method="PUT", path="/config$", action="checksum_mismatch", occurrence=2)
    assert api.put(f"{N}/qemu/201/config", description="y").status_code == 200
    resp = api.put(f"{N}/qemu/201/config", description="z")
    assert resp.status_code == 500 and resp.json()["message"] == "checksum mismatch (file change by other user?)\n"


def test_disk_full_fault(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path="/clone$", action="disk_full")
    st = api.run("POST", f"{N}/qemu/9000/clone", newid=201, full=1)
    assert "insufficient free space" in st["exitstatus"]


def test_exec_disabled_fault(api: Api, pvesim: PvesimAdmin) -> None:
    api.run("POST", f"{N}/qemu/9000/clone", newid=201, full=1)
    api.run("POST", f"{N}/qemu/201/status/start")
    pvesim.set_guest(201, agent_up_after=0.0)
    time.sleep(0.05)
    pvesim.add_fault(method="POST", path="/agent/exec$", action="exec_disabled")
    resp = api.req("POST", f"{N}/qemu/201/agent/exec", data={"command": ["/bin/true"]})
    assert resp.status_code == 500 and "disabled" in resp.json()["message"]


def test_guest_knob_dhcp_never(api: Api, pvesim: PvesimAdmin) -> None:
    api.run("POST", f"{N}/qemu/9000/clone", newid=201, full=1)
    pvesim.set_guest(201, dhcp_never=True, agent_up_after=0.0)
    api.run("POST", f"{N}/qemu/201/status/start")
    time.sleep(0.3)
    ifaces = api.data(api.get(f"{N}/qemu/201/agent/network-get-interfaces"))["result"]
    addrs = [
        a["ip-address"]
        for i in ifaces
        if i["name"] != "lo"
        for a in i.get("ip-addresses", [])
        if a["ip-address-type"] == "ipv4"
    ]
    assert addrs == []
    with pytest.raises(RuntimeError):
        pvesim.set_guest(201, no_such_knob=True)


def test_cloudinit_error_fault(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="GET", path="/cloudinit/dump", action="cloudinit_error", occurrence=1)
    assert api.get(f"{N}/qemu/9000/cloudinit/dump", type="user").status_code == 500
    assert api.get(f"{N}/qemu/9000/cloudinit/dump", type="user").status_code == 200


def test_admin_requires_token(pvesim: PvesimAdmin) -> None:
    conn = pvesim.connection
    url = f"https://{conn['host']}:{conn['port']}/_pvesim/requests"
    assert requests.get(url, verify=conn["ca_file"], timeout=10).status_code == 403
    assert requests.get(url, headers={"X-Pvesim-Admin": "nope"}, verify=conn["ca_file"], timeout=10).status_code == 403


def test_admin_state_mutations(api: Api, pvesim: PvesimAdmin) -> None:
    res = pvesim.set_vm_config(9000, set={"tags": "gold"}, delete=["vga"])
    assert res["config"]["tags"] == "gold" and "vga" not in res["config"]
    conf = api.data(api.get(f"{N}/qemu/9000/config"))
    assert conf["tags"] == "gold" and conf["digest"] == res["digest"]
    pvesim.set_storage("local-lvm", enabled=False)
    assert api.get(f"{N}/storage/local-lvm/status").json()["message"] == "storage 'local-lvm' is disabled\n"
    pvesim.delete_vm(9000)
    assert api.data(api.get("/cluster/resources", type="vm")) == []
    pvesim.reset()
    assert [v["vmid"] for v in api.data(api.get("/cluster/resources", type="vm"))] == [9000]
    assert pvesim.requests() == [e for e in pvesim.requests() if e["path"] == "/cluster/resources"]
    pvesim.clear_requests()
    assert pvesim.requests() == []


def test_request_log_shape(api: Api, pvesim: PvesimAdmin) -> None:
    api.post(f"{N}/qemu/9000/clone", newid="abc")
    entry = pvesim.requests(method="POST")[-1]
    assert set(entry) >= {"seq", "time", "method", "path", "params", "status", "token", "schema_errors"}
    assert entry["path"] == f"{N}/qemu/9000/clone" and entry["status"] == 400 and entry["token"] == "vmanyware@pve!full"
    assert entry["schema_errors"] == {"newid": "type check ('integer') failed - got 'abc'"}
    assert pvesim.schema_violations() == [entry]


def test_faults_file_and_startup_time() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ffile = os.path.join(tmp, "faults.yaml")
        with open(ffile, "w", encoding="utf-8") as fh:
            fh.write(
                "- {method: GET, path: ^/version$, occurrence: every, action: http_error, status: 503, message: busy}\n"
            )
        start = time.monotonic()
        proc, conn = start_server(os.path.join(tmp, "state"), extra=["--faults", ffile])
        elapsed = time.monotonic() - start
        try:
            assert elapsed < 2.0, elapsed
            api = Api(conn)
            resp = api.get("/version")
            assert resp.status_code == 503 and resp.json()["message"] == "busy\n"
            with open(os.path.join(tmp, "state", "connection.json"), encoding="utf-8") as fh:
                data = json.load(fh)
            assert set(data) >= {
                "url",
                "host",
                "port",
                "ca_file",
                "fingerprint_sha256",
                "node",
                "template_vmid",
                "storage",
                "bridge",
                "tokens",
                "admin_token",
            }
            assert len(data["fingerprint_sha256"].split(":")) == 32
        finally:
            stop_server(proc)
        assert proc.returncode == 0


def test_listens_on_loopback_only(pvesim: PvesimAdmin) -> None:
    assert pvesim.connection["host"] == "127.0.0.1"
    probe = socket.socket()
    probe.settimeout(1)
    try:
        with pytest.raises(OSError):
            probe.connect((_non_loopback_ip(), pvesim.connection["port"]))
    finally:
        probe.close()


def _non_loopback_ip() -> str:
    try:
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.connect(("192.0.2.1", 9))
        ip = str(udp.getsockname()[0])
        udp.close()
        if not ip.startswith("127."):
            return ip
    except OSError:
        pass
    pytest.skip("no non-loopback address")
    return ""  # pragma: no cover


def test_error_after_effect_runs_the_handler_then_answers_500(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="error_after_effect", occurrence=1)
    resp = api.post(f"{N}/qemu/9000/clone", newid=201, full=1)
    assert resp.status_code == 500 and resp.json()["message"] == "guest-exec failed - got timeout\n"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not [
        t for t in pvesim.tasks() if t.get("type") == "qmclone" and t.get("status") == "OK"
    ]:
        time.sleep(0.05)
    assert api.get(f"{N}/qemu/201/config").status_code == 200  # the clone happened although the reply said it failed
    pvesim.add_fault(
        method="POST", path=r"/status/start$", action="error_after_effect", occurrence=1, status=503, message="busy"
    )
    resp = api.post(f"{N}/qemu/201/status/start")
    assert resp.status_code == 503 and resp.json()["message"] == "busy\n"


def _booted(api: Api) -> None:
    api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=201, name="web-1", full=1)
    api.run("POST", f"{N}/qemu/201/status/start")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and api.post(f"{N}/qemu/201/agent/ping").status_code != 200:
        time.sleep(0.05)


def _guest_file(api: Api, path: str) -> str | None:
    resp = api.get(f"{N}/qemu/201/agent/file-read", file=path)
    return t.cast(str, resp.json()["data"]["content"]) if resp.status_code == 200 else None


def test_error_after_effect_on_agent_exec_starts_the_wrapped_command_in_the_guest(
    api: Api, pvesim: PvesimAdmin
) -> None:
    from pvesim.guest.commands import EXEC_WRAPPER  # pylint: disable=import-outside-toplevel

    _booted(api)
    marker = "/var/lib/vmanyware-exec-test-1"
    pvesim.add_fault(method="POST", path=r"/agent/exec$", action="error_after_effect", occurrence=1)
    resp = api.req(
        "POST",
        f"{N}/qemu/201/agent/exec",
        data={"command": ["/bin/sh", "-c", EXEC_WRAPPER, "vmanyware", marker, "/bin/false"]},
    )
    assert resp.status_code == 500 and resp.json()["message"] == "guest-exec failed - got timeout\n"
    # The command started all the same: the wrapper's marker shows it, and its exit code once it ended.
    assert _guest_file(api, marker + ".started") == ""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _guest_file(api, marker + ".exit") is None:
        time.sleep(0.05)
    assert _guest_file(api, marker + ".exit") == "1\n"
    # The same marker never runs twice; a superseded one never runs (it records that instead of an exit code).
    wrapped = ["/bin/sh", "-c", EXEC_WRAPPER, "vmanyware", marker, "/bin/true"]
    again = api.data(api.req("POST", f"{N}/qemu/201/agent/exec", data={"command": wrapped}))["pid"]
    time.sleep(0.3)
    assert api.data(api.get(f"{N}/qemu/201/agent/exec-status", pid=again))["exitcode"] == 125
    late = "/var/lib/vmanyware-exec-test-2"
    assert (
        api.post(f"{N}/qemu/201/agent/file-write", file=late + ".superseded", content="superseded\n").status_code == 200
    )
    assert _guest_file(api, late + ".started") is None
    api.req(
        "POST",
        f"{N}/qemu/201/agent/exec",
        data={"command": ["/bin/sh", "-c", EXEC_WRAPPER, "vmanyware", late, "/bin/true"]},
    )
    assert _guest_file(api, late + ".exit") == "superseded\n"
    # Any other sh script that is not one simple command is refused by the simulated guest (guest/shell.py).
    other = api.data(api.req("POST", f"{N}/qemu/201/agent/exec", data={"command": ["/bin/sh", "-c", "true; true"]}))[
        "pid"
    ]
    time.sleep(0.3)
    assert api.data(api.get(f"{N}/qemu/201/agent/exec-status", pid=other))["exitcode"] == 2
