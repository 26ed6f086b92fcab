# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a cleanup reports as removed: only the volumes the guest (VM or container) owns; its TLS rule."""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import create as _operation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.cleanup import owned_volumes, run_cleanup
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    abandon_operation,
    create_operation,
    expected_confirmation,
    verified_scope,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan


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
    assert owned_volumes(config, 201) == [
        "local-lvm:vm-201-disk-1",
        "local-lvm:vm-201-cloudinit",
        "local-lvm:vm-201-disk-0",
        "local-lvm:base-9000-disk-0/vm-201-disk-3",
        "nfs:201/vm-201-disk-2.qcow2",
    ]
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
    assert owned_volumes(config, 320) == [
        "local-zfs:subvol-320-disk-1",
        "local-lvm:vm-320-disk-0",
        "local-lvm:vm-320-disk-2",
    ]


# -- verified TLS (issue 31): the cleanup refuses unverified TLS exactly as every stage does -------------------------------

REPO = Path(__file__).resolve().parents[5]
PIN = "ab" * 32
SECRET = "00000000-test-secret-0000-000000000000"


def _abandoned_operation(journal: Path) -> str:
    """An abandoned operation confirmed for the pinned provider (127.0.0.1:9, pin ``PIN``): eligible for a cleanup."""
    planned = build_plan(
        catalog=(REPO / "examples/catalog.yml").read_text(encoding="utf-8"),
        definition=(REPO / "examples/definition.yml").read_text(encoding="utf-8"),
        target_vmid=201,
    )
    store = JournalStore(str(journal))
    scope = verified_scope(
        build_settings(
            host="127.0.0.1", port=9, token_id="automation@pve!vmanyware", token_secret=SECRET, fingerprint=PIN
        )
    )
    created = create_operation(
        store,
        planned=planned,
        provider_scope_id=scope,
        confirmation=expected_confirmation(planned.plan, scope),
        idempotency_key=None,
        environ={"VMANYWARE_PROVISIONING_ENABLED": "true"},
    )
    abandon_operation(store, created["operation_id"], "test")
    return str(created["operation_id"])


@pytest.mark.parametrize("read_only", [False, True])
def test_cleanup_refuses_unverified_tls_before_any_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_only: bool
) -> None:
    """validate_certs false and no pin: tls_unverified before the scope handshake and before a client exists; the read-only
    opt-in does not apply to a cleanup (it stops and deletes)."""
    journal = tmp_path / "journal"
    operation_id = _abandoned_operation(journal)
    handshakes: list[t.Any] = []
    monkeypatch.setattr(_operation, "certificate_fingerprint", handshakes.append)
    clients: list[t.Any] = []
    params = {
        "journal_dir": str(journal),
        "operation_id": operation_id,
        "allow_completed": False,
        "lifecycle_enabled": True,
        "stop": True,
        "api_host": "127.0.0.1",
        "api_port": 9,
        "api_token_id": "automation@pve!vmanyware",
        "api_token_secret": SECRET,
        "validate_certs": False,
        "unverified_tls_read_only": read_only,
    }
    for check_mode in (True, False):
        with pytest.raises(VmanywareError) as info:
            run_cleanup(params, check_mode=check_mode, environ={}, client_factory=clients.append)
        assert info.value.code == "tls_unverified"
        assert info.value.details["rule"] == ("scope" if read_only else "verified_tls_required")
    assert handshakes == [] and clients == []
    document = JournalStore(str(journal)).load(operation_id)
    assert document.get("lifecycle") is None or document["lifecycle"].get("cleanup") is None  # no cleanup was recorded
