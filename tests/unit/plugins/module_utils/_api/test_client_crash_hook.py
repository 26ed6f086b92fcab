# SPDX-License-Identifier: GPL-3.0-or-later
"""The HTTP crash points the crash harness injects into the client (tests/crash_harness, VMANYWARE_TEST_CRASH_AT=http:...):
where they fire, and that they are inert otherwise. The client itself knows nothing of them."""

from __future__ import annotations

import os
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "crash_harness"))
import vmanyware_crash_hook as _crash  # noqa: E402  pylint: disable=wrong-import-position

from pve_stubs import Reply, make_settings, stub_server, tls_material  # noqa: F401  pylint: disable=unused-import

VERSION = {"data": {"version": "9.1.3", "release": "9.1", "repoid": "0123abcd"}}


class Crashed(BaseException):
    pass


@pytest.fixture()
def exits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    codes: list[int] = []

    def fake_exit(code: int) -> t.NoReturn:
        codes.append(code)
        raise Crashed()

    monkeypatch.setattr(os, "_exit", fake_exit)
    return codes


@pytest.fixture(autouse=True)
def harness() -> None:
    _crash.install()  # idempotent; inert while the variable is unset


def _setup(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, point: str | None
) -> tuple[ProxmoxClient, list[str]]:
    seen: list[str] = []

    def behavior(request: t.Any) -> Reply:
        seen.append("%s %s" % (request.method, request.path))
        return Reply(200, "OK", VERSION)

    server = stub_server(behavior)
    if point is None:
        monkeypatch.delenv(_crash.ENV_CRASH_AT, raising=False)
    else:
        monkeypatch.setenv(_crash.ENV_CRASH_AT, point)
    return ProxmoxClient(make_settings(server.port, ca_path=tls_material.ca_path), sleep=lambda s: None), seen


def test_before_send_exits_before_any_byte(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, exits: list[int]
) -> None:
    client, seen = _setup(
        stub_server, make_settings, tls_material, monkeypatch, r"http:before_send:POST:/qemu/9000/clone$"
    )
    client.get("/version")
    client.post("/nodes/pve/qemu/9000/config", cores=2)
    with pytest.raises(Crashed):
        client.post("/nodes/pve/qemu/9000/clone", newid=201)
    assert exits == [137]
    assert [s.split("?")[0] for s in seen] == ["GET /api2/json/version", "POST /api2/json/nodes/pve/qemu/9000/config"]


def test_after_reply_exits_after_the_request_was_answered(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, exits: list[int]
) -> None:
    client, seen = _setup(
        stub_server, make_settings, tls_material, monkeypatch, r"http:after_reply:POST:/agent/exec$#2"
    )
    client.post("/nodes/pve/qemu/201/agent/exec", command=["true"])
    with pytest.raises(Crashed):
        client.post("/nodes/pve/qemu/201/agent/exec", command=["true"])
    assert exits == [137] and len(seen) == 2


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "journal:before_replace:clone:dispatching",
        "http:before_send:POST:(unclosed",
        "http:somewhere:POST:/x",
        "http:before_send:GET:/nomatch",
    ],
)
def test_inert_when_unset_or_not_an_http_point(
    stub_server: t.Any,
    make_settings: t.Any,
    tls_material: t.Any,
    monkeypatch: pytest.MonkeyPatch,
    exits: list[int],
    value: str | None,
) -> None:
    client, _seen = _setup(stub_server, make_settings, tls_material, monkeypatch, value)
    client.get("/version")
    client.post("/nodes/pve/qemu/9000/clone", newid=201)
    assert exits == []
    assert client.__dict__["_vmanyware_crash_point"] is None or value == "http:before_send:GET:/nomatch"


def test_environment_is_read_once_per_client(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, exits: list[int]
) -> None:
    client, _seen = _setup(stub_server, make_settings, tls_material, monkeypatch, None)
    client.get("/version")  # the first exchange reads the (unset) variable
    monkeypatch.setenv(_crash.ENV_CRASH_AT, "http:before_send:*:/version")
    client.get("/version")  # set after the client read it: inert
    assert exits == []


def test_rearm_reads_the_variable_again(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, exits: list[int]
) -> None:
    client, _seen = _setup(stub_server, make_settings, tls_material, monkeypatch, None)
    client.get("/version")
    monkeypatch.setenv(_crash.ENV_CRASH_AT, "http:before_send:*:/version")
    _crash.rearm(client)  # what the chained reliability driver does before each stage
    with pytest.raises(Crashed):
        client.get("/version")
    assert exits == [137]


def test_production_code_does_not_know_the_crash_points() -> None:
    """The crash points live in the test harness only: nothing under plugins/ names them or offers a hook for them."""
    plugins = Path(__file__).resolve().parents[5] / "plugins"
    words = (
        "VMANYWARE_TEST_CRASH_AT",
        "crash_at",
        "before_replace",
        "after_replace",
        "before_send",
        "after_reply",
        "_crash",
    )
    found = [
        "%s: %s" % (path.relative_to(plugins), word)
        for path in sorted(plugins.rglob("*.py"))
        for word in words
        if word in path.read_text(encoding="utf-8")
    ]
    assert not found
