# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one list of secret-bearing keys (_redaction.py), sent through every path that logs, stores or shows values:
the client's request log, the journal (request summary, evidence, hand-off), request summaries and their qm/pct
command (_cli.py), and a stage module's result."""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core import redaction as _redaction
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.cli import with_cli
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.redaction import (
    REDACTED,
    is_secret_key,
    redact,
    redact_text,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import (
    StageContext,
    StageLogic,
    StageSettings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import Request

from hashed_plan import hashed_plan
from pve_stubs import Reply, make_settings, stub_server, tls_material  # noqa: F401  pylint: disable=unused-import

HASH = "a" * 64
# The secret-bearing names the collection and Proxmox use: every one must be covered by the list.
KNOWN_SECRET_KEYS = (
    "password",
    "api_password",
    "cipassword",
    "api_token_secret",
    "token_secret",
    "ticket",
    "PVEAuthCookie",
    "Cookie",
    "CSRFPreventionToken",
    "Authorization",
    "passphrase",
    "passwd",
    "private_key",
    "otp",
    "tfa",
    "totp",
    "input-data",
    "out-data",
    "err-data",
    "content",
    "stdin",
    "stdout",
    "stderr",
)


def _secret_keys() -> list[str]:
    """Every entry of the list (markers alone, inside a longer key, upper case), plus the known names."""
    keys = set(KNOWN_SECRET_KEYS) | set(_redaction.SECRET_KEY_NAMES)
    for marker in _redaction.SECRET_KEY_MARKERS:
        keys |= {marker, marker.upper(), "x_" + marker + "_y"}
    return sorted(keys)


SECRET_KEYS = _secret_keys()
# One distinct canary value per key, so a leak names the key it came from.
CANARIES = {key: "canary-%03d-value" % index for index, key in enumerate(SECRET_KEYS)}


def _assert_no_canary(text: str) -> None:
    leaked = sorted(key for key, value in CANARIES.items() if value in text)
    assert not leaked, leaked


def test_known_secret_keys_are_in_the_list() -> None:
    assert all(is_secret_key(key) for key in KNOWN_SECRET_KEYS)
    assert not any(
        is_secret_key(key) for key in ("node", "vmid", "cores", "hotplug", "contents_hash", "sshkeys", "ciuser")
    )


def test_redact_deep_copy_any_depth_any_case() -> None:
    value = {
        "api_token_secret": "a",
        "PASSWORD": "b",
        "cipassword": "c",
        "ticket": "d",
        "CSRFPreventionToken": "e",
        "sshkeys": "ssh-ed25519 AAAA",
        "list": [{"token": "f"}, "keep"],
        "input-data": "g",
        "out-data": "h",
        "node": "pve1",
    }
    result = redact(value)
    assert result == {
        "api_token_secret": REDACTED,
        "PASSWORD": REDACTED,
        "cipassword": REDACTED,
        "ticket": REDACTED,
        "CSRFPreventionToken": REDACTED,
        "sshkeys": "ssh-ed25519 AAAA",
        "list": [{"token": REDACTED}, "keep"],
        "input-data": REDACTED,
        "out-data": REDACTED,
        "node": "pve1",
    }
    assert value["PASSWORD"] == "b" and result["list"] is not value["list"]
    assert redact(result) == result  # idempotent: a redacted summary passes through again unchanged


def test_every_key_through_the_client_request_log(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    server = stub_server(lambda request: Reply(body={"data": None}))
    seen: list[tuple[t.Any, ...]] = []
    client = ProxmoxClient(
        make_settings(server.port, ca_path=tls_material.ca_path),
        sleep=lambda s: None,
        request_log=lambda *entry: seen.append(entry),
    )
    client.put("/nodes/pve/qemu/201/config", cores=2, **CANARIES)
    assert len(seen) == 1 and seen[0][2]["cores"] == 2
    assert all(seen[0][2][key] == REDACTED for key in SECRET_KEYS)
    _assert_no_canary(repr(seen))


def test_every_key_through_the_request_summary_and_its_command() -> None:
    summary = Request("PUT", "/nodes/pve/qemu/201/config", dict(CANARIES, cores=2)).summary()
    shown = with_cli(summary)
    assert shown["cli"].startswith("qm set 201 ") and "--cores 2" in shown["cli"]
    _assert_no_canary(json.dumps(shown))
    # A summary that skipped Request.summary() is redacted by with_cli too.
    raw = with_cli({"method": "PUT", "path": "/nodes/pve/qemu/201/config", "params": dict(CANARIES)})
    _assert_no_canary(json.dumps(raw))


def _operation(store: JournalStore) -> str:
    document, _created = store.create_operation(
        idempotency_key="k",
        provider_scope_id="pve:" + HASH,
        definition={},
        mapping={},
        plan=hashed_plan({}, {}, 201),
        confirmation={},
        target_node="pve",
        target_vmid=201,
        stage_kinds=["resources", "readiness"],
    )
    return t.cast(str, document["operationId"])


def test_every_key_through_the_journal_records(tmp_path: Path) -> None:
    store = JournalStore(str(tmp_path / "journal"))
    operation_id = _operation(store)
    store.record_dispatch(operation_id, "resources", {"method": "PUT", "path": "/x", "params": dict(CANARIES)})
    store.record_submitted(operation_id, "resources", None, {"nested": [dict(CANARIES)]})
    store.record_evidence(operation_id, "resources", dict(CANARIES))
    store.record_completed(operation_id, "resources", {"deeper": {"again": dict(CANARIES)}})
    store.set_handoff(operation_id, dict(CANARIES, vmid=201))
    text = Path(store.operation_path(operation_id)).read_text(encoding="utf-8")
    _assert_no_canary(text)
    assert store.load(operation_id)["handoff"]["vmid"] == 201


class _Client:
    """Accepts one synchronous mutation; no GET is expected."""

    def __init__(self) -> None:
        self.sent: list[dict[str, t.Any]] = []

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        self.sent.append(dict(params or {}))
        return {"data": None}

    def get(self, path: str, /, **params: t.Any) -> t.Any:
        raise AssertionError("unexpected GET " + path)


class _SecretsStage(StageLogic):
    kind = "resources"

    def request(self, ctx: StageContext) -> Request:
        return Request("PUT", "/nodes/pve/qemu/%d/config" % ctx.vmid, dict(CANARIES, cores=2))

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        return {"config": dict(CANARIES, cores=2)}


@pytest.mark.parametrize("check_mode", [False, True])
def test_every_key_through_a_stage_result_and_its_journal(tmp_path: Path, check_mode: bool) -> None:
    store = JournalStore(str(tmp_path / "journal"))
    operation_id = _operation(store)
    client = _Client()
    settings = StageSettings(
        check_mode=check_mode, environ={"VMANYWARE_PROVISIONING_ENABLED": "true"}, sleep=lambda s: None
    )
    result = StageRunner(store, client, _SecretsStage(), settings).run(operation_id)
    assert result["requests"] and result["requests"][0]["params"]["cores"] == 2
    assert client.sent == ([] if check_mode else [dict(CANARIES, cores=2)])  # the real request carries the values
    _assert_no_canary(json.dumps(result))
    _assert_no_canary(Path(store.operation_path(operation_id)).read_text(encoding="utf-8"))


def test_redact_keeps_flags_about_secrets() -> None:
    """The template build's attestation (``passwordLocked: true``) must survive the journal: a boolean is no secret."""
    value = {
        "passwordLocked": True,
        "imageDefaultUser": {"passwordLocked": True, "noAuthorizedKeys": True},
        "cipassword": "x",
        "password": 0,
        "token": None,
    }
    assert redact(value) == {
        "passwordLocked": True,
        "imageDefaultUser": {"passwordLocked": True, "noAuthorizedKeys": True},
        "cipassword": REDACTED,
        "password": REDACTED,
        "token": REDACTED,
    }


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (
            "TASK ERROR: login failed: password=hunter2 for root@pam",
            "TASK ERROR: login failed: password=<redacted> for root@pam",
        ),
        ("Authorization: PVEAPIToken=root@pam!ci=0b6f1c2e-aaaa", "Authorization: <redacted>"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig rest", "Authorization: <redacted> rest"),
        ('{"cipassword": "s3cr3t", "cores": 2}', '{"cipassword": <redacted>, "cores": 2}'),
        ("GET /x?ticket=PVE:root@pam:65A1::c2Vj&node=pve", "GET /x?ticket=<redacted>&node=pve"),
        (
            "download https://user:pa55@mirror.example/img.qcow2 ok",
            "download https://<redacted>@mirror.example/img.qcow2 ok",
        ),
        ("PVEAuthCookie=PVE:root@pam:1234::abc; path=/", "PVEAuthCookie=<redacted>; path=/"),
        ("transferred 1.0 GiB of 20.0 GiB (5.00%)", "transferred 1.0 GiB of 20.0 GiB (5.00%)"),
        ("allocated target volume local-lvm:vm-201-disk-0: ok", "allocated target volume local-lvm:vm-201-disk-0: ok"),
    ],
)
def test_free_text_is_redacted_with_the_same_list(line: str, shown: str) -> None:
    assert redact_text(line) == shown
