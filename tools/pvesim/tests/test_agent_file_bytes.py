# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The agent file endpoints carry exact bytes (``file-write encode=0``, ``file-read decode=0``) with every guest
backend; here the simulated one, plus the path resolution ``--guests container`` uses for ``guest-exec``."""

from __future__ import annotations

import base64
import os
import time
import typing as t
from pathlib import Path

from pvesim.containerguest import resolve_in_root
from pvesim.guest import read_content

from .conftest import Api

N = "/nodes/pve-test"


def _started(api: Api) -> None:
    api.put(f"{N}/qemu/201/config", agent="1")
    api.run("POST", f"{N}/qemu/201/status/start")
    deadline = time.monotonic() + 20
    while api.post(f"{N}/qemu/201/agent/ping").status_code != 200:
        assert time.monotonic() < deadline, "the simulated agent did not come up"
        time.sleep(0.05)


def test_binary_file_round_trip_on_the_simulated_guest(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    _started(api)
    raw = bytes(range(256)) * 3 + b"\xff\xfe\x00"
    resp = api.post(f"{N}/qemu/201/agent/file-write", file="/tmp/blob", content=base64.b64encode(raw), encode=0)
    assert resp.status_code == 200, resp.text
    got = api.data(api.get(f"{N}/qemu/201/agent/file-read", file="/tmp/blob", decode=0))
    assert base64.b64decode(got["content"]) == raw and got["bytes-read"] == len(raw) and "truncated" not in got
    part = api.data(api.get(f"{N}/qemu/201/agent/file-read", file="/tmp/blob", decode=0, offset=250, count=8))
    assert base64.b64decode(part["content"]) == raw[250:258] and part["truncated"] == 1
    # decode=1 (default): text, the invalid UTF-8 replaced; encode=1: the text's UTF-8
    assert api.data(api.get(f"{N}/qemu/201/agent/file-read", file="/tmp/blob", count=3))["content"] == "\x00\x01\x02"
    assert api.post(f"{N}/qemu/201/agent/file-write", file="/tmp/t", content="grüße").status_code == 200
    got = api.data(api.get(f"{N}/qemu/201/agent/file-read", file="/tmp/t", decode=0))
    assert base64.b64decode(got["content"]) == "grüße".encode() and got["bytes-read"] == 7
    resp = api.post(f"{N}/qemu/201/agent/file-write", file="/tmp/t", content="not base64!", encode=0)
    assert resp.status_code == 500 and "invalid base64 content" in resp.json()["message"]


def test_an_error_with_non_latin1_text_reaches_the_client(api: Api, clone201: dict[str, t.Any]) -> None:
    """GLib's spawn error quotes the program with U+201C/U+201D; PVE puts the message in the status line too."""
    del clone201
    _started(api)
    resp = api.req("POST", f"{N}/qemu/201/agent/exec", data={"command": ["no-such-program"]})
    assert resp.status_code == 500 and "\u201cno-such-program\u201d" in resp.json()["message"]


def test_decode_0_content_is_each_chunks_base64() -> None:
    """PVE appends every 1 MiB guest-file-read chunk's base64 as it came: padding inside, not one base64 string."""
    data = os.urandom(1024 * 1024 + 2)
    content = read_content(data, decode=False)
    first = base64.b64encode(data[: 1024 * 1024]).decode()
    assert content == first + base64.b64encode(data[1024 * 1024 :]).decode() and first.endswith("=")
    assert read_content(b"", decode=False) == "" and read_content(b"a\xffb") == "a\ufffdb"


def test_resolve_in_root_keeps_symlinks_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "etc" / "alternatives").mkdir(parents=True)
    (root / "usr" / "bin" / "mawk").write_text("#!/bin/sh\n")
    (root / "bin").symlink_to("usr/bin")  # merged /usr, relative
    (root / "etc" / "alternatives" / "awk").symlink_to("/usr/bin/mawk")  # absolute: the container's /usr
    (root / "usr" / "bin" / "awk").symlink_to("/etc/alternatives/awk")
    (root / "usr" / "bin" / "escape").symlink_to("../../../../../../etc/passwd")
    (root / "loop").symlink_to("/loop")
    assert resolve_in_root(str(root), "/bin/awk") == str(root / "usr" / "bin" / "mawk")
    assert resolve_in_root(str(root), "/usr/bin/../bin/mawk") == str(root / "usr" / "bin" / "mawk")
    assert resolve_in_root(str(root), "/usr/bin/escape") is None  # ".." stops at the root: /etc/passwd is not there
    assert resolve_in_root(str(root), "/usr/bin/nope") is None and resolve_in_root(str(root), "/loop") is None
