# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fault injection rules: method + path regex + occurrence -> action.

A rule: ``{"method": "POST"|"*", "path": "<regex searched in the /api2/json-relative path>",
"occurrence": N | "every", "action": ACTION, ...action parameters}``. ``occurrence: N`` fires on
the Nth matching request only (1-based); ``"every"`` on all of them. Actions and parameters:

- ``drop_reply``: run the request (mutations committed), then close the socket without a reply.
- ``drop_request``: close the socket without a reply before the request runs (nothing happens); to the
  client it looks exactly like ``drop_reply``.
- ``tls_abort_reply``: run the request (mutations committed), then break the TLS stream instead of replying:
  a TLS record the client cannot decrypt, then close. The client sees a TLS/SSL error after it sent the request.
- ``oversized_reply``: run the request, then reply 200 with a body of ``size`` bytes or more (default 9 MiB: over
  the collection client's 8 MiB bound), its ``Content-Length`` declared.
- ``cert_swap``: a connection fault, not a request fault (``method`` and ``path`` are ignored: the handshake comes
  before any request). From the ``occurrence``-th TLS connection accepted after the rule was added on (``every``:
  from the next one), the server presents ``pve-ssl-alt.pem``, a second certificate for the same names signed by the
  same CA (so CA verification accepts it; only a check of the leaf fingerprint tells them apart).
- ``delay``: ``seconds`` (real seconds) before handling.
- ``http_error``: ``status`` (500/503/596/...) and ``message``; the handler does not run.
- ``task_error``: the request's task ends with ``message`` as exit status (default ``simulated failure``).
- ``task_warnings``: the task ends with ``WARNINGS: count`` (default 1).
- ``lock_timeout``: HTTP 500 ``can't lock file '/var/lock/qemu-server/lock-N.conf' - got timeout``.
- ``vm_locked``: HTTP 500 ``VM is locked (lock)`` (``lock`` default ``backup``).
- ``checksum_mismatch``: HTTP 500 / task error ``checksum mismatch (file change by other user?)``.
- ``agent_not_running``: agent calls answer ``QEMU guest agent is not running``.
- ``dhcp_never``, ``cloudinit_error``, ``exec_disabled``: passed to the simulated guest.
- ``disk_full``: clone/resize tasks fail with a no-space error.
- ``error_after_effect``: the handler runs (its effect happens: a task starts, an ``agent/exec`` command starts in the
  guest), then the reply is HTTP ``status`` (default 500) with ``message`` (default ``guest-exec failed - got timeout``).
"""

from __future__ import annotations

import itertools
import re
import threading
import typing as t

from .datafile import load_data_file

ACTIONS = frozenset(
    {
        "drop_reply",
        "drop_request",
        "delay",
        "http_error",
        "task_error",
        "task_warnings",
        "lock_timeout",
        "vm_locked",
        "checksum_mismatch",
        "agent_not_running",
        "dhcp_never",
        "cloudinit_error",
        "exec_disabled",
        "disk_full",
    }
)
ACTIONS = ACTIONS | {
    "error_after_effect"
}  # its own line: a 500 (or ``status``) after the handler ran (see the module docstring)
# ``error_after_effect``'s reply when the rule names none: what PVE answers when the agent is busy (the command may run).
ERROR_AFTER_EFFECT_MESSAGE = "guest-exec failed - got timeout"
GUEST_ACTIONS = frozenset({"agent_not_running", "dhcp_never", "cloudinit_error", "exec_disabled"})
# Transport faults: the reply's TLS stream broken, an oversized reply, and the certificate of later connections.
TRANSPORT_ACTIONS = frozenset({"tls_abort_reply", "oversized_reply", "cert_swap"})
ACTIONS = ACTIONS | TRANSPORT_ACTIONS
# Rules that act on TLS handshakes (FaultSet.swap_certificate), never on a request (FaultSet.match skips them).
CONNECTION_ACTIONS = frozenset({"cert_swap"})
DEFAULT_OVERSIZED_BYTES = 9 * 1024 * 1024


class FaultSpecError(ValueError):
    """A fault rule is malformed."""


class Fault:
    """One rule and its match counter."""

    _ids = itertools.count(1)

    def __init__(self, spec: t.Mapping[str, t.Any]) -> None:
        if not isinstance(spec, t.Mapping):
            raise FaultSpecError("fault must be an object")
        action = spec.get("action")
        if action not in ACTIONS:
            raise FaultSpecError(f"unknown action {action!r}; known: {', '.join(sorted(ACTIONS))}")
        occ = spec.get("occurrence", "every")
        if occ != "every" and not (isinstance(occ, int) and not isinstance(occ, bool) and occ >= 1):
            raise FaultSpecError("occurrence must be a positive integer or 'every'")
        try:
            self.regex = re.compile(str(spec.get("path", ".*")))
        except re.error as exc:
            raise FaultSpecError(f"bad path regex: {exc}") from exc
        self.id = f"fault-{next(self._ids)}"
        self.method = str(spec.get("method", "*")).upper()
        self.occurrence: int | str = occ
        self.action: str = action
        self.params: dict[str, t.Any] = {
            k: v for k, v in spec.items() if k not in ("method", "path", "occurrence", "action")
        }
        self.spec = dict(spec)
        self.matches = 0
        self.fired = 0

    def to_dict(self) -> dict[str, t.Any]:
        return {"id": self.id, **self.spec, "matches": self.matches, "fired": self.fired}


class FaultSet:
    """Thread-safe list of rules."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.faults: list[Fault] = []

    def add(self, spec: t.Mapping[str, t.Any]) -> Fault:
        fault = Fault(spec)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()

    def list(self) -> list[dict[str, t.Any]]:
        with self.lock:
            return [f.to_dict() for f in self.faults]

    def match(self, method: str, rel_path: str) -> list[Fault]:
        """Rules firing for this request (counters advance for every matching rule)."""
        fired: list[Fault] = []
        with self.lock:
            for fault in self.faults:
                if fault.action in CONNECTION_ACTIONS:
                    continue
                if fault.method not in ("*", method.upper()) or not fault.regex.search(rel_path):
                    continue
                fault.matches += 1
                if fault.occurrence == "every" or fault.matches == fault.occurrence:
                    fault.fired += 1
                    fired.append(fault)
        return fired

    def swap_certificate(self) -> bool:
        """Called once per accepted TLS connection, before its handshake: whether it presents the alternate certificate
        (a ``cert_swap`` rule whose ``occurrence``-th connection has come; it stays swapped until the rule is cleared)."""
        swap = False
        with self.lock:
            for fault in self.faults:
                if fault.action not in CONNECTION_ACTIONS:
                    continue
                fault.matches += 1
                if fault.matches >= (1 if fault.occurrence == "every" else int(fault.occurrence)):
                    fault.fired += 1
                    swap = True
        return swap


def load_fault_file(path: str) -> list[dict[str, t.Any]]:
    """Read rules from a JSON or YAML file: a list of rules or ``{"faults": [...]}``."""
    data = load_data_file(path)
    if isinstance(data, dict):
        data = data.get("faults", [])
    if not isinstance(data, list):
        raise FaultSpecError("fault file must hold a list of rules")
    return data
