# SPDX-License-Identifier: GPL-3.0-or-later
"""The template playbook as operators run it against the simulator: review, check-mode preview, build, re-run.

The simulated guest cannot be reached over SSH, so the run uses the stand-in (``vmanyware_template_stand_in``);
the test asserts the stand-in is visible everywhere a reader could mistake it for the real path: the progress
output, the template's stamp, and the catalog mapping (no ``imageDefaultUser``).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from pvesim.imageserver import ImageServer, qcow2_stub
from pvesim.state import FULL_TOKEN_ACL

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
IMAGE = qcow2_stub(3 * 1024**3, b"agent-less cloud image")


def _writes(pvesim: t.Any) -> list[str]:
    return [entry["endpoint"] for entry in pvesim.requests() if entry["method"] != "GET"]


def test_review_preview_build_and_rerun(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    conn = pvesim.connection
    privileges = {path: list(privs) for path, privs in FULL_TOKEN_ACL.items()}
    privileges["/storage/local"] = ["Datastore.AllocateTemplate", "Datastore.Audit"]
    privileges["/nodes/pve-test"] = privileges["/nodes/pve-test"] + ["Sys.AccessNetwork"]
    pvesim.set_token(conn["tokens"]["full"]["id"], privileges=privileges)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "debian.qcow2").write_bytes(IMAGE)
    images = ImageServer(tmp_path / "images")
    try:
        build = tmp_path / "template-build.yml"
        build.write_text(
            yaml.safe_dump(
                {
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
                    "templateVmid": 9100,
                    "templateVersion": "debian-13-test",
                    "diskGiB": 8,
                    "guestUser": "debian",
                    "buildAddress": {"address": "192.0.2.50/24", "gateway": "192.0.2.1"},
                }
            ),
            encoding="utf-8",
        )
        env = dict(
            os.environ,
            PROXMOX_HOST=conn["host"],
            PROXMOX_PORT=str(conn["port"]),
            PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
            PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
            PROXMOX_CA_PATH=conn["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal"),
            VMANYWARE_PROVISIONING_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
        )
        confirm, mapping_file = tmp_path / "confirm.yml", tmp_path / "mapping.yml"

        def run(*extra: str) -> subprocess.CompletedProcess[str]:
            args = [
                str(BIN / "ansible-playbook"),
                "vmanyware.proxmox.template",
                "-e",
                "vmanyware_template_build_path=%s" % build,
                "-e",
                "vmanyware_confirmation_file=%s" % confirm,
                "-e",
                "vmanyware_catalog_mapping_file=%s" % mapping_file,
                "-e",
                "vmanyware_template_stand_in=true",
                *extra,
            ]
            return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)

        review = run()
        assert review.returncode == 0, review.stdout[-3000:]
        assert "template_confirmation:" in review.stdout and _writes(pvesim) == []
        preview = run("-e", "@%s" % confirm, "--check")
        assert preview.returncode == 0, preview.stdout[-3000:]
        assert "[1/11] download: preview POST /nodes/pve-test/storage/local/download-url" in preview.stdout
        assert _writes(pvesim) == [] and not list((tmp_path / "journal").glob("op-*.json"))
        applied = run("-e", "@%s" % confirm)
        assert applied.returncode == 0, applied.stdout[-3000:]
        for position, kind in enumerate(
            [
                "download",
                "create",
                "disk",
                "configure",
                "start",
                "prepare",
                "generalize",
                "shutdown",
                "unconfigure",
                "convert",
                "stamp",
            ],
            start=1,
        ):
            assert "[%d/11] %s: completed" % (position, kind) in applied.stdout
        assert "STAND-IN: the guest is simulated" in applied.stdout
        assert len(_writes(pvesim)) == 9
        text = mapping_file.read_text(encoding="utf-8")
        catalog = parse_catalog(
            text="apiVersion: vmanyware.dev/v1\nkind: TemplateCatalog\nimages:\n" + re.sub(r"(?m)^", "  ", text)
        )
        assert catalog["images"][0]["templateVmid"] == 9100 and catalog["images"][0]["sourceDiskGiB"] == 8
        assert "imageDefaultUser" not in catalog["images"][0]  # a stand-in build attests nothing
        assert "preparedBy stand-in" in pvesim.vm(9100)["config"]["description"]
        pvesim.clear_requests()
        again = run("-e", "@%s" % confirm)
        assert again.returncode == 0, again.stdout[-3000:]
        assert _writes(pvesim) == []
        assert re.search(r"localhost\s+:\s+ok=\d+\s+changed=0\s", again.stdout), again.stdout[-1500:]
    finally:
        images.close()


def test_a_new_build_stops_when_the_preflight_fails(pvesim: t.Any, tmp_path: Path) -> None:
    conn = pvesim.connection
    build = tmp_path / "template-build.yml"
    build.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "vmanyware.dev/v1",
                "kind": "TemplateBuild",
                "image": "debian-13",
                "source": {"url": "http://127.0.0.1:9/x.qcow2", "checksum": "a" * 64, "checksumAlgorithm": "sha256"},
                "node": "pve-test",
                "storage": "local-lvm",
                "importStorage": "local",
                "bridge": "vmbr0",
                "templateVmid": 9000,
                "templateVersion": "debian-13-test",
                "guestUser": "debian",
                "buildAddress": {"address": "192.0.2.50/24", "gateway": "192.0.2.1"},
            }
        ),
        encoding="utf-8",
    )
    env = dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        VMANYWARE_JOURNAL_DIR=str(tmp_path / "journal"),
        VMANYWARE_PROVISIONING_ENABLED="true",
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "vmanyware.proxmox.template", "-e", "vmanyware_template_build_path=%s" % build],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode != 0 and "check(s) failed (see the table above); nothing was changed" in proc.stdout, (
        proc.stdout[-3000:]
    )
    assert "vmid_free" in proc.stdout and _writes(pvesim) == [] and not list((tmp_path / "journal").glob("op-*.json"))
