# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Tests of the durable file primitives (_core/files.py)."""

from __future__ import annotations

import json
import os
import stat
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core import files as _files
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.files import (
    LocalFileError,
    atomic_write_json,
    create_json_exclusive,
    read_json_strict,
    remove_file_durable,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _leftovers(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if _files.is_temp_name(name)]


# --- atomic_write_json -----------------------------------------------------------------------


def test_atomic_write_creates_file_with_mode_0600_and_order_kept(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    atomic_write_json(str(target), {"b": 1, "a": [1, "é"]})
    assert _mode(target) == 0o600
    text = target.read_text("utf-8")
    assert text == '{\n  "b": 1,\n  "a": [\n    1,\n    "é"\n  ]\n}\n'
    assert list(json.loads(text)) == ["b", "a"]
    assert _leftovers(tmp_path) == []


def test_atomic_write_replaces_and_honours_mode(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    atomic_write_json(str(target), {"v": 1})
    atomic_write_json(str(target), {"v": 2}, mode=0o640)
    assert json.loads(target.read_text()) == {"v": 2}
    assert _mode(target) == 0o640


def test_atomic_write_serialization_error_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    with pytest.raises((TypeError, ValueError)):
        atomic_write_json(str(target), {"v": object()})
    with pytest.raises(ValueError):
        atomic_write_json(str(target), {"v": float("nan")})
    assert os.listdir(tmp_path) == []


def test_atomic_write_interrupted_at_the_rename_keeps_previous_file_and_removes_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "doc.json"
    atomic_write_json(str(target), {"v": 1})

    def interrupted(_source: t.Any, _destination: t.Any) -> None:
        raise KeyboardInterrupt()  # any exception at the rename, a BaseException included

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_json(str(target), {"v": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"v": 1}
    assert _leftovers(tmp_path) == []


def test_atomic_write_os_error_is_typed(tmp_path: Path) -> None:
    with pytest.raises(LocalFileError) as info:
        atomic_write_json(str(tmp_path / "missing-dir" / "doc.json"), {"v": 1})
    assert info.value.code == "io_error"


# --- create_json_exclusive / remove_file_durable ---------------------------------------------


def test_create_exclusive_writes_once(tmp_path: Path) -> None:
    target = tmp_path / "claim.json"
    assert create_json_exclusive(str(target), {"owner": "a"}) is True
    assert create_json_exclusive(str(target), {"owner": "b"}) is False
    assert json.loads(target.read_text()) == {"owner": "a"}
    assert _mode(target) == 0o600
    assert _leftovers(tmp_path) == []


def test_create_exclusive_does_not_follow_dangling_symlink(tmp_path: Path) -> None:
    target = tmp_path / "claim.json"
    target.symlink_to(tmp_path / "elsewhere.json")
    assert create_json_exclusive(str(target), {"owner": "a"}) is False
    assert not (tmp_path / "elsewhere.json").exists()


def test_remove_file_durable(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    target.write_text("{}")
    assert remove_file_durable(str(target)) is True
    assert remove_file_durable(str(target)) is False


# --- read_json_strict ------------------------------------------------------------------------


def _read_error(path: Path, content: bytes, max_bytes: int = 1000, **kwargs: t.Any) -> LocalFileError:
    path.write_bytes(content)
    with pytest.raises(LocalFileError) as info:
        read_json_strict(str(path), max_bytes, **kwargs)
    return info.value


def test_read_valid(tmp_path: Path) -> None:
    target = tmp_path / "ok.json"
    target.write_bytes('{"a": [1, 2.5, "ü", null, true]}'.encode("utf-8"))
    assert read_json_strict(str(target), 100) == {"a": [1, 2.5, "ü", None, True]}


@pytest.mark.parametrize(
    "content,code,reason",
    [
        (b'{"a": 1}' + b" " * 2000, "invalid_json", "too_large"),
        (b'{"a": "\xff\xfe"}', "invalid_json", "not_utf8"),
        (b'{"a": 1', "invalid_json", "invalid_json"),
        (b'{"a": 1} {"b": 2}', "invalid_json", "invalid_json"),
        (b'{"a": 1, "a": 2}', "invalid_json", "duplicate_key"),
        (b'{"x": {"a": 1, "a": 1}}', "invalid_json", "duplicate_key"),
        (b'{"a": NaN}', "invalid_json", "invalid_json"),
        (b'{"a": -Infinity}', "invalid_json", "invalid_json"),
        (b"\xef\xbb\xbf{}", "invalid_json", "invalid_json"),
        (b"[" * 100000 + b"]" * 100000, "invalid_json", "invalid_json"),
        (b"1" * 5000, "invalid_json", "invalid_json"),
        (b"", "invalid_json", "invalid_json"),
    ],
)
def test_read_refusals(tmp_path: Path, content: bytes, code: str, reason: str) -> None:
    err = _read_error(tmp_path / "bad.json", content, max_bytes=1000 if reason == "too_large" else 300000)
    assert (err.code, err.details["reason"]) == (code, reason)
    assert not content or content[:8].decode("utf-8", "replace") not in err.message


def test_read_error_never_echoes_content(tmp_path: Path) -> None:
    err = _read_error(tmp_path / "bad.json", b'{"secret-value-123": 1, "secret-value-123": 2}')
    assert "secret-value-123" not in str(err) and "secret-value-123" not in json.dumps(err.to_result())
    assert err.__cause__ is None and err.__suppress_context__


def test_read_missing_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(LocalFileError) as info:
        read_json_strict(str(tmp_path / "nope.json"), 10)
    assert info.value.code == "not_found"


def test_read_symlink_policy(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text('{"a": 1}')
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert read_json_strict(str(link), 100) == {"a": 1}
    with pytest.raises(LocalFileError) as info:
        read_json_strict(str(link), 100, follow_symlinks=False)
    assert (info.value.code, info.value.details["reason"]) == ("invalid_json", "symlink")


def test_read_refuses_directory_and_fifo(tmp_path: Path) -> None:
    with pytest.raises(LocalFileError) as info:
        read_json_strict(str(tmp_path), 100)
    assert info.value.details["reason"] == "not_regular_file"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(LocalFileError) as info:
        read_json_strict(str(fifo), 100)
    assert info.value.details["reason"] == "not_regular_file"
