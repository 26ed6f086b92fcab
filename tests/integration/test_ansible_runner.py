# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The provision playbook through ansible-runner, the engine AWX / Automation Platform uses.

Like a controller job: a private data dir with ``project/`` (a project playbook importing
``vmanyware.proxmox.provision``, the catalog and definition as project files), extra vars and
environment variables handed to ``ansible_runner.run``, no TTY, events read from the artifacts.
The connection and gates come from ``awx/credential_type.yml``: its injectors are rendered the way
the controller renders them (sandboxed Jinja2, the CA written to a private file under ``env/``,
``tower.filename.ca``), so the credential type itself is exercised against the simulator.

Run 1 (no confirmation) only reads; run 2 (the confirmation written by run 1) runs every stage.
Afterwards every file in the private data dir and the journal is searched for the token secret.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import types
import typing as t
from pathlib import Path

import pytest
import yaml

ansible_runner = pytest.importorskip("ansible_runner")
sandbox = pytest.importorskip("jinja2.sandbox")

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CREDENTIAL_TYPE = REPO / "awx" / "credential_type.yml"
VENV_BIN = Path(sys.executable).parent
TARGET_VMID = 201
STAGE_ACTIONS = {
    kind: f"vmanyware.proxmox.vmanyware_{kind}"
    for kind in ("clone", "resources", "disk", "cloudinit", "seed", "start", "readiness", "packages", "snapshot")
}
PROJECT_PLAYBOOK = """\
---
# What an AWX project holds: its own playbook, importing the collection's playbook from the EE.
- name: Provision with vmanyware.proxmox
  ansible.builtin.import_playbook: vmanyware.proxmox.provision
"""


# The controller's usual localhost inventory: local connection, the playbook's own interpreter.
INVENTORY = """\
all:
  hosts:
    localhost:
      ansible_connection: local
      ansible_python_interpreter: "{{ ansible_playbook_python }}"
"""


def render_credential(inputs: dict[str, t.Any], private_data_dir: Path) -> dict[str, str]:
    """Render ``awx/credential_type.yml``'s injectors as the controller does for a job.

    File injectors are written to ``<private_data_dir>/env/tmp*`` (mode 0600) and exposed as
    ``tower.filename.<label>``; missing boolean inputs are ``False``; env values are rendered with
    the same sandboxed Jinja2 environment the controller uses.
    """
    cred_type = yaml.safe_load(CREDENTIAL_TYPE.read_text(encoding="utf-8"))
    namespace: dict[str, t.Any] = dict(inputs)
    for field in cred_type["inputs"]["fields"]:
        if field.get("type") == "boolean" and field["id"] not in namespace:
            namespace[field["id"]] = False
    env = sandbox.ImmutableSandboxedEnvironment()
    files = types.SimpleNamespace()
    env_dir = private_data_dir / "env"
    env_dir.mkdir(parents=True, exist_ok=True)
    for label, template in cred_type["injectors"].get("file", {}).items():
        fd, path = tempfile.mkstemp(dir=env_dir)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(env.from_string(template).render(**namespace))
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
        setattr(files, label.split(".", 1)[1], path)
    namespace["tower"] = types.SimpleNamespace(filename=files)
    return {
        name: env.from_string(template).render(**namespace) for name, template in cred_type["injectors"]["env"].items()
    }


def make_private_data_dir(root: Path) -> Path:
    pdd = root / "private"
    project = pdd / "project"
    (project / "vmanyware").mkdir(parents=True)
    for name in ("provision", "plan", "preflight"):
        (project / f"{name}.yml").write_text(
            PROJECT_PLAYBOOK.replace("vmanyware.proxmox.provision", f"vmanyware.proxmox.{name}"), encoding="utf-8"
        )
    shutil.copy(REPO / "examples" / "catalog.yml", project / "vmanyware" / "catalog.yml")
    shutil.copy(REPO / "examples" / "definition.yml", project / "vmanyware" / "definition.yml")
    (pdd / "inventory").mkdir()
    (pdd / "inventory" / "hosts.yml").write_text(INVENTORY, encoding="utf-8")
    return pdd


def run_job(
    pdd: Path, ident: str, extravars: dict[str, t.Any], envvars: dict[str, str], playbook: str = "provision.yml"
) -> t.Any:
    for name in ("extravars", "envvars"):  # each job brings its own (ansible-runner keeps an existing env/<name>)
        (pdd / "env" / name).unlink(missing_ok=True)
    return ansible_runner.run(
        private_data_dir=str(pdd),
        ident=ident,
        playbook=playbook,
        inventory="hosts.yml",
        extravars=extravars,
        envvars=envvars,
        quiet=True,
        rotate_artifacts=0,
        timeout=600,
    )


def events_of(runner: t.Any, event: str) -> list[dict[str, t.Any]]:
    return [e for e in runner.events if e.get("event") == event]


def printed_block(runner: t.Any) -> str:
    """The text vmanyware_print showed for the confirmation task (a verbose event of the job output), from its first line on."""
    text = "".join(
        e.get("stdout", "") + "\n"
        for e in runner.events
        if e.get("event") == "verbose" and "provision_confirmation:" in e.get("stdout", "")
    )
    assert text.count("provision_confirmation:") == 1, text
    return text


def stage_oks(runner: t.Any) -> dict[str, dict[str, t.Any]]:
    """The last ``runner_on_ok`` of every stage module task, by stage kind (the role's one vmanyware_provision task: each stage it ran)."""
    found: dict[str, dict[str, t.Any]] = {}
    for ev in events_of(runner, "runner_on_ok"):
        action = ev["event_data"].get("resolved_action") or ev["event_data"].get("task_action")
        if action in ("vmanyware.proxmox.vmanyware_provision", "vmanyware_provision"):
            found.update(
                {
                    stage["kind"]: ev["event_data"]
                    for stage in ev["event_data"]["res"].get("stages", [])
                    if stage.get("done")
                }
            )
        for kind, name in STAGE_ACTIONS.items():
            if action in (name, name.rsplit(".", 1)[1]):
                found[kind] = ev["event_data"]
    return found


def files_containing(root: Path, needle: bytes) -> list[Path]:
    hits = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
            hits.append(path)
    return hits


def test_provision_through_ansible_runner(pvesim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    )  # ansible-playbook, as on the EE's PATH
    conn = pvesim.connection
    pvesim.set_speed(200)
    secret = conn["tokens"]["full"]["secret"]
    pdd = make_private_data_dir(tmp_path)
    journal = tmp_path / "journal"
    confirm_file = tmp_path / "confirm.yml"
    known_hosts = tmp_path / "known_hosts"

    envvars = render_credential(
        {
            "api_host": conn["host"],
            "api_port": str(conn["port"]),
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": secret,
            "ca_certificate": Path(conn["ca_file"]).read_text(encoding="utf-8"),
            "provisioning_enabled": True,
        },
        pdd,
    )
    assert envvars["VMANYWARE_PROVISIONING_ENABLED"] == "true" and envvars["VMANYWARE_SNAPSHOTS_ENABLED"] == "false"
    assert envvars["PROXMOX_FINGERPRINT"] == "" and Path(envvars["PROXMOX_CA_PATH"]).parent == pdd / "env"
    envvars.update(
        {"VMANYWARE_JOURNAL_DIR": str(journal), "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"]}
    )
    extravars: dict[str, t.Any] = {
        # Project files by absolute path (/runner/project/... in an EE): a collection playbook's modules run in the
        # collection's playbooks/ directory, so a relative path would not name the project's file.
        "vmanyware_catalog_path": str(pdd / "project" / "vmanyware" / "catalog.yml"),
        "vmanyware_definition_path": str(pdd / "project" / "vmanyware" / "definition.yml"),
        "vmanyware_target_vmid": TARGET_VMID,
        "vmanyware_confirmation_file": str(confirm_file),
        "vmanyware_known_hosts_file": str(known_hosts),
    }

    # Run 1: plan + preflight, prints and writes the confirmation block, changes nothing.
    first = run_job(pdd, "1", extravars, envvars)
    assert (first.status, first.rc) == ("successful", 0), first.stdout.read()
    assert {e["method"] for e in pvesim.requests()} == {"GET"}
    assert pvesim.schema_violations() == []
    confirmation = yaml.safe_load(confirm_file.read_text(encoding="utf-8"))
    assert set(confirmation) == {"provision_confirmation"}
    block = confirmation["provision_confirmation"]
    assert block["confirmed"] is True and block["targetVmid"] == TARGET_VMID
    printed = [
        e
        for e in events_of(first, "runner_on_ok")
        if e["event_data"].get("task") == "Print the exact confirmation block for this plan"
    ]
    # the block is printed as it is (job output, as AWX shows it): YAML that loads to exactly the file's content
    assert printed and yaml.safe_load(printed_block(first)) == confirmation
    assert not stage_oks(first)
    assert not journal.exists() or not list(journal.glob("op-*.json"))

    # Run 2: the same job with the reviewed confirmation as extra vars runs every stage.
    pvesim.clear_requests()
    second = run_job(pdd, "2", {**extravars, **confirmation}, envvars)
    assert (second.status, second.rc) == ("successful", 0), second.stdout.read()
    oks = stage_oks(second)
    final = [
        e["event_data"]["res"]["ansible_facts"]["provision_operation"]
        for e in events_of(second, "runner_on_ok")
        if e["event_data"].get("task") == "Keep the operation for later tasks"
    ]
    assert final, "no final operation facts event"
    operation = final[-1]
    assert operation["status"] == "completed"
    kinds = [s["kind"] for s in operation["stages"]]
    assert kinds[:3] == ["clone", "resources", "disk"]
    assert all(s["status"] == "completed" for s in operation["stages"]), operation["stages"]
    assert set(oks) == set(kinds), (sorted(oks), kinds)
    table = [
        e
        for e in events_of(second, "runner_on_ok")
        if e["event_data"].get("task") == "Show the stages, and the handoff once completed"
    ]
    assert table and all(f" {kind} " in json.dumps(table[0]["event_data"]["res"]) for kind in kinds)
    clones = pvesim.requests("POST", r"/clone$")
    assert [e["path"] for e in clones] == ["/nodes/pve-test/qemu/9000/clone"]
    assert pvesim.schema_violations() == []
    assert pvesim.vm(TARGET_VMID)["status"] == "running"

    # The token secret: nowhere in what the jobs produced (stdout, events, facts, journal, files).
    needle = secret.encode()
    allowed = {pdd / "env" / "envvars"}  # the job's input, written by ansible-runner from envvars=
    for ident in ("1", "2"):
        command = pdd / "artifacts" / ident / "command"  # ansible-runner's record of the command and its environment
        recorded = json.loads(command.read_text(encoding="utf-8"))
        assert recorded["env"]["PROXMOX_TOKEN_SECRET"] == secret
        del recorded["env"]["PROXMOX_TOKEN_SECRET"]
        assert secret not in json.dumps(recorded)
        allowed.add(command)
    leaks = [p for p in files_containing(pdd, needle) if p not in allowed]
    assert leaks == [], leaks
    assert (pdd / "artifacts" / "2" / "stdout").stat().st_size > 0
    assert len(list((pdd / "artifacts" / "2" / "job_events").glob("*.json"))) > 20
    assert list(journal.glob("op-*.json")) and files_containing(journal, needle) == []
    assert files_containing(tmp_path, needle) == sorted(allowed)
    assert not any(secret in json.dumps(e) for run in (first, second) for e in run.events)


def job_inputs(pdd: Path, tmp_path: Path, journal: Path) -> dict[str, t.Any]:
    return {
        "vmanyware_catalog_path": str(pdd / "project" / "vmanyware" / "catalog.yml"),
        "vmanyware_definition_path": str(pdd / "project" / "vmanyware" / "definition.yml"),
        "vmanyware_target_vmid": TARGET_VMID,
        "vmanyware_journal_dir": str(journal),
        "vmanyware_confirmation_file": str(tmp_path / "confirm.yml"),
        "vmanyware_known_hosts_file": str(tmp_path / "known_hosts"),
    }


def module_results(
    runner: t.Any, action: str, events: tuple[str, ...] = ("runner_on_ok", "runner_on_failed")
) -> list[dict[str, t.Any]]:
    return [
        e["event_data"]["res"]
        for e in runner.events
        if e.get("event") in events
        and (e["event_data"].get("resolved_action") or e["event_data"].get("task_action"))
        in (action, action.rsplit(".", 1)[1])
    ]


def test_review_with_the_read_only_credential(pvesim: t.Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/awx.md's two-template flow: the plan template (provisioning off) prints the block; only the apply run needs the gate."""
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    conn = pvesim.connection
    pdd = make_private_data_dir(tmp_path)
    journal = tmp_path / "journal"
    envvars = render_credential(
        {
            "api_host": conn["host"],
            "api_port": str(conn["port"]),
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_certificate": Path(conn["ca_file"]).read_text(encoding="utf-8"),
        },
        pdd,
    )  # proxmox-readonly: "Allow provisioning" left off
    assert envvars["VMANYWARE_PROVISIONING_ENABLED"] == "false"
    envvars["ANSIBLE_COLLECTIONS_PATH"] = os.environ["ANSIBLE_COLLECTIONS_PATH"]
    extravars = job_inputs(pdd, tmp_path, journal)

    review = run_job(pdd, "review", extravars, envvars)
    assert (review.status, review.rc) == ("successful", 0), review.stdout.read()
    assert {e["method"] for e in pvesim.requests()} == {"GET"}
    tasks = [e["event_data"].get("task") for e in events_of(review, "runner_on_ok")]
    assert "Run the read-only checks" in tasks and "Build the plan (offline)" in tasks
    block = yaml.safe_load((tmp_path / "confirm.yml").read_text(encoding="utf-8"))["provision_confirmation"]
    printed = [
        e["event_data"]["res"]
        for e in events_of(review, "runner_on_ok")
        if e["event_data"].get("task") == "Print the exact confirmation block for this plan"
    ]
    text = printed_block(review)
    assert (
        printed
        and yaml.safe_load(text)["provision_confirmation"] == block
        and "# " in text
        and "it is closed for this run" in text
    )
    assert not list(journal.glob("op-*.json"))

    # The approver's template, still with the read-only credential: stopped by the gate before any write or connection.
    pvesim.clear_requests()
    apply = run_job(pdd, "apply", {**extravars, "provision_confirmation": block}, envvars)
    assert apply.status == "failed"
    # the role's confirmed one-task path records the operation in its vmanyware_provision task (as vmanyware_operation would)
    failures = module_results(apply, "vmanyware.proxmox.vmanyware_provision", ("runner_on_failed",))
    assert [r["error_code"] for r in failures] == ["provisioning_disabled"] and "operation_id" not in failures[0]
    assert "set it to true" in failures[0]["msg"]
    assert not stage_oks(apply) and {e["method"] for e in pvesim.requests()} <= {"GET"}
    assert not list(journal.glob("op-*.json"))


def test_every_optional_credential_field_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Optional credential fields left empty are injected as "": every module treats them as unset (port 8006, no CA, no pin)."""
    monkeypatch.setenv("PATH", f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    pdd = make_private_data_dir(tmp_path)
    envvars = render_credential(
        {
            "api_host": "127.0.0.1",
            "api_port": "",
            "api_token_id": "automation@pve!vmanyware",
            "api_token_secret": "00000000-empty-fields-0000-000000000000",
            "ca_certificate": "",
            "api_fingerprint": "",
        },
        pdd,
    )
    optional = {"PROXMOX_PORT", "PROXMOX_CA_PATH", "PROXMOX_FINGERPRINT"}
    assert {name: envvars[name] for name in optional} == dict.fromkeys(optional, "")
    envvars.update(
        {
            "ANSIBLE_COLLECTIONS_PATH": os.environ["ANSIBLE_COLLECTIONS_PATH"],
            "PROXMOX_TIMEOUT": "",
            "PROXMOX_USER": "",
            "PROXMOX_PASSWORD": "",
            "PROXMOX_VALIDATE_CERTS": "",
            "VMANYWARE_JOURNAL_DIR": "",
        }
    )
    extravars = job_inputs(pdd, tmp_path, tmp_path / "journal")

    plan = run_job(pdd, "plan", extravars, envvars, playbook="plan.yml")
    assert (plan.status, plan.rc) == ("successful", 0), plan.stdout.read()
    assert module_results(plan, "vmanyware.proxmox.vmanyware_plan")[0]["plan_hash"]

    # The preflight gets past its options and connects to 127.0.0.1:8006 (the default port) with the system trust store.
    preflight = run_job(pdd, "preflight", extravars, envvars, playbook="preflight.yml")
    output = preflight.stdout.read()
    assert "unable to convert" not in output and "Traceback" not in output
    [result] = module_results(preflight, "vmanyware.proxmox.vmanyware_preflight")
    assert result["error_code"] == "preflight_failed", result
    api = next(c for c in result["checks"] if c["code"] == "api_reachable")
    assert api["status"] == "failed"
