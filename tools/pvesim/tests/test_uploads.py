# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Uploads (POST /nodes/{node}/storage/{storage}/upload) received as pve-http-server receives them: authenticated
before the body is read, streamed to a file past the 512 KiB body limit, then copied by an ``imgcopy`` task; and
any other body over the limit answered with Proxmox's 501."""

from __future__ import annotations

import hashlib
import struct

import pytest
import requests

from pvesim.imageserver import qcow2_stub
from pvesim.lxc import TEMPLATE_STORAGE_ACL
from pvesim.testing import PvesimAdmin

from .conftest import Api

N = "/nodes/pve-test"
ISO = b"\0" * (1536 * 1024)  # past the 512 KiB body limit: only a streamed upload gets it through


def uploader(pvesim: PvesimAdmin) -> Api:
    """The limited token with the template privileges on ``local`` (what an upload needs)."""
    pvesim.set_token("vmanyware@pve!limited", privileges=TEMPLATE_STORAGE_ACL)
    return Api(pvesim.connection, "limited")


def upload(api: Api, storage: str, name: str, payload: bytes, **fields: str) -> requests.Response:
    return api.req("POST", f"{N}/storage/{storage}/upload", data=fields, files={"filename": (name, payload)})


def test_iso_upload_with_checksum(pvesim: PvesimAdmin) -> None:
    api = uploader(pvesim)
    digest = hashlib.sha256(ISO).hexdigest()
    reply = upload(
        api, "local", "debian netinst.iso", ISO, content="iso", **{"checksum-algorithm": "sha256"}, checksum=digest
    )
    upid = api.data(reply)
    assert upid.split(":")[5] == "imgcopy"
    status = api.wait(upid)
    assert status["exitstatus"] == "OK"
    log = [line["t"] for line in api.data(api.get(f"{N}/tasks/{upid}/log"))]
    assert "calculating checksum...OK, checksum verified" in log and f"file size is: {len(ISO)}" in log
    content = api.data(api.get(f"{N}/storage/local/content", content="iso"))
    assert content == [{"volid": "local:iso/debian_netinst.iso", "content": "iso", "format": "iso", "size": len(ISO)}]
    (entry,) = pvesim.requests("POST", "/upload$")
    assert entry["endpoint"] == "POST /nodes/{node}/storage/{storage}/upload" and entry["status"] == 200
    assert entry["params"]["tmpfilename"].startswith("/var/tmp/pveupload-")  # the schema's pattern, as PVE passes it
    assert pvesim.schema_violations() == []


def test_failed_checks_of_the_copy_task(pvesim: PvesimAdmin) -> None:
    api = uploader(pvesim)
    wrong = upload(api, "local", "a.iso", ISO, content="iso", **{"checksum-algorithm": "md5"}, checksum="0" * 32)
    status = api.wait(api.data(wrong))
    assert status["exitstatus"] == f"checksum mismatch: got '{hashlib.md5(ISO).hexdigest()}' != expect '{'0' * 32}'"
    backing = b"QFI\xfb" + struct.pack(">IQ", 3, 512) + b"\0" * 64  # a qcow2 naming a backing file
    status = api.wait(api.data(upload(api, "local", "b.qcow2", backing, content="import")))
    assert status["exitstatus"].startswith("backing file not allowed for untrusted image '/var/tmp/pveupload-")
    status = api.wait(api.data(upload(api, "local", "c.qcow2", b"raw bytes", content="import")))
    assert status["exitstatus"] == "qemu-img bug: queried format does not match format in result 'qcow2 ne raw'"
    good = api.wait(api.data(upload(api, "local", "d.qcow2", qcow2_stub(2 << 30, b"x"), content="import")))
    assert good["exitstatus"] == "OK"
    volids = [c["volid"] for c in api.data(api.get(f"{N}/storage/local/content"))]
    assert "local:import/d.qcow2" in volids and not {"local:iso/a.iso", "local:import/b.qcow2"} & set(volids)


@pytest.mark.parametrize(
    ("storage", "name", "content", "status", "message"),
    [
        ("local", "a.exe", "iso", 400, "Parameter verification failed."),
        ("local", "a.tar.gz", "import", 400, "Parameter verification failed."),
        ("local-lvm", "a.iso", "iso", 500, "can't upload to storage type 'lvmthin'"),
        ("nosuch", "a.iso", "iso", 403, "Permission check failed (/storage/nosuch, Datastore.AllocateTemplate)"),
    ],
)
def test_refused_before_the_task(
    pvesim: PvesimAdmin, storage: str, name: str, content: str, status: int, message: str
) -> None:
    pvesim.set_token(
        "vmanyware@pve!limited",
        privileges={**TEMPLATE_STORAGE_ACL, "/storage/local-lvm": ["Datastore.AllocateTemplate"]},
    )
    reply = upload(Api(pvesim.connection, "limited"), storage, name, b"data", content=content)
    assert (reply.status_code, reply.reason) == (status, message)


def test_the_server_side_of_an_upload(pvesim: PvesimAdmin, api: Api) -> None:
    """Authentication and the storage privilege before the body; multipart only; the fields in Proxmox's order."""
    conn = pvesim.connection
    url = f"{conn['url']}{N}/storage/local/upload"
    anonymous = requests.post(url, files={"filename": ("a.iso", b"x")}, data={"content": "iso"}, verify=conn["ca_file"])
    assert anonymous.status_code == 401
    pvesim.set_token("vmanyware@pve!limited", privileges={"/storage/local-lvm": ["Datastore.Audit"]})
    refused = upload(Api(conn, "limited"), "local", "a.iso", ISO, content="iso")
    assert (refused.status_code, refused.reason) == (
        403,
        "Permission check failed (/storage/local, Datastore.AllocateTemplate)",
    )
    uploader_api = uploader(pvesim)
    form = uploader_api.req("POST", f"{N}/storage/local/upload", data={"content": "iso", "filename": "a.iso"})
    assert form.status_code == 501 and form.reason.startswith("upload 'Content-Type 'application/x-www-form-urlencoded")
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="filename"; filename="a.iso"\r\n\r\nxyz\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"\r\n\r\niso\r\n--{boundary}--\r\n'
    ).encode()
    late_field = uploader_api.req(
        "POST",
        f"{N}/storage/local/upload",
        data=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert late_field.status_code == 400  # the file part came first: ``content`` was never read (schema: required)
    del api


def test_faults_apply_to_uploads(pvesim: PvesimAdmin) -> None:
    api = uploader(pvesim)
    pvesim.add_fault(method="POST", path=r".*/upload$", action="drop_reply", occurrence=1)
    with pytest.raises(requests.ConnectionError):
        upload(api, "local", "a.iso", ISO, content="iso")
    (entry,) = pvesim.requests("POST", "/upload$")
    assert entry["status"] == "dropped"
    # the upload ran before the reply was lost: the task copies the file
    task = next(t_ for t_ in pvesim.tasks() if t_["type"] == "imgcopy")
    assert api.wait(task["upid"])["exitstatus"] == "OK"


def test_oversized_bodies_get_proxmox_refusal(pvesim: PvesimAdmin, api: Api) -> None:
    """Not an upload: over 512 KiB, Proxmox answers 501 "for data too large" (the client reads it, no broken stream)."""
    reply = api.put(f"{N}/qemu/9000/config", description="x" * (600 * 1024))
    assert (reply.status_code, reply.reason) == (501, "for data too large")
    fits = api.put(f"{N}/qemu/9000/config", description="x" * 1024)
    assert fits.status_code != 501
    assert pvesim.vm(9000)["config"]["description"] != "x" * (600 * 1024)
