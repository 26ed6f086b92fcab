# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``/nodes/{node}/qemu``: the VM list, config and pending reads, and config updates (qemu-server API2/Qemu.pm)."""

from __future__ import annotations

import re
import typing as t
import urllib.parse

from .. import guestlink
from ..state import DRIVE_RE, FAST_PLUG, VM, is_cdrom, is_cloudinit_volume, parse_kv
from ..tasks import Task, TaskFailed
from .core import ApiError, Call, Sim, param_error, route
from .qemu_volumes import delete_key, materialize, unused_or_free
from .resources import vm_resource


@route("GET", "/nodes/{node}/qemu")
def qemu_list(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    res = []
    for vmid in sorted(sim.state.vms):
        if sim.state.vms[vmid].node != sim.call_node(call) or not sim.has(call.subject, f"/vms/{vmid}", ["VM.Audit"]):
            continue
        vm = sim.state.vms[vmid]
        r = vm_resource(sim, vm)
        entry = {
            "vmid": vmid,
            "name": r["name"],
            "status": vm.status,
            "cpus": r["maxcpu"],
            "maxmem": r["maxmem"],
            "maxdisk": r["maxdisk"],
            "mem": 0,
            "disk": 0,
            "cpu": r["cpu"],
            "uptime": r["uptime"],
            "netin": 0,
            "netout": 0,
            "diskread": 0,
            "diskwrite": 0,
        }
        if vm.is_template:
            entry["template"] = 1
        for k in ("tags", "lock"):
            if k in r:
                entry[k] = r[k]
        if vm.status == "running":
            entry["pid"] = 4000 + vmid % 10000
        res.append(entry)
    return res


@route("GET", "/nodes/{node}/qemu/{vmid}")
def qemu_index(sim: Sim, call: Call) -> list[dict[str, str]]:
    sim.check_node(call)
    sim.vm(call)
    return [{"subdir": s} for s in ("config", "pending", "status", "snapshot", "agent", "cloudinit", "resize", "clone")]


@route("GET", "/nodes/{node}/qemu/{vmid}/config")
def qemu_config(sim: Sim, call: Call) -> dict[str, t.Any]:
    sim.check_node(call)
    vm = sim.vm(call)
    snap = call.str("snapshot")
    if snap:
        return snapshot_config_of(vm, snap)
    conf = dict(vm.config) if call.bool("current") else vm.pending_config()
    conf["digest"] = vm.digest()
    if "cipassword" in conf:
        conf["cipassword"] = "**********"
    return typed_config(conf)


_INT_KEYS = frozenset(
    {
        "cores",
        "sockets",
        "vcpus",
        "balloon",
        "cpuunits",
        "shares",
        "migrate_speed",
        "template",
        "acpi",
        "kvm",
        "onboot",
        "protection",
        "tablet",
        "localtime",
        "numa",
        "reboot",
        "freeze",
        "autostart",
        "ciupgrade",
        "snaptime",
        "vmstate",
        "keephugepages",
        "allow-ksm",
    }
)


def snapshot_config_of(vm: VM, name: str) -> dict[str, t.Any]:
    """A snapshot's config as ``GET .../config?snapshot=`` and ``GET .../snapshot/{name}/config`` return it."""
    s = vm.snapshots.get(name)
    if s is None:
        raise ApiError(500, f"snapshot '{name}' does not exist")
    conf: dict[str, t.Any] = dict(s.conf)
    conf["snaptime"] = s.snaptime
    if s.description:
        conf["description"] = s.description
    if s.parent:
        conf["parent"] = s.parent
    conf["digest"] = vm.digest()
    return typed_config(conf)


def typed_config(conf: dict[str, t.Any]) -> dict[str, t.Any]:
    """PVE returns integer/boolean config values as JSON numbers."""
    res: dict[str, t.Any] = {}
    for k, v in conf.items():
        if k in _INT_KEYS and isinstance(v, str) and re.fullmatch(r"-?\d+", v):
            res[k] = int(v)
        else:
            res[k] = v
    return res


@route("GET", "/nodes/{node}/qemu/{vmid}/pending")
def qemu_pending(sim: Sim, call: Call) -> list[dict[str, t.Any]]:
    sim.check_node(call)
    vm = sim.vm(call)
    res: list[dict[str, t.Any]] = []
    # qemu-server's config_with_pending_array lists every scalar key of the loaded configuration, which includes the
    # file's ``digest`` (parse_vm_config puts it there; ``qm pending`` skips it when printing).
    res.append({"key": "digest", "value": vm.digest()})
    keys = sorted(set(vm.config) | set(vm.pending) | {k.lstrip("!") for k in vm.pending_delete})
    for key in keys:
        if key in ("digest",):
            continue
        item: dict[str, t.Any] = {"key": key}
        if key in vm.config:
            item["value"] = typed_config({key: vm.config[key]})[key]
        if key in vm.pending:
            item["pending"] = typed_config({key: vm.pending[key]})[key]
        for d in vm.pending_delete:
            if d.lstrip("!") == key:
                item["delete"] = 2 if d.startswith("!") else 1
        if key == "cipassword":
            for k in ("value", "pending"):
                if k in item:
                    item[k] = "**********"
        res.append(item)
    return res


_PRIV_FOR_KEY = [
    (re.compile(r"(ide|sata|scsi|virtio)\d+|efidisk0|tpmstate0|unused\d+"), "VM.Config.Disk"),
    (re.compile(r"net\d+"), "VM.Config.Network"),
    (re.compile(r"memory|balloon|shares"), "VM.Config.Memory"),
    (re.compile(r"cores|sockets|cpu|vcpus|cpulimit|cpuunits|affinity|numa\d*"), "VM.Config.CPU"),
    (
        re.compile(r"ipconfig\d+|cicustom|cipassword|citype|ciupgrade|ciuser|nameserver|searchdomain|sshkeys"),
        "VM.Config.Cloudinit",
    ),
    (
        re.compile(
            r"name|description|onboot|tags|protection|boot|bootdisk|agent|startup|ostype|hookscript|lock|"
            r"migrate_downtime|migrate_speed|localtime|tablet|kvm|acpi|autostart|freeze|reboot|startdate|vmstatestorage|"
            r"keyboard|template"
        ),
        "VM.Config.Options",
    ),
]


def _priv_for(key: str, value: str | None) -> str:
    if value is not None and DRIVE_RE.fullmatch(key):
        if is_cloudinit_volume(value) or value.split(",")[0].endswith(":cloudinit"):
            return "VM.Config.Cloudinit"
        if is_cdrom(value):
            return "VM.Config.CDROM"
    for regex, priv in _PRIV_FOR_KEY:
        if regex.fullmatch(key):
            return priv
    return "VM.Config.HWType"


def _sshkeys_check(value: str) -> None:
    keys = urllib.parse.unquote(value)
    for line in keys.split("\n"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not re.match(r"((sk-)?(ssh|ecdsa)-[\w@.-]+)\s+[A-Za-z0-9+/=]+", line) and not re.match(
            r"\S+\s+(ssh|ecdsa|sk-)", line
        ):
            raise param_error({"sshkeys": f"invalid format - invalid ssh key '{line[:40]}'\n"})


class _ConfigChange:
    """A validated set of changes: ``sets`` (key -> value) and ``deletes``."""

    def __init__(self, call: Call) -> None:
        skip = {
            "node",
            "vmid",
            "digest",
            "delete",
            "revert",
            "skiplock",
            "background_delay",
            "force",
            "skip_cloud_init",
            "import-working-storage",
        }
        self.sets: dict[str, str] = {k: call.str(k) or "" for k in call.params if k not in skip}
        self.deletes: list[str] = [d for d in re.split(r"[,;\s\0]+", call.str("delete") or "") if d]
        self.revert: list[str] = [d for d in re.split(r"[,;\s\0]+", call.str("revert") or "") if d]
        self.digest = call.str("digest")
        self.skiplock = call.bool("skiplock")
        self.force = call.bool("force")


def _prepare_update(sim: Sim, call: Call) -> tuple[VM, _ConfigChange]:
    sim.check_node(call)
    vm = sim.vm(call)
    ch = _ConfigChange(call)
    if ch.skiplock and call.userid != "root@pam":
        raise param_error({"skiplock": "Only root may use this option."})
    if "sshkeys" in ch.sets:
        _sshkeys_check(ch.sets["sshkeys"])
    if not ch.sets and not ch.deletes and not ch.revert:
        raise ApiError(500, "no options specified")
    for key in ch.deletes:
        if key in ch.sets:
            raise param_error({"delete": f"you can't use '-{key}' and -delete {key}' at the same time"})
    for key in ch.deletes:
        sim.require(call.subject, f"/vms/{vm.vmid}", [_priv_for(key, vm.pending_config().get(key))])
    for key, value in ch.sets.items():
        sim.require(call.subject, f"/vms/{vm.vmid}", [_priv_for(key, value)])
        if DRIVE_RE.fullmatch(key):
            vol = value.split(",")[0]
            m = re.fullmatch(r"([a-z][a-z0-9\-_.]*[a-z0-9]):(\d+(?:\.\d+)?|cloudinit)", vol, re.I)
            if m:
                sid = m.group(1)
                if sid not in sim.state.storages:
                    raise ApiError(500, f"storage '{sid}' does not exist")
                sim.require(call.subject, f"/storage/{sid}", ["Datastore.AllocateSpace"])
        if re.fullmatch(r"net\d+", key):
            sim.require_vnet(call.subject, parse_kv(value, "model"))
    _early_checks(sim, vm, ch)
    return vm, ch


def _early_checks(sim: Sim, vm: VM, ch: _ConfigChange) -> None:
    del sim
    if ch.digest and ch.digest != vm.digest():
        raise ApiError(500, "checksum mismatch (file change by other user?)")
    if vm.lock and not ch.skiplock:
        raise ApiError(500, f"VM is locked ({vm.lock})")


def _hotplug_features(vm: VM) -> set[str]:
    value = vm.config.get("hotplug", "1")
    if value in ("1",):
        return {"network", "disk", "usb"}
    if value in ("0", ""):
        return set()
    return set(value.split(","))


def _hotpluggable(vm: VM, key: str) -> bool:
    feats = _hotplug_features(vm)
    if key in FAST_PLUG or re.fullmatch(r"ipconfig\d+", key):
        return True
    if re.fullmatch(r"net\d+", key):
        return "network" in feats
    if re.fullmatch(r"(scsi|virtio)\d+", key):
        return "disk" in feats
    if key in ("memory",):
        return "memory" in feats
    if key == "vcpus":
        return "cpu" in feats
    if key in ("cpuunits", "cpulimit", "balloon", "agent"):
        return key != "agent"
    return False


def _apply_update(sim: Sim, vm: VM, ch: _ConfigChange, task: Task | None) -> None:
    """vmconfig changes: write to pending, then apply (stopped) or hotplug (running)."""
    st = sim.state
    with st.lock:
        _early_checks(sim, vm, ch)
        for key in ch.revert:
            vm.pending.pop(key, None)
            vm.pending_delete = [d for d in vm.pending_delete if d.lstrip("!") != key]
        if task is not None:
            params = " ".join(f"-{k} {'<hidden>' if k == 'cipassword' else v}" for k, v in sorted(ch.sets.items()))
            if ch.deletes:
                params = f"-delete {','.join(ch.deletes)} " + params
            task.log(f"update VM {vm.vmid}: {params.strip()}")
        for key in ch.deletes:
            current = vm.pending_config()
            if key not in current:
                if task is not None:
                    task.warn(f"cannot delete '{key}' - not set in current configuration!")
                continue
            if vm.status == "running" and not _hotpluggable(vm, key):
                vm.pending.pop(key, None)
                if key in vm.config:
                    marker = ("!" if ch.force else "") + key
                    vm.pending_delete = [d for d in vm.pending_delete if d.lstrip("!") != key] + [marker]
                continue
            vm.pending.pop(key, None)
            delete_key(sim, vm, key, ch.force)
        for key, value in ch.sets.items():
            new_value = materialize(sim, vm, key, value)
            if vm.status == "running" and not _hotpluggable(vm, key):
                vm.pending[key] = new_value
                vm.pending_delete = [d for d in vm.pending_delete if d.lstrip("!") != key]
                continue
            old = vm.config.get(key)
            if (
                old is not None
                and DRIVE_RE.fullmatch(key)
                and not is_cdrom(old)
                and old.split(",")[0] != new_value.split(",")[0]
            ):
                unused_or_free(sim, vm, old.split(",")[0], False)
            vm.config[key] = new_value
            vm.pending.pop(key, None)
        if vm.status != "running":
            vm.cloudinit_generated = guestlink.generated_snapshot(vm.config)


@route("PUT", "/nodes/{node}/qemu/{vmid}/config")
def qemu_config_put(sim: Sim, call: Call) -> None:
    with sim.state.lock:
        vm, ch = _prepare_update(sim, call)
        try:
            _apply_update(sim, vm, ch, None)
        except TaskFailed as exc:
            raise ApiError(500, str(exc)) from exc
    return None


@route("POST", "/nodes/{node}/qemu/{vmid}/config")
def qemu_config_post(sim: Sim, call: Call) -> str | None:
    with sim.state.lock:
        vm, ch = _prepare_update(sim, call)

    def body(task: Task) -> None:
        sim.sleep("qmconfig")
        if call.fault("checksum_mismatch"):
            raise TaskFailed("checksum mismatch (file change by other user?)")
        _apply_update(sim, vm, ch, task)

    upid = sim.start_task(call, "qmconfig", str(vm.vmid), body)
    delay = call.int("background_delay")
    if delay:

        def wait() -> str | None:
            task = sim.tasks.get(upid)
            if task is not None and task.done.wait(sim.clock.real_seconds(delay)):
                if task.exitstatus == "OK" or (task.exitstatus or "").startswith("WARNINGS"):
                    return None
                raise ApiError(500, f"failed to update VM {vm.vmid}: {task.exitstatus}")
            return upid

        call.extra["wait_task"] = wait
    return upid
