# SPDX-License-Identifier: GPL-3.0-or-later
"""Running a module's entry in Ansible's worker: the same validation, errors and censoring as the module process."""

from __future__ import annotations

import os
import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.module import ModuleEntry
from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_operation_info, vmanyware_plan
from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import (
    in_process_enabled,
    run_entry_in_process,
    task_environment,
)

REPO = Path(__file__).resolve().parents[4]
SECRET = "canary-0123456789abcdef"


def _entry(action: t.Callable[..., dict[str, t.Any]]) -> ModuleEntry:
    def spec() -> dict[str, dict[str, t.Any]]:
        return {
            "name": {"type": "str", "required": True},
            "count": {"type": "int", "default": 2},
            "api_token_secret": {
                "type": "str",
                "no_log": True,
                "fallback": (lambda *a, **k: os.environ["CANARY_SECRET"], []),
            },
            "mode": {"type": "str", "choices": ["a", "b"], "default": "a"},
        }

    return ModuleEntry(argument_spec=spec, action=action)


def test_plan_module_runs_with_validated_params() -> None:
    result = run_entry_in_process(
        vmanyware_plan.ENTRY,
        "vmanyware_plan",
        {
            "catalog_path": str(REPO / "examples/catalog.yml"),
            "definition_path": str(REPO / "examples/definition.yml"),
            "target_vmid": 201,
        },
        check_mode=False,
        diff=False,
    )
    assert "failed" not in result and result["changed"] is False
    assert len(result["plan_hash"]) == 64 and result["plan"]["target"]["vmid"] == 201
    assert result["invocation"]["module_args"]["target_vmid"] == 201


def test_types_defaults_and_check_mode_reach_the_action(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_SECRET", SECRET)
    seen: list[tuple[dict[str, t.Any], bool, bool]] = []

    def action(params: t.Mapping[str, t.Any], check_mode: bool, diff: bool) -> dict[str, t.Any]:
        seen.append((dict(params), check_mode, diff))
        return {"changed": True}

    result = run_entry_in_process(_entry(action), "m", {"name": "x", "count": "5"}, check_mode=True, diff=True)
    assert result["changed"] is True
    params, check_mode, diff = seen[0]
    assert (
        params["count"] == 5 and params["mode"] == "a" and params["api_token_secret"] == SECRET and check_mode and diff
    )


@pytest.mark.parametrize(
    "args, fragment",
    [
        ({"count": 1}, "missing required arguments: name"),
        ({"name": "x", "bogus": 1}, "Unsupported parameters for (m) module: bogus"),
        ({"name": "x", "mode": "c"}, "value of mode must be one of"),
        ({"name": "x", "count": "many"}, "cannot be converted to an int"),
    ],
)
def test_option_errors_fail_like_ansible_module(
    monkeypatch: pytest.MonkeyPatch, args: dict[str, t.Any], fragment: str
) -> None:
    monkeypatch.setenv("CANARY_SECRET", SECRET)
    result = run_entry_in_process(_entry(lambda *a: {"changed": True}), "m", args, check_mode=False, diff=False)
    assert result["failed"] is True and fragment in result["msg"]


def test_plan_inputs_mutually_exclusive_and_required_one_of() -> None:
    both = run_entry_in_process(
        vmanyware_plan.ENTRY,
        "vmanyware_plan",
        {"catalog_path": "a", "catalog": "b", "definition_path": "c", "target_vmid": 201},
        check_mode=False,
        diff=False,
    )
    assert both["failed"] and "mutually exclusive" in both["msg"]
    neither = run_entry_in_process(
        vmanyware_plan.ENTRY, "vmanyware_plan", {"catalog_path": "a", "target_vmid": 201}, check_mode=False, diff=False
    )
    assert neither["failed"] and "one of the following is required" in neither["msg"]


def test_no_log_values_are_censored_in_results_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_SECRET", SECRET)

    def leaky(params: t.Mapping[str, t.Any], check_mode: bool, diff: bool) -> dict[str, t.Any]:
        return {"changed": False, "echo": "token=%s" % params["api_token_secret"]}

    result = run_entry_in_process(_entry(leaky), "m", {"name": "x"}, check_mode=False, diff=False)
    assert SECRET not in repr(result) and "********" in result["echo"]
    bad = run_entry_in_process(_entry(leaky), "m", {"name": "x", "count": SECRET}, check_mode=False, diff=False)
    assert bad["failed"] and SECRET not in repr(bad)


def test_errors_become_fixed_codes_without_exception_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CANARY_SECRET", SECRET)

    def refuse(*_a: t.Any) -> dict[str, t.Any]:
        raise VmanywareError(code="plan_changed", details={"fields": ["providerScopeId"]})

    def crash(*_a: t.Any) -> dict[str, t.Any]:
        raise RuntimeError("provider body " + SECRET)

    refused = run_entry_in_process(_entry(refuse), "m", {"name": "x"}, check_mode=False, diff=False)
    assert (
        refused["failed"]
        and refused["error_code"] == "plan_changed"
        and refused["error_details"] == {"fields": ["providerScopeId"]}
    )
    crashed = run_entry_in_process(_entry(crash), "m", {"name": "x"}, check_mode=False, diff=False)
    crashed.pop("invocation")
    assert crashed == {
        "failed": True,
        "msg": "An unexpected internal error occurred.",
        "error_code": "internal_error",
        "changed": False,
    }


def test_journal_module_reports_a_bad_operation_id_with_its_code(tmp_path: Path) -> None:
    result = run_entry_in_process(
        vmanyware_operation_info.ENTRY,
        "vmanyware_operation_info",
        {"operation_id": "../etc/passwd", "journal_dir": str(tmp_path)},
        check_mode=False,
        diff=False,
    )
    assert result["failed"] and result["error_code"] == "invalid_option"
    # Like a module's: the message and error fields never echo the value (only -vvv's invocation shows the arguments).
    assert "passwd" not in repr({k: v for k, v in result.items() if k != "invocation"})


def test_the_listing_warns_about_a_bad_operation_file_and_lists_the_others(tmp_path: Path) -> None:
    """Issue 31: vmanyware_operation_info without operation_id skips a corrupt file with a warning naming it (no content), and the
    same file asked for by id fails with journal_corrupt."""
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

    store = JournalStore(str(tmp_path / "journal"))
    ids = []
    for vmid in (201, 202):
        planned = build_plan(
            catalog_path=REPO / "examples/catalog.yml",
            definition_path=REPO / "examples/definition.yml",
            target_vmid=vmid,
        )
        ids.append(
            store.create_operation(
                idempotency_key=None,
                provider_scope_id="pve:x",
                definition=planned.definition,
                mapping=planned.mapping,
                plan=planned.plan,
                confirmation={"confirmed": True},
                target_node="pve",
                target_vmid=vmid,
                stage_kinds=["clone"],
            )[0]["operationId"]
        )
    Path(store.operation_path(ids[1])).write_text('{"secret-looking": "PLANTED-CONTENT"')
    listed = run_entry_in_process(
        vmanyware_operation_info.ENTRY,
        "vmanyware_operation_info",
        {"journal_dir": store.journal_dir},
        check_mode=False,
        diff=False,
    )
    assert "failed" not in listed and [row["operation_id"] for row in listed["operations"]] == [ids[0]]
    assert listed["skipped_files"] == [{"file": ids[1] + ".json", "operation_id": ids[1], "code": "journal_corrupt"}]
    assert "skipped" not in listed  # Ansible would show the task as skipped
    assert len(listed["warnings"]) == 1 and ids[1] + ".json was skipped (journal_corrupt)" in listed["warnings"][0]
    assert "PLANTED" not in repr(listed)
    by_id = run_entry_in_process(
        vmanyware_operation_info.ENTRY,
        "vmanyware_operation_info",
        {"journal_dir": store.journal_dir, "operation_id": ids[1]},
        check_mode=False,
        diff=False,
    )
    assert by_id["failed"] and by_id["error_code"] == "journal_corrupt" and "PLANTED" not in repr(by_id)


def test_switch_and_task_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert in_process_enabled({}) and in_process_enabled({"VMANYWARE_IN_PROCESS": "true"})
    assert not in_process_enabled({"VMANYWARE_IN_PROCESS": "false"}) and not in_process_enabled(
        {"VMANYWARE_IN_PROCESS": " False "}
    )
    monkeypatch.setenv("KEEP_ME", "before")
    monkeypatch.delenv("NEW_ONE", raising=False)
    with task_environment({"KEEP_ME": "during", "NEW_ONE": 7}):
        assert os.environ["KEEP_ME"] == "during" and os.environ["NEW_ONE"] == "7"
    assert os.environ["KEEP_ME"] == "before" and "NEW_ONE" not in os.environ


def test_arguments_that_are_not_json_fail_safely() -> None:
    result = run_entry_in_process(
        _entry(lambda *a: {"changed": True}), "m", {"name": object()}, check_mode=False, diff=False
    )
    assert result == {"failed": True, "msg": "The task arguments are not JSON values (m module)."}


class _Fake:
    def __init__(self, **attrs: t.Any) -> None:
        self.__dict__.update(attrs)


def _action(transport: str = "local", become: bool = False, async_val: int = 0) -> t.Any:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import InProcessModuleAction

    action = InProcessModuleAction.__new__(InProcessModuleAction)
    action._connection = _Fake(transport=transport)  # pylint: disable=protected-access
    action._play_context = _Fake(become=become)  # pylint: disable=protected-access
    action._task = _Fake(
        resolved_action="vmanyware.proxmox.vmanyware_plan", action="vmanyware_plan", async_val=async_val
    )
    return action


def test_in_process_only_where_it_is_the_same_as_the_module(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils import _in_process

    monkeypatch.delenv("VMANYWARE_IN_PROCESS", raising=False)
    assert _action()._entry() is vmanyware_plan.ENTRY  # pylint: disable=protected-access
    assert _action(transport="ssh")._entry() is None  # pylint: disable=protected-access
    assert _action(become=True)._entry() is None  # pylint: disable=protected-access
    assert _action(async_val=30)._entry() is None  # pylint: disable=protected-access
    monkeypatch.setattr(_in_process, "missing_libraries", lambda names: ["jsonschema"])
    assert _action()._entry() is None  # pylint: disable=protected-access
    monkeypatch.undo()
    monkeypatch.setenv("VMANYWARE_IN_PROCESS", "false")
    assert _action()._entry() is None  # pylint: disable=protected-access


def test_group_defaults_a_module_does_not_take_are_left_out() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import without_foreign_group_defaults

    args = {
        "catalog_path": "/c.yml",
        "definition_path": "/d.yml",
        "target_vmid": 201,
        "journal_dir": "/j",
        "operation_id": "op-x",
    }
    kept = without_foreign_group_defaults(args, vmanyware_plan.ENTRY, {"journal_dir", "operation_id", "catalog_path"})
    assert kept == {"catalog_path": "/c.yml", "definition_path": "/d.yml", "target_vmid": 201}
    # The same options given on the task itself are not dropped: the module then refuses them as usual.
    assert without_foreign_group_defaults(args, vmanyware_plan.ENTRY, set()) == args
    # A group default gives way to the other member of an exclusive pair that the task sets ...
    both = dict(args, catalog="apiVersion: x")
    kept = without_foreign_group_defaults(both, vmanyware_plan.ENTRY, {"catalog_path", "journal_dir", "operation_id"})
    assert "catalog_path" not in kept and kept["catalog"] == "apiVersion: x"
    # ... but two group defaults that contradict each other are left for the module to refuse.
    kept = without_foreign_group_defaults(both, vmanyware_plan.ENTRY, {"catalog_path", "catalog"})
    assert kept["catalog_path"] and kept["catalog"]


def test_a_group_default_outside_the_choices_of_this_module_is_left_out() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_operation, vmanyware_vmid
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import without_foreign_group_defaults

    # state: present is vmanyware_operation's; vmanyware_vmid (reserved, released) keeps its own default.
    assert "state" not in without_foreign_group_defaults(
        {"state": "present", "owner": "o"}, vmanyware_vmid.ENTRY, {"state"}
    )
    assert without_foreign_group_defaults({"state": "present"}, vmanyware_operation.ENTRY, {"state"}) == {
        "state": "present"
    }
    assert without_foreign_group_defaults({"state": "released"}, vmanyware_vmid.ENTRY, {"state"}) == {
        "state": "released"
    }
    # On the task itself a wrong choice is left for the module to refuse.
    assert without_foreign_group_defaults({"state": "present"}, vmanyware_vmid.ENTRY, set()) == {"state": "present"}


def test_check_mode_stage_gets_the_preview_of_its_operation_id() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.modules import vmanyware_clone
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import (
        PREVIEW_FACT,
        with_preview_document,
    )

    document = {"operationId": "op-preview"}
    facts = {PREVIEW_FACT: document}
    assert with_preview_document({"operation_id": "op-preview"}, vmanyware_clone.ENTRY, facts) == {
        "operation_id": "op-preview",
        "preview_operation": document,
    }
    for args in (
        {"operation_id": "op-other"},
        {"operation_id": "op-preview", "preview_operation": {"operationId": "op-given"}},
        {},
    ):
        assert with_preview_document(args, vmanyware_clone.ENTRY, facts) == args
    assert with_preview_document({"operation_id": "op-preview"}, vmanyware_clone.ENTRY, {PREVIEW_FACT: None}) == {
        "operation_id": "op-preview"
    }
    assert with_preview_document({"operation_id": "op-preview"}, vmanyware_operation_info.ENTRY, facts) == {
        "operation_id": "op-preview"
    }


# -- the private ansible-core internals, each behind a guard with a fallback (docs/development.md) ---------------------------


def test_without_no_log_values_nothing_runs_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils import _in_process

    validate = ArgumentSpecValidator.validate

    def renamed(self: t.Any, *args: t.Any, **kwargs: t.Any) -> t.Any:
        result = validate(self, *args, **kwargs)
        result._no_log_values_renamed = result.__dict__.pop("_no_log_values")  # pylint: disable=protected-access
        return result

    ran: list[bool] = []
    monkeypatch.setenv("CANARY_SECRET", SECRET)
    monkeypatch.setattr(_in_process.ArgumentSpecValidator, "validate", renamed)
    with pytest.raises(
        _in_process.NotInProcess, match=r"^ansible-core internals unavailable: ValidationResult._no_log_values$"
    ):
        run_entry_in_process(
            _entry(lambda *a: ran.append(True) or {}), "m", {"name": "n"}, check_mode=False, diff=False
        )
    assert not ran
    monkeypatch.undo()
    monkeypatch.setenv("CANARY_SECRET", SECRET)
    assert (
        run_entry_in_process(
            _entry(lambda params, *a: {"echo": params["api_token_secret"]}),
            "m",
            {"name": "n"},
            check_mode=False,
            diff=False,
        )["echo"]
        == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"
    )


def test_no_log_values_of_an_unexpected_shape_are_refused() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import NotInProcess, no_log_values

    assert no_log_values(_Fake(_no_log_values={"a", "b"})) == {"a", "b"}
    for wrong in (_Fake(), _Fake(_no_log_values=["a"]), _Fake(_no_log_values={1})):
        with pytest.raises(NotInProcess):
            no_log_values(wrong)


def test_action_groups_from_the_play_else_from_this_collection(tmp_path: Path) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import action_groups, own_action_groups

    fqcn = "vmanyware.proxmox.vmanyware_plan"
    play = _Fake(_action_groups={fqcn: ["vmanyware.proxmox.proxmox", "other.collection.all"]})
    task = _Fake(resolved_action=fqcn, action="vmanyware_plan", _parent=_Fake(_play=play))
    assert action_groups(task) == ["vmanyware.proxmox.proxmox", "other.collection.all"]
    # Without the play's private mapping: the groups of meta/runtime.yml, as the play resolves them for this collection.
    for parent in (_Fake(_play=_Fake()), _Fake()):
        assert action_groups(_Fake(resolved_action=fqcn, action="vmanyware_plan", _parent=parent)) == [
            "vmanyware.proxmox.proxmox"
        ]
    assert own_action_groups("community.proxmox.proxmox_kvm") == []
    runtime = tmp_path / "runtime.yml"
    runtime.write_text(
        "action_groups:\n  proxmox: [vmanyware_plan]\n  stages: [vmanyware.proxmox.vmanyware_plan, vmanyware_clone]\n"
    )
    assert own_action_groups(fqcn, runtime) == ["vmanyware.proxmox.proxmox", "vmanyware.proxmox.stages"]
    assert own_action_groups(fqcn, tmp_path / "missing.yml") == []


def test_group_defaults_are_left_out_without_the_play_mapping() -> None:
    action = _action()
    action._task = _Fake(
        resolved_action="vmanyware.proxmox.vmanyware_plan",
        action="vmanyware_plan",
        check_mode=False,  # pylint: disable=protected-access
        module_defaults=[{"group/vmanyware.proxmox.proxmox": {"journal_dir": "/j"}}],
        args={"catalog_path": "/c.yml", "definition_path": "/d.yml", "target_vmid": 201, "journal_dir": "/j"},
    )
    action._templar = _Fake(template=lambda value: value)  # pylint: disable=protected-access
    assert action._module_args({}) == {"catalog_path": "/c.yml", "definition_path": "/d.yml", "target_vmid": 201}  # pylint: disable=protected-access


def test_each_reason_for_the_module_process_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils import _in_process

    def reason(action: t.Any) -> str:
        with pytest.raises(_in_process.NotInProcess) as caught:
            action._in_process_entry()  # pylint: disable=protected-access
        return str(caught.value)

    monkeypatch.delenv("VMANYWARE_IN_PROCESS", raising=False)
    assert reason(_action(transport="ssh")) == "connection ssh"
    assert reason(_action(become=True)) == "become"
    assert reason(_action(async_val=30)) == "async"
    monkeypatch.setattr(_in_process, "missing_libraries", lambda names: ["jsonschema"])
    assert reason(_action()) == "missing on the controller: jsonschema"
    monkeypatch.setenv("VMANYWARE_IN_PROCESS", "false")
    assert reason(_action()) == "VMANYWARE_IN_PROCESS=false"


def test_task_environment_through_actionbase_else_the_module_process() -> None:
    from ansible_collections.vmanyware.proxmox.plugins.plugin_utils._in_process import NotInProcess

    action = _action()

    def compute(raw_environment_out: dict[str, t.Any] | None = None) -> str:
        assert raw_environment_out is not None
        raw_environment_out["A"] = "1"
        return "A=1"

    action._compute_environment_string = compute  # pylint: disable=protected-access
    assert action._task_environment() == {"A": "1"}  # pylint: disable=protected-access
    action._compute_environment_string = lambda: "A=1"  # pylint: disable=protected-access  # a signature without the out parameter
    with pytest.raises(NotInProcess, match="_compute_environment_string"):
        action._task_environment()  # pylint: disable=protected-access
