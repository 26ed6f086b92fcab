# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Template catalog v1 and environment definition v1: strict YAML loading, schema, rules.

Loading is strict (docs/formats.md, "YAML subset"): at most 64 KiB of UTF-8, one document,
no anchors, aliases or explicit tags, no duplicate keys at any depth (detected while the
document is constructed), nesting at most 32 levels, string keys only, and YAML 1.2 core
scalars (``true``/``false`` are the only booleans; ``yes``/``no``/``on``/``off`` stay strings,
integers are plain decimal). Validation is the JSON Schema in ``_schemas.py`` followed by the
semantic rules a schema cannot express.

Every failure is a ``FormatError`` with code ``invalid_catalog`` or ``invalid_definition``,
the *path* of the offending field and a fixed *rule* name; no value from the input (not even
an unknown key, a YAML parser message or an SSH key comment) is ever part of an error.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import stat
import traceback
import typing as t

from .._core.errors import ERROR_CODES, ConfigurationError, InputError
from .schemas import API_VERSION, CATALOG_SCHEMA_V1, DEFINITION_SCHEMA_V1, SchemaViolation, check_schema

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

CATALOG = "invalid_catalog"
DEFINITION = "invalid_definition"

_TAG_STR = "tag:yaml.org,2002:str"
_TAG_INT = "tag:yaml.org,2002:int"
_TAG_FLOAT = "tag:yaml.org,2002:float"
_TAG_BOOL = "tag:yaml.org,2002:bool"
_TAG_NULL = "tag:yaml.org,2002:null"

# Fixed texts of the rules that are not schema keywords (schema rules carry their own text).
RULE_TEXTS: dict[str, str] = {
    "source": "exactly one of inline text or a file path must be given",
    "unreadable": "the file cannot be read as a regular file",
    "too_large": "the document is larger than 64 KiB",
    "not_utf8": "the document is not valid UTF-8",
    "yaml_syntax": "the document is not valid YAML",
    "multiple_documents": "the stream contains more than one YAML document",
    "anchor": "YAML anchors are not allowed",
    "alias": "YAML aliases are not allowed",
    "explicit_tag": "explicit YAML tags are not allowed",
    "too_deep": "the document nests deeper than 32 levels",
    "key_type": "mapping keys must be plain strings",
    "duplicate_key": "a mapping repeats a key",
    "duplicate_image": "repeats the image identifier of an earlier mapping",
    "default_user_root": "must not be root",
    "default_user_mismatch": "must equal the mapping's guestUser",
    "template_version_mismatch": "must equal the mapping's templateVersion",
    "ssh_key_type_unsupported": "uses a key type other than ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa",
    "ssh_key_encoding": "does not carry valid base64 key data",
    "ssh_key_type_mismatch": "declares a key type that differs from the type encoded in the key data",
    "ssh_key_invalid": "does not encode a well-formed public key of its type",
    "ssh_key_curve_mismatch": "encodes an ECDSA curve that differs from the declared key type",
    "ssh_key_too_short": "is an RSA key shorter than 2048 bits",
    "duplicate_ssh_key": "repeats an earlier SSH public key",
    "duplicate_package": "repeats the name of an earlier package",
    "container_template_source": "must give exactly one of ostemplate and appliance",
}


class FormatError(InputError):
    """A catalog or definition refused by a fixed ``rule`` at ``path``; carries no input value."""

    def __init__(self, code: str, path: str, rule: str, text: str | None = None, *, extra: t.Mapping[str, int] | None = None) -> None:
        details: dict[str, t.Any] = {"rule": rule}
        details.update(extra or {})
        text = text if text is not None else RULE_TEXTS[rule]
        message = "%s At %s: %s." % (ERROR_CODES[code], path, text)
        super().__init__(message, code=code, path=path, details=details)

    @property
    def rule(self) -> str:
        return t.cast(str, self.details["rule"])


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
        fd = os.open(os.fspath(t.cast(t.Any, path)), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
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
        raise FormatError(code, "$", "type", "must hold only mappings, lists, strings, numbers, booleans and nulls") from None
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


def _schema_check(schema: dict[str, t.Any], data: t.Any, code: str) -> None:
    try:
        check_schema(schema, data)
    except SchemaViolation as violation:
        raise FormatError(code, violation.path, violation.rule, violation.text) from None


_MAPPING_FIELDS = ("image", "node", "templateVmid", "templateVersion", "storage", "bridge", "diskDevice", "sourceDiskGiB", "guestUser")
_INT_FIELDS = frozenset(("templateVmid", "sourceDiskGiB"))
_MAPPING_SCHEMA = {"$defs": CATALOG_SCHEMA_V1["$defs"], **CATALOG_SCHEMA_V1["properties"]["images"]["items"]}
CONTAINER = "container"


def is_container(mapping: t.Mapping[str, t.Any]) -> bool:
    """Whether a (normalized) mapping declares ``guestType: container``; VM mappings have no guestType."""
    return mapping.get("guestType") == CONTAINER


def _container_rules(mapping: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    """A container mapping in catalog field order, defaults applied (unprivileged, no features)."""
    if ("ostemplate" in mapping) == ("appliance" in mapping):
        raise FormatError(code, "ostemplate" if path == "$" else path + ".ostemplate", "container_template_source")
    result: dict[str, t.Any] = {"image": str(mapping["image"]), "guestType": CONTAINER, "node": str(mapping["node"])}
    if "ostemplate" in mapping:
        result["ostemplate"] = str(mapping["ostemplate"])
    else:
        appliance = mapping["appliance"]
        result["appliance"] = {"package": str(appliance["package"]), "version": str(appliance["version"]), "storage": str(appliance["storage"])}
    result.update({"storage": str(mapping["storage"]), "bridge": str(mapping["bridge"]), "guestUser": str(mapping["guestUser"]),
                   "unprivileged": bool(mapping.get("unprivileged", True)),
                   "features": {"nesting": bool((mapping.get("features") or {}).get("nesting", False))}})
    return result


def _mapping_rules(mapping: t.Mapping[str, t.Any], path: str, code: str) -> dict[str, t.Any]:
    """Semantic rules of one (schema-valid) mapping; returns it in catalog field order.

    A VM mapping's normalized form has exactly the fields it always had, so its hashes never change.
    """
    if is_container(mapping):
        return _container_rules(mapping, path, code)
    result: dict[str, t.Any] = {}
    for field in _MAPPING_FIELDS:
        result[field] = int(mapping[field]) if field in _INT_FIELDS else str(mapping[field])
    if mapping.get("pool") is not None:  # optional: absent, the mapping (and every hash over it) is as before
        result["pool"] = str(mapping["pool"])
    attestation = mapping.get("imageDefaultUser")
    if attestation is not None:
        prefix = "imageDefaultUser" if path == "$" else path + ".imageDefaultUser"
        if attestation["name"] == "root":
            raise FormatError(code, prefix + ".name", "default_user_root")
        if attestation["name"] != result["guestUser"]:
            raise FormatError(code, prefix + ".name", "default_user_mismatch")
        if attestation["templateVersion"] != result["templateVersion"]:
            raise FormatError(code, prefix + ".templateVersion", "template_version_mismatch")
        result["imageDefaultUser"] = {
            "name": str(attestation["name"]),
            "templateVersion": str(attestation["templateVersion"]),
            "passwordLocked": True,
            "noAuthorizedKeys": True,
        }
    return result


def validate_catalog(data: t.Any) -> dict[str, t.Any]:
    """Validate a parsed catalog; return it normalized (plain types, catalog field order)."""
    _schema_check(CATALOG_SCHEMA_V1, data, CATALOG)
    seen: set[str] = set()
    images: list[dict[str, t.Any]] = []
    for index, mapping in enumerate(data["images"]):
        path = "images[%d]" % index
        if mapping["image"] in seen:
            raise FormatError(CATALOG, path + ".image", "duplicate_image")
        seen.add(mapping["image"])
        images.append(_mapping_rules(mapping, path, CATALOG))
    return {"apiVersion": API_VERSION, "kind": "TemplateCatalog", "images": images}


def normalize_mapping(mapping: t.Any) -> dict[str, t.Any]:
    """Validate one catalog mapping on its own (code ``invalid_catalog``); return it in field order."""
    _schema_check(_MAPPING_SCHEMA, mapping, CATALOG)
    return _mapping_rules(mapping, "$", CATALOG)


def parse_catalog(*, text: str | bytes | t.Mapping[str, t.Any] | None = None, path: str | os.PathLike[str] | None = None) -> dict[str, t.Any]:
    """Read, parse and validate a v1 TemplateCatalog from inline ``text`` (YAML, or a mapping) or a file ``path``."""
    return validate_catalog(load_document(text=text, path=path, code=CATALOG))


class _SshReader:
    """Reads SSH wire-format strings and mpints (RFC 4251 section 5)."""

    def __init__(self, blob: bytes) -> None:
        self._blob = blob
        self._offset = 0

    def string(self) -> bytes:
        if len(self._blob) - self._offset < 4:
            raise ValueError("truncated")
        length = int.from_bytes(self._blob[self._offset:self._offset + 4], "big")
        start = self._offset + 4
        if length > len(self._blob) - start:
            raise ValueError("truncated")
        self._offset = start + length
        return self._blob[start:self._offset]

    def mpint(self) -> int:
        raw = self.string()
        if raw and raw[0] & 0x80:
            raise ValueError("negative")
        if len(raw) > 1 and raw[0] == 0 and not raw[1] & 0x80:
            raise ValueError("not minimal")
        return int.from_bytes(raw, "big")

    @property
    def exhausted(self) -> bool:
        return self._offset == len(self._blob)


_ECDSA_CURVES = {
    "ecdsa-sha2-nistp256": (b"nistp256", 65),
    "ecdsa-sha2-nistp384": (b"nistp384", 97),
    "ecdsa-sha2-nistp521": (b"nistp521", 133),
}
SSH_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "ssh-rsa")


def check_ssh_public_key(line: str, path: str, code: str = DEFINITION) -> tuple[str, bytes]:
    """Decode and check one (pattern-valid) OpenSSH public key line; return (type, blob)."""
    parts = line.split(" ", 2)
    key_type = parts[0]
    if key_type not in SSH_KEY_TYPES:
        raise FormatError(code, path, "ssh_key_type_unsupported")
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise FormatError(code, path, "ssh_key_encoding") from None
    reader = _SshReader(blob)
    try:
        if reader.string() != key_type.encode("ascii"):
            raise FormatError(code, path, "ssh_key_type_mismatch")
        if key_type == "ssh-ed25519":
            if len(reader.string()) != 32:
                raise FormatError(code, path, "ssh_key_invalid")
        elif key_type == "ssh-rsa":
            exponent = reader.mpint()
            modulus = reader.mpint()
            if exponent < 3 or exponent % 2 == 0 or modulus % 2 == 0 or modulus.bit_length() > 16384:
                raise FormatError(code, path, "ssh_key_invalid")
            if modulus.bit_length() < 2048:
                raise FormatError(code, path, "ssh_key_too_short")
        else:
            curve, point_length = _ECDSA_CURVES[key_type]
            if reader.string() != curve:
                raise FormatError(code, path, "ssh_key_curve_mismatch")
            point = reader.string()
            if len(point) != point_length or point[0] != 0x04:
                raise FormatError(code, path, "ssh_key_invalid")
    except ValueError:
        raise FormatError(code, path, "ssh_key_invalid") from None
    if not reader.exhausted:
        raise FormatError(code, path, "ssh_key_invalid")
    return key_type, blob


def validate_definition(data: t.Any) -> dict[str, t.Any]:
    """Validate a parsed definition; return it normalized with defaults applied.

    Defaults: ``packages`` becomes ``[]`` and ``snapshotAfterProvisioning`` ``false`` when
    absent; a package ``version`` stays absent when not given.
    """
    _schema_check(DEFINITION_SCHEMA_V1, data, DEFINITION)
    keys: set[tuple[str, bytes]] = set()
    for index, line in enumerate(data["access"]["sshPublicKeys"]):
        path = "access.sshPublicKeys[%d]" % index
        identity = check_ssh_public_key(line, path)
        if identity in keys:
            raise FormatError(DEFINITION, path, "duplicate_ssh_key")
        keys.add(identity)
    packages: list[dict[str, str]] = []
    names: set[str] = set()
    for index, package in enumerate(data.get("packages", [])):
        if package["name"] in names:
            raise FormatError(DEFINITION, "packages[%d].name" % index, "duplicate_package")
        names.add(package["name"])
        entry = {"name": str(package["name"])}
        if "version" in package:
            entry["version"] = str(package["version"])
        packages.append(entry)
    resources = data["resources"]
    return {
        "apiVersion": API_VERSION,
        "kind": "Environment",
        "name": str(data["name"]),
        "image": str(data["image"]),
        "resources": {"cores": int(resources["cores"]), "memoryMiB": int(resources["memoryMiB"]), "diskGiB": int(resources["diskGiB"])},
        "access": {"sshPublicKeys": [str(line) for line in data["access"]["sshPublicKeys"]]},
        "packages": packages,
        "snapshotAfterProvisioning": bool(data.get("snapshotAfterProvisioning", False)),
    }


def parse_definition(*, text: str | bytes | t.Mapping[str, t.Any] | None = None,
                     path: str | os.PathLike[str] | None = None) -> dict[str, t.Any]:
    """Read, parse and validate a v1 Environment from inline ``text`` (YAML, or a mapping) or a file ``path``."""
    return validate_definition(load_document(text=text, path=path, code=DEFINITION))
