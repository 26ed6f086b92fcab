# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The container stages (``guestType: container``): template, create, start, readiness (docs/containers.md).

They follow the same protocol as the VM stages (``_stage.StageRunner``): preconditions by GET,
the gates re-read before every new write (provisioning; the snapshot also the snapshots gate), the
dispatch journaled before sending, a known task followed by GET only, a submission whose outcome is
unknown resolved by reads and never sent again (``uncertain`` when reads cannot decide).

- ``template``: the newest appliance version matching the catalog glob (the node's ``aplinfo``
  plus the storage's ``vztmpl`` content); ``POST /nodes/{node}/aplinfo`` only when it is missing.
  The resolved volume is the stage's evidence, and ``create`` uses exactly that volume.
- ``create``: ``POST /nodes/{node}/lxc`` (a ``vzcreate`` task whose id is the VMID) with the
  binding description, the ``vmanyware`` tag, ``unprivileged``, ``features`` only when declared,
  ``rootfs STORAGE:diskGiB`` and ``net0`` with a MAC derived from the operation id, so the MAC is
  in the journaled request before anything is sent. A lost reply: a container with our
  description (or only ``lock: create`` with exactly one running ``vzcreate`` task of ours) is
  applied; nothing there is never re-sent: the stage becomes ``uncertain``.
- ``start``: ``POST .../status/start`` (``vzstart``), observed ``running``.
- ``readiness``: ``GET .../interfaces`` until the interface with the recorded MAC has a usable
  IPv4; the deadline is journaled when the stage first starts. Containers have no agent: host
  keys cannot be read through the API, so readiness records no known_hosts (docs/containers.md,
  "SSH trust").

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import time
import typing as t

from ..._checks.container import newest_match
from ..._core.errors import ProviderError, VmanywareError
from ..._operation.create import PROVISIONING_GATE, SNAPSHOTS_GATE
from ..._api.pveconfig import parse_property_string, read_status
from ..runner import Request, Resolution, StageContext, StageError, StageInProgress, StageLogic, accept_task
from ..registry import CONTAINER
from ..common import TASK_SINCE_SLACK, binding_description, dispatched_epoch, find_tasks, is_ours, read_config_or_none, refusal_for_taken_vmid, token_identity
from ..vm.snapshot import snapshot_name
from ..._api.tasks import parse_upid

TAG = "vmanyware"
SWAP_MIB = 512  # PVE's default; the definition has no swap field
DEFAULT_READINESS_TIMEOUT = 300.0
_POLL = 2.0


def container_mac(operation: t.Mapping[str, t.Any]) -> str:
    """The net0 MAC of the operation's container: Proxmox's OUI ``BC:24:11`` plus three bytes of the operation id's SHA-256."""
    digest = hashlib.sha256(str(operation["operationId"]).encode("utf-8")).digest()
    return "BC:24:11:%02X:%02X:%02X" % (digest[0], digest[1], digest[2])


def net0(config: t.Mapping[str, t.Any]) -> dict[str, str]:
    value = config.get("net0")
    return parse_property_string(value, "name") if isinstance(value, str) else {}


def require_ours(ctx: StageContext) -> dict[str, t.Any]:
    """The container exists, carries this operation's description, is not locked and has the recorded MAC."""
    require_container_plan(ctx)
    config = read_config_or_none(ctx)
    if config is None:
        raise StageError("The target container does not exist.", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "exists"})
    if not is_ours(ctx, config):
        raise StageError("The target container's description does not bind it to this operation.",
                         details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "description"})
    if config.get("lock"):
        raise StageError("The target container is locked.", code="locked", details={"stage": ctx.kind, "vmid": ctx.vmid})
    if net0(config).get("hwaddr", "").upper() != container_mac(ctx.operation):
        raise StageError("The container's net0 MAC is not the one the create stage sent.", details={"stage": ctx.kind, "rule": "net0_mac"})
    return config


def require_container_plan(ctx: StageContext) -> None:
    """Container stages run only for operations whose plan is a container's (nothing is read or sent otherwise)."""
    if ctx.plan.get("guestType") != "container":
        raise StageError("The operation's plan is not a container plan (guestType: container).",
                         details={"stage": ctx.kind, "rule": "container_plan"})


def power_state(ctx: StageContext) -> str | None:
    state = read_status(ctx.client, ctx.vm_path).get("status")
    return state if isinstance(state, str) else None


def _template_volume(ctx: StageContext) -> str:
    """The ostemplate volume: the catalog's, or the one the template stage resolved (and recorded)."""
    if "ostemplate" in ctx.mapping:
        return str(ctx.mapping["ostemplate"])
    volid = ctx.earlier_evidence("ostemplate")
    if not isinstance(volid, str):
        raise StageError("The template stage has not recorded the container template.", code="stage_out_of_order",
                         details={"stage": ctx.kind, "waiting_for": "template"})
    return volid


# ---------------------------------------------------------------------------------------------------
# template

class ContainerTemplateStage(StageLogic):
    kind = "template"
    task_type = "download"
    default_timeout = 1800.0

    def _storage(self, ctx: StageContext) -> str:
        return str(ctx.mapping["appliance"]["storage"])

    def _present(self, ctx: StageContext) -> list[str]:
        storage = self._storage(ctx)
        content = ctx.client.get("/nodes/%s/storage/%s/content" % (ctx.node, storage), content="vztmpl")
        prefix = storage + ":vztmpl/"
        return [str(e["volid"])[len(prefix):] for e in content if isinstance(e, dict) and str(e.get("volid", "")).startswith(prefix)] \
            if isinstance(content, list) else []

    def preconditions(self, ctx: StageContext) -> None:
        require_container_plan(ctx)
        recorded = ctx.record.get("request") or {}
        if isinstance(recorded, dict) and isinstance(recorded.get("params"), dict) and recorded["params"].get("template"):
            # a dispatch was journaled: stay with that template (a newer one appearing meanwhile changes nothing)
            ctx.facts["template"] = str(recorded["params"]["template"])
        present = self._present(ctx)
        if "template" not in ctx.facts:
            index = ctx.client.get("/nodes/%s/aplinfo" % ctx.node)
            offered = [str(e["template"]) for e in index if isinstance(e, dict) and isinstance(e.get("template"), str)] \
                if isinstance(index, list) else []
            appliance = ctx.mapping["appliance"]
            chosen = newest_match(appliance["package"], appliance["version"], [*offered, *present])
            if chosen is None:
                raise StageError("No appliance version matches the catalog's package and version glob.", code="template_not_found",
                                 details={"stage": ctx.kind, "rule": "appliance_match"})
            ctx.facts["template"] = chosen
        ctx.facts["present"] = ctx.facts["template"] in present

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("present"):
            return None
        return Request("POST", "/nodes/%s/aplinfo" % ctx.node, {"storage": self._storage(ctx), "template": ctx.facts["template"]})

    def accept_reply(self, ctx: StageContext, request: Request, data: t.Any) -> tuple[str | None, dict[str, t.Any]]:
        return accept_task(data, task_type="download", node=ctx.node, task_id=str(request.params["template"])), {}

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if "template" not in ctx.facts:
            self.preconditions(ctx)
        if ctx.facts["template"] not in self._present(ctx):
            raise StageError("The template is not on the storage after the download.", code="observation_mismatch",
                             details={"stage": ctx.kind, "rule": "template_present"})
        return {"ostemplate": "%s:vztmpl/%s" % (self._storage(ctx), ctx.facts["template"]), "template": ctx.facts["template"]}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        self.preconditions(ctx)
        tasks = _download_tasks(ctx, ctx.facts["template"])
        if len(tasks) == 1:
            return Resolution.applied(tasks[0]["upid"])
        if ctx.facts["present"] and not tasks:
            return Resolution.applied(templateResolvedBy="storage_content")
        return Resolution.undecidable("The download of %s may or may not have been accepted: check the node's download tasks and the "
                                      "storage's templates, then re-run or abandon the operation." % ctx.facts["template"])

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        volid = "%s:vztmpl/%s" % (self._storage(ctx), ctx.facts.get("template"))
        return {"before": {"ostemplate": volid, "present": bool(ctx.facts.get("present"))}, "after": {"ostemplate": volid, "present": True}}


def _download_tasks(ctx: StageContext, template: str) -> list[dict[str, t.Any]]:
    """``download`` tasks for ``template`` by exactly our token since the dispatch (the task list has no vmid for them)."""
    params: dict[str, t.Any] = {"typefilter": "download", "source": "all", "limit": 500}
    since = dispatched_epoch(ctx)
    if since is not None:
        params["since"] = max(0, since - TASK_SINCE_SLACK)
    user = token_identity(ctx.client)
    data = ctx.client.get("/nodes/%s/tasks" % ctx.node, **params)
    found = []
    for entry in data if isinstance(data, list) else []:
        try:
            upid = parse_upid(entry.get("upid") if isinstance(entry, dict) else None)
        except ProviderError:
            continue
        if upid.type == "download" and upid.id == template and (user is None or upid.user == user):
            found.append({"upid": upid.raw})
    return found


# ---------------------------------------------------------------------------------------------------
# create

class ContainerCreateStage(StageLogic):
    kind = "create"
    task_type = "vzcreate"
    default_timeout = 1800.0
    final_codes = frozenset({"vmid_taken"})

    def preconditions(self, ctx: StageContext) -> None:
        require_container_plan(ctx)
        config = read_config_or_none(ctx)
        if config is not None:
            if not is_ours(ctx, config):
                raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "container_exists"})
            if config.get("lock"):
                raise StageError("The container bound to this operation is locked (its creation is still running); re-run later.",
                                 code="locked", details={"stage": ctx.kind, "vmid": ctx.vmid})
            ctx.facts["adopt"] = True
            return
        try:
            free = ctx.client.get("/cluster/nextid", vmid=ctx.vmid)
        except ProviderError as err:
            if err.code in ("conflict", "parameter_invalid"):
                raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "nextid"}) from None
            raise
        if str(free) != str(ctx.vmid):
            raise StageError(code="vmid_taken", details={"stage": ctx.kind, "vmid": ctx.vmid, "rule": "nextid"})

    def params(self, ctx: StageContext) -> dict[str, t.Any]:
        resources = ctx.plan["resources"]
        keys = "\n".join(ctx.definition["access"]["sshPublicKeys"])
        if ctx.check_mode and "appliance" in ctx.mapping and not isinstance(ctx.earlier_evidence("ostemplate"), str):
            # a preview before the template stage ran: name what it will resolve, not a volume that may not exist
            appliance = ctx.mapping["appliance"]
            ostemplate = "%s:vztmpl/<newest %s %s>" % (appliance["storage"], appliance["package"], appliance["version"])
        else:
            ostemplate = _template_volume(ctx)
        params: dict[str, t.Any] = {
            "vmid": ctx.vmid,
            "ostemplate": ostemplate,
            "hostname": ctx.plan["target"]["name"],
            "unprivileged": 1 if ctx.mapping.get("unprivileged", True) else 0,
            "rootfs": "%s:%d" % (ctx.plan["storage"], int(resources["diskGiB"])),
            "cores": int(resources["cores"]),
            "memory": int(resources["memoryMiB"]),
            "swap": SWAP_MIB,
            "net0": "name=eth0,bridge=%s,hwaddr=%s,ip=dhcp" % (ctx.plan["bridge"], container_mac(ctx.operation)),
            "ssh-public-keys": keys,
            "description": binding_description(ctx.operation),
            "tags": TAG,
        }
        if (ctx.mapping.get("features") or {}).get("nesting"):
            params["features"] = "nesting=1"
        return params

    def request(self, ctx: StageContext) -> Request | None:
        if ctx.facts.get("adopt"):
            return None
        return Request("POST", "/nodes/%s/lxc" % ctx.node, self.params(ctx))

    def refused(self, ctx: StageContext, err: ProviderError) -> VmanywareError:
        """``CT N already exists`` / ``VM N already exists``: another client took the VMID after the preconditions read it free."""
        return refusal_for_taken_vmid(ctx, err, "taken_before_create")

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        try:
            config = require_ours(ctx)
        except StageError as err:
            raise StageError(err.message, code="observation_mismatch", details=err.details) from None
        rootfs = parse_property_string(config.get("rootfs", ""), "volume") if isinstance(config.get("rootfs"), str) else {}
        if not str(rootfs.get("volume", "")).startswith(ctx.plan["storage"] + ":"):
            raise StageError("The container's root disk is not on the planned storage.", code="observation_mismatch",
                             details={"stage": ctx.kind, "rule": "rootfs_storage"})
        unprivileged = str(config.get("unprivileged", "0")) in ("1", "True", "true")
        if unprivileged != bool(ctx.mapping.get("unprivileged", True)):
            raise StageError("The container's privilege mode is not the planned one.", code="observation_mismatch",
                             details={"stage": ctx.kind, "rule": "unprivileged"})
        evidence = {"macaddr": container_mac(ctx.operation), "rootfs": rootfs.get("volume"), "digest": config.get("digest"),
                    "ostemplate": _template_volume(ctx), "unprivileged": unprivileged}
        if ctx.facts.get("adopt"):
            evidence["adopted"] = True
        return evidence

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """Reads only: the container's config (the description binds it) and our ``vzcreate`` tasks for the VMID."""
        config = read_config_or_none(ctx)
        tasks = find_tasks(ctx, "vzcreate", ctx.vmid)
        if config is not None:
            if is_ours(ctx, config):
                if len(tasks) == 1:
                    return Resolution.applied(tasks[0]["upid"])
                if not config.get("lock"):
                    return Resolution.applied()
            elif config.get("lock") == "create" and not config.get("description") and len(tasks) == 1 and tasks[0]["running"]:
                # PVE reserves the ID with an empty config under lock "create" while the task extracts the template
                return Resolution.applied(tasks[0]["upid"])
            return Resolution.undecidable("CT %d exists but cannot be tied to this operation's create request yet; check CT %d and the "
                                          "vzcreate tasks on node %s before re-running." % (ctx.vmid, ctx.vmid, ctx.node))
        if len(tasks) == 1 and tasks[0]["ok"] is False:
            return Resolution.applied(tasks[0]["upid"])  # followed, so the stage reports task_failed
        return Resolution("not_applied", message="No container %d and no vzcreate task of this token since the dispatch are visible: the "
                                                 "create request may not have reached Proxmox, or may still be queued. It is never sent "
                                                 "again automatically; check the node's tasks, then re-run to read again or abandon the "
                                                 "operation." % ctx.vmid)

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        after = {"vmid": ctx.vmid, "exists": True, "type": "lxc", "hostname": ctx.plan["target"]["name"],
                 "ostemplate": _safe_template(ctx), "rootfs": "%s:%d" % (ctx.plan["storage"], ctx.plan["resources"]["diskGiB"]),
                 "net0Mac": container_mac(ctx.operation), "unprivileged": bool(ctx.mapping.get("unprivileged", True)),
                 "description": binding_description(ctx.operation)}
        before = dict(after) if ctx.facts.get("adopt") else {"vmid": ctx.vmid, "exists": False}
        return {"before": before, "after": after}


def _safe_template(ctx: StageContext) -> str | None:
    try:
        return _template_volume(ctx)
    except StageError:
        return None


# ---------------------------------------------------------------------------------------------------
# start

class ContainerStartStage(StageLogic):
    kind = "start"
    task_type = "vzstart"
    default_timeout = 300.0

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        state = power_state(ctx)
        ctx.facts["running"] = state == "running"

    def request(self, ctx: StageContext) -> Request | None:
        return None if ctx.facts.get("running") else Request("POST", ctx.vm_path + "/status/start", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        state = power_state(ctx)
        if state != "running":
            raise StageError("The start task succeeded but the container is not running.", code="observation_mismatch",
                             details={"stage": ctx.kind, "powerState": state})
        return {"powerState": "running"}

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        tasks = find_tasks(ctx, "vzstart", ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        if power_state(ctx) == "running":
            return Resolution.applied(startResolvedBy="power_state")
        return Resolution("not_applied", message="No vzstart task for the container is visible and it is stopped: the start request may not "
                                                 "have reached Proxmox. Check the node's task list, then start it or abandon the operation.")

    def diff(self, ctx: StageContext) -> dict[str, t.Any] | None:
        return {"before": {"powerState": "running" if ctx.facts.get("running") else "stopped"}, "after": {"powerState": "running"}}


# ---------------------------------------------------------------------------------------------------
# readiness

def usable_ipv4(entry: t.Mapping[str, t.Any]) -> str | None:
    """The first global unicast IPv4 of an ``interfaces`` entry (not loopback, link-local or unspecified)."""
    candidates = [a.get("ip-address") for a in entry.get("ip-addresses") or [] if isinstance(a, dict) and a.get("ip-address-type") == "inet"]
    if isinstance(entry.get("inet"), str):
        candidates.append(entry["inet"].split("/", 1)[0])
    for text in candidates:
        try:
            address = ipaddress.IPv4Address(str(text))
        except ValueError:
            continue
        if not (address.is_loopback or address.is_link_local or address.is_unspecified or address.is_multicast):
            return str(address)
    return None


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ContainerReadinessStage(StageLogic):
    kind = "readiness"
    task_type = None
    final_codes = frozenset({"guest_network_unavailable"})

    def __init__(self, readiness_timeout: float = DEFAULT_READINESS_TIMEOUT, wall_clock: t.Callable[[], float] | None = None) -> None:
        self.readiness_timeout = float(readiness_timeout)
        self.wall_clock = wall_clock or time.time

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        if power_state(ctx) != "running":
            raise StageError("The container is not running; run the start stage first.", details={"stage": ctx.kind, "rule": "running"})
        if ctx.check_mode:
            raise StageInProgress({"phase": "check_mode", "note": "readiness only reads; it is skipped in check mode"})

    def checkpoint(self, ctx: StageContext) -> dict[str, t.Any] | None:
        """The deadline, journaled when the stage first starts; re-runs never extend it."""
        if "deadline" in ctx.evidence():
            return None
        now = self.wall_clock()
        return {"deadline": round(now + self.readiness_timeout, 3), "startedAt": _iso(now), "timeoutSeconds": self.readiness_timeout}

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        mac = container_mac(ctx.operation).lower()
        deadline = float(ctx.evidence()["deadline"])
        budget = ctx.wait_budget
        started = self.wall_clock()
        while True:
            try:
                entries = ctx.client.get(ctx.vm_path + "/interfaces")
            except ProviderError as err:
                if err.code not in ("server_error", "reply_lost", "transport_lost"):
                    raise
                entries = []
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict) and str(entry.get("hwaddr", entry.get("hardware-address", ""))).lower() == mac:
                    address = usable_ipv4(entry)
                    if address is not None:
                        return {"ipv4": address, "net0Mac": container_mac(ctx.operation), "guestReady": True,
                                "hostKeysVerified": False, "readinessObservedAt": _iso(self.wall_clock())}
            now = self.wall_clock()
            if now >= deadline:
                raise StageError("The container got no usable IPv4 address on net0 before the readiness deadline.",
                                 code="guest_network_unavailable", details={"stage": ctx.kind, "phase": "network"})
            if budget is not None and now >= started + float(budget):
                raise StageInProgress({"phase": "network", "deadline": _iso(deadline), "secondsLeft": int(deadline - now)})
            # never past the deadline, nor past this run's wait budget
            limit = deadline if budget is None else min(deadline, started + float(budget))
            ctx.sleep(min(_POLL, max(0.0, limit - now)))

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        return dict(ctx.operation.get("handoff") or {}, ipv4=evidence["ipv4"], guestUser=ctx.plan["guestUser"],
                    readinessObservedAt=evidence["readinessObservedAt"],
                    hostKeys="unverified: containers have no API to read SSH host keys (docs/containers.md)")


# ---------------------------------------------------------------------------------------------------
# packages (installed over SSH by the role, the Ansible way; this stage verifies and records)

class ContainerPackagesStage(StageLogic):
    """Proxmox has no exec API for containers: the role installs the packages over SSH (``add_host`` with the operator's
    key, ``ansible.builtin.apt``) and passes what ``ansible.builtin.package_facts`` then reports. The stage sends nothing;
    it completes only when every declared package is installed (in its declared version, when one is declared)."""

    kind = "packages"
    task_type = None
    final_codes = frozenset({"package_version_missing"})

    def __init__(self, installed: t.Mapping[str, t.Any] | None = None) -> None:
        self.installed = {str(k): str(v) for k, v in (installed or {}).items()}

    @classmethod
    def from_options(cls, options: t.Mapping[str, t.Any]) -> ContainerPackagesStage:
        """``installed``: what ``ansible.builtin.package_facts`` reported (or a plain name -> version mapping)."""
        return cls(installed_versions(options.get("installed")))

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        if power_state(ctx) != "running":
            raise StageError("The container is not running.", details={"stage": ctx.kind, "rule": "running"})

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        if ctx.check_mode:
            raise StageInProgress({"phase": "check_mode", "note": "packages are installed over SSH by the role"})
        if not self.installed:
            raise StageError("No installed package versions were given (the role passes ansible.builtin.package_facts).",
                             details={"stage": ctx.kind, "rule": "installed_required"})
        found: dict[str, str] = {}
        for package in ctx.definition["packages"]:
            version = self.installed.get(package["name"])
            if version is None or ("version" in package and version != package["version"]):
                raise StageError(code="package_version_missing", details={"stage": ctx.kind, "package": package["name"]})
            found[package["name"]] = version
        return {"installed": found, "installedBy": "ssh"}


# ---------------------------------------------------------------------------------------------------
# snapshot (gated like the VM snapshot: both gates re-read before the write)

class ContainerSnapshotStage(StageLogic):
    kind = "snapshot"
    task_type = "vzsnapshot"
    gates = (PROVISIONING_GATE, SNAPSHOTS_GATE)  # re-read by the runner right before the write, like the VM snapshot
    default_timeout = 600.0

    def _snapshots(self, ctx: StageContext) -> dict[str, dict[str, t.Any]]:
        data = ctx.client.get(ctx.vm_path + "/snapshot")
        if not isinstance(data, list):
            raise StageError("Proxmox answered the snapshot list with an unexpected body.", code="unexpected_response")
        return {str(item["name"]): item for item in data if isinstance(item, dict) and isinstance(item.get("name"), str)}

    def preconditions(self, ctx: StageContext) -> None:
        require_ours(ctx)
        ctx.facts["snapshots"] = self._snapshots(ctx)

    def request(self, ctx: StageContext) -> Request | None:
        name = snapshot_name(ctx.operation["operationId"])
        if name in ctx.facts.get("snapshots", {}):
            return None
        return Request("POST", ctx.vm_path + "/snapshot", {
            "snapname": name, "description": "vmanyware operation %s (%s)" % (ctx.operation["operationId"], ctx.plan["definitionName"])})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        name = snapshot_name(ctx.operation["operationId"])
        found = self._snapshots(ctx).get(name)
        if found is None:
            raise StageError("The snapshot task succeeded but the snapshot is not listed.", code="observation_mismatch",
                             details={"stage": ctx.kind, "snapname": name})
        return {"snapname": name, "snaptime": found.get("snaptime")}

    def handoff(self, ctx: StageContext, evidence: t.Mapping[str, t.Any]) -> dict[str, t.Any] | None:
        return dict(ctx.operation.get("handoff") or {}, snapshot=evidence["snapname"])

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        if snapshot_name(ctx.operation["operationId"]) in self._snapshots(ctx):
            return Resolution.applied()
        tasks = find_tasks(ctx, "vzsnapshot", ctx.vmid)
        if tasks:
            return Resolution.applied(tasks[0]["upid"])
        return Resolution("not_applied", message="The snapshot is not listed and no vzsnapshot task is visible; check the container's "
                                                 "snapshots and the node's task list before re-running.")


def installed_versions(facts: t.Any) -> dict[str, str]:
    """Name -> version from ``ansible.builtin.package_facts`` (name -> [{version: ...}]) or a plain name -> version mapping."""
    result: dict[str, str] = {}
    for name, value in (facts if isinstance(facts, dict) else {}).items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            result[str(name)] = str(value[0].get("version"))
        elif isinstance(value, (str, int, float)):
            result[str(name)] = str(value)
    return result
