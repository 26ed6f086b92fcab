# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The profile stage (_runtime/profile.py) with a fake nested runner: journal transitions, resume, uncertain and its
explicit re-run, order, baked entries, evidence, check mode, and no secret in the generated files or argv.

The plan's ``profiles`` list and its ``profile:<name>`` steps are built here as the interface fixes them
(/docs/profiles.md, "Running profiles"); the plan half of the feature builds them from declarations.
"""

from __future__ import annotations

import copy
import json
import os
import stat
import sys
import typing as t
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "_stages"))

from stage_fakes import SCOPE, complete, planned  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.cancel import RunCancelled  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.nested_playbook import (  # noqa: E402
    NestedPlaybook,
    NestedResult,
    parse_recap,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.profile import (  # noqa: E402
    ProfileSettings,
    run_profile,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.provision import (  # noqa: E402
    StageOptions,
    _profile_stage,
    run_stages,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings  # noqa: E402

SECRET = "s3cr3t-token-value-0123456789"
CONNECTION = {
    "api_host": "127.0.0.1",
    "api_port": 8006,
    "api_user": "root@pam",
    "api_token_id": "root@pam!vmanyware",
    "api_token_secret": SECRET,
    "validate_certs": True,
    "ca_path": "/tmp/ca.pem",
}
GATES = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
PROFILES = [
    {"name": "base", "version": 1, "role": "vmanyware.proxmox.profile_base", "vars": {"packages": ["jq"]},
     "perGuest": False, "lockoutRisk": False, "baked": False, "run": True, "requiredBy": ["docker-host"]},
    {"name": "docker-host", "version": 3, "role": "example.docker", "vars": {"users": ["debian"]},
     "perGuest": False, "lockoutRisk": False, "baked": True, "run": False},
    {"name": "ssh-hardening", "version": 2, "role": "vmanyware.proxmox.profile_ssh_hardening", "vars": {},
     "perGuest": False, "lockoutRisk": True, "baked": False, "run": True},
]  # fmt: skip


class FakeRunner:
    """Records what each nested run was given (files read while they exist) and answers with the next outcome."""

    def __init__(self, *outcomes: NestedResult | BaseException) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[dict[str, t.Any]] = []

    def __call__(self, nested: NestedPlaybook, cancel_check: t.Any, timeout: float) -> NestedResult:
        files = {}
        for name in sorted(os.listdir(nested.workdir)):
            path = os.path.join(nested.workdir, name)
            files[name] = {"mode": stat.S_IMODE(os.stat(path).st_mode), "text": Path(path).read_text(encoding="utf-8")}
        self.calls.append(
            {"argv": list(nested.argv), "env": dict(nested.env), "files": files, "workdir": nested.workdir,
             "dir_mode": stat.S_IMODE(os.stat(nested.workdir).st_mode)}
        )  # fmt: skip
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def ok(changed: int = 2, ok_count: int = 6) -> NestedResult:
    return NestedResult(ok=ok_count, changed=changed, failed=0, unreachable=0, rc=0, seconds=1.5)


@pytest.fixture
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def new_profile_operation(store: JournalStore) -> str:
    """An operation whose plan runs base and ssh-hardening (docker-host baked), after packages-less guest stages."""
    plan = planned()
    document = copy.deepcopy(plan.plan)
    document["profiles"] = copy.deepcopy(PROFILES)
    steps = [step for step in document["steps"] if step["kind"] != "snapshot"]
    for entry in PROFILES:
        if entry["run"]:
            steps.append({"position": 0, "kind": "profile", "name": "profile:" + entry["name"]})
    steps.append({"position": 0, "kind": "snapshot"})
    document["steps"] = [dict(step, position=index) for index, step in enumerate(steps, start=1)]
    created, _new = store.create_operation(
        idempotency_key=None,
        provider_scope_id=SCOPE,
        definition=plan.definition,
        mapping=plan.mapping,
        plan=document,
        confirmation=expected_confirmation(document, SCOPE),
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=[step.get("name") or step["kind"] for step in document["steps"]],
    )
    return t.cast(str, created["operationId"])


def through_packages(store: JournalStore, operation_id: str) -> None:
    """Every stage before the first profile stage completed (the handoff as readiness leaves it)."""
    for item in store.load(operation_id)["stages"]:
        if item["kind"].startswith("profile:"):
            return
        complete(store, operation_id, item["kind"], {})
    raise AssertionError("no profile stage")


def settings(**changes: t.Any) -> ProfileSettings:
    return ProfileSettings(**{"connection": CONNECTION, "environ": GATES, **changes})


def stage_of(store: JournalStore, operation_id: str, kind: str) -> dict[str, t.Any]:
    return next(item for item in store.load(operation_id)["stages"] if item["kind"] == kind)


def test_a_profile_runs_once_records_dispatch_then_evidence_and_is_skipped_when_completed(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    seen: list[str] = []

    def runner(nested: NestedPlaybook, cancel_check: t.Any, timeout: float) -> NestedResult:
        # the dispatch is durable before the nested run starts
        seen.append(stage_of(store, operation_id, "profile:base")["status"])
        return ok(changed=3, ok_count=7)

    lines: list[str] = []
    result = run_profile(store, operation_id, "base", settings(), runner=runner, report=lines.append)
    assert seen == ["dispatching"]
    assert result["changed"] is True
    record = stage_of(store, operation_id, "profile:base")
    assert record["status"] == "completed"
    assert record["request"]["role"] == "vmanyware.proxmox.profile_base"
    assert record["request"]["vars"] == ["packages"]
    assert {key: record["evidence"][key] for key in ("changed", "ok", "failed", "seconds")} == {
        "changed": 3, "ok": 7, "failed": 0, "seconds": 1.5,
    }  # fmt: skip
    assert lines == [
        "profile 1/2 base: running role vmanyware.proxmox.profile_base through qga",
        "profile 1/2 base: completed, 3 changed (7 ok) in 1.5 s",
    ]
    again = FakeRunner()
    second = run_profile(store, operation_id, "base", settings(), runner=again, report=lines.append)
    assert again.calls == [] and second["changed"] is False and second["stage"]["status"] == "completed"
    assert lines[-1] == "profile 1/2 base: completed earlier, skipped"


def test_zero_changed_tasks_report_unchanged(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    result = run_profile(store, operation_id, "base", settings(), runner=FakeRunner(ok(changed=0)), report=print)
    assert result["changed"] is False and result["evidence"]["changed"] == 0


def test_profiles_run_in_plan_order_and_the_last_one_completes_the_operation(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    with pytest.raises(StageError) as err:
        run_profile(store, operation_id, "ssh-hardening", settings(), runner=FakeRunner(ok()), report=print)
    assert err.value.code == "stage_out_of_order" and err.value.details["waiting_for"] == "profile:base"
    run_profile(store, operation_id, "base", settings(), runner=FakeRunner(ok()), report=print)
    run_profile(store, operation_id, "ssh-hardening", settings(), runner=FakeRunner(ok()), report=print)
    document = store.load(operation_id)
    assert [item["kind"] for item in document["stages"]][-3:] == ["profile:base", "profile:ssh-hardening", "snapshot"]
    assert document["status"] == "open"  # snapshot still pending


def test_a_baked_profile_is_skipped_with_its_reason_and_runs_nothing(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    runner = FakeRunner()
    lines: list[str] = []
    result = run_profile(store, operation_id, "docker-host", settings(), runner=runner, report=lines.append)
    assert runner.calls == [] and result["skipped"] is True and result["changed"] is False
    assert result["reason"] == "baked into the template (version 3) and not per guest"
    assert lines == ["profile docker-host: skipped, baked into the template (version 3) and not per guest"]


def test_a_profile_not_in_the_plan_is_refused(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    with pytest.raises(Exception) as err:
        run_profile(store, operation_id, "nope", settings(), runner=FakeRunner(), report=print)
    assert getattr(err.value, "code", None) == "invalid_option"


def test_a_dispatched_unfinished_stage_becomes_uncertain_and_runs_again_only_when_asked(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    store.record_dispatch(operation_id, "profile:base", {"profile": "base"})  # the controller died after this
    runner = FakeRunner(ok(changed=0))
    with pytest.raises(StageError) as err:
        run_profile(store, operation_id, "base", settings(), runner=runner, report=print)
    assert err.value.code == "profile_uncertain" and runner.calls == []
    document = store.load(operation_id)
    assert stage_of(store, operation_id, "profile:base")["status"] == "uncertain"
    assert document["status"] == "uncertain"
    with pytest.raises(StageError):  # still refused without the option
        run_profile(store, operation_id, "base", settings(), runner=runner, report=print)
    assert runner.calls == []
    result = run_profile(store, operation_id, "base", settings(rerun_uncertain=True), runner=runner, report=print)
    assert len(runner.calls) == 1 and result["stage"]["status"] == "completed"
    record = stage_of(store, operation_id, "profile:base")
    assert len(record["evidence"]["reruns"]) == 1 and record["evidence"]["changed"] == 0
    assert store.load(operation_id)["status"] == "open"  # the operation reopened once no stage is uncertain


def test_a_failed_nested_run_leaves_the_stage_uncertain_with_its_counts(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    failed = NestedResult(ok=3, changed=1, failed=1, unreachable=0, rc=2, seconds=0.7)
    with pytest.raises(StageError) as err:
        run_profile(store, operation_id, "base", settings(), runner=FakeRunner(failed), report=print)
    assert err.value.code == "profile_failed"
    record = stage_of(store, operation_id, "profile:base")
    assert record["status"] == "uncertain" and record["failure"]["code"] == "profile_failed"
    assert (record["evidence"]["failed"], record["evidence"]["changed"]) == (1, 1)
    # fixed, re-run explicitly: the same stage completes; a failed re-run would leave it uncertain
    with pytest.raises(StageError):
        run_profile(
            store, operation_id, "base", settings(rerun_uncertain=True), runner=FakeRunner(failed), report=print
        )
    assert stage_of(store, operation_id, "profile:base")["status"] == "uncertain"
    run_profile(store, operation_id, "base", settings(rerun_uncertain=True), runner=FakeRunner(ok()), report=print)
    assert stage_of(store, operation_id, "profile:base")["status"] == "completed"


def test_a_run_without_recap_is_a_failure(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    broken = NestedResult(ok=0, changed=0, failed=0, unreachable=0, rc=1, seconds=0.2, recap_found=False)
    with pytest.raises(StageError) as err:
        run_profile(store, operation_id, "base", settings(), runner=FakeRunner(broken), report=print)
    assert err.value.code == "profile_failed"


def test_a_cancelled_nested_run_is_recorded_uncertain(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    cancelled = RunCancelled("stop", code="run_cancelled")
    with pytest.raises(RunCancelled):
        run_profile(store, operation_id, "base", settings(), runner=FakeRunner(cancelled), report=print)
    record = stage_of(store, operation_id, "profile:base")
    assert record["status"] == "uncertain" and record["evidence"]["cancelled"] == "run_cancelled"


def test_a_closed_gate_runs_nothing_and_leaves_the_stage_pending(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    runner = FakeRunner(ok())
    with pytest.raises(StageError) as err:
        run_profile(
            store, operation_id, "base", settings(environ={"VMANYWARE_PROVISIONING_ENABLED": "false"}),
            runner=runner, report=print,
        )  # fmt: skip
    assert err.value.code == "provisioning_disabled" and runner.calls == []
    assert stage_of(store, operation_id, "profile:base")["status"] == "pending"


def test_check_mode_previews_the_role_and_vars_and_runs_nothing(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    before = store.load(operation_id)
    runner = FakeRunner()
    lines: list[str] = []
    result = run_profile(store, operation_id, "base", settings(check_mode=True), runner=runner, report=lines.append)
    assert runner.calls == [] and store.load(operation_id) == before
    assert result["preview"] == {
        "profile": "base", "version": 1, "role": "vmanyware.proxmox.profile_base",
        "vars": {"packages": ["jq"]}, "transport": "qga", "equivalent": "qm guest exec 201 -- /bin/sh -c <task>",
    }  # fmt: skip
    assert lines == [
        "profile 1/2 base: would run role vmanyware.proxmox.profile_base (vars: packages) through qga; "
        "each task as: qm guest exec 201 -- /bin/sh -c <task>"
    ]


def test_the_generated_files_are_private_and_no_secret_is_in_them_or_the_argv(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    runner = FakeRunner(ok())
    run_profile(store, operation_id, "base", settings(), runner=runner, report=print)
    call = runner.calls[0]
    assert call["dir_mode"] == 0o700
    assert set(call["files"]) == {"inventory.json", "playbook.json", "vars.json"}
    assert all(item["mode"] == 0o600 for item in call["files"].values())
    assert all(SECRET not in item["text"] for item in call["files"].values())
    assert not any(SECRET in arg for arg in call["argv"])
    assert call["env"]["PROXMOX_TOKEN_SECRET"] == SECRET  # the one place the credential goes: the child's environment
    assert call["env"]["PROXMOX_HOST"] == "127.0.0.1" and call["env"]["PROXMOX_VALIDATE_CERTS"] == "true"
    assert call["argv"][1:3] == ["-m", "ansible.cli.playbook"] and "-e" in call["argv"]
    inventory = json.loads(call["files"]["inventory.json"]["text"])["all"]["hosts"]["vmanyware_guest"]
    assert inventory == {
        "ansible_connection": "vmanyware.proxmox.qga",
        "vmanyware_vmid": 201,
        "vmanyware_node": "pve-test",
    }
    assert json.loads(call["files"]["vars.json"]["text"]) == {"packages": ["jq"]}
    play = json.loads(call["files"]["playbook.json"]["text"])[0]
    assert play["roles"] == [{"role": "vmanyware.proxmox.profile_base"}] and play["hosts"] == "vmanyware_guest"
    assert not os.path.exists(call["workdir"])  # removed after the run
    assert SECRET not in json.dumps(store.load(operation_id))


def test_ssh_transport_uses_the_handoff_known_hosts_and_passes_no_api_credential(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    store.set_handoff(
        operation_id, {"ipv4": "192.0.2.10", "guestUser": "debian", "knownHosts": ["192.0.2.10 ssh-ed25519 AAAAC3Nz"]}
    )
    runner = FakeRunner(ok())
    run_profile(store, operation_id, "base", settings(transport="ssh", environ={**GATES, "PROXMOX_TOKEN_SECRET": SECRET}),
                runner=runner, report=print)  # fmt: skip
    call = runner.calls[0]
    assert not any(key.startswith("PROXMOX_") for key in call["env"])
    host = json.loads(call["files"]["inventory.json"]["text"])["all"]["hosts"]["vmanyware_guest"]
    known_hosts = os.path.join(call["workdir"], "known_hosts")
    assert host["ansible_host"] == "192.0.2.10" and host["ansible_user"] == "debian"
    assert host["ansible_ssh_common_args"] == "-o StrictHostKeyChecking=yes -o UserKnownHostsFile=" + known_hosts
    assert call["files"]["known_hosts"] == {"mode": 0o600, "text": "192.0.2.10 ssh-ed25519 AAAAC3Nz\n"}


def test_the_recap_of_the_guest_is_parsed() -> None:
    text = (
        "PLAY RECAP *********************************************************************\n"
        "vmanyware_guest            : ok=7    changed=3    unreachable=0    failed=1    skipped=2    rescued=0    ignored=0\n"
    )
    assert parse_recap(text) == {"ok": 7, "changed": 3, "unreachable": 0, "failed": 1}
    assert parse_recap("ERROR! the role 'x' was not found\n") is None


def test_the_one_task_run_stops_at_the_first_pending_profile_and_hands_it_over(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    lines: list[str] = []
    result = run_stages(
        store, object(), operation_id, StageSettings(environ=GATES), StageOptions(), report=lines.append
    )
    assert result["done"] is False and result["profiles_pending"] == ["base", "ssh-hardening"]
    # the completed stages before it send nothing (no client call: the client here has no method at all)
    assert result["stages"][-1]["kind"] == "profile:base" and result["requests"] == []
    assert all(item["status"] == "completed" for item in result["stages"][:-1])
    assert lines[-1].endswith("profile:base: handed to vmanyware_profile (the provision role runs it next)")
    assert stage_of(store, operation_id, "profile:base")["status"] == "pending"  # nothing recorded for it


def test_the_one_task_run_previews_profile_stages_from_the_plan_in_check_mode(store: JournalStore) -> None:
    operation_id = new_profile_operation(store)
    through_packages(store, operation_id)
    complete(store, operation_id, "profile:base", {})
    summary = _profile_stage(store.load(operation_id), "profile:ssh-hardening", 10, True)
    assert summary["preview"] == (
        "would run role vmanyware.proxmox.profile_ssh_hardening (vars: none) through qga; "
        "each task as: qm guest exec 201 -- /bin/sh -c <task>"
    )
    assert summary["done"] is False
    done = _profile_stage(store.load(operation_id), "profile:base", 9, False)
    assert done["done"] is True and done["note"] == "completed earlier"
