# SPDX-License-Identifier: GPL-3.0-or-later
"""Placement leases on the simulator's three-node cluster (docs/operations.md, "Placement leases"): six reviews run at
once (one ``ansible`` run, six hosts, six forks: six worker processes running ``vmanyware_placement`` side by side before
anything is confirmed) spread 2/2/2 over the nodes when each passes its plan's VMID, because each chooses and writes
its lease under the journal lock and counts the leases of those before it; the same six without ``vmid`` all choose one
node (what every review did before the leases, and what shows this test can fail)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

import guest_support as gs

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
NODES = ("pve-test", "pve-test2", "pve-test3")
VMIDS = tuple(range(301, 307))
LAST_READ = "/nodes/pve-test3/network"  # the last Proxmox read of one review (nodes are examined in name order)


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    """The example catalog and definition, the template 9001 on shared storage and the guest onto shared storage, so
    every node qualifies (a clone with Proxmox's ``target``, or the mapping's own node)."""
    catalog = yaml.safe_load(gs.catalog_text())
    catalog["images"][0].update(templateVmid=9001, storage="shared")
    definition = yaml.safe_load(gs.definition_text())
    definition["targetNode"] = "auto"
    paths = (tmp_path / "catalog.yml", tmp_path / "definition.yml")
    paths[0].write_text(yaml.safe_dump(catalog), encoding="utf-8")
    paths[1].write_text(yaml.safe_dump(definition), encoding="utf-8")
    return paths


def _review_all(
    pvesim: t.Any, tmp_path: Path, name: str, *, with_vmid: bool
) -> tuple[dict[str, dict[str, t.Any]], float]:
    """One ``ansible`` ad-hoc run of ``vmanyware_placement`` on six hosts with six forks (each host one review, its
    VMID a host variable); the tree callback keeps each host's result. Returns the results by host and the seconds."""
    catalog, definition = _inputs(tmp_path)
    hosts = {"review%d" % vmid: {"review_vmid": vmid} for vmid in VMIDS}
    inventory = tmp_path / ("%s-inventory.yml" % name)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"reviews": {"hosts": hosts, "vars": local}}), encoding="utf-8")
    args = {"catalog_path": str(catalog), "definition_path": str(definition), "target_node": "auto"}
    if with_vmid:
        args["vmid"] = "{{ review_vmid }}"
    tree = tmp_path / ("%s-results" % name)
    env = gs.playbook_env(pvesim, tmp_path / "journal", ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.tree")
    started = time.monotonic()
    completed = subprocess.run(
        [
            str(BIN / "ansible"),
            "reviews",
            "-i",
            str(inventory),
            "-f",
            str(len(VMIDS)),
            "-m",
            "vmanyware.proxmox.vmanyware_placement",
            "-a",
            json.dumps(args),
            "-t",
            str(tree),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    seconds = time.monotonic() - started
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
    results = {host: json.loads((tree / host).read_text(encoding="utf-8")) for host in hosts}
    return results, seconds


def _spread(results: t.Mapping[str, t.Mapping[str, t.Any]]) -> dict[str, int]:
    counted = collections.Counter(result["node"] for result in results.values())
    return {node: counted.get(node, 0) for node in NODES}


def _overlapping(pvesim: t.Any) -> int:
    """The most reviews reading Proxmox at the same time (between a review's first read, ``GET /nodes``, and its last,
    in the simulator's request log): more than one means their reads ran side by side and saw the same state, so only
    the journal can tell them apart."""
    depth = most = 0
    for entry in pvesim.requests(method="GET"):
        if entry["path"] in ("/nodes", LAST_READ):
            depth += 1 if entry["path"] == "/nodes" else -1
            most = max(most, depth)
    return most


def test_six_concurrent_reviews_spread_over_three_nodes(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.reset("cluster")
    # Each review's reads take half a second more (the running guests), so the six worker processes, which Ansible starts
    # a few milliseconds apart, read Proxmox side by side whatever the load, and reach the journal lock together.
    pvesim.add_fault(method="GET", path=r"^/cluster/resources", action="delay", seconds=0.5)
    pvesim.clear_requests()
    results, seconds = _review_all(pvesim, tmp_path, "leased", with_vmid=True)
    overlap = _overlapping(pvesim)
    spread = _spread(results)
    print("with vmid: %s in %.1f s, %d reviews reading at once" % (spread, seconds, overlap))
    assert overlap >= 2, "the reviews did not run side by side: this run proves nothing about concurrency"
    assert spread == {"pve-test": 2, "pve-test2": 2, "pve-test3": 2}, {
        host: [(c["node"], c["reason"]) for c in result["candidates"]] for host, result in results.items()
    }
    assert all(r["placed"] and r["lease_written"] and r["changed"] for r in results.values())
    leases = {r["lease"]["vmid"]: r["lease"]["node"] for r in results.values()}
    assert leases == {int(host[len("review") :]): r["node"] for host, r in results.items()}
    stored = sorted((tmp_path / "journal" / "placement-leases").glob("*.json"))
    assert len(stored) == len(VMIDS)
    assert sorted(json.loads(path.read_text(encoding="utf-8"))["vmid"] for path in stored) == list(VMIDS)
    # the last review to get the lock counted the five leases before it, never its own
    last = max(results.values(), key=lambda r: r["lease"]["created_at"])
    assert sum(c["leased_guests"] for c in last["candidates"]) == len(VMIDS) - 1
    assert [e for e in pvesim.requests() if e["method"] != "GET"] == []  # Proxmox is only read
    assert pvesim.schema_violations() == []

    # the same six again, without vmid, on a fresh journal: nothing is leased, every review sees the same state
    pvesim.clear_requests()
    (tmp_path / "plain").mkdir()
    plain, seconds = _review_all(pvesim, tmp_path / "plain", "plain", with_vmid=False)
    spread = _spread(plain)
    print("without vmid: %s in %.1f s, %d reviews reading at once" % (spread, seconds, _overlapping(pvesim)))
    assert sorted(spread.values()) == [0, 0, 6]
    assert all(r["lease"] is None and r["lease_written"] is False for r in plain.values())
    assert not (tmp_path / "plain" / "journal" / "placement-leases").exists()
