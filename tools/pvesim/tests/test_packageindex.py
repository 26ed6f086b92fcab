# SPDX-License-Identifier: GPL-3.0-or-later
"""Building the package index from Debian's Packages files: parsing, the Release hash check, the format."""

from __future__ import annotations

import gzip
import hashlib
import lzma

import pytest

from pvesim import packageindex

PACKAGES = """Package: tmux
Version: 3.5a-3
Architecture: amd64

Package: jq
Version: 1.7.1-6+deb13u1

Package: jq
Version: 1.7.1-6+deb13u4
"""


def fake_mirror(packages: str = PACKAGES, corrupt: bool = False) -> dict[str, bytes]:
    packed = lzma.compress(packages.encode())
    digest = hashlib.sha256(packed + (b"x" if corrupt else b"")).hexdigest()
    files: dict[str, bytes] = {}
    for archive, suite in packageindex.SUITES:
        base = f"http://mirror/{archive}/dists/{suite}/"
        release = f"Suite: {suite}\nDate: Sat, 01 Nov 2026 00:00:00 UTC\nSHA256:\n {digest} {len(packed)} main/binary-amd64/Packages.xz\n"
        files[base + "Release"] = release.encode()
        files[base + "main/binary-amd64/Packages.xz"] = packed
    return files


def test_index_lists_every_package_with_its_versions_and_provenance() -> None:
    data = packageindex.build_index("http://mirror", fetch=fake_mirror().__getitem__)
    lines = gzip.decompress(data).decode().splitlines()
    assert [line for line in lines if not line.startswith("#")] == ["jq 1.7.1-6+deb13u1 1.7.1-6+deb13u4", "tmux 3.5a-3"]
    assert sum(line.startswith("# source: http://mirror/") for line in lines) == 3


def test_a_packages_file_that_does_not_match_its_release_is_refused() -> None:
    with pytest.raises(ValueError):
        packageindex.build_index("http://mirror", fetch=fake_mirror(corrupt=True).__getitem__)
