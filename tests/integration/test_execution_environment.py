# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The AWX / Automation Platform packaging: execution-environment.yml, meta/execution-environment.yml
and awx/credential_type.yml.

No container engine is needed (none is available in CI): ``ansible-builder create`` only writes the
build context, and the two steps of the image build that matter to this collection are replayed
on the host with the very files of that context: the galaxy stage (``ansible-galaxy collection
install -r requirements.yml`` in ``_build``) and the builder stage's introspection (ansible-builder's
``introspect.py``, which reads ``meta/execution-environment.yml`` of every installed collection).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation import create as _operation
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_argument_spec

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REQUIREMENT_NAMES = ("requests", "PyYAML", "jsonschema", "truststore")


def load(path: Path) -> t.Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def requirement_lines(path: Path) -> list[str]:
    return [
        ln.split("#", 1)[0].strip()
        for ln in path.read_text(encoding="utf-8").splitlines()
        if ln.split("#", 1)[0].strip()
    ]


def version() -> str:
    return str(load(REPO / "galaxy.yml")["version"])


def run(
    *cmd: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def ee_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what execution-environment.yml references, laid out as in the checkout, with the
    collection tarball built as docs/awx.md says (``ansible-galaxy collection build --output-path build/ee``)."""
    root = tmp_path_factory.mktemp("ee-project")
    for name in ("execution-environment.yml", "requirements.txt", "bindep.txt"):
        (root / name).write_bytes((REPO / name).read_bytes())
    run(BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", root / "build" / "ee", REPO)
    return root


@pytest.fixture(scope="module")
def context(ee_project: Path) -> Path:
    ctx = ee_project / "context"
    run(
        BIN / "ansible-builder",
        "create",
        "-f",
        ee_project / "execution-environment.yml",
        "--context",
        ctx,
        "--output-filename",
        "Containerfile",
        cwd=ee_project,
    )
    return ctx


def test_ee_definition_matches_the_collection() -> None:
    ee = load(REPO / "execution-environment.yml")
    assert ee["version"] == 3
    deps = ee["dependencies"]
    assert deps["python"] == "requirements.txt" and deps["system"] == "bindep.txt"
    tested = {
        re.split(r"[<>=!~ ]", ln, maxsplit=1)[0]: ln
        for name in ("requirements-demo.txt", "requirements-test.txt")
        for ln in requirement_lines(REPO / name)
    }
    assert deps["ansible_core"]["package_pip"] == tested["ansible-core"]
    assert deps["ansible_runner"]["package_pip"] == tested["ansible-runner"]
    tarball = f"vmanyware-proxmox-{version()}.tar.gz"
    assert deps["galaxy"]["collections"] == [{"name": f"collections/{tarball}", "type": "file"}]
    assert ee["additional_build_files"] == [{"src": f"build/ee/{tarball}", "dest": "collections"}]
    assert f"vmanyware-proxmox-ee:{version()}" in ee["options"]["tags"]


def test_collection_ee_metadata() -> None:
    """meta/execution-environment.yml: the v1 collection metadata ansible-builder's introspection reads."""
    meta = load(REPO / "meta" / "execution-environment.yml")
    assert meta == {"version": 1, "dependencies": {"python": "requirements.txt", "system": "bindep.txt"}}
    names = [re.split(r"[<>=!~ \[]", ln, maxsplit=1)[0] for ln in requirement_lines(REPO / "requirements.txt")]
    assert sorted(names) == sorted(REQUIREMENT_NAMES)


def test_builder_create_writes_the_context(context: Path) -> None:
    containerfile = (context / "Containerfile").read_text(encoding="utf-8")
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    assert 'ARG PYCMD="/usr/bin/python3.11"' in containerfile
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.18,<2.20 ansible-runner>=2.4,<3"' in containerfile
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert "introspect.py introspect --user-pip=requirements.txt --user-bindep=bindep.txt" in containerfile
    build = context / "_build"
    assert (build / "requirements.txt").read_text(encoding="utf-8") == (REPO / "requirements.txt").read_text(
        encoding="utf-8"
    )
    assert (build / "bindep.txt").read_text(encoding="utf-8") == (REPO / "bindep.txt").read_text(encoding="utf-8")
    for name in REQUIREMENT_NAMES:
        assert re.search(rf"^{name}[<>=]", (build / "requirements.txt").read_text(encoding="utf-8"), re.M), name
    assert load(build / "requirements.yml")["collections"][0]["type"] == "file"
    assert (build / "collections" / f"vmanyware-proxmox-{version()}.tar.gz").is_file()


def test_tarball_holds_only_the_collection(ee_project: Path) -> None:
    """What the EE installs: the collection, not the working tree's caches or test output."""
    with tarfile.open(ee_project / "build" / "ee" / f"vmanyware-proxmox-{version()}.tar.gz") as tar:
        tops = {name.split("/", 1)[0] for name in tar.getnames()}
    assert {
        "MANIFEST.json",
        "FILES.json",
        "plugins",
        "roles",
        "playbooks",
        "meta",
        "requirements.txt",
        "bindep.txt",
    } <= tops
    stray = tops & {".ansible", ".hypothesis", ".pytest_cache", ".venv", "build", "context", ".ci", "tools"}
    assert not stray, f"add {sorted(stray)} to build_ignore in galaxy.yml"


def test_galaxy_stage_and_introspection(context: Path, tmp_path: Path) -> None:
    """Replay the galaxy stage and the builder stage's introspection with the context's own files."""
    build = context / "_build"
    target = tmp_path / "collections"
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(target), "ANSIBLE_GALAXY_DISABLE_GPG_VERIFY": "1"}
    run(
        BIN / "ansible-galaxy",
        "collection",
        "install",
        "-r",
        "requirements.yml",
        "--collections-path",
        target,
        cwd=build,
        env=env,
    )
    installed = target / "ansible_collections" / "vmanyware" / "proxmox"
    assert (installed / "MANIFEST.json").is_file() and (installed / "meta" / "execution-environment.yml").is_file()
    out = run(sys.executable, build / "scripts" / "introspect.py", "introspect", target).stdout
    found = yaml.safe_load(out)
    from_collection = [
        ln.split("#", 1)[0].strip() for ln in found["python"] if "from collection vmanyware.proxmox" in ln
    ]
    # ansible-builder drops PyYAML from collection requirements (ansible-core brings it); the EE's own
    # python: requirements.txt keeps the pinned range in the image anyway.
    assert sorted(re.split(r"[<>=]", ln, maxsplit=1)[0] for ln in from_collection) == [
        "jsonschema",
        "requests",
        "truststore",
    ]
    assert any("python3-yaml" in ln and "vmanyware.proxmox" in ln for ln in found["system"])


# ---- awx/credential_type.yml ------------------------------------------------------------------


def credential_type() -> dict[str, t.Any]:
    return dict(load(REPO / "awx" / "credential_type.yml"))


def test_credential_type_injects_only_what_the_collection_reads() -> None:
    ct = credential_type()
    assert set(ct) == {"name", "description", "kind", "inputs", "injectors"} and ct["kind"] == "cloud"
    fallbacks = {opt: spec["fallback"][1][0] for opt, spec in connection_argument_spec().items() if "fallback" in spec}
    gates = {_operation.PROVISIONING_GATE, _operation.SNAPSHOTS_GATE}
    env = ct["injectors"]["env"]
    assert set(env) <= set(fallbacks.values()) | gates, sorted(set(env) - set(fallbacks.values()) - gates)
    assert gates <= set(env)
    for option in ("api_host", "api_port", "api_token_id", "api_token_secret", "ca_path", "api_fingerprint"):
        assert fallbacks[option] in env, option
    for name in env:
        assert not name.startswith("ANSIBLE_"), name  # reserved by the controller
    assert "PROXMOX_VALIDATE_CERTS" not in env and "PROXMOX_PASSWORD" not in env
    assert set(ct["injectors"]) == {"env", "file"} and set(ct["injectors"]["file"]) == {"template.ca"}
    assert "tower.filename.ca" in env["PROXMOX_CA_PATH"]


def test_credential_type_inputs() -> None:
    ct = credential_type()
    fields = {f["id"]: f for f in ct["inputs"]["fields"]}
    allowed_keys = {"id", "label", "type", "help_text", "secret", "multiline", "choices", "format", "ask_at_runtime"}
    for field in fields.values():
        assert set(field) <= allowed_keys and field["type"] in ("string", "boolean"), field["id"]
        assert re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", field["id"]) and field["id"] != "tower"
    assert fields["api_token_secret"].get("secret") is True
    secrets = {fid for fid, f in fields.items() if f.get("secret")}
    assert secrets == {"api_token_secret"}
    assert fields["ca_certificate"].get("multiline") is True
    assert set(ct["inputs"]["required"]) == {"api_host", "api_token_id", "api_token_secret"}
    used = set(
        re.findall(r"\b([a-z_]+)\b", " ".join(ct["injectors"]["env"].values()) + ct["injectors"]["file"]["template.ca"])
    )
    assert set(fields) <= used
