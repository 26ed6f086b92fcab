# SPDX-License-Identifier: GPL-3.0-or-later
"""Another client takes the reserved VMID before the clone stage sends its clone.

The lease only protects a VMID against allocations through the same journal; an outside clone (another
tool, a person in the web UI) can still take it. Whether that happens before the clone stage reads
(preconditions) or between its read and its POST (Proxmox then refuses the clone), the stage stops with
``vmid_taken``: nothing of ours was created, the outside VM is untouched, there is no second VM, and the
stage stays ``pending`` so the operator decides (docs/operations.md, "Automatic VMIDs").
"""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vmid_support import Reserver  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import run_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import wait_task  # noqa: E402

pytestmark = pytest.mark.integration
CLONE_PATH = "/nodes/pve-test/qemu/9000/clone"


class OutsideCloneFirst:
    """A client whose first clone POST is preceded by another client's clone to the same VMID (the race)."""

    def __init__(self, client: ProxmoxClient, outside: t.Callable[[int], None]) -> None:
        self.client = client
        self.outside = outside
        self.raced = False

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        if method == "POST" and path == CLONE_PATH and not self.raced:
            self.raced = True
            self.outside(int((params or {})["newid"]))
        return self.client.request(method, path, params)

    def __getattr__(self, name: str) -> t.Any:
        return getattr(self.client, name)


class Setup:
    """Reserve a VMID with ``auto``, plan and confirm with it, record the operation: the apply run up to the clone."""

    def __init__(self, pvesim: t.Any, tmp_path: Path) -> None:
        reserver = Reserver(pvesim, tmp_path)
        self.pvesim = pvesim
        self.params = dict(reserver.params)
        self.settings = reserver.settings
        self.store = reserver.store
        self.vmid = reserver.reserve("kernel-lab")["vmid"]
        self.params["operation_id"] = reserver.create_operation(self.vmid)["operation_id"]
        self.params["provisioning_enabled"] = True  # stages re-read the gate before every write
        pvesim.clear_requests()

    def outside_clone(self, vmid: int) -> None:
        with ProxmoxClient(self.settings) as client:
            upid = client.post(
                CLONE_PATH,
                newid=vmid,
                full=1,
                storage="local-lvm",
                name="someone-else",
                description="made by another tool",
            )
            # The other tool's clone holds the VMID at once; its config is complete once its task ended (volumes allocated).
            wait_task(client, upid, timeout=120)

    def run_clone(self, client_factory: t.Callable[[t.Any], t.Any] = ProxmoxClient) -> dict[str, t.Any]:
        return run_stage(self.params, CloneStage(), check_mode=False, diff=False, client_factory=client_factory)

    def clone_stage(self) -> dict[str, t.Any]:
        return t.cast(dict, self.store.stage(self.store.load(self.params["operation_id"]), "clone"))

    def our_clone_posts(self) -> list[dict[str, t.Any]]:
        return [
            entry
            for entry in self.pvesim.requests(method="POST", path_regex=r"/qemu/9000/clone$")
            if entry["params"].get("name") != "someone-else"
        ]


def assert_no_second_vm(setup: Setup) -> None:
    vms = [guest["vmid"] for guest in setup.pvesim.root_call("GET", "/cluster/resources", type="vm")]
    assert sorted(vms) == [setup.vmid, 9000]
    assert setup.pvesim.vm(setup.vmid)["config"]["description"] == "made by another tool"
    assert setup.pvesim.schema_violations() == []


def test_outside_clone_between_preconditions_and_clone(pvesim: t.Any, tmp_path: Path) -> None:
    setup = Setup(pvesim, tmp_path)
    raced: list[OutsideCloneFirst] = []

    def factory(settings: t.Any) -> OutsideCloneFirst:
        raced.append(OutsideCloneFirst(ProxmoxClient(settings), setup.outside_clone))
        return raced[-1]

    with pytest.raises(VmanywareError) as info:
        setup.run_clone(factory)
    assert raced[0].raced
    assert info.value.code == "vmid_taken" and info.value.details["rule"] == "taken_before_clone"
    # our clone reached Proxmox and was refused before it changed anything
    posts = setup.our_clone_posts()
    assert len(posts) == 1 and posts[0]["status"] == 500
    record = setup.clone_stage()
    assert record["status"] == "pending" and not record["submissionStarted"] and record["upid"] is None
    assert_no_second_vm(setup)
    # a re-run reads the VMID taken and sends nothing
    pvesim.clear_requests()
    with pytest.raises(VmanywareError) as again:
        setup.run_clone()
    assert again.value.code == "vmid_taken" and setup.our_clone_posts() == []
    assert {entry["method"] for entry in pvesim.requests()} == {"GET"}
    assert_no_second_vm(setup)


def test_container_on_the_vmid_before_the_clone(pvesim: t.Any, tmp_path: Path) -> None:
    setup = Setup(pvesim, tmp_path)
    pvesim.add_container(setup.vmid, name="someone-elses-ct")
    with pytest.raises(VmanywareError) as info:
        setup.run_clone()
    assert info.value.code == "vmid_taken" and setup.clone_stage()["status"] == "pending"
    assert {entry["method"] for entry in pvesim.requests()} == {"GET"}


def test_container_created_between_preconditions_and_clone(pvesim: t.Any, tmp_path: Path) -> None:
    setup = Setup(pvesim, tmp_path)

    def factory(settings: t.Any) -> OutsideCloneFirst:
        return OutsideCloneFirst(ProxmoxClient(settings), pvesim.add_container)

    with pytest.raises(VmanywareError) as info:
        setup.run_clone(factory)
    assert info.value.code == "vmid_taken" and setup.clone_stage()["status"] == "pending"
    posts = setup.our_clone_posts()
    assert len(posts) == 1 and posts[0]["status"] == 500
    assert [guest["type"] for guest in pvesim.root_call("GET", "/cluster/resources", type="vm")].count("qemu") == 1
