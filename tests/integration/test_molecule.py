# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection-level molecule scenario ``extensions/molecule/provision`` end to end.

``molecule test -s provision`` runs from the collection root (molecule 25+ finds collection scenarios under
``extensions/molecule/`` there): destroy, syntax, create (starts pvesim), prepare (the role prints and writes the
confirmation block), converge (provisions VM 201 with that block), idempotence (a second converge must change
nothing), verify (request log and journal evidence), destroy (stops pvesim). The scenario gets its own ephemeral
directory under ``tmp_path``, so parallel runs and other checkouts do not share state, and this test makes sure no
simulator of that directory survives, whatever happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCENARIO = "provision"


def _simulators_of(directory: Path) -> list[int]:
    """Pids of pvesim servers whose command line names a path below ``directory``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"pvesim" in cmdline and any(arg.startswith(str(directory).encode()) for arg in cmdline):
            pids.append(int(proc.name))
    return pids


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_molecule_provision_scenario(tmp_path: Path) -> None:
    ephemeral = tmp_path / "molecule"
    env = dict(os.environ)
    env.update(
        {
            "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",  # molecule runs ansible-playbook/ansible-config from PATH
            # tests/conftest.py points this at a directory with ansible_collections/vmanyware/proxmox -> this checkout.
            "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
            "MOLECULE_EPHEMERAL_DIRECTORY": str(ephemeral),
            "NO_COLOR": "1",
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    env.pop("ANSIBLE_CONFIG", None)  # molecule writes its own ansible.cfg into the ephemeral directory
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [str(BIN / "molecule"), "test", "-s", SCENARIO],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        leftovers = _simulators_of(tmp_path)
        _kill(leftovers)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"molecule test -s {SCENARIO} exited {proc.returncode}:\n{output[-8000:]}"
    assert not leftovers, f"destroy.yml left the simulator running: {leftovers}"
    for step in ("create", "prepare", "converge", "idempotence", "verify", "destroy"):
        assert f"{step}: Executed: Successful" in output, f"step {step} did not run:\n{output[-4000:]}"
    assert time.monotonic() - started < 240
