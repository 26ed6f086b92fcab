# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Tests of the known_hosts block of an operation (_known_hosts.py, module vmanyware_known_hosts)."""

from __future__ import annotations

import multiprocessing
import os
import stat
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.known_hosts import install_block

OP = "op-" + "a" * 26
OTHER = "op-" + "b" * 26
KEY = "192.0.2.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHostKeyOne"
KEY2 = "192.0.2.10 ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY"


def block(operation_id: str, *lines: str) -> str:
    """The block as ansible.builtin.blockinfile writes it with marker "# {mark} vmanyware <id>" (the role's earlier task)."""
    return "".join(
        "%s\n" % line for line in ("# BEGIN vmanyware %s" % operation_id, *lines, "# END vmanyware %s" % operation_id)
    )


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_missing_file_and_directory_are_created_private(tmp_path: Path) -> None:
    path = tmp_path / "ssh" / "known_hosts"
    result = install_block(str(path), OP, [KEY, KEY2], check_mode=False, diff=False)
    assert result == {"changed": True, "path": str(path), "outcome": "created", "lines": 2}
    assert path.read_text() == block(OP, KEY, KEY2)
    assert mode_of(path) == 0o600 and mode_of(path.parent) == 0o700


def test_a_second_run_changes_nothing_and_does_not_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    install_block(str(path), OP, [KEY], check_mode=False, diff=False)
    inode = path.stat().st_ino
    result = install_block(str(path), OP, [KEY], check_mode=False, diff=True)
    assert result["changed"] is False and result["outcome"] == "unchanged"
    assert result["diff"]["before"] == result["diff"]["after"] == block(OP, KEY)
    assert path.stat().st_ino == inode  # not replaced


def test_only_its_own_block_is_replaced_in_place(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    before = (
        "# operator's own line\nhost.example ssh-rsa AAAAB3Nza\n"
        + block(OP, "192.0.2.99 ssh-ed25519 AAAAold")
        + block(OTHER, KEY2)
        + "last line\n"
    )
    path.write_text(before)
    result = install_block(str(path), OP, [KEY], check_mode=False, diff=False)
    assert result["changed"] is True and result["outcome"] == "written"
    assert path.read_text() == before.replace(block(OP, "192.0.2.99 ssh-ed25519 AAAAold"), block(OP, KEY))


def test_a_new_block_goes_to_the_end_after_a_missing_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(block(OTHER, KEY2) + "host.example ssh-rsa AAAAB3Nza")
    install_block(str(path), OP, [KEY], check_mode=False, diff=False)
    assert path.read_text() == block(OTHER, KEY2) + "host.example ssh-rsa AAAAB3Nza\n" + block(OP, KEY)


def test_a_lone_marker_is_left_and_a_complete_block_appended(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("# BEGIN vmanyware %s\nhost.example ssh-rsa AAAAB3Nza\n" % OP)
    install_block(str(path), OP, [KEY], check_mode=False, diff=False)
    assert path.read_text() == "# BEGIN vmanyware %s\nhost.example ssh-rsa AAAAB3Nza\n" % OP + block(OP, KEY)


def test_no_lines_remove_the_block_with_its_markers(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("first\n" + block(OP, KEY) + "last\n")
    result = install_block(str(path), OP, [], check_mode=False, diff=False)
    assert (result["changed"], result["outcome"], result["lines"]) == (True, "removed", 0)
    assert path.read_text() == "first\nlast\n"
    assert install_block(str(path), OP, [], check_mode=False, diff=False)["changed"] is False


def test_no_lines_and_no_file_create_nothing(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "known_hosts"
    result = install_block(str(path), OP, [], check_mode=False, diff=False)
    assert (result["changed"], result["outcome"]) == (False, "unchanged")
    assert not path.parent.exists()


@pytest.mark.parametrize(
    "existing", [None, "other\n", "other\n" + block(OP, KEY2)], ids=["missing", "without-block", "old-block"]
)
def test_check_mode_previews_exactly_and_writes_nothing(tmp_path: Path, existing: str | None) -> None:
    path = tmp_path / "dir" / "known_hosts"
    if existing is not None:
        path.parent.mkdir()
        path.write_text(existing)
        path.chmod(0o600)
    preview = install_block(str(path), OP, [KEY], check_mode=True, diff=True)
    assert (path.read_text() if path.exists() else None) == existing
    assert path.parent.exists() == (existing is not None)
    assert not (tmp_path / "dir" / "known_hosts.lock").exists()
    applied = install_block(str(path), OP, [KEY], check_mode=False, diff=True)
    assert preview == applied
    assert preview["diff"]["before"] == (existing or "") and preview["diff"]["after"] == path.read_text()


def test_a_wider_mode_alone_is_a_change(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(block(OP, KEY))
    path.chmod(0o644)
    assert install_block(str(path), OP, [KEY], check_mode=True, diff=False)["outcome"] == "mode"
    assert mode_of(path) == 0o644
    result = install_block(str(path), OP, [KEY], check_mode=False, diff=False)
    assert (result["changed"], result["outcome"]) == (True, "mode")
    assert mode_of(path) == 0o600 and path.read_text() == block(OP, KEY)


def test_a_symbolic_link_is_followed(tmp_path: Path) -> None:
    target = tmp_path / "real_known_hosts"
    target.write_text("kept\n")
    link = tmp_path / "known_hosts"
    link.symlink_to(target)
    install_block(str(link), OP, [KEY], check_mode=False, diff=False)
    assert link.is_symlink() and target.read_text() == "kept\n" + block(OP, KEY)


@pytest.mark.parametrize(
    "line",
    [
        "192.0.2.10 ssh-ed25519 AAAA\n# END vmanyware x",
        "# BEGIN vmanyware " + OP,
        "",
        "   ",
        "192.0.2.10 ssh-ed25519",
        "a b c\rd",
        42,
    ],
    ids=["newline", "marker", "empty", "blank", "no-key", "cr", "int"],
)
def test_a_line_that_is_not_one_known_hosts_entry_is_refused_unechoed(tmp_path: Path, line: t.Any) -> None:
    path = tmp_path / "known_hosts"
    with pytest.raises(VmanywareError) as caught:
        install_block(str(path), OP, [KEY, line], check_mode=False, diff=False)
    result = caught.value.to_result()
    assert result["error_code"] == "invalid_option" and result["error_path"] == "known_hosts[1]"
    assert "ssh-ed25519" not in str(result) and not path.exists()


def test_a_malformed_operation_id_is_refused(tmp_path: Path) -> None:
    with pytest.raises(VmanywareError) as caught:
        install_block(str(tmp_path / "known_hosts"), "op-1\n# BEGIN", [KEY], check_mode=False, diff=False)
    assert caught.value.code == "invalid_option"


def test_a_directory_path_fails_with_io_error(tmp_path: Path) -> None:
    with pytest.raises(VmanywareError) as caught:
        install_block(str(tmp_path), OP, [KEY], check_mode=False, diff=False)
    assert caught.value.code == "io_error"


def _install(path: str, index: int) -> None:
    operation_id = "op-%s" % "abcdefgh"[index].rjust(26, "c")
    for _round in range(10):
        install_block(
            path, operation_id, ["192.0.2.%d ssh-ed25519 AAAAkey%d" % (index, index)], check_mode=False, diff=False
        )


def test_parallel_hosts_keep_every_block_in_one_file(tmp_path: Path) -> None:
    # the hosts of one play (forks) install their blocks into the same file at the same time: none may be lost
    path = tmp_path / "known_hosts"
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_install, args=(str(path), index)) for index in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0] * 8
    text = path.read_text()
    for index in range(8):
        assert text.count("192.0.2.%d ssh-ed25519 AAAAkey%d\n" % (index, index)) == 1
    assert len(text.splitlines()) == 8 * 3
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
