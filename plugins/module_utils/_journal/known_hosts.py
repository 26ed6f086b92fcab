# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One marked block of known_hosts lines per operation in a known_hosts file (``vmanyware_known_hosts``).

The block is what ``ansible.builtin.blockinfile`` with ``marker: "# {mark} vmanyware <operation id>"`` writes, so a
file written by earlier releases of the provision role is updated in place: ``# BEGIN vmanyware <id>``, the lines,
``# END vmanyware <id>``. Only that block changes; every other line is kept as it is. A missing block is appended at
the end of the file (a last line without a newline gets one first), an empty one is removed with its markers.
The file is written atomically (``_core.files.atomic_write_bytes``, mode 0600) under a lock next to it, because parallel
hosts of one play install their blocks in the same file. This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import os
import typing as t

from .._core.errors import InputError
from .._core.files import LocalFileError, atomic_write_bytes
from .._core.lock import FileLock
from . import validate_operation_id

FILE_MODE = 0o600
DIRECTORY_MODE = 0o700
MAX_FILE_BYTES = 16 * 1024 * 1024
LOCK_WAIT = 30.0


def markers(operation_id: str) -> tuple[str, str]:
    """The block's first and last line (without the newline)."""
    return "# BEGIN vmanyware %s" % operation_id, "# END vmanyware %s" % operation_id


def validate_lines(lines: t.Sequence[t.Any]) -> list[str]:
    """The known_hosts lines as given; ``invalid_option`` for a line that is not one known_hosts entry (value never echoed)."""
    checked = []
    for index, line in enumerate(lines):
        if (
            not isinstance(line, str)
            or not line.strip()
            or any(char in line for char in "\r\n\0")
            or line.lstrip().startswith("#")
            or len(line.split()) < 3
        ):
            raise InputError(
                "Each known_hosts line must be one '<host> <key type> <base64 key>' entry on a single line.",
                path="known_hosts[%d]" % index,
                details={"rule": "known_hosts_line"},
            )
        checked.append(line)
    return checked


def with_block(text: str, operation_id: str, lines: t.Sequence[str]) -> str:
    """``text`` with the operation's block set to ``lines`` (removed when there are none)."""
    begin, end = markers(operation_id)
    kept = text.splitlines(True)
    bare = [line.rstrip("\r\n") for line in kept]
    first = last = None
    for index, line in enumerate(bare):  # the last marker pair, as blockinfile finds it
        if line == begin:
            first = index
        elif line == end:
            last = index
    block = ["%s\n" % line for line in (begin, *lines, end)] if lines else []
    if first is None or last is None:
        # no complete block: a new one at the end of the file (a lone marker stays, as blockinfile leaves it)
        if block and kept and not kept[-1].endswith("\n"):
            kept[-1] += "\n"
        return "".join(kept + block)
    low, high = min(first, last), max(first, last)
    return "".join(kept[:low] + block + kept[high + 1 :])


def _read_text(path: str) -> str | None:
    """The file's text, or ``None`` when it does not exist."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError:
        raise LocalFileError(
            "The known_hosts file could not be read.", code="io_error", details={"reason": "os_error"}
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise LocalFileError(
            "The known_hosts file exceeds its size bound.", code="io_error", details={"reason": "too_large"}
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise LocalFileError(
            "The known_hosts file is not valid UTF-8.", code="io_error", details={"reason": "not_utf8"}
        ) from None


def install_block(
    path: str, operation_id: str, lines: t.Sequence[t.Any], *, check_mode: bool, diff: bool
) -> dict[str, t.Any]:
    """Set the operation's block in the known_hosts file at ``path``: changed only when the text or the mode changes.

    Creates the file (mode 0600) and its missing directories (mode 0700) when there is a block to write; a symbolic link
    is followed (its target is written). Check mode returns the same result and diff and writes nothing.
    """
    operation_id = validate_operation_id(operation_id)
    wanted = validate_lines(lines)
    target = os.path.realpath(path)
    directory = os.path.dirname(target)
    if os.path.isdir(target):
        raise LocalFileError(
            "The known_hosts path is a directory.", code="io_error", details={"reason": "not_regular_file"}
        )
    if not check_mode and wanted and not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=DIRECTORY_MODE, exist_ok=True)
        except OSError:
            raise LocalFileError(
                "The known_hosts directory could not be created.", code="io_error", details={"reason": "os_error"}
            ) from None
    # parallel hosts of one play write their blocks into the same file: one read-modify-write at a time
    lock = (
        FileLock(target + ".lock", timeout=LOCK_WAIT, code="io_error")
        if not check_mode and os.path.isdir(directory)
        else None
    )
    if lock is not None:
        lock.acquire()
    try:
        before = _read_text(target)
        after = with_block(before or "", operation_id, wanted)
        if before is None and not after:
            outcome = "unchanged"  # nothing to remove from a file that does not exist
        elif before is None:
            outcome = "created"
        elif after == before:
            outcome = "unchanged"
        else:
            outcome = "removed" if not wanted else "written"
        mode_differs = before is not None and (os.stat(target).st_mode & 0o7777) != FILE_MODE
        if outcome == "unchanged" and mode_differs:
            outcome = "mode"
        if not check_mode and outcome != "unchanged":
            _write(target, after, text_changed=outcome != "mode")
    finally:
        if lock is not None:
            lock.release()
    result: dict[str, t.Any] = {
        "changed": outcome != "unchanged",
        "path": path,
        "outcome": outcome,
        "lines": len(wanted),
    }
    if diff:
        result["diff"] = {
            "before": before or "",
            "after": after,
            "before_header": "%s (content)" % path,
            "after_header": "%s (content)" % path,
        }
    return result


def _write(target: str, text: str, *, text_changed: bool) -> None:
    if text_changed:
        atomic_write_bytes(target, text.encode("utf-8"), FILE_MODE)  # io_error on failure
        return
    try:
        os.chmod(target, FILE_MODE)
    except OSError:
        raise LocalFileError(
            "The known_hosts file could not be written.", code="io_error", details={"reason": "os_error"}
        ) from None
