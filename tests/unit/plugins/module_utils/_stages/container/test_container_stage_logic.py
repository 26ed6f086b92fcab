# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers of the container stages: MAC derivation, IPv4 choice, package_facts reading."""

from __future__ import annotations

import re

from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.container.common import container_mac
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.container.packages import installed_versions
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.container.readiness import usable_ipv4


def test_mac_is_stable_per_operation_and_in_the_proxmox_oui() -> None:
    first = container_mac({"operationId": "op-aaaa"})
    assert re.fullmatch(r"BC:24:11:[0-9A-F]{2}:[0-9A-F]{2}:[0-9A-F]{2}", first)
    assert container_mac({"operationId": "op-aaaa"}) == first != container_mac({"operationId": "op-aaab"})


def test_usable_ipv4_skips_loopback_link_local_and_v6() -> None:
    assert (
        usable_ipv4(
            {
                "ip-addresses": [
                    {"ip-address": "169.254.1.2", "ip-address-type": "inet"},
                    {"ip-address": "fe80::1", "ip-address-type": "inet6"},
                    {"ip-address": "192.0.2.50", "ip-address-type": "inet"},
                ]
            }
        )
        == "192.0.2.50"
    )
    assert usable_ipv4({"inet": "127.0.0.1/8", "ip-addresses": []}) is None
    assert usable_ipv4({"inet": "10.1.2.3/24"}) == "10.1.2.3"


def test_installed_versions_reads_package_facts_and_plain_maps() -> None:
    facts = {"git": [{"name": "git", "version": "1:2.39.5-0+deb12u2", "source": "apt"}], "jq": "1.6-2.1", "odd": []}
    assert installed_versions(facts) == {"git": "1:2.39.5-0+deb12u2", "jq": "1.6-2.1"}
    assert installed_versions(None) == {}
