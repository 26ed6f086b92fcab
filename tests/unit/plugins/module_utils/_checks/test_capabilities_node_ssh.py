# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The capability report's node SSH route: not configured without settings (nothing attempted), else a probe per node."""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.node_ssh import (
    PROBE_MARK,
    NodeSshRoute,
    NodeSshSettings,
    RunResult,
    probe_command,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.capabilities import node_ssh_report
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError

NODES = [{"node": "pve1", "online": True}, {"node": "pve2", "online": True}, {"node": "pve3", "online": False}]


@pytest.fixture
def options(tmp_path: Path) -> dict[str, t.Any]:
    (tmp_path / "key").write_text("k")
    (tmp_path / "known_hosts").write_text("h")
    return {"private_key_file": str(tmp_path / "key"), "known_hosts_file": str(tmp_path / "known_hosts")}


def test_not_configured_attempts_nothing() -> None:
    def factory(settings: NodeSshSettings) -> NodeSshRoute:
        raise AssertionError("no SSH without settings")

    report = node_ssh_report(NODES, None, factory)
    assert report == {
        "configured": False,
        "nodes": [{"node": n["node"], "status": "not_configured", "reason": "not_configured"} for n in NODES],
    }


def test_probe_per_node_with_reasons(options: dict[str, t.Any]) -> None:
    seen: list[tuple[str, int, str]] = []
    answers = {
        "pve1": RunResult(0, PROBE_MARK.encode() + b"\n", b""),
        "pve2": RunResult(255, b"", b"Host key verification failed.\r\n"),
    }

    def factory(settings: NodeSshSettings) -> NodeSshRoute:
        def runner(argv: t.Sequence[str], stdin: bytes | None, timeout: float) -> RunResult:
            seen.append((settings.host, settings.port, argv[-1]))
            return answers[settings.host]

        return NodeSshRoute(settings, runner)

    options["endpoints"] = {"pve2": "pve2:2222"}
    report = node_ssh_report(NODES, options, factory)
    assert report["configured"] is True
    assert [(r["node"], r["status"], r["reason"], r["port"]) for r in report["nodes"]] == [
        ("pve1", "usable", None, 22),
        ("pve2", "unusable", "node_ssh_host_key_not_verified", 2222),
        ("pve3", "unusable", "node_offline", 22),
    ]
    assert seen == [("pve1", 22, probe_command(None)), ("pve2", 2222, probe_command(None))]  # offline: not probed


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"endpoints": {"pve1": "a:b:c"}}, "node_ssh.endpoints.pve1"),
        ({"known_hosts_file": "/nonexistent"}, "node_ssh.known_hosts_file"),
        ({"endpoints": ["pve1"]}, "node_ssh.endpoints"),
    ],
)
def test_bad_settings_fail_with_the_option_path(options: dict[str, t.Any], change: dict[str, t.Any], path: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        node_ssh_report(NODES, {**options, **change})
    assert info.value.path == path


def test_ipv6_endpoint(options: dict[str, t.Any]) -> None:
    hosts: list[tuple[str, int]] = []

    def factory(settings: NodeSshSettings) -> NodeSshRoute:
        hosts.append((settings.host, settings.port))
        return NodeSshRoute(settings, lambda argv, stdin, timeout: RunResult(0, PROBE_MARK.encode(), b""))

    node_ssh_report(NODES[:1], {**options, "endpoints": {"pve1": "[2001:db8::1]:2200"}}, factory)
    assert hosts == [("2001:db8::1", 2200)]
