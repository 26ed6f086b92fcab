# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A template build that bakes a profile (docs/templates.md, "Baking profiles"), on pvesim ``--guests container``, and the
plan that picks the baked template, then the roll-out from it.

The shipped ``vmanyware.proxmox.template`` playbook builds template 9100 from a TemplateBuild requesting ``base``: the
profile's role really runs through ``vmanyware.proxmox.qga`` in the build VM's LXC container between ``prepare`` and
``generalize`` (journaled as ``profile:base``), and the printed catalog mapping records ``bakedProfiles``. A catalog of
that mapping and a bare template of the same image then plans a definition requesting ``[base, ssh-hardening]``: the
plan picks 9100 (``most_requested_baked``) and skips ``base`` (``run: false``), and the provision role provisions
from 9100 with only ``ssh-hardening`` running (through the agent). The simulator starts a clone from the container root
file system, not from its template's tree, so the clone does not carry the baked files: the roll-out shows the plan's
skip and the remaining profile, not the baked content (which the build VM's disk shows).

Why the stand-in: the build VM is a container on the host's network, so the build address is not reachable over SSH
and the role's SSH preparation and generalization cannot run (``vmanyware_template_stand_in``); the guest agent is
there, so ``prepare`` passes and the profile runs for real. The controller's SSH client is ``/bin/false`` throughout.
Opt-in with the real-container lane (``-m realcontainer`` or ``PVESIM_REALCONTAINER=1``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

from pvesim.imageserver import ImageServer, qcow2_stub
from pvesim.state import FULL_TOKEN_ACL
from pvesim.testing import (
    PvesimAdmin,
    build_container_rootfs,
    ensure_realcontainer_tools,
    lxc_cleanup,
    start_server,
)

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import stamp_baked_profiles
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VMID = 9100
PROVISIONED = 301
IMAGE = qcow2_stub(3 * 1024**3, b"cloud image without an agent")
MOTD = "baked into template 9100 by vmanyware\n"
BASE_VARS = {"motd": MOTD, "update_cache": False}  # no apt run: the profile's own files only
BARE = {  # the demo seed's template 9000, declared as having nothing baked in
    "image": "debian-13",
    "node": "pve-test",
    "templateVmid": 9000,
    "templateVersion": "debian-13-cloud-20261016",
    "storage": "local-lvm",
    "bridge": "vmbr0",
    "diskDevice": "scsi0",
    "sourceDiskGiB": 8,
    "guestUser": "debian",
    "distroFamily": "debian",
    "imageDefaultUser": {
        "name": "debian",
        "templateVersion": "debian-13-cloud-20261016",
        "passwordLocked": True,
        "noAuthorizedKeys": True,
    },
}
ATTESTATION = {
    "name": "debian",
    "templateVersion": "debian-13-baked-base",
    "passwordLocked": True,
    "noAuthorizedKeys": True,
}
DEFINITION = {
    "apiVersion": "vmanyware.dev/v1",
    "kind": "Environment",
    "name": "baked-lab",
    "image": "debian-13",
    "resources": {"cores": 1, "memoryMiB": 1024, "diskGiB": 20},
    "access": {
        "sshPublicKeys": [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO alice@laptop"
        ]
    },
    "profiles": [{"name": "base", "vars": BASE_VARS}, {"name": "ssh-hardening"}],
}


def _say(msg: str) -> None:
    sys.stdout.write(f"[profiles-bake] {msg}\n")
    sys.stdout.flush()


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    t0 = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=str(cwd), capture_output=True, text=True, timeout=1800, check=False)
    _say(f"{' '.join(argv[1:3])}: {time.monotonic() - t0:.1f} s")
    return done


def _build_document(images: ImageServer) -> dict[str, t.Any]:
    return {
        "apiVersion": "vmanyware.dev/v1",
        "kind": "TemplateBuild",
        "image": "debian-13",
        "source": {
            "url": images.url("debian.qcow2"),
            "checksum": hashlib.sha256(IMAGE).hexdigest(),
            "checksumAlgorithm": "sha256",
        },
        "node": "pve-test",
        "storage": "local-lvm",
        "importStorage": "local",
        "bridge": "vmbr0",
        "templateVmid": VMID,
        "templateVersion": "debian-13-baked-base",
        "diskGiB": 8,
        "guestUser": "debian",
        "distroFamily": "debian",
        "profiles": [{"name": "base", "vars": BASE_VARS}],
        "buildAddress": {"address": "192.0.2.50/24", "gateway": "192.0.2.1"},
    }


def _plan(tmp_path: Path, env: dict[str, str], catalog: Path) -> dict[str, t.Any]:
    """The plan of DEFINITION on ``catalog`` as vmanyware_plan returns it (the profiles directory beside the catalog)."""
    (tmp_path / "definition.yml").write_text(yaml.safe_dump(DEFINITION, sort_keys=False), encoding="utf-8")
    out = tmp_path / "plan.json"
    play = [
        {
            "name": "Plan",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Plan the definition",
                    "vmanyware.proxmox.vmanyware_plan": {
                        "catalog_path": str(catalog),
                        "definition_path": str(tmp_path / "definition.yml"),
                        "target_vmid": PROVISIONED,
                    },
                    "register": "planned",
                },
                {"name": "Keep it", "ansible.builtin.copy": {"content": "{{ planned | to_json }}", "dest": str(out)}},
            ],
        }
    ]
    (tmp_path / "plan.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    ran = _run([str(BIN / "ansible-playbook"), "plan.yml"], env, tmp_path)
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    return t.cast(dict[str, t.Any], json.loads(out.read_text(encoding="utf-8")))


def _provision(tmp_path: Path, env: dict[str, str], catalog: Path) -> dict[str, dict[str, t.Any]]:
    """DEFINITION provisioned by the provision role through the guest agent; its operation's stages by kind."""
    provision = {
        "name": "Provision",
        "hosts": "localhost",
        "gather_facts": False,
        "roles": [
            {
                "role": "vmanyware.proxmox.provision",
                "provision_catalog_path": str(catalog),
                "provision_definition_path": str(tmp_path / "definition.yml"),
                "provision_target_vmid": PROVISIONED,
                "provision_confirmation_file": str(tmp_path / "provision-confirm.yml"),
                "provision_known_hosts_file": str(tmp_path / "known_hosts"),
                "provision_guest_connection": "qga",
            }
        ],
    }
    (tmp_path / "provision.yml").write_text(yaml.safe_dump([provision], sort_keys=False), encoding="utf-8")
    env = dict(env, VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal-provision"))
    review = _run([str(BIN / "ansible-playbook"), "provision.yml"], env, tmp_path)
    assert review.returncode == 0 and (tmp_path / "provision-confirm.yml").is_file(), review.stdout[-4000:]
    applied = _run([str(BIN / "ansible-playbook"), "provision.yml", "-e", "@provision-confirm.yml"], env, tmp_path)
    assert applied.returncode == 0, applied.stdout[-6000:] + applied.stderr[-2000:]
    assert "baked into the template (version 1) and not per guest" in applied.stdout, applied.stdout[-6000:]
    (path,) = list((tmp_path / "journal-provision").glob("op-*.json"))
    document = JournalStore(str(tmp_path / "journal-provision")).load(json.loads(path.read_text())["operationId"])
    assert document["status"] == "completed" and document["plan"]["templateChoice"]["templateVmid"] == VMID
    return {item["kind"]: item for item in document["stages"]}


def test_a_template_build_bakes_a_profile_and_the_plan_picks_it(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip("real-container tests are opt-in: pytest -m realcontainer (or PVESIM_REALCONTAINER=1)")
    ensure_realcontainer_tools(_say)
    rootfs, _seconds = build_container_rootfs(str(REPO), _say)
    state = tmp_path / "sim"
    state.mkdir()
    proc, conn = start_server(str(state), speed=50, extra=["--guests", "container", "--container-rootfs", rootfs])
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "debian.qcow2").write_bytes(IMAGE)
    images = ImageServer(tmp_path / "images")
    try:
        privileges = {path: list(privs) for path, privs in FULL_TOKEN_ACL.items()}
        privileges["/storage/local"] = ["Datastore.AllocateTemplate", "Datastore.Audit"]
        privileges["/nodes/pve-test"] = privileges["/nodes/pve-test"] + ["Sys.AccessNetwork"]
        privileges[f"/vms/{VMID}"] = privileges["/vms"] + ["VM.Clone"]  # the build, and the roll-out clones it
        PvesimAdmin(conn).set_token(conn["tokens"]["full"]["id"], privileges=privileges)
        build = tmp_path / "template-build.yml"
        build.write_text(yaml.safe_dump(_build_document(images), sort_keys=False), encoding="utf-8")
        # the declarations: the profiles directory beside the TemplateBuild (the build's default), and beside the catalog
        shutil.copytree(REPO / "examples" / "profiles", tmp_path / "profiles")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")}
        env.update(
            PROXMOX_HOST=conn["host"],
            PROXMOX_PORT=str(conn["port"]),
            PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
            PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
            PROXMOX_CA_PATH=conn["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal"),
            VMANYWARE_PROVISIONING_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3",
            ANSIBLE_SSH_EXECUTABLE="/bin/false",  # no SSH: any attempt to use it fails the run
        )
        confirm, mapping_file = tmp_path / "confirm.yml", tmp_path / "mapping.yml"
        playbook = [
            str(BIN / "ansible-playbook"),
            "vmanyware.proxmox.template",
            "-e",
            f"vmanyware_template_build_path={build}",
            "-e",
            f"vmanyware_confirmation_file={confirm}",
            "-e",
            f"vmanyware_catalog_mapping_file={mapping_file}",
            "-e",
            "vmanyware_template_stand_in=true",
        ]
        review = _run(playbook, env, tmp_path)
        assert review.returncode == 0 and confirm.is_file(), review.stdout[-4000:]
        assert "prepare -> profile:base -> generalize" in review.stdout
        assert "bake base version 1" in review.stdout
        applied = _run([*playbook, "-e", f"@{confirm}"], env, tmp_path)
        assert applied.returncode == 0, applied.stdout[-6000:] + applied.stderr[-2000:]
        assert env["PROXMOX_TOKEN_SECRET"] not in applied.stdout + applied.stderr
        assert "profile 1/1 base: running role vmanyware.proxmox.profile_base through qga" in applied.stdout
        for position, kind in enumerate(["prepare", "profile:base", "generalize"], start=6):
            assert re.search(r"\[%d/12\] %s: .*completed" % (position, kind), applied.stdout), applied.stdout[-6000:]

        (path,) = list((tmp_path / "journal").glob("op-*.json"))
        document = JournalStore(str(tmp_path / "journal")).load(json.loads(path.read_text())["operationId"])
        assert document["status"] == "completed"
        stage = next(item for item in document["stages"] if item["kind"] == "profile:base")
        assert stage["status"] == "completed" and stage["position"] == 7, stage
        # motd and the admin group; the package list is empty and no apt cache update was asked for
        assert stage["evidence"]["changed"] == 2 and stage["evidence"]["failed"] == 0, stage["evidence"]
        # the build VM's disk (its container's upper directory) carries what the profile wrote
        upper = state / "guest-containers" / "lxc" / f"vm{VMID}" / "upper"
        assert (upper / "etc" / "motd").read_text(encoding="utf-8") == MOTD
        assert re.search(r"(?m)^vmadmin:", (upper / "etc" / "group").read_text(encoding="utf-8"))

        baked = document["plan"]["profiles"][0]
        identity = {key: baked[key] for key in ("name", "version", "declarationHash")}
        text = mapping_file.read_text(encoding="utf-8")
        built = parse_catalog(
            text="apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages:\n" + re.sub(r"(?m)^", "  ", text)
        )["images"][0]
        assert built["templateVmid"] == VMID and built["distroFamily"] == "debian"
        assert built["bakedProfiles"] == [identity]
        assert "imageDefaultUser" not in built  # a stand-in build attests nothing
        description = PvesimAdmin(conn).vm(VMID)["config"]["description"]
        assert stamp_baked_profiles(description) == [identity]

        # a catalog with the bare template and the baked one: the plan picks the baked one and skips base
        catalog = tmp_path / "catalog.yml"
        catalog.write_text(
            yaml.safe_dump(
                {"apiVersion": "vmanyware.dev/v1", "kind": "TemplateCatalog", "images": [BARE, built]},
                sort_keys=False,
            ),
            encoding="utf-8",
        )
        result = _plan(tmp_path, env, catalog)
        plan = result["plan"]
        assert plan["templateChoice"] == {
            "templateVmid": VMID,
            "bakedRequested": 1,
            "candidates": 2,
            "reason": "most_requested_baked",
        }
        assert plan["source"]["templateVmid"] == VMID
        runs = {entry["name"]: (entry["baked"], entry["run"]) for entry in plan["profiles"]}
        assert runs == {"base": (True, False), "ssh-hardening": (False, True)}
        names = [step.get("name", step["kind"]) for step in plan["steps"]]
        assert "profile:ssh-hardening" in names and "profile:base" not in names

        # roll-out from the baked template: base is skipped with its reason, ssh-hardening runs through the agent. The
        # operator attests the default user after reviewing the template (a stand-in build attests nothing itself).
        attested = dict(built, imageDefaultUser=ATTESTATION)
        catalog.write_text(
            yaml.safe_dump(
                {"apiVersion": "vmanyware.dev/v1", "kind": "TemplateCatalog", "images": [BARE, attested]},
                sort_keys=False,
            ),
            encoding="utf-8",
        )
        stages = _provision(tmp_path, env, catalog)
        assert "profile:base" not in stages
        hardening = stages["profile:ssh-hardening"]
        assert hardening["status"] == "completed" and hardening["evidence"]["failed"] == 0, hardening
        assert hardening["evidence"]["changed"] >= 1 and hardening["evidence"]["transport"] == "qga"
    finally:
        images.close()
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        _say(f"cleaned up {lxc_cleanup(str(state / 'guest-containers' / 'lxc'))}")
