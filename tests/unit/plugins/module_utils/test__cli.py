# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CLI equivalents of planned requests, compared with the documented ``qm``/``pct`` syntax (qm(1), pct(1))."""

from __future__ import annotations

import shlex

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._cli import cli_command, with_cli
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stage import Request

VM = "/nodes/pve-test/qemu/201"


@pytest.mark.parametrize(("method", "path", "params", "expected"), [
    # qm clone <vmid> <newid> [OPTIONS]
    ("POST", "/nodes/pve-test/qemu/9000/clone", {"newid": 201, "name": "kernel-lab", "full": 1, "storage": "local-lvm"},
     "qm clone 9000 201 --name kernel-lab --full 1 --storage local-lvm"),
    # qm set <vmid> [OPTIONS]
    ("PUT", VM + "/config", {"cores": 2, "memory": "2048", "digest": "ab12"}, "qm set 201 --cores 2 --memory 2048 --digest ab12"),
    ("PUT", VM + "/config", {"ipconfig0": "ip=dhcp", "delete": "cicustom,ciupgrade"},
     "qm set 201 --ipconfig0 ip=dhcp --delete cicustom,ciupgrade"),
    # qm resize <vmid> <disk> <size> [OPTIONS]
    ("PUT", VM + "/resize", {"disk": "scsi0", "size": "20G", "digest": "ab12"}, "qm resize 201 scsi0 20G --digest ab12"),
    # qm cloudinit update <vmid>
    ("PUT", VM + "/cloudinit", {}, "qm cloudinit update 201"),
    # qm start <vmid> [OPTIONS]
    ("POST", VM + "/status/start", {}, "qm start 201"),
    # qm snapshot <vmid> <snapname> [OPTIONS]
    ("POST", VM + "/snapshot", {"snapname": "vmanyware-1", "vmstate": 0, "description": "after provisioning"},
     "qm snapshot 201 vmanyware-1 --vmstate 0 --description 'after provisioning'"),
    # qm guest exec <vmid> [<extra-args>]
    ("POST", VM + "/agent/exec", {"command": ["apt-get", "install", "-y", "curl"]}, "qm guest exec 201 -- apt-get install -y curl"),
    # pct start <vmid>, pct snapshot <vmid> <snapname>
    ("POST", "/nodes/pve-test/lxc/301/status/start", {}, "pct start 301"),
    ("POST", "/nodes/pve-test/lxc/301/snapshot", {"snapname": "s1"}, "pct snapshot 301 s1"),
])
def test_documented_syntax(method: str, path: str, params: dict, expected: str) -> None:
    assert cli_command(method, path, params) == expected


def test_values_are_shell_quoted_and_parse_back() -> None:
    description = "vmanyware operation op-1\ndefinitionHash abc\nplanHash def"
    line = cli_command("POST", "/nodes/pve-test/qemu/9000/clone", {"newid": 201, "description": description, "name": "a b; rm -rf /"})
    assert shlex.split(line) == ["qm", "clone", "9000", "201", "--description", description, "--name", "a b; rm -rf /"]


def test_no_equivalent_and_booleans() -> None:
    assert cli_command("GET", VM + "/config", {}) is None
    assert cli_command("PUT", "/nodes/pve-test/lxc/301/cloudinit", {}) is None  # containers have no cloud-init drive
    assert cli_command("PUT", VM + "/resize", {"disk": "scsi0"}) is None  # a positional argument is missing
    assert cli_command("POST", "/nodes/pve-test/qemu/9000/clone", {"newid": 2, "full": True}) == "qm clone 9000 2 --full 1"


def test_summary_gets_cli_and_secrets_stay_redacted() -> None:
    summary = Request("PUT", VM + "/config", {"cipassword": "hunter2", "ciuser": "debian"}).summary()
    previewed = with_cli(summary)
    assert previewed["cli"] == "qm set 201 --cipassword '<redacted>' --ciuser debian"
    assert "hunter2" not in repr(previewed) and previewed["params"] == summary["params"]
    assert "cli" not in with_cli({"method": "GET", "path": VM + "/config", "params": {}})


def test_container_create_and_template_download() -> None:
    description = "vmanyware operation op-1\ndefinitionHash abc\nplanHash def"
    line = cli_command("POST", "/nodes/pve-test/lxc", {"vmid": 320, "ostemplate": "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst",
                                                       "rootfs": "local-lvm:20", "unprivileged": 1, "description": description})
    assert shlex.split(line) == ["pct", "create", "320", "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst", "--rootfs", "local-lvm:20",
                                 "--unprivileged", "1", "--description", description]
    assert cli_command("POST", "/nodes/pve-test/aplinfo", {"storage": "local", "template": "debian-12-standard_12.12-1_amd64.tar.zst"}) == \
        "pveam download local debian-12-standard_12.12-1_amd64.tar.zst"
    assert cli_command("POST", "/nodes/pve-test/lxc", {"vmid": 320}) is None
