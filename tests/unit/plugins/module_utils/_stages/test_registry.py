# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stage registry (plugins/module_utils/_stages/__init__.py) against what it describes: meta/runtime.yml, the module
files, the action plugins, the role's stage files, and the tables derived from it."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils import _journal
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks import permissions as _permissions
from ansible_collections.vmanyware.proxmox.plugins.module_utils._checks.capabilities import STAGE_PURPOSES
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import plan_steps
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageLogic
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import (
    CLEANUP,
    CONTAINER,
    FAMILIES,
    PROFILE,
    STAGES,
    TEMPLATE,
    VM,
    StageSpec,
    module_stage_kinds,
    planned_steps,
    stage_kinds,
    stage_spec,
    stages_in_order,
    step_kind,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import LOGIC, build_logic, logic_class
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.adoption import AdoptionHook

REPO = Path(__file__).resolve().parents[5]
MODULE_UTILS = "ansible_collections.vmanyware.proxmox.plugins.module_utils."
ACTION_GROUP = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text(encoding="utf-8"))["action_groups"]["proxmox"]


def spec_id(spec: StageSpec) -> str:
    return "%s/%s" % (spec.family, spec.kind)


def all_tasks(tasks: list[dict[str, t.Any]]) -> t.Iterator[dict[str, t.Any]]:
    """Every task of a task file, inside blocks too."""
    for task in tasks:
        yield task
        for section in ("block", "rescue", "always"):
            yield from all_tasks(task.get(section) or [])


def test_kinds_are_unique_per_family_and_every_family_has_stages() -> None:
    for family in FAMILIES:
        kinds = stage_kinds(family)
        assert kinds and len(kinds) == len(set(kinds)), family
    assert sum(len(stages_in_order(family)) for family in FAMILIES) == len(STAGES)
    with pytest.raises(KeyError):
        stage_spec("no-such-stage")
    with pytest.raises(KeyError):
        stages_in_order("no-such-family")


@pytest.mark.parametrize("spec", STAGES, ids=spec_id)
def test_module_action_plugin_and_action_group(spec: StageSpec) -> None:
    assert (REPO / "plugins" / "modules" / (spec.module + ".py")).is_file()
    assert (REPO / "plugins" / "action" / (spec.module + ".py")).is_file()
    assert spec.module in ACTION_GROUP, "meta/runtime.yml action group proxmox lacks %s" % spec.module


@pytest.mark.parametrize("spec", [s for s in STAGES if not s.nested_playbook], ids=spec_id)
def test_logic_class_is_a_stage_of_this_kind(spec: StageSpec) -> None:
    cls = logic_class(spec)
    assert issubclass(cls, StageLogic)
    if not spec.options:  # a parametrised row shares its class with another row: the kind is the row's
        assert cls.kind == spec.kind


def test_the_profile_row_is_a_nested_playbook_with_no_logic_class_and_its_steps_map_to_it() -> None:
    """The profile stage is run by vmanyware_profile as a nested ansible-playbook: no StageLogic, its module runs the
    profile runtime, and every ``profile:<name>`` journal stage is a step of that one row."""
    nested = [spec for spec in STAGES if spec.nested_playbook]
    assert [(spec.family, spec.kind) for spec in nested] == [(VM, PROFILE), (CONTAINER, PROFILE), (TEMPLATE, PROFILE)]
    assert {spec.module for spec in nested} == {"vmanyware_profile"}
    with pytest.raises(KeyError):
        logic_class(nested[0])
    tree = ast.parse((REPO / "plugins" / "modules" / (nested[0].module + ".py")).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert "profile_entry" in imported
    assert step_kind("profile:ssh-hardening") == PROFILE and step_kind("packages") == "packages"
    vm, container, template = stage_kinds(VM), stage_kinds(CONTAINER), stage_kinds(TEMPLATE)
    assert vm.index("packages") < vm.index(PROFILE) < vm.index("snapshot")
    assert container.index("packages") < container.index(PROFILE) < container.index("snapshot")
    assert PROFILE not in module_stage_kinds(CONTAINER)  # vmanyware_container's stage choices: not a profile
    assert template.index("prepare") < template.index(PROFILE) < template.index("generalize")
    build = {"build": {}, "profiles": ["base", "ssh-hardening"]}
    assert [step.get("name") for step in planned_steps(TEMPLATE, build) if step["kind"] == PROFILE] == [
        "profile:base",
        "profile:ssh-hardening",
    ]
    assert PROFILE not in [step["kind"] for step in planned_steps(TEMPLATE, {"build": {}})]


@pytest.mark.parametrize(
    "spec", [s for s in STAGES if not s.module_stage and s.family != CLEANUP and not s.nested_playbook], ids=spec_id
)
def test_single_stage_module_runs_the_registry_logic(spec: StageSpec) -> None:
    """A module of one stage imports exactly the class the logic table binds to its row."""
    cls = logic_class(spec)
    tree = ast.parse((REPO / "plugins" / "modules" / (spec.module + ".py")).read_text(encoding="utf-8"))
    imported = {
        (node.module, alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert (cls.__module__, cls.__name__) in imported


@pytest.mark.parametrize("family", [CONTAINER, TEMPLATE])
def test_stage_option_choices_are_the_registry_kinds(family: str) -> None:
    rows = [spec for spec in stages_in_order(family) if not spec.nested_playbook]
    modules = {spec.module for spec in rows}
    assert len(modules) == 1 and all(spec.module_stage for spec in rows)
    module = importlib.import_module("ansible_collections.vmanyware.proxmox.plugins.modules." + modules.pop())
    choices = module.ENTRY.module_kwargs()["argument_spec"]["stage"]["choices"]
    assert choices == list(module_stage_kinds(family)) == [spec.kind for spec in rows]


@pytest.mark.parametrize("spec", [s for s in STAGES if s.role_file], ids=spec_id)
def test_role_stage_file_runs_the_module(spec: StageSpec) -> None:
    assert spec.role_file is not None
    tasks = yaml.safe_load((REPO / spec.role_file).read_text(encoding="utf-8"))
    calls = [task for task in all_tasks(tasks) if "vmanyware.proxmox." + spec.module in task]
    assert calls, "%s does not call %s" % (spec.role_file, spec.module)
    if spec.family == CONTAINER and not spec.nested_playbook:
        assert {call["vmanyware.proxmox." + spec.module]["stage"] for call in calls} == {
            spec.kind
        }  # every call: this stage
    if spec.family in (
        VM,
        CONTAINER,
    ):  # roles/provision/tasks/main.yml includes stages/<prefix><kind>.yml per plan step
        assert spec.role_file == "roles/provision/tasks/stages/%s%s.yml" % (
            "container_" if spec.family == CONTAINER else "",
            spec.kind,
        )


def test_every_provision_stage_file_is_a_registry_stage() -> None:
    files = {str(path.relative_to(REPO)) for path in (REPO / "roles" / "provision" / "tasks" / "stages").glob("*.yml")}
    assert files == {spec.role_file for spec in STAGES if spec.family in (VM, CONTAINER)}


def test_every_stage_module_is_in_the_registry() -> None:
    """A module built on stage_entry or run_stage runs registry stages (no stage outside the table)."""
    registered = {spec.module for spec in STAGES}
    for path in (REPO / "plugins" / "modules").glob("vmanyware_*.py"):
        text = path.read_text(encoding="utf-8")
        if "stage_entry(" in text or "run_stage(" in text or "run_cleanup(" in text:
            assert path.stem in registered, path.name


def test_privilege_table_order_endpoints_and_purposes_derive_from_the_registry() -> None:
    vm = stage_kinds(VM)
    assert _permissions.STAGE_ORDER == ("audit", *vm, "cleanup")
    assert list(_permissions.STAGE_PRIVILEGES) == ["audit", *vm, "cleanup"]
    for spec in stages_in_order(VM):
        assert spec.privileges and spec.endpoints and spec.purpose, spec.kind
        assert _permissions.STAGE_PRIVILEGES[spec.kind] == spec.privileges
        assert STAGE_PURPOSES[spec.kind] == spec.purpose
        assert [(u.method, u.path, u.vmid) for u in _permissions.ENDPOINTS if u.stage == spec.kind] == [
            (e.method, e.path, e.vmid) for e in spec.endpoints
        ]


def test_cleanup_steps_are_the_registry_rows() -> None:
    assert _journal.CLEANUP_STEPS == stage_kinds(CLEANUP)


DEFINITION = {"resources": {"diskGiB": 20}, "packages": [{"name": "git"}], "snapshotAfterProvisioning": True}
MAPPING = {"sourceDiskGiB": 8}


def test_plan_steps_follow_the_registry_conditions() -> None:
    assert [step["kind"] for step in plan_steps(DEFINITION, MAPPING, ["base"])] == list(stage_kinds(VM))
    assert PROFILE not in [step["kind"] for step in plan_steps(DEFINITION, MAPPING)]
    bare = {"resources": {"diskGiB": 8}, "packages": [], "snapshotAfterProvisioning": False}
    assert plan_steps(bare, MAPPING) == [
        {"position": n, "kind": kind}
        for n, kind in enumerate(("clone", "resources", "cloudinit", "seed", "start", "readiness"), start=1)
    ]
    container = {"guestType": "container", "appliance": {"storage": "local"}}
    assert [step["kind"] for step in plan_steps(DEFINITION, container, ["base"])] == list(stage_kinds(CONTAINER))
    assert PROFILE not in [step["kind"] for step in plan_steps(DEFINITION, container)]
    assert [
        step["kind"] for step in plan_steps(bare, {"guestType": "container", "ostemplate": "local:vztmpl/x.tar.zst"})
    ] == ["create", "start", "readiness"]
    assert [step["kind"] for step in planned_steps(TEMPLATE, {"build": {"diskGiB": 8}, "profiles": ["base"]})] == list(
        stage_kinds(TEMPLATE)
    )
    assert "disk" not in [step["kind"] for step in planned_steps(TEMPLATE, {"build": {}})]


def test_kind_is_per_instance_so_two_rows_can_share_one_logic_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parametrised stage (a second disk, say) is a second row bound to the same class, with its own kind and options."""
    disk = stage_spec("disk")
    second = dataclasses.replace(disk, kind="disk2", options={"readiness_timeout": 5.0})
    monkeypatch.setitem(LOGIC, (VM, "disk2"), LOGIC[(VM, "disk")])
    first_logic, second_logic = build_logic(disk), build_logic(second)
    assert type(first_logic) is type(second_logic) is logic_class(disk)
    assert (first_logic.kind, second_logic.kind) == ("disk", "disk2")
    assert logic_class(disk).kind == "disk"  # the class keeps its own


def test_build_logic_passes_the_options_each_stage_takes() -> None:
    readiness = build_logic(
        stage_spec("readiness"), {"readiness_timeout": 12.5, "api_token_secret": "not-for-the-stage"}
    )
    assert readiness.readiness_timeout == 12.5
    assert (
        build_logic(stage_spec("readiness")).readiness_timeout
        == logic_class(stage_spec("readiness"))().readiness_timeout
    )
    packages = build_logic(stage_spec("packages", CONTAINER), {"installed": {"git": [{"version": "1:2.39"}]}})
    assert packages.installed == {"git": "1:2.39"}
    configure = build_logic(stage_spec("configure", TEMPLATE), {"build_ssh_public_key": "ssh-ed25519 AAAA build"})
    assert configure.public_key == "ssh-ed25519 AAAA build"


def test_adoption_hooks_are_on_the_stage_logic() -> None:
    judged = {
        spec.kind for spec in stages_in_order(VM) if not spec.nested_playbook and "adopt" in vars(logic_class(spec))
    }
    assert judged == {"clone", "resources", "disk", "cloudinit", "seed", "start", "readiness"}
    assert all(isinstance(build_logic(spec), AdoptionHook) for spec in stages_in_order(VM) if spec.kind in judged)


def test_registry_imports_no_stage_logic() -> None:
    """Documents and checks import the registry: it must not reach the client, the journal or a stage's logic."""
    tree = ast.parse((REPO / "plugins" / "module_utils" / "_stages" / "__init__.py").read_text(encoding="utf-8"))
    imports: list[t.Any] = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert all(isinstance(node, ast.Import) or node.module == "__future__" for node in imports)


def test_the_logic_table_binds_every_row_by_import_and_nothing_else() -> None:
    """Every registry row has its class in ``_stages/logic.py``, imported by name (AnsiballZ packages what a module imports
    by name; tools that draw import graphs see it), and the table binds no stage the registry does not have."""
    assert set(LOGIC) == {(spec.family, spec.kind) for spec in STAGES if not spec.nested_playbook}
    tree = ast.parse((REPO / "plugins" / "module_utils" / "_stages" / "logic.py").read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert {cls.__name__ for cls in LOGIC.values()} <= imported
    assert not any(
        isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module" for node in ast.walk(tree)
    )
