# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fixtures for the simulator's own tests (the plugin's fixtures, plus raw HTTP clients)."""

from __future__ import annotations

import time
import typing as t

import pytest
import requests
from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin, pvesim, pvesim_server  # noqa: F401  pylint: disable=unused-import


def root_api(admin: PvesimAdmin) -> ProxmoxAPI:
    """proxmoxer logged in as root@pam (ticket), for what the test tokens may not do."""
    conn = admin.connection
    return ProxmoxAPI(
        conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"]
    )


def raw_call(admin: ProxmoxAPI, method: str, path: str, **data: t.Any) -> tuple[int, str, t.Any]:
    """(status, reason, ``errors``) of a call through ``admin``'s session that may fail (proxmoxer would raise)."""
    store = admin._store  # pylint: disable=protected-access
    reply = store["session"].request(method, store["base_url"] + path, data=data or None)
    return reply.status_code, reply.reason, reply.json().get("errors") if reply.content else None


class Api:
    """A raw client: returns the ``requests.Response`` (no raising) with token auth."""

    def __init__(self, conn: dict[str, t.Any], token: str = "full") -> None:
        self.conn = conn
        self.base = conn["url"]
        self.session = requests.Session()
        tok = conn["tokens"][token]
        self.session.headers["Authorization"] = f"PVEAPIToken={tok['id']}={tok['secret']}"

    def req(self, method: str, path: str, **kw: t.Any) -> requests.Response:
        return self.session.request(method, self.base + path, verify=self.conn["ca_file"], timeout=30, **kw)

    def get(self, path: str, **params: t.Any) -> requests.Response:
        return self.req("GET", path, params=params)

    def post(self, path: str, **data: t.Any) -> requests.Response:
        return self.req("POST", path, data=data)

    def put(self, path: str, **data: t.Any) -> requests.Response:
        return self.req("PUT", path, data=data)

    def delete(self, path: str, **params: t.Any) -> requests.Response:
        return self.req("DELETE", path, params=params)

    def data(self, resp: requests.Response) -> t.Any:
        assert resp.status_code == 200, (resp.status_code, resp.reason, resp.text)
        return resp.json()["data"]

    def wait(self, upid: str, timeout: float = 20.0) -> dict[str, t.Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.data(self.get(f"/nodes/pve-test/tasks/{upid}/status"))
            if st["status"] == "stopped":
                return st
            time.sleep(0.02)
        raise AssertionError(f"task {upid} did not finish")

    def run(self, method: str, path: str, **data: t.Any) -> dict[str, t.Any]:
        upid = self.data(self.req(method, path, data=data))
        return self.wait(upid)


@pytest.fixture()
def api(pvesim: PvesimAdmin) -> Api:  # noqa: F811  pylint: disable=redefined-outer-name
    return Api(pvesim.connection)


@pytest.fixture()
def limited(pvesim: PvesimAdmin) -> Api:  # noqa: F811  pylint: disable=redefined-outer-name
    return Api(pvesim.connection, "limited")


@pytest.fixture()
def prox(pvesim: PvesimAdmin) -> ProxmoxAPI:  # noqa: F811  pylint: disable=redefined-outer-name
    conn = pvesim.connection
    user, name = conn["tokens"]["full"]["id"].split("!")
    return ProxmoxAPI(
        conn["host"],
        port=conn["port"],
        user=user,
        token_name=name,
        token_value=conn["tokens"]["full"]["secret"],
        verify_ssl=conn["ca_file"],
    )


@pytest.fixture()
def clone201(api: Api) -> dict[str, t.Any]:  # pylint: disable=redefined-outer-name
    st = api.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=201, name="web-1", full=1)
    assert st["exitstatus"] == "OK"
    return st
