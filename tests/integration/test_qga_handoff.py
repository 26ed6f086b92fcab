# SPDX-License-Identifier: GPL-3.0-or-later
"""The handoff to the qga connection: the journal inventory's ``connection: qga`` and the provision role's
``provision_guest_connection: qga`` give later plays a VM reached through the guest agent (no SSH, no address)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml
from test_inventory_journal import _inventory, _operation

from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_the_journal_inventory_hands_vms_to_the_qga_connection(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    store = JournalStore(str(journal))
    _operation(store, "web", 301, "192.0.2.31")
    _operation(store, "noaddr", 302, None)  # readiness recorded no address: unreachable by SSH, fine for the agent
    ssh = _inventory(tmp_path, journal)["_meta"]["hostvars"]
    assert sorted(ssh) == ["web-301"] and "ansible_connection" not in ssh["web-301"]
    qga = _inventory(tmp_path, journal, connection="qga", known_hosts_dir=str(tmp_path / "qga_known_hosts"))["_meta"][
        "hostvars"
    ]
    assert sorted(qga) == ["noaddr-302", "web-301"]
    for name, vmid in (("web-301", 301), ("noaddr-302", 302)):
        hostvars = qga[name]
        assert hostvars["ansible_connection"] == "vmanyware.proxmox.qga"
        assert (hostvars["vmanyware_vmid"], hostvars["vmanyware_node"]) == (vmid, "pve")
        assert not {"ansible_host", "ansible_user", "ansible_ssh_common_args"} & set(hostvars)
    assert not (tmp_path / "qga_known_hosts").exists()  # no SSH trust to write for the agent


PLAYBOOK = [
    {
        "name": "Provision",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": [
            {
                "role": "vmanyware.proxmox.provision",
                "provision_catalog_path": str(REPO / "examples/catalog.yml"),
                "provision_definition_path": str(REPO / "examples/definition.yml"),
                "provision_target_vmid": 201,
                "provision_confirmation_file": "{{ confirm_file }}",
                "provision_known_hosts_file": "{{ known_hosts_file }}",
                "provision_guest_connection": "qga",
            }
        ],
    },
    {
        "name": "Configure through the guest agent",
        "hosts": "vmanyware_provisioned",
        "gather_facts": False,
        "tasks": [
            {"name": "hostname", "ansible.builtin.raw": "cat /etc/hostname", "register": "configure_hostname"},
            {
                "name": "report",
                "ansible.builtin.debug": {
                    "msg": "VIA={{ ansible_connection }} VMID={{ vmanyware_vmid }} NAME={{ configure_hostname.stdout | trim }}"
                },
            },
        ],
    },
]


def test_the_provision_role_hands_the_vm_to_the_qga_connection(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    conn = pvesim.connection
    env = dict(
        {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")},
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal"),
        VMANYWARE_PROVISIONING_ENABLED="true",
        ANSIBLE_NOCOLOR="1",
    )
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump(PLAYBOOK, sort_keys=False), encoding="utf-8")
    confirm = tmp_path / "confirm.yml"
    args = [
        str(BIN / "ansible-playbook"),
        str(play),
        "-e",
        "confirm_file=%s" % confirm,
        "-e",
        "known_hosts_file=%s" % (tmp_path / "known_hosts"),
    ]
    review = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert review.returncode == 0 and confirm.is_file(), review.stdout[-3000:]
    applied = subprocess.run(
        args + ["-e", "@%s" % confirm], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert applied.returncode == 0, applied.stdout[-3000:]
    assert re.search(r'"msg": "VIA=vmanyware\.proxmox\.qga VMID=201 NAME=[a-z0-9][a-z0-9.-]*"', applied.stdout), (
        applied.stdout[-3000:]
    )
    assert pvesim.requests("POST", r"/qemu/201/agent/exec$")  # the second play ran through the agent
    assert conn["tokens"]["full"]["secret"] not in applied.stdout + applied.stderr
