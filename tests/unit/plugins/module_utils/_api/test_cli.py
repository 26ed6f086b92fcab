# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CLI equivalents of planned requests, compared with the documented ``qm``/``pct`` syntax (qm(1), pct(1))."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import typing as t

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.cli import cli_command, with_cli
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import Request
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.guest import decode_sshkeys, encode_sshkeys

VM = "/nodes/pve-test/qemu/201"


@pytest.mark.parametrize(
    ("method", "path", "params", "expected"),
    [
        # qm clone <vmid> <newid> [OPTIONS]
        (
            "POST",
            "/nodes/pve-test/qemu/9000/clone",
            {"newid": 201, "name": "kernel-lab", "full": 1, "storage": "local-lvm"},
            "qm clone 9000 201 --name kernel-lab --full 1 --storage local-lvm",
        ),
        # qm set <vmid> [OPTIONS]
        (
            "PUT",
            VM + "/config",
            {"cores": 2, "memory": "2048", "digest": "ab12"},
            "qm set 201 --cores 2 --memory 2048 --digest ab12",
        ),
        (
            "PUT",
            VM + "/config",
            {"ipconfig0": "ip=dhcp", "delete": "cicustom,ciupgrade"},
            "qm set 201 --ipconfig0 ip=dhcp --delete cicustom,ciupgrade",
        ),
        # qm resize <vmid> <disk> <size> [OPTIONS]
        (
            "PUT",
            VM + "/resize",
            {"disk": "scsi0", "size": "20G", "digest": "ab12"},
            "qm resize 201 scsi0 20G --digest ab12",
        ),
        # qm cloudinit update <vmid>
        ("PUT", VM + "/cloudinit", {}, "qm cloudinit update 201"),
        # qm start <vmid> [OPTIONS]
        ("POST", VM + "/status/start", {}, "qm start 201"),
        # qm snapshot <vmid> <snapname> [OPTIONS]
        (
            "POST",
            VM + "/snapshot",
            {"snapname": "vmanyware-1", "vmstate": 0, "description": "after provisioning"},
            "qm snapshot 201 vmanyware-1 --vmstate 0 --description 'after provisioning'",
        ),
        # qm guest exec <vmid> [<extra-args>]
        (
            "POST",
            VM + "/agent/exec",
            {"command": ["apt-get", "install", "-y", "curl"]},
            "qm guest exec 201 -- apt-get install -y curl",
        ),
        # pct start <vmid>, pct snapshot <vmid> <snapname>
        ("POST", "/nodes/pve-test/lxc/301/status/start", {}, "pct start 301"),
        ("POST", "/nodes/pve-test/lxc/301/snapshot", {"snapname": "s1"}, "pct snapshot 301 s1"),
    ],
)
def test_documented_syntax(method: str, path: str, params: dict, expected: str) -> None:
    assert cli_command(method, path, params) == expected


def test_values_are_shell_quoted_and_parse_back() -> None:
    description = "vmanyware operation op-1\ndefinitionHash abc\nplanHash def"
    line = cli_command(
        "POST", "/nodes/pve-test/qemu/9000/clone", {"newid": 201, "description": description, "name": "a b; rm -rf /"}
    )
    assert shlex.split(line) == ["qm", "clone", "9000", "201", "--description", description, "--name", "a b; rm -rf /"]


def test_no_equivalent_and_booleans() -> None:
    assert cli_command("GET", VM + "/config", {}) is None
    assert cli_command("PUT", "/nodes/pve-test/lxc/301/cloudinit", {}) is None  # containers have no cloud-init drive
    assert cli_command("PUT", VM + "/resize", {"disk": "scsi0"}) is None  # a positional argument is missing
    assert (
        cli_command("POST", "/nodes/pve-test/qemu/9000/clone", {"newid": 2, "full": True}) == "qm clone 9000 2 --full 1"
    )


def test_summary_gets_cli_and_secrets_stay_redacted() -> None:
    summary = Request("PUT", VM + "/config", {"cipassword": "hunter2", "ciuser": "debian"}).summary()
    previewed = with_cli(summary)
    assert previewed["cli"] == "qm set 201 --cipassword '<redacted>' --ciuser debian"
    assert "hunter2" not in repr(previewed) and previewed["params"] == summary["params"]
    assert "cli" not in with_cli({"method": "GET", "path": VM + "/config", "params": {}})


def test_container_create_and_template_download() -> None:
    description = "vmanyware operation op-1\ndefinitionHash abc\nplanHash def"
    line = cli_command(
        "POST",
        "/nodes/pve-test/lxc",
        {
            "vmid": 320,
            "ostemplate": "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst",
            "rootfs": "local-lvm:20",
            "unprivileged": 1,
            "description": description,
        },
    )
    assert shlex.split(line) == [
        "pct",
        "create",
        "320",
        "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst",
        "--rootfs",
        "local-lvm:20",
        "--unprivileged",
        "1",
        "--description",
        description,
    ]
    assert (
        cli_command(
            "POST",
            "/nodes/pve-test/aplinfo",
            {"storage": "local", "template": "debian-12-standard_12.12-1_amd64.tar.zst"},
        )
        == "pveam download local debian-12-standard_12.12-1_amd64.tar.zst"
    )
    assert cli_command("POST", "/nodes/pve-test/lxc", {"vmid": 320}) is None


# A stand-in for qm/pct on the node: what their param_mapping does with a file parameter (qemu-server's PVE/CLI/qm.pm:
# ``sshkeys`` -> ``uri_escape(file_get_contents($path))``; pve-container's PVE/CLI/pct.pm: ``ssh-public-keys`` -> the
# file's content), then the API parameters the command amounts to, as JSON.
_NODE_CLI = r"""#!{python}
import json, sys
from urllib.parse import quote
tool, args = sys.argv[0].rsplit("/", 1)[1], sys.argv[1:]
positional, params = [], {{}}
while args:
    word = args.pop(0)
    if word.startswith("--"):
        params[word[2:]] = args.pop(0)
    else:
        positional.append(word)
for name, convert in (("sshkeys", lambda text: quote(text, safe="")), ("ssh-public-keys", lambda text: text)):
    if name in params:
        with open(params[name], encoding="utf-8") as handle:
            params[name] = convert(handle.read())  # uri_escape keeps exactly RFC 3986's unreserved characters, as quote(safe="")
print(json.dumps({{"tool": tool, "positional": positional, "params": params}}))
"""

KEYS = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC+/x= bob's key $HOME `id` \\n",
]


def _run_on_node(tmp_path: t.Any, command: str) -> dict[str, t.Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("qm", "pct"):
        (bin_dir / tool).write_text(_NODE_CLI.format(python=sys.executable))
        (bin_dir / tool).chmod(0o755)
    proc = subprocess.run(
        ["bash", "-euc", command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env=dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"])),
    )
    return t.cast("dict[str, t.Any]", json.loads(proc.stdout))


def test_qm_set_sshkeys_writes_the_decoded_keys_to_a_file_and_passes_the_file(tmp_path: t.Any) -> None:
    """Issue 31: ``qm set --sshkeys`` takes a file (qm URI-escapes its content); the printed command must do what the API request does."""
    encoded = encode_sshkeys(KEYS)
    params = {"ciuser": "debian", "sshkeys": encoded, "ipconfig0": "ip=dhcp"}
    command = cli_command("PUT", VM + "/config", params)
    assert (
        command is not None
        and command.splitlines()[-1] == "qm set 201 --ciuser debian --sshkeys vmanyware-201.sshkeys --ipconfig0 ip=dhcp"
    )
    assert encoded not in command  # the encoded value is what qm would reject as a file name
    ran = _run_on_node(tmp_path, command)
    # the same parameters; the here-document ends the file with a newline, which PVE keeps and cloud-init ignores (an empty line)
    assert ran == {"tool": "qm", "positional": ["set", "201"], "params": dict(params, sshkeys=encoded + "%0A")}
    assert decode_sshkeys(ran["params"]["sshkeys"]) == KEYS == decode_sshkeys(encoded)
    assert (tmp_path / "vmanyware-201.sshkeys").read_text() == "\n".join(KEYS) + "\n"


def test_pct_create_ssh_public_keys_passes_a_file_too(tmp_path: t.Any) -> None:
    params = {
        "vmid": 320,
        "ostemplate": "local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst",
        "ssh-public-keys": "\n".join(KEYS),
        "rootfs": "local-lvm:20",
    }
    command = cli_command("POST", "/nodes/pve-test/lxc", params)
    assert command is not None and "--ssh-public-keys vmanyware-320.sshkeys" in command
    ran = _run_on_node(tmp_path, command)
    assert ran["tool"] == "pct" and ran["positional"] == ["create", "320", params["ostemplate"]]
    assert ran["params"] == {"ssh-public-keys": params["ssh-public-keys"] + "\n", "rootfs": "local-lvm:20"}


def test_a_placeholder_or_empty_keys_value() -> None:
    command = cli_command("PUT", VM + "/config", {"sshkeys": "<ephemeral key SHA256:abc>"})
    assert command == "qm set 201 --sshkeys '<vmanyware-201.sshkeys: a file holding <ephemeral key SHA256:abc>>'"
    assert (
        cli_command("PUT", VM + "/config", {"sshkeys": ""})
        == ": > vmanyware-201.sshkeys\nqm set 201 --sshkeys vmanyware-201.sshkeys"
    )
