# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one process has just observed: a VM's configuration and power state read moments ago (docs/stages.md).

``vmanyware_provision`` runs the stages one after another in one process. Each stage reads the VM back after its
write (the observation independent of the reply); the next stage's preconditions would read the same milliseconds
later. With ``preflight: true`` the preflight's reads come first in the same process, and the clone stage's
preconditions would read the template and ask whether the VMID is free again. ``ObservingClient`` records these
observations from GETs this process made:

- the configuration (``GET {vm}/config``, with its ``digest``), by VM path: a VM's or a template's;
- the configuration and its pending changes (``GET {vm}/pending``: qemu-server lists each key's value in effect,
  the file's ``digest`` among them, and each pending change), by VM path;
- the power state (``GET {vm}/status/current``: ``running``, ``stopped``...), by VM path;
- "VMID N is free" (``GET /cluster/nextid`` with ``vmid=N`` answered ``N``), by VMID.

Rules (each is tested in tests/unit/test__recent_reads.py and tests/integration/test_provision_module.py):

1. **What it serves.** Only a stage's precondition checks, and only for a stage that opts in
   (``StageLogic.trusts_recent_config`` / ``trusts_recent_power`` / ``trusts_recent_template`` /
   ``trusts_recent_vmid_free``), and a stage opts in only where Proxmox itself protects its write against what the
   reused read would have shown (a digest the write carries, the clone re-checking the template and the VMID, the guest
   agent refusing a VM that is not running); docs/stages.md "Reads reused" lists them per stage. A read-back after a
   write (``observe``) and every read that resolves an unknown outcome (``resolve_lost_reply``) always read: they never
   ask ``RecentReads``.
2. **Max age.** An observation older than ``max_age`` seconds (5 s) is not "just observed": the check reads.
3. **Configuration.** Serves one check (then forgotten) and is forgotten at any write this process sends, before
   sending it. A stage takes it only when its write carries the digest (Proxmox refuses the write if the file changed
   since: locks, pending changes and the description are all in that file): resources, disk, cloudinit. A write without
   a digest (seed's ``PUT cloudinit``, start's POST) is not protected that way: those stages read the configuration, the
   pending list and the power state themselves, right before sending. A pending list that carries the digest records
   the configuration in effect like a configuration read.
4. **Power state.** Serves any number of checks within its max age, of readiness only (its guest agent requests are
   refused by Proxmox on a VM that is not running; no configuration write checks the power state). A write this process sends forgets it (before
   sending) unless the write cannot change a VM's power state: ``PUT {vm}/config``, ``PUT {vm}/resize`` and
   ``PUT {vm}/cloudinit`` (a configuration change, a disk grow, a Cloud-Init drive regeneration; a change to a running
   VM becomes pending or is hot-plugged, it never stops or starts it). Every POST (start, stop, clone, snapshot, guest
   agent) and DELETE forgets it.
5. **Unknown outcome.** A write whose reply did not arrive as a normal answer (lost reply, 5xx, any error) forgets every
   observation, power-neutral or not: the next precondition reads.
6. **Another client.** A change made by someone else inside the max age is seen by a recorded observation no more than
   by a fresh read made just before the write (that read's window to the write exists anyway); the recorded one makes
   that window at most ``max_age`` long, which is why only writes Proxmox itself re-checks take one. Writes that carry
   the digest still fail on any configuration change; seed and start read the configuration, the pending list and the
   power state themselves, so another client's change (``sshkeys``, a pending key, a start) stops the run before
   anything unprotected is sent.
7. **Template configuration** (clone, ``trusts_recent_template``). The template's configuration read moments ago (by the
   preflight) serves the clone stage's precondition check once, within ``max_age``, and any write forgets it (rule 3's
   bookkeeping: it is a configuration like any other). The clone's POST carries no digest: Proxmox's ``clone_vm`` loads
   the template's configuration itself, under the template's lock, and clones what it finds then. A fresh read made
   just before the POST therefore proves no more than the recorded one (rule 6's window, at most ``max_age`` longer):
   what the check uses it for - the template exists, is a template, how many volumes the clone allocates (admission) -
   is re-decided by Proxmox at the clone, and the clone's read-back always reads the new VM (description, disk on the
   planned storage, unlocked, stopped).
8. **VMID free** (clone, ``trusts_recent_vmid_free``). "VMID N is free" read moments ago serves the clone stage's
   check once, within ``max_age``, and any write this process sends forgets it (before sending: the write might be the
   one that takes N). A recorded "free" that went stale (another client took N since) cannot turn into a second VM or
   touch the other guest: ``clone_vm`` refuses a VMID whose configuration exists before it forks its worker (a
   synchronous error, "config file already exists": the stage reads and fails with ``vmid_taken``, nothing created, the
   stage pending), checks it again in the worker under the new VMID's lock, and the configuration file it then creates
   is refused by the cluster file system for a VMID used anywhere in the cluster (a failed ``qmclone`` task:
   ``task_failed``). Only the answer "free" is recorded: "taken" (``conflict``) is never served, so adoption and
   ``vmid_taken`` always decide on fresh reads.

The step-by-step path (one module process per stage) has no ``RecentReads``: every check reads.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import collections
import time
import typing as t

from .._core.protocols import ApiClient, ApiVerbs, ClientIdentity
from .pveconfig import config_of_pending

CONFIG_SUFFIX = "/config"
NEXTID_PATH = "/cluster/nextid"
PENDING_SUFFIX = "/pending"
STATUS_SUFFIX = "/status/current"
# Writes that cannot change a VM's power state (rule 4): (method, path suffix after the VM path).
POWER_NEUTRAL_WRITES = frozenset({("PUT", "/config"), ("PUT", "/resize"), ("PUT", "/cloudinit")})
# An observation read longer ago than this is not "just observed" (seconds).
DEFAULT_MAX_AGE = 5.0


class RecentReads:
    """Configurations and power states (by VM path) and free VMIDs this process read since its last write that could
    change them."""

    def __init__(self, max_age: float = DEFAULT_MAX_AGE, clock: t.Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.clock = clock
        self._configs: dict[str, tuple[float, dict[str, t.Any]]] = {}
        self._power: dict[str, tuple[float, str]] = {}
        self._free_vmids: dict[int, float] = {}
        # Precondition reads saved, by what was not read again ("config", "template", "power", "vmid_free"): for tests and
        # the benchmark's account.
        self.saved: collections.Counter[str] = collections.Counter()

    @property
    def served(self) -> int:
        """Precondition reads saved in all."""
        return sum(self.saved.values())

    def record(self, vm_path: str, config: t.Any) -> None:
        if isinstance(config, dict) and isinstance(config.get("digest"), str):
            self._configs[vm_path] = (self.clock(), dict(config))

    def record_pending(self, vm_path: str, items: t.Any) -> None:
        """A pending list: the configuration in effect, when it carries the digest (pending changes are not served)."""
        if not isinstance(items, list):
            return
        listed = [item for item in items if isinstance(item, dict)]
        config = config_of_pending(listed)
        if isinstance(config.get("digest"), str):
            self._configs[vm_path] = (self.clock(), config)

    def record_power(self, vm_path: str, status: t.Any) -> None:
        state = status.get("status") if isinstance(status, dict) else None
        if isinstance(state, str) and state:
            self._power[vm_path] = (self.clock(), state)

    def record_free_vmid(self, vmid: t.Any, answer: t.Any) -> None:
        """``GET /cluster/nextid?vmid=N`` answered ``N``: N is free (rule 8). Any other answer records nothing."""
        try:
            free = int(answer) == int(vmid)
        except (TypeError, ValueError):
            return
        if free:
            self._free_vmids[int(vmid)] = self.clock()

    def forget_all(self) -> None:
        self._configs.clear()
        self._power.clear()
        self._free_vmids.clear()

    def before_write(self, method: str, path: str) -> None:
        """Rules 3, 4 and 8, applied before a write is sent: every configuration and free VMID goes; power states only
        unless the write is power-neutral (then the others' stay too: it changes no VM's power state)."""
        self._configs.clear()
        self._free_vmids.clear()
        if not any(method.upper() == verb and path.endswith(suffix) for verb, suffix in POWER_NEUTRAL_WRITES):
            self._power.clear()

    def _fresh(self, read_at: float) -> bool:
        return self.clock() - read_at <= self.max_age

    def take(self, vm_path: str, what: str = "config") -> dict[str, t.Any] | None:
        """The configuration read moments ago (then forgotten: it serves one check), or ``None``: read it.

        ``what`` names the saved read for the account: ``config`` (the VM's own, rule 3) or ``template`` (rule 7)."""
        entry = self._configs.pop(vm_path, None)
        if entry is None or not self._fresh(entry[0]):
            return None
        self.saved[what] += 1
        return entry[1]

    def vmid_free(self, vmid: int) -> bool:
        """Whether "VMID ``vmid`` is free" was read moments ago (then forgotten: it serves one check); ``False``: ask."""
        read_at = self._free_vmids.pop(vmid, None)
        if read_at is None or not self._fresh(read_at):
            return False
        self.saved["vmid_free"] += 1
        return True

    def power(self, vm_path: str) -> str | None:
        """The power state read moments ago (it stays for later checks within its max age), or ``None``: read it."""
        entry = self._power.get(vm_path)
        if entry is None:
            return None
        if not self._fresh(entry[0]):
            del self._power[vm_path]
            return None
        self.saved["power"] += 1
        return entry[1]


class ObservingClient(ApiVerbs):
    """A client that records the configurations, power states and free VMIDs it reads into ``RecentReads`` and forgets them
    at writes."""

    def __init__(self, client: ApiClient, reads: RecentReads) -> None:
        self._client = client
        self.reads = reads

    @property
    def settings(self) -> ClientIdentity:
        return self._client.settings

    @property
    def provider_scope_id(self) -> str | None:
        return self._client.provider_scope_id

    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        if method.upper() != "GET":
            # Forgotten before sending: a write whose reply is lost may still have changed the VM.
            self.reads.before_write(method, path)
            try:
                return self._client.request(method, path, params)
            except BaseException:
                self.reads.forget_all()  # rule 5: an unknown outcome, whatever the write
                raise
        envelope = self._client.request(method, path, params)
        if path == NEXTID_PATH and params and set(params) == {"vmid"} and isinstance(envelope, dict):
            self.reads.record_free_vmid(params["vmid"], envelope.get("data"))
        elif not params and isinstance(envelope, dict):
            if path.endswith(CONFIG_SUFFIX):
                self.reads.record(path[: -len(CONFIG_SUFFIX)], envelope.get("data"))
            elif path.endswith(PENDING_SUFFIX):
                self.reads.record_pending(path[: -len(PENDING_SUFFIX)], envelope.get("data"))
            elif path.endswith(STATUS_SUFFIX):
                self.reads.record_power(path[: -len(STATUS_SUFFIX)], envelope.get("data"))
        return envelope

    def __getattr__(self, name: str) -> t.Any:
        # close ...: the wrapped client's
        return getattr(self._client, name)
