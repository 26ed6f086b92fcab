# SPDX-License-Identifier: GPL-3.0-or-later
"""The roles with ``target_vmid: auto``: review (reserve, plan, confirmation block naming the VMID and
the lease's expiry) and apply (the lease reused, then turned into the operation's target claim).

Real ``ansible-playbook`` runs of the collection's playbooks against the simulator; the simulator's
request log and the journal directory are the evidence.
"""

from __future__ import annotations

import json
import re
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


def _run(playbook: str, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    args = [
        str(BIN / "ansible-playbook"),
        "vmanyware.proxmox." + playbook,
        "-e",
        "vmanyware_catalog_path=%s" % (REPO / "examples/catalog.yml"),
        "-e",
        "vmanyware_definition_path=%s" % (REPO / "examples/definition.yml"),
        "-e",
        "vmanyware_target_vmid=auto",
        *extra,
    ]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)


def _mutations(pvesim: t.Any) -> list[str]:
    return ["%s %s" % (entry["method"], entry["path"]) for entry in pvesim.requests() if entry["method"] in MUTATING]


def _leases(journal: Path) -> list[dict[str, t.Any]]:
    folder = journal / "leases"
    return [json.loads(path.read_text()) for path in sorted(folder.glob("*.json"))] if folder.exists() else []


def test_provision_with_auto_from_review_to_apply(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    pvesim.add_container(100, name="someone-elses-ct")  # skipped: an LXC guest holds 100
    journal = tmp_path / "journal"
    confirm = tmp_path / "confirm.yml"
    env = _env(pvesim, journal)
    extra = (
        "-e",
        "vmanyware_confirmation_file=%s" % confirm,
        "-e",
        "vmanyware_known_hosts_file=%s" % (tmp_path / "known_hosts"),
    )

    review = _run("provision", env, *extra)
    assert review.returncode == 0, review.stdout[-3000:]
    assert _mutations(pvesim) == [] and not list(journal.glob("op-*.json"))
    [lease] = _leases(journal)
    assert lease["vmid"] == 101 and lease["owner"] == str(REPO / "examples/definition.yml")
    text = confirm.read_text()
    # the block binds the concrete VMID; the comment above it names the lease's expiry
    assert text.startswith("# VMID 101 is reserved for this definition until %s" % lease["expiresAt"]), text
    block = yaml.safe_load(text)["provision_confirmation"]
    assert block["targetVmid"] == 101 and block["confirmed"] is True
    assert "VMID 101 is reserved" in review.stdout

    # a second review reuses the lease (same definition), another definition gets the next VMID
    again = _run("provision", env, *extra)
    assert again.returncode == 0 and [item["vmid"] for item in _leases(journal)] == [101]
    other = tmp_path / "other.yml"
    other.write_text((REPO / "examples/definition.yml").read_text().replace("name: kernel-lab", "name: other-lab"))
    planned = _run("plan", env, "-e", "vmanyware_definition_path=%s" % other)
    assert planned.returncode == 0, planned.stdout[-3000:]
    assert re.search(r"target\s+VM 102 'other-lab'", planned.stdout), planned.stdout[-3000:]
    assert sorted(item["vmid"] for item in _leases(journal)) == [101, 102]

    applied = _run("provision", env, *extra, "-e", "@%s" % confirm)
    assert applied.returncode == 0, applied.stdout[-3000:]
    sent = _mutations(pvesim)
    assert sent.count("POST /nodes/pve-test/qemu/9000/clone") == 1
    [clone] = pvesim.requests(method="POST", path_regex=r"/qemu/9000/clone$")
    assert int(clone["params"]["newid"]) == 101
    assert "8  packages   completed" in applied.stdout, applied.stdout[-3000:]  # 1-based, like the plan steps
    # the lease became the operation's target claim; the other definition's lease is untouched
    assert [item["vmid"] for item in _leases(journal)] == [102]
    [operation] = [json.loads(path.read_text()) for path in journal.glob("op-*.json")]
    assert operation["target"]["vmid"] == 101 and operation["confirmation"]["targetVmid"] == 101

    # a re-run resumes the operation (its claim answers for VMID 101): nothing is sent again
    pvesim.clear_requests()
    rerun = _run("provision", env, *extra, "-e", "@%s" % confirm)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    assert _mutations(pvesim) == []
    assert "is the target of operation %s" % operation["operationId"] in rerun.stdout
    assert pvesim.schema_violations() == []


def test_preflight_with_auto_checks_the_reserved_vmid(pvesim: t.Any, tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    result = _run("preflight", _env(pvesim, journal))
    assert result.returncode == 0, result.stdout[-3000:]
    assert "VMID 100 is reserved" in result.stdout
    assert [item["vmid"] for item in _leases(journal)] == [100]
    [nextid] = [
        entry for entry in pvesim.requests(path_regex=r"^/cluster/nextid$") if entry["params"].get("vmid") == "100"
    ][-1:]
    assert nextid["status"] == 200
    assert _mutations(pvesim) == []
