# SPDX-License-Identifier: GPL-3.0-or-later
"""One run of a non-VM path in this process, exactly as its module runs it: ``python path_driver.py CONFIG.json``.

Like driver.py (the VM path), a cheap stand-in for ``ansible-playbook``; the paths (path_faults.py):

- ``container``: the container operation recorded (``create_operation``), then every planned stage through
  ``run_stage`` with the registry's container logic (``vmanyware_container``'s action);
- ``template``: the template build operation (``create_template_operation``), then every stage through ``run_stage``
  with ``_template_stages.stage_logic`` (``vmanyware_template_stage``'s action; the guest work is the stand-in);
- ``cleanup-vm`` / ``cleanup-container``: set-up once (the VM stages up to ``start``, or the container stages up to
  ``start``, then the operation abandoned through ``run_operation``), then ``run_cleanup`` with ``stop: true``
  (``vmanyware_cleanup``'s action) until done;
- ``abandon``: set-up (the operation recorded, the clone stage run), then, on a later run, ``run_operation('abandoned')``
  with a client factory that fails if called, then the clone stage once more (refused: ``operation_abandoned``).

Fault rules (``faults``: ``[{"stage": kind, "rule": {...}}]``) are armed through the admin API right before the stage
(or cleanup step) they name starts, as driver.py does. State between runs (operation id, set-up done) is kept in
``state_file``. Exit status: 0 completed (JSON on stdout), 3 a VmanywareError (JSON: code, stage, message).
"""

from __future__ import annotations

import json
import os
import sys
import typing as t

for _root in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
    if _root and _root not in sys.path:
        sys.path.insert(0, _root)

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.cleanup import run_cleanup  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    OperationInputs,
    create_operation,
    expected_confirmation,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.operation_states import run_operation  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import CONTAINER, VM, stage_spec  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import build_logic  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import build_template_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import (
    create_template_operation,
    expected_template_confirmation,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import template_stage as template_logic  # noqa: E402

GATES = {
    "VMANYWARE_PROVISIONING_ENABLED": "true",
    "VMANYWARE_SNAPSHOTS_ENABLED": "true",
    "VMANYWARE_LIFECYCLE_ENABLED": "true",
}
SETUP_UNTIL = "start"  # the cleanup paths' set-up runs the stages up to this one: the guest exists and runs


def _arm(config: dict[str, t.Any], kinds: t.Iterable[str]) -> None:
    """POST the fault rules declared for ``kinds`` (admin API) right before they run."""
    rules = [item["rule"] for item in config.get("faults", []) if item["stage"] in kinds]
    if not rules:
        return
    import requests  # pylint: disable=import-outside-toplevel

    admin = config["admin"]
    for rule in rules:
        resp = requests.post(
            admin["url"] + "/faults",
            json=rule,
            headers={"X-Pvesim-Admin": admin["token"]},
            verify=admin["ca_file"],
            timeout=30,
        )
        resp.raise_for_status()


class Path:
    """One path's run: its parameters, its operation, and the stage currently running (for the error report)."""

    def __init__(self, config: dict[str, t.Any]) -> None:
        self.config = config
        conn = config["conn"]
        self.conn = conn
        self.stage = "operation"
        self.params: dict[str, t.Any] = {
            "api_host": conn["host"],
            "api_port": conn["port"],
            "api_token_id": conn["token_id"],
            "api_token_secret": conn["token_secret"],
            "ca_path": conn.get("ca_file"),
            "api_fingerprint": conn.get("fingerprint"),
            "validate_certs": True,
            "api_timeout": config.get("api_timeout", 10.0),
            "journal_dir": config["journal_dir"],
            "wait_budget": config.get("wait_budget", 6.0),
            "timeout": None,
            "lock_wait": config.get("lock_wait", 5.0),
            "provisioning_enabled": None,
            "snapshots_enabled": None,
            "lifecycle_enabled": None,
            "set_operation_fact": False,
            # container / template stage options (their modules' defaults)
            "readiness_timeout": config.get("readiness_timeout", 20.0),
            "installed": None,
            "write_check": False,
            "build_ssh_public_key": config.get("build_ssh_public_key"),
            "prepared_by": "stand-in",
            "passwd_status": None,
            "authorized_keys_left": None,
            "force_stop": False,
            # cleanup options
            "stop": True,
            "allow_completed": False,
        }
        self.state_file = config["state_file"]
        self.state: dict[str, t.Any] = {}
        if os.path.exists(self.state_file):
            with open(self.state_file, encoding="utf-8") as handle:
                self.state = json.load(handle)

    def save(self) -> None:
        with open(self.state_file, "w", encoding="utf-8") as handle:
            json.dump(self.state, handle)

    def scope(self) -> str:
        conn = self.conn
        settings = build_settings(
            host=conn["host"],
            port=conn["port"],
            token_id=conn["token_id"],
            token_secret=conn["token_secret"],
            ca_path=conn.get("ca_file"),
            fingerprint=conn.get("fingerprint"),
            timeout=self.params["api_timeout"],
        )
        return t.cast(str, provider_scope_id(settings, certificate_fingerprint(settings)))

    # -- operations -------------------------------------------------------------------------------------
    def guest_operation(self, catalog: str, definition: str, vmid: int) -> list[str]:
        planned = build_plan(catalog=catalog, definition=definition, target_vmid=vmid)
        scope = self.scope()
        created = create_operation(
            open_store(self.params["journal_dir"]),
            planned=planned,
            provider_scope_id=scope,
            confirmation=expected_confirmation(planned.plan, scope),
            idempotency_key=None,
            environ=GATES,
        )
        self.params["operation_id"] = created["operation_id"]
        self.params["catalog"] = catalog
        return [step["kind"] for step in planned.plan["steps"]]

    def template_operation(self) -> list[str]:
        planned = build_template_plan(text=self.config["template_document"])
        scope = self.scope()
        created = create_template_operation(
            open_store(self.params["journal_dir"]),
            planned=planned,
            provider_scope_id=scope,
            confirmation=expected_template_confirmation(planned.plan, scope),
            idempotency_key=None,
            environ=GATES,
        )
        self.params["operation_id"] = created["operation_id"]
        return [step["kind"] for step in planned.plan["steps"]]

    # -- runs -----------------------------------------------------------------------------------------------
    def stages(self, kinds: list[str], logic: t.Callable[[str], t.Any], arm: bool = True) -> None:
        for kind in kinds:
            self.stage = kind
            if arm:
                _arm(self.config, [kind])
            for _round in range(int(self.config.get("max_rounds", 40))):
                if run_stage(self.params, logic(kind), check_mode=False, diff=False)["done"]:
                    break
            else:
                raise VmanywareError(code="task_timeout", details={"stage": kind})

    def abandon(self) -> dict[str, t.Any]:
        def no_client(_settings: t.Any) -> t.Any:
            raise AssertionError("abandon built a client")

        def no_input() -> t.Any:
            raise AssertionError("abandon read plan inputs or the connection")

        inputs = OperationInputs(
            store=lambda: open_store(self.params["journal_dir"]), planned=no_input, connection=no_input
        )
        return run_operation(
            "abandoned",
            inputs,
            confirmation=None,
            idempotency_key=None,
            provisioning_option=None,
            operation_id=self.params["operation_id"],
            reason="reliability: path faults",
            environ=GATES,
            check_mode=False,
            client_factory=no_client,
        )

    def cleanup(self) -> dict[str, t.Any]:
        self.stage = "stop"
        _arm(self.config, ["stop", "destroy"])  # one run_cleanup call runs both steps
        for _round in range(int(self.config.get("max_rounds", 40))):
            result = run_cleanup(self.params, check_mode=False, environ=GATES)
            if result["done"]:
                return result
            self.stage = str((result.get("progress") or {}).get("step") or self.stage)
        raise VmanywareError(code="task_timeout", details={"stage": self.stage})

    def run(self) -> dict[str, t.Any]:
        path = self.config["path"]

        def vm_logic(kind: str) -> t.Any:
            return build_logic(stage_spec(kind, VM), self.params)

        def ct_logic(kind: str) -> t.Any:
            return build_logic(stage_spec(kind, CONTAINER), self.params)

        out: dict[str, t.Any] = {}
        if path == "container":
            self.stages(
                self.guest_operation(
                    self.config["container_catalog"], self.config["container_definition"], self.config["vmid"]
                ),
                ct_logic,
            )
        elif path == "template":
            self.stages(self.template_operation(), lambda kind: template_logic(kind, self.params))
        elif path in ("cleanup-vm", "cleanup-container"):
            if not self.state.get("setup"):
                # (once: after the abandonment the target is free, and recording the plan again would start a new operation)
                if path == "cleanup-vm":
                    kinds = self.guest_operation(self.config["catalog"], self.config["definition"], self.config["vmid"])
                    logic = vm_logic
                else:
                    kinds = self.guest_operation(
                        self.config["container_catalog"], self.config["container_definition"], self.config["vmid"]
                    )
                    logic = ct_logic
                self.stages(kinds[: kinds.index(SETUP_UNTIL) + 1], logic, arm=False)
                self.abandon()
                self.state.update(setup=True, operation_id=self.params["operation_id"])
                self.save()
            self.params["operation_id"] = self.state["operation_id"]
            out["cleanup"] = {k: v for k, v in self.cleanup().items() if k in ("changed", "done", "removed")}
        elif path == "abandon":
            kinds = self.guest_operation(self.config["catalog"], self.config["definition"], self.config["vmid"])
            if not self.state.get("setup"):
                self.stages(kinds[:1], vm_logic, arm=False)
                self.state["setup"] = True
                self.save()
                out["setup"] = True
            else:
                self.stage = "abandon"
                out["abandon"] = {k: v for k, v in self.abandon().items() if k in ("changed", "operation_id")}
                self.stage = kinds[1]
                try:
                    self.stages(kinds[1:2], vm_logic, arm=False)
                except VmanywareError as err:
                    out["after"] = err.code
        else:
            raise ValueError(path)
        out["operation_id"] = self.params.get("operation_id")
        return out


def main(config_path: str) -> int:
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    os.environ.update(GATES)
    path = Path(config)
    try:
        out = path.run()
    except VmanywareError as err:
        sys.stdout.write(
            json.dumps(
                {
                    "result": "error",
                    "code": err.code,
                    "stage": path.stage,
                    "message": err.message,
                    "operation_id": path.params.get("operation_id"),
                }
            )
            + "\n"
        )
        return 3
    sys.stdout.write(json.dumps(dict(out, result="completed")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
