# SPDX-License-Identifier: GPL-3.0-or-later
"""``_vmid``: the reservation rules with a fake Proxmox client and an injected clock."""

from __future__ import annotations

import json
import os
import threading
import typing as t
from pathlib import Path

import pytest
from pve_fake import FakeClient

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.vmid import datacenter_range, release, reserve

REPO = Path(__file__).resolve().parents[5]
SCOPE = "pve:" + "e" * 64
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}


def fake_pve(guests: t.Iterable[int] = (9000,), options: t.Any = None, hidden: t.Iterable[int] = ()) -> FakeClient:
    """GETs of /cluster/resources, /cluster/options and /cluster/nextid over a set of guest VMIDs.

    ``hidden``: guests the token cannot audit: nextid refuses them, resources does not list them.
    """
    taken = set(guests) | set(hidden)

    def nextid(params: dict[str, t.Any]) -> t.Any:
        if params["vmid"] in taken:
            return ProviderError(code="conflict")
        return str(params["vmid"])  # PVE may answer the integer as a string

    return FakeClient(
        {
            "/cluster/resources": [{"vmid": vmid, "type": "qemu"} for vmid in sorted(set(guests))],
            "/cluster/options": options if options is not None else {},
            "/cluster/nextid": nextid,
        },
        provider_scope_id=SCOPE,
    )


def calls(client: FakeClient) -> list[tuple[str, dict[str, t.Any]]]:
    return [(path, params) for _method, path, params in client.log]


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def test_bad_options_have_fixed_codes_and_echo_nothing(store: JournalStore) -> None:
    cases = [
        ({"owner": "x\ny"}, "invalid_option"),
        ({"owner": ""}, "invalid_option"),
        ({"owner": "o", "purpose": "lxc"}, "invalid_option"),
        ({"owner": "o", "lease_seconds": 0}, "invalid_option"),
        ({"owner": "o", "vmid_range": [200]}, "invalid_option"),
        ({"owner": "o", "vmid_range": [300, 200]}, "invalid_option"),
        ({"owner": "o", "vmid_range": [99, 200]}, "invalid_target_vmid"),
        ({"owner": "o", "vmid": 1000000000}, "invalid_target_vmid"),
    ]
    for options, code in cases:
        client = fake_pve()
        with pytest.raises(VmanywareError) as info:
            reserve(store, client, **options)
        assert info.value.code == code, options
        assert calls(client) == []  # refused before any request
        assert "x\ny" not in json.dumps(info.value.to_result())


def test_datacenter_range_forms() -> None:
    assert datacenter_range(fake_pve(options={})) is None
    assert datacenter_range(fake_pve(options={"next-id": {"lower": "1000", "upper": "2000"}})) == (1000, 1999)
    assert datacenter_range(fake_pve(options={"next-id": {"lower": 500}})) == (500, 999999)
    for bad in ({"next-id": "lower=1"}, {"next-id": {"lower": 5}}, {"next-id": {"lower": 300, "upper": 300}}, []):
        with pytest.raises(VmanywareError) as info:
            datacenter_range(fake_pve(options=bad))
        assert info.value.code == "unexpected_response"


def test_unexpected_answers(store: JournalStore) -> None:
    client = fake_pve()
    client.get = lambda path, **params: [{"type": "qemu"}]  # type: ignore[method-assign]
    with pytest.raises(VmanywareError) as info:
        reserve(store, client, owner="o")
    assert info.value.code == "unexpected_response"


def test_ranges_hidden_guests_and_expiry(store: JournalStore) -> None:
    clock = Clock()
    client = fake_pve(guests={9000, 100}, hidden={101}, options={"next-id": {"lower": 100, "upper": 104}})
    first = reserve(store, client, owner="a", clock=clock)
    assert first["vmid"] == 102 and first["vmid_range"] == {"lower": 100, "upper": 103, "source": "next_id"}
    # 100 is listed; 101 is not (the token cannot audit it) but nextid refuses it; 102 is accepted
    assert [params["vmid"] for path, params in calls(client) if path == "/cluster/nextid"] == [101, 102]
    assert reserve(store, client, owner="b", clock=clock)["vmid"] == 103
    with pytest.raises(VmanywareError) as info:
        reserve(store, client, owner="c", clock=clock)
    # 101 was refused by nextid (a guest the token cannot see) and nothing else is left
    assert info.value.code == "no_free_vmid" and info.value.details == {
        "lower": 100,
        "upper": 103,
        "refusedByProxmox": 1,
    }
    assert sorted(os.listdir(store.leases_dir)) == sorted(
        os.path.basename(store.lease_path(SCOPE, v)) for v in (102, 103)
    )
    clock.now += 3601  # both leases expired
    again = reserve(store, client, owner="c", clock=clock)
    assert again["vmid"] == 102 and not again["reused"]
    assert (
        reserve(store, client, owner="a", clock=clock)["vmid"] == 103
    )  # a's old lease expired: a new one, replacing b's
    assert release(store, SCOPE, owner="b", clock=clock)["released"] == []
    assert release(store, SCOPE, owner="a", vmid=102, clock=clock)["released"] == []
    assert release(store, SCOPE, owner="a", clock=clock) == {
        "changed": True,
        "released": [103],
        "provider_scope_id": SCOPE,
    }


def test_template_purpose_range(store: JournalStore) -> None:
    client = fake_pve(guests={9000, 9001})
    result = reserve(store, client, owner="tpl", purpose="template")
    assert result["vmid"] == 9002 and result["vmid_range"]["source"] == "template_default"
    assert ("/cluster/options", {}) not in calls(client)
    # a vm lease and a template lease of the same owner are distinct
    assert reserve(store, client, owner="tpl")["vmid"] == 100


def test_threads_reserving_at_once_get_distinct_vmids(store: JournalStore) -> None:
    client = fake_pve()
    results: list[int] = []
    barrier = threading.Barrier(10)

    def worker(index: int) -> None:
        barrier.wait()
        results.append(reserve(store, client, owner="owner-%d" % index)["vmid"])

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(100, 110))


def test_a_corrupt_lease_is_left_untouched(store: JournalStore) -> None:
    path = store.lease_path(SCOPE, 100)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"kind": "something else"}')
    with pytest.raises(VmanywareError) as info:
        reserve(store, fake_pve(), owner="o")
    assert info.value.code == "journal_corrupt"
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == '{"kind": "something else"}'


def _operation(store: JournalStore, vmid: int) -> dict[str, t.Any]:
    planned = build_plan(
        catalog_path=REPO / "examples/catalog.yml", definition_path=REPO / "examples/definition.yml", target_vmid=vmid
    )
    return create_operation(
        store,
        planned=planned,
        provider_scope_id=SCOPE,
        confirmation=expected_confirmation(planned.plan, SCOPE),
        idempotency_key=None,
        environ=ON,
    )


def test_a_replayed_creation_removes_a_lease_a_crash_left_behind(store: JournalStore) -> None:
    lease = reserve(store, fake_pve(), owner="o")
    with open(store.lease_path(SCOPE, 100), encoding="utf-8") as handle:
        stored = json.load(handle)  # the file as written (camelCase fields; the module result is snake_case)
    created = _operation(store, lease["vmid"])
    assert not os.path.exists(store.lease_path(SCOPE, 100))
    # a crash between writing the claim and removing the lease leaves both: the replay finishes the job
    with open(store.lease_path(SCOPE, 100), "w", encoding="utf-8") as handle:
        json.dump(stored, handle)
    replay = _operation(store, 100)
    assert replay["operation_id"] == created["operation_id"] and not replay["created"]
    assert not os.path.exists(store.lease_path(SCOPE, 100))
    given = reserve(store, fake_pve(guests={9000, 100}), owner="o", vmid=100)
    assert given["claimed_by"] == created["operation_id"] and given["lease"] is None
