# SPDX-License-Identifier: GPL-3.0-or-later
"""The provision role with ``target_node: auto`` (docs/operations.md, "Placement"): the review run places and prints
the confirmation block naming the node, an apply run whose confirmed node no longer qualifies stops with
``plan_changed`` before anything is sent, and an apply run whose node still qualifies provisions there.

Real ``ansible-playbook`` runs of the collection's playbook against the simulator's three-node cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MUTATING = ("POST", "PUT", "DELETE")


def _env(pvesim: t.Any, journal: Path) -> dict[str, str]:
    conn = pvesim.connection
    return dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        VMANYWARE_JOURNAL_DIR=str(journal),
        VMANYWARE_PROVISIONING_ENABLED="true",
        ANSIBLE_NOCOLOR="1",
    )


def _mutations(pvesim: t.Any) -> list[str]:
    return ["%s %s" % (entry["method"], entry["path"]) for entry in pvesim.requests() if entry["method"] in MUTATING]


def test_provision_role_places_reviews_and_applies_on_the_chosen_node(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.reset("cluster")
    pvesim.set_speed(200)
    pvesim.set_node_maintenance("pve-test", True)  # pve-test2 and pve-test3 tie: the name decides
    catalog = yaml.safe_load((REPO / "examples/catalog.yml").read_text())
    catalog["images"][0]["templateVmid"] = 9001  # on the shared storage: it may be cloned to any node
    catalog["images"][0]["storage"] = "shared"  # ... onto shared storage only (can't clone to non-shared storage)
    catalog_path = tmp_path / "catalog.yml"
    catalog_path.write_text(yaml.safe_dump(catalog))
    journal = tmp_path / "journal"
    confirm = tmp_path / "confirm.yml"
    env = _env(pvesim, journal)

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        args = [
            str(BIN / "ansible-playbook"),
            "vmanyware.proxmox.provision",
            "-e",
            "vmanyware_catalog_path=%s" % catalog_path,
            "-e",
            "vmanyware_definition_path=%s" % (REPO / "examples/definition.yml"),
            "-e",
            "vmanyware_target_vmid=201",
            "-e",
            "vmanyware_target_node=auto",
            "-e",
            "vmanyware_confirmation_file=%s" % confirm,
            "-e",
            "vmanyware_known_hosts_file=%s" % (tmp_path / "known_hosts"),
            *extra,
        ]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)

    review = run()
    assert review.returncode == 0, review.stdout[-3000:]
    assert "pve-test: The node is in HA maintenance mode." in review.stdout
    assert "pve-test2: chosen" in review.stdout and "(clone: target from pve-test)" in review.stdout
    assert _mutations(pvesim) == [] and not list(journal.glob("op-*.json"))
    block = yaml.safe_load(confirm.read_text())["provision_confirmation"]
    assert block["targetNode"] == "pve-test2" and block["sourceVmid"] == 9001

    # the confirmed node went into maintenance: placement chooses another, the plan changed, nothing is sent
    pvesim.set_node_maintenance("pve-test2", True)
    pvesim.clear_requests()
    changed = run("-e", "@%s" % confirm)
    assert changed.returncode != 0 and "plan_changed" in changed.stdout, changed.stdout[-3000:]
    assert _mutations(pvesim) == [] and not list(journal.glob("op-*.json"))

    pvesim.set_node_maintenance("pve-test2", False)
    applied = run("-e", "@%s" % confirm)
    assert applied.returncode == 0, applied.stdout[-3000:]
    [clone] = pvesim.requests(method="POST", path_regex=r"/qemu/9001/clone$")
    assert clone["path"] == "/nodes/pve-test/qemu/9001/clone" and clone["params"]["target"] == "pve-test2"
    assert all("/nodes/pve-test2/" in path for path in _mutations(pvesim) if "/clone" not in path)
    [operation] = [json.loads(path.read_text()) for path in journal.glob("op-*.json")]
    assert operation["target"]["node"] == "pve-test2" and operation["status"] == "completed"
    assert operation["mapping"]["targetNode"] == "pve-test2" and operation["plan"]["clone"]["method"] == "target"
    assert pvesim.schema_violations() == []
