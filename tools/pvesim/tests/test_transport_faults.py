# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Transport faults: the TLS stream broken while the reply is read, an oversized reply, a certificate swap."""

from __future__ import annotations

import hashlib
import socket
import ssl
import time
import typing as t

import pytest
import requests

from pvesim.faults import DEFAULT_OVERSIZED_BYTES
from pvesim.testing import PvesimAdmin

from .conftest import Api

N = "/nodes/pve-test"


def _wait_for_vm(api: Api, vmid: int) -> int:
    deadline = time.monotonic() + 10
    status = 0
    while time.monotonic() < deadline:
        resp = api.get(f"{N}/qemu/{vmid}/config")
        status = resp.status_code
        if status == 200 and "lock" not in resp.json()["data"]:
            break
        time.sleep(0.05)
    return status


def test_tls_abort_reply_runs_the_request_then_breaks_tls(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="tls_abort_reply", occurrence=1)
    with pytest.raises(requests.exceptions.SSLError):  # a TLS error, raised while the client waits for the reply
        api.post(f"{N}/qemu/9000/clone", newid=201, full=1)
    assert _wait_for_vm(api, 201) == 200  # the clone happened although the client saw a TLS failure
    assert pvesim.requests(method="POST")[-1]["status"] == "tls_aborted"
    assert [f["fired"] for f in pvesim.faults()] == [1]
    # only the first matching request; later ones are answered normally
    assert api.get("/version").status_code == 200


def test_oversized_reply_runs_the_request_and_pads_the_body(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="oversized_reply", occurrence=1, size=300_000)
    resp = api.post(f"{N}/qemu/9000/clone", newid=202, full=1)
    assert resp.status_code == 200 and int(resp.headers["Content-Length"]) >= 300_000 and len(resp.content) >= 300_000
    assert resp.json()["data"].startswith("UPID:")  # the real reply, padded
    assert _wait_for_vm(api, 202) == 200
    assert pvesim.requests(method="POST")[-1]["status"] == "oversized_reply"


def test_oversized_reply_default_is_over_the_clients_8_mib(api: Api, pvesim: PvesimAdmin) -> None:
    assert DEFAULT_OVERSIZED_BYTES > 8 * 1024 * 1024
    pvesim.add_fault(method="GET", path=r"^/version$", action="oversized_reply", occurrence=1)
    resp = api.req("GET", "/version", stream=True)
    try:
        assert resp.status_code == 200 and int(resp.headers["Content-Length"]) > DEFAULT_OVERSIZED_BYTES
    finally:
        resp.close()


def _leaf(conn: dict[str, t.Any]) -> str:
    """One new TLS connection verified with the simulator's CA (host name checked): its leaf fingerprint, PVE's form."""
    context = ssl.create_default_context(cafile=conn["ca_file"])
    with socket.create_connection((conn["host"], conn["port"]), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=conn["host"]) as tls:
            der = tls.getpeercert(binary_form=True)
    digest = hashlib.sha256(der).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, 64, 2))


def test_cert_swap_from_the_nth_connection_with_a_certificate_of_the_same_ca(pvesim: PvesimAdmin) -> None:
    conn = pvesim.connection
    original, alternate = conn["fingerprint_sha256"], conn["alt_fingerprint_sha256"]
    assert original != alternate
    assert _leaf(conn) == original
    pvesim.add_fault(action="cert_swap", occurrence=2)
    assert _leaf(conn) == original  # the 1st new connection after the rule
    assert [_leaf(conn), _leaf(conn)] == [alternate, alternate]  # from the 2nd on, and it stays
    # both verify against the same CA, and the rule never matches a request
    api = Api(conn)
    assert api.get("/version").status_code == 200
    assert pvesim.faults()[0]["fired"] == 3
    pvesim.clear_faults()
    assert _leaf(conn) == original
