# SPDX-License-Identifier: GPL-3.0-or-later
"""Containers on named networks (docs/networks.md) through the stage runner against the simulator's cluster seed:
``net0`` with ``ip``/``gw``/``ip6``/``gw6``, the VLAN ``tag`` and ``mtu``, the DNS settings, the preflight's network
checks, and readiness waiting for every planned family's address on the container's interface."""

from __future__ import annotations

import sys
import typing as t
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import guest_support as gs  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import run_checks  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.container.readiness import (  # noqa: E402
    ContainerReadinessStage,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import container_stage  # noqa: E402

pytestmark = pytest.mark.integration
CTID = 330
DUAL = {
    "name": "lab",
    "bridge": "vmbr2",
    "vlan": 42,
    "mtu": 1450,
    "ipv4": {"mode": "static", "subnet": "203.0.113.0/24", "gateway": "203.0.113.1", "dns": ["203.0.113.53"]},
    "ipv6": {
        "mode": "static",
        "subnet": "2001:db8:2:42::/64",
        "gateway": "2001:db8:2:42::1",
        "searchDomain": "lab.example",
    },
}
SLAAC = {
    "name": "v6",
    "bridge": "vmbr0",
    "ipv4": {"mode": "dhcp"},
    "ipv6": {"mode": "slaac", "subnet": "2001:db8::/64"},
}


@pytest.fixture()
def sim(pvesim: t.Any) -> t.Any:
    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel

    pvesim.reset("cluster")
    pvesim.set_token(
        pvesim.connection["tokens"]["full"]["id"],
        privileges={
            **FULL_TOKEN_ACL,
            "/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"],
            # a NIC on a bridge needs SDN.Use on it (pve-container's check_bridge_access); the VLAN inherits it
            "/sdn/zones/localnetwork": ["SDN.Use", "SDN.Audit"],
        },
    )
    pvesim.set_speed(100.0)
    yield pvesim
    pvesim.set_speed(50.0)


def _planned(network: dict[str, t.Any], **addresses: str) -> t.Any:
    catalog = yaml.safe_load((gs.REPO / "examples/catalog-containers.yml").read_text(encoding="utf-8"))
    catalog["networks"] = [network]
    definition = yaml.safe_load(gs.definition_text())
    definition["image"] = "debian-12-ct"
    definition["network"] = {"name": network["name"], **{f: {"address": a} for f, a in addresses.items()}}
    return build_plan(catalog=yaml.safe_dump(catalog), definition=yaml.safe_dump(definition), target_vmid=CTID)


def _run_all(sim: t.Any, tmp_path: Path, planned: t.Any) -> gs.Env:
    env = gs.record(tmp_path, sim.connection, planned, vmid=CTID)
    for kind in ("template", "create", "start"):
        result = env.run(container_stage(kind), diff=True)
        assert result["done"] and result["stage"]["status"] == "completed", result
    result = env.run(ContainerReadinessStage(readiness_timeout=60))
    assert result["done"], result
    return env


def test_a_container_on_a_dual_stack_vlan(sim: t.Any, tmp_path: Path) -> None:
    planned = _planned(DUAL, ipv4="203.0.113.60", ipv6="2001:db8:2:42::60")
    checks = {
        check.code: check.status
        for check in run_checks(ProxmoxClient(gs.settings_for(sim.connection)), planned.plan)[0]
    }
    assert checks["bridge_vlan_aware"] == "passed" and checks["address_free"] == "passed"
    assert checks["address_outside_proxmox"] == "unknown" and "dhcp_available" not in checks
    env = _run_all(sim, tmp_path, planned)
    create = env.stage("create")["request"]
    assert create["params"]["nameserver"] == "203.0.113.53" and create["params"]["searchdomain"] == "lab.example"
    assert create["params"]["net0"].startswith("name=eth0,bridge=vmbr2,hwaddr=BC:24:11:")
    assert create["params"]["net0"].endswith(
        ",ip=203.0.113.60/24,gw=203.0.113.1,ip6=2001:db8:2:42::60/64,gw6=2001:db8:2:42::1,tag=42,mtu=1450"
    )
    config = sim.root_call("GET", f"/nodes/pve-test/lxc/{CTID}/config")
    net0 = dict(item.split("=", 1) for item in config["net0"].split(","))
    assert (net0["bridge"], net0["tag"], net0["mtu"]) == ("vmbr2", "42", "1450")
    assert (net0["ip"], net0["gw"]) == ("203.0.113.60/24", "203.0.113.1")
    assert (net0["ip6"], net0["gw6"]) == ("2001:db8:2:42::60/64", "2001:db8:2:42::1")
    evidence = env.stage("readiness")["evidence"]
    assert (evidence["ipv4"], evidence["ipv6"], evidence["address"]) == (
        "203.0.113.60",
        "2001:db8:2:42::60",
        "203.0.113.60",
    )
    assert env.document["handoff"]["ipv6"] == "2001:db8:2:42::60"
    assert sim.schema_violations() == []


def test_a_container_with_dhcp_and_slaac(sim: t.Any, tmp_path: Path) -> None:
    env = _run_all(sim, tmp_path, _planned(SLAAC))
    config = sim.root_call("GET", f"/nodes/pve-test/lxc/{CTID}/config")
    assert "ip=dhcp" in config["net0"] and "ip6=auto" in config["net0"] and "nameserver" not in config
    evidence = env.stage("readiness")["evidence"]
    assert evidence["ipv6"].startswith("2001:db8::") and evidence["ipv4"] is not None
    assert sim.schema_violations() == []
