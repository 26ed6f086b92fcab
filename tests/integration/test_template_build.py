# SPDX-License-Identifier: GPL-3.0-or-later
"""The template build against the simulator: operation, every stage in order, check-mode previews, a lost reply
that is resolved by reads, the checksum failure, and the catalog mapping the build outputs.

Stages run in-process through ``_stage_module.run_stage`` (the module's whole logic). The guest work of
``prepare``/``generalize`` is the *stand-in* here (a simulated guest cannot be reached over SSH): the stages
record ``preparedBy: stand-in``, the stamp says so, and the mapping carries no ``imageDefaultUser``.
"""

from __future__ import annotations

import hashlib
import json
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import connection_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import (
    certificate_fingerprint,
    provider_scope_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.catalog import normalize_mapping
from ansible_collections.vmanyware.proxmox.plugins.module_utils._runtime.stage_module import open_store, run_stage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import TEMPLATE, module_stage_kinds
from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.template_build import (
    build_template_plan,
    read_stamp,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.template import (
    create_template_operation,
    expected_template_confirmation,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import template_stage as stage_logic
from pvesim.imageserver import ImageServer, qcow2_stub
from pvesim.state import FULL_TOKEN_ACL

pytestmark = pytest.mark.integration

GIB = 1024**3
ON = {"VMANYWARE_PROVISIONING_ENABLED": "true"}
IMAGE = qcow2_stub(3 * GIB, b"agent-less cloud image")
BUILD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO build@controller"
EXTRA_PRIVS = {"/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]}


def document(url: str, checksum: str, vmid: int = 9100, **extra: t.Any) -> str:
    return yaml.safe_dump(
        {
            **extra,
            "apiVersion": "vmanyware.dev/v1",
            "kind": "TemplateBuild",
            "image": "debian-13",
            "source": {"url": url, "checksum": checksum, "checksumAlgorithm": "sha256"},
            "node": "pve-test",
            "storage": "local-lvm",
            "importStorage": "local",
            "bridge": "vmbr0",
            "templateVmid": vmid,
            "templateVersion": "debian-13-test",
            "guestUser": "debian",
            "buildAddress": {"address": "192.0.2.50/24", "gateway": "192.0.2.1"},
        }
    )


class Build:
    def __init__(
        self, pvesim: t.Any, tmp_path: Path, images: ImageServer, checksum: str | None = None, **extra: t.Any
    ) -> None:
        conn = pvesim.connection
        privileges = {path: list(privs) for path, privs in FULL_TOKEN_ACL.items()}
        privileges.update(EXTRA_PRIVS)
        privileges["/nodes/pve-test"] = privileges["/nodes/pve-test"] + ["Sys.AccessNetwork"]
        pvesim.set_token(conn["tokens"]["full"]["id"], privileges=privileges)
        self.pvesim = pvesim
        self.params: dict[str, t.Any] = {
            "api_host": "127.0.0.1",
            "api_port": conn["port"],
            "api_token_id": conn["tokens"]["full"]["id"],
            "api_token_secret": conn["tokens"]["full"]["secret"],
            "ca_path": conn["ca_file"],
            "validate_certs": True,
            "journal_dir": str(tmp_path / "journal"),
            "api_timeout": 10,
            "lock_wait": 10.0,
            "build_ssh_public_key": BUILD_KEY,
            "prepared_by": "stand-in",
            "provisioning_enabled": True,
        }
        settings = connection_settings(self.params)
        self.scope = provider_scope_id(settings, certificate_fingerprint(settings))
        self.store = open_store(self.params["journal_dir"])
        self.planned = build_template_plan(
            text=document(images.url("debian.qcow2"), checksum or hashlib.sha256(IMAGE).hexdigest(), **extra)
        )
        result = create_template_operation(
            self.store,
            planned=self.planned,
            provider_scope_id=self.scope,
            confirmation=expected_template_confirmation(self.planned.plan, self.scope),
            idempotency_key=None,
            environ=ON,
        )
        self.operation_id = result["operation_id"]
        self.params["operation_id"] = self.operation_id

    def run(self, kind: str, check_mode: bool = False, **params: t.Any) -> dict[str, t.Any]:
        merged = dict(self.params, **params)
        result = run_stage(merged, stage_logic(kind, merged), check_mode=check_mode, diff=False)
        assert self.params["api_token_secret"] not in json.dumps(result)
        return result

    def until_done(self, kind: str) -> dict[str, t.Any]:
        for _attempt in range(60):
            result = self.run(kind, wait_budget=5.0)
            if result["done"]:
                return result
        raise AssertionError("stage %s did not finish" % kind)

    def journal_text(self) -> str:
        return Path(self.params["journal_dir"], self.operation_id + ".json").read_text(encoding="utf-8")


@pytest.fixture()
def images(tmp_path: Path) -> t.Iterator[ImageServer]:
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "debian.qcow2").write_bytes(IMAGE)
    with ImageServer(tmp_path / "images") as server:
        yield server


def test_build_every_stage_then_output_the_catalog_mapping(pvesim: t.Any, tmp_path: Path, images: ImageServer) -> None:
    build = Build(pvesim, tmp_path, images, diskGiB=8)  # the 3 GiB image grown to 8 (catalogs need at least 4)
    preview = build.run("download", check_mode=True)
    assert preview["done"] is False and preview["requests"][0]["path"] == "/nodes/pve-test/storage/local/download-url"
    assert preview["requests"][0]["params"]["checksum-algorithm"] == "sha256" and pvesim.requests(method="POST") == []
    assert [step["kind"] for step in build.planned.plan["steps"]] == list(module_stage_kinds(TEMPLATE))
    for kind in module_stage_kinds(TEMPLATE):
        result = build.until_done(kind)
        assert result["stage"]["status"] == "completed", (kind, result)
        again = build.run(kind)
        assert again["changed"] is False and again["done"] is True
    config = pvesim.vm(9100)["config"]
    assert str(config["template"]) == "1" and config["scsi0"].startswith("local-lvm:base-9100-disk-")
    assert set(config["tags"].split(";")) == {"vmanyware-template", "vmanyware-" + build.operation_id}
    assert not {"ipconfig0", "sshkeys", "ciuser"} & set(config)
    stamp = read_stamp(config["description"])
    assert (
        stamp is not None
        and stamp["templateVersion"] == "debian-13-test"
        and stamp["buildOperation"] == build.operation_id
    )
    assert stamp["preparedBy"].startswith("stand-in") and stamp["packages"] == "qemu-guest-agent"
    mapping = build.store.load(build.operation_id)["stages"][-1]["evidence"]["catalogMapping"]
    assert normalize_mapping(mapping) == mapping
    assert (
        mapping["sourceDiskGiB"] == 8 and mapping["templateVmid"] == 9100 and "imageDefaultUser" not in mapping
    )  # stand-in: no attestation
    # The ephemeral key is in no journal record (only its fingerprint), and every request was schema-valid.
    journal = build.journal_text()
    assert "AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO" not in journal
    assert "<ephemeral key SHA256:" in journal
    assert pvesim.schema_violations() == []
    writes = [e["endpoint"] for e in pvesim.requests() if e["method"] != "GET"]
    assert writes == [
        "POST /nodes/{node}/storage/{storage}/download-url",
        "POST /nodes/{node}/qemu",
        "PUT /nodes/{node}/qemu/{vmid}/resize",
        "PUT /nodes/{node}/qemu/{vmid}/config",
        "POST /nodes/{node}/qemu/{vmid}/status/start",
        "POST /nodes/{node}/qemu/{vmid}/status/shutdown",
        "PUT /nodes/{node}/qemu/{vmid}/config",
        "POST /nodes/{node}/qemu/{vmid}/template",
        "PUT /nodes/{node}/qemu/{vmid}/config",
    ]  # each exactly once


def test_a_template_the_catalog_cannot_hold_is_not_stamped(pvesim: t.Any, tmp_path: Path, images: ImageServer) -> None:
    build = Build(pvesim, tmp_path, images)  # no diskGiB: the imported disk stays 3 GiB
    assert "disk" not in [step["kind"] for step in build.planned.plan["steps"]]
    for kind in [step["kind"] for step in build.planned.plan["steps"]][:-1]:
        build.until_done(kind)
    pvesim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        build.run("stamp")
    assert info.value.code == "observation_mismatch" and info.value.details["field"] == "sourceDiskGiB"
    assert [e for e in pvesim.requests() if e["method"] != "GET"] == []  # nothing was sent


def test_wrong_checksum_fails_with_a_fixed_code_and_leaves_nothing(
    pvesim: t.Any, tmp_path: Path, images: ImageServer
) -> None:
    build = Build(pvesim, tmp_path, images, checksum="0" * 64)
    with pytest.raises(VmanywareError) as info:
        build.until_done("download")
    assert info.value.code == "image_checksum_mismatch"
    assert build.store.load(build.operation_id)["stages"][0]["failure"]["code"] == "image_checksum_mismatch"
    conn = pvesim.connection
    assert not [v for v in pvesim.requests() if v["method"] == "POST" and "qemu" in v["path"]]
    with pytest.raises(VmanywareError) as info:
        build.run("download")
    assert info.value.code == "stage_failed"
    assert conn  # the import storage lists nothing (checked through the generated listing)
    listing = [e for e in pvesim.requests(path_regex="content") if e["status"] == 200]
    assert listing == [] or all("vmanyware-debian-13" not in json.dumps(e) for e in listing)


def test_lost_create_reply_is_resolved_by_reads_never_resent(
    pvesim: t.Any, tmp_path: Path, images: ImageServer
) -> None:
    build = Build(pvesim, tmp_path, images)
    build.until_done("download")
    pvesim.add_fault(method="POST", path=r"/nodes/pve-test/qemu$", action="drop_reply", occurrence=1)
    result = build.until_done("create")
    assert result["stage"]["status"] == "completed" and ":qmcreate:9100:" in result["stage"]["upid"]
    statuses = [e["status"] for e in pvesim.requests(method="POST", path_regex=r"/nodes/pve-test/qemu$")]
    assert statuses == ["dropped"]  # the lost reply was resolved by reading the task list, never sent again
    assert pvesim.schema_violations() == []


def test_a_dropped_create_request_leaves_the_stage_uncertain_and_is_never_resent(
    pvesim: t.Any, tmp_path: Path, images: ImageServer
) -> None:
    build = Build(pvesim, tmp_path, images)
    build.until_done("download")
    pvesim.add_fault(method="POST", path=r"/nodes/pve-test/qemu$", action="drop_request", occurrence=1)
    for _run in range(2):  # a later run reads again, and still sends nothing
        with pytest.raises(VmanywareError) as info:
            build.run("create", wait_budget=1.0)
        assert info.value.code == "outcome_uncertain"
        assert build.store.load(build.operation_id)["stages"][1]["status"] == "uncertain"
    assert len(pvesim.requests(method="POST", path_regex=r"/nodes/pve-test/qemu$")) == 1
    assert not [task for task in pvesim.tasks() if task.get("type") == "qmcreate"]  # the dropped request never ran


def test_the_gate_is_reread_before_every_template_write(
    pvesim: t.Any, tmp_path: Path, images: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    build = Build(pvesim, tmp_path, images)
    build.until_done("download")
    monkeypatch.setenv(
        "VMANYWARE_PROVISIONING_ENABLED", "false"
    )  # the administrator's kill switch wins over the option
    pvesim.clear_requests()
    with pytest.raises(VmanywareError) as info:
        build.run("create")
    assert info.value.code == "provisioning_disabled"
    assert [e for e in pvesim.requests() if e["method"] != "GET"] == []
    assert build.store.load(build.operation_id)["stages"][1]["status"] == "pending"
    monkeypatch.delenv("VMANYWARE_PROVISIONING_ENABLED")
    assert build.until_done("create")["stage"]["status"] == "completed"


def test_template_stages_refuse_unverified_tls_and_number_from_one(
    pvesim: t.Any, tmp_path: Path, images: ImageServer
) -> None:
    build = Build(pvesim, tmp_path, images)
    operation = build.store.load(build.operation_id)
    assert [s["position"] for s in operation["stages"]] == [step["position"] for step in build.planned.plan["steps"]]
    assert operation["stages"][0]["position"] == 1
    with pytest.raises(VmanywareError) as info:
        build.run("download", validate_certs=False, ca_path=None)
    assert info.value.code == "tls_unverified" and pvesim.requests() == []


def test_guest_writes_reread_the_gate_with_the_stages_rule(
    pvesim: t.Any, tmp_path: Path, images: ImageServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The role's SSH writes (prepare: packages, agent start; generalize) each call the module with ``write_check`` first."""
    from ansible_collections.vmanyware.proxmox.plugins.modules.vmanyware_template_stage import action  # pylint: disable=import-outside-toplevel

    build = Build(pvesim, tmp_path, images)
    for kind in ("download", "create", "configure", "start"):
        build.until_done(kind)
    pvesim.clear_requests()

    positions = {step["kind"]: step["position"] for step in build.planned.plan["steps"]}

    def guest_write(kind: str, option: bool | None) -> dict[str, t.Any]:
        return action(
            dict(build.params, stage=kind, write_check=True, provisioning_enabled=option), check_mode=False, diff=False
        )

    for kind in ("prepare", "generalize"):
        for env, option in (("false", True), ("false", None), ("", None), (None, None)):
            if env is None:
                monkeypatch.delenv("VMANYWARE_PROVISIONING_ENABLED", raising=False)
            else:
                monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", env)
            with pytest.raises(VmanywareError) as info:
                guest_write(kind, option)
            assert info.value.code == "provisioning_disabled", (kind, env, option)
            assert info.value.details == {"stage": kind, "gate": "VMANYWARE_PROVISIONING_ENABLED"}
        for env, option in (("", True), ("true", None), ("true", True)):
            monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", env)
            result = guest_write(kind, option)
            assert result["changed"] is False and result["write_allowed"] is True and result["done"] is False
            assert (result["stage"]["kind"], result["stage"]["position"], result["stage"]["status"]) == (
                kind,
                positions[kind],
                "pending",
            )
    monkeypatch.setenv("VMANYWARE_PROVISIONING_ENABLED", "yes")
    with pytest.raises(VmanywareError) as info:
        guest_write("prepare", True)
    assert info.value.details["rule"] == "exact_boolean"
    with pytest.raises(VmanywareError) as info:
        guest_write("start", True)
    assert info.value.code == "invalid_option"
    # nothing was sent or recorded; the stages still run afterwards
    assert pvesim.requests(method="POST") == [] and pvesim.requests(method="PUT") == []
    monkeypatch.delenv("VMANYWARE_PROVISIONING_ENABLED")
    assert [s["status"] for s in build.store.load(build.operation_id)["stages"]][4:6] == ["pending", "pending"]
    assert build.until_done("prepare")["stage"]["status"] == "completed"


def test_an_ssh_prepared_build_keeps_its_attestation_through_the_journal(
    pvesim: t.Any, tmp_path: Path, images: ImageServer
) -> None:
    """The stamp reads generalize's evidence back from the journal: ``passwordLocked`` must not be redacted there (found by the
    real-guest acceptance). The guest reports are what the role hands over after its SSH work."""
    build = Build(pvesim, tmp_path, images, diskGiB=8)
    build.params.update(prepared_by="ssh", passwd_status="debian L 12/01/2026 0 99999 7 -1", authorized_keys_left=0)
    for kind in module_stage_kinds(TEMPLATE):
        assert build.until_done(kind)["stage"]["status"] == "completed", kind
    document = build.store.load(build.operation_id)
    generalized = next(s for s in document["stages"] if s["kind"] == "generalize")["evidence"]
    assert generalized == {"standIn": False, "passwordLocked": True, "noAuthorizedKeys": True}
    mapping = document["stages"][-1]["evidence"]["catalogMapping"]
    assert mapping["imageDefaultUser"] == {
        "name": "debian",
        "templateVersion": "debian-13-test",
        "passwordLocked": True,
        "noAuthorizedKeys": True,
    }
    assert normalize_mapping(mapping) == mapping
