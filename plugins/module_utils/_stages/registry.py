# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stage registry: one declarative table of every stage the collection runs, in order.

A row (``StageSpec``) says what a stage is: its kind, its family (``vm``, ``container``,
``template``, ``cleanup``), the module and the role task file that run it, when a plan includes it,
and (VM stages) why it needs which privileges on which endpoints. Everything else is derived from
this table:

- the plan steps (``_formats.plan``, ``_formats.template_build``): ``planned_steps``;
- the privilege table, its stage order and the endpoint list (``_checks.permissions``), and the
  purposes the connection test names (``_checks.capabilities``);
- the ``stage`` choices of ``vmanyware_container`` and ``vmanyware_template_stage``.

The class that runs a row is bound to it by import in ``_stages/logic.py`` (``build_logic``), keyed
by family and kind: this file is data only and imports nothing of ours, so documents and checks
read it without reaching the client, the journal or a stage. The kind belongs to the row, not to the
class: two rows may share a logic class with different ``options`` (the template build's disk stage
is the VM's), and ``build_logic`` gives each instance its row's kind.

Other code iterates the registry through ``STAGES``, ``stages_in_order(family)``,
``stage_spec(kind, family)``, ``stage_kinds(family)`` and ``planned_steps(family, inputs)``. A unit
test checks the logic table, the module files, ``meta/runtime.yml`` and the role's stage files
against it (tests/unit/plugins/module_utils/_stages/test_registry.py).

This is a private module_utils file: not a public API (but the API other module_utils use).
"""

from __future__ import annotations

import dataclasses
import typing as t

VM = "vm"
CONTAINER = "container"
TEMPLATE = "template"
CLEANUP = "cleanup"
FAMILIES = (VM, CONTAINER, TEMPLATE, CLEANUP)
# The profile stage's kind; each of a plan's profile steps is named ``profile:<profile name>`` (its journal stage).
PROFILE = "profile"


@dataclasses.dataclass(frozen=True)
class Requirement:
    """One privilege on one ACL path, for PVE majors ``min_major``..``max_major`` (inclusive, None = open)."""

    path: str
    privilege: str
    min_major: int | None = None
    max_major: int | None = None

    def applies_to(self, major: int) -> bool:
        return (self.min_major is None or major >= self.min_major) and (
            self.max_major is None or major <= self.max_major
        )


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """An endpoint a stage sends; ``vmid`` says whether ``{vmid}`` is the template or the target."""

    method: str
    path: str
    vmid: str = "target"


# The planning inputs a condition reads: ``definition`` and ``mapping`` (VM and container plans), ``build`` (template builds).
Inputs = t.Mapping[str, t.Any]


@dataclasses.dataclass(frozen=True)
class StageSpec:
    """One stage: what runs it, when a plan has it, what it needs.

    ``module`` is the Ansible module that runs the
    stage; ``module_stage`` says the module runs several kinds through its ``stage`` option. ``role_file``
    is the role task file that calls the module (None: no role runs it step by step). ``when`` decides from
    the planning inputs whether a plan includes the stage (None: always). ``options`` are the logic's
    construction options of this row (a parametrised stage); ``privileges``, ``endpoints`` and ``purpose``
    feed the privilege table (VM stages). A ``nested_playbook`` row (the profile stage) is run by its module as a
    nested ansible-playbook, not by a ``StageLogic``: it has no logic class, and adoption cannot judge it from reads.
    """

    kind: str
    family: str
    module: str
    role_file: str | None = None
    module_stage: bool = False
    when: t.Callable[[Inputs], bool] | None = None
    options: t.Mapping[str, t.Any] = dataclasses.field(default_factory=dict)
    purpose: str = ""
    privileges: tuple[Requirement, ...] = ()
    endpoints: tuple[Endpoint, ...] = ()
    nested_playbook: bool = False

    def planned(self, inputs: Inputs) -> bool:
        """Whether a plan built from ``inputs`` includes this stage."""
        return self.when is None or bool(self.when(inputs))


# -- conditions (planning inputs -> whether the plan includes the stage) --------------------------------
def disk_grows(inputs: Inputs) -> bool:
    """The definition's disk is larger than the template's: the VM's disk is grown."""
    return bool(inputs["definition"]["resources"]["diskGiB"] > inputs["mapping"]["sourceDiskGiB"])


def runs_profiles(inputs: Inputs) -> bool:
    """The plan runs (or the build bakes) profiles, one ``profile:<name>`` step each: ``inputs['profiles']`` names them."""
    return bool(inputs.get("profiles"))


def has_packages(inputs: Inputs) -> bool:
    return bool(inputs["definition"]["packages"])


def wants_snapshot(inputs: Inputs) -> bool:
    return bool(inputs["definition"]["snapshotAfterProvisioning"])


def downloads_appliance(inputs: Inputs) -> bool:
    """The container mapping names an appliance (downloaded when missing) instead of a fixed ``ostemplate``."""
    return "appliance" in inputs["mapping"]


def declares_disk_size(inputs: Inputs) -> bool:
    """The template build declares ``diskGiB``: the imported disk is grown."""
    return "diskGiB" in inputs["build"]


# -- privilege rows ---------------------------------------------------------------------------------
TARGET = "/vms/{target}"
TEMPLATE_VM = "/vms/{template}"
STORAGE = "/storage/{storage}"
BRIDGE = "/sdn/zones/localnetwork/{bridge}"
NODE = "/nodes/{node}"

GUEST_AGENT = (
    Requirement(TARGET, "VM.GuestAgent.Audit", min_major=9),
    Requirement(TARGET, "VM.GuestAgent.Unrestricted", min_major=9),
    Requirement(TARGET, "VM.Monitor", max_major=8),
)
_QEMU = "/nodes/{node}/qemu/{vmid}"
# A guest command runs through the exec-marker wrapper (docs/stages.md, "Guest commands"): its marker files are read with
# file-read and a late start is refused with file-write; VM.GuestAgent.Unrestricted (exec) covers both.
_AGENT_EXEC = (
    Endpoint("POST", _QEMU + "/agent/exec"),
    Endpoint("GET", _QEMU + "/agent/exec-status"),
    Endpoint("GET", _QEMU + "/agent/file-read"),
    Endpoint("POST", _QEMU + "/agent/file-write"),
)


def _vm(kind: str, **fields: t.Any) -> StageSpec:
    return StageSpec(kind, VM, "vmanyware_" + kind, role_file="roles/provision/tasks/stages/%s.yml" % kind, **fields)


def _container(kind: str, **fields: t.Any) -> StageSpec:
    return StageSpec(
        kind,
        CONTAINER,
        "vmanyware_container",
        module_stage=True,
        role_file="roles/provision/tasks/stages/container_%s.yml" % kind,
        **fields,
    )


def _template(kind: str, **fields: t.Any) -> StageSpec:
    return StageSpec(
        kind,
        TEMPLATE,
        "vmanyware_template_stage",
        module_stage=True,
        role_file="roles/template/tasks/stage.yml",
        **fields,
    )


STAGES: tuple[StageSpec, ...] = (
    # VM provisioning (docs/stages.md)
    _vm(
        "clone",
        purpose="clone the template into the new VM",
        privileges=(
            Requirement(TEMPLATE_VM, "VM.Clone"),
            Requirement(TARGET, "VM.Allocate"),
            Requirement(STORAGE, "Datastore.AllocateSpace"),
            Requirement(BRIDGE, "SDN.Use"),
        ),
        endpoints=(Endpoint("POST", _QEMU + "/clone", vmid="template"),),
    ),
    _vm(
        "resources",
        purpose="set cores, memory and the instance tag",
        privileges=(
            Requirement(TARGET, "VM.Config.CPU"),
            Requirement(TARGET, "VM.Config.Memory"),
            Requirement(TARGET, "VM.Config.Options"),
        ),
        endpoints=(Endpoint("POST", _QEMU + "/config"), Endpoint("PUT", _QEMU + "/config")),
    ),
    _vm(
        "disk",
        when=disk_grows,
        purpose="grow the VM's disk",
        privileges=(Requirement(TARGET, "VM.Config.Disk"), Requirement(STORAGE, "Datastore.AllocateSpace")),
        endpoints=(Endpoint("PUT", _QEMU + "/resize"),),
    ),
    _vm(
        "cloudinit",
        purpose="write the Cloud-Init user, keys and network",
        privileges=(Requirement(TARGET, "VM.Config.Cloudinit"), Requirement(TARGET, "VM.Config.Network")),
        endpoints=(Endpoint("PUT", _QEMU + "/config"),),
    ),
    _vm(
        "seed",
        purpose="regenerate the Cloud-Init drive",
        privileges=(Requirement(TARGET, "VM.Config.Cloudinit"),),
        endpoints=(Endpoint("PUT", _QEMU + "/cloudinit"),),
    ),
    _vm(
        "start",
        purpose="start the VM",
        privileges=(Requirement(TARGET, "VM.PowerMgmt"),),
        endpoints=(Endpoint("POST", _QEMU + "/status/start"),),
    ),
    _vm(
        "readiness",
        purpose="wait for the guest agent and cloud-init",
        privileges=GUEST_AGENT,
        endpoints=(
            Endpoint("POST", _QEMU + "/agent/ping"),
            Endpoint("GET", _QEMU + "/agent/network-get-interfaces"),
            *_AGENT_EXEC,
        ),
    ),
    _vm(
        "packages",
        when=has_packages,
        purpose="install packages through the guest agent",
        privileges=GUEST_AGENT,
        endpoints=_AGENT_EXEC,
    ),
    # One step per profile that runs (kind profile, name profile:<name>), in the plan's run order.
    _vm(
        PROFILE,
        when=runs_profiles,
        nested_playbook=True,
        purpose="run the definition's profiles (Ansible roles) through the guest agent",
        privileges=GUEST_AGENT,
        endpoints=_AGENT_EXEC,
    ),
    _vm(
        "snapshot",
        when=wants_snapshot,
        purpose="take the final snapshot",
        privileges=(Requirement(TARGET, "VM.Snapshot"),),
        endpoints=(Endpoint("POST", _QEMU + "/snapshot"),),
    ),
    # Containers (guestType: container, docs/containers.md); their privileges are the operation's (_capabilities.CONTAINER_NEEDS).
    _container("template", when=downloads_appliance),
    _container("create"),
    _container("start"),
    _container("readiness"),
    _container("packages", when=has_packages),
    # One step per profile that runs, in the plan's run order (docs/profiles.md, "Profiles on containers"): over SSH
    # into the container or pct exec over SSH to its node; Proxmox's API is not involved, so no privileges.
    StageSpec(
        PROFILE,
        CONTAINER,
        "vmanyware_profile",
        role_file="roles/provision/tasks/stages/container_profile.yml",
        when=runs_profiles,
        nested_playbook=True,
    ),
    _container("snapshot", when=wants_snapshot),
    # Template builds (docs/templates.md, "Stages"); privileges: _capabilities.TEMPLATE_BUILD_NEEDS.
    _template("download"),
    _template("create"),
    _template("disk", when=declares_disk_size),
    _template("configure"),
    _template("start"),
    _template("prepare"),
    # One step per profile the build bakes (docs/templates.md, "Baking profiles"), in the preparation boot.
    StageSpec(
        PROFILE,
        TEMPLATE,
        "vmanyware_profile",
        role_file="roles/template/tasks/profile.yml",
        when=runs_profiles,
        nested_playbook=True,
    ),
    _template("generalize"),
    _template("shutdown"),
    _template("unconfigure"),
    _template("convert"),
    _template("stamp"),
    # vmanyware_cleanup's steps (docs/operations.md, "Lifecycle"): one module runs both; privileges: _permissions "cleanup".
    StageSpec("stop", CLEANUP, "vmanyware_cleanup"),
    StageSpec("destroy", CLEANUP, "vmanyware_cleanup"),
)


def stages_in_order(family: str = VM) -> tuple[StageSpec, ...]:
    """The rows of ``family`` in the order its stages run."""
    if family not in FAMILIES:
        raise KeyError(family)
    return tuple(spec for spec in STAGES if spec.family == family)


def stage_kinds(family: str = VM) -> tuple[str, ...]:
    """Every kind of ``family``, in order (a plan has a subset of them, in this order)."""
    return tuple(spec.kind for spec in stages_in_order(family))


def module_stage_kinds(family: str) -> tuple[str, ...]:
    """The kinds of ``family`` its stage module runs through its ``stage`` option (not a nested playbook's), in order."""
    return tuple(spec.kind for spec in stages_in_order(family) if spec.module_stage)


def step_kind(stage: str) -> str:
    """The registry kind of a journal stage or plan step name: ``profile:<name>`` is a ``profile`` row's step."""
    return PROFILE if stage.startswith(PROFILE + ":") else stage


def stage_spec(kind: str, family: str = VM) -> StageSpec:
    """The row of ``kind`` in ``family``; ``KeyError`` when there is none."""
    for spec in STAGES:
        if spec.family == family and spec.kind == kind:
            return spec
    raise KeyError("%s/%s" % (family, kind))


def planned_steps(family: str, inputs: Inputs) -> list[dict[str, t.Any]]:
    """The plan steps of ``family`` for ``inputs``: ``[{'position': 1, 'kind': ...}, ...]`` (1-based); a ``profile``
    row stands one step per name of ``inputs['profiles']``, in that order, each named ``profile:<name>``."""
    steps: list[dict[str, t.Any]] = []
    for spec in stages_in_order(family):
        if not spec.planned(inputs):
            continue
        if spec.kind == PROFILE:
            steps += [{"kind": PROFILE, "name": "%s:%s" % (PROFILE, name)} for name in inputs.get("profiles") or ()]
        else:
            steps.append({"kind": spec.kind})
    return [dict(position=position, **step) for position, step in enumerate(steps, start=1)]
