# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The class that runs each registry row, bound by import: ``(family, kind) -> class``.

The registry (``registry.py``) is data only, so documents and checks read it without importing stage logic; this
table is where the logic joins it. Because every class is imported by name here, AnsiballZ packages every stage file
with any module that builds logic from the registry (``build_logic``), and tools that draw import graphs see them.
tests/unit/plugins/module_utils/_stages/test_registry.py checks that this table and the registry name the same stages.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .cleanup.destroy import DestroyStep
from .cleanup.stop import StopStep
from .container.common import DEFAULT_READINESS_TIMEOUT
from .container.create import ContainerCreateStage
from .container.packages import ContainerPackagesStage
from .container.readiness import ContainerReadinessStage
from .container.snapshot import ContainerSnapshotStage
from .container.start import ContainerStartStage
from .container.template import ContainerTemplateStage
from .registry import CLEANUP, CONTAINER, TEMPLATE, VM, StageSpec, stage_spec
from .protocol import StageLogic
from .template.configure import ConfigureStage
from .template.convert import ConvertStage
from .template.create import CreateStage
from .template.download import DownloadStage
from .template.generalize import GeneralizeStage
from .template.prepare import PrepareStage
from .template.shutdown import ShutdownStage
from .template.stamp import StampStage
from .template.start import TemplateStartStage
from .template.unconfigure import UnconfigureStage
from .vm.clone import CloneStage
from .vm.cloudinit import CloudinitStage
from .vm.disk import DiskStage
from .vm.packages import PackagesStage
from .vm.readiness import ReadinessStage
from .vm.resources import ResourcesStage
from .vm.seed import SeedStage
from .vm.snapshot import SnapshotStage
from .vm.start import StartStage

LOGIC: dict[tuple[str, str], type[StageLogic]] = {
    (VM, "clone"): CloneStage,
    (VM, "resources"): ResourcesStage,
    (VM, "disk"): DiskStage,
    (VM, "cloudinit"): CloudinitStage,
    (VM, "seed"): SeedStage,
    (VM, "start"): StartStage,
    (VM, "readiness"): ReadinessStage,
    (VM, "packages"): PackagesStage,
    (VM, "snapshot"): SnapshotStage,
    (CONTAINER, "template"): ContainerTemplateStage,
    (CONTAINER, "create"): ContainerCreateStage,
    (CONTAINER, "start"): ContainerStartStage,
    (CONTAINER, "readiness"): ContainerReadinessStage,
    (CONTAINER, "packages"): ContainerPackagesStage,
    (CONTAINER, "snapshot"): ContainerSnapshotStage,
    (TEMPLATE, "download"): DownloadStage,
    (TEMPLATE, "create"): CreateStage,
    (TEMPLATE, "disk"): DiskStage,  # the VM's disk stage: the row's kind and options make it the build's
    (TEMPLATE, "configure"): ConfigureStage,
    (TEMPLATE, "start"): TemplateStartStage,
    (TEMPLATE, "prepare"): PrepareStage,
    (TEMPLATE, "generalize"): GeneralizeStage,
    (TEMPLATE, "shutdown"): ShutdownStage,
    (TEMPLATE, "unconfigure"): UnconfigureStage,
    (TEMPLATE, "convert"): ConvertStage,
    (TEMPLATE, "stamp"): StampStage,
    (CLEANUP, "stop"): StopStep,
    (CLEANUP, "destroy"): DestroyStep,
}


def logic_class(spec: StageSpec) -> type[StageLogic]:
    """The class that runs ``spec``."""
    return LOGIC[(spec.family, spec.kind)]


def build_logic(spec: StageSpec, options: t.Mapping[str, t.Any] | None = None) -> StageLogic:
    """The stage logic of ``spec``: its class built from the row's options and ``options`` (module parameters), with the row's kind."""
    merged = dict(spec.options)
    merged.update(options or {})
    logic = logic_class(spec).from_options(merged)
    logic.kind = spec.kind
    return logic


def container_stage(
    kind: str, readiness_timeout: float = DEFAULT_READINESS_TIMEOUT, installed: t.Mapping[str, t.Any] | None = None
) -> StageLogic:
    """The logic of container stage ``kind`` (the ``stage`` option of ``vmanyware_container``)."""
    return build_logic(stage_spec(kind, CONTAINER), {"readiness_timeout": readiness_timeout, "installed": installed})


def template_stage(kind: str, params: t.Mapping[str, t.Any]) -> StageLogic:
    """The template build stage of ``kind`` with the options it uses from ``params`` (``vmanyware_template_stage``)."""
    return build_logic(stage_spec(kind, TEMPLATE), params)
