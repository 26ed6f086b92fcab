# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A VM's disks on their own (qemu-server API2/Qemu.pm): unlink (detach or destroy), move_disk to another storage or
to another VM, with qemu-server's refusals; and a drive update that keeps the volume shows its size (create_disks)."""

from __future__ import annotations

import re
import typing as t

from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin

from .conftest import raw_call, root_api

N = "/nodes/pve-test"


def _clone(admin: ProxmoxAPI, newid: int, **extra: t.Any) -> None:
    upid = admin.nodes("pve-test").qemu(9000).clone.post(newid=newid, full=1, storage="local-lvm", **extra)
    _wait(admin, upid)


def _wait(admin: ProxmoxAPI, upid: str) -> dict[str, t.Any]:
    for _attempt in range(2000):
        status = admin.nodes("pve-test").tasks(upid).status.get()
        if status["status"] == "stopped":
            return dict(status)
    raise AssertionError(f"task {upid} did not stop")


def _volumes(admin: ProxmoxAPI, storage: str) -> set[str]:
    return {c["volid"] for c in admin.nodes("pve-test").storage(storage).content.get()}


def test_drive_update_keeps_the_size(pvesim: PvesimAdmin) -> None:
    admin = root_api(pvesim)
    _clone(admin, 100)
    vm = admin.nodes("pve-test").qemu(100)
    volume = vm.config.get()["scsi0"].split(",")[0]
    vm.config.put(scsi0=f"{volume},ssd=1")
    assert vm.config.get()["scsi0"] == f"{volume},ssd=1,size=8G"
    vm.config.put(scsi0=f"{volume},ssd=1,size=1G")  # a wrong size is corrected from the storage
    assert vm.config.get()["scsi0"] == f"{volume},ssd=1,size=8G"
    assert raw_call(admin, "PUT", f"{N}/qemu/100/config", virtio1="local-lvm:vm-100-disk-9")[:2] == (
        500,
        "volume local-lvm:vm-100-disk-9 does not exist",
    )
    assert pvesim.schema_violations() == []


def test_unlink_detaches_or_destroys(pvesim: PvesimAdmin) -> None:
    admin = root_api(pvesim)
    _clone(admin, 100)
    vm = admin.nodes("pve-test").qemu(100)
    vm.config.put(virtio1="local-lvm:1", virtio2="local-lvm:1")
    conf = vm.config.get()
    kept, destroyed = conf["virtio1"].split(",")[0], conf["virtio2"].split(",")[0]
    vm.unlink.put(idlist="virtio1")
    conf = vm.config.get()
    assert "virtio1" not in conf and conf["unused0"] == kept and kept in _volumes(admin, "local-lvm")
    vm.unlink.put(idlist="virtio2,unused0", force=1)
    conf = vm.config.get()
    assert "virtio2" not in conf and "unused0" not in conf
    assert not {kept, destroyed} & _volumes(admin, "local-lvm")
    requests = pvesim.requests(path_regex="/unlink$")
    assert [r["endpoint"] for r in requests] == ["PUT /nodes/{node}/qemu/{vmid}/unlink"] * 2
    assert requests[1]["params"]["idlist"] == "virtio2,unused0"
    assert pvesim.schema_violations() == []


def test_move_disk_to_another_storage(pvesim: PvesimAdmin) -> None:
    pvesim.reset("cluster")  # adds the shared NFS storage (images, qcow2)
    admin = root_api(pvesim)
    _clone(admin, 100)
    vm = admin.nodes("pve-test").qemu(100)
    old = vm.config.get()["scsi0"].split(",")[0]
    upid = vm.move_disk.post(disk="scsi0", storage="shared", format="qcow2")
    status = _wait(admin, upid)
    assert status["exitstatus"] == "OK" and status["type"] == "qmmove"
    conf = vm.config.get()
    moved = conf["scsi0"].split(",")[0]
    assert re.fullmatch(r"shared:100/vm-100-disk-\d+\.qcow2", moved) and conf["scsi0"].endswith(",size=8G")
    assert conf["unused0"] == old and old in _volumes(admin, "local-lvm")  # the source is kept, unused
    log = [line["t"] for line in admin.nodes("pve-test").tasks(upid).log.get()]
    assert f"copying volume '{old}' from current storage 'local-lvm' to target storage 'shared'" in log
    assert {c["volid"]: c["format"] for c in admin.nodes("pve-test").storage("shared").content.get()}[moved] == "qcow2"
    _wait(admin, vm.move_disk.post(disk="scsi0", storage="local-lvm", delete=1))
    conf = vm.config.get()
    assert conf["scsi0"].startswith("local-lvm:vm-100-disk-") and "unused1" not in conf  # delete=1: the source goes
    assert moved not in _volumes(admin, "shared")
    content = admin.nodes("pve-test").storage("local-lvm").content.get(vmid=100)
    assert {c["format"] for c in content} == {"raw"}
    assert pvesim.schema_violations() == []


def test_move_disk_refusals(pvesim: PvesimAdmin) -> None:
    admin = root_api(pvesim)
    _clone(admin, 100)
    path = f"{N}/qemu/100/move_disk"
    assert raw_call(admin, "POST", path, disk="scsi0", storage="local-lvm")[:2] == (
        500,
        "you can't move to the same storage with same format",
    )
    assert raw_call(admin, "POST", path, disk="scsi0", storage="local") == (
        400,
        "Parameter verification failed.",
        {"storage": "storage 'local' does not support vm images"},
    )
    assert raw_call(admin, "POST", path, disk="virtio5", storage="local")[:2] == (500, "disk 'virtio5' does not exist")
    assert raw_call(admin, "POST", path, disk="ide2", storage="local")[:2] == (500, "you can't move a cdrom")
    both = "either set 'storage' or 'target-vmid', but not both"
    assert raw_call(admin, "POST", path, disk="scsi0", storage="local", **{"target-vmid": 101})[2] == {
        "target-vmid": both,
        "storage": both,
    }
    assert raw_call(admin, "POST", path, disk="scsi0")[0] == 400
    _wait(admin, admin.nodes("pve-test").qemu(100).snapshot.post(snapname="before"))
    assert raw_call(admin, "POST", path, disk="scsi0", storage="local-lvm", format="qcow2", delete=1)[:2] == (
        500,
        "you can't move a disk with snapshots and delete the source",
    )
    assert pvesim.schema_violations() == []


def test_move_disk_to_another_vm(pvesim: PvesimAdmin) -> None:
    admin = root_api(pvesim)
    _clone(admin, 100)
    _clone(admin, 101)
    source, target = admin.nodes("pve-test").qemu(100), admin.nodes("pve-test").qemu(101)
    source.config.put(virtio1="local-lvm:2")
    path = f"{N}/qemu/100/move_disk"
    assert raw_call(admin, "POST", path, disk="virtio1", **{"target-vmid": 9000})[:2] == (
        500,
        "Can't move disks from or to template VMs",
    )
    assert raw_call(admin, "POST", path, disk="virtio1", **{"target-vmid": 101, "target-disk": "scsi0"})[:2] == (
        500,
        "Target disk key 'scsi0' is already in use for VM '101'",
    )
    assert raw_call(admin, "POST", path, disk="virtio1", **{"target-vmid": 100})[2] == {
        "target-vmid": "must be different than source VMID to reassign disk"
    }
    _wait(admin, source.status.start.post())
    assert raw_call(admin, "POST", path, disk="virtio1", **{"target-vmid": 101})[:2] == (
        500,
        "Cannot move disk to another VM while the source VM is running - detach first",
    )
    _wait(admin, source.status.stop.post())
    status = _wait(admin, source.move_disk.post(disk="virtio1", **{"target-vmid": 101, "target-disk": "virtio3"}))
    assert status["exitstatus"] == "OK" and status["id"] == "100-virtio1>101-virtio3"
    assert "virtio1" not in source.config.get()
    moved = target.config.get()["virtio3"]
    assert moved.startswith("local-lvm:vm-101-disk-") and moved.endswith(",size=2G")
    assert pvesim.schema_violations() == []
