# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Strict YAML loading of the operator's documents (catalog, definition, template build), and their other sources.

Loading is strict (docs/formats.md, "YAML subset"): at most 64 KiB of UTF-8, one document,
no anchors, aliases or explicit tags, no duplicate keys at any depth (detected while the
document is constructed), nesting at most 32 levels, string keys only, and YAML 1.2 core
scalars (``true``/``false`` are the only booleans; ``yes``/``no``/``on``/``off`` stay strings,
integers are plain decimal). A document may also come from a file (a regular file, at most
64 KiB) or as already-parsed data (``plain_document``: JSON types only, the same limits).
Every refusal is a ``FormatError`` (``format_errors.py``) of the caller's code, with a fixed rule.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import json
import os
import re
import stat
import traceback
import typing as t

from .._core.errors import ConfigurationError
from .format_errors import FormatError

try:
    import yaml
    from yaml.composer import Composer
    from yaml.events import AliasEvent, StreamEndEvent
    from yaml.nodes import MappingNode, ScalarNode, SequenceNode
    from yaml.parser import Parser
    from yaml.reader import Reader
    from yaml.resolver import BaseResolver
    from yaml.scanner import Scanner
except ImportError:
    HAS_YAML = False
    YAML_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_YAML = True
    YAML_IMPORT_ERROR = None

MAX_DOCUMENT_BYTES = 64 * 1024
MAX_DEPTH = 32

_TAG_STR = "tag:yaml.org,2002:str"
_TAG_INT = "tag:yaml.org,2002:int"
_TAG_FLOAT = "tag:yaml.org,2002:float"
_TAG_BOOL = "tag:yaml.org,2002:bool"
_TAG_NULL = "tag:yaml.org,2002:null"


class _Refusal(Exception):
    """Internal: a YAML-level refusal with its position (converted to FormatError)."""

    def __init__(self, rule: str, mark: t.Any = None) -> None:
        self.rule = rule
        self.mark = mark
        super().__init__(rule)


def _position(mark: t.Any) -> dict[str, int]:
    if mark is None or not isinstance(getattr(mark, "line", None), int):
        return {}
    return {"line": mark.line + 1, "column": mark.column + 1}


if HAS_YAML:

    class _StrictResolver(BaseResolver):
        """YAML 1.2 core-schema scalars, minus everything ambiguous."""

    _StrictResolver.add_implicit_resolver(_TAG_BOOL, re.compile(r"^(?:true|false)\Z"), list("tf"))
    _StrictResolver.add_implicit_resolver(_TAG_INT, re.compile(r"^[-+]?(?:0|[1-9][0-9]*)\Z"), list("-+0123456789"))
    _StrictResolver.add_implicit_resolver(
        _TAG_FLOAT,
        re.compile(
            r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+|\.[0-9]+[eE][-+]?[0-9]+)\Z"
            r"|^[-+]?\.(?:inf|Inf|INF)\Z|^\.(?:nan|NaN|NAN)\Z"
        ),
        list("-+0123456789."),
    )
    _StrictResolver.add_implicit_resolver(_TAG_NULL, re.compile(r"^(?:~|null|Null|NULL|)\Z"), ["~", "n", "N", ""])

    class _StrictLoader(Reader, Scanner, Parser, Composer, _StrictResolver):
        """A composer that refuses anchors, aliases, explicit tags and deep nesting as it goes."""

        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            Parser.__init__(self)
            Composer.__init__(self)
            _StrictResolver.__init__(self)
            self._vmanyware_depth = 0

        def compose_node(self, parent: t.Any, index: t.Any) -> t.Any:
            event = self.peek_event()
            if isinstance(event, AliasEvent):
                raise _Refusal("alias", event.start_mark)
            if event.anchor is not None:
                raise _Refusal("anchor", event.start_mark)
            if getattr(event, "tag", None) is not None:
                raise _Refusal("explicit_tag", event.start_mark)
            self._vmanyware_depth += 1
            if self._vmanyware_depth > MAX_DEPTH:
                raise _Refusal("too_deep", event.start_mark)
            try:
                return super().compose_node(parent, index)
            finally:
                self._vmanyware_depth -= 1


def _construct(node: t.Any) -> t.Any:
    """Node tree -> plain Python values; duplicate and non-string keys are refused here."""
    if isinstance(node, ScalarNode):
        if node.tag == _TAG_BOOL:
            return node.value == "true"
        if node.tag == _TAG_INT:
            return int(node.value)
        if node.tag == _TAG_FLOAT:
            lowered = node.value.lower().lstrip("+")
            if lowered.endswith("nan"):
                return float("nan")
            if lowered.endswith("inf"):
                return float("-inf") if lowered.startswith("-") else float("inf")
            return float(node.value)
        if node.tag == _TAG_NULL:
            return None
        return node.value
    if isinstance(node, SequenceNode):
        return [_construct(child) for child in node.value]
    if isinstance(node, MappingNode):
        result: dict[str, t.Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag != _TAG_STR:
                raise _Refusal("key_type", key_node.start_mark)
            if key_node.value in result:
                raise _Refusal("duplicate_key", key_node.start_mark)
            result[key_node.value] = _construct(value_node)
        return result
    raise _Refusal("yaml_syntax", getattr(node, "start_mark", None))


def read_source(*, text: str | bytes | None, path: str | os.PathLike[str] | None, code: str) -> bytes:
    """The raw bytes of exactly one of ``text`` (inline) or ``path`` (a regular file), at most 64 KiB."""
    if (text is None) == (path is None):
        raise FormatError(code, "$", "source")
    if text is not None:
        if isinstance(text, bytes):
            data = text
        elif isinstance(text, str):
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                raise FormatError(code, "$", "not_utf8") from None
        else:
            raise FormatError(code, "$", "type", "must be YAML text")
        if len(data) > MAX_DOCUMENT_BYTES:
            raise FormatError(code, "$", "too_large")
        return data
    try:
        fd = os.open(
            os.fspath(t.cast(t.Any, path)), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
        )
    except (OSError, TypeError, ValueError):
        # The OS error text repeats the path and says nothing the rule does not.
        raise FormatError(code, "$", "unreadable") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FormatError(code, "$", "unreadable")
        if info.st_size > MAX_DOCUMENT_BYTES:
            raise FormatError(code, "$", "too_large")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_DOCUMENT_BYTES:
            chunk = os.read(fd, MAX_DOCUMENT_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        raise FormatError(code, "$", "unreadable") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_DOCUMENT_BYTES:
        raise FormatError(code, "$", "too_large")
    return data


def plain_document(value: t.Any, *, code: str) -> t.Any:
    """Already-parsed data (a mapping from group_vars or a registered variable), checked like a parsed document.

    Only JSON types are accepted (mapping keys must be strings), at most ``MAX_DEPTH`` levels and
    64 KiB as JSON; nothing is converted to text, so ``false`` stays a boolean and fails or passes the
    schema as the data it is.
    """

    def walk(node: t.Any, depth: int) -> t.Any:
        if depth > MAX_DEPTH:
            raise FormatError(code, "$", "too_deep")
        if isinstance(node, t.Mapping):
            if not all(isinstance(key, str) for key in node):
                raise FormatError(code, "$", "key_type")
            return {key: walk(item, depth + 1) for key, item in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(item, depth + 1) for item in node]
        if node is None or isinstance(node, (bool, int, float)):
            return node
        if isinstance(node, str):
            return str(node)  # a plain str, not a templating subclass
        raise FormatError(code, "$", "type", "must hold only mappings, lists, strings, numbers, booleans and nulls")

    document = walk(value, 1)
    try:
        size = len(json.dumps(document, ensure_ascii=False, allow_nan=True).encode("utf-8"))
    except (TypeError, ValueError, RecursionError):
        raise FormatError(
            code, "$", "type", "must hold only mappings, lists, strings, numbers, booleans and nulls"
        ) from None
    if size > MAX_DOCUMENT_BYTES:
        raise FormatError(code, "$", "too_large")
    return document


def load_document(*, text: t.Any, path: str | os.PathLike[str] | None, code: str) -> t.Any:
    """One catalog or definition from inline YAML ``text``, a file ``path``, or a mapping given as ``text``."""
    if isinstance(text, t.Mapping):
        if path is not None:
            raise FormatError(code, "$", "source")
        return plain_document(text, code=code)
    return load_strict_yaml(read_source(text=text, path=path, code=code), code=code)


def load_strict_yaml(data: bytes, *, code: str) -> t.Any:
    """Parse one strict-subset YAML document from UTF-8 ``data`` (see the module docstring)."""
    if not HAS_YAML:
        raise ConfigurationError("PyYAML is required on the controller to read catalogs and definitions.")
    if len(data) > MAX_DOCUMENT_BYTES:
        raise FormatError(code, "$", "too_large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(code, "$", "not_utf8") from None
    loader = None
    try:
        loader = _StrictLoader(text)  # the reader refuses non-printable characters here already
        loader.get_event()  # StreamStartEvent
        node = None
        if not loader.check_event(StreamEndEvent):
            node = loader.compose_document()
            if not loader.check_event(StreamEndEvent):
                raise _Refusal("multiple_documents", loader.peek_event().start_mark)
        return None if node is None else _construct(node)
    except _Refusal as refusal:
        raise FormatError(code, "$", refusal.rule, extra=_position(refusal.mark)) from None
    except yaml.MarkedYAMLError as err:
        # The parser's message quotes the input: only the position is kept.
        raise FormatError(code, "$", "yaml_syntax", extra=_position(err.problem_mark or err.context_mark)) from None
    except (yaml.YAMLError, ValueError, TypeError, IndexError, RecursionError):
        raise FormatError(code, "$", "yaml_syntax") from None
    finally:
        if loader is not None:
            loader.dispose()
