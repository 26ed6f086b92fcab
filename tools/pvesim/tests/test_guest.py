# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Tests for pvesim.guest with an injected fake clock."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from typing import Any
from urllib.parse import quote

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from hypothesis import given, settings
from hypothesis import strategies as st

from pvesim.cloudinit import drive_files
from pvesim.packageindex import load_index, provenance
from pvesim.guest import (
    AgentCommandError,
    AgentNotRunning,
    GuestFaults,
    GuestTiming,
    SimulatedGuest,
    dpkg_version_compare,
    host_public_keys,
)

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1+abc/def= alice@laptop"
MAC = "BC:24:11:AA:BB:CC"


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make(
    vmid: int = 100,
    *,
    faults: GuestFaults | None = None,
    timing: GuestTiming | None = None,
    up: bool = True,
    **overrides: str,
) -> tuple[SimulatedGuest, FakeClock]:
    config = {
        "name": "web1",
        "net0": f"virtio={MAC},bridge=vmbr0",
        "ipconfig0": "ip=dhcp",
        "agent": "1",
        "sshkeys": quote(KEY + "\n", safe=""),
    }
    config.update(overrides)
    config = {k: v for k, v in config.items() if v != ""}
    clock = FakeClock()
    guest = SimulatedGuest(
        vmid, config, drive_files(config, vmid, "pve1"), clock, timing or GuestTiming(), faults or GuestFaults()
    )
    if up:
        clock.advance(8.0)
    return guest, clock


def run(
    guest: SimulatedGuest, clock: FakeClock, argv: list[str], input_data: str | None = None, wait: float = 30.0
) -> dict[str, Any]:
    pid = guest.exec(argv, input_data)
    clock.advance(wait)
    return guest.exec_status(pid)


class TestAgentTimeline:
    def test_agent_comes_up_after_delay(self) -> None:
        guest, clock = make(up=False)
        with pytest.raises(AgentNotRunning, match="^QEMU guest agent is not running$"):
            guest.ping()
        clock.advance(7.9)
        with pytest.raises(AgentNotRunning):
            guest.network_get_interfaces()
        clock.advance(0.1)
        assert guest.ping() == {}

    def test_agent_never(self) -> None:
        guest, clock = make(faults=GuestFaults(agent_never=True))
        clock.advance(3600)
        for call in (
            guest.ping,
            guest.network_get_interfaces,
            lambda: guest.exec(["true"]),
            lambda: guest.file_read("/etc/hostname"),
        ):
            with pytest.raises(AgentNotRunning):
                call()

    def test_custom_timing(self) -> None:
        guest, clock = make(up=False, timing=GuestTiming(agent_up_after=1.0))
        clock.advance(1.0)
        assert guest.ping() == {}


class TestNetwork:
    def test_order_and_dhcp_delay(self) -> None:
        guest, clock = make()
        ifaces = guest.network_get_interfaces()
        assert [i["name"] for i in ifaces] == ["lo", "eth0"]
        lo, eth0 = ifaces
        assert lo["ip-addresses"] == [
            {"ip-address-type": "ipv4", "ip-address": "127.0.0.1", "prefix": 8},
            {"ip-address-type": "ipv6", "ip-address": "::1", "prefix": 128},
        ]
        assert eth0["hardware-address"] == MAC.lower()
        assert eth0["ip-addresses"] == [
            {"ip-address-type": "ipv6", "ip-address": "fe80::be24:11ff:feaa:bbcc", "prefix": 64}
        ]
        assert set(eth0["statistics"]) == {
            f"{d}-{k}" for d in ("rx", "tx") for k in ("bytes", "packets", "errs", "dropped")
        }
        clock.advance(2.0)
        addrs = guest.network_get_interfaces()[1]["ip-addresses"]
        assert addrs[0] == {"ip-address-type": "ipv4", "ip-address": "10.10.0.102", "prefix": 24}
        assert addrs[1]["ip-address"].startswith("fe80::")

    def test_dhcp_never(self) -> None:
        guest, clock = make(faults=GuestFaults(dhcp_never=True))
        clock.advance(600)
        assert [a["ip-address-type"] for a in guest.network_get_interfaces()[1]["ip-addresses"]] == ["ipv6"]

    def test_static_address_is_there_when_agent_is(self) -> None:
        guest, _clock = make(ipconfig0="ip=192.0.2.7/26,gw=192.0.2.1")
        assert guest.network_get_interfaces()[1]["ip-addresses"][0] == {
            "ip-address-type": "ipv4",
            "ip-address": "192.0.2.7",
            "prefix": 26,
        }

    def test_nic_without_ipconfig_keeps_predictable_name(self) -> None:
        guest, clock = make(net1="virtio=BC:24:11:00:00:01,bridge=vmbr1")
        clock.advance(5)
        second = guest.network_get_interfaces()[2]
        assert second["name"] == "ens19" and len(second["ip-addresses"]) == 1

    @settings(max_examples=40, deadline=None)
    @given(vmid=st.integers(100, 999_999_999))
    def test_dhcp_address_is_deterministic(self, vmid: int) -> None:
        one, c1 = make(vmid)
        two, c2 = make(vmid)
        c1.advance(5)
        c2.advance(5)
        assert one.network_get_interfaces() == two.network_get_interfaces()
        ip = one.network_get_interfaces()[1]["ip-addresses"][0]["ip-address"]
        assert ip.startswith("10.10.") and ip == one.dhcp_address(0)


class TestExec:
    def test_status_runs_then_is_read_once(self) -> None:
        guest, clock = make()
        pid = guest.exec(["hostname"])
        assert guest.exec_status(pid) == {"exited": 0}
        clock.advance(0.2)
        assert guest.exec_status(pid) == {"exited": 1, "exitcode": 0, "out-data": "web1\n", "out-truncated": 0}
        with pytest.raises(AgentCommandError) as err:
            guest.exec_status(pid)
        assert err.value.message == "VM 100 qga command 'guest-exec-status' failed - Invalid parameter 'pid'"
        assert err.value.desc == "Invalid parameter 'pid'"

    def test_no_output_means_no_out_data(self) -> None:
        guest, clock = make()
        assert run(guest, clock, ["true"]) == {"exited": 1, "exitcode": 0}
        assert run(guest, clock, ["/bin/false"]) == {"exited": 1, "exitcode": 1}

    def test_exec_disabled(self) -> None:
        guest, _clock = make(faults=GuestFaults(exec_disabled=True))
        with pytest.raises(AgentCommandError, match="The command guest-exec has been disabled for this instance$"):
            guest.exec(["true"])

    def test_missing_binary(self) -> None:
        guest, clock = make()
        with pytest.raises(AgentCommandError) as err:
            guest.exec(["/usr/bin/nope", "x"])
        assert (
            err.value.desc
            == "Guest agent command failed, error was 'Failed to execute child process \u201c/usr/bin/nope\u201d (No such file or directory)'"
        )
        res = run(guest, clock, ["/usr/bin/env", "A=1", "nope"])
        assert (
            res["exitcode"] == 127 and res["err-data"] == "/usr/bin/env: \u2018nope\u2019: No such file or directory\n"
        )

    def test_cat_and_stdin(self) -> None:
        guest, clock = make()
        assert run(guest, clock, ["cat"], input_data="hello")["out-data"] == "hello"
        res = run(guest, clock, ["cat", "/etc/hostname", "/nope"])
        assert (
            res["out-data"] == "web1\n"
            and res["exitcode"] == 1
            and res["err-data"] == "cat: /nope: No such file or directory\n"
        )


LONG_DONE = (
    "status: done\nextended_status: done\nboot_status_code: enabled-by-generator\n"
    "last_update: Thu, 01 Jan 1970 00:00:15 +0000\ndetail: DataSourceNoCloud [seed=/dev/sr0]\nerrors: []\nrecoverable_errors: {}\n"
)


class TestCloudInitStatus:
    def test_running_then_done(self) -> None:
        guest, clock = make()
        res = run(guest, clock, ["cloud-init", "status", "--long"], wait=0.2)
        assert res["exitcode"] == 0 and res["out-data"].startswith("status: running\nextended_status: running\n")
        clock.advance(10)
        assert run(guest, clock, ["cloud-init", "status", "--long"])["out-data"] == LONG_DONE
        assert run(guest, clock, ["cloud-init", "status"])["out-data"] == "status: done\n"

    def test_wait_blocks_until_done(self) -> None:
        guest, clock = make()  # uptime 8, cloud-init done at 15
        pid = guest.exec(["cloud-init", "status", "--wait", "--long"])
        # cloud-init's loop: a dot and a read at once, then one every 0.25 s; the read at 15.0 (the 29th) is done, the
        # command ends after the sleep that follows it (15.25) plus the exec's own time (0.2).
        clock.advance(7.4)
        assert guest.exec_status(pid) == {"exited": 0}
        clock.advance(0.1)
        res = guest.exec_status(pid)
        assert res["exitcode"] == 0 and res["out-data"] == "." * 29 + "\n" + LONG_DONE
        with pytest.raises(AgentCommandError, match="Invalid parameter 'pid'"):
            guest.exec_status(pid)  # handed out once

    def test_wait_after_done_answers_at_once_with_its_newline(self) -> None:
        guest, clock = make()
        clock.advance(10)
        res = run(guest, clock, ["cloud-init", "status", "--long", "--wait"], wait=0.2)
        assert res["exitcode"] == 0 and res["out-data"] == "\n" + LONG_DONE

    @pytest.mark.parametrize(
        ("faults", "exitcode", "head"),
        [
            (GuestFaults(cloudinit_error=True), 1, "status: error\nextended_status: error - done\n"),
            (GuestFaults(cloudinit_recoverable_error=True), 2, "status: done\nextended_status: degraded done\n"),
        ],
    )
    def test_wait_ends_when_cloudinit_fails(self, faults: GuestFaults, exitcode: int, head: str) -> None:
        guest, clock = make(faults=faults)
        pid = guest.exec(["cloud-init", "status", "--long", "--wait"])
        clock.advance(6.0)
        assert guest.exec_status(pid) == {"exited": 0}  # errors are known once cloud-init finished, not before
        clock.advance(1.5)
        res = guest.exec_status(pid)
        assert res["exitcode"] == exitcode and res["out-data"].startswith("." * 29 + "\n" + head)

    def test_wait_follows_the_guest_state_at_each_status_read(self) -> None:
        guest, clock = make()
        pid = guest.exec(["cloud-init", "status", "--wait"])
        clock.advance(4)
        assert guest.exec_status(pid) == {"exited": 0}
        # A knob changed while it waits (PUT /_pvesim/vms/{vmid}/guest): cloud-init now finishes at 20, not 15.
        guest.timing = dataclasses.replace(guest.timing, cloudinit_done_after_boot=20.0)
        guest.faults.cloudinit_error = True
        clock.advance(8)
        assert guest.exec_status(pid) == {"exited": 0}
        clock.advance(0.5)  # the read at 20.0 (the 49th dot) ends it at 20.25 + 0.2
        res = guest.exec_status(pid)
        assert res["exitcode"] == 1 and res["out-data"] == "." * 49 + "\nstatus: error\n"

    def test_error(self) -> None:
        guest, clock = make(faults=GuestFaults(cloudinit_error=True))
        clock.advance(30)
        res = run(guest, clock, ["cloud-init", "status", "--long"])
        assert res["exitcode"] == 1
        assert res["out-data"].startswith("status: error\nextended_status: error - done\n")
        assert "errors:\n\t- ('scripts_user'," in res["out-data"]
        status = json.loads(guest.file_read("/var/lib/cloud/data/status.json")["content"])
        assert status["v1"]["modules-final"]["errors"]

    def test_degraded(self) -> None:
        guest, clock = make(faults=GuestFaults(cloudinit_recoverable_error=True))
        clock.advance(30)
        res = run(guest, clock, ["cloud-init", "status", "--long"])
        assert res["exitcode"] == 2
        assert "status: done\nextended_status: degraded done\n" in res["out-data"]
        assert "recoverable_errors:\nWARNING:\n\t- " in res["out-data"]

    def test_status_json_shape(self) -> None:
        guest, clock = make()
        clock.advance(30)
        v1 = json.loads(guest.file_read("/var/lib/cloud/data/status.json")["content"])["v1"]
        assert set(v1) == {"datasource", "init", "init-local", "modules-config", "modules-final", "stage"}
        assert v1["stage"] is None and v1["modules-final"]["finished"] == 15.0
        result = json.loads(guest.file_read("/run/cloud-init/result.json")["content"])
        assert result == {"v1": {"datasource": "DataSourceNoCloud [seed=/dev/sr0]", "errors": []}}


DPKG_FMT = "${Package}\\t${Version}\\t${db:Status-Abbrev}\\n"


class TestPackages:
    def test_dpkg_query(self) -> None:
        guest, clock = make()
        res = run(guest, clock, ["dpkg-query", "-W", "-f", DPKG_FMT, "sudo", "jq", "cloud-init"])
        assert res["exitcode"] == 1
        assert res["out-data"] == "cloud-init\t25.1.4-1\tii \nsudo\t1.9.16p2-3\tii \n"
        assert res["err-data"] == "dpkg-query: no packages found matching jq\n"
        assert run(guest, clock, ["dpkg-query", f"--showformat={DPKG_FMT}", "-W", "sudo"])["exitcode"] == 0

    def test_dpkg_short_option_takes_rest_of_word(self) -> None:
        guest, clock = make()
        assert run(guest, clock, ["dpkg-query", "-W", "-f=${Package}\\n", "bash"])["out-data"] == "=bash\n"

    def test_install_flow(self) -> None:
        guest, clock = make()
        clock.advance(10)  # cloud-init (package_upgrade) done: lists fresh, lock free
        apt = [
            "/usr/bin/env",
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
            "--",
        ]
        res = run(guest, clock, apt + ["jq", "nosuch", "curl=0.1"])
        assert res["exitcode"] == 100
        assert res["err-data"] == "E: Unable to locate package nosuch\nE: Version '0.1' for 'curl' was not found\n"
        jq, curl = load_index()["jq"][-1], load_index()["curl"][0]  # the candidate, and an explicitly chosen version
        pid = guest.exec(apt + ["jq", f"curl={curl}"])
        clock.advance(4.9)
        assert guest.exec_status(pid) == {"exited": 0}
        clock.advance(0.1)
        res = guest.exec_status(pid)
        assert res["exitcode"] == 0 and f"Setting up jq ({jq}) ...\n" in res["out-data"]
        res = run(guest, clock, ["dpkg-query", "-W", "-f", DPKG_FMT, "jq", "curl"])
        assert res == {
            "exited": 1,
            "exitcode": 0,
            "out-data": f"curl\t{curl}\tii \njq\t{jq}\tii \n",
            "out-truncated": 0,
        }
        res = run(guest, clock, apt + ["jq"])
        assert res["exitcode"] == 0 and f"jq is already the newest version ({jq}).\n" in res["out-data"]
        assert guest.installed_packages()["jq"] == jq

    @pytest.mark.parametrize("name", ["tmux", "nginx", "postgresql", "emacs-nox", "python3-requests", "zstd"])
    def test_any_debian_package_installs(self, name: str) -> None:
        """The repository is Debian 13's own package list: what installs on a real guest installs here."""
        guest, clock = make()
        clock.advance(10)
        res = run(guest, clock, ["apt-get", "install", "-y", name])
        assert res["exitcode"] == 0, res
        assert guest.installed_packages()[name] == load_index()[name][-1]

    def test_index_provenance_and_unknown_names(self) -> None:
        index = load_index()
        assert len(index) > 60000 and all(versions for versions in index.values())
        sources = [line for line in provenance() if line.startswith("# source: ")]
        assert [line.split()[2].split("/dists/")[1].split("/")[0] for line in sources] == [
            "trixie",
            "trixie-updates",
            "trixie-security",
        ]
        assert all(" sha256=" in line and " release-date=" in line for line in sources)
        guest, clock = make()
        clock.advance(10)
        assert (
            run(guest, clock, ["apt-get", "install", "-y", "tmux-nosuch"])["err-data"]
            == "E: Unable to locate package tmux-nosuch\n"
        )

    def test_lists_empty_without_ciupgrade(self) -> None:
        guest, clock = make(ciupgrade="0")
        clock.advance(10)
        install = ["apt-get", "install", "-y", "htop"]
        assert run(guest, clock, install)["err-data"] == "E: Unable to locate package htop\n"
        assert run(guest, clock, ["apt-get", "update"])["exitcode"] == 0
        assert run(guest, clock, install)["exitcode"] == 0

    def test_lock_held_while_cloud_init_upgrades(self) -> None:
        guest, clock = make()
        clock.advance(3)  # uptime 11: inside cloud-init's apt window
        res = run(guest, clock, ["apt-get", "install", "-y", "jq"], wait=1)
        assert res["exitcode"] == 100 and res["err-data"].startswith(
            "E: Could not get lock /var/lib/dpkg/lock-frontend."
        )

    def test_repository_fault_and_downgrade(self) -> None:
        faults = GuestFaults(package_versions={"jq": ("1.7.1-6", "1.7.1-7")}, apt_lists_empty_at_boot=False)
        guest, clock = make(faults=faults, ciupgrade="0")
        assert "Setting up jq (1.7.1-7)" in run(guest, clock, ["apt-get", "install", "-y", "jq"])["out-data"]
        res = run(guest, clock, ["apt-get", "install", "-y", "jq=1.7.1-6"])
        assert res["exitcode"] == 100 and "without --allow-downgrades" in res["err-data"]

    @pytest.mark.parametrize(
        ("a", "b", "sign"),
        [
            ("1:2.47.2-0.2", "2.50", 1),
            ("1.0~rc1", "1.0", -1),
            ("2:9.1.1230-2", "2:9.1.1230-10", -1),
            ("12.10", "12.9", 1),
            ("1.7.1-6", "1.7.1-6", 0),
            ("1.0+deb13u1", "1.0", 1),
        ],
    )
    def test_version_compare(self, a: str, b: str, sign: int) -> None:
        result = dpkg_version_compare(a, b)
        assert (result > 0) - (result < 0) == sign


class TestFilesAndKeys:
    def test_missing_file(self) -> None:
        guest, _clock = make()
        with pytest.raises(AgentCommandError) as err:
            guest.file_read("/etc/shadow")
        assert err.value.message == (
            "VM 100 qga command 'guest-file-open' failed - failed to open file '/etc/shadow' (mode: 'r'): No such file or directory"
        )

    def test_seed_and_hostname(self) -> None:
        guest, clock = make()
        clock.advance(10)
        for name, part in (("user-data", "user"), ("meta-data", "meta"), ("network-config", "network")):
            assert guest.file_read(f"/var/lib/cloud/seed/nocloud/{name}")["content"] == guest.seed[part]
        assert guest.file_read("/etc/hostname") == {"content": "web1\n", "bytes-read": 5}
        assert guest.file_read("/etc/hostname", count=3) == {"content": "web", "bytes-read": 3, "truncated": 1}
        iid = yaml.safe_load(guest.seed["meta"])["instance-id"]
        assert guest.file_read("/var/lib/cloud/data/instance-id")["content"] == f"{iid}\n"

    def test_small_host_keys_valid_stable_and_distinct(self) -> None:
        guest, clock = make()
        clock.advance(10)
        for keytype, cls in (("ed25519", ed25519.Ed25519PublicKey), ("ecdsa", ec.EllipticCurvePublicKey)):
            line = guest.file_read(f"/etc/ssh/ssh_host_{keytype}_key.pub")["content"]
            assert line.endswith(" root@web1\n")
            key = serialization.load_ssh_public_key(line.encode())
            assert isinstance(key, cls)
            again, c2 = make()
            c2.advance(10)
            assert again.file_read(f"/etc/ssh/ssh_host_{keytype}_key.pub")["content"] == line
        assert host_public_keys(100, ("ed25519",)) != host_public_keys(101, ("ed25519",))

    def test_ssh_keygen_fingerprint(self) -> None:
        guest, clock = make()
        clock.advance(10)
        line = guest.file_read("/etc/ssh/ssh_host_ed25519_key.pub")["content"]
        digest = base64.b64encode(hashlib.sha256(base64.b64decode(line.split()[1])).digest()).decode().rstrip("=")
        res = run(guest, clock, ["ssh-keygen", "-l", "-f", "/etc/ssh/ssh_host_ed25519_key.pub"])
        assert res["out-data"] == f"256 SHA256:{digest} root@web1 (ED25519)\n"
        res = run(guest, clock, ["ssh-keygen", "-l", "-f", "/nope.pub"])
        assert res["exitcode"] == 255

    def test_rsa_host_key(self) -> None:
        key = host_public_keys(4242, ("rsa",))["rsa"]
        loaded = serialization.load_ssh_public_key(key.encode())
        assert loaded.key_size == 3072  # type: ignore[union-attr]
        assert host_public_keys(4242, ("rsa",))["rsa"] == key

    def test_host_keys_appear_with_cloud_init(self) -> None:
        guest, _clock = make(timing=GuestTiming(agent_up_after=1.0, cloudinit_done_after_boot=60.0))
        with pytest.raises(AgentCommandError):
            guest.file_read("/etc/ssh/ssh_host_ed25519_key.pub")


class TestUsers:
    def test_default_image_user(self) -> None:
        guest, _clock = make()
        assert guest.users() == [
            {
                "name": "debian",
                "default": True,
                "ssh_authorized_keys": [KEY],
                "password_set": False,
                "home": "/home/debian",
            }
        ]

    def test_ciuser(self) -> None:
        guest, clock = make(ciuser="ops", cipassword="$5$a$b")
        users = guest.users()
        assert (
            users[0]["name"] == "ops" and users[0]["password_set"] is True and users[0]["ssh_authorized_keys"] == [KEY]
        )
        clock.advance(10)
        assert guest.file_read("/home/ops/.ssh/authorized_keys")["content"] == KEY + "\n"

    def test_follows_given_seed(self) -> None:
        seed = {
            "user": "#cloud-config\nusers:\n  - default\n  - name: extra\n    ssh_authorized_keys: [k1]\n",
            "network": "",
            "meta": "",
        }
        guest = SimulatedGuest(7, {"net0": f"virtio={MAC}"}, seed, FakeClock(), GuestTiming(), GuestFaults())
        assert [(u["name"], u["ssh_authorized_keys"]) for u in guest.users()] == [("debian", []), ("extra", ["k1"])]
