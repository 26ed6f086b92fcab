# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""SSH key sources (docs/profiles.md, "SSH key sources"): the operator's public keys every guest gets unless excluded.

A source is ``{name, path}``: a public key file, or a directory whose ``*.pub`` files are read in name order. Each
non-blank line that is not a ``#`` comment is one key, checked exactly as ``access.sshPublicKeys`` (``ssh_keys.py``).
The keys are appended to the definition's own (``access.sshPublicKeys``, the one list the stages put into the guest),
the definition's first, then each source in its configured order; a key already listed is not added again, its
source is added to the listing instead. Symbolic links are refused: a key source grants access to every guest.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import hashlib
import os
import re
import stat
import typing as t

from .format_errors import DEFINITION, KEY_SOURCE, FormatError
from .presets import PLAIN_FILE_NAME
from .schemas import DNS_LABEL_PATTERN, SSH_KEY_PATTERN
from .ssh_keys import check_ssh_public_key
from .yaml_strict import read_source

DEFINITION_SOURCE = "definition"  # the label of the definition's own keys in the listing
MAX_FILES = 64
MAX_KEYS = 16  # as access.sshPublicKeys: the effective definition is a valid definition
_NAME = re.compile(DNS_LABEL_PATTERN)
_KEY_LINE = re.compile(SSH_KEY_PATTERN)


@dataclasses.dataclass(frozen=True)
class KeySource:
    """One configured source: its name and the path of its file or directory."""

    name: str
    path: str


def check_key_sources(value: t.Any) -> list[KeySource]:
    """The ``ssh_key_sources`` option as ``KeySource`` entries (``invalid_ssh_key_source``); ``None``: none."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise FormatError(KEY_SOURCE, "ssh_key_sources", "type", "must be a list of {name, path}")
    sources: list[KeySource] = []
    for index, item in enumerate(value):
        path = "ssh_key_sources[%d]" % index
        if not isinstance(item, t.Mapping) or set(item) != {"name", "path"}:
            raise FormatError(KEY_SOURCE, path, "type", "must be a mapping of exactly name and path")
        name, where = item["name"], item["path"]
        if not isinstance(name, str) or not _NAME.match(name):
            raise FormatError(KEY_SOURCE, path + ".name", "pattern", "must be a lowercase DNS label")
        if name == DEFINITION_SOURCE:
            raise FormatError(KEY_SOURCE, path + ".name", "reserved_key_source")
        if any(source.name == name for source in sources):
            raise FormatError(KEY_SOURCE, path + ".name", "duplicate_key_source")
        if not isinstance(where, str) or not where:
            raise FormatError(KEY_SOURCE, path + ".path", "type", "must be a path")
        sources.append(KeySource(str(name), os.path.expanduser(str(where))))
    return sources


def fingerprint(blob: bytes) -> str:
    """The key's OpenSSH SHA-256 fingerprint (``ssh-keygen -l``): ``SHA256:`` and unpadded base64."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def _files(source: KeySource, label: str) -> list[tuple[str, str]]:
    """(error label, path) of each file of a source; symbolic links refused, the path's own included."""
    try:
        info = os.lstat(source.path)
    except OSError:
        raise FormatError(KEY_SOURCE, label, "unreadable") from None
    if stat.S_ISLNK(info.st_mode):
        raise FormatError(KEY_SOURCE, label, "symlink")
    if not stat.S_ISDIR(info.st_mode):
        return [(label, source.path)]
    try:
        names = sorted(name for name in os.listdir(source.path) if name.endswith(".pub"))
    except OSError:
        raise FormatError(KEY_SOURCE, label, "unreadable") from None
    if len(names) > MAX_FILES:
        raise FormatError(KEY_SOURCE, label, "too_many_files")
    files = []
    for position, name in enumerate(names):
        file_label = "%s:%s" % (label, name if PLAIN_FILE_NAME.match(name) else "[%d]" % position)
        file_path = os.path.join(source.path, name)
        try:
            if stat.S_ISLNK(os.lstat(file_path).st_mode):
                raise FormatError(KEY_SOURCE, file_label, "symlink")
        except OSError:
            raise FormatError(KEY_SOURCE, file_label, "unreadable") from None
        files.append((file_label, file_path))
    return files


def read_key_source(source: KeySource, index: int) -> list[tuple[str, tuple[str, bytes]]]:
    """Each key line of a source with its identity (type, blob), in order; a refused line is named by file and line."""
    keys = []
    for label, path in _files(source, "ssh_key_sources[%d]" % index):
        try:
            text = read_source(text=None, path=path, code=KEY_SOURCE).decode("utf-8")
        except FormatError as err:
            raise err.located(KEY_SOURCE, label) from None
        except UnicodeDecodeError:
            raise FormatError(KEY_SOURCE, label, "not_utf8") from None
        for number, raw in enumerate(text.split("\n"), start=1):
            line = raw.rstrip("\r").strip()
            if not line or line.startswith("#"):
                continue
            if not _KEY_LINE.match(line):
                raise FormatError(KEY_SOURCE, label, "ssh_key_line", extra={"line": number})
            try:
                keys.append((line, check_ssh_public_key(line, label, KEY_SOURCE)))
            except FormatError as err:
                raise FormatError(KEY_SOURCE, label, err.rule, extra={"line": number}) from None
    return keys


def apply_key_sources(
    definition: t.Mapping[str, t.Any], sources: t.Sequence[KeySource]
) -> tuple[dict[str, t.Any], list[dict[str, t.Any]]]:
    """The validated ``definition`` with the keys of its sources appended (those it excludes left out), and the listing
    of every key the guest gets: ``type``, ``fingerprint`` and ``sources`` (``definition`` for its own)."""
    excluded = list(definition["access"].get("excludeKeySources", []))
    names = [source.name for source in sources]
    for index, name in enumerate(excluded):
        if name not in names:
            raise FormatError(DEFINITION, "access.excludeKeySources[%d]" % index, "unknown_key_source")
    lines = list(definition["access"]["sshPublicKeys"])
    listing: dict[tuple[str, bytes], dict[str, t.Any]] = {}
    for index, line in enumerate(lines):
        key_type, blob = identity = check_ssh_public_key(line, "access.sshPublicKeys[%d]" % index)
        listing[identity] = {"type": key_type, "fingerprint": fingerprint(blob), "sources": [DEFINITION_SOURCE]}
    for index, source in enumerate(sources):
        if source.name in excluded:
            continue  # not even read: an excluded source cannot fail the plan
        for line, identity in read_key_source(source, index):
            if identity in listing:
                if source.name not in listing[identity]["sources"]:
                    listing[identity]["sources"].append(source.name)
                continue
            lines.append(line)
            listing[identity] = {"type": identity[0], "fingerprint": fingerprint(identity[1]), "sources": [source.name]}
    if len(lines) > MAX_KEYS:
        raise FormatError(KEY_SOURCE, "ssh_key_sources", "too_many_keys")
    effective = copy.deepcopy(dict(definition))
    effective["access"]["sshPublicKeys"] = lines
    return effective, list(listing.values())
