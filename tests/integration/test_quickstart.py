# SPDX-License-Identifier: GPL-3.0-or-later
"""docs/quickstart.md, followed command by command against the simulator.

The blocks after ``<!-- quickstart:NAME -->`` markers are what is run: ansible-core is installed into a
fresh virtual environment as the page says (PEP 668: Debian refuses a system-wide ``pip install``), the
collection is built and installed from the page's commands (into a temporary collections path) and its
requirements go into that environment, which runs every later command; the ``pveum`` commands
become the simulator's pool and the token's ACL (role privileges as written; built-in roles with
PVE's privileges), the pin command runs against the simulator, and the playbook commands run in
a directory holding the page's inventory, catalog and definition, without any warning. The template step
runs the page's ``vmanyware.proxmox.template`` commands (the image from a loopback server, the stand-in for
the SSH preparation a simulated guest cannot answer, template VMID 9100 beside the simulator's 9000).
The PVE 8 and PVE 9 roles are the collection's privilege table and docs/permissions.md's commands.
The simulator's node is ``pve-test``, so the page's ``pve`` becomes that, and its connection values
replace the page's placeholders.
"""

from __future__ import annotations

import hashlib
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

from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.permissions import role_privileges
from pvesim.imageserver import ImageServer, qcow2_stub
from pvesim.state import FULL_TOKEN_ACL

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PAGE = REPO / "docs" / "quickstart.md"
# Proxmox VE's built-in roles the page uses (PVE 9: pve-access-control, PVE/AccessControl.pm).
BUILTIN_ROLES = {
    "PVETemplateUser": {"VM.Audit", "VM.Clone"},
    "PVEDatastoreUser": {"Datastore.AllocateSpace", "Datastore.Audit"},
    "PVESDNUser": {"SDN.Audit", "SDN.Use"},
}


def block(name: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    after = text[text.index(f"<!-- quickstart:{name} -->") :]
    start = after.index("```") + after[after.index("```") :].index("\n") + 1
    return after[start : after.index("\n```", start)] + "\n"


def commands(name: str) -> list[str]:
    """The block's shell commands, continuation lines (``\\``) joined."""
    joined = block(name).replace("\\\n", "")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def permissions_doc_roles() -> dict[str, set[str]]:
    """docs/permissions.md's ``pveum role add VmanywareProvisioner`` privileges: PVE 9 (first), PVE 8 (its section)."""
    text = (REPO / "docs" / "permissions.md").read_text(encoding="utf-8")
    found = {}
    for version, part in (("9", text.split("## Proxmox VE 8", 1)[0]), ("8", text.split("## Proxmox VE 8", 1)[1])):
        command = re.search(r'pveum role add VmanywareProvisioner --privs ((?:"[^"]*"\\?\n?)+)', part)
        assert command, version
        found[version] = set("".join(re.findall(r'"([^"]*)"', command.group(1))).split(","))
    return found


def test_token_roles_for_pve_8_and_9() -> None:
    """The page's role for PVE 9 and its PVE 8 variant: the privilege table of each version, and docs/permissions.md's commands."""
    doc = permissions_doc_roles()
    _pools, roles9, _acl = acl_from_pveum(commands("pveum"))
    [line8] = commands("pveum-8")
    _pools, roles8, _acl = acl_from_pveum([line8])
    assert roles9["VmanywareProvisioner"] == set(role_privileges(9)["/vms/{target}"]) == doc["9"]
    assert roles8["VmanywareProvisioner"] == set(role_privileges(8)["/vms/{target}"]) == doc["8"]
    assert not any(p.startswith("VM.GuestAgent.") for p in roles8["VmanywareProvisioner"])  # PVE 8 has none of them
    assert {"VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"} <= roles9["VmanywareProvisioner"]


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
    return subprocess.run(
        words, env={**env, "PWD": str(cwd), **extra}, cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def test_quickstart_on_the_simulator(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    conn = pvesim.connection
    collections = tmp_path / "collections"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("VMANYWARE_", "PROXMOX_"))}
    base_env.update(
        PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}",
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_NOCOLOR="1",
        HOME=str(tmp_path / "home"),
    )
    (tmp_path / "home").mkdir()

    # 1. ansible-core into a new virtual environment exactly as written (apt is the host's; its packages are here).
    venv = tmp_path / "home" / ".venvs" / "vmanyware"
    ansible = commands("ansible")
    assert ansible[0].startswith("sudo apt install -y python3-venv")
    assert ansible[1] == "python3 -m venv ~/.venvs/vmanyware" and ansible[2] == ". ~/.venvs/vmanyware/bin/activate"
    # the range the page installs is the one this repository develops and tests with (requirements-demo.txt)
    core = re.search(r"^ansible-core[^\n#]*", (REPO / "requirements-demo.txt").read_text(encoding="utf-8"), re.M)
    assert core and ansible[3] == "python3 -m pip install '%s'" % core.group(0).strip()
    done = run_line(
        ansible[1].replace("~/", str(tmp_path / "home") + "/").replace("python3", sys.executable, 1), base_env, tmp_path
    )
    assert done.returncode == 0, done.stderr
    base_env["PATH"] = f"{venv / 'bin'}{os.pathsep}{base_env['PATH']}"  # what activate does
    base_env["VIRTUAL_ENV"] = str(venv)
    done = run_line(ansible[3].replace("python3", str(venv / "bin" / "python3"), 1), base_env, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    # Build and install the collection exactly as written (into the temporary collections path), with the venv's tools.
    install = commands("install")
    for line in install[:2]:
        line = line.replace("--output-path dist", f"--output-path {tmp_path}/dist").replace(
            " dist/", f" {tmp_path}/dist/"
        )
        done = run_line(line, base_env, REPO)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "[WARNING]" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert install[2].startswith("python3 -m pip install -r ~/.ansible/collections/")
    requirements = install[2].split(" -r ", 1)[1].replace("~/.ansible/collections", str(collections))
    assert Path(requirements).read_text(encoding="utf-8") == (REPO / "requirements.txt").read_text(encoding="utf-8")
    done = run_line(f"{venv / 'bin' / 'python3'} -m pip install -r {requirements}", base_env, tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("ansible-playbook", "ansible-galaxy"):
        assert (venv / "bin" / name).is_file(), name  # every later command runs the venv's tools (first on PATH)

    # 2. The pool and the ACLs: the role is the one the privilege table asks for on the VM path.
    pools, roles, acl = acl_from_pveum([on_simulator(line) for line in commands("pveum")])
    assert roles["VmanywareProvisioner"] == set(role_privileges(9)["/vms/{target}"])
    assert [path for path in acl if path.startswith("/vms/")] == ["/vms/9000"]  # nothing per target VMID
    root = ProxmoxAPI(
        conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"]
    )
    for pool in pools:
        root.pools.post(poolid=pool)
    token = conn["tokens"]["limited"]
    # The page's token has --privsep 0 (the dedicated user's privileges); the simulator's token keeps its
    # own ACL set to exactly the page's, which gives the same effective privileges.
    pvesim.set_token(token["id"], privileges={path: sorted(privs) for path, privs in acl.items()})

    # 3. The pin command, against the simulator: the fingerprint of the certificate the API serves.
    pin = (
        commands("pin")[0]
        .replace("pve.example.org:8006", f"{conn['host']}:{conn['port']}")
        .replace("-servername pve.example.org", "-servername localhost")
    )
    printed = subprocess.run(pin, shell=True, capture_output=True, text=True, timeout=60, check=False).stdout  # noqa: S602
    assert printed.strip().split("=", 1)[1] == conn["fingerprint_sha256"]

    work = tmp_path / "work"
    work.mkdir()
    (work / "inventory.yml").write_text(block("inventory"), encoding="utf-8")
    assert yaml.safe_load(block("inventory")) == yaml.safe_load(
        (REPO / "examples" / "inventory.yml").read_text(encoding="utf-8")
    )

    # 4. The template, built with the page's commands and an administrator token (the full one here).
    template_build(pvesim, conn, base_env, work, tmp_path)

    # 6. Catalog, definition, then the page's three commands.
    catalog = yaml.safe_load(on_simulator(block("catalog")))
    assert catalog["images"][0]["pool"] in pools
    (work / "catalog.yml").write_text(on_simulator(block("catalog")), encoding="utf-8")
    (work / "definition.yml").write_text(block("definition"), encoding="utf-8")
    env = {**base_env, "PROXMOX_PORT": str(conn["port"]), "VMANYWARE_JOURNAL_DIR": str(tmp_path / "journal")}
    for line in commands("run"):
        if line.startswith("export "):
            for word in shlex.split(line)[1:]:
                key, value = word.split("=", 1)
                env[key] = {
                    "PROXMOX_HOST": conn["host"],
                    "PROXMOX_TOKEN_ID": token["id"],
                    "PROXMOX_TOKEN_SECRET": token["secret"],
                    "PROXMOX_CA_PATH": conn["ca_file"],
                }[key]
            continue
        done = run_line(line, env, work)
        assert done.returncode == 0, (line, done.stdout[-6000:] + done.stderr[-2000:])
        assert "[WARNING]" not in done.stdout + done.stderr, (line, done.stdout[-3000:] + done.stderr[-2000:])
        if "vmanyware_confirmation_file=confirm.yml" in line:
            # the review run prints the block as YAML to save as is: the printed text loads to exactly what it wrote
            printed = done.stdout[done.stdout.index("# Nothing was changed") :]
            printed = printed[: printed.index("\nok: [localhost]")]
            assert yaml.safe_load(printed) == yaml.safe_load((work / "confirm.yml").read_text(encoding="utf-8"))
        if "-e @confirm.yml" in line:  # the preflight table once per run
            assert done.stdout.count("template_guest_agent") == 1, done.stdout[-6000:]
    clones = pvesim.requests("POST", r"/clone$")
    assert [e["params"].get("pool") for e in clones] == ["vmanyware"]
    vm = pvesim.vm(201)
    assert vm["status"] == "running" and vm["pool"] == "vmanyware"
    assert "8  packages   completed" in done.stdout  # tmux from Debian's own package index
    assert pvesim.schema_violations() == []

    # Without the pool the same token lacks the VM privileges, and the preflight says where.
    (work / "catalog.yml").write_text(
        on_simulator(block("catalog")).replace("    pool: vmanyware\n", ""), encoding="utf-8"
    )
    preflight = run_line(
        commands("run")[2].replace("vmanyware_target_vmid=201", "vmanyware_target_vmid=202"), env, work
    )
    assert preflight.returncode != 0 and "VM.Allocate on /vms/202 (clone)" in preflight.stdout, preflight.stdout[-3000:]


def template_build(pvesim: t.Any, conn: dict[str, t.Any], base_env: dict[str, str], work: Path, tmp_path: Path) -> None:
    """Step 4: the page's TemplateBuild and its two template commands, against the simulator."""
    lines = commands("template")
    assert all("tools/guest-image" not in line and "qm " not in line for line in lines)
    runs = [line for line in lines if not line.startswith(("export ", "unset "))]
    assert len(runs) == 2 and all("vmanyware.proxmox.template" in line for line in runs)
    image = qcow2_stub(3 * 1024**3, b"agent-less cloud image")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "debian.qcow2").write_bytes(image)
    images = ImageServer(tmp_path / "images")
    try:
        document = yaml.safe_load(on_simulator(block("template-build")))
        catalog = yaml.safe_load(on_simulator(block("catalog")))["images"][0]
        for key in ("image", "node", "storage", "bridge", "templateVmid", "guestUser"):
            assert document[key] == catalog[key], key  # the template step 6's catalog names
        assert document["source"]["checksumAlgorithm"] == "sha512" and "SHA512SUMS" in PAGE.read_text(encoding="utf-8")
        document["source"].update(url=images.url("debian.qcow2"), checksum=hashlib.sha512(image).hexdigest())
        document["templateVmid"] = 9100  # the simulator's 9000 is the template step 6 clones
        (work / "template-build.yml").write_text(yaml.safe_dump(document), encoding="utf-8")
        admin = conn["tokens"]["full"]
        privileges = {path: list(privs) for path, privs in FULL_TOKEN_ACL.items()}
        privileges["/storage/local"] = ["Datastore.AllocateTemplate", "Datastore.Audit"]
        privileges["/nodes/pve-test"] = privileges["/nodes/pve-test"] + ["Sys.AccessNetwork"]
        pvesim.set_token(admin["id"], privileges=privileges)
        env = {
            **base_env,
            "PROXMOX_PORT": str(conn["port"]),
            "VMANYWARE_JOURNAL_DIR": str(tmp_path / "template-journal"),
        }
        for line in lines:
            if line.startswith("export "):
                for word in shlex.split(line)[1:]:
                    key, _value = word.split("=", 1)
                    env[key] = {
                        "PROXMOX_HOST": conn["host"],
                        "PROXMOX_TOKEN_ID": admin["id"],
                        "PROXMOX_TOKEN_SECRET": admin["secret"],
                        "PROXMOX_CA_PATH": conn["ca_file"],
                        "VMANYWARE_PROVISIONING_ENABLED": "true",
                    }[key]
                continue
            if line.startswith("unset "):
                del env[line.split()[1]]
                continue
            # the stand-in: a simulated guest has no SSH for the preparation boot (docs/templates.md)
            done = run_line(line + " -e vmanyware_template_stand_in=true", env, work)
            assert done.returncode == 0, (line, done.stdout[-4000:] + done.stderr[-2000:])
            assert "[WARNING]" not in done.stdout + done.stderr, (line, done.stdout[-3000:] + done.stderr[-2000:])
        assert pvesim.vm(9100)["config"].get("template") in (1, "1", True)
        mapping = yaml.safe_load((work / "mapping.yml").read_text(encoding="utf-8"))
        mapping = mapping[0] if isinstance(mapping, list) else mapping  # the catalog's images entry
        assert mapping["templateVmid"] == 9100 and mapping["sourceDiskGiB"] == 8
        assert pvesim.schema_violations() == []
    finally:
        images.close()
