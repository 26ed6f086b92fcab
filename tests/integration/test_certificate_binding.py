# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Operation-bound runs bind their client to the certificate the provider scope was computed from (issue 31).

The simulator's ``cert_swap`` fault presents, from a given TLS connection on, a second certificate signed by the same
CA: CA verification accepts it, only the comparison of the leaf with the scope's certificate refuses it. The run's
scope check is the 1st handshake after the rule, the run's client makes the 2nd; the simulator's request log shows
that nothing (no request, no token) reached the API from the refused run.
"""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_lifecycle import Env  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration


@pytest.fixture()
def env(pvesim: t.Any, tmp_path: Path) -> Env:
    return Env(pvesim, tmp_path)


def _clones(env: Env) -> int:
    return sum(1 for entry in env.pvesim.requests(method="POST") if entry["path"].endswith("/qemu/9000/clone"))


def test_a_stage_refuses_a_certificate_that_changed_after_the_scope_check(env: Env) -> None:
    env.pvesim.clear_requests()
    env.pvesim.add_fault(action="cert_swap", occurrence=2)
    with pytest.raises(VmanywareError) as info:
        env.stage(CloneStage())
    assert info.value.code == "certificate_changed"
    assert env.pvesim.requests() == []  # not even a read: the token never travelled over the swapped connection
    assert [f["fired"] for f in env.pvesim.faults()] == [1]
    assert env.store.stage(env.store.load(env.operation_id), "clone")["status"] == "pending"
    env.pvesim.clear_faults()
    assert env.stage(CloneStage())["done"] and _clones(env) == 1


def test_a_certificate_changed_before_the_scope_check_is_plan_changed(env: Env) -> None:
    env.pvesim.add_fault(action="cert_swap", occurrence="every")
    env.pvesim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        env.stage(CloneStage())
    assert info.value.code == "plan_changed" and env.pvesim.requests() == []


def test_cleanup_refuses_a_certificate_that_changed_after_the_scope_check(env: Env) -> None:
    env.fail_at_disk()  # a failed operation whose VM exists
    env.pvesim.add_fault(action="cert_swap", occurrence=2)
    with pytest.raises(VmanywareError) as info:
        env.cleanup()
    assert info.value.code == "certificate_changed"
    assert env.pvesim.requests() == []
    env.pvesim.clear_faults()
    assert env.vm_exists()
    result = env.cleanup()
    assert result["done"] and result["changed"]
    assert not env.vm_exists()
    deletes = [e for e in env.pvesim.requests(method="DELETE") if e["path"] == "/nodes/pve-test/qemu/201"]
    assert len(deletes) == 1
