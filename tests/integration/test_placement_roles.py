# SPDX-License-Identifier: GPL-3.0-or-later
"""The provision role with ``target_node: auto`` (docs/operations.md, "Placement"): the review run places and prints
the confirmation block naming the node, an apply run whose confirmed node no longer qualifies stops with
``plan_changed`` before anything is sent, and an apply run whose node still qualifies provisions there.

Real ``ansible-playbook`` runs of the collection's playbook against the simulator's three-node cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

import guest_support as gs

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MUTATING = ("POST", "PUT", "DELETE")


_env = gs.playbook_env


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
    # the review holds its choice for VMID 201 with a placement lease (docs/operations.md, "Placement leases")
    assert "lease: node pve-test2 held for VMID 201 until" in review.stdout
    [lease] = [json.loads(path.read_text()) for path in (journal / "placement-leases").glob("*.json")]
    assert (lease["vmid"], lease["node"]) == (201, "pve-test2")

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
    assert list((journal / "placement-leases").glob("*.json")) == []  # creating the operation ended the lease
    assert pvesim.schema_violations() == []


def test_a_definition_asking_for_auto_is_placed_without_the_role_variable(pvesim: t.Any, tmp_path: Path) -> None:
    """The issue's whole case in one definition: a static address on a VLAN and ``targetNode: auto``, provisioned by
    the playbook with no placement variable to the chosen node, the address verified by readiness through the agent."""
    pvesim.reset("cluster")
    pvesim.set_speed(200)
    pvesim.set_node_maintenance("pve-test", True)  # vmbr2 is on pve-test and pve-test2 only: pve-test2 is chosen
    catalog = yaml.safe_load((REPO / "examples/catalog.yml").read_text())
    catalog["images"][0].update(templateVmid=9001, storage="shared")
    catalog["networks"] = [
        {
            "name": "lab",
            "bridge": "vmbr2",
            "vlan": 42,
            "ipv4": {"mode": "static", "subnet": "203.0.113.0/24", "gateway": "203.0.113.1", "dns": ["203.0.113.53"]},
        }
    ]
    definition = yaml.safe_load((REPO / "examples/definition.yml").read_text())
    definition.update(targetNode="auto", packages=[], network={"name": "lab", "ipv4": {"address": "203.0.113.70"}})
    paths = {"catalog": tmp_path / "catalog.yml", "definition": tmp_path / "definition.yml"}
    paths["catalog"].write_text(yaml.safe_dump(catalog))
    paths["definition"].write_text(yaml.safe_dump(definition))
    confirm = tmp_path / "confirm.yml"
    env = _env(pvesim, tmp_path / "journal")
    args = [
        str(BIN / "ansible-playbook"),
        "vmanyware.proxmox.provision",
        "-e",
        "vmanyware_catalog_path=%s" % paths["catalog"],
        "-e",
        "vmanyware_definition_path=%s" % paths["definition"],
        "-e",
        "vmanyware_target_vmid=auto",
        "-e",
        "vmanyware_confirmation_file=%s" % confirm,
        "-e",
        "vmanyware_known_hosts_file=%s" % (tmp_path / "known_hosts"),
    ]
    review = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert review.returncode == 0, review.stdout[-3000:]
    assert _mutations(pvesim) == []
    block = yaml.safe_load(confirm.read_text())["provision_confirmation"]
    assert block["targetNode"] == "pve-test2"
    applied = subprocess.run(
        args + ["-e", "@%s" % confirm], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert applied.returncode == 0, applied.stdout[-4000:]
    [operation] = [json.loads(p.read_text()) for p in (tmp_path / "journal").glob("op-*.json")]
    vmid = operation["target"]["vmid"]
    assert operation["target"]["node"] == "pve-test2"
    [listed] = [g for g in pvesim.root_call("GET", "/cluster/resources", type="vm") if g["vmid"] == vmid]
    assert listed["node"] == "pve-test2"
    config = pvesim.root_call("GET", "/nodes/pve-test2/qemu/%d/config" % vmid)
    assert config["ipconfig0"] == "ip=203.0.113.70/24,gw=203.0.113.1" and "tag=42" in config["net0"]
    assert operation["handoff"]["ipv4"] == "203.0.113.70"  # readiness saw the address through the guest agent
    [clone] = [e for e in pvesim.requests() if e["method"] == "POST" and e["path"].endswith("/clone")]
    assert clone["path"] == "/nodes/pve-test/qemu/9001/clone" and clone["params"]["target"] == "pve-test2"
    assert pvesim.schema_violations() == []
