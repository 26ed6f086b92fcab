# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The profile stage (``vmanyware_profile``, docs/profiles.md, "Running profiles"): one journaled stage ``profile:<name>`` per profile
of the plan, run as a nested ``ansible-playbook`` of the profile's role against the guest (_runtime/nested_playbook.py).

The journal records the dispatch before the nested run starts and the evidence ``{changed, ok, failed, unreachable,
seconds}`` after it. The rules:

- a stage found ``completed`` is skipped (nothing runs); a plan entry with ``run: false`` (baked into the template, not
  per guest) has no stage and is skipped with its reason;
- a stage found ``dispatching`` (the controller died while its nested run went on) is recorded ``uncertain``: whether
  the role ran to its end is unknown, and an unknown mutation is never re-sent blindly. So is a nested run that failed
  (a failed or unreachable task, no recap) or was cancelled: the role may have applied part of its tasks;
- an ``uncertain`` profile stage runs again only with ``rerun_uncertain``: the journal records the re-run in the
  evidence (``reruns``) before it starts, and the stage goes ``uncertain`` -> ``completed`` when it succeeds (the
  journal allows no second dispatch; Ansible roles are meant to be idempotent, and the operator says so explicitly);
- the provisioning gate is read again right before the run (an environment ``false`` wins), as for every write;
- the transport fits the guest type (``qga`` or ``ssh`` for a VM, ``ssh`` or ``pct`` for a container;
  ``profile_transport_unsupported`` otherwise, before anything runs or is recorded), and the route is checked read-only
  before the dispatch: ``pct`` probes the node (its host key, ``pct``, the container running), ``ssh`` into a container
  needs the container's host key in the operator's known_hosts file under the recorded address.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import time
import typing as t

from .._api.argspec import CONNECTION_OPTION_NAMES, connection_argument_spec, connection_settings
from .._api.node_ssh import NodeSshRoute, NodeSshSettings, node_settings, node_ssh_argument_spec
from .._core.cancel import Cancellation, RunCancelled, raise_if_cancelled
from .._core.errors import InputError
from .._journal.document import utc_now
from .._operation.create import PROVISIONING_GATE, read_gate, require_verified_tls
from .._stages.outcomes import StageError
from .._stages.registry import PROFILE, step_kind
from .._stages.runner import _require_not_ended
from .nested_playbook import GuestTarget, NestedResult, NestedRunner, cleanup, prepare, run_nested
from .module import ModuleEntry
from .progress import report as show
from .stage_module import _store_and_operation, journal_argument_spec

STAGE_PREFIX = PROFILE + ":"
TRANSPORTS = ("qga", "ssh", "pct")
VM_GUEST, CONTAINER_GUEST = "vm", "container"
# The transports each guest type takes, its default first: a VM's guest agent (qga) or SSH to its address; a container
# has no agent, so SSH into it or pct exec over SSH to its node (docs/profiles.md, "Profiles on containers").
GUEST_TRANSPORTS = {VM_GUEST: ("qga", "ssh"), CONTAINER_GUEST: ("ssh", "pct")}
DEFAULT_TIMEOUT = 3600.0
UNCERTAIN_TEXT = (
    "Whether the profile's role ran to its end is unknown. Check the guest, then run again with "
    "rerun_uncertain_profile: true (roles are meant to be idempotent) or abandon the operation."
)


def probe_node(settings: NodeSshSettings, vmid: int) -> None:
    """Read-only check of the node SSH route to container ``vmid`` (``NodeSshError`` with a ``node_ssh_*`` code)."""
    NodeSshRoute(settings).probe(vmid)


def host_key_known(known_hosts_file: str, host: str) -> bool:
    """Whether ``known_hosts_file`` holds a key for ``host`` (``ssh-keygen -F``, hashed entries too); True when
    ssh-keygen cannot run (ssh itself still checks the key)."""
    try:
        found = subprocess.run(
            ["ssh-keygen", "-F", host, "-f", os.path.expanduser(known_hosts_file)],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True
    return found.returncode == 0 and bool(found.stdout.strip())


@dataclasses.dataclass(frozen=True)
class GuestSsh:
    """The SSH transport's own settings: where the connection goes instead of the recorded address (a port forward or
    NAT; the key is still checked under the recorded address, ``HostKeyAlias``), the private key, and (containers) the
    operator's known_hosts file, which must hold the container's key under its recorded address."""

    host: str | None = None
    port: int | None = None
    private_key_file: str | None = None
    known_hosts_file: str | None = None


@dataclasses.dataclass(frozen=True)
class ProfileSettings:
    """What one profile stage run needs besides the journal: transport (None: the guest type's default), API connection
    (qga), the SSH settings (ssh), the node SSH route (pct), the operator's choices."""

    transport: str | None = None
    connection: t.Mapping[str, t.Any] = dataclasses.field(default_factory=dict)
    ssh: GuestSsh = GuestSsh()
    node_ssh: t.Mapping[str, t.Any] | None = None
    probe: t.Callable[[NodeSshSettings, int], None] = probe_node
    host_key_check: t.Callable[[str, str], bool] = host_key_known
    check_mode: bool = False
    rerun_uncertain: bool = False
    timeout: float = DEFAULT_TIMEOUT
    become: bool = False
    provisioning_option: bool | None = None
    environ: t.Mapping[str, str] | None = None
    cancel_check: t.Callable[[], str | None] = lambda: None
    temp_root: str | None = None


def stage_name(profile: str) -> str:
    """The journal stage of profile ``profile`` (the plan step's ``name``)."""
    return STAGE_PREFIX + profile


def is_profile_stage(kind: str) -> bool:
    return step_kind(kind) == PROFILE


def plan_profile(plan: t.Mapping[str, t.Any], profile: str) -> dict[str, t.Any]:
    """The plan's entry of ``profile``; ``invalid_option`` when the plan has none."""
    for entry in plan.get("profiles") or []:
        if isinstance(entry, t.Mapping) and entry.get("name") == profile:
            return dict(entry)
    raise InputError(
        "The operation's plan has no profile of this name.", path="profile", details={"rule": "profile_not_in_plan"}
    )


def guest_type(document: t.Mapping[str, t.Any]) -> str:
    """``container`` for a container operation (its plan's ``guestType``), ``vm`` otherwise (VMs, template builds)."""
    return CONTAINER_GUEST if (document.get("plan") or {}).get("guestType") == "container" else VM_GUEST


def resolve_transport(document: t.Mapping[str, t.Any], requested: str | None) -> str:
    """The transport of the operation's profile stages: ``requested``, or the guest type's default when None;
    ``profile_transport_unsupported`` when the guest type cannot take it (qga on a container, pct on a VM)."""
    kind = guest_type(document)
    allowed = GUEST_TRANSPORTS[kind]
    if requested is None or requested == "":
        return allowed[0]
    if requested not in TRANSPORTS:
        raise InputError("guest_connection must be qga, ssh or pct.", path="guest_connection", details={"rule": "enum"})
    if requested not in allowed:
        raise InputError(
            "A %s takes the profile transports %s, not %s."
            % ("container" if kind == CONTAINER_GUEST else "VM", " or ".join(allowed), requested),
            code="profile_transport_unsupported",
            path="guest_connection",
            details={"rule": "transport_guest_type", "transport": requested, "guestType": kind},
        )
    return requested


def preview(entry: t.Mapping[str, t.Any], transport: str, equivalent: str | None = None) -> dict[str, t.Any]:
    """What a run would do: the role, its variables, the transport and the command each task's command line becomes
    (``equivalent``); nothing runs."""
    result = {
        "profile": entry["name"],
        "version": entry.get("version"),
        "role": entry["role"],
        "vars": dict(entry.get("vars") or {}),
        "transport": transport,
    }
    if equivalent is not None:
        result["equivalent"] = equivalent
    return result


def preview_text(entry: t.Mapping[str, t.Any], transport: str = "qga", equivalent: str | None = None) -> str:
    names = sorted((entry.get("vars") or {}).keys())
    text = "would run role %s (vars: %s) through %s" % (entry["role"], ", ".join(names) or "none", transport)
    return text + ("; each task as: %s" % equivalent if equivalent else "")


def _node_route(document: t.Mapping[str, t.Any], settings: ProfileSettings) -> NodeSshSettings:
    """The node SSH route to the operation's node (``node_ssh``, required for pct), validated."""
    if not settings.node_ssh:
        raise InputError(
            "The pct transport needs node_ssh (the node's SSH endpoint, the dedicated key and a known_hosts file).",
            path="node_ssh",
            details={"rule": "required"},
        )
    return node_settings(settings.node_ssh, str(document["target"]["node"]), command_timeout=settings.timeout)


def _container_known_hosts(settings: ProfileSettings, must_exist: bool = True) -> str:
    """The operator's known_hosts file for SSH into a container (required; it must exist when the run needs it: a
    check-mode preview comes before the packages stage that may record the key on first use)."""
    path = settings.ssh.known_hosts_file
    if not path:
        raise InputError(
            "SSH into a container needs known_hosts_file, the operator's known_hosts with the container's host key "
            '(containers have no API to read it: docs/containers.md, "SSH trust").',
            path="known_hosts_file",
            details={"rule": "required"},
        )
    if must_exist and not os.path.isfile(os.path.expanduser(path)):
        raise InputError("The file does not exist or is not a regular file.", path="known_hosts_file")
    return os.path.expanduser(path)


def _address(document: t.Mapping[str, t.Any]) -> str | None:
    handoff = document.get("handoff") or {}
    address = handoff.get("address") or handoff.get("ipv4")
    return str(address) if address else None


def equivalent_command(document: t.Mapping[str, t.Any], transport: str, settings: ProfileSettings) -> str:
    """The command line each task's command becomes on this transport (``<task>``), as an operator would type it."""
    target = document["target"]
    vmid = int(target["vmid"])
    if transport == "qga":
        return "qm guest exec %d -- /bin/sh -c <task>" % vmid
    if transport == "pct":
        node = _node_route(document, settings)
        return (
            "ssh -p %d -i %s -o StrictHostKeyChecking=yes -o UserKnownHostsFile=%s %s@%s pct exec %d -- /bin/sh -c <task>"
            % (
                node.port,
                shlex.quote(node.private_key_file),
                shlex.quote(node.known_hosts_file),
                node.user,
                node.host,
                vmid,
            )
        )
    address = _address(document) or "<readiness address>"
    user = (document.get("handoff") or {}).get("guestUser") or document["plan"].get("guestUser") or "<guest user>"
    if guest_type(document) == CONTAINER_GUEST:
        known = shlex.quote(_container_known_hosts(settings, must_exist=False))
    else:
        known = "<the agent-verified host keys>"
    words = ["ssh"]
    if settings.ssh.port is not None:
        words += ["-p", str(settings.ssh.port)]
    if settings.ssh.private_key_file:
        words += ["-i", shlex.quote(settings.ssh.private_key_file)]
    words += ["-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=" + known]
    if (settings.ssh.host and settings.ssh.host != address) or guest_type(document) == CONTAINER_GUEST:
        words += ["-o", "HostKeyAlias=" + address]
    words += ["%s@%s" % (user, settings.ssh.host or address), "<task>"]
    return " ".join(words)


def _target(document: t.Mapping[str, t.Any], transport: str, settings: ProfileSettings) -> GuestTarget:
    target = document["target"]
    vmid, node = int(target["vmid"]), str(target["node"])
    if transport == "qga":
        return GuestTarget("qga", vmid, node)
    if transport == "pct":
        route = _node_route(document, settings)
        return GuestTarget(
            "pct",
            vmid,
            node,
            address=route.host,
            port=route.port,
            user=route.user,
            private_key_file=os.path.expanduser(route.private_key_file),
            known_hosts_file=os.path.expanduser(route.known_hosts_file),
            connect_timeout=route.connect_timeout,
        )
    handoff = document.get("handoff") or {}
    address = _address(document)
    container = guest_type(document) == CONTAINER_GUEST
    if not address or not (container or handoff.get("knownHosts")):
        raise StageError(
            "The SSH transport needs the guest's address (and, for a VM, its agent-verified host keys) from the "
            "readiness stage.",
            code="stage_precondition_failed",
            details={"rule": "handoff_required"},
        )
    ssh = settings.ssh
    return GuestTarget(
        "ssh",
        vmid,
        node,
        address=ssh.host or address,
        user=str(handoff.get("guestUser") or document["plan"].get("guestUser")),
        known_hosts=() if container else tuple(handoff["knownHosts"]),
        port=ssh.port,
        private_key_file=os.path.expanduser(ssh.private_key_file) if ssh.private_key_file else None,
        known_hosts_file=_container_known_hosts(settings) if container else None,
        host_key_alias=address if container or (ssh.host and ssh.host != address) else None,
    )


def _check_route(target: GuestTarget, settings: ProfileSettings, kind: str) -> None:
    """Read-only, before the dispatch: the node route answers with the container running (pct), or the operator's
    known_hosts has the container's key under its recorded address (ssh into a container). A refusal leaves the stage
    pending: nothing ran."""
    if target.transport == "pct":
        settings.probe(
            NodeSshSettings(
                host=str(target.address),
                port=int(target.port or 22),
                user=str(target.user),
                private_key_file=str(target.private_key_file),
                known_hosts_file=str(target.known_hosts_file),
                connect_timeout=int(target.connect_timeout or 10),
            ),
            target.vmid,
        )
    elif target.transport == "ssh" and target.known_hosts_file and target.host_key_alias:
        if not settings.host_key_check(target.known_hosts_file, target.host_key_alias):
            raise StageError(
                "known_hosts_file has no host key for the container's recorded address: compare the container's key "
                "(pct exec <vmid> -- ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the node) and add it under "
                'that address, or use the pct transport (docs/containers.md, "SSH trust"). Nothing ran.',
                code="stage_precondition_failed",
                details={"stage": kind, "rule": "host_key_unknown"},
            )


def _compact(record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {key: record[key] for key in ("kind", "position", "status", "attempts")}


def _evidence(entry: t.Mapping[str, t.Any], transport: str, result: NestedResult) -> dict[str, t.Any]:
    return {
        "changed": result.changed,
        "ok": result.ok,
        "failed": result.failed,
        "unreachable": result.unreachable,
        "seconds": result.seconds,
        "exitStatus": result.rc,
        "recapFound": result.recap_found,
        "role": entry["role"],
        "transport": transport,
    }


def _succeeded(result: NestedResult) -> bool:
    return result.recap_found and result.rc == 0 and result.failed == 0 and result.unreachable == 0


def run_profile(
    store: t.Any,
    operation_id: str,
    profile: str,
    settings: ProfileSettings,
    *,
    runner: NestedRunner = run_nested,
    report: t.Callable[[str], None] = show,
    clock: t.Callable[[], float] = time.monotonic,
) -> dict[str, t.Any]:
    """Run (or skip, or preview) the stage of ``profile``; the result names the stage and its evidence."""
    document = store.load(operation_id)
    transport = resolve_transport(document, settings.transport)  # before anything else: a wrong pairing runs nothing
    entry = plan_profile(document["plan"], profile)
    profiles = [item for item in document["stages"] if is_profile_stage(item["kind"])]
    result: dict[str, t.Any] = {"changed": False, "operation_id": operation_id, "profile": profile}
    if not entry.get("run", True):
        reason = "baked into the template (version %s) and not per guest" % entry.get("version")
        report("profile %s: skipped, %s" % (profile, reason))
        return dict(result, skipped=True, reason=reason)
    kind = stage_name(profile)
    record = next((item for item in document["stages"] if item["kind"] == kind), None)
    if record is None:
        raise InputError(
            "The operation has no stage for this profile.", path="profile", details={"rule": "profile_not_in_stages"}
        )
    line = "profile %d/%d %s" % (profiles.index(record) + 1, len(profiles), profile)
    _require_not_ended(document)
    if record["status"] == "completed":
        report("%s: completed earlier, skipped" % line)
        return dict(result, stage=_compact(record), evidence=dict(record["evidence"]))
    if record["status"] == "failed":
        raise StageError(
            "The stage failed earlier; the operation keeps the target for the operator.",
            code="stage_failed",
            details={"stage": kind},
        )
    equivalent = equivalent_command(document, transport, settings)  # checks the transport's options too
    if settings.check_mode:
        report("%s: %s" % (line, preview_text(entry, transport, equivalent)))
        return dict(result, stage=_compact(record), preview=preview(entry, transport, equivalent))
    for earlier in document["stages"][: record["position"] - 1]:
        if earlier["status"] != "completed":
            raise StageError(
                "An earlier stage has not completed.",
                code="stage_out_of_order",
                details={"stage": kind, "waiting_for": earlier["kind"]},
            )
    environ = os.environ if settings.environ is None else settings.environ
    if record["status"] == "dispatching":
        # The controller died while the nested run went on (or before it recorded the end): the outcome is unknown.
        store.record_uncertain(
            operation_id, kind, "profile_uncertain", "The profile's nested run did not record its end."
        )
        record = dict(record, status="uncertain")
    if record["status"] == "uncertain" and not settings.rerun_uncertain:
        report("%s: uncertain, not run again without rerun_uncertain_profile" % line)
        raise StageError(UNCERTAIN_TEXT, code="profile_uncertain", details={"stage": kind, "operationId": operation_id})
    raise_if_cancelled(settings.cancel_check)
    if not read_gate(environ, PROVISIONING_GATE, settings.provisioning_option):
        raise StageError(code="provisioning_disabled", details={"stage": kind, "gate": PROVISIONING_GATE})
    target = _target(document, transport, settings)
    _check_route(target, settings, kind)
    rerun = record["status"] == "uncertain"
    if rerun:
        reruns = list(record["evidence"].get("reruns") or []) + [utc_now()]
        store.record_evidence(operation_id, kind, {"reruns": reruns})
    else:
        summary = {
            "profile": profile,
            "version": entry.get("version"),
            "role": entry["role"],
            "transport": transport,
            "vars": sorted((entry.get("vars") or {}).keys()),
        }
        store.record_dispatch(operation_id, kind, summary)
    report("%s: %s role %s through %s" % (line, "running again" if rerun else "running", entry["role"], transport))
    started = clock()
    nested = prepare(
        profile,
        entry["role"],
        entry.get("vars") or {},
        target,
        settings.connection,
        become=settings.become,
        base_env=environ,
        temp_root=settings.temp_root,
    )
    try:
        outcome = runner(nested, settings.cancel_check, settings.timeout)
    except RunCancelled as err:
        evidence = {"cancelled": err.code, "seconds": round(clock() - started, 2)}
        store.record_evidence(operation_id, kind, evidence)
        if not rerun:
            store.record_uncertain(operation_id, kind, err.code, "The profile's nested run was stopped by a cancel.")
        report("%s: cancelled (%s); the stage is uncertain" % (line, err.code))
        raise
    finally:
        cleanup(nested)
    evidence = _evidence(entry, transport, outcome)
    if not _succeeded(outcome):
        store.record_evidence(operation_id, kind, evidence)
        if not rerun:
            store.record_uncertain(
                operation_id, kind, "profile_failed", "The profile's role did not run to a clean end."
            )
        report(
            "%s: failed (%d failed, %d unreachable, %d changed)"
            % (line, outcome.failed, outcome.unreachable, outcome.changed)
        )
        raise StageError(
            "The profile's role did not run to a clean end (a failed or unreachable task, or no recap); the stage is "
            "uncertain. " + UNCERTAIN_TEXT,
            code="profile_failed",
            details={
                "stage": kind,
                "operationId": operation_id,
                "failed": outcome.failed,
                "unreachable": outcome.unreachable,
            },
        )
    written = store.record_completed(operation_id, kind, evidence)
    if (
        written["status"] == "open"
        and written.get("release") is None
        and all(item["status"] == "completed" for item in written["stages"])
    ):
        written = store.update_operation_status(operation_id, "completed", expected_status="open")
    record = next(item for item in written["stages"] if item["kind"] == kind)
    report("%s: completed, %d changed (%d ok) in %.1f s" % (line, outcome.changed, outcome.ok, outcome.seconds))
    return dict(result, changed=outcome.changed > 0, stage=_compact(record), evidence=evidence)


def profile_argument_spec() -> dict[str, dict[str, t.Any]]:
    """``vmanyware_profile``'s options: the operation, the profile, the transport, the API connection (qga), the SSH
    settings (ssh) and the node SSH route (pct)."""
    spec: dict[str, dict[str, t.Any]] = {
        "operation_id": {"type": "str"},
        "preview_operation": {"type": "dict"},
        "profile": {"type": "str", "required": True},
        # unset: qga for a VM, ssh for a container (resolve_transport)
        "guest_connection": {"type": "str", "choices": list(TRANSPORTS)},
        "ssh_host": {"type": "str"},
        "ssh_port": {"type": "int"},
        "ssh_private_key_file": {"type": "path"},
        "known_hosts_file": {"type": "path"},
        "node_ssh": node_ssh_argument_spec(),
        "rerun_uncertain_profile": {"type": "bool", "default": False},
        "profile_timeout": {"type": "float", "default": DEFAULT_TIMEOUT},
        "profile_become": {"type": "bool", "default": False},
        "provisioning_enabled": {"type": "bool"},
    }
    spec.update(journal_argument_spec())
    spec.update(connection_argument_spec())
    return spec


def profile_module(params: t.Mapping[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """``vmanyware_profile``: run, skip or preview one profile stage; progress lines shown and returned in ``log``."""
    if params.get("profile_timeout") is not None and params["profile_timeout"] <= 0:
        raise InputError(
            "profile_timeout must be greater than 0.", path="profile_timeout", details={"rule": "positive"}
        )
    store, operation_id = _store_and_operation(params, check_mode)
    connection = {name: params.get(name) for name in CONNECTION_OPTION_NAMES}
    transport = resolve_transport(store.load(operation_id), params.get("guest_connection"))
    if transport == "qga" and not check_mode:
        # the nested qga connection refuses unverified TLS too; refusing here keeps the journal untouched
        require_verified_tls(connection_settings(params))
    if params.get("ssh_port") is not None and not 1 <= params["ssh_port"] <= 65535:
        raise InputError("ssh_port must be 1-65535.", path="ssh_port", details={"rule": "range"})
    cancel = Cancellation.from_environment()
    settings = ProfileSettings(
        transport=transport,
        connection=connection,
        ssh=GuestSsh(
            host=params.get("ssh_host") or None,
            port=params.get("ssh_port"),
            private_key_file=params.get("ssh_private_key_file") or None,
            known_hosts_file=params.get("known_hosts_file") or None,
        ),
        node_ssh=params.get("node_ssh"),
        check_mode=check_mode,
        rerun_uncertain=bool(params.get("rerun_uncertain_profile")),
        timeout=params.get("profile_timeout") or DEFAULT_TIMEOUT,
        become=bool(params.get("profile_become")),
        provisioning_option=params.get("provisioning_enabled"),
        cancel_check=cancel,
    )
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        show(line)

    with cancel.signals():
        result = run_profile(store, operation_id, params["profile"], settings, report=say)
    result["log"] = lines
    return result


def profile_entry() -> ModuleEntry:
    return ModuleEntry(
        argument_spec=profile_argument_spec,
        action=lambda params, check_mode, diff: profile_module(params, check_mode),
        libraries=("requests",),
    )
