# SPDX-License-Identifier: GPL-3.0-or-later
"""Address pools and leases (docs/networks.md): which address ``address: auto`` gets, how a lease becomes an operation's
address claim, what frees it, with a fake Proxmox client and an injected clock."""

from __future__ import annotations

import threading
import time
import typing as t
from pathlib import Path

import pytest
import yaml
from pve_fake import FakeClient

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import parse_definition
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.addresses import (
    release,
    reserve,
    reserve_for_definition,
    scan_guests,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)

REPO = Path(__file__).resolve().parents[5]
SCOPE = "pve:" + "a" * 64
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
NETWORK = {
    "name": "lab",
    "bridge": "vmbr2",
    "vlan": 42,
    "ipv4": {
        "mode": "static",
        "subnet": "192.0.2.0/24",
        "gateway": "192.0.2.10",
        "pool": [{"first": "192.0.2.9", "last": "192.0.2.14"}],
    },
    "ipv6": {
        "mode": "static",
        "subnet": "2001:db8:42::/64",
        "pool": [{"first": "2001:db8:42::ff", "last": "2001:db8:42::1:ff"}],
    },
}


def catalog_text() -> str:
    doc = yaml.safe_load((REPO / "examples/catalog.yml").read_text(encoding="utf-8"))
    doc["networks"] = [NETWORK]
    return yaml.safe_dump(doc)


def definition_text(ipv4: str = "auto", ipv6: str = "auto") -> str:
    doc = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    doc["network"] = {"name": "lab", "ipv4": {"address": ipv4}, "ipv6": {"address": ipv6}}
    return yaml.safe_dump(doc)


def fake_pve(configs: t.Mapping[tuple[str, int], dict[str, t.Any]] | None = None) -> FakeClient:
    """A cluster whose guests declare what ``configs`` says: ``{(type, vmid): config}``, all on pve-test."""
    configs = dict(configs or {})
    routes: dict[str, t.Any] = {
        "/cluster/resources": [{"vmid": vmid, "type": kind, "node": "pve-test"} for kind, vmid in configs]
    }
    for (kind, vmid), config in configs.items():
        routes["/nodes/pve-test/%s/%d/config" % (kind, vmid)] = config
    return FakeClient(routes, provider_scope_id=SCOPE)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def lease(store: JournalStore, client: FakeClient, owner: str = "web", **options: t.Any) -> dict[str, t.Any]:
    definition = options.pop("definition", definition_text())
    return reserve_for_definition(
        store,
        client,
        catalog=parse_catalog(text=catalog_text()),
        definition=parse_definition(text=definition),
        owner=owner,
        **options,
    )


def operation_for(
    store: JournalStore, addresses: dict[str, str], vmid: int = 201, definition: str | None = None
) -> str:
    planned = build_plan(
        catalog=catalog_text(), definition=definition or definition_text(), target_vmid=vmid, addresses=addresses
    )
    result = create_operation(
        store,
        planned=planned,
        provider_scope_id=SCOPE,
        confirmation=expected_confirmation(planned.plan, SCOPE),
        idempotency_key=None,
        environ=ON,
    )
    return t.cast(str, result["operation_id"])


def test_the_lowest_free_address_skips_reserved_and_declared_ones(store: JournalStore) -> None:
    client = fake_pve(
        {
            ("qemu", 300): {"ipconfig0": "ip=192.0.2.11/24,gw=192.0.2.10,ip6=2001:db8:42::ff/64"},
            ("lxc", 301): {"net0": "name=eth0,bridge=vmbr2,ip=192.0.2.12/24,ip6=auto"},
            ("qemu", 302): {"ipconfig0": "ip=dhcp"},
        }
    )
    result = lease(store, client)
    # .9 is the first in the pool, .10 the gateway, .11 and .12 declared; ::ff declared
    assert result["addresses"] == {"ipv4": "192.0.2.9", "ipv6": "2001:db8:42::100"}
    assert result["changed"] is True and result["network"] == "lab" and result["guests_unread"] == 0
    assert result["leases"]["ipv4"]["owner"] == "web" and result["leases"]["ipv4"]["provider_scope_id"] == SCOPE
    assert {path for _m, path, _p in client.log} == {
        "/cluster/resources",
        "/nodes/pve-test/qemu/300/config",
        "/nodes/pve-test/lxc/301/config",
        "/nodes/pve-test/qemu/302/config",
    }
    assert all(method == "GET" for method, _path, _params in client.log)
    # another owner gets the next addresses; the same owner gets its lease back
    other = lease(store, fake_pve(), owner="db")
    assert other["addresses"] == {"ipv4": "192.0.2.11", "ipv6": "2001:db8:42::ff"}
    again = lease(store, fake_pve())
    assert again["addresses"] == result["addresses"] and again["changed"] is False and again["reused"]["ipv4"]


def test_scan_reports_unreadable_guests() -> None:
    client = fake_pve({("qemu", 300): {"ipconfig0": "ip=192.0.2.11/24"}})
    client.routes["/cluster/resources"].append({"vmid": 303, "type": "qemu", "node": "pve-test2"})
    client.routes["/nodes/pve-test2/qemu/303/config"] = ProviderError(code="permission_denied")  # no VM.Audit on it
    scan = scan_guests(client)
    assert (scan.listed, scan.unread, scan.declared) == (2, 1, {"192.0.2.11": 300})


def test_concurrent_reservations_get_distinct_addresses(store: JournalStore) -> None:
    results: list[str] = []
    errors: list[BaseException] = []

    def take(owner: str) -> None:
        try:
            results.append(
                lease(store, fake_pve(), owner=owner, definition=definition_text(ipv6="2001:db8:42::5"))["addresses"][
                    "ipv4"
                ]
            )
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=take, args=("owner-%d" % n,)) for n in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sorted(results) == ["192.0.2.11", "192.0.2.12", "192.0.2.13", "192.0.2.14", "192.0.2.9"]
    with pytest.raises(VmanywareError) as caught:
        lease(store, fake_pve(), owner="sixth", definition=definition_text(ipv6="2001:db8:42::5"))
    assert (caught.value.code, caught.value.details) == ("no_free_address", {"network": "lab", "family": "ipv4"})


def test_a_lease_becomes_the_operations_claim_and_abandon_frees_it(store: JournalStore) -> None:
    taken = lease(store, fake_pve())["addresses"]
    operation = operation_for(store, taken)
    assert not list((Path(store.layout.address_leases_dir)).glob("*.json"))  # the leases became claims
    assert store.address_holder(SCOPE, "ipv4", "192.0.2.9") == operation
    # the apply run asking for the confirmed addresses learns they are claimed
    replay = lease(store, fake_pve(), addresses=taken)
    assert replay["claimed_by"] == {"ipv4": operation, "ipv6": operation} and replay["changed"] is False
    # another owner cannot get them, and a second operation with the same address is refused
    assert lease(store, fake_pve(), owner="db")["addresses"]["ipv4"] == "192.0.2.11"
    with pytest.raises(VmanywareError) as caught:
        operation_for(store, {}, vmid=202, definition=definition_text("192.0.2.9", "2001:db8:42::5"))
    assert caught.value.code == "conflicting_operation"
    assert caught.value.details == {"operationId": operation, "claim": "address"}
    store.abandon_operation(operation, "test")
    assert store.address_holder(SCOPE, "ipv4", "192.0.2.9") is None
    assert lease(store, fake_pve(), owner="cache")["addresses"]["ipv4"] == "192.0.2.9"


def test_the_apply_run_reuses_or_refuses_a_given_address(store: JournalStore) -> None:
    first = reserve_for_definition(
        store,
        fake_pve(),
        catalog=parse_catalog(text=catalog_text()),
        definition=parse_definition(text=definition_text()),
        owner="web",
        lease_seconds=60,
    )
    given = first["addresses"]
    assert lease(store, fake_pve(), addresses=given)["reused"] == {"ipv4": True, "ipv6": True}
    with pytest.raises(VmanywareError) as caught:
        lease(store, fake_pve(), owner="db", addresses=given)
    assert (caught.value.code, caught.value.details["rule"]) == ("address_taken", "leased_by_another_owner")
    declared = fake_pve({("qemu", 400): {"ipconfig0": "ip6=%s/64" % given["ipv6"]}})
    with pytest.raises(VmanywareError) as caught:
        lease(store, declared, addresses=given)
    assert (caught.value.code, caught.value.details) == (
        "address_taken",
        {"family": "ipv6", "rule": "declared_by_a_guest"},
    )
    with pytest.raises(VmanywareError) as caught:
        lease(store, fake_pve(), addresses={"ipv4": "192.0.2.50", "ipv6": given["ipv6"]})
    assert (caught.value.code, caught.value.details["rule"]) == ("invalid_network_address", "outside_pool")


def test_expired_leases_are_taken_again_and_release_removes_the_owners(store: JournalStore) -> None:
    options = {"catalog": parse_catalog(text=catalog_text()), "definition": parse_definition(text=definition_text())}
    reserve_for_definition(store, fake_pve(), owner="web", lease_seconds=10, **options)
    later = Clock()
    later.now = time.time() + 3600  # web's 10-second lease has long expired for this clock
    result = reserve(
        store,
        fake_pve(),
        network=options["catalog"]["networks"][0],
        families=["ipv4"],
        owner="db",
        clock=later,
    )
    assert result["addresses"] == {"ipv4": "192.0.2.9"}  # web's expired lease no longer holds .9
    gone = release(store, SCOPE, owner="db")
    assert gone["released"] == [{"family": "ipv4", "address": "192.0.2.9", "network": "lab"}] and gone["changed"]
    assert release(store, SCOPE, owner="db")["changed"] is False


def test_no_network_or_no_auto_reads_nothing(store: JournalStore) -> None:
    client = fake_pve()
    plain = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    assert lease(store, client, definition=yaml.safe_dump(plain))["addresses"] == {}
    assert lease(store, client, definition=definition_text("192.0.2.20", "2001:db8:42::20"))["addresses"] == {}
    assert client.log == []
    assert lease(store, client, check_mode=True)["addresses"] == {"ipv4": "192.0.2.9", "ipv6": "2001:db8:42::ff"}
    assert not Path(store.layout.address_leases_dir).exists()  # check mode writes no lease
