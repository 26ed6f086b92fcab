# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What one process has just read: a VM configuration the previous stage read back moments ago.

``vmanyware_provision`` runs the stages one after another in one process. Each stage reads the VM's
configuration back after its write (the observation independent of the reply); the next stage's
preconditions would read the same configuration again milliseconds later. With ``RecentReads`` that
next stage takes the configuration just read instead of reading it again, and its write carries the
configuration's ``digest`` (Proxmox refuses a write whose digest is no longer the file's: every change
since, pending changes and locks included, is in that file). Only stages that send the digest, or
re-check it in their read-back, take it (``StageLogic.trusts_recent_config``).

A recorded configuration serves one precondition check at most, only until this process sends any
write (a write may change it), and only within ``max_age`` seconds. Reads that resolve an unknown
outcome never take it: they always read.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import time
import typing as t

from ansible_collections.vmanyware.proxmox.plugins.module_utils._protocols import ApiClient, ApiVerbs, ClientIdentity

CONFIG_SUFFIX = "/config"
# A configuration read longer ago than this is not "just observed" (seconds).
DEFAULT_MAX_AGE = 5.0


class RecentReads:
    """``GET {vm}/config`` replies received since this process's last write, by VM path."""

    def __init__(self, max_age: float = DEFAULT_MAX_AGE, clock: t.Callable[[], float] = time.monotonic) -> None:
        self.max_age = max_age
        self.clock = clock
        self._configs: dict[str, tuple[float, dict[str, t.Any]]] = {}
        self.served = 0  # precondition reads saved (for tests and the benchmark's account)

    def record(self, vm_path: str, config: t.Any) -> None:
        if isinstance(config, dict) and isinstance(config.get("digest"), str):
            self._configs[vm_path] = (self.clock(), dict(config))

    def forget_all(self) -> None:
        self._configs.clear()

    def take(self, vm_path: str) -> dict[str, t.Any] | None:
        """The configuration read moments ago (then forgotten: it serves one check), or ``None``: read it."""
        entry = self._configs.pop(vm_path, None)
        if entry is None or self.clock() - entry[0] > self.max_age:
            return None
        self.served += 1
        return entry[1]


class ObservingClient(ApiVerbs):
    """A client that records every configuration it reads into ``RecentReads`` and forgets them at any write."""

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
            self.reads.forget_all()
            return self._client.request(method, path, params)
        envelope = self._client.request(method, path, params)
        if path.endswith(CONFIG_SUFFIX) and not params and isinstance(envelope, dict):
            self.reads.record(path[:-len(CONFIG_SUFFIX)], envelope.get("data"))
        return envelope

    def __getattr__(self, name: str) -> t.Any:
        # close ...: the wrapped client's
        return getattr(self._client, name)
