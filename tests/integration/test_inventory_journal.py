# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``vmanyware.proxmox.journal`` inventory plugin, run by ``ansible-inventory`` against a journal directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats import hashing as _hashing
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
SCOPE = "pve:" + "c" * 64
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO"


def _operation(store: JournalStore, name: str, vmid: int, ipv4: str | None, status: str = "completed") -> str:
    definition_hash = _hashing.definition_hash(
        {"name": name}
    )  # the recorded hashes are those of the snapshots (checked on load)
    plan = {
        "definitionHash": definition_hash,
        "planHash": _hashing.plan_hash(definition_hash, {}, vmid),
        "definitionName": name,
        "guestUser": "debian",
        "target": {"name": name, "vmid": vmid},
    }
    document, _created = store.create_operation(
        idempotency_key=None,
        provider_scope_id=SCOPE,
        definition={"name": name},
        mapping={},
        plan=plan,
        confirmation={},
        target_node="pve",
        target_vmid=vmid,
        stage_kinds=["readiness"],
    )
    oid = t.cast(str, document["operationId"])
    store.record_dispatch(oid, "readiness", {"noop": True})
    if status == "failed":
        store.record_failed(
            oid,
            "readiness",
            "readiness_timeout",
            "cloud-init in the guest did not finish before the readiness deadline.",
        )
        return oid
    if ipv4:
        store.set_handoff(
            oid,
            {
                "ipv4": ipv4,
                "guestUser": "debian",
                "knownHosts": ["%s %s" % (ipv4, KEY)],
                "hostKeyFingerprints": {"ssh-ed25519": "SHA256:abc"},
                "readinessObservedAt": document["createdAt"],
            },
        )
    store.record_completed(oid, "readiness", {})
    store.update_operation_status(oid, "completed", expected_status="open")
    return oid


def _inventory(tmp_path: Path, journal: Path, stderr: list[str] | None = None, **options: t.Any) -> dict[str, t.Any]:
    source = tmp_path / "provisioned.vmanyware_journal.yml"
    source.write_text(json.dumps(dict({"plugin": "vmanyware.proxmox.journal", "journal_dir": str(journal)}, **options)))
    proc = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(source), "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="true"),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if stderr is not None:
        stderr.append(proc.stderr)
    return t.cast(dict, _plain(json.loads(proc.stdout)))


def _plain(value: t.Any) -> t.Any:
    """The values without ansible-inventory's unsafe markers (journal data is never templated)."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def test_one_host_per_completed_operation_with_strict_host_keys(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    store = JournalStore(str(journal))
    older = _operation(store, "web", 201, "192.0.2.10")
    store.close_operation(older)
    newest = _operation(store, "web", 201, "192.0.2.11")  # the same host later: the newest wins
    db = _operation(store, "db", 202, "192.0.2.20")
    _operation(store, "cache", 203, None)  # completed without an address: nothing to connect to
    _operation(store, "broken", 204, None, status="failed")
    listed = _inventory(tmp_path, journal)
    hostvars = listed["_meta"]["hostvars"]
    assert sorted(hostvars) == ["db-202", "web-201"]
    web = hostvars["web-201"]
    assert (
        web["ansible_host"] == "192.0.2.11"
        and web["ansible_user"] == "debian"
        and web["vmanyware_operation_id"] == newest
    )
    known_hosts = web["ansible_ssh_common_args"].split("UserKnownHostsFile=")[1]
    assert "StrictHostKeyChecking=yes" in web["ansible_ssh_common_args"]
    assert (
        Path(known_hosts).read_text() == "192.0.2.11 %s\n" % KEY and Path(known_hosts).stat().st_mode & 0o777 == 0o600
    )
    assert known_hosts == str(journal / "known_hosts" / newest)
    assert (
        web["vmanyware_host_key_fingerprints"] == {"ssh-ed25519": "SHA256:abc"}
        and hostvars["db-202"]["vmanyware_operation_id"] == db
    )
    assert sorted(listed["vmanyware_definition_web"]["hosts"]) == ["web-201"]
    assert sorted(listed["vmanyware_status_completed"]["hosts"]) == ["db-202", "web-201"]

    filtered = _inventory(
        tmp_path, journal, definition_name="db", keyed_groups=[{"key": "vmanyware_node", "prefix": "node"}]
    )
    assert sorted(filtered["_meta"]["hostvars"]) == ["db-202"] and filtered["node_pve"]["hosts"] == ["db-202"]
    assert sorted(_inventory(tmp_path, journal, target_vmid=201)["_meta"]["hostvars"]) == ["web-201"]
    assert _inventory(tmp_path, journal, since="2999-01-01")["_meta"]["hostvars"] == {}
    # compose sees the plugin's own values (the real-guest acceptance routes SSH this way, keeping the host key check)
    routed = _inventory(
        tmp_path,
        journal,
        target_vmid=201,
        compose={
            "ansible_ssh_common_args": "ansible_ssh_common_args ~ ' -o HostKeyAlias=' ~ ansible_host",
            "ansible_host": "'127.0.0.1'",
        },
    )
    web = routed["_meta"]["hostvars"]["web-201"]
    assert web["ansible_host"] == "127.0.0.1" and web["ansible_ssh_common_args"].endswith(
        "UserKnownHostsFile=%s -o HostKeyAlias=192.0.2.11" % known_hosts
    )


def test_a_missing_journal_fails_the_inventory_source(tmp_path: Path) -> None:
    source = tmp_path / "x.vmanyware_journal.yml"
    source.write_text(json.dumps({"plugin": "vmanyware.proxmox.journal", "journal_dir": str(tmp_path / "nope")}))
    proc = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(source), "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, ANSIBLE_INVENTORY_UNPARSED_FAILED="true"),
        check=False,
    )
    assert proc.returncode != 0 and "journal directory does not exist" in proc.stderr
    assert not (tmp_path / "nope").exists()


def test_a_bad_operation_file_is_skipped_with_a_warning_and_the_others_stay_hosts(tmp_path: Path) -> None:
    """Issue 31: one corrupt, symlinked, non-regular or re-hashed operation file no longer empties the inventory."""
    journal = tmp_path / "journal"
    store = JournalStore(str(journal))
    _operation(store, "web", 201, "192.0.2.10")
    bad = {
        "truncated": _operation(store, "db", 202, "192.0.2.20"),
        "symlink": _operation(store, "cache", 203, "192.0.2.30"),
        "directory": _operation(store, "queue", 204, "192.0.2.40"),
        "rehashed": _operation(store, "mail", 205, "192.0.2.50"),
    }
    path = {kind: Path(store.operation_path(oid)) for kind, oid in bad.items()}
    path["truncated"].write_bytes(path["truncated"].read_bytes()[:100])
    (tmp_path / "elsewhere.json").write_bytes(path["symlink"].read_bytes())
    path["symlink"].unlink()
    path["symlink"].symlink_to(tmp_path / "elsewhere.json")
    path["directory"].unlink()
    path["directory"].mkdir()
    edited = json.loads(path["rehashed"].read_text())
    edited["plan"]["planHash"] = "b" * 64
    path["rehashed"].write_text(json.dumps(edited))
    stderr: list[str] = []
    listed = _inventory(tmp_path, journal, stderr)
    assert sorted(listed["_meta"]["hostvars"]) == ["web-201"]
    warnings = " ".join(stderr[0].split())  # the warning may be wrapped to the terminal's width
    for oid in bad.values():
        assert "%s.json was skipped (journal_corrupt)" % oid in warnings
    assert "192.0.2.20" not in stderr[0] and "Traceback" not in stderr[0]
