# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node SSH route: command lines (quoting), ssh argv, option validation, ssh failures to fixed codes (fake runner)."""

from __future__ import annotations

import shlex
import subprocess
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import node_ssh
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.node_ssh import (
    PROBE_MARK,
    NodeSshRoute,
    NodeSshSettings,
    RunResult,
    exec_command,
    fetch_command,
    probe_command,
    put_command,
    ssh_argv,
    validate_settings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError, NodeSshError

NASTY = "echo 'it'\"s\" $HOME `id` ; rm -rf / && printf '%s\\n' \\\\ \n second line"


@pytest.fixture
def settings(tmp_path: Path) -> NodeSshSettings:
    (tmp_path / "key").write_text("k")
    (tmp_path / "known_hosts").write_text("h")
    return NodeSshSettings(
        host="pve1.example.org", private_key_file=str(tmp_path / "key"), known_hosts_file=str(tmp_path / "known_hosts")
    )


class FakeRunner:
    """Records the argv and stdin of each run, answers from a queue (a RunResult or an exception)."""

    def __init__(self, *answers: RunResult | BaseException) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[str], bytes | None, float]] = []

    def __call__(self, argv: t.Sequence[str], stdin: bytes | None, timeout: float) -> RunResult:
        self.calls.append((list(argv), stdin, timeout))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def test_exec_command_survives_two_shell_parses() -> None:
    line = exec_command(301, NASTY)
    node_argv = shlex.split(line)  # what the node's login shell hands to pct
    assert node_argv == ["pct", "exec", "301", "--", "/bin/sh", "-c", NASTY]


def test_put_and_fetch_quote_the_container_path() -> None:
    path = "/tmp/a b/it's $x;.txt"
    node_argv = shlex.split(put_command(301, path))
    assert node_argv[:6] == ["pct", "exec", "301", "--", "/bin/sh", "-c"]
    assert shlex.split(node_argv[6]) == ["cat", ">", path]  # the container's sh sees one word: the path
    assert shlex.split(fetch_command(301, path)) == ["pct", "exec", "301", "--", "cat", "--", path]


def test_probe_command_is_read_only_and_names_the_vmid() -> None:
    assert probe_command(301).endswith("; pct status 301")
    assert probe_command(None).endswith("; pct help >/dev/null")
    assert probe_command(301).startswith(f"echo {PROBE_MARK};")


def test_ssh_argv_verifies_the_host_key_and_offers_one_key(settings: NodeSshSettings) -> None:
    argv = ssh_argv(settings, "pct status 301")
    options = {argv[i + 1].split("=", 1)[0]: argv[i + 1].split("=", 1)[1] for i, arg in enumerate(argv) if arg == "-o"}
    assert options["StrictHostKeyChecking"] == "yes" and options["UserKnownHostsFile"] == settings.known_hosts_file
    assert options["GlobalKnownHostsFile"] == "/dev/null" and options["IdentitiesOnly"] == "yes"
    assert options["BatchMode"] == "yes" and options["IdentityAgent"] == "none"
    assert argv[:3] == ["ssh", "-F", "none"] and "-T" in argv
    assert argv[argv.index("-i") + 1] == settings.private_key_file and argv[argv.index("-l") + 1] == "root"
    assert argv[-3:] == ["--", "pve1.example.org", "pct status 301"]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"host": ""}, "remote_addr"),
        ({"host": "-oProxyCommand=x"}, "remote_addr"),
        ({"port": 0}, "port"),
        ({"user": "root; id"}, "remote_user"),
        ({"private_key_file": ""}, "private_key_file"),
        ({"known_hosts_file": "/nonexistent/known_hosts"}, "known_hosts_file"),
    ],
)
def test_invalid_options_name_the_option_not_the_value(
    settings: NodeSshSettings, change: dict[str, t.Any], path: str
) -> None:
    bad = NodeSshSettings(**{**settings.__dict__, **change})
    with pytest.raises(ConfigurationError) as info:
        validate_settings(bad, 301)
    assert info.value.code == "configuration_error" and info.value.path == path
    for value in change.values():
        if value:
            assert str(value) not in info.value.message


@pytest.mark.parametrize("vmid", [None, "abc", 99, 1_000_000_000])
def test_vmid_is_required_and_in_range(settings: NodeSshSettings, vmid: t.Any) -> None:
    with pytest.raises(ConfigurationError) as info:
        validate_settings(settings, vmid, need_vmid=True)
    assert info.value.path == "vmid"


def test_valid_vmid_as_int(settings: NodeSshSettings) -> None:
    assert validate_settings(settings, "301") == 301


@pytest.mark.parametrize(
    ("stderr", "code"),
    [
        (
            b"No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking.\r\nHost key verification failed.\r\n",
            "node_ssh_host_key_not_verified",
        ),
        (b"root@127.0.0.1: Permission denied (publickey).\r\n", "node_ssh_auth_failed"),
        (b"ssh: connect to host 127.0.0.1 port 1: Connection refused\r\n", "node_ssh_unreachable"),
        (b"ssh: Could not resolve hostname nowhere.invalid: Name or service not known\r\n", "node_ssh_unreachable"),
    ],
)
def test_ssh_failures_become_fixed_codes_without_ssh_text(settings: NodeSshSettings, stderr: bytes, code: str) -> None:
    route = NodeSshRoute(settings, FakeRunner(RunResult(255, b"", stderr)))
    with pytest.raises(NodeSshError) as info:
        route.run("true")
    assert info.value.code == code
    assert "127.0.0.1" not in info.value.message and "root@" not in info.value.message


def test_the_commands_own_exit_255_is_the_commands(settings: NodeSshSettings) -> None:
    # pct's own die exits 255 too: without an ssh diagnostic it is the task's result, not a route failure
    runner = FakeRunner(
        RunResult(255, b"", b"can only push files to a running CT\n"),
        RunResult(255, b"", b"curl: (7) Failed to connect to localhost port 1: Connection refused\n"),
    )
    assert NodeSshRoute(settings, runner).run("pct push 301 a b").rc == 255
    assert NodeSshRoute(settings, runner).run(exec_command(301, "curl localhost:1; exit 255")).rc == 255


def test_timeout_and_missing_client(settings: NodeSshSettings) -> None:
    runner = FakeRunner(subprocess.TimeoutExpired(["ssh"], 5), FileNotFoundError("ssh"))
    route = NodeSshRoute(settings, runner)
    with pytest.raises(NodeSshError) as info:
        route.run("sleep 100", timeout=5)
    assert info.value.code == "node_ssh_command_timeout" and info.value.details == {"timeout": 5}
    with pytest.raises(NodeSshError) as info:
        route.run("true")
    assert info.value.code == "node_ssh_unreachable"
    assert runner.calls[0][2] == 5


def test_stdin_is_passed_to_the_client(settings: NodeSshSettings) -> None:
    runner = FakeRunner(RunResult(0, b"", b""))
    NodeSshRoute(settings, runner).run(put_command(301, "/x"), stdin=b"\x00\xff")
    assert runner.calls[0][1] == b"\x00\xff"


MARK = PROBE_MARK.encode() + b"\n"


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (RunResult(0, MARK + b"status: running\n", b""), None),
        (RunResult(0, MARK + b"status: stopped\n", b""), "node_ssh_container_not_running"),
        (
            RunResult(255, MARK, b"Configuration file 'nodes/pve1/lxc/301.conf' does not exist\n"),
            "node_ssh_container_not_found",
        ),
        (RunResult(255, MARK, b"ipcc_send_rec[1] failed: Connection refused\n"), "node_ssh_pct_failed"),
        (RunResult(127, MARK, b""), "node_ssh_pct_missing"),
        (
            RunResult(255, b"", b"kex_exchange_identification: read: Connection reset by peer\r\n"),
            "node_ssh_unreachable",
        ),
        (RunResult(255, b"", b"something ssh never said\n"), "node_ssh_unreachable"),
    ],
)
def test_probe_outcomes(settings: NodeSshSettings, answer: RunResult, code: str | None) -> None:
    runner = FakeRunner(answer)
    route = NodeSshRoute(settings, runner)
    if code is None:
        route.probe(301)
    else:
        with pytest.raises(NodeSshError) as info:
            route.probe(301)
        assert info.value.code == code
    assert runner.calls[0][0][-1] == probe_command(301)


def test_subprocess_runner_passes_bytes_through() -> None:
    result = node_ssh.subprocess_runner(["cat"], bytes(range(256)), 10)
    assert (result.rc, result.stdout) == (0, bytes(range(256)))
