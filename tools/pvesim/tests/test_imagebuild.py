# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template build endpoints: download-url from a loopback HTTP server with real checksums, import content,
create with import-from, efidisk0 and serial0, POST .../template, tags (every request schema-validated)."""

from __future__ import annotations

import hashlib
import typing as t
from pathlib import Path

import pytest

from pvesim.imageserver import ImageServer, qcow2_stub
from pvesim.testing import PvesimAdmin

from .conftest import Api

N = "/nodes/pve-test"
GIB = 1024**3
IMAGE = qcow2_stub(3 * GIB, b"agent-less test image")
TEMPLATE_PRIVS = {
    "/vms": [
        "VM.Allocate",
        "VM.Audit",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Disk",
        "VM.Config.Network",
        "VM.Config.Options",
        "VM.Config.Cloudinit",
        "VM.Config.HWType",
        "VM.PowerMgmt",
    ],
    "/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"],
    "/storage/local-lvm": ["Datastore.AllocateSpace", "Datastore.Audit"],
    "/sdn/zones/localnetwork/vmbr0": ["SDN.Use"],
    "/nodes/pve-test": ["Sys.Audit", "Sys.AccessNetwork"],
}


@pytest.fixture()
def images(tmp_path: Path) -> t.Iterator[ImageServer]:
    (tmp_path / "debian.qcow2").write_bytes(IMAGE)
    with ImageServer(tmp_path) as server:
        yield server


@pytest.fixture()
def builder(api: Api, pvesim: PvesimAdmin) -> Api:
    pvesim.set_token("vmanyware@pve!full", privileges=TEMPLATE_PRIVS)
    return api


def download(
    api: Api, url: str, checksum: str, algorithm: str = "sha256", filename: str = "vmanyware-debian.qcow2"
) -> dict[str, t.Any]:
    return api.run(
        "POST",
        f"{N}/storage/local/download-url",
        url=url,
        content="import",
        filename=filename,
        checksum=checksum,
        **{"checksum-algorithm": algorithm},
    )


def import_volumes(api: Api) -> list[dict[str, t.Any]]:
    return list(api.data(api.get(f"{N}/storage/local/content", content="import")))


def log(api: Api, upid: str) -> list[str]:
    return [line["t"] for line in api.data(api.get(f"{N}/tasks/{upid}/log"))]


def test_download_verifies_the_checksum_and_is_idempotent(
    builder: Api, images: ImageServer, pvesim: PvesimAdmin
) -> None:
    for algorithm in ("sha256", "sha512"):
        digest = hashlib.new(algorithm, IMAGE).hexdigest()
        status = download(builder, images.url("debian.qcow2"), digest, algorithm)
        assert status["exitstatus"] == "OK" and status["type"] == "download"
    assert import_volumes(builder) == [
        {"volid": "local:import/vmanyware-debian.qcow2", "content": "import", "size": len(IMAGE), "format": "qcow2"}
    ]
    status = download(builder, images.url("debian.qcow2"), hashlib.sha256(IMAGE).hexdigest())
    assert any("no need to download" in line for line in log(builder, status["upid"]))
    assert pvesim.schema_violations() == []


def test_wrong_checksum_fails_the_task_and_leaves_nothing(builder: Api, images: ImageServer) -> None:
    status = download(builder, images.url("debian.qcow2"), "0" * 64)
    assert (
        status["exitstatus"] == f"checksum mismatch: got '{hashlib.sha256(IMAGE).hexdigest()}' != expect '{'0' * 64}'"
    )
    assert import_volumes(builder) == []
    assert download(builder, images.url("missing.qcow2"), "0" * 64)["exitstatus"].startswith("download failed")
    assert import_volumes(builder) == []


def test_download_refusals(builder: Api, images: ImageServer, pvesim: PvesimAdmin) -> None:
    url = images.url("debian.qcow2")
    resp = builder.post(f"{N}/storage/local-lvm/download-url", url=url, content="import", filename="x.qcow2")
    assert resp.status_code == 403  # the schema's check (Datastore.AllocateTemplate) comes first
    pvesim.set_token(
        "vmanyware@pve!full", privileges=dict(TEMPLATE_PRIVS, **{"/storage/local-lvm": ["Datastore.AllocateTemplate"]})
    )
    resp = builder.post(f"{N}/storage/local-lvm/download-url", url=url, content="import", filename="x.qcow2")
    assert resp.status_code == 400 and "not configured for content-type 'import'" in resp.json()["errors"]["storage"]
    resp = builder.post(f"{N}/storage/local/download-url", url=url, content="import", filename="x.iso")
    assert resp.status_code == 400 and resp.json()["errors"] == {"filename": "invalid filename or wrong extension"}
    resp = builder.post(
        f"{N}/storage/local/download-url", url=url, content="import", filename="x.qcow2", checksum="0" * 64
    )
    assert resp.status_code == 400  # checksum requires checksum-algorithm (schema)
    remote = builder.run(
        "POST", f"{N}/storage/local/download-url", url="http://192.0.2.99/x.qcow2", content="import", filename="x.qcow2"
    )
    assert remote["exitstatus"] == "the simulator downloads from loopback hosts only"


def test_download_needs_allocate_template(api: Api, images: ImageServer) -> None:
    resp = api.post(
        f"{N}/storage/local/download-url", url=images.url("debian.qcow2"), content="import", filename="x.qcow2"
    )
    assert resp.status_code == 403


def create_template_vm(api: Api, vmid: int = 9100) -> dict[str, t.Any]:
    return api.run(
        "POST",
        f"{N}/qemu",
        vmid=vmid,
        name=f"vmanyware-template-{vmid}",
        machine="q35",
        bios="ovmf",
        efidisk0="local-lvm:1,efitype=4m,pre-enrolled-keys=0",
        scsihw="virtio-scsi-single",
        scsi0="local-lvm:0,import-from=local:import/vmanyware-debian.qcow2,discard=on",
        ide2="local-lvm:cloudinit",
        serial0="socket",
        vga="serial0",
        agent="enabled=1",
        net0="virtio,bridge=vmbr0",
        cores=2,
        memory=2048,
        ostype="l26",
        boot="order=scsi0",
    )


def test_create_with_import_from_then_convert_to_template(
    builder: Api, images: ImageServer, pvesim: PvesimAdmin
) -> None:
    download(builder, images.url("debian.qcow2"), hashlib.sha256(IMAGE).hexdigest())
    status = create_template_vm(builder)
    assert status["exitstatus"] == "OK" and status["type"] == "qmcreate"
    conf = builder.data(builder.get(f"{N}/qemu/9100/config"))
    assert conf["scsi0"] == "local-lvm:vm-9100-disk-1,discard=on,size=3G"  # the image's virtual size, not the file's
    assert conf["efidisk0"] == "local-lvm:vm-9100-disk-0,efitype=4m,pre-enrolled-keys=0,size=528K"
    assert conf["ide2"] == "local-lvm:vm-9100-cloudinit,media=cdrom"
    assert (conf["serial0"], conf["vga"], conf["machine"], conf["bios"]) == ("socket", "serial0", "q35", "ovmf")
    assert "import-from" not in str(conf) and "lock" not in conf
    resp = builder.post(f"{N}/qemu", vmid=9100, name="again")
    assert (
        resp.status_code == 500
        and resp.json()["message"] == "unable to create VM 9100 - VM 9100 already exists on node 'pve-test'\n"
    )
    builder.data(builder.put(f"{N}/qemu/9100/config", tags="vmanyware-template", description="built"))
    status = builder.run("POST", f"{N}/qemu/9100/template")
    assert status["exitstatus"] == "OK" and status["type"] == "qmtemplate"
    conf = builder.data(builder.get(f"{N}/qemu/9100/config"))
    assert conf["template"] == 1 and conf["scsi0"] == "local-lvm:base-9100-disk-1,discard=on,size=3G"
    assert (
        conf["efidisk0"].startswith("local-lvm:base-9100-disk-0,")
        and conf["ide2"] == "local-lvm:vm-9100-cloudinit,media=cdrom"
    )
    assert conf["tags"] == "vmanyware-template"
    volumes = {v["volid"] for v in builder.data(builder.get(f"{N}/storage/local-lvm/content", vmid=9100))}
    assert volumes == {"local-lvm:base-9100-disk-0", "local-lvm:base-9100-disk-1", "local-lvm:vm-9100-cloudinit"}
    resources = builder.data(builder.get("/cluster/resources", type="vm"))
    assert any(r["vmid"] == 9100 and r["template"] == 1 and r["tags"] == "vmanyware-template" for r in resources)
    resp = builder.post(f"{N}/qemu/9100/template")
    assert resp.status_code == 500 and resp.json()["message"] == "you can't convert a template to a template\n"
    assert pvesim.schema_violations() == []


def test_create_refusals_and_failed_import_leaves_nothing(builder: Api, images: ImageServer) -> None:
    status = create_template_vm(builder)  # nothing downloaded yet
    assert status["exitstatus"].startswith("unable to parse volume ID")
    assert builder.get(f"{N}/qemu/9100/config").status_code == 500
    assert builder.data(builder.get(f"{N}/storage/local-lvm/content", vmid=9100)) == []
    resp = builder.post(f"{N}/qemu", vmid=9000, name="x")
    assert (
        resp.status_code == 403
    )  # VM.Allocate is checked first; the token's user has only VM.Clone/VM.Audit on /vms/9000


def test_running_vm_cannot_become_a_template(builder: Api, images: ImageServer) -> None:
    download(builder, images.url("debian.qcow2"), hashlib.sha256(IMAGE).hexdigest())
    create_template_vm(builder)
    assert builder.run("POST", f"{N}/qemu/9100/status/start")["exitstatus"] == "OK"
    resp = builder.post(f"{N}/qemu/9100/template")
    assert resp.status_code == 500 and "running" in resp.json()["message"]
