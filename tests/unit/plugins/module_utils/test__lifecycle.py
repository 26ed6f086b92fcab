# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a cleanup reports as removed: only the volumes the guest (VM or container) owns."""

from __future__ import annotations

from ansible_collections.vmanyware.proxmox.plugins.module_utils._lifecycle import owned_volumes


def test_owned_volumes_are_the_vms_own_disks_only() -> None:
    config = {
        "scsi0": "local-lvm:vm-201-disk-0,size=20G",
        "ide2": "local-lvm:vm-201-cloudinit,media=cdrom",
        "ide0": "local:iso/debian-12.iso,media=cdrom",  # a shared image: referenced, not owned
        "efidisk0": "local-lvm:vm-201-disk-1,efitype=4m",
        "unused0": "nfs:201/vm-201-disk-2.qcow2",
        "virtio1": "local-lvm:vm-2011-disk-0",  # another VM's volume
        "scsi1": "local-lvm:base-9000-disk-0/vm-201-disk-3",  # a linked clone's own volume on its base
        "net0": "virtio=BC:24:11:00:00:01,bridge=vmbr0",
        "description": "vm-201-disk-9 is not a drive",
    }
    assert owned_volumes(config, 201) == ["local-lvm:vm-201-disk-1", "local-lvm:vm-201-cloudinit", "local-lvm:vm-201-disk-0",
                                          "local-lvm:base-9000-disk-0/vm-201-disk-3", "nfs:201/vm-201-disk-2.qcow2"]
    assert owned_volumes({}, 201) == []


def test_owned_volumes_of_a_container_are_its_rootfs_and_mount_points() -> None:
    config = {
        "rootfs": "local-lvm:vm-320-disk-0,size=20G",
        "mp0": "local-zfs:subvol-320-disk-1,mp=/srv,size=8G",
        "mp1": "/srv/shared,mp=/mnt/shared",  # a bind mount: referenced, not owned
        "mp2": "local-lvm:vm-3201-disk-0,mp=/other",  # another guest's volume
        "unused0": "local-lvm:vm-320-disk-2",
        "net0": "name=eth0,bridge=vmbr0,hwaddr=BC:24:11:00:00:01,ip=dhcp",
        "hostname": "vm-320-disk-9",
    }
    assert owned_volumes(config, 320) == ["local-zfs:subvol-320-disk-1", "local-lvm:vm-320-disk-0", "local-lvm:vm-320-disk-2"]
