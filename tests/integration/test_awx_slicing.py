# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""AWX job slicing: K concurrent ansible-runner jobs, each with its slice of one inventory, sharing one journal.

A sliced job template runs K jobs at once (on K execution nodes); slice i gets every K-th host of the
inventory starting at i, and all of them mount the journal from shared storage. Every host asks for
``target_vmid: auto`` with its own lease owner, so the slices reserve VMIDs from the same range in the
same journal at the same moment. Checked: no VMID collision, no torn journal document, every host
provisioned exactly once (one accepted clone per VM, one completed operation per host).

``VMANYWARE_SLICE_HOSTS`` / ``VMANYWARE_SLICES`` change the inventory size and K (docs/awx.md's scaling
figures come from runs with K = 1, 2, 3); the test prints the wall time of the apply slices.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

ansible_runner = pytest.importorskip("ansible_runner")

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
HOSTS = int(os.environ.get("VMANYWARE_SLICE_HOSTS", "6"))
SLICES = int(os.environ.get("VMANYWARE_SLICES", "3"))
VMID_RANGE = [500, 599]
PLAYBOOK = """\
---
- name: Provision one VM per inventory host (one slice of the inventory)
  hosts: all
  gather_facts: false
  roles:
    - role: vmanyware.proxmox.provision
      provision_catalog_path: "{{ slice_catalog_path }}"
      provision_definition_path: "{{ slice_definition_dir }}/{{ inventory_hostname }}.yml"
      provision_target_vmid: auto
      provision_vmid_range: "{{ slice_vmid_range }}"
      provision_vmid_owner: "{{ inventory_hostname }}"
      provision_confirmation: "{{ (lookup('ansible.builtin.file', slice_confirm_dir ~ '/' ~ inventory_hostname ~ '.yml', errors='ignore')
        | default('{}', true) | from_yaml).provision_confirmation | default({}) }}"
      provision_confirmation_file: "{{ slice_confirm_dir }}/{{ inventory_hostname }}.yml"
      provision_known_hosts_file: "{{ slice_confirm_dir }}/known_hosts-{{ inventory_hostname }}"
      provision_add_host: false
"""


def _slice_dir(root: Path, index: int, hosts: list[str]) -> Path:
    """One AWX slice job's private data dir: the project playbook and the slice's hosts only."""
    pdd = root / ("slice-%d" % index)
    (pdd / "project").mkdir(parents=True)
    (pdd / "project" / "slice.yml").write_text(PLAYBOOK, encoding="utf-8")
    (pdd / "inventory").mkdir()
    inventory = {
        "all": {
            "hosts": {
                name: {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}
                for name in hosts
            }
        }
    }
    (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return pdd


def _run_slices(
    pdds: list[Path], extravars: dict[str, t.Any], envvars: dict[str, str], ident: str
) -> tuple[list[t.Any], float]:
    def job(pdd: Path) -> t.Any:
        return ansible_runner.run(
            private_data_dir=str(pdd),
            ident=ident,
            playbook="slice.yml",
            inventory="hosts.yml",
            extravars=extravars,
            envvars=envvars,
            forks=HOSTS,
            quiet=True,
            rotate_artifacts=0,
            timeout=900,
        )

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(pdds)) as pool:
        runs = list(pool.map(job, pdds))
    return runs, time.monotonic() - started


def _documents(journal: Path) -> tuple[list[dict[str, t.Any]], int]:
    docs, torn = [], 0
    for path in sorted(journal.glob("op-*.json")):
        try:
            docs.append(json.loads(path.read_text(encoding="utf-8")))
        except ValueError:
            torn += 1
    return docs, torn


def test_concurrent_slices_share_one_journal(pvesim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    pvesim.set_speed(100)
    pvesim.set_storage("local-lvm", total=4096 * 1024**3)
    conn = pvesim.connection
    names = ["lab-%02d" % i for i in range(HOSTS)]
    definitions, confirm = tmp_path / "definitions", tmp_path / "confirm"
    definitions.mkdir()
    confirm.mkdir()
    base = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    for name in names:
        (definitions / ("%s.yml" % name)).write_text(yaml.safe_dump(dict(base, name=name)), encoding="utf-8")
    journal = tmp_path / "journal"  # the shared storage every execution node mounts
    envvars = {
        "PROXMOX_HOST": conn["host"],
        "PROXMOX_PORT": str(conn["port"]),
        "PROXMOX_TOKEN_ID": conn["tokens"]["full"]["id"],
        "PROXMOX_TOKEN_SECRET": conn["tokens"]["full"]["secret"],
        "PROXMOX_CA_PATH": conn["ca_file"],
        "VMANYWARE_JOURNAL_DIR": str(journal),
        "VMANYWARE_PROVISIONING_ENABLED": "true",
        "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
    }
    extravars = {
        "slice_catalog_path": str(REPO / "examples/catalog.yml"),
        "slice_definition_dir": str(definitions),
        "slice_confirm_dir": str(confirm),
        "slice_vmid_range": VMID_RANGE,
    }
    # AWX's slicing: slice i runs hosts i, i+K, i+2K ... of the inventory
    slices = [names[index::SLICES] for index in range(SLICES)]
    pdds = [_slice_dir(tmp_path, index, hosts) for index, hosts in enumerate(slices)]

    reviews, _review_seconds = _run_slices(pdds, extravars, envvars, "review")
    assert [(run.status, run.rc) for run in reviews] == [("successful", 0)] * SLICES, [
        run.stdout.read()[-3000:] for run in reviews
    ]
    reserved = {
        name: yaml.safe_load((confirm / ("%s.yml" % name)).read_text(encoding="utf-8"))["provision_confirmation"][
            "targetVmid"
        ]
        for name in names
    }
    assert len(set(reserved.values())) == HOSTS, reserved  # concurrent reservations from one range: no VMID twice
    assert all(VMID_RANGE[0] <= vmid <= VMID_RANGE[1] for vmid in reserved.values())
    assert {e["method"] for e in pvesim.requests()} == {"GET"}

    applies, seconds = _run_slices(pdds, extravars, envvars, "apply")
    assert [(run.status, run.rc) for run in applies] == [("successful", 0)] * SLICES, [
        run.stdout.read()[-3000:] for run in applies
    ]
    # each slice touched only its own hosts
    for run, hosts in zip(applies, slices):
        seen = {e["event_data"].get("host") for e in run.events if e.get("event") == "runner_on_ok"}
        assert seen == set(hosts), (seen, hosts)
    docs, torn = _documents(journal)
    assert torn == 0
    completed = [doc for doc in docs if doc["status"] == "completed"]
    assert sorted(doc["plan"]["definitionName"] for doc in completed) == sorted(names) and len(docs) == HOSTS
    assert {doc["plan"]["definitionName"]: doc["target"]["vmid"] for doc in completed} == reserved
    clones = [
        e
        for e in pvesim.requests("POST", r"/qemu/9000/clone$")
        if isinstance(e.get("status"), int) and e["status"] < 300
    ]
    assert sorted(int(e["params"]["newid"]) for e in clones) == sorted(reserved.values())  # each host provisioned once
    assert all(pvesim.vm(vmid)["status"] == "running" for vmid in reserved.values())
    assert pvesim.schema_violations() == []
    print(
        "\nslicing: %d hosts in %d slices, apply wall %.1f s, load average %.1f"
        % (HOSTS, SLICES, seconds, os.getloadavg()[0])
    )
