# SPDX-License-Identifier: GPL-3.0-or-later
"""Property tests: hashes are stable under re-rendering and change with any declared input;
malformed input only ever produces the documented error codes and never echoes a planted value."""

from __future__ import annotations

import copy
import json
import random
import re
import typing as t

import yaml
from format_samples import PLANTED, catalog, definition, ed25519_pool
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import (
    parse_definition,
    validate_definition,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog, validate_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.format_errors import RULE_TEXTS, FormatError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import definition_hash
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.schemas import (
    DNS_LABEL_PATTERN,
    PACKAGE_NAME_PATTERN,
    PACKAGE_VERSION_PATTERN,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.yaml_strict import _StrictResolver

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = ed25519_pool()
_RESOLVER = _StrictResolver()


def _comment() -> st.SearchStrategy[str]:
    return st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E) | st.sampled_from(["\u00e9", "\u20ac"]),
        min_size=1,
        max_size=12,
    )


@st.composite
def definitions(draw: st.DrawFn) -> dict[str, t.Any]:
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True))
    keys = [
        key + (" " + comment if comment else "")
        for key, comment in zip(keys, draw(st.lists(st.none() | _comment(), min_size=4, max_size=4)))
    ]
    packages = []
    for name in draw(
        st.lists(
            st.from_regex(PACKAGE_NAME_PATTERN, fullmatch=True).filter(lambda n: len(n) <= 20), max_size=4, unique=True
        )
    ):
        package = {"name": name}
        if draw(st.booleans()):
            package["version"] = draw(
                st.from_regex(PACKAGE_VERSION_PATTERN, fullmatch=True).filter(lambda v: len(v) <= 20)
            )
        packages.append(package)
    document: dict[str, t.Any] = {
        "apiVersion": "vmanyware.dev/v1",
        "kind": "Environment",
        "name": draw(st.from_regex(DNS_LABEL_PATTERN, fullmatch=True).filter(lambda n: len(n) <= 20)),
        "image": draw(st.sampled_from(["debian-13", "ubuntu-24.04", "1", "a.b-c"])),
        "resources": {
            "cores": draw(st.integers(1, 128)),
            "memoryMiB": draw(st.integers(256, 4194304)),
            "diskGiB": draw(st.integers(4, 4096)),
        },
        "access": {"sshPublicKeys": keys},
    }
    if packages or draw(st.booleans()):
        document["packages"] = packages
    if draw(st.booleans()):
        document["snapshotAfterProvisioning"] = draw(st.booleans())
    return document


def _shuffled(value: t.Any, rnd: random.Random) -> t.Any:
    if isinstance(value, dict):
        items = list(value.items())
        rnd.shuffle(items)
        return {key: _shuffled(child, rnd) for key, child in items}
    if isinstance(value, list):
        return [_shuffled(child, rnd) for child in value]
    return value


def render(value: t.Any, rnd: random.Random) -> str:
    """A random but equivalent YAML rendering: key order, quoting, indentation, flow/block style, comments."""

    class Dumper(yaml.SafeDumper):
        pass

    def represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
        style = rnd.choice([None, "'", '"'])
        if style is None and _RESOLVER.resolve(yaml.ScalarNode, data, (True, False)) != "tag:yaml.org,2002:str":
            style = "'"
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    Dumper.add_representer(str, represent_str)
    flow = rnd.choice([False, None, True])
    text = yaml.dump(
        _shuffled(value, rnd),
        Dumper=Dumper,
        sort_keys=False,
        default_flow_style=flow,
        indent=rnd.choice([2, 3, 4]),
        width=100000,
        explicit_start=rnd.choice([True, False]),
        allow_unicode=rnd.choice([True, False]),
    )
    lines = text.splitlines()
    if flow is False:
        out = []
        for line in lines:
            if rnd.random() < 0.3:
                out.append(" " * rnd.randint(0, 6) + "# a comment: with [yaml] {syntax} - and: 'quotes'")
            if rnd.random() < 0.2 and not line.rstrip().endswith(("'", '"')) and line.strip() not in ("---",):
                line += "  # trailing comment"
            out.append(line)
        lines = out
    return "# header comment\n" + "\n".join(lines) + "\n" + rnd.choice(["", "# end\n", "...\n"])


@SETTINGS
@given(definitions(), st.randoms(use_true_random=False), st.randoms(use_true_random=False))
def test_definition_hash_is_stable_under_rendering(
    document: dict[str, t.Any], first: random.Random, second: random.Random
) -> None:
    one = parse_definition(text=render(document, first))
    two = parse_definition(text=render(document, second))
    assert one == two == validate_definition(document)
    assert definition_hash(one) == definition_hash(two)


def _declared_changes(document: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    changes = []

    def change(edit: t.Callable[[dict[str, t.Any]], None]) -> None:
        copied = copy.deepcopy(document)
        edit(copied)
        changes.append(copied)

    change(lambda d: d.__setitem__("name", d["name"] + "x" if len(d["name"]) < 63 else "x"))
    change(lambda d: d.__setitem__("image", d["image"] + ".1"))
    for field, low, high in (("cores", 1, 128), ("memoryMiB", 256, 4194304), ("diskGiB", 4, 4096)):
        change(
            lambda d, f=field, lo=low, hi=high: d["resources"].__setitem__(
                f, d["resources"][f] + 1 if d["resources"][f] < hi else lo
            )
        )
    change(
        lambda d: d["access"]["sshPublicKeys"].append(
            next(key for key in KEYS if all(not k.startswith(key) for k in d["access"]["sshPublicKeys"]))
        )
    )
    change(lambda d: d["access"]["sshPublicKeys"].__setitem__(0, d["access"]["sshPublicKeys"][0] + "c"))
    change(lambda d: d.__setitem__("snapshotAfterProvisioning", not d.get("snapshotAfterProvisioning", False)))
    change(lambda d: d.__setitem__("packages", d.get("packages", []) + [{"name": "zz-new-package"}]))
    if document.get("packages"):
        change(lambda d: d["packages"].pop())
        change(lambda d: d["packages"][0].__setitem__("version", d["packages"][0].get("version", "1") + "1"))
        change(lambda d: d["packages"][0].__setitem__("name", d["packages"][0]["name"] + "z"))
    if len(document["access"]["sshPublicKeys"]) > 1:
        change(lambda d: d["access"]["sshPublicKeys"].reverse())  # key order is declared order
    return changes


@SETTINGS
@given(definitions(), st.data())
def test_definition_hash_changes_with_any_declared_change(document: dict[str, t.Any], data: st.DataObject) -> None:
    base = definition_hash(validate_definition(document))
    changed = data.draw(st.sampled_from(_declared_changes(document)))
    try:
        normalized = validate_definition(changed)
    except FormatError:
        assume(False)  # the change made it invalid (e.g. a name of 64 characters)
    assert definition_hash(normalized) != base


# ---------------------------------------------------------------- malformed input

YAMLISH = st.lists(
    st.sampled_from(list("abc:-[]{}'\"#&*!|>%@`,?~\n\t \\0123.") + [PLANTED, "\u00e9", "\x00", "\ufeff", "---", "<<"]),
    max_size=80,
).map("".join)
DOCUMENTED_RULES = set(RULE_TEXTS) | {
    "type",
    "const",
    "enum",
    "pattern",
    "required",
    "unknown_field",
    "minimum",
    "maximum",
    "min_items",
    "max_items",
    "min_length",
    "max_length",
}


def _check_refusal(err: VmanywareError, code: str) -> None:
    assert isinstance(err, FormatError)
    assert err.code == code
    assert err.details["rule"] in DOCUMENTED_RULES
    rendered = str(err) + json.dumps(err.to_result(), ensure_ascii=False)
    if err.details["rule"] == "unknown_field":
        # An unknown key that is a plain identifier is named (a misspelt field), also one that merely contains the planted
        # text (aPLANTEDxyzzy, found by hypothesis); nothing else of the input is.
        rendered = re.sub(r"the field [A-Za-z0-9_]*%s[A-Za-z0-9_]*," % PLANTED, "the field <key>,", rendered)
    assert PLANTED not in rendered


@SETTINGS
@given(st.binary(max_size=200) | YAMLISH.map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_random_bytes_only_produce_documented_errors(data: bytes) -> None:
    for parse, code in ((parse_catalog, "invalid_catalog"), (parse_definition, "invalid_definition")):
        try:
            parse(text=data)
        except FormatError as err:
            _check_refusal(err, code)


@SETTINGS
@given(YAMLISH)
@example(text="a%s:" % PLANTED)  # an unknown plain key that contains the planted text is named, and only it
def test_random_yamlish_text_only_produces_documented_errors(text: str) -> None:
    for parse, code in ((parse_catalog, "invalid_catalog"), (parse_definition, "invalid_definition")):
        try:
            parse(text=text)
        except FormatError as err:
            _check_refusal(err, code)


# pylint infers hypothesis strategies' ``|`` as unsupported on some runs; it is SearchStrategy.__or__.
# pylint: disable=unsupported-binary-operation
wrong_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.just(PLANTED)
    | st.text(max_size=5).map(lambda s: s + PLANTED),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["name", "image", "x", PLANTED]), children, max_size=3)
    ),
    max_leaves=10,
)
# pylint: enable=unsupported-binary-operation


def _leaf_paths(value: t.Any, prefix: tuple[t.Any, ...] = ()) -> list[tuple[t.Any, ...]]:
    if isinstance(value, dict):
        return (
            [prefix] + [p for key, child in value.items() for p in _leaf_paths(child, prefix + (key,))]
            if prefix
            else [p for key, child in value.items() for p in _leaf_paths(child, prefix + (key,))]
        )
    if isinstance(value, list):
        return [prefix] + [p for index, child in enumerate(value) for p in _leaf_paths(child, prefix + (index,))]
    return [prefix]


@SETTINGS
@given(st.data())
def test_wrongly_typed_structures_only_produce_documented_errors(data: st.DataObject) -> None:
    for sample, validate, parse, code in (
        (catalog, validate_catalog, parse_catalog, "invalid_catalog"),
        (definition, validate_definition, parse_definition, "invalid_definition"),
    ):
        document = sample()
        path = data.draw(st.sampled_from(_leaf_paths(document)))
        target = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = data.draw(wrong_values)
        for attempt in (lambda: validate(document), lambda: parse(text=yaml.safe_dump(document))):
            try:
                attempt()
            except FormatError as err:
                _check_refusal(err, code)
            except yaml.YAMLError:
                pass  # safe_dump could not render the float/unicode mix; nothing to parse


@SETTINGS
@given(wrong_values)
def test_random_structures_only_produce_documented_errors(value: t.Any) -> None:
    for validate, code in ((validate_catalog, "invalid_catalog"), (validate_definition, "invalid_definition")):
        try:
            validate(value)
        except FormatError as err:
            _check_refusal(err, code)
