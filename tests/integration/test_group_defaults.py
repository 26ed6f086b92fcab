# SPDX-License-Identifier: GPL-3.0-or-later
"""Every option of every module in the action group set at once in ``module_defaults: group/vmanyware.proxmox.proxmox``.

The option set is read from the modules' argument specs at test time (``meta/runtime.yml`` names the
modules), so an option added later is set too: with its value from ``KNOWN`` or else its documented
default or first choice. Each task gives no argument of its own; every module must still run.
Two plays cover the exclusive pairs: files (``catalog_path``/``definition_path``) and dictionaries
(``catalog``/``definition``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GROUP = "group/vmanyware.proxmox.proxmox"
# The order the modules run in (stages in check mode: they preview against the recorded operation).
RUN_ORDER = (
    "certificate_info",
    "capabilities",
    "vmid",
    "plan",
    "preflight",
    "operation",
    "operation_info",
    "clone",
    "resources",
    "disk",
    "cloudinit",
    "seed",
    "start",
    "readiness",
    "packages",
    "snapshot",
    "cleanup",
    "template_plan",
    "known_hosts",
    "profile",
)
STAGES = RUN_ORDER[7:16]
# Cleanup takes every option but refuses the open operation: its own refusal shows the options were accepted.
# vmanyware_profile: the example plan requests no profile, so it refuses the name after taking every group option.
EXPECTED_REFUSAL = {"cleanup": "cleanup_not_eligible", "profile": "invalid_option"}


def group_modules() -> list[str]:
    runtime = yaml.safe_load((REPO / "meta/runtime.yml").read_text(encoding="utf-8"))
    return list(runtime["action_groups"]["proxmox"])


def group_options() -> dict[str, dict[str, t.Any]]:
    """Every option some module of the group accepts, with one of its specs."""
    options: dict[str, dict[str, t.Any]] = {}
    for name in group_modules():
        entry = importlib.import_module("ansible_collections.vmanyware.proxmox.plugins.modules." + name).ENTRY
        for option, spec in entry.argument_spec().items():
            options.setdefault(option, spec)
    return options


@pytest.mark.parametrize("in_process", ["true", "false"], ids=["in-process", "module-process"])
def test_every_group_option_at_once(pvesim: t.Any, tmp_path: Path, in_process: str) -> None:
    pvesim.set_speed(200)
    conn = pvesim.connection
    token = conn["tokens"]["full"]
    connection = {
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": token["id"],
        "api_token_secret": token["secret"],
        "ca_path": conn["ca_file"],
    }
    settings = connection_settings(connection)
    pin = certificate_fingerprint(settings)
    scope = t.cast(str, provider_scope_id(settings, pin))
    definition = tmp_path / "definition.yml"
    definition.write_text(
        (REPO / "examples/definition.yml")
        .read_text()
        .replace("snapshotAfterProvisioning: false", "snapshotAfterProvisioning: true")
    )
    planned = build_plan(catalog_path=REPO / "examples/catalog.yml", definition_path=definition, target_vmid=201)
    team_keys = tmp_path / "team.pub"
    team_keys.write_text(yaml.safe_load(definition.read_text())["access"]["sshPublicKeys"][0] + "\n", encoding="utf-8")
    journal = tmp_path / "journal"
    gates = {"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": "true"}
    confirmation = expected_confirmation(planned.plan, scope)
    store = JournalStore(str(journal))
    preview = create_operation(
        store,
        planned=planned,
        provider_scope_id=scope,
        confirmation=confirmation,
        idempotency_key="group-test",
        environ=gates,
        check_mode=True,
    )["preview_document"]
    operation_id = create_operation(
        store,
        planned=planned,
        provider_scope_id=scope,
        confirmation=confirmation,
        idempotency_key="group-test",
        environ=gates,
    )["operation_id"]

    (tmp_path / "ssh").mkdir(exist_ok=True)
    for name in ("node_key", "node_known_hosts"):
        (tmp_path / "ssh" / name).write_text("unused: the node SSH probe below meets a closed port\n")
    known: dict[str, t.Any] = {
        **connection,
        "api_user": token["id"].split("!", 1)[0],
        "api_password": "unused-with-a-token",
        "validate_certs": True,
        "api_fingerprint": pin,
        "api_timeout": 30,
        "catalog_path": str(REPO / "examples/catalog.yml"),
        "definition_path": str(definition),
        "target_vmid": 201,
        "addresses": {},  # the example definition names no network: nothing is leased
        "target_node": "pve-test",  # the mapping's own node
        "prefer": "pve-test",  # vmanyware_placement: keep this node while it qualifies
        "catalog": yaml.safe_load((REPO / "examples/catalog.yml").read_text()),
        "definition": yaml.safe_load(definition.read_text()),
        "journal_dir": str(journal),
        "confirmation": confirmation,
        "idempotency_key": "group-test",
        "provisioning_enabled": True,
        "snapshots_enabled": True,
        "state": "present",
        "fail_on": "failed",
        "operation_id": operation_id,
        "preview_operation": preview,
        "wait_budget": 20,
        "timeout": 600,
        "lock_wait": 60,
        "template_vmid": 9000,
        # vmanyware_capabilities' node SSH probe: a closed loopback port (the node reports node_ssh_unreachable)
        "node_ssh": {
            "private_key_file": str(tmp_path / "ssh" / "node_key"),
            "known_hosts_file": str(tmp_path / "ssh" / "node_known_hosts"),
            "endpoints": {"pve-test": "127.0.0.1:9"},
        },
        "lifecycle_enabled": True,
        "reason": "group defaults test",
        "definition_name": "kernel-lab",
        "since": "2026-01-01",
        "owner": "group-test",
        "vmid": 201,
        "vmid_range": [100, 999],
        # The template build and container modules' own options (only template_plan of them runs here: offline).
        "template_build_path": str(REPO / "examples/template-build.yml"),
        "template_build": (REPO / "examples/template-build.yml").read_text(),
        "installed": {},
        "build_ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGroupDefaultsTestKeyOnly group-test",
        "passwd_status": "L",
        "authorized_keys_left": 0,
        # vmanyware_known_hosts: writes the operation's block into a file of this test
        "path": str(tmp_path / "ssh" / "known_hosts"),
        "known_hosts": ["192.0.2.10 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGroupDefaultsTest"],
        "known_hosts_path": str(tmp_path / "ssh" / "provision_known_hosts"),  # vmanyware_provision's (not run here)
        "profile": "base",  # vmanyware_profile: a name the example plan does not request (refused, see EXPECTED_REFUSAL)
        # vmanyware_profile's SSH transport (never used: the profile is refused before any transport is chosen)
        "ssh_host": "127.0.0.1",
        "ssh_port": 2222,
        "ssh_private_key_file": str(tmp_path / "ssh" / "id_ed25519"),
        "known_hosts_file": str(tmp_path / "ssh" / "container_known_hosts"),
        # Presets (read only when a definition names one: the example names none) and a key source repeating the
        # definition's own key, listed once: the definition, so the recorded operation's hashes, are unchanged.
        "presets_path": str(REPO / "examples/presets"),
        "presets": [(REPO / "examples/presets/build-box.yml").read_text()],
        # Profile declarations (read only when a definition requests one: the example requests none)
        "profiles_path": str(REPO / "examples/profiles"),
        "profiles": [(REPO / "examples/profiles/base.yml").read_text()],
        "ssh_key_sources": [{"name": "team", "path": str(team_keys)}],
        # vmanyware_plan's repeat check: the mapping the operation recorded, which the current catalog still has
        "repeat_mapping": dict(planned.mapping),
    }
    options = group_options()
    values: dict[str, t.Any] = {}
    for name, spec in options.items():
        if name in known:
            values[name] = known[name]
        elif spec.get("default") is not None:
            values[name] = spec["default"]
        elif spec.get("choices"):
            values[name] = spec["choices"][0]
    assert set(options) - set(values) == set(), "options without a value to test with"
    exclusive = {
        "files": ("catalog", "definition", "template_build", "presets", "profiles"),
        "dictionaries": ("catalog_path", "definition_path", "template_build_path", "presets_path", "profiles_path"),
    }

    plays = []
    for label, left_out in exclusive.items():
        defaults = {name: value for name, value in values.items() if name not in left_out}
        tasks = []
        for short in RUN_ORDER:
            task: dict[str, t.Any] = {
                "name": f"{label} {short}",
                f"vmanyware.proxmox.vmanyware_{short}": {},
                "register": f"out_{short}",
            }
            if short in STAGES or short in EXPECTED_REFUSAL:
                task["check_mode"] = True
            if short in EXPECTED_REFUSAL:
                task["failed_when"] = "out_%s.error_code | default('') != '%s'" % (short, EXPECTED_REFUSAL[short])
            tasks.append(task)
        plays.append(
            {
                "name": label,
                "hosts": "localhost",
                "gather_facts": False,
                "module_defaults": {GROUP: defaults},
                "tasks": tasks,
            }
        )
    playbook = tmp_path / "group.yml"
    playbook.write_text(json.dumps(plays), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VMANYWARE_", "PROXMOX_"))}
    env.update(gates, ANSIBLE_NOCOLOR="1", VMANYWARE_IN_PROCESS=in_process)
    completed = subprocess.run(
        [str(BIN / "ansible-playbook"), str(playbook)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout[-5000:]
    assert re.search(
        r"localhost\s+:\s+ok=%d\s+changed=\d+\s+unreachable=0\s+failed=0" % (2 * len(RUN_ORDER)), completed.stdout
    )
    assert not [e for e in pvesim.requests() if e["method"] != "GET"]  # stages previewed, the operation existed already
    assert pvesim.schema_violations() == []
    assert token["secret"] not in completed.stdout
    assert (tmp_path / "ssh" / "known_hosts").read_text() == "# BEGIN vmanyware {0}\n{1}\n# END vmanyware {0}\n".format(
        operation_id, known["known_hosts"][0]
    )
