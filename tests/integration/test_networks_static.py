# SPDX-License-Identifier: GPL-3.0-or-later
"""Named networks end to end on the simulator (docs/networks.md): a static IPv4 address on a VLAN of a VLAN-aware
bridge, with its MTU and DNS settings; the preflight's bridge and address checks; Cloud-Init, the seed check,
readiness waiting for the planned address, and the handoff naming it."""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest
import yaml

import guest_support as gs

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.preflight import run_checks
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import StageOptions, run_stages
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.cloudinit import CloudinitStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage

pytestmark = pytest.mark.integration
SPEED = 400
GATES = {"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": "true"}
ADDRESS = "203.0.113.50"
LAB = {
    "name": "lab",
    "bridge": "vmbr2",
    "vlan": 42,
    "mtu": 1450,
    "ipv4": {
        "mode": "static",
        "subnet": "203.0.113.0/24",
        "gateway": "203.0.113.1",
        "dns": ["203.0.113.53"],
        "searchDomain": "lab.example",
    },
}


@pytest.fixture()
def cluster(pvesim: t.Any) -> t.Any:
    pvesim.reset("cluster")  # pve-test has vmbr2, VLAN-aware, and vmbr0, plain
    pvesim.set_speed(SPEED)
    pvesim.set_timings(guest={"agent_up_after": 0.2, "dhcp_after_agent": 0.1, "cloudinit_done_after_boot": 0.4})
    # the full token reads the bridge settings and the other guests' configurations, as docs/networks.md asks
    return pvesim


def _plan(network: dict[str, t.Any], address: str | None = ADDRESS, ipv6: str | None = None) -> t.Any:
    catalog = yaml.safe_load(gs.catalog_text())
    catalog["networks"] = [network]
    definition = yaml.safe_load(gs.definition_text())
    definition["network"] = {"name": network["name"]}
    if address is not None:
        definition["network"]["ipv4"] = {"address": address}
    if ipv6 is not None:
        definition["network"]["ipv6"] = {"address": ipv6}
    return build_plan(catalog=yaml.safe_dump(catalog), definition=yaml.safe_dump(definition), target_vmid=gs.VMID)


def _checks(sim: t.Any, planned: t.Any) -> dict[str, tuple[str, str]]:
    client = ProxmoxClient(gs.settings_for(sim.connection))
    checks, _capabilities = run_checks(client, planned.plan)
    return {check.code: (check.status, check.message) for check in checks}


def test_preflight_checks_of_a_static_vlan_network(cluster: t.Any) -> None:
    checks = _checks(cluster, _plan(LAB))
    codes = list(checks)
    assert codes[codes.index("bridge_exists") : codes.index("bridge_exists") + 3] == [
        "bridge_exists",
        "bridge_vlan_aware",
        "address_free",
    ]
    assert checks["bridge_exists"][0] == "passed" and checks["bridge_vlan_aware"][0] == "passed"
    assert checks["address_free"] == ("passed", "None of the 2 guests the token can see declares the address.")
    assert "dhcp_available" not in checks and checks["address_outside_proxmox"][0] == "unknown"
    plain = _checks(cluster, _plan(dict(LAB, bridge="vmbr0")))
    assert plain["bridge_vlan_aware"][0] == "failed"
    # another guest declaring the address fails the check (here the template's own ipconfig0)
    cluster.set_vm_config(9001, set={"ipconfig0": "ip=%s/24,gw=203.0.113.1" % ADDRESS})
    taken = _checks(cluster, _plan(LAB))
    assert taken["address_free"] == ("failed", "Guest 9001 declares a planned address.")
    assert cluster.schema_violations() == []


def _run(env: gs.Env) -> dict[str, t.Any]:
    return t.cast(
        "dict[str, t.Any]",
        run_stages(
            env.store,
            env.client,
            env.operation_id,
            StageSettings(environ=GATES),
            StageOptions(readiness_timeout=60),
            progress_interval=30.0,
            report=lambda line: None,
        ),
    )


def _provision(cluster: t.Any, tmp_path: Path, planned: t.Any) -> gs.Env:
    env = gs.record(tmp_path, cluster.connection, planned)
    result = _run(env)
    assert result["done"] and result["status"] == "completed", result
    return env


def test_provision_dual_stack_on_a_vlan(cluster: t.Any, tmp_path: Path) -> None:
    """Static IPv4 and IPv6 on VLAN 42 of vmbr2 (the simulator announces 2001:db8:2:42::/64 there)."""
    dual = dict(LAB, ipv6={"mode": "static", "subnet": "2001:db8:2:42::/64", "gateway": "2001:db8:2:42::1"})
    env = _provision(cluster, tmp_path, _plan(dual, ipv6="2001:db8:2:42::50"))
    config = cluster.vm(gs.VMID)["config"]
    assert config["ipconfig0"] == "ip=%s/24,gw=203.0.113.1,ip6=2001:db8:2:42::50/64,gw6=2001:db8:2:42::1" % ADDRESS
    handoff = env.document["handoff"]
    assert (handoff["ipv4"], handoff["ipv6"], handoff["address"]) == (ADDRESS, "2001:db8:2:42::50", ADDRESS)
    assert cluster.schema_violations() == []


def test_check_mode_previews_the_network_settings_with_the_qm_equivalent(cluster: t.Any, tmp_path: Path) -> None:
    dual = dict(LAB, ipv6={"mode": "static", "subnet": "2001:db8:2:42::/64", "gateway": "2001:db8:2:42::1"})
    env = gs.record(tmp_path, cluster.connection, _plan(dual, ipv6="2001:db8:2:42::50"))
    for logic in (CloneStage(), ResourcesStage(), DiskStage()):
        assert env.run(logic)["done"]
    cluster.clear_requests()
    preview = env.run(CloudinitStage(), check_mode=True, diff=True)
    [request] = preview["requests"]
    assert (
        "--ipconfig0 ip=%s/24,gw=203.0.113.1,ip6=2001:db8:2:42::50/64,gw6=2001:db8:2:42::1" % ADDRESS in request["cli"]
    )
    assert ",bridge=vmbr2,tag=42,mtu=1450" in request["cli"] and "--nameserver 203.0.113.53" in request["cli"]
    assert request["cli"].startswith("qm set %d " % gs.VMID) or ("\nqm set %d " % gs.VMID) in request["cli"]
    after = preview["diff"]["after"]
    assert after["ipconfig0"].endswith("gw6=2001:db8:2:42::1") and after["searchdomain"] == "lab.example"
    assert [e for e in cluster.requests() if e["method"] != "GET"] == []  # check mode sent nothing


def test_provision_ipv6_only_with_slaac(cluster: t.Any, tmp_path: Path) -> None:
    """No IPv4; SLAAC from the prefix vmbr0 announces (2001:db8::/64): readiness waits for a global address in it,
    and SSH (the handoff's address and known_hosts) goes to it."""
    v6 = {
        "name": "v6",
        "bridge": "vmbr0",
        "ipv4": {"mode": "none"},
        "ipv6": {"mode": "slaac", "subnet": "2001:db8::/64"},
    }
    planned = _plan(v6, address=None)
    assert planned.plan["network"] == "ipv6-slaac"
    env = _provision(cluster, tmp_path, planned)
    assert cluster.vm(gs.VMID)["config"]["ipconfig0"] == "ip6=auto"
    handoff = env.document["handoff"]
    assert (
        handoff["ipv4"] is None and handoff["ipv6"].startswith("2001:db8::") and handoff["address"] == handoff["ipv6"]
    )
    assert all(line.startswith(handoff["ipv6"] + " ") for line in handoff["knownHosts"])
    assert cluster.schema_violations() == []


def test_provision_with_a_static_address(cluster: t.Any, tmp_path: Path) -> None:
    env = _provision(cluster, tmp_path, _plan(LAB))
    config = cluster.vm(gs.VMID)["config"]
    assert config["net0"].endswith(",bridge=vmbr2,mtu=1450,tag=42")  # print_net: properties sorted by key
    assert config["ipconfig0"] == "ip=%s/24,gw=203.0.113.1" % ADDRESS
    assert config["nameserver"] == "203.0.113.53" and config["searchdomain"] == "lab.example"
    handoff = env.document["handoff"]
    assert handoff["ipv4"] == ADDRESS
    assert all(line.startswith(ADDRESS + " ") for line in handoff["knownHosts"])
    # a re-run sends nothing: every setting is read back as planned
    again = _run(env)
    assert not again["changed"] and again["requests"] == []
    assert cluster.schema_violations() == []
