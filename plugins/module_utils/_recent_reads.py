# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one process has just observed: a VM's configuration and power state read moments ago (docs/stages.md).

``vmanyware_provision`` runs the stages one after another in one process. Each stage reads the VM back after its
write (the observation independent of the reply); the next stage's preconditions would read the same milliseconds
later. ``ObservingClient`` records these observations, by VM path, from plain GETs this process made:

- the configuration (``GET {vm}/config``, with its ``digest``);
- the configuration and its pending changes (``GET {vm}/pending``: qemu-server lists each key's value in effect,
  the file's ``digest`` among them, and each pending change);
- the power state (``GET {vm}/status/current``: ``running``, ``stopped``...).

Rules (each is tested in tests/unit/test__recent_reads.py and tests/integration/test_provision_module.py):

1. **What it serves.** Only a stage's precondition checks, and only for a stage that opts in
   (``StageLogic.trusts_recent_config`` / ``trusts_recent_power``). A read-back after a write (``observe``) and every read
   that resolves an unknown outcome (``resolve_lost_reply``) always read: they never ask ``RecentReads``.
2. **Max age.** An observation older than ``max_age`` seconds (5 s) is not "just observed": the check reads.
3. **Configuration.** Serves one check (then forgotten) and is forgotten at any write this process sends, before
   sending it. A stage takes it only when its write carries the digest (Proxmox refuses the write if the file changed
   since: locks, pending changes and the description are all in that file) or its read-back re-checks the digest, or
   (start) when it re-reads what that configuration cannot prove: the pending list and the power state.
   A configuration recorded from a pending list also carries that list: it serves the no-pending check of the stage
   that takes the configuration (start, after the seed stage read the pending list back), once, under the same rules.
4. **Power state.** Serves any number of checks within its max age. A write this process sends forgets it (before
   sending) unless the write cannot change a VM's power state: ``PUT {vm}/config``, ``PUT {vm}/resize`` and
   ``PUT {vm}/cloudinit`` (a configuration change, a disk grow, a Cloud-Init drive regeneration; a change to a running
   VM becomes pending or is hot-plugged, it never stops or starts it). Every POST (start, stop, clone, snapshot, guest
   agent) and DELETE forgets it.
5. **Unknown outcome.** A write whose reply did not arrive as a normal answer (lost reply, 5xx, any error) forgets every
   observation, power-neutral or not: the next precondition reads.
6. **Another client.** A change made by someone else inside the max age is seen by a recorded observation no more than
   by a fresh read made just before the write (that read's window to the write exists anyway); the recorded one makes
   that window at most ``max_age`` long. Writes that carry the digest still fail on any configuration change; the
   power-changing stage (start) always reads the power state itself, so a VM another client started inside the
   window stops the run there, before anything is started.

The step-by-step path (one module process per stage) has no ``RecentReads``: every check reads.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import collections
import time
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._protocols import ApiClient, ApiVerbs, ClientIdentity
from ansible_collections.vmanyware.proxmox.plugins.module_utils._pveconfig import config_of_pending, pending_keys

CONFIG_SUFFIX = "/config"
PENDING_SUFFIX = "/pending"
STATUS_SUFFIX = "/status/current"
# Writes that cannot change a VM's power state (rule 4): (method, path suffix after the VM path).
POWER_NEUTRAL_WRITES = frozenset({("PUT", "/config"), ("PUT", "/resize"), ("PUT", "/cloudinit")})
# An observation read longer ago than this is not "just observed" (seconds).
DEFAULT_MAX_AGE = 5.0


class RecentReads:
    """Configurations and power states this process read since its last write that could change them, by VM path."""

    def __init__(self, max_age: float = DEFAULT_MAX_AGE, clock: t.Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.clock = clock
        self._configs: dict[str, tuple[float, dict[str, t.Any]]] = {}
        self._pending: dict[str, tuple[float, list[str]]] = {}
        self._power: dict[str, tuple[float, str]] = {}
        # Precondition reads saved, by what was not read again ("config", "power"): for tests and the benchmark's account.
        self.saved: collections.Counter[str] = collections.Counter()

    @property
    def served(self) -> int:
        """Precondition reads saved in all."""
        return sum(self.saved.values())

    def record(self, vm_path: str, config: t.Any) -> None:
        if isinstance(config, dict) and isinstance(config.get("digest"), str):
            self._configs[vm_path] = (self.clock(), dict(config))
            self._pending.pop(vm_path, None)

    def record_pending(self, vm_path: str, items: t.Any) -> None:
        """A pending list: the configuration in effect (when it carries the digest) and the keys with a pending change."""
        if not isinstance(items, list):
            return
        listed = [item for item in items if isinstance(item, dict)]
        config = config_of_pending(listed)
        if isinstance(config.get("digest"), str):
            self._configs[vm_path] = (self.clock(), config)
            self._pending[vm_path] = (self.clock(), pending_keys(listed))

    def record_power(self, vm_path: str, status: t.Any) -> None:
        state = status.get("status") if isinstance(status, dict) else None
        if isinstance(state, str) and state:
            self._power[vm_path] = (self.clock(), state)

    def forget_all(self) -> None:
        self._configs.clear()
        self._pending.clear()
        self._power.clear()

    def before_write(self, method: str, path: str) -> None:
        """Rules 3 and 4, applied before a write is sent: every configuration goes; power states only unless the write
        is power-neutral (then the others' stay too: it changes no VM's power state)."""
        self._configs.clear()
        self._pending.clear()
        if not any(method.upper() == verb and path.endswith(suffix) for verb, suffix in POWER_NEUTRAL_WRITES):
            self._power.clear()

    def _fresh(self, read_at: float) -> bool:
        return self.clock() - read_at <= self.max_age

    def take(self, vm_path: str) -> dict[str, t.Any] | None:
        """The configuration read moments ago (then forgotten: it serves one check), or ``None``: read it."""
        entry = self._configs.pop(vm_path, None)
        if entry is None or not self._fresh(entry[0]):
            return None
        self.saved["config"] += 1
        return entry[1]

    def take_pending(self, vm_path: str) -> list[str] | None:
        """The keys with a pending change, listed moments ago with the configuration a stage took (then forgotten), or
        ``None``: read the pending list."""
        entry = self._pending.pop(vm_path, None)
        if entry is None or not self._fresh(entry[0]):
            return None
        self.saved["pending"] += 1
        return entry[1]

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
    """A client that records the configurations and power states it reads into ``RecentReads`` and forgets them at writes."""

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
        if not params and isinstance(envelope, dict):
            if path.endswith(CONFIG_SUFFIX):
                self.reads.record(path[:-len(CONFIG_SUFFIX)], envelope.get("data"))
            elif path.endswith(PENDING_SUFFIX):
                self.reads.record_pending(path[:-len(PENDING_SUFFIX)], envelope.get("data"))
            elif path.endswith(STATUS_SUFFIX):
                self.reads.record_power(path[:-len(STATUS_SUFFIX)], envelope.get("data"))
        return envelope

    def __getattr__(self, name: str) -> t.Any:
        # close ...: the wrapped client's
        return getattr(self._client, name)
