# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stages of a template build (docs/templates.md, "Stages"), on the common stage runner.

download -> create -> configure -> start -> prepare -> generalize -> shutdown -> unconfigure ->
convert -> stamp. Every stage follows the protocol of ``_stage``: preconditions by GET, the
dispatch recorded before the request (after the provisioning gate is re-read: a closed gate sends
nothing and leaves the stage pending), a known task reconciled by GET, a submission whose outcome is
unknown resolved by reads only (never sent again: ``uncertain`` when reads cannot decide), an
independent read-back.

``prepare`` and ``generalize`` change nothing through the API: the role does the work in the guest
over SSH (``ansible.builtin.apt`` and friends) and hands the stage what it saw; the stage checks
the guest agent answers through the API and records the evidence. On a simulated guest the role
runs a *stand-in* instead (``prepared_by: stand-in``): it is recorded as such, written into the
template's stamp, and a stand-in build never produces an ``imageDefaultUser`` attestation.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._core.errors import ProviderError
from ..._formats.documents import FormatError, normalize_mapping
from ..._journal import stage as journal_stage
from ..._operation.create import instance_tag
from ..._api.pveconfig import disk_volume, int_value, read_status, tag_list
from ..runner import Request, Resolution, StageContext, StageError, StageInProgress, StageLogic, agent_reason
from ..registry import TEMPLATE
from .. import common
from .. import guest as _guest
from ..vm.start import StartStage
from ..._api.tasks import TaskOutcome, parse_upid
from ..._formats.template_build import import_file_name

GIB = 1024 ** 3
TEMPLATE_TAG = "vmanyware-template"
PREPARED_BY = ("ssh", "stand-in")
BUILD_SETTINGS = ("ipconfig0", "sshkeys", "ciuser")


def _mismatch(ctx: StageContext, rule: str) -> StageError:
    return StageError("Proxmox does not show the state the stage requested.", code="observation_mismatch",
                      details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": rule})


def _build(ctx: StageContext) -> dict[str, t.Any]:
    """The validated TemplateBuild the operation recorded."""
    return ctx.definition


def _identity(ctx: StageContext, *, stopped: bool) -> dict[str, t.Any]:
    """The VM is this build's: binding description and instance tag, unlocked (and stopped when asked), digest unchanged."""
    config = common.require_clone_identity(ctx, stopped=stopped, no_pending=stopped)
    _guest.check_identity(ctx, config)
    common.require_digest(ctx, config)
    return config


def _undecidable_task(ctx: StageContext, task_type: str) -> Resolution:
    return Resolution.undecidable("The reply to the %s request was lost and reads cannot show whether it applied; check the %s tasks "
                                  "and VM %d on node %s before re-running." % (ctx.kind, task_type, ctx.vmid, ctx.node))


# -- download ---------------------------------------------------------------------------------------
class DownloadStage(StageLogic):
    """``POST /nodes/{node}/storage/{importStorage}/download-url`` with the image's checksum (content ``import``).

    Proxmox verifies the checksum before it keeps the file; an existing file with the expected
    checksum is kept without downloading again, so the request is always sent while the stage is
    open. A checksum mismatch fails the stage with ``image_checksum_mismatch``.
    """

    kind = "download"
    task_type = "download"
    default_timeout = 3600.0

    @staticmethod
    def volid(ctx: StageContext) -> str:
        return str(ctx.plan["source"]["importVolume"])

    def request(self, ctx: StageContext) -> Request | None:
        source = ctx.plan["source"]
        params = {"url": source["url"], "content": "import", "filename": import_file_name(_build(ctx)),
                  "checksum": source["checksum"], "checksum-algorithm": source["checksumAlgorithm"]}
        return Request("POST", "/nodes/%s/storage/%s/download-url" % (ctx.node, ctx.plan["importStorage"]), params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        upid = parse_upid(data)
        if upid.type != self.task_type or upid.node != ctx.node or upid.id != import_file_name(_build(ctx)):
            raise StageError("Proxmox answered with a task of an unexpected type, node or id.", code="unexpected_response")
        return upid.raw, {}

    def _listed(self, ctx: StageContext) -> dict[str, t.Any] | None:
        entries = ctx.client.get("/nodes/%s/storage/%s/content" % (ctx.node, ctx.plan["importStorage"]), content="import")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and entry.get("volid") == self.volid(ctx):
                return entry
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        entry = self._listed(ctx)
        if entry is None:
            raise _mismatch(ctx, "import_volume_listed")
        size = entry.get("size")
        return {"volid": self.volid(ctx), "sizeBytes": size if isinstance(size, int) and not isinstance(size, bool) else None,
                "checksumAlgorithm": ctx.plan["source"]["checksumAlgorithm"], "checksum": ctx.plan["source"]["checksum"]}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Our ``download`` task with the file name since the dispatch: applied (followed); none: undecidable."""
        params = common.task_list_params(ctx, "download", 0)
        params.pop("vmid", None)
        data = ctx.client.get("/nodes/%s/tasks" % ctx.node, **params)
        user = common.token_identity(ctx.client)
        candidates = []
        for entry in data if isinstance(data, list) else []:
            try:
                upid = parse_upid(entry.get("upid") if isinstance(entry, dict) else None)
            except ProviderError:
                continue
            if upid.type == "download" and upid.id == import_file_name(_build(ctx)) and (user is None or upid.user == user):
                candidates.append(upid.raw)
        if len(candidates) == 1:
            return Resolution.applied(candidates[0])
        return Resolution.undecidable("The reply to download-url was lost and the node's download tasks do not single out this "
                                      "build's; check the import storage %s and the task list of node %s." % (ctx.plan["importStorage"], ctx.node))

    def task_error(self, ctx: StageContext, upid: str, outcome: TaskOutcome) -> StageError:
        if (outcome.exitstatus or "").startswith("checksum mismatch"):
            return StageError(code="image_checksum_mismatch", details={"stage": ctx.kind, "upid": upid})
        return super().task_error(ctx, upid, outcome)


# -- create -----------------------------------------------------------------------------------------
class CreateStage(StageLogic):
    """``POST /nodes/{node}/qemu``: q35, OVMF with efidisk0, virtio-scsi-single, the disk imported with ``import-from``,
    a Cloud-Init drive, serial0, the guest agent enabled; bound to the operation by description and instance tag."""

    kind = "create"
    task_type = "qmcreate"

    def preconditions(self, ctx: StageContext) -> None:
        try:
            ctx.client.get("/cluster/nextid", vmid=ctx.vmid)
        except ProviderError as err:
            if err.code != "conflict":
                raise
            raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid}) from None

    def request(self, ctx: StageContext) -> Request | None:
        plan, storage = ctx.plan, ctx.plan["storage"]
        machine = plan["machine"]
        params: dict[str, t.Any] = {
            "vmid": ctx.vmid, "name": plan["target"]["name"], "description": common.binding_description(ctx.operation),
            "tags": instance_tag(ctx.operation["operationId"]), "machine": machine["type"], "bios": machine["bios"],
            "efidisk0": "%s:1,efitype=4m,pre-enrolled-keys=0" % storage, "scsihw": machine["scsihw"],
            plan["diskDevice"]: "%s:0,import-from=%s,discard=on" % (storage, plan["source"]["importVolume"]),
            "ide2": "%s:cloudinit" % storage, "boot": "order=%s" % plan["diskDevice"], "agent": "enabled=1",
            "net0": "virtio,bridge=%s" % plan["bridge"], "cores": machine["cores"], "memory": machine["memoryMiB"], "ostype": "l26",
        }
        if machine["serialConsole"]:
            params.update({"serial0": "socket", "vga": "serial0"})
        return Request("POST", "/nodes/%s/qemu" % ctx.node, params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        upid = parse_upid(data)
        if upid.type != self.task_type or upid.node != ctx.node or upid.id != str(ctx.vmid):
            raise StageError("Proxmox answered with a task of an unexpected type, node or id.", code="unexpected_response")
        return upid.raw, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or not common.is_ours(ctx, config):
            raise _mismatch(ctx, "exists_and_bound")
        if config.get("lock"):
            raise _mismatch(ctx, "unlocked")
        disk = disk_volume(config, ctx.plan["diskDevice"])
        if disk is None or disk.is_cdrom or disk.storage != ctx.plan["storage"] or not disk.size_bytes:
            raise _mismatch(ctx, "imported_disk")
        if "efidisk0" not in config or (ctx.plan["machine"]["serialConsole"] and config.get("serial0") != "socket"):
            raise _mismatch(ctx, "machine")
        return {"volid": disk.volid, "diskSizeBytes": disk.size_bytes, "digest": config.get("digest")}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        tasks = common.find_tasks(ctx, "qmcreate", ctx.vmid)
        if len(tasks) == 1 and (config is None or common.is_ours(ctx, config) or config.get("lock") == "create"):
            return Resolution.applied(tasks[0]["upid"])
        if config is not None and common.is_ours(ctx, config) and not config.get("lock"):
            return Resolution.applied()
        return _undecidable_task(ctx, "qmcreate")


# -- configure: the preparation boot's Cloud-Init settings ---------------------------------------------
class _KeyRequest(Request):
    """A request whose ``sshkeys`` is summarized (journal, previews) by the key's fingerprint only."""

    def summary(self) -> dict[str, t.Any]:
        summary = super().summary()
        keys = _guest.decode_sshkeys(str(self.params.get("sshkeys") or ""))
        # A preview before the key exists (check mode: the role generates it only when it builds) names no key.
        summary["params"]["sshkeys"] = "<ephemeral key %s>" % _guest.ssh_fingerprint(keys[0]) if keys else "<ephemeral key of the run>"
        return summary


class ConfigureStage(StageLogic):
    """``PUT .../config``: ``ciuser``, the ephemeral ``sshkeys`` and the static ``ipconfig0`` of the preparation boot, and
    ``ciupgrade=0``: Proxmox's default (1) has cloud-init upgrade every package on that boot, unplanned and racing the
    role's own apt run for the package lock.

    The public key comes from the role (a fresh key pair per run); the journal and the previews hold
    only its fingerprint, the private key never leaves the controller's temporary directory.
    """

    kind = "configure"

    def __init__(self, build_public_key: str | None) -> None:
        self.public_key = build_public_key

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> ConfigureStage:
        return cls(options.get("build_ssh_public_key"))

    def _wanted(self, ctx: StageContext) -> dict[str, str]:
        build = ctx.plan["buildAddress"]
        return {"ciuser": ctx.plan["guestUser"], "ipconfig0": "ip=%s,gw=%s" % (build["address"], build["gateway"]), "ciupgrade": "0"}

    def preconditions(self, ctx: StageContext) -> None:
        if not self.public_key:
            raise StageError("The configure stage needs build_ssh_public_key (the ephemeral key of this run).",
                             details={"stage": ctx.kind, "rule": "build_ssh_public_key"})
        ctx.facts["config"] = _identity(ctx, stopped=True)

    def request(self, ctx: StageContext) -> Request | None:
        params: dict[str, t.Any] = dict(self._wanted(ctx), sshkeys=_guest.encode_sshkeys([self.public_key]) if self.public_key else "")
        digest = ctx.facts.get("config", {}).get("digest") or ctx.earlier_evidence("digest")
        if digest:
            params["digest"] = digest
        return _KeyRequest("PUT", ctx.vm_path + "/config", params)

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return None, {}

    def _applied(self, ctx: StageContext, config: t.Mapping[str, t.Any]) -> bool:
        keys = _guest.decode_sshkeys(str(config.get("sshkeys") or ""))
        wanted_key = _guest.ssh_fingerprint(str(self.public_key)) if self.public_key else None
        return all(str(config.get(k)) == v for k, v in self._wanted(ctx).items()) and [_guest.ssh_fingerprint(k) for k in keys] == [wanted_key]

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or not self._applied(ctx, config):
            raise _mismatch(ctx, "build_settings")
        return {"digest": config.get("digest"), "buildKeyFingerprint": _guest.ssh_fingerprint(str(self.public_key))}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        if config is not None and self.public_key and self._applied(ctx, config):
            return Resolution.applied()
        return Resolution.undecidable("The reply to the configuration update was lost; check VM %d's ciuser, sshkeys and ipconfig0 "
                                      "before re-running." % ctx.vmid)


# -- start --------------------------------------------------------------------------------------------
class TemplateStartStage(StartStage):
    """``POST .../status/start`` of the preparation boot (no seed stage: identity, stopped, digest unchanged).

    A lost reply is resolved as for the VM's start (the ``qmstart`` task or the power state); it is never sent again."""

    def preconditions(self, ctx: StageContext) -> None:
        _identity(ctx, stopped=True)


# -- prepare / generalize: evidence from the guest, the agent checked through the API --------------------
def _agent_answers(ctx: StageContext) -> dict[str, t.Any]:
    try:
        info = ctx.client.get(ctx.vm_path + "/agent/info")
    except ProviderError as err:
        if agent_reason(err) in ("not_running", "not_configured") or err.code == "server_error":
            raise StageInProgress({"waiting": "the guest agent to answer through the API"}) from None
        raise
    version = info.get("result", {}).get("version") if isinstance(info, dict) and isinstance(info.get("result"), dict) else None
    return {"agentAnswered": True, "agentVersion": version if isinstance(version, str) else None}


class PrepareStage(StageLogic):
    """Nothing is sent: the role installed the packages over SSH (or ran the stand-in); the stage waits until the guest
    agent answers through the API and records how the guest was prepared."""

    kind = "prepare"

    def __init__(self, prepared_by: str | None) -> None:
        self.prepared_by = prepared_by

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> PrepareStage:
        return cls(options.get("prepared_by"))

    def preconditions(self, ctx: StageContext) -> None:
        if self.prepared_by not in PREPARED_BY:
            raise StageError("The prepare stage needs prepared_by (ssh, or stand-in on a simulated guest).",
                             details={"stage": ctx.kind, "rule": "prepared_by"})
        if read_status(ctx.client, ctx.vm_path).get("status") != "running":
            raise StageError("The template VM is not running.", details={"stage": ctx.kind, "rule": "running"})
        _guest.check_identity(ctx, _identity(ctx, stopped=False))
        ctx.facts["agent"] = _agent_answers(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        agent = ctx.facts.get("agent") or _agent_answers(ctx)
        return dict(agent, preparedBy=self.prepared_by, packages=[p["name"] for p in ctx.plan["packages"]])


def parse_passwd_status(line: str, user: str) -> bool:
    """``passwd -S <user>`` (shadow-utils): ``<user> L|P|NP ...``; True only for a locked password of exactly ``user``."""
    fields = line.split()
    return len(fields) >= 2 and fields[0] == user and fields[1] == "L"


class GeneralizeStage(StageLogic):
    """Nothing is sent: the role generalized the guest over SSH (machine-id, SSH host keys, the provisioning key,
    ``cloud-init clean``, apt cache) and hands over ``passwd -S`` and the count of authorized keys left; the stage
    decides the attestation from them. A stand-in build records ``standIn: true`` and attests nothing."""

    kind = "generalize"

    def __init__(self, prepared_by: str | None, passwd_status: str | None, authorized_keys_left: int | None) -> None:
        self.prepared_by = prepared_by
        self.passwd_status = passwd_status
        self.authorized_keys_left = authorized_keys_left

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> GeneralizeStage:
        return cls(options.get("prepared_by"), options.get("passwd_status"), options.get("authorized_keys_left"))

    def preconditions(self, ctx: StageContext) -> None:
        recorded = ctx.evidence("prepare").get("preparedBy")
        if self.prepared_by != recorded:
            raise StageError("prepared_by differs from the one the prepare stage recorded.", details={"stage": ctx.kind, "rule": "prepared_by"})
        if recorded == "ssh" and (self.passwd_status is None or self.authorized_keys_left is None):
            raise StageError("The generalize stage needs passwd_status and authorized_keys_left from the guest.",
                             details={"stage": ctx.kind, "rule": "guest_report"})
        _identity(ctx, stopped=False)

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if self.prepared_by == "stand-in":
            return {"standIn": True, "passwordLocked": None, "noAuthorizedKeys": None}
        return {"standIn": False, "passwordLocked": parse_passwd_status(str(self.passwd_status), ctx.plan["guestUser"]),
                "noAuthorizedKeys": self.authorized_keys_left == 0}


# -- shutdown -----------------------------------------------------------------------------------------
class ShutdownStage(StageLogic):
    """``POST .../status/shutdown`` (ACPI); ``forceStop`` only when the operator asked for it."""

    kind = "shutdown"
    task_type = "qmshutdown"
    default_timeout = 600.0

    def __init__(self, force_stop: bool = False) -> None:
        self.force_stop = force_stop

    def preconditions(self, ctx: StageContext) -> None:
        _identity(ctx, stopped=False)
        ctx.facts["power"] = _guest.read_power(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("power") == "stopped":
            return None
        params: dict[str, t.Any] = {"timeout": 300}
        if self.force_stop:
            params["forceStop"] = 1
        return Request("POST", ctx.vm_path + "/status/shutdown", params)

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if _guest.read_power(ctx) != "stopped":
            raise _mismatch(ctx, "stopped")
        return {"powerState": "stopped", "forceStop": self.force_stop}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = common.find_tasks(ctx, "qmshutdown", ctx.vmid)
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        if not tasks and _guest.read_power(ctx) == "stopped":
            return Resolution.applied()
        return _undecidable_task(ctx, "qmshutdown")


# -- unconfigure: remove the build settings -------------------------------------------------------------
class UnconfigureStage(StageLogic):
    """``PUT .../config`` with ``delete=ipconfig0,sshkeys,ciuser``: the template keeps no build address or key."""

    kind = "unconfigure"

    def preconditions(self, ctx: StageContext) -> None:
        config = common.require_clone_identity(ctx, stopped=True, no_pending=False)
        _guest.check_identity(ctx, config)
        ctx.facts["config"] = config

    def request(self, ctx: StageContext) -> Request | None:
        config = ctx.facts["config"]
        present = [key for key in BUILD_SETTINGS if key in config]
        if not present:
            return None
        return Request("PUT", ctx.vm_path + "/config", {"delete": ",".join(present), "digest": config["digest"]})

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return None, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or any(key in config for key in BUILD_SETTINGS):
            raise _mismatch(ctx, "build_settings_removed")
        return {"digest": config.get("digest"), "removed": list(BUILD_SETTINGS)}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        if config is not None and not any(key in config for key in BUILD_SETTINGS):
            return Resolution.applied()
        return Resolution.undecidable("The reply to the removal of the build settings was lost; check VM %d's ipconfig0, sshkeys and "
                                      "ciuser before re-running." % ctx.vmid)


# -- convert -----------------------------------------------------------------------------------------
class ConvertStage(StageLogic):
    """``POST .../template``: Proxmox renames the disks to ``base-...`` and sets ``template: 1``."""

    kind = "convert"
    task_type = "qmtemplate"

    def preconditions(self, ctx: StageContext) -> None:
        config = _identity(ctx, stopped=True)
        ctx.facts["template"] = int_value(config.get("template")) == 1

    def request(self, ctx: StageContext) -> Request | None:
        return None if ctx.facts.get("template") else Request("POST", ctx.vm_path + "/template", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or int_value(config.get("template")) != 1:
            raise _mismatch(ctx, "template")
        disk = disk_volume(config, ctx.plan["diskDevice"])
        if disk is None or ":base-" not in disk.volid:
            raise _mismatch(ctx, "base_volume")
        return {"volid": disk.volid, "diskSizeBytes": disk.size_bytes, "digest": config.get("digest")}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = common.find_tasks(ctx, "qmtemplate", ctx.vmid)
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        config = common.read_config_or_none(ctx)
        if not tasks and config is not None and int_value(config.get("template")) == 1:
            return Resolution.applied()
        return _undecidable_task(ctx, "qmtemplate")


# -- stamp -------------------------------------------------------------------------------------------
def stamp_description(operation: t.Mapping[str, t.Any], prepared_by: str) -> str:
    """The template's description: the binding lines, then what it was built from (no trailing whitespace)."""
    plan = operation["plan"]
    source = plan["source"]
    lines = [common.binding_description(operation), "vmanyware template", "image %s" % plan["image"], "url %s" % source["url"],
             "checksum %s:%s" % (source["checksumAlgorithm"], source["checksum"]), "templateVersion %s" % plan["templateVersion"],
             "buildOperation %s" % operation["operationId"], "packages %s" % ",".join(p["name"] for p in plan["packages"]),
             "preparedBy %s" % ("stand-in (simulated guest: nothing was installed or verified)" if prepared_by == "stand-in" else prepared_by)]
    return "\n".join(lines)


def catalog_mapping(operation: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The catalog mapping of the built template, from the recorded evidence (docs/templates.md, "Output").

    ``sourceDiskGiB`` is the converted disk's observed size; ``imageDefaultUser`` only when the build
    itself verified the locked password and no authorized keys (never for a stand-in build).
    """
    mapping = dict(operation["mapping"])
    size = journal_stage(operation, "convert")["evidence"].get("diskSizeBytes")
    if not isinstance(size, int) or size % GIB:
        raise StageError("The template's disk is not a whole number of GiB; the catalog needs sourceDiskGiB.", code="observation_mismatch",
                         details={"stage": "stamp", "rule": "whole_gib"})
    ordered = {key: mapping[key] for key in ("image", "node", "templateVmid", "templateVersion", "storage", "bridge", "diskDevice")}
    ordered.update(sourceDiskGiB=size // GIB, guestUser=mapping["guestUser"])
    generalized = journal_stage(operation, "generalize")["evidence"]
    if generalized.get("passwordLocked") is True and generalized.get("noAuthorizedKeys") is True and not generalized.get("standIn"):
        ordered["imageDefaultUser"] = {"name": mapping["guestUser"], "templateVersion": mapping["templateVersion"],
                                       "passwordLocked": True, "noAuthorizedKeys": True}
    try:
        return normalize_mapping(ordered)
    except FormatError as err:  # e.g. a 3 GiB image without diskGiB: the catalog needs at least 4
        raise StageError("The built template cannot be catalogued (%s %s); declare diskGiB in the TemplateBuild." % (err.path, err.rule),
                         code="observation_mismatch", details={"stage": "stamp", "rule": "catalog_mapping", "field": err.path}) from None


class StampStage(StageLogic):
    """``PUT .../config``: tags ``vmanyware-template`` (plus the instance tag) and the stamp description."""

    kind = "stamp"

    def _wanted(self, ctx: StageContext) -> dict[str, str]:
        prepared_by = str(ctx.evidence("prepare").get("preparedBy"))
        return {"tags": "%s;%s" % (TEMPLATE_TAG, instance_tag(ctx.operation["operationId"])),
                "description": stamp_description(ctx.operation, prepared_by)}

    def preconditions(self, ctx: StageContext) -> None:
        config = common.read_config_or_none(ctx)
        if config is None or int_value(config.get("template")) != 1:
            raise StageError("The VM is not the converted template.", details={"stage": ctx.kind, "rule": "template"})
        if not common.is_ours(ctx, config) and config.get("description") != self._wanted(ctx)["description"]:
            raise StageError("The template's description does not bind it to this operation.", details={"stage": ctx.kind, "rule": "description"})
        ctx.facts["config"] = config
        catalog_mapping(ctx.operation)  # fails before anything is sent when the disk size cannot be catalogued

    def _applied(self, ctx: StageContext, config: t.Mapping[str, t.Any]) -> bool:
        wanted = self._wanted(ctx)
        return config.get("description") == wanted["description"] and set(tag_list(config.get("tags"))) == set(wanted["tags"].split(";"))

    def request(self, ctx: StageContext) -> Request | None:
        config = ctx.facts["config"]
        if self._applied(ctx, config):
            return None
        return Request("PUT", ctx.vm_path + "/config", dict(self._wanted(ctx), digest=config["digest"]))

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return None, {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        config = common.read_config_or_none(ctx)
        if config is None or not self._applied(ctx, config):
            raise _mismatch(ctx, "stamp")
        return {"digest": config.get("digest"), "catalogMapping": catalog_mapping(ctx.operation)}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        config = common.read_config_or_none(ctx)
        if config is not None and self._applied(ctx, config):
            return Resolution.applied()
        return Resolution.undecidable("The reply to the stamp update was lost; check template %d's tags and description." % ctx.vmid)


def stamp_output(document: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """``catalog_mapping`` and ``catalog_mapping_yaml`` of the operation ``document``'s completed stamp stage (else nothing)."""
    stamp: t.Mapping[str, t.Any] = next(
        (item for item in document.get("stages", []) if item.get("kind") == "stamp" and item.get("status") == "completed"), {})
    mapping = (stamp.get("evidence") or {}).get("catalogMapping")
    if not isinstance(mapping, dict):
        return {}
    return {"catalog_mapping": mapping, "catalog_mapping_yaml": mapping_yaml(mapping)}


def mapping_yaml(mapping: t.Mapping[str, t.Any]) -> str:
    """One catalog list item in catalog field order (plain scalars; every value is pattern-checked, so none needs quoting
    except a templateVersion YAML would read as a number, which is quoted)."""
    def scalar(value: t.Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, int):
            return str(value)
        text = str(value)
        return '"%s"' % text if text[:1] in "+-.0123456789" or text in ("true", "false", "null", "~") else text

    lines = []
    for index, (key, value) in enumerate(mapping.items()):
        prefix = "- " if index == 0 else "  "
        if isinstance(value, dict):
            lines.append("%s%s:" % (prefix, key))
            lines.extend("    %s: %s" % (inner, scalar(item)) for inner, item in value.items())
        else:
            lines.append("%s%s: %s" % (prefix, key, scalar(value)))
    return "\n".join(lines) + "\n"


# The stages whose work the role does in the guest over SSH (docs/templates.md, "Preparing the guest"): right before each
# write there, the role runs the stage with ``write_check`` (the gates re-read, nothing sent or recorded).
GUEST_WRITE_STAGES = ("prepare", "generalize")
