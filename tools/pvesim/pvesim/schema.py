# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Proxmox VE API schema: path matching and parameter verification like ``PVE::JSONSchema``.

Stable API (the collection's unit tests import it):

``Schema.load(path=None) -> Schema``
    Load the official API schema (the JSON tree from ``pve-docs/api-viewer/apidata.js``).
    ``None`` loads the gzip copy bundled in ``pvesim/data``. Results are cached per path.

``schema.match(method, path) -> (Endpoint, path_params)``
    ``path`` is API-relative (``/nodes/pve/qemu/100/config``; a leading ``/api2/json`` is
    stripped). Raises ``NoSuchPath`` when no schema path matches and ``NoSuchMethod`` when the
    path exists without that method. Literal segments win over ``{param}`` segments.

``schema.validate(method, path, params) -> list[ParamError]``
    ``params`` are the request parameters as received on the wire (form-encoded strings, JSON
    values, repeated keys as lists); path parameters are merged in by ``validate`` itself (a
    caller may also pass them). An unknown path or method is reported as one ``ParamError``
    with ``param == ""``. ``errors_to_dict`` turns the list into PVE's ``errors`` hash.

Semantics follow ``PVE::JSONSchema::check_prop`` (pve-common): required properties, types
(``integer``: ``^[+-]?\\d+$``; ``number``: Perl ``is_number``; ``boolean`` on the wire: only
``0``/``1`` or a JSON boolean, exactly like the API server; inside property strings booleans
accept ``1|on|yes|true|0|off|no|false``), ``format`` (named formats, ``-list`` and ``-opt``
variants and property strings with ``default_key``, ``alias``/``keyAlias``; unknown sub-keys
rejected), anchored ``pattern``, ``maxLength``/``minLength``, ``minimum``/``maximum``, ``enum``
(checks stop at the first failure, in that order) and ``additionalProperties: 0``. Indexed
parameters such as ``net[n]`` accept ``net0`` .. ``netN`` with PVE's maxima. Messages are PVE's
own, including the trailing newline PVE keeps on ``die`` messages.

Approximations: named formats this module does not know are accepted; ``requires`` is
checked; ``oneOf``/``allOf`` objects are only type-checked.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
import threading
import typing as t
from dataclasses import dataclass, field
from importlib import resources

from .schema_formats import FORMAT_CHECKS, INDEX_MAX, NAMED_HASH_FORMATS, FormatError, _fail

__all__ = ["Endpoint", "NoSuchMethod", "NoSuchPath", "ParamError", "Schema", "errors_to_dict", "SchemaError"]

BUNDLED_SCHEMA = "pve-9.1.3-schema.json.gz"
API_PREFIX = "/api2/json"


_INT_RE = re.compile(r"[+-]?\d+")
_NUM_RE = re.compile(r"[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?")


class SchemaError(Exception):
    """The schema file cannot be read or has an unexpected shape."""


class NoSuchPath(LookupError):
    """No schema path matches the request path."""


class NoSuchMethod(LookupError):
    """The path exists but does not define the method."""


@dataclass(frozen=True)
class ParamError:
    """One verification error: ``param`` is PVE's error key (``net0``, ``net0.bridge``)."""

    param: str
    message: str


@dataclass
class Endpoint:
    """One method of one schema path."""

    path: str
    method: str
    info: dict[str, t.Any]
    properties: dict[str, dict[str, t.Any]] = field(default_factory=dict)
    additional_properties: bool = True

    @property
    def permissions(self) -> dict[str, t.Any]:
        return self.info.get("permissions") or {}

    @property
    def returns(self) -> dict[str, t.Any]:
        return self.info.get("returns") or {}

    @property
    def allowtoken(self) -> bool:
        return bool(self.info.get("allowtoken", 1))

    @property
    def name(self) -> str:
        return str(self.info.get("name", ""))

    def property_schema(self, key: str) -> dict[str, t.Any] | None:
        """The schema of ``key``, resolving indexed keys (``net3`` -> ``net[n]``)."""
        prop = self.properties.get(key)
        if prop is not None:
            return prop
        m = re.fullmatch(r"([a-z][a-z_-]*?)(\d+)", key)
        if not m:
            return None
        base, idx = m.group(1), int(m.group(2))
        prop = self.properties.get(base + "[n]")
        if prop is None:
            return None
        if str(idx) != m.group(2) or idx >= INDEX_MAX.get(base, 1 << 30):
            return None
        return prop


def errors_to_dict(errors: t.Iterable[ParamError]) -> dict[str, str]:
    """PVE's ``errors`` hash (messages for one key are joined like ``add_error``)."""
    res: dict[str, str] = {}
    for err in errors:
        res[err.param] = res[err.param] + "\\n" + err.message if err.param in res else err.message
    return res


def split_list(text: str) -> list[str]:
    """``PVE::Tools::split_list``: NUL-separated, else commas/semicolons/whitespace."""
    if "\0" in text:
        return text.split("\0")
    return [x for x in re.split(r"[\s,;]+", text) if x]


def parse_boolean(value: str) -> int | None:
    if re.fullmatch(r"1|on|yes|true", value, re.I):
        return 1
    if re.fullmatch(r"0|off|no|false", value, re.I):
        return 0
    return None


# ---------------------------------------------------------------------------------------------
# named formats (pve-common JSONSchema.pm, qemu-server, pve-access-control, pve-storage)


class Schema:
    """The loaded API schema (immutable after load; thread-safe)."""

    _cache: dict[str, "Schema"] = {}
    _cache_lock = threading.Lock()

    def __init__(self, tree: list[dict[str, t.Any]], source: str = "") -> None:
        if not isinstance(tree, list):
            raise SchemaError("schema root must be a list of path nodes")
        self.source = source
        self.tree = tree
        self.paths: dict[str, dict[str, Endpoint]] = {}
        # trie: segment -> child; "{}" key for a variable segment: (name, child)
        self._trie: dict[str, t.Any] = {"lit": {}, "var": None, "path": None}
        stack = list(tree)
        while stack:
            node = stack.pop()
            stack.extend(node.get("children") or [])
            path = node.get("path")
            if not isinstance(path, str):
                continue
            methods: dict[str, Endpoint] = {}
            for method, info in (node.get("info") or {}).items():
                params = info.get("parameters") or {}
                methods[method.upper()] = Endpoint(
                    path=path,
                    method=method.upper(),
                    info=info,
                    properties=params.get("properties") or {},
                    additional_properties=bool(params.get("additionalProperties", 1)),
                )
            self.paths[path] = methods
            self._insert(path)

    def _insert(self, path: str) -> None:
        cur = self._trie
        for seg in [s for s in path.split("/") if s]:
            m = re.fullmatch(r"\{([^}]+)\}", seg)
            if m:
                if cur["var"] is None:
                    cur["var"] = (m.group(1), {"lit": {}, "var": None, "path": None})
                cur = cur["var"][1]
            else:
                cur = cur["lit"].setdefault(seg, {"lit": {}, "var": None, "path": None})
        cur["path"] = path

    @classmethod
    def load(cls, path: str | None = None) -> "Schema":
        """Load (and cache) the schema from ``path`` or the bundled gzip copy."""
        key = path or "<bundled>"
        with cls._cache_lock:
            if key in cls._cache:
                return cls._cache[key]
            try:
                if path is None:
                    raw = resources.files("pvesim").joinpath("data", BUNDLED_SCHEMA).read_bytes()
                    data = json.loads(gzip.decompress(raw))
                elif path.endswith(".gz"):
                    with gzip.open(path, "rb") as fh:
                        data = json.load(fh)
                else:
                    with open(path, "rb") as fh:
                        data = json.load(fh)
            except (OSError, ValueError) as exc:
                raise SchemaError(f"cannot load schema {key}: {exc}") from exc
            schema = cls(data, key)
            cls._cache[key] = schema
            return schema

    @staticmethod
    def relative_path(path: str) -> str:
        path = path.split("?", 1)[0]
        if path.startswith(API_PREFIX):
            path = path[len(API_PREFIX) :]
        path = "/" + "/".join(s for s in path.split("/") if s)
        return path

    def match_path(self, path: str) -> tuple[str, dict[str, str]]:
        """The schema path template and the path parameters for a concrete path."""
        rel = self.relative_path(path)
        segs = [s for s in rel.split("/") if s]
        found = self._walk(self._trie, segs, {})
        if found is None:
            raise NoSuchPath(rel)
        return found

    def _walk(
        self, node: dict[str, t.Any], segs: list[str], params: dict[str, str]
    ) -> tuple[str, dict[str, str]] | None:
        if not segs:
            return (node["path"], dict(params)) if node["path"] else None
        head, rest = segs[0], segs[1:]
        child = node["lit"].get(head)
        if child is not None:
            res = self._walk(child, rest, params)
            if res:
                return res
        if node["var"] is not None:
            name, vchild = node["var"]
            params[name] = head
            res = self._walk(vchild, rest, params)
            del params[name]
            return res
        return None

    def match(self, method: str, path: str) -> tuple[Endpoint, dict[str, str]]:
        template, params = self.match_path(path)
        ep = self.paths[template].get(method.upper())
        if ep is None:
            raise NoSuchMethod(f"{method.upper()} {template}")
        return ep, params

    def endpoints(self) -> t.Iterator[Endpoint]:
        for methods in self.paths.values():
            yield from methods.values()

    # -----------------------------------------------------------------------------------------
    def validate(self, method: str, path: str, params: t.Mapping[str, t.Any]) -> list[ParamError]:
        """Verify ``params`` (wire values plus path params) for ``method path``."""
        try:
            ep, path_params = self.match(method, path)
        except NoSuchPath:
            return [ParamError("", f"no such path '{self.relative_path(path)}'")]
        except NoSuchMethod:
            return [ParamError("", f"Method '{method.upper()} {self.relative_path(path)}' not implemented")]
        merged: dict[str, t.Any] = dict(params)
        for k, v in path_params.items():
            merged.setdefault(k, v)
        return validate_params(ep, merged)


def validate_params(ep: Endpoint, params: t.Mapping[str, t.Any]) -> list[ParamError]:
    """Verify ``params`` against one endpoint (no path matching)."""
    errors: list[ParamError] = []
    for key, prop in ep.properties.items():
        if "[n]" in key:
            continue
        if _normalize(params.get(key)) is None and not prop.get("optional"):
            errors.append(ParamError(key, "property is missing and it is not optional"))
    for key in sorted(params):
        value = _normalize(params[key])
        prop = ep.property_schema(key)
        if prop is None:
            if not ep.additional_properties:
                errors.append(
                    ParamError(
                        key, "property is not defined in schema and the schema does not allow additional properties"
                    )
                )
            continue
        if value is None:
            continue
        errors.extend(check_prop(key, prop, value))
        req = prop.get("requires")
        if isinstance(req, str) and _normalize(params.get(req)) is None:
            errors.append(ParamError(req, f"missing property required by '{key}'"))
    return errors


def _normalize(value: t.Any) -> t.Any:
    """Wire value -> Perl-like scalar: lists of strings joined with NUL (like repeated form keys)."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(x, str) for x in value):
        return value[0] if len(value) == 1 else "\0".join(value)
    return value


@functools.lru_cache(maxsize=1024)
def _compile_pattern(pattern: str) -> re.Pattern[str]:
    """Perl regex (anchored like ``m/^$pattern$/``) -> Python; ``(?^i:`` groups become ``(?i:``."""
    py = re.sub(r"\(\?\^([a-z]*):", lambda m: f"(?{m.group(1)}:" if m.group(1) else "(?:", pattern)
    try:
        return re.compile(f"(?:{py})")
    except re.error:
        return re.compile(r"(?s:.*)")  # unusable pattern: accept (documented approximation)


def _perl_ref(value: t.Any) -> str:
    if isinstance(value, bool):
        return "JSON::PP::Boolean"
    if isinstance(value, dict):
        return "HASH"
    if isinstance(value, (list, tuple)):
        return "ARRAY"
    return ""


def _scalar(value: t.Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def check_prop(path: str, schema: dict[str, t.Any], value: t.Any) -> list[ParamError]:
    """``check_prop`` for one defined value; returns the errors."""
    if schema.get("alias"):
        return []
    ptype = schema.get("type")
    ref = _perl_ref(value)
    if ptype == "array":
        if ref != "ARRAY":
            if isinstance(value, str):
                value = [value]  # form-encoded single element
            else:
                return [ParamError(path, "type check ('array') failed")]
        items = schema.get("items")
        errs: list[ParamError] = []
        if isinstance(items, dict):
            for i, el in enumerate(value):
                errs.extend(check_prop(f"{path}[{i}]", items, el))
        return errs
    if ptype == "object":
        if ref != "HASH":
            return [ParamError(path, "type check ('object') failed")]
        return []
    if ref:
        if ptype == "boolean" and ref == "JSON::PP::Boolean":
            return []
        if ptype in (None, "any"):
            return []
        return [ParamError(path, f"type check ('{ptype}') failed - got {ref}")]
    sval = _scalar(value)
    if ptype == "boolean" and sval not in ("0", "1"):
        return [ParamError(path, f"type check ('boolean') failed - got '{sval}'")]
    if ptype == "integer" and not _INT_RE.fullmatch(sval):
        return [ParamError(path, f"type check ('integer') failed - got '{sval}'")]
    if ptype == "number" and not _NUM_RE.fullmatch(sval):
        return [ParamError(path, f"type check ('number') failed - got '{sval}'")]
    fmt = schema.get("format")
    if fmt:
        msg = check_format(fmt, sval, path)
        if msg is not None:
            return [ParamError(path, "invalid format - " + msg)]
    pattern = schema.get("pattern")
    if pattern and not _compile_pattern(pattern).fullmatch(sval):
        return [ParamError(path, "value does not match the regex pattern")]
    if schema.get("maxLength") is not None and len(sval) > int(schema["maxLength"]):
        return [ParamError(path, f"value may only be {schema['maxLength']} characters long")]
    if schema.get("minLength") is not None and len(sval) < int(schema["minLength"]):
        return [ParamError(path, f"value must be at least {schema['minLength']} characters long")]
    if _NUM_RE.fullmatch(sval):
        num = float(sval)
        if schema.get("maximum") is not None and num > float(schema["maximum"]):
            return [ParamError(path, f"value must have a maximum value of {schema['maximum']}")]
        if schema.get("minimum") is not None and num < float(schema["minimum"]):
            return [ParamError(path, f"value must have a minimum value of {schema['minimum']}")]
    enum = schema.get("enum")
    if enum and sval not in [str(e) for e in enum]:
        return [
            ParamError(
                path, f"value '{sval}' does not have a value in the enumeration '{', '.join(str(e) for e in enum)}'"
            )
        ]
    return []


def check_format(fmt: t.Any, value: str, path: str) -> str | None:
    """``check_format``: ``None`` when valid, else the PVE message (with trailing newline)."""
    if isinstance(fmt, dict):
        return _check_property_string(fmt, value, path)
    if not isinstance(fmt, str) or fmt == "regex":
        return None
    m = re.fullmatch(r"(.*?)(?:-(list|opt))?", fmt)
    name, kind = (m.group(1), m.group(2)) if m else (fmt, None)
    if fmt in FORMAT_CHECKS or fmt in NAMED_HASH_FORMATS:
        name, kind = fmt, None
    if name in NAMED_HASH_FORMATS and kind is None:
        return _check_property_string(NAMED_HASH_FORMATS[name], value, path)
    checker = FORMAT_CHECKS.get(name)
    if checker is None:
        return None  # unknown named format: accepted (documented approximation)
    try:
        if kind == "list":
            for item in split_list(value):
                checker(item)
        elif kind == "opt":
            if value:
                checker(value)
        else:
            checker(value)
    except FormatError as exc:
        return str(exc)
    return None


def parse_property_string(fmt: dict[str, dict[str, t.Any]], data: str) -> dict[str, str]:
    """``parse_property_string`` (parse step only); raises ``FormatError`` with PVE's text."""
    res: dict[str, str] = {}
    default_key: str | None = None
    for part in data.split(","):
        if not part.strip():
            continue
        m = re.fullmatch(r"([^=]+)=(.+)", part, re.S)
        if m:
            k, v = m.group(1), m.group(2)
            if k in res:
                _fail(f"duplicate key in comma-separated list property: {k}")
            sub = fmt.get(k)
            if sub and sub.get("alias"):
                key_alias = sub.get("keyAlias")
                if key_alias:
                    if key_alias in res:
                        _fail(f"key alias '{key_alias}' is already defined")
                    res[key_alias] = k
                k = sub["alias"]
                sub = fmt.get(k)
                if k in res:
                    _fail(f"key '{k}' is already defined (via alias)")
            if not sub:
                _fail(f"invalid key in comma-separated list property: {k}")
            if sub.get("type") == "boolean":
                b = parse_boolean(v)
                v = str(b) if b is not None else v
            res[k] = v
        elif "=" not in part:
            if default_key:
                _fail(f"duplicate key in comma-separated list property: {default_key}")
            for key, sub in fmt.items():
                if sub.get("default_key"):
                    default_key = key
                    if res.get(key):
                        _fail(f"duplicate key in comma-separated list property: {default_key}")
                    if sub.get("type") == "boolean":
                        b = parse_boolean(part)
                        part = str(b) if b is not None else part
                    res[key] = part
                    break
            if not default_key:
                _fail("value without key, but schema does not define a default key")
        else:
            _fail("missing key in comma-separated list property")
    return res


def _check_property_string(fmt: dict[str, dict[str, t.Any]], value: str, path: str) -> str | None:
    try:
        parsed = parse_property_string(fmt, value)
    except FormatError as exc:
        return str(exc)
    errs: list[ParamError] = []
    for key, sub in fmt.items():
        if sub.get("alias"):
            continue
        sub_path = f"{path}.{key}" if path else key
        if key not in parsed:
            if not sub.get("optional"):
                errs.append(ParamError(sub_path, "property is missing and it is not optional"))
            continue
        errs.extend(check_prop(sub_path, sub, parsed[key]))
    for key in parsed:
        if key not in fmt:  # keyAlias targets such as net's "model"
            continue
    if errs:
        return "format error\n" + "".join(
            f"{e.param}: {e.message}\n" if not e.message.endswith("\n") else f"{e.param}: {e.message}" for e in errs
        )
    return None
