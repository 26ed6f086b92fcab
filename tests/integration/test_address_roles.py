# SPDX-License-Identifier: GPL-3.0-or-later
"""``address: auto`` through the roles (docs/networks.md, "Address pools and leases"): two review runs at once lease
different addresses; the apply run reuses its lease, provisions the VM with the address (verified by readiness through
the agent) and turns the lease into the operation's address claim; a re-run sends nothing.

Real ``ansible-playbook`` runs of the collection's playbooks against the simulator's cluster seed (``vmbr2`` on
``pve-test`` is VLAN-aware); the simulator's request log and the journal directory are the evidence.
"""

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
LAB = {
    "name": "lab",
    "bridge": "vmbr2",
    "vlan": 42,
    "ipv4": {
        "mode": "static",
        "subnet": "203.0.113.0/24",
        "gateway": "203.0.113.1",
        "dns": ["203.0.113.53"],
        "pool": [{"first": "203.0.113.100", "last": "203.0.113.120"}],
    },
}


_env = gs.playbook_env


def _files(tmp_path: Path, *names: str) -> tuple[Path, list[Path]]:
    catalog = yaml.safe_load((REPO / "examples/catalog.yml").read_text(encoding="utf-8"))
    catalog["networks"] = [LAB]
    catalog_path = tmp_path / "catalog.yml"
    catalog_path.write_text(yaml.safe_dump(catalog), encoding="utf-8")
    definitions = []
    for name in names:
        definition = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
        definition.update(name=name, packages=[])
        definition["network"] = {"name": "lab", "ipv4": {"address": "auto"}}
        path = tmp_path / (name + ".yml")
        path.write_text(yaml.safe_dump(definition), encoding="utf-8")
        definitions.append(path)
    return catalog_path, definitions


def _args(playbook: str, catalog: Path, definition: Path, *extra: str) -> list[str]:
    return [
        str(BIN / "ansible-playbook"),
        "vmanyware.proxmox." + playbook,
        "-e",
        "vmanyware_catalog_path=%s" % catalog,
        "-e",
        "vmanyware_definition_path=%s" % definition,
        "-e",
        "vmanyware_target_vmid=auto",
        *extra,
    ]


def _apply(
    catalog: Path, definition: Path, confirm: Path, env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    args = _args("provision", catalog, definition, "-e", "@%s" % confirm)
    args += ["-e", "vmanyware_known_hosts_file=%s" % (tmp_path / "known_hosts")]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)


def _leases(journal: Path) -> dict[str, str]:
    folder = journal / "address-leases"
    leases = [json.loads(path.read_text()) for path in folder.glob("*.json")] if folder.exists() else []
    return {lease["owner"]: lease["address"] for lease in leases}


def _mutations(pvesim: t.Any) -> list[str]:
    return ["%s %s" % (entry["method"], entry["path"]) for entry in pvesim.requests() if entry["method"] in MUTATING]


def test_concurrent_reviews_lease_different_addresses_and_the_apply_run_uses_its_own(
    pvesim: t.Any, tmp_path: Path
) -> None:
    pvesim.reset("cluster")
    pvesim.set_speed(400)
    pvesim.set_timings(guest={"agent_up_after": 0.2, "dhcp_after_agent": 0.1, "cloudinit_done_after_boot": 0.4})
    journal = tmp_path / "journal"
    env = _env(pvesim, journal)
    catalog, (web, db) = _files(tmp_path, "web", "db")
    confirms = {path: tmp_path / ("confirm-%s.yml" % path.stem) for path in (web, db)}
    running = [
        subprocess.Popen(
            _args("provision", catalog, path, "-e", "vmanyware_confirmation_file=%s" % confirms[path]),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for path in (web, db)
    ]
    outputs = [process.communicate(timeout=600)[0] for process in running]
    assert [process.returncode for process in running] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert _mutations(pvesim) == [] and not list(journal.glob("op-*.json"))
    leases = _leases(journal)
    assert set(leases) == {str(web), str(db)} and leases[str(web)] != leases[str(db)]
    assert set(leases.values()) <= {"203.0.113.%d" % n for n in range(100, 121)}
    blocks = {path: yaml.safe_load(confirms[path].read_text())["provision_confirmation"] for path in (web, db)}
    assert blocks[web]["addresses"] == {"ipv4": leases[str(web)]}  # the confirmation names the leased address

    applied = _apply(catalog, web, confirms[web], env, tmp_path)
    assert applied.returncode == 0, applied.stdout[-4000:]
    address = leases[str(web)]
    [operation] = [json.loads(path.read_text()) for path in journal.glob("op-*.json")]
    vmid = operation["target"]["vmid"]
    config = pvesim.vm(vmid)["config"]
    assert config["ipconfig0"] == "ip=%s/24,gw=203.0.113.1" % address and ",tag=42" in config["net0"]
    assert operation["handoff"]["ipv4"] == address  # readiness saw the planned address through the agent
    # the lease became the operation's claim; db's lease is untouched
    assert _leases(journal) == {str(db): leases[str(db)]}
    assert len(list((journal / "address-claims").glob("*.json"))) == 1

    pvesim.clear_requests()
    rerun = _apply(catalog, web, confirms[web], env, tmp_path)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert _mutations(pvesim) == []
    assert "is planned by operation %s" % operation["operationId"] in rerun.stdout
    assert pvesim.schema_violations() == []
