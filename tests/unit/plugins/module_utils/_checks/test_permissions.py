# SPDX-License-Identifier: GPL-3.0-or-later
"""The privilege table agrees with the official schema, and docs/permissions.md is generated from it."""

from __future__ import annotations

import subprocess
import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.permissions import (
    ENDPOINTS,
    STAGE_PRIVILEGES,
    effective_privileges,
    render_permissions_doc,
    required_privileges,
)

schema_mod = pytest.importorskip("pvesim.schema")
REPO = Path(__file__).resolve().parents[5]
VALUES = {"node": "pve", "template": 9000, "target": 201, "storage": "local-lvm", "bridge": "vmbr0"}


def _held(stage: str) -> dict[str, set[str]]:
    held: dict[str, set[str]] = {}
    for row in required_privileges(
        [stage], major=9, **{k if k not in ("template", "target") else f"{k}_vmid": v for k, v in VALUES.items()}
    ):
        held.setdefault(row.path, set()).add(row.privilege)
    return held


def _satisfied(check: t.Any, held: dict[str, set[str]], subst: dict[str, t.Any]) -> bool:
    kind = check[0]
    if kind == "and":
        return all(_satisfied(c, held, subst) for c in check[1:])
    if kind == "or":
        return any(_satisfied(c, held, subst) for c in check[1:])
    if kind == "perm":
        path = check[1]
        if "{pool}" in path:
            return False  # the collection never uses pools
        path = path.format(**subst)
        privs = check[2]
        options = check[3:]
        have = held.get(path, set())
        if "any" in options:
            return any(p in have for p in privs)
        return all(p in have for p in privs)
    raise AssertionError(f"unhandled permission check {kind}")


@pytest.mark.parametrize("use", ENDPOINTS, ids=lambda u: f"{u.method} {u.path} ({u.stage})")
def test_table_satisfies_schema_permissions(use: t.Any) -> None:
    schema = schema_mod.Schema.load()
    endpoint = schema.paths[use.path][use.method]
    perms = endpoint.permissions
    check = perms.get("check")
    if check is None:
        assert perms.get("user") == "all", f"{use.method} {use.path}: no check and not user=all"
        return
    vmid = VALUES["template"] if use.vmid == "template" else VALUES["target"]
    subst = {"vmid": vmid, "newid": VALUES["target"], "node": VALUES["node"], "storage": VALUES["storage"]}
    assert _satisfied(check, _held(use.stage), subst), (
        f"{use.method} {use.path}: table for {use.stage} does not satisfy {check}"
    )


def test_schema_documented_extra_privileges_present() -> None:
    """Privileges the schema only describes in text (clone: storage and SDN.Use; resize: storage)."""
    schema = schema_mod.Schema.load()
    clone = schema.paths["/nodes/{node}/qemu/{vmid}/clone"]["POST"].permissions["description"]
    assert "Datastore.AllocateSpace" in clone and "SDN.Use" in clone
    clone_held = _held("clone")
    assert "Datastore.AllocateSpace" in clone_held["/storage/local-lvm"]
    assert "SDN.Use" in clone_held["/sdn/zones/localnetwork/vmbr0"]
    assert "Datastore.AllocateSpace" in _held("disk")["/storage/local-lvm"]


def test_every_stage_has_endpoints_and_all_privileges_exist_in_pve() -> None:
    assert {u.stage for u in ENDPOINTS} == set(STAGE_PRIVILEGES)
    known = {
        "VM.Audit",
        "VM.Clone",
        "VM.Allocate",
        "VM.Config.CPU",
        "VM.Config.Memory",
        "VM.Config.Disk",
        "VM.Config.Cloudinit",
        "VM.Config.Network",
        "VM.Config.Options",
        "VM.PowerMgmt",
        "VM.Snapshot",
        "VM.Monitor",
        "VM.GuestAgent.Audit",
        "VM.GuestAgent.Unrestricted",
        "Datastore.Audit",
        "Datastore.AllocateSpace",
        "SDN.Use",
        "Sys.Audit",
    }
    assert {r.privilege for rows in STAGE_PRIVILEGES.values() for r in rows} <= known


def test_version_specific_guest_agent_privileges() -> None:
    nine = {
        r.privilege
        for r in required_privileges(
            ["packages"], major=9, node="n", template_vmid=1, target_vmid=2, storage="s", bridge="b"
        )
    }
    eight = {
        r.privilege
        for r in required_privileges(
            ["packages"], major=8, node="n", template_vmid=1, target_vmid=2, storage="s", bridge="b"
        )
    }
    assert nine == {"VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"} and eight == {"VM.Monitor"}


def test_effective_privileges() -> None:
    tree = {"/": {"Sys.Audit": 0}, "/vms": {"VM.Audit": 1, "VM.Clone": 0}, "/vms/201": {"VM.Allocate": 1}}
    assert effective_privileges(tree, "/vms/201") == {"VM.Allocate"}
    assert effective_privileges(tree, "/vms/9000") == {"VM.Audit"}
    assert effective_privileges(tree, "/nodes/pve") == set()
    assert effective_privileges({"/storage/x": {}}, "/storage/x") == set()


def test_permissions_doc_is_generated() -> None:
    committed = (REPO / "docs" / "permissions.md").read_text(encoding="utf-8")
    assert committed == render_permissions_doc(), "run: python tools/gen_permissions_doc.py"
    assert 'pveum role add VmanywareProvisioner --privs "' in committed


def test_generator_check_mode() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "gen_permissions_doc.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
