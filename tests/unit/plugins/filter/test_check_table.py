# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.filter.check_table import check_table


def test_checks_are_aligned_one_per_line() -> None:
    lines = check_table(
        [
            {"code": "api_reachable", "status": "passed", "message": "ok"},
            {"code": "vmid_free", "status": "unknown", "message": "cannot tell"},
        ]
    )
    assert lines == ["passed   api_reachable  ok", "unknown  vmid_free      cannot tell"]


def test_stages_show_position_kind_status_and_upid() -> None:
    lines = check_table(
        [
            {"position": 1, "kind": "clone", "status": "completed", "upid": "UPID:n:1:2:3:qmclone:9000:u:"},
            {"position": 2, "kind": "resources", "status": "pending", "upid": None},
        ]
    )
    assert lines == ["1  clone      completed UPID:n:1:2:3:qmclone:9000:u:", "2  resources  pending"]


def test_capability_operations_show_status_via_and_reasons() -> None:
    lines = check_table(
        [
            {"operation": "vm_provisioning", "status": "available", "via": "api", "reasons": []},
            {
                "operation": "template_build",
                "status": "unavailable",
                "via": "ssh",
                "reasons": [
                    {"kind": "version", "message": "needs 8.4"},
                    {"kind": "privilege", "message": "VM.Allocate on /vms is missing"},
                ],
            },
        ]
    )
    assert lines == [
        "available    vm_provisioning  via api",
        "unavailable  template_build   via ssh: needs 8.4; VM.Allocate on /vms is missing",
    ]


@pytest.mark.parametrize("bad", [None, "x", [1], [{"other": 1}]])
def test_other_input_is_refused(bad: object) -> None:
    with pytest.raises(AnsibleFilterError):
        check_table(bad)


def test_history_rows_are_aligned_columns() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.filter.check_table import check_table as table

    rows = [
        {
            "operation_id": "op-" + "a" * 26,
            "created_at": "2026-12-01T10:00:00.000000Z",
            "status": "failed",
            "target_node": "pve",
            "target_vmid": 201,
            "definition_name": "web",
            "failure_code": "task_failed",
        },
        {
            "operation_id": "op-" + "b" * 26,
            "created_at": "2026-11-30T09:00:00.000000Z",
            "status": "completed",
            "target_node": "pve",
            "target_vmid": 1201,
            "definition_name": "kernel-lab",
            "failure_code": None,
        },
    ]
    lines = table(rows)
    assert lines[0] == "2026-12-01 10:00:00  op-%s  failed     pve/201   web         task_failed" % ("a" * 26)
    assert lines[1] == "2026-11-30 09:00:00  op-%s  completed  pve/1201  kernel-lab" % ("b" * 26)
