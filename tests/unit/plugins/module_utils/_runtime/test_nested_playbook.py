# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nested run's process handling (_runtime/nested_playbook.py) with small stand-in children: the recap read from
its output, a cancel ending its process group, and the child dying with its parent (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.cancel import RunCancelled
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.nested_playbook import (
    API_ENVIRONMENT,
    NestedPlaybook,
    child_environment,
    run_nested,
)

RECAP = "vmanyware_guest : ok=5 changed=2 unreachable=0 failed=0 skipped=1 rescued=0 ignored=0"


def nested(tmp_path: Path, script: str) -> NestedPlaybook:
    return NestedPlaybook(
        argv=[sys.executable, "-c", script], env=dict(os.environ), workdir=str(tmp_path),
        output_path=str(tmp_path / "output.txt"),
    )  # fmt: skip


def alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_the_counts_come_from_the_recap_and_the_output_file_is_private(tmp_path: Path) -> None:
    result = run_nested(nested(tmp_path, "print('PLAY RECAP ***'); print(%r)" % RECAP), lambda: None, 30)
    assert (result.ok, result.changed, result.failed, result.unreachable, result.rc) == (5, 2, 0, 0, 0)
    assert (tmp_path / "output.txt").stat().st_mode & 0o777 == 0o600


def test_a_cancel_ends_the_child_and_its_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    script = textwrap.dedent(
        """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(%r, "w").write(str(child.pid))
        time.sleep(60)
        """
        % str(pid_file)
    )
    calls = {"n": 0}

    def cancel() -> str | None:
        calls["n"] += 1
        return "run_cancelled" if pid_file.exists() and pid_file.read_text() else None

    started = time.monotonic()
    with pytest.raises(RunCancelled):
        run_nested(nested(tmp_path, script), cancel, 60)
    assert time.monotonic() - started < 30
    grandchild = int(pid_file.read_text())
    for _attempt in range(50):
        if not alive(grandchild):
            break
        time.sleep(0.1)
    assert not alive(grandchild)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_child_dies_with_its_parent(tmp_path: Path) -> None:
    """A worker killed outright (SIGKILL, no chance to clean up) takes the nested run with it."""
    pid_file = tmp_path / "child.pid"
    parent = textwrap.dedent(
        """
        import sys
        from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.nested_playbook import (
            NestedPlaybook, run_nested)
        script = "import os, time; open(%r, 'w').write(str(os.getpid())); time.sleep(60)"
        run_nested(NestedPlaybook([sys.executable, "-c", script], {}, %r, %r), lambda: None, 120)
        """
        % (str(pid_file), str(tmp_path), str(tmp_path / "output.txt"))
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    process = subprocess.Popen([sys.executable, "-c", parent], env=env)  # noqa: S603
    try:
        for _attempt in range(100):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert alive(child)
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        for _attempt in range(50):
            if not alive(child):
                break
            time.sleep(0.1)
        assert not alive(child)
    finally:
        if process.poll() is None:
            process.kill()


def test_the_child_environment_replaces_proxmox_variables_and_adds_no_credential_for_ssh() -> None:
    base = {"PATH": "/usr/bin", "PROXMOX_TOKEN_SECRET": "from-outside", "PROXMOX_HOST": "other"}
    qga = child_environment(base, {"api_host": "127.0.0.1", "api_port": 8006, "validate_certs": False}, "qga")
    assert (qga["PROXMOX_HOST"], qga["PROXMOX_PORT"], qga["PROXMOX_VALIDATE_CERTS"]) == ("127.0.0.1", "8006", "false")
    assert "PROXMOX_TOKEN_SECRET" not in qga and qga["PATH"] == "/usr/bin"
    ssh = child_environment(base, {"api_token_secret": "x"}, "ssh")
    assert not any(key.startswith("PROXMOX_") for key in ssh)


def test_the_child_gets_every_connection_option_the_qga_plugin_reads_but_never_the_read_only_tls_exception() -> None:
    import yaml

    from ansible_collections.vmanyware.proxmox.plugins.connection import qga

    options = yaml.safe_load(qga.DOCUMENTATION)["options"]
    connection = {"api_host": "h", "api_token_secret": "s", "api_timeout": 5, "unverified_tls_read_only": True}
    env = child_environment({"PROXMOX_UNVERIFIED_TLS_READ_ONLY": "true"}, connection, "qga")
    assert (env["PROXMOX_HOST"], env["PROXMOX_TOKEN_SECRET"], env["PROXMOX_TIMEOUT"]) == ("h", "s", "5")
    assert not any("UNVERIFIED" in key for key in env)
    for option, name in API_ENVIRONMENT.items():
        assert options[option]["env"][0]["name"] == name  # the plugin reads the variable the child is given
