# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Golden and property tests for pvesim.cloudinit (PVE 9 Cloudinit.pm behaviour)."""

from __future__ import annotations

import hashlib
from urllib.parse import quote

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pvesim import cloudinit
from pvesim.cloudinit import CloudinitError, drive_files, generated_snapshot, pending_items, render

KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx1+abc/def= alice@laptop"
KEY2 = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ+x+y bob with spaces"
NET0 = "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0"
HOST_DNS = {"search": "pvesim.lan", "dns1": "10.10.0.1"}


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def encode(keys: list[str]) -> str:
    return quote("\n".join(keys) + "\n", safe="")


class TestGoldenUserData:
    def test_full_config(self) -> None:
        config = {
            "name": "web1",
            "ciuser": "admin",
            "cipassword": "$5$salt$hash",
            "sshkeys": encode([KEY1, KEY2]),
            "searchdomain": "example.com",
            "nameserver": "1.1.1.1 9.9.9.9",
            "ipconfig0": "ip=dhcp",
            "net0": NET0,
        }
        out = render(config, 100, "pve1")
        assert out["user"] == (
            "#cloud-config\n"
            "hostname: web1\n"
            "manage_etc_hosts: true\n"
            "fqdn: web1.example.com\n"
            "user: admin\n"
            "password: $5$salt$hash\n"
            "ssh_authorized_keys:\n"
            f"  - {KEY1}\n"
            f"  - {KEY2}\n"
            "chpasswd:\n"
            "  expire: False\n"
            "users:\n"
            "  - default\n"
            "package_upgrade: true\n"
        )
        assert out["network"] == (
            "version: 1\n"
            "config:\n"
            "    - type: physical\n"
            "      name: eth0\n"
            "      mac_address: 'bc:24:11:aa:bb:cc'\n"
            "      subnets:\n"
            "      - type: dhcp4\n"
            "    - type: nameserver\n"
            "      address:\n"
            "      - '1.1.1.1'\n"
            "      - '9.9.9.9'\n"
            "      search:\n"
            "      - 'example.com'\n"
        )
        assert out["meta"] == f"instance-id: {sha1(out['user'] + out['network'])}\n"

    def test_no_ciuser_has_no_user_key_but_default_users(self) -> None:
        out = render({"net0": NET0, "ipconfig0": "ip=dhcp"}, 105, "pve1")
        assert out["user"] == (
            "#cloud-config\nhostname: VM105\nmanage_etc_hosts: true\nfqdn: VM105\n"
            "chpasswd:\n  expire: False\nusers:\n  - default\npackage_upgrade: true\n"
        )
        data = yaml.safe_load(out["user"])
        assert "user" not in data and data["users"] == ["default"]

    def test_root_user(self) -> None:
        user = render({"ciuser": "root"}, 100, "n")["user"]
        assert "user: root\ndisable_root: False\n" in user
        assert "users:" not in user

    @pytest.mark.parametrize(("value", "expected"), [(None, True), ("1", True), ("0", False)])
    def test_ciupgrade(self, value: str | None, expected: bool) -> None:
        config = {} if value is None else {"ciupgrade": value}
        user = render(config, 100, "n")["user"]
        assert ("package_upgrade: true\n" in user) is expected
        assert "package_upgrade: false" not in user

    def test_sshkeys_url_decoding(self) -> None:
        raw = "ssh-ed25519%20AAAA%2Bplus+literal%20me%40host%0A%0A%20%20%0Assh-rsa%20BBB%3D%3D%20x%20y%0A"
        user = render({"sshkeys": raw}, 100, "n")["user"]
        assert "  - ssh-ed25519 AAAA+plus+literal me@host\n  - ssh-rsa BBB== x y\n" in user
        assert yaml.safe_load(user)["ssh_authorized_keys"] == [
            "ssh-ed25519 AAAA+plus+literal me@host",
            "ssh-rsa BBB== x y",
        ]

    def test_password_masked_but_meta_unchanged(self) -> None:
        config = {"cipassword": "secret"}
        plain = render(config, 100, "n")
        masked = render(config, 100, "n", mask_password=True)
        assert "password: **********\n" in masked["user"]
        assert masked["meta"] == plain["meta"]

    def test_hostname_variants(self) -> None:
        assert cloudinit.hostname_fqdn({"name": "a.b.c"}, 1) == ("a", "a.b.c")
        assert cloudinit.hostname_fqdn({"name": "a", "searchdomain": "x.org y.org"}, 1) == ("a", "a.x.org y.org")
        assert cloudinit.hostname_fqdn({}, 7) == ("VM7", "VM7")


class TestGoldenNetwork:
    def test_static_and_ipv6(self) -> None:
        config = {
            "net0": "model=virtio,macaddr=BC:24:11:00:00:01,bridge=vmbr0",
            "ipconfig0": "ip=192.0.2.10/26,gw=192.0.2.1,ip6=2001:db8::10/64,gw6=2001:db8::1",
            "net1": "e1000=BC:24:11:00:00:02",
            "ipconfig1": "ip6=auto",
            "net2": "virtio=BC:24:11:00:00:03",
            "ipconfig2": "ip6=dhcp",
            "nameserver": "192.0.2.53",
            "searchdomain": "lab",
        }
        assert render(config, 100, "n")["network"] == (
            "version: 1\nconfig:\n"
            "    - type: physical\n      name: eth0\n      mac_address: 'bc:24:11:00:00:01'\n      subnets:\n"
            "      - type: static\n        address: '192.0.2.10'\n        netmask: '255.255.255.192'\n        gateway: '192.0.2.1'\n"
            "      - type: static6\n        address: '2001:db8::10/64'\n        gateway: '2001:db8::1'\n"
            "    - type: physical\n      name: eth1\n      mac_address: 'bc:24:11:00:00:02'\n      subnets:\n"
            "      - type: ipv6_slaac\n"
            "    - type: physical\n      name: eth2\n      mac_address: 'bc:24:11:00:00:03'\n      subnets:\n"
            "      - type: dhcp6\n"
            "    - type: nameserver\n      address:\n      - '192.0.2.53'\n      search:\n      - 'lab'\n"
        )

    def test_host_dns_and_skips(self) -> None:
        config = {"net0": NET0, "net1": "virtio=BC:24:11:00:00:09", "ipconfig5": "ip=dhcp", "ipconfig1": "gw=10.0.0.1"}
        out = render(
            config, 100, "n", host_dns={"search": "a.lan b.lan", "dns1": "10.0.0.53", "dns2": "", "dns3": "10.0.0.54"}
        )
        assert out["network"] == (
            "version: 1\nconfig:\n"
            "    - type: physical\n      name: eth1\n      mac_address: 'bc:24:11:00:00:09'\n      subnets:\n"
            "    - type: nameserver\n      address:\n      - '10.0.0.53'\n      - '10.0.0.54'\n"
            "      search:\n      - 'a.lan'\n      - 'b.lan'\n"
        )

    def test_empty_nameserver_entry_is_always_written(self) -> None:
        out = render({}, 100, "n", host_dns={})
        assert out["network"] == "version: 1\nconfig:\n    - type: nameserver\n"

    def test_perl_string_sort_of_interfaces(self) -> None:
        config = {f"net{i}": f"virtio=BC:24:11:00:00:{i:02X}" for i in (0, 2, 10)}
        config.update({f"ipconfig{i}": "ip=dhcp" for i in (0, 2, 10)})
        names = [line.split(": ")[1] for line in render(config, 1, "n")["network"].splitlines() if "name: eth" in line]
        assert names == ["eth0", "eth10", "eth2"]

    def test_empty_ipconfig_means_dhcp_both(self) -> None:
        assert cloudinit.parse_ipconfig("") == {"ip": "dhcp", "ip6": "dhcp"}
        assert cloudinit.parse_ipconfig("ip=dhcp,gw=1.2.3.4") is None

    def test_windows_defaults_to_configdrive2(self) -> None:
        out = render(
            {"ostype": "win11", "net0": NET0, "ipconfig0": "ip=10.0.0.5/24,gw=10.0.0.1"}, 100, "n", host_dns={}
        )
        assert out["network"] == (
            "auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet static\n"
            "        address 10.0.0.5\n        netmask 255.255.255.0\n        gateway 10.0.0.1\n"
        )
        assert '"uuid": "' + sha1(out["user"] + out["network"]) + '"' in out["meta"]


class TestDriveFiles:
    def test_generated_matches_dump(self) -> None:
        config = {"net0": NET0, "ipconfig0": "ip=dhcp", "ciuser": "ops"}
        files = drive_files(config, 100, "n")
        dump = render(config, 100, "n")
        assert {k: files[k] for k in ("user", "network", "meta")} == dump
        assert files["vendor"] == ""

    def test_cicustom_user_snippet(self) -> None:
        custom = "#cloud-config\nusers:\n  - name: bob\n"
        config = {"net0": NET0, "ipconfig0": "ip=dhcp", "cicustom": "user=local:snippets/u.yaml"}
        files = drive_files(config, 100, "n", snippets={"local:snippets/u.yaml": custom})
        assert files["user"] == custom
        assert files["meta"] == f"instance-id: {sha1(custom + files['network'])}\n"
        assert render(config, 100, "n")["user"] != custom  # the dump ignores cicustom, like PVE

    def test_cicustom_errors(self) -> None:
        with pytest.raises(CloudinitError, match="unable to open file"):
            drive_files({"cicustom": "user=local:snippets/missing.yaml"}, 1, "n", snippets={})
        with pytest.raises(CloudinitError, match="is not in the snippets directory"):
            drive_files({"cicustom": "meta=local:iso/x.iso"}, 1, "n", snippets={})


class TestPending:
    BASE = {"name": "vm", "ciuser": "a", "ciupgrade": "1", "net0": NET0, "ipconfig0": "ip=dhcp", "cipassword": "x"}

    def test_in_sync_lists_existing_values(self) -> None:
        items = pending_items(self.BASE, generated_snapshot(self.BASE))
        assert items == [
            {"key": "cipassword", "value": "**********"},
            {"key": "ciupgrade", "value": "1"},
            {"key": "ciuser", "value": "a"},
        ]

    def test_changes(self) -> None:
        snap = generated_snapshot(self.BASE)
        new = dict(self.BASE, ciuser="b", sshkeys=encode([KEY1]), ipconfig0="ip=10.0.0.2/24", ciupgrade="0")
        del new["cipassword"]
        assert pending_items(new, snap) == [
            {"key": "sshkeys", "pending": encode([KEY1])},
            {"key": "ciuser", "value": "a", "pending": "b"},
            {"key": "cipassword", "delete": 1},
            {"key": "ciupgrade", "delete": 1},
        ]

    def test_snapshot_keys(self) -> None:
        snap = generated_snapshot(dict(self.BASE, memory="2048", net31="virtio=BC:24:11:00:00:01"))
        assert "memory" not in snap and "net31" in snap and "name" in snap


SAFE = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@.-_+=/% ", min_size=1, max_size=30
)
B64 = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", min_size=4, max_size=60)
KEYTYPE = st.sampled_from(["ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "sk-ssh-ed25519@openssh.com"])
KEYLINE = st.builds(lambda t, b, c: f"{t} {b} {c}".strip(), KEYTYPE, B64, SAFE)
MAC = st.lists(st.integers(0, 255), min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02X}" for x in b))


class TestProperties:
    @settings(max_examples=60, deadline=None)
    @given(
        keys=st.lists(KEYLINE, min_size=1, max_size=4),
        name=st.from_regex(r"[a-z][a-z0-9-]{0,14}", fullmatch=True),
        upgrade=st.sampled_from([None, "0", "1"]),
        user=st.one_of(st.none(), st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)),
    )
    def test_user_data_is_yaml_and_keys_round_trip(
        self, keys: list[str], name: str, upgrade: str | None, user: str | None
    ) -> None:
        config = {"name": name, "sshkeys": encode(keys)}
        if upgrade is not None:
            config["ciupgrade"] = upgrade
        if user is not None:
            config["ciuser"] = user
        data = yaml.safe_load(render(config, 100, "n")["user"])
        assert data["ssh_authorized_keys"] == [k.strip() for k in keys]
        assert data["hostname"] == name
        assert data.get("package_upgrade", False) is (upgrade != "0")
        assert ("user" in data) is (user is not None)

    @settings(max_examples=60, deadline=None)
    @given(mac=MAC, cidr=st.integers(1, 32), octet=st.integers(1, 254))
    def test_network_is_yaml_and_mac_matches(self, mac: str, cidr: int, octet: int) -> None:
        config = {"net0": f"virtio={mac},bridge=vmbr0", "ipconfig0": f"ip=10.1.2.{octet}/{cidr},gw=10.1.2.254"}
        out = render(config, 100, "n")
        data = yaml.safe_load(out["network"])
        phys = data["config"][0]
        assert data["version"] == 1 and phys["mac_address"] == mac.lower()
        assert phys["subnets"][0]["address"] == f"10.1.2.{octet}"
        assert yaml.safe_load(out["meta"]) == {"instance-id": sha1(out["user"] + out["network"])}
