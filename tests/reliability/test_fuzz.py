# SPDX-License-Identifier: GPL-3.0-or-later
"""Hostile input: property-based fuzzing of every entry point that takes outside values, plus explicit cases.

Entry points (called in-process): parse_catalog, parse_definition, build_plan, check_confirmation,
read_gate, connection_settings/build_settings, validate_operation_id, JournalStore.load of hostile bytes,
PreviewStore, and run_stage's parameter handling. Rules: only VmanywareError subclasses with a code from
ERROR_CODES escape (never a traceback of another type), and no planted input value appears in the error.
Hypothesis profile ``reliability-ci`` (60 examples per property) or ``reliability-full`` (1,500 per property;
with 9 properties > 10,000 generated cases). Every generated case is counted in the results (category ``fuzz``).
"""

from __future__ import annotations

import json
import os
import typing as t
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import rel_support as rs

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.definition import parse_definition
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import parse_catalog
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore, validate_operation_id
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    CONFIRMATION_FIELDS,
    check_confirmation,
    expected_confirmation,
    read_gate,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import PreviewStore, run_stage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage

# Applied per test (not load_profile): the rest of a pytest session keeps its own hypothesis settings.
PROFILE_SETTINGS = settings(settings.get_profile(rs.PROFILE))
CANARY = "QzXcanary"
COUNTS: dict[str, int] = {}
CATALOG = rs.catalog_text()
DEFINITION = rs.definition_data(snapshot=False)
SCOPE = "pve:" + "a" * 64


def _count(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


def _safe(name: str, func: t.Callable[[], t.Any], planted: t.Sequence[str] = (CANARY,)) -> None:
    """Call ``func``: a result or a documented VmanywareError, and no planted value in what the error shows."""
    _count(name)
    try:
        func()
    except VmanywareError as err:
        assert err.code in ERROR_CODES
        shown = json.dumps(err.to_result(), default=str) + str(err)
        for value in planted:
            if value and len(value) >= 4:
                assert value not in shown, (name, err.to_result())


@pytest.fixture(scope="module", autouse=True)
def _report() -> t.Iterator[None]:
    yield
    rs.write_result("fuzz", {"profile": rs.PROFILE, "cases": dict(COUNTS), "total": sum(COUNTS.values())})


# -- strategies ----------------------------------------------------------------------------------------------
planted_text = st.text(max_size=40).map(lambda s: CANARY + s)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    planted_text,
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


def _mutate(base: dict[str, t.Any], path: list[str], value: t.Any) -> dict[str, t.Any]:
    doc = json.loads(json.dumps(base))
    node: t.Any = doc
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node
    if isinstance(node, dict):
        node[path[-1]] = value
    return doc


DEF_PATHS = [
    ["name"],
    ["image"],
    ["apiVersion"],
    ["kind"],
    ["resources", "cores"],
    ["resources", "memoryMiB"],
    ["resources", "diskGiB"],
    ["access", "sshPublicKeys"],
    ["packages"],
    ["snapshotAfterProvisioning"],
    ["extra"],
    ["resources", "extra"],
]
CAT_DOC = yaml.safe_load(CATALOG)


@PROFILE_SETTINGS
@given(path=st.sampled_from(DEF_PATHS), value=json_values)
def test_fuzz_definition_fields(path: list[str], value: t.Any) -> None:
    text = yaml.safe_dump(_mutate(DEFINITION, path, value), allow_unicode=True)
    _safe("definition", lambda: parse_definition(text=text))
    _safe("build_plan", lambda: build_plan(catalog=CATALOG, definition=text, target_vmid=201))


@PROFILE_SETTINGS
@given(
    field=st.sampled_from(
        [
            "image",
            "node",
            "templateVmid",
            "templateVersion",
            "storage",
            "bridge",
            "diskDevice",
            "sourceDiskGiB",
            "guestUser",
            "imageDefaultUser",
            "unknown",
        ]
    ),
    value=json_values,
)
def test_fuzz_catalog_fields(field: str, value: t.Any) -> None:
    doc = json.loads(json.dumps(CAT_DOC))
    doc["images"][0][field] = value
    text = yaml.safe_dump(doc, allow_unicode=True)
    _safe("catalog", lambda: parse_catalog(text=text))


@PROFILE_SETTINGS
@given(data=st.binary(max_size=2048) | st.text(max_size=2048).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_fuzz_raw_documents(data: bytes) -> None:
    _safe("raw_definition", lambda: parse_definition(text=data), planted=())
    _safe("raw_catalog", lambda: parse_catalog(text=data), planted=())


@PROFILE_SETTINGS
@given(
    vmid=st.one_of(
        st.integers(min_value=-(2**40), max_value=2**40),
        st.text(max_size=12),
        st.floats(allow_nan=True),
        st.none(),
        st.booleans(),
    )
)
def test_fuzz_target_vmid(vmid: t.Any) -> None:
    _safe("target_vmid", lambda: build_plan(catalog=CATALOG, definition=yaml.safe_dump(DEFINITION), target_vmid=vmid))


EXPECTED_CONF = expected_confirmation(
    build_plan(catalog=CATALOG, definition=yaml.safe_dump(DEFINITION), target_vmid=201).plan, SCOPE
)


@PROFILE_SETTINGS
@given(
    changes=st.dictionaries(st.sampled_from(list(CONFIRMATION_FIELDS) + ["extra", CANARY]), json_values, max_size=4),
    drop=st.lists(st.sampled_from(CONFIRMATION_FIELDS), max_size=2),
    whole=st.one_of(st.none(), json_values),
)
def test_fuzz_confirmation(changes: dict[str, t.Any], drop: list[str], whole: t.Any) -> None:
    given_conf: t.Any = dict(EXPECTED_CONF)
    given_conf.update(changes)
    for name in drop:
        given_conf.pop(name, None)
    if whole is not None:
        given_conf = whole
    planted = [v for v in changes.values() if isinstance(v, str) and v.startswith(CANARY)]
    _safe("confirmation", lambda: check_confirmation(given_conf, EXPECTED_CONF), planted=planted + [CANARY])


@PROFILE_SETTINGS
@given(value=st.text(max_size=80) | st.binary(max_size=40).map(lambda b: b.decode("latin-1")) | planted_text)
def test_fuzz_operation_ids_and_gates(value: str) -> None:
    # The echo rule is checked for planted values only: a random value may be a substring of the fixed text itself.
    planted = [value] if value.startswith(CANARY) else []
    _safe("operation_id", lambda: validate_operation_id(value), planted=planted)
    _safe(
        "gate",
        lambda: read_gate({"VMANYWARE_PROVISIONING_ENABLED": value}, "VMANYWARE_PROVISIONING_ENABLED"),
        planted=planted,
    )


# Values of the types AnsibleModule delivers after its argument-spec conversion (str/int/bool/float/path), but hostile.
hostile_text = (
    st.text(max_size=60)
    | planted_text
    | st.sampled_from(
        [
            "",
            " ",
            "../..",
            "/etc/passwd",
            "a\x00b",
            "h\nX-Injected: 1",
            "[::1",
            "https://pve:8006/api2/json",
            "\u202epve",
        ]
    )
)
floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
CONN_STRATEGIES = {
    "api_host": hostile_text,
    "api_port": st.one_of(st.none(), st.integers(min_value=-(2**40), max_value=2**40)),
    "api_user": st.none() | hostile_text,
    "api_token_id": st.none() | hostile_text,
    "api_token_secret": st.none() | hostile_text,
    "api_password": st.none() | hostile_text,
    "validate_certs": st.booleans(),
    "ca_path": st.none() | hostile_text,
    "api_fingerprint": st.none() | hostile_text,
    "api_timeout": floats,
    "unverified_tls_read_only": st.booleans(),
}


@PROFILE_SETTINGS
@given(values=st.fixed_dictionaries({}, optional=CONN_STRATEGIES))
def test_fuzz_connection_options(values: dict[str, t.Any]) -> None:
    params = {"api_host": "pve.example", "api_token_id": "u@pve!t", "api_token_secret": CANARY + "secret"}
    params.update(values)
    planted = [v for v in values.values() if isinstance(v, str) and v.startswith(CANARY)] + [CANARY + "secret"]
    _safe("connection", lambda: connection_settings(params), planted=planted)


@PROFILE_SETTINGS
@given(
    params=st.fixed_dictionaries(
        {},
        optional={
            "operation_id": st.one_of(st.none(), planted_text, st.just("op-" + "a" * 26), st.just("../../etc/passwd")),
            "preview_operation": st.one_of(st.none(), json_values),
            "wait_budget": floats,
            "timeout": floats,
            "lock_wait": floats,
            "journal_dir": st.one_of(
                st.none(), st.just("relative/dir"), planted_text.map(lambda s: "/nonexistent/" + s.replace("\x00", ""))
            ),
        },
    ),
    check_mode=st.booleans(),
)
def test_fuzz_stage_module_params(params: dict[str, t.Any], check_mode: bool) -> None:
    def no_client(_settings: t.Any) -> t.Any:
        raise VmanywareError(code="transport_lost")

    full = {"api_host": "127.0.0.1", "api_token_id": "u@pve!t", "api_token_secret": CANARY + "secret", **params}
    planted = [v for v in params.values() if isinstance(v, str) and CANARY in v] + [CANARY + "secret"]
    _safe(
        "stage_params",
        lambda: run_stage(full, CloneStage(), check_mode=check_mode, diff=False, client_factory=no_client),
        planted=planted,
    )
    if params.get("preview_operation") is not None:
        _safe("preview", lambda: PreviewStore(params["preview_operation"]), planted=planted)


@PROFILE_SETTINGS
@given(data=st.binary(max_size=512) | json_values.map(lambda v: json.dumps(v).encode()))
def test_fuzz_journal_files(data: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    journal = tmp_path_factory.mktemp("fj")
    os.chmod(journal, 0o700)
    store = JournalStore(str(journal))
    operation_id = "op-" + "a" * 26
    Path(store.operation_path(operation_id)).write_bytes(data)
    _safe("journal_load", lambda: store.load(operation_id), planted=())


# -- explicit hostile cases -------------------------------------------------------------------------------------
BOMB_ALIASES = (
    "a: &a ["
    + ",".join(["x"] * 10)
    + "]\n"
    + "".join("%s: &%s [%s]\n" % (chr(98 + i), chr(98 + i), ",".join(["*" + chr(97 + i)] * 10)) for i in range(8))
)
EXPLICIT = {
    "oversized": "name: " + "x" * (70 * 1024),
    "non_utf8": b"name: \xff\xfe\x00kernel",
    "yaml_bomb_aliases": BOMB_ALIASES,
    "deep_nesting_flow": "a: " + "[" * 5000 + "]" * 5000,
    "deep_nesting_block": "".join("  " * i + "k%d:\n" % i for i in range(300)) + "  " * 300 + "v",
    "duplicate_keys": yaml.safe_dump(DEFINITION) + "name: %s\n" % CANARY,
    "wrong_types": "apiVersion: 1\nkind: [Environment]\nname: {a: 1}\n",
    "control_characters": yaml.safe_dump(DEFINITION).replace("kernel-lab", "kernel\x07\x1b[31m" + CANARY),
    "nul_byte": yaml.safe_dump(DEFINITION).replace("kernel-lab", "ker\x00" + CANARY),
    "tags_python_object": "!!python/object/apply:os.system ['echo %s']" % CANARY,
    "binary_tag": "name: !!binary aGVsbG8=\n",
    "merge_key": "base: &b {cores: 2}\nresources:\n  <<: *b\n",
    "multiple_documents": yaml.safe_dump(DEFINITION) + "---\n" + yaml.safe_dump(DEFINITION),
    "name_path_traversal": yaml.safe_dump(dict(DEFINITION, name="../../etc/" + CANARY)),
    "huge_integer": yaml.safe_dump(DEFINITION).replace("cores: 2", "cores: " + "9" * 5000),
    "bidi_override": yaml.safe_dump(dict(DEFINITION, name="kernel\u202e" + CANARY), allow_unicode=True),
}


@pytest.mark.parametrize("name", sorted(EXPLICIT))
def test_explicit_hostile_documents(name: str) -> None:
    data = EXPLICIT[name]
    for parse in (parse_definition, parse_catalog):
        with pytest.raises(VmanywareError) as info:
            parse(text=data)
        assert info.value.code in ("invalid_definition", "invalid_catalog"), (name, info.value.to_result())
        assert CANARY not in json.dumps(info.value.to_result(), default=str)
    _count("explicit")


@pytest.mark.parametrize(
    "value",
    [
        "../op-aaaaaaaaaaaaaaaaaaaaaaaaaa",
        "/etc/passwd",
        "op-aaaaaaaaaaaaaaaaaaaaaaaaaa\x00",
        "op-" + "a" * 27,
        "op-AAAAAAAAAAAAAAAAAAAAAAAAAA",
        "op-aaaaaaaaaaaaaaaaaaaaaaaaa/",
        "op-aaaaaaaaaaaaaaaaaaaaaaaaa1",
        "op-" + "a" * 10000,
        "",
        "op-aaaaaaaaaaaaaaaaaaaaaaaaaa\n",
    ],
)
def test_explicit_hostile_operation_ids(value: str, tmp_path: Path) -> None:
    with pytest.raises(VmanywareError) as info:
        validate_operation_id(value)
    assert info.value.code == "invalid_option" and (not value or value not in json.dumps(info.value.to_result()))
    store = JournalStore(str(tmp_path / "j"))
    with pytest.raises(VmanywareError) as info:
        store.load(value)
    assert info.value.code == "invalid_option"
    assert not any(
        p.name != "locks" and p.name not in ("targets", "keys") for p in (tmp_path / "j").iterdir() if p.is_dir()
    )
    _count("explicit")
