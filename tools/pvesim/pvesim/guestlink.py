# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The server's single link to ``pvesim.cloudinit`` and ``pvesim.guest`` (written separately).

Keeps the API handlers independent of those modules' details: rendering the cloud-init dump,
the pending list, and creating a guest (a ``SimulatedGuest``, or a real one) with the per-VM
fault knobs. Every guest is used through ``pvesim.guest.GuestBackend``.
"""

from __future__ import annotations

import dataclasses
import typing as t

from . import cloudinit, guest, imagebuild, qemu_launch, vmnet

AgentNotRunning = guest.AgentNotRunning
AgentError = guest.AgentCommandError

# per-VM guest knobs set through the admin API or fault rules: vmid -> {field: value}
GUEST_FAULT_FIELDS = frozenset(f.name for f in dataclasses.fields(guest.GuestFaults))
GUEST_TIMING_FIELDS = frozenset(f.name for f in dataclasses.fields(guest.GuestTiming))


def render(config: t.Mapping[str, str], vmid: int, node: str) -> dict[str, str]:
    return cloudinit.render(config, vmid, node)


def generated_snapshot(config: t.Mapping[str, str]) -> dict[str, str]:
    return cloudinit.generated_snapshot(config)


def pending_items(config: t.Mapping[str, str], generated: t.Mapping[str, str]) -> list[dict[str, t.Any]]:
    return list(cloudinit.pending_items(config, generated))


def split_knobs(knobs: t.Mapping[str, t.Any]) -> tuple[dict[str, t.Any], dict[str, t.Any], list[str]]:
    """Split admin knobs into GuestFaults fields, GuestTiming fields and unknown names."""
    faults: dict[str, t.Any] = {}
    timing: dict[str, t.Any] = {}
    unknown: list[str] = []
    for key, value in knobs.items():
        if key in GUEST_FAULT_FIELDS:
            faults[key] = tuple(value) if isinstance(value, list) and key != "package_versions" else value
        elif key in GUEST_TIMING_FIELDS:
            timing[key] = float(value)
        else:
            unknown.append(key)
    return faults, timing, unknown


def create_guest(sim: t.Any, vm: t.Any) -> guest.GuestBackend:
    """A fresh guest for a VM that just (re)started, booted from its cloud-init drive.

    With a real-guest backend (``sim.guest_backend``) this boots a QEMU VM (``--guests real``,
    :class:`pvesim.realguest.RealGuest`) or starts an LXC container (``--guests container``,
    :class:`pvesim.containerguest.ContainerGuest`) instead of creating a ``SimulatedGuest``.
    """
    knobs = {
        **getattr(sim, "guest_timing", {}),
        **(sim.guest_knobs.get(vm.vmid, {}) if hasattr(sim, "guest_knobs") else {}),
    }
    faults, timing, _unknown = split_knobs(knobs)
    try:
        seed = cloudinit.drive_files(vm.config, vm.vmid, sim.state.node)
    except cloudinit.CloudinitError:
        seed = render(vm.config, vm.vmid, sim.state.node)
    backend = getattr(sim, "guest_backend", None)
    if backend is not None:
        stop_guest(getattr(vm, "guest", None))  # a reboot replaces a running guest
        volid = qemu_launch.boot_volume(vm.config)
        source = (
            imagebuild.image_file(sim, volid) if volid else None
        )  # an imported image, or what a template carried on
        extra = (
            {"ipv6_prefixes": vmnet.nic_prefixes(sim.state, vm)} if getattr(backend, "simulated_network", False) else {}
        )  # a container guest reports the simulated network's addresses
        real: guest.GuestBackend = backend.start(vm.vmid, vm.config, seed, disk_source=source, **extra)
        disk = getattr(real, "disk", None)
        if volid and source and disk:
            imagebuild.set_image_file(sim, volid, disk)  # from now on the volume's content is the guest's disk
        apply_knobs(real, knobs)
        return real
    gfaults = guest.GuestFaults(**faults)
    gtiming = guest.GuestTiming(**timing) if timing else None
    return guest.SimulatedGuest(
        vm.vmid,
        vm.config,
        seed,
        sim.clock.now,
        timing=gtiming,
        faults=gfaults,
        ipv6_prefixes=vmnet.nic_prefixes(sim.state, vm),  # what the routers announce where each NIC is plugged
    )


def stop_guest(guest_obj: guest.GuestBackend | None, graceful: bool = False) -> None:
    """The VM stops (``graceful``: shutdown): a real guest's QEMU ends; a simulated one is just dropped."""
    if guest_obj is not None:
        guest_obj.stop(graceful=graceful)


def forget_vm(sim: t.Any, vmid: int) -> None:
    """The VM was destroyed: a real-guest backend removes its disk."""
    backend = getattr(sim, "guest_backend", None)
    if backend is not None:
        backend.destroy_vm(vmid)


def admin_info(guest_obj: guest.GuestBackend | None) -> dict[str, t.Any]:
    """Extra fields for ``GET /_pvesim/vms/{vmid}`` (a real guest: accel, ssh_forward_port, qemu_pid ...)."""
    return {} if guest_obj is None else dict(guest_obj.admin_info())


def apply_knobs(guest_obj: guest.GuestBackend, knobs: t.Mapping[str, t.Any]) -> None:
    """Update a running guest's fault knobs in place."""
    faults, timing, _unknown = split_knobs(knobs)
    for key, value in faults.items():
        setattr(guest_obj.faults, key, value)
    if timing:
        guest_obj.timing = dataclasses.replace(guest_obj.timing, **timing)
