# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The connection plugin vmanyware.proxmox.pct with a fake ssh runner: probe first, exec, put/fetch, fixed codes."""

from __future__ import annotations

import shlex
import typing as t
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.playbook.play_context import PlayContext
import yaml
from ansible import constants as C

from ansible_collections.vmanyware.proxmox.plugins.connection import pct
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.node_ssh import PROBE_MARK, NodeSshRoute, RunResult

NAME = "vmanyware.proxmox.pct"
# the option definitions the plugin loader registers from DOCUMENTATION (plus the pipelining fragment's one)
C.config.initialize_plugin_configuration_definitions(
    "connection",
    NAME,
    {**yaml.safe_load(pct.DOCUMENTATION)["options"], "pipelining": {"type": "boolean", "default": False}},
)
RUNNING = RunResult(0, PROBE_MARK.encode() + b"\nstatus: running\n", b"")


class Runner:
    def __init__(self, *answers: RunResult) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[str], bytes | None]] = []

    def __call__(self, argv: t.Sequence[str], stdin: bytes | None, timeout: float) -> RunResult:
        self.calls.append((list(argv), stdin))
        return self.answers.pop(0)

    def node_argv(self, index: int) -> list[str]:
        return shlex.split(self.calls[index][0][-1])


def connection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, runner: Runner, **options: t.Any) -> pct.Connection:
    (tmp_path / "key").write_text("k")
    (tmp_path / "known_hosts").write_text("h")
    monkeypatch.setattr(pct, "NodeSshRoute", lambda settings: NodeSshRoute(settings, runner))
    conn = pct.Connection(PlayContext())
    conn._load_name = NAME  # pylint: disable=protected-access  # what the plugin loader sets
    direct = {
        "remote_addr": "pve1.example.org",
        "private_key_file": str(tmp_path / "key"),
        "known_hosts_file": str(tmp_path / "known_hosts"),
        "vmid": 301,
        **options,
    }
    conn.set_options(direct=direct)
    return conn


def test_probe_then_exec_with_stdin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner = Runner(RUNNING, RunResult(3, b"out", b"err"), RunResult(0, b"", b""))
    conn = connection(monkeypatch, tmp_path, runner, port=2222, remote_user="root")
    assert conn.exec_command("echo 'a b' | wc -c", in_data=b"module") == (3, b"out", b"err")
    assert runner.node_argv(0)[-3:] == ["pct", "status", "301"]
    assert runner.node_argv(1) == ["pct", "exec", "301", "--", "/bin/sh", "-c", "echo 'a b' | wc -c"]
    assert runner.calls[1][1] == b"module"
    argv = runner.calls[1][0]
    assert argv[argv.index("-p") + 1] == "2222" and "StrictHostKeyChecking=yes" in argv
    conn.exec_command("true")
    assert len(runner.calls) == 3  # one probe per connection


def test_put_streams_bytes_and_fetch_writes_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    payload = bytes(range(256)) * 8
    runner = Runner(RUNNING, RunResult(0, b"", b""), RunResult(0, payload, b""))
    conn = connection(monkeypatch, tmp_path, runner)
    (tmp_path / "src").write_bytes(payload)
    conn.put_file(str(tmp_path / "src"), "/root/dest file")
    assert runner.calls[1][1] == payload
    assert shlex.split(runner.node_argv(1)[-1]) == ["cat", ">", "/root/dest file"]
    conn.fetch_file("/root/dest file", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == payload
    assert runner.node_argv(2) == ["pct", "exec", "301", "--", "cat", "--", "/root/dest file"]


def test_transfer_failure_has_a_code_and_no_container_text(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner = Runner(RUNNING, RunResult(1, b"", b"sh: 1: cannot create /nope/x: Directory nonexistent\n"))
    conn = connection(monkeypatch, tmp_path, runner)
    (tmp_path / "src").write_bytes(b"x")
    with pytest.raises(AnsibleError, match="^node_ssh_transfer_failed") as info:
        conn.put_file(str(tmp_path / "src"), "/nope/x")
    assert "nonexistent" not in str(info.value)
    with pytest.raises(AnsibleFileNotFound):
        conn.put_file(str(tmp_path / "absent"), "/x")


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (RunResult(255, b"", b"Host key verification failed.\r\n"), "node_ssh_host_key_not_verified"),
        (
            RunResult(255, b"", b"ssh: connect to host pve1.example.org port 22: Connection refused\r\n"),
            "node_ssh_unreachable",
        ),
        (RunResult(127, PROBE_MARK.encode() + b"\n", b""), "node_ssh_pct_missing"),
        (RunResult(0, PROBE_MARK.encode() + b"\nstatus: stopped\n", b""), "node_ssh_container_not_running"),
    ],
)
def test_probe_failures_stop_before_any_pct_exec(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, answer: RunResult, code: str
) -> None:
    runner = Runner(answer)
    conn = connection(monkeypatch, tmp_path, runner)
    with pytest.raises(AnsibleConnectionFailure, match=f"^{code}: ") as info:
        conn.exec_command("touch /x")
    assert len(runner.calls) == 1 and "pct exec" not in runner.calls[0][0][-1]
    assert "pve1.example.org" not in str(info.value)


def test_missing_known_hosts_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    runner = Runner()
    conn = connection(monkeypatch, tmp_path, runner, known_hosts_file=None)
    with pytest.raises(AnsibleConnectionFailure, match=r"^configuration_error: .*\(option known_hosts_file\)"):
        conn.exec_command("true")
    conn = connection(monkeypatch, tmp_path, runner, vmid=None)
    with pytest.raises(AnsibleConnectionFailure, match=r"\(option vmid\)"):
        conn.exec_command("true")
    assert runner.calls == []
