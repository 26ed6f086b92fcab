# SPDX-License-Identifier: GPL-3.0-or-later
"""One provisioning run in this process, stage after stage, exactly as the modules run them (``run_stage``), or with
``chained: true`` (``VMANYWARE_RELIABILITY_CHAINED=1``) in one ``vmanyware_provision`` call, as the provision role runs them.

Used by the reliability harness as a cheap stand-in for ``ansible-playbook`` (no Ansible start-up per
module): ``python driver.py CONFIG.json``. The config names the simulator connection, the journal, the
inputs, and optionally a crash point (``VMANYWARE_TEST_CRASH_AT``) that is armed only while one stage runs
(``crash_stage``; ``operation`` = the creation, ``None`` = the whole run). ``enumerate: true`` records every
journal write (stage kind x status) and every mutating request instead, for the list of kill points.

Exit status: 0 completed; 3 a VmanywareError (JSON on stdout: code, stage, message); 137 a crash hook fired.
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing as t

for _root in os.environ.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep):
    if _root and _root not in sys.path:
        sys.path.insert(0, _root)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "crash_harness"))

import vmanyware_crash_hook as crash_hook  # noqa: E402  # the crash points, injected (tests/crash_harness)

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import client as _client
from ansible_collections.vmanyware.proxmox.plugins.module_utils import _journal
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime import provision as _provision
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import runner as _stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import (
    create_operation,
    expected_confirmation,
)  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.cloudinit import CloudinitStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.disk import DiskStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.packages import PackagesStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import ReadinessStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.resources import ResourcesStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import SeedStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.snapshot import SnapshotStage  # noqa: E402
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.start import StartStage  # noqa: E402

LOGICS: dict[str, t.Callable[[dict[str, t.Any]], t.Any]] = {
    "clone": lambda c: CloneStage(),
    "resources": lambda c: ResourcesStage(),
    "disk": lambda c: DiskStage(),
    "cloudinit": lambda c: CloudinitStage(),
    "seed": lambda c: SeedStage(),
    "start": lambda c: StartStage(),
    "readiness": lambda c: ReadinessStage(readiness_timeout=c.get("readiness_timeout", 300.0)),
    "packages": lambda c: PackagesStage(packages_timeout=c.get("packages_timeout", 900.0)),
    "snapshot": lambda c: SnapshotStage(),
}
MUTATING = ("POST", "PUT", "DELETE")


def _arm(config: dict[str, t.Any], kind: str) -> None:
    point = config.get("crash_at")
    if point and config.get("crash_stage") in (None, kind):
        os.environ[crash_hook.ENV_CRASH_AT] = point
    else:
        os.environ.pop(crash_hook.ENV_CRASH_AT, None)


def _faults_for(config: dict[str, t.Any], kind: str) -> None:
    """Arm the simulator fault rules declared for ``kind`` (admin API) right before that stage runs."""
    rules = [item["rule"] for item in config.get("faults", []) if item["stage"] == kind]
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


def _enumerate(events: list[list[t.Any]]) -> None:
    """Record journal writes and mutating requests (with their per-client occurrence) instead of crashing."""
    original_write = _journal.JournalStore._write  # pylint: disable=protected-access
    original_exchange = _client.ProxmoxClient._exchange  # pylint: disable=protected-access

    def write(self: t.Any, document: dict[str, t.Any], change: tuple[str, str]) -> None:
        events.append(["journal", os.environ.get("VMANYWARE_RELIABILITY_STAGE"), change[0], change[1]])
        original_write(self, document, change)

    def exchange(self: t.Any, method: str, path: str, params: dict[str, t.Any], **kwargs: t.Any) -> t.Any:
        if method in MUTATING:
            counts = self.__dict__.setdefault("_rel_counts", {})
            key = (method, path)
            counts[key] = counts.get(key, 0) + 1
            events.append(["http", os.environ.get("VMANYWARE_RELIABILITY_STAGE"), method, path, counts[key]])
        return original_exchange(self, method, path, params, **kwargs)

    _journal.JournalStore._write = write  # type: ignore[method-assign]  # pylint: disable=protected-access
    _client.ProxmoxClient._exchange = exchange  # type: ignore[method-assign]  # pylint: disable=protected-access


def _chained(config: dict[str, t.Any], params: dict[str, t.Any], current: list[str]) -> None:
    """Every stage in one ``vmanyware_provision`` call (the module's whole logic, as the provision role runs it).

    Each stage's crash point and fault rules are armed right before its runner starts, like the per-stage mode does
    before each module call: the chained run shares one client and one journal store, so their crash points are re-read then.
    """

    class ArmingRunner(_stage.StageRunner):
        def run(self, operation_id: str) -> dict[str, t.Any]:
            kind = self.logic.kind
            if kind != current[0]:
                current[0] = kind
                _faults_for(config, kind)
            os.environ["VMANYWARE_RELIABILITY_STAGE"] = kind
            _arm(config, kind)
            client = getattr(self.client, "_client", self.client)  # the ObservingClient wraps the ProxmoxClient
            crash_hook.rearm(client, self.store)
            return super().run(operation_id)

    _provision.StageRunner = ArmingRunner  # type: ignore[misc]
    chained = dict(
        params,
        wait_budget=None,
        readiness_timeout=config.get("readiness_timeout", 300.0),
        packages_timeout=config.get("packages_timeout", 900.0),
        progress_interval=30.0,
        storage_concurrency=3,
    )
    _provision.provision(chained, check_mode=False, diff=False)


def main(config_path: str) -> int:
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    events: list[list[t.Any]] = []
    crash_hook.install()
    if config.get("enumerate"):
        _enumerate(events)
    conn = config["conn"]
    params: dict[str, t.Any] = {
        "api_host": conn["host"],
        "api_port": conn["port"],
        "api_token_id": conn["token_id"],
        "api_token_secret": conn["token_secret"],
        "ca_path": conn.get("ca_file"),
        "api_fingerprint": conn.get("fingerprint"),
        "validate_certs": True,
        "api_timeout": config.get("api_timeout", 10.0),
        "journal_dir": config["journal_dir"],
        "wait_budget": config.get("wait_budget", 20.0),
        "timeout": None,
        "lock_wait": config.get("lock_wait", 5.0),
        "provisioning_enabled": None,
        "catalog": config["catalog"],
    }
    stage = "operation"
    times: dict[str, float] = {}
    mark = time.monotonic()
    try:
        os.environ["VMANYWARE_RELIABILITY_STAGE"] = stage
        _arm(config, stage)
        planned = build_plan(catalog=config["catalog"], definition=config["definition"], target_vmid=config["vmid"])
        settings = build_settings(
            host=conn["host"],
            port=conn["port"],
            token_id=conn["token_id"],
            token_secret=conn["token_secret"],
            ca_path=conn.get("ca_file"),
            fingerprint=conn.get("fingerprint"),
            timeout=params["api_timeout"],
        )
        scope = provider_scope_id(settings, certificate_fingerprint(settings))
        environ = {"VMANYWARE_PROVISIONING_ENABLED": "true", "VMANYWARE_SNAPSHOTS_ENABLED": "true"}
        created = create_operation(
            open_store(config["journal_dir"]),
            planned=planned,
            provider_scope_id=t.cast(str, scope),
            confirmation=expected_confirmation(planned.plan, t.cast(str, scope)),
            idempotency_key=None,
            environ=environ,
        )
        params["operation_id"] = created["operation_id"]
        os.environ["VMANYWARE_PROVISIONING_ENABLED"] = "true"
        os.environ["VMANYWARE_SNAPSHOTS_ENABLED"] = "true"
        if config.get("chained"):
            times[stage] = round(time.monotonic() - mark, 3)
            current = [stage]
            try:
                _chained(config, params, current)
            finally:
                stage = current[0]
            sys.stdout.write(
                json.dumps(
                    {"result": "completed", "operation_id": params["operation_id"], "events": events, "times": times}
                )
                + "\n"
            )
            return 0
        for step in planned.plan["steps"]:
            times[stage] = round(time.monotonic() - mark, 3)
            mark = time.monotonic()
            stage = step["kind"]
            _faults_for(config, stage)
            os.environ["VMANYWARE_RELIABILITY_STAGE"] = stage
            _arm(config, stage)
            for _round in range(int(config.get("max_rounds", 60))):
                result = run_stage(params, LOGICS[stage](config), check_mode=False, diff=False)
                if result["done"]:
                    break
            else:
                raise VmanywareError(code="task_timeout", details={"stage": stage})
        times[stage] = round(time.monotonic() - mark, 3)
    except VmanywareError as err:
        out = {
            "result": "error",
            "code": err.code,
            "stage": stage,
            "message": err.message,
            "details": {k: v for k, v in err.details.items() if k in ("stage", "cause", "operationId", "fields")},
        }
        if config.get("enumerate"):
            out["events"] = events
        sys.stdout.write(json.dumps(out) + "\n")
        return 3
    sys.stdout.write(
        json.dumps({"result": "completed", "operation_id": params["operation_id"], "events": events, "times": times})
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
