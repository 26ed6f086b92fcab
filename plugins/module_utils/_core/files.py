# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Durable local file primitives: atomic JSON writes and strict JSON reads (the file lock: ``lock.py``).

- ``atomic_write_json``: temp file in the same directory (``O_CREAT|O_EXCL``, mode 0600),
  ``fsync`` of the file, ``os.replace`` onto the target, ``fsync`` of the directory. A reader
  sees either the previous complete file or the new complete file, never a torn one, also
  after a crash or power loss at any point.
- ``create_json_exclusive``: the same durable write, but the target must not exist yet
  (``os.link`` of the complete temp file: the name appears with its full content or not at all).
- ``read_json_strict``: bounded size, strict UTF-8, strict JSON (no duplicate keys, no
  NaN/Infinity, no trailing data), optional refusal of symlinks and non-regular files.

Errors are typed (``LocalFileError``) with fixed messages; no file content is ever put into
an error. This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
import typing as t

from .errors import VmanywareError

DEFAULT_MAX_BYTES = 4 * 1024 * 1024
_TEMP_SUFFIX = ".tmp"


class LocalFileError(VmanywareError):
    """A local file could not be read, written, parsed or locked.

    ``details["reason"]`` says why (``too_large``, ``not_utf8``, ``invalid_json``,
    ``duplicate_key``, ``not_regular_file``, ``symlink``, ``missing``, ``os_error``, ``timeout``).
    """

    default_code = "io_error"


def local_file_error(code: str, reason: str, message: str | None = None) -> LocalFileError:
    """A ``LocalFileError`` of ``code`` whose ``details["reason"]`` is ``reason`` (a fixed ``message``, never file content)."""
    return LocalFileError(message, code=code, details={"reason": reason})


def fsync_directory(directory: str) -> None:
    """``fsync`` a directory so that a rename, link or unlink inside it is durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dumps_document(document: t.Any) -> bytes:
    """The on-disk form: insertion order kept, indent 2, UTF-8, newline at the end, no NaN."""
    return (json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def _temp_path(path: str) -> str:
    directory, name = os.path.split(path)
    return os.path.join(directory, ".%s.%s%s" % (name, secrets.token_hex(8), _TEMP_SUFFIX))


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is a temp file left by an interrupted write (such files are never read)."""
    return name.startswith(".") and name.endswith(_TEMP_SUFFIX)


def _write_temp(path: str, data: bytes, mode: int) -> str:
    """Write ``data`` to a new temp file next to ``path``, flushed and fsynced; return its path."""
    temp = _temp_path(path)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(temp)
        raise
    os.close(fd)
    return temp


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def atomic_write_json(path: str, document: t.Any, mode: int = 0o600) -> None:
    """Durably replace ``path`` with ``document`` as JSON (see the module docstring).

    Raises ``LocalFileError`` (``io_error``) on any OS failure; a serialization failure
    (``TypeError``/``ValueError``) is raised before any file is created.
    """
    atomic_write_bytes(path, dumps_document(document), mode)


def atomic_write_bytes(path: str, data: bytes, mode: int = 0o600) -> None:
    """Durably replace ``path`` with ``data`` (temp file, fsync, rename, directory fsync); ``io_error`` on any OS failure."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        temp = _write_temp(path, data, mode)
        try:
            os.replace(temp, path)
        except BaseException:
            _unlink_quietly(temp)
            raise
        fsync_directory(directory)
    except OSError:
        raise local_file_error("io_error", "os_error", "A local file could not be written.") from None


def create_json_exclusive(path: str, document: t.Any, mode: int = 0o600) -> bool:
    """Durably create ``path`` with ``document``; return ``False`` (and write nothing) if it exists.

    The complete, fsynced temp file is hard-linked to ``path``; the link fails atomically when
    the name exists, so the file appears with its full content or not at all.
    """
    data = dumps_document(document)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        temp = _write_temp(path, data, mode)
        try:
            os.link(temp, path, follow_symlinks=False)
        except FileExistsError:
            return False
        finally:
            _unlink_quietly(temp)
        fsync_directory(directory)
    except OSError:
        raise local_file_error("io_error", "os_error", "A local file could not be written.") from None
    return True


def remove_file_durable(path: str) -> bool:
    """Unlink ``path`` and fsync its directory; return ``False`` if it did not exist."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except OSError:
        raise local_file_error("io_error", "os_error", "A local file could not be removed.") from None
    try:
        fsync_directory(os.path.dirname(os.path.abspath(path)))
    except OSError:
        raise local_file_error("io_error", "os_error", "A local directory could not be synced.") from None
    return True


def _reject_constant(_name: str) -> t.NoReturn:
    raise ValueError("non-finite number")


class _DuplicateKey(ValueError):
    pass


def _pairs_without_duplicates(pairs: list[tuple[str, t.Any]]) -> dict[str, t.Any]:
    result: dict[str, t.Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey("duplicate key")
        result[key] = value
    return result


def loads_strict(data: bytes) -> t.Any:
    """Parse ``data`` as strict UTF-8 JSON; raise ``LocalFileError`` (``invalid_json``) otherwise."""
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise local_file_error("invalid_json", "not_utf8", "A local file is not valid UTF-8.") from None
    try:
        return json.loads(text, object_pairs_hook=_pairs_without_duplicates, parse_constant=_reject_constant)
    except _DuplicateKey:
        raise local_file_error(
            "invalid_json", "duplicate_key", "A local JSON file contains a duplicate object key."
        ) from None
    except (ValueError, RecursionError):
        raise local_file_error("invalid_json", "invalid_json", "A local file is not valid JSON.") from None


def read_json_strict(path: str, max_bytes: int = DEFAULT_MAX_BYTES, *, follow_symlinks: bool = True) -> t.Any:
    """Read and parse a JSON file strictly.

    Codes: ``not_found`` (missing), ``invalid_json`` (too large, not a regular file, a symlink when
    ``follow_symlinks`` is false, not UTF-8, invalid JSON, duplicate key, NaN/Infinity),
    ``io_error`` (any other OS failure). Nothing of the content appears in an error.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise local_file_error("not_found", "missing", "A local file does not exist.") from None
    except OSError as err:
        if err.errno == errno.ELOOP and not follow_symlinks:
            raise local_file_error(
                "invalid_json", "symlink", "A local file is a symbolic link where a regular file is required."
            ) from None
        raise local_file_error("io_error", "os_error", "A local file could not be read.") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise local_file_error("invalid_json", "not_regular_file", "A local path is not a regular file.")
        if info.st_size > max_bytes:
            raise local_file_error("invalid_json", "too_large", "A local file exceeds its size bound.")
        chunks: list[bytes] = []
        remaining = max_bytes + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1024 * 1024))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
    except OSError:
        raise local_file_error("io_error", "os_error", "A local file could not be read.") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise local_file_error("invalid_json", "too_large", "A local file exceeds its size bound.")
    return loads_strict(data)
