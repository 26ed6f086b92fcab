# SPDX-License-Identifier: GPL-3.0-or-later
"""``pip install ./tools/pvesim`` on its own, in a fresh virtual environment, gives a working simulator.

The folder is copied first, so nothing outside it (the repository, the development venv) can be
what makes it work. Needs the package index (PyPI) for cryptography and PyYAML.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest
import requests

PVESIM = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.integration


def test_pip_install_of_the_folder_alone(tmp_path: Path) -> None:
    source = tmp_path / "pvesim-src"
    shutil.copytree(
        PVESIM, source, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__", "tests", "benchmarks", "build")
    )
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    check = subprocess.run(
        [str(python), "-c", "import pvesim.packageindex as p, pvesim.schema as s; print(len(p.load_index()))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert check.returncode == 0 and int(check.stdout) > 60000, check.stderr
    state = tmp_path / "state"
    server = subprocess.Popen(
        [str(python), "-m", "pvesim", "serve", "--port", "0", "--state-dir", str(state)],  # pylint: disable=consider-using-with
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        while not (state / "connection.json").exists():
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.stderr else ""
            time.sleep(0.05)
        conn = json.loads((state / "connection.json").read_text())
        token = conn["tokens"]["full"]
        reply = requests.get(
            conn["url"] + "/version",
            headers={"Authorization": f"PVEAPIToken={token['id']}={token['secret']}"},
            verify=conn["ca_file"],
            timeout=10,
        )
        assert reply.status_code == 200 and reply.json()["data"]["version"].startswith("9.")
    finally:
        server.terminate()
        server.wait(timeout=10)
        if server.stderr:
            server.stderr.close()
    assert sys.executable != str(python)
