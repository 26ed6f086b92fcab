# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.vmanyware.proxmox.plugins.filter.check_table import check_table


def test_checks_are_aligned_one_per_line() -> None:
    lines = check_table([
        {"code": "api_reachable", "status": "passed", "message": "ok"},
        {"code": "vmid_free", "status": "unknown", "message": "cannot tell"},
    ])
    assert lines == ["passed   api_reachable  ok", "unknown  vmid_free      cannot tell"]


def test_stages_show_position_kind_status_and_upid() -> None:
    lines = check_table([
        {"position": 1, "kind": "clone", "status": "completed", "upid": "UPID:n:1:2:3:qmclone:9000:u:"},
        {"position": 2, "kind": "resources", "status": "pending", "upid": None},
    ])
    assert lines == ["1  clone      completed UPID:n:1:2:3:qmclone:9000:u:", "2  resources  pending"]


@pytest.mark.parametrize("bad", [None, "x", [1], [{"other": 1}]])
def test_other_input_is_refused(bad: object) -> None:
    with pytest.raises(AnsibleFilterError):
        check_table(bad)
