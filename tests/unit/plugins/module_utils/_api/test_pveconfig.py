# SPDX-License-Identifier: GPL-3.0-or-later
"""The shared PVE configuration helpers."""

from __future__ import annotations

import pytest
from pve_fake import FakeClient

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import pveconfig as pc

VM = "/nodes/pve-test/qemu/201"


def test_property_strings_round_trip() -> None:
    props = pc.parse_property_string("virtio=BC:24:11:00:00:01,bridge=vmbr0,firewall=1", "model")
    assert props == {"virtio": "BC:24:11:00:00:01", "bridge": "vmbr0", "firewall": "1"}
    disk = pc.parse_property_string("local-lvm:vm-201-disk-0,size=8G,iothread=1", "file")
    assert disk == {"file": "local-lvm:vm-201-disk-0", "size": "8G", "iothread": "1"}
    assert pc.format_property_string(disk, "file") == "local-lvm:vm-201-disk-0,size=8G,iothread=1"
    assert pc.parse_property_string("1", "enabled") == {"enabled": "1"}
    assert pc.parse_property_string("", "enabled") == {}


@pytest.mark.parametrize(
    "value,expected",
    [
        ("8G", 8 * 1024**3),
        ("512M", 512 * 1024**2),
        ("1.5T", int(1.5 * 1024**4)),
        ("4096", 4096),
        (4096, 4096),
        ("8 GiB", None),
        (True, None),
        (None, None),
        (-1, None),
    ],
)
def test_sizes(value: object, expected: int | None) -> None:
    assert pc.parse_size_bytes(value) == expected


def test_disk_volume_memory_mac_tags() -> None:
    config = {
        "scsi0": "local-lvm:vm-201-disk-0,size=20G",
        "ide2": "local-lvm:vm-201-cloudinit,media=cdrom",
        "net0": "virtio=bc:24:11:73:96:67,bridge=vmbr0",
        "memory": "current=2048",
        "tags": "a;b c",
    }
    disk = pc.disk_volume(config, "scsi0")
    assert disk is not None and (disk.volid, disk.storage, disk.size_bytes, disk.is_cdrom) == (
        "local-lvm:vm-201-disk-0",
        "local-lvm",
        20 * pc.GIB,
        False,
    )
    cloudinit = pc.disk_volume(config, "ide2")
    assert cloudinit is not None and cloudinit.is_cdrom and cloudinit.is_cloudinit
    assert pc.disk_volume(config, "scsi1") is None
    assert pc.memory_mib(config["memory"]) == 2048 and pc.memory_mib(4096) == 4096 and pc.memory_mib("x") is None
    assert pc.net_macaddr(config["net0"]) == "BC:24:11:73:96:67" and pc.net_bridge(config["net0"]) == "vmbr0"
    assert pc.net_macaddr("model=virtio,macaddr=aa:bb:cc:dd:ee:ff") == "AA:BB:CC:DD:EE:FF"
    assert pc.tag_list(config["tags"]) == ["a", "b", "c"] and pc.tag_list(None) == []
    assert pc.int_value("2") == 2 and pc.int_value(3) == 3 and pc.int_value("x") is None
    assert pc.gib_size_string(20) == "20G" and pc.bytes_to_gib(pc.GIB * 3) == 3


def test_reads_and_pending() -> None:
    pending = [
        {"key": "cores", "value": 2},
        {"key": "memory", "value": "512", "pending": "2048"},
        {"key": "vga", "value": "serial0", "delete": 1},
    ]
    client = FakeClient(
        {
            VM + "/config": {"digest": "d", "cores": 2},
            VM + "/status/current": {"status": "stopped"},
            VM + "/pending": pending,
        }
    )
    assert pc.read_config(client, VM)["digest"] == "d"
    assert pc.read_status(client, VM)["status"] == "stopped"
    assert pc.pending_keys(pc.read_pending(client, VM)) == ["memory", "vga"]
    assert pc.vm_path("pve-test", 201) == "/nodes/pve-test/qemu/201"
    with pytest.raises(Exception) as info:
        pc.read_config(FakeClient({VM + "/config": None}), VM)
    assert getattr(info.value, "code", None) == "unexpected_response"
