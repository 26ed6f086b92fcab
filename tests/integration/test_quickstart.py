# SPDX-License-Identifier: GPL-3.0-or-later
"""docs/quickstart.md, followed command by command against the simulator.

The blocks after ``<!-- quickstart:NAME -->`` markers are what is run: the collection is built and
installed from the page's commands (into a temporary collections path), the ``pveum`` commands
become the simulator's pool and the token's ACL (role privileges as written; built-in roles with
PVE's privileges), the pin command runs against the simulator, and the playbook commands run in
a directory holding the page's catalog and definition. The simulator's node is ``pve-test``, so
the page's ``pve`` becomes that, and its connection values replace the page's placeholders.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml
from proxmoxer import ProxmoxAPI

from ansible_collections.vmanyware.proxmox.plugins.module_utils._permissions import role_privileges

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGE = REPO / "docs" / "quickstart.md"
# Proxmox VE's built-in roles the page uses (PVE 9: pve-access-control, PVE/AccessControl.pm).
BUILTIN_ROLES = {"PVETemplateUser": {"VM.Audit", "VM.Clone"}, "PVEDatastoreUser": {"Datastore.AllocateSpace", "Datastore.Audit"},
                 "PVESDNUser": {"SDN.Audit", "SDN.Use"}}


def block(name: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    after = text[text.index(f"<!-- quickstart:{name} -->"):]
    start = after.index("```") + after[after.index("```"):].index("\n") + 1
    return after[start:after.index("\n```", start)] + "\n"


def commands(name: str) -> list[str]:
    """The block's shell commands, continuation lines (``\\``) joined."""
    joined = block(name).replace("\\\n", "")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def on_simulator(text: str) -> str:
    return re.sub(r"(node: |/nodes/)pve\b", r"\1pve-test", text)


def acl_from_pveum(lines: list[str]) -> tuple[list[str], dict[str, set[str]], dict[str, set[str]]]:
    """(pools, roles, ACL path -> privileges) from the page's pveum commands."""
    pools: list[str] = []
    roles = {name: set(privs) for name, privs in BUILTIN_ROLES.items()}
    acl: dict[str, set[str]] = {}
    for line in lines:
        words = shlex.split(line)
        assert words[0] == "pveum", line
        if words[1:3] == ["pool", "add"]:
            pools.append(words[3])
        elif words[1:3] == ["role", "add"]:
            roles[words[3]] = set(words[words.index("--privs") + 1].split())
        elif words[1:3] == ["acl", "modify"]:
            assert words[words.index("--users") + 1] == "vmanyware@pve"
            acl.setdefault(words[3], set()).update(roles[words[words.index("--roles") + 1]])
        else:
            assert words[1:3] in (["user", "add"], ["user", "token"]), line
    return pools, roles, acl


def run_line(line: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    words = shlex.split(line)
    extra = {}
    while "=" in words[0] and not words[0].startswith("-"):
        key, value = words.pop(0).split("=", 1)
        extra[key] = value
    # PWD as a shell sets it (the playbooks resolve relative paths against it).
    return subprocess.run(words, env={**env, "PWD": str(cwd), **extra}, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)


def test_quickstart_on_the_simulator(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    conn = pvesim.connection
    collections = tmp_path / "collections"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("VMANYWARE_", "PROXMOX_"))}
    base_env.update(PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}", ANSIBLE_COLLECTIONS_PATH=str(collections), ANSIBLE_NOCOLOR="1",
                    HOME=str(tmp_path / "home"))
    (tmp_path / "home").mkdir()

    # 1. Build and install the collection exactly as written (into the temporary collections path).
    install = commands("install")
    for line in install[:2]:
        line = line.replace("--output-path dist", f"--output-path {tmp_path}/dist").replace(" dist/", f" {tmp_path}/dist/")
        done = run_line(line, base_env, REPO)
        assert done.returncode == 0, done.stdout + done.stderr
    requirements = install[2].split(" -r ", 1)[1].replace("~/.ansible/collections", str(collections))
    assert Path(requirements).read_text(encoding="utf-8") == (REPO / "requirements.txt").read_text(encoding="utf-8")

    # 2. The pool and the ACLs: the role is the one the privilege table asks for on the VM path.
    pools, roles, acl = acl_from_pveum([on_simulator(line) for line in commands("pveum")])
    assert roles["VmanywareProvisioner"] == set(role_privileges(9)["/vms/{target}"])
    assert [path for path in acl if path.startswith("/vms/")] == ["/vms/9000"]  # nothing per target VMID
    root = ProxmoxAPI(conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"])
    for pool in pools:
        root.pools.post(poolid=pool)
    token = conn["tokens"]["limited"]
    # The page's token has --privsep 0 (the dedicated user's privileges); the simulator's token keeps its
    # own ACL set to exactly the page's, which gives the same effective privileges.
    pvesim.set_token(token["id"], privileges={path: sorted(privs) for path, privs in acl.items()})

    # 3. The pin command, against the simulator: the fingerprint of the certificate the API serves.
    pin = commands("pin")[0].replace("pve.example.org:8006", f"{conn['host']}:{conn['port']}").replace(
        "-servername pve.example.org", "-servername localhost")
    printed = subprocess.run(pin, shell=True, capture_output=True, text=True, timeout=60, check=False).stdout  # noqa: S602
    assert printed.strip().split("=", 1)[1] == conn["fingerprint_sha256"]

    # 6. Catalog, definition, then the page's three commands.
    work = tmp_path / "work"
    work.mkdir()
    catalog = yaml.safe_load(on_simulator(block("catalog")))
    assert catalog["images"][0]["pool"] in pools
    (work / "catalog.yml").write_text(on_simulator(block("catalog")), encoding="utf-8")
    (work / "definition.yml").write_text(block("definition"), encoding="utf-8")
    env = {**base_env, "PROXMOX_PORT": str(conn["port"]), "VMANYWARE_JOURNAL_DIR": str(tmp_path / "journal")}
    for line in commands("run"):
        if line.startswith("export "):
            for word in shlex.split(line)[1:]:
                key, value = word.split("=", 1)
                env[key] = {"PROXMOX_HOST": conn["host"], "PROXMOX_TOKEN_ID": token["id"], "PROXMOX_TOKEN_SECRET": token["secret"],
                            "PROXMOX_CA_PATH": conn["ca_file"]}[key]
            continue
        done = run_line(line, env, work)
        assert done.returncode == 0, (line, done.stdout[-6000:] + done.stderr[-2000:])
    clones = pvesim.requests("POST", r"/clone$")
    assert [e["params"].get("pool") for e in clones] == ["vmanyware"]
    vm = pvesim.vm(201)
    assert vm["status"] == "running" and vm["pool"] == "vmanyware"
    assert "8  packages   completed" in done.stdout  # tmux from Debian's own package index
    assert pvesim.schema_violations() == []

    # Without the pool the same token lacks the VM privileges, and the preflight says where.
    (work / "catalog.yml").write_text(on_simulator(block("catalog")).replace("    pool: vmanyware\n", ""), encoding="utf-8")
    preflight = run_line(commands("run")[2].replace("vmanyware_target_vmid=201", "vmanyware_target_vmid=202"), env, work)
    assert preflight.returncode != 0 and "VM.Allocate on /vms/202 (clone)" in preflight.stdout, preflight.stdout[-3000:]
