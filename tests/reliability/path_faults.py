# SPDX-License-Identifier: GPL-3.0-or-later
"""The path x request x fault table: every mutating request of the container, template build and cleanup paths (the VM
path is fault_matrix.py's), under every fault kind that applies to it, and the expected outcome of each case.

``SUBMISSIONS`` lists, per path, each request the path sends to Proxmox (method, path regex, occurrence after the stage
starts) and the stage that sends it; tests/reliability/path_driver.py drives the path in-process the way its module
does. ``FAULT_KINDS`` is the list of fault kinds: adding a kind is one line there (``needs`` names the tag a request must
carry for the kind to apply: ``task`` = Proxmox answers it with a task id, ``lockable`` = Proxmox refuses it while the
VM is locked). ``EXPECTED`` is the contract; tests/reliability/test_path_faults.py asserts each observed outcome equals
it and renders the table of docs/reliability.md ("Faults on every path"). ``VMANYWARE_RELIABILITY_RECORD=1`` prints the
observed outcomes in ``EXPECTED``'s format instead of comparing (the invariants are asserted either way), and
``python tests/reliability/path_faults.py --results DIR`` (DIR: the run's ``VMANYWARE_RELIABILITY_RESULTS``) prints
``EXPECTED`` from a recorded run and, when the run covered every case, rewrites the table in docs/reliability.md.

Abandon (``vmanyware_operation state=abandoned``, ``_operation_states.run_operation``) sends no request at all: it has no
row here; test_path_faults.test_abandon_sends_nothing proves it from the request log (``ABANDON_EVIDENCE``).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import typing as t
from pathlib import Path

NODE = "pve-test"
VMID = 201  # the VM of the cleanup-vm path
CTID = 320  # the container of the container and cleanup-container paths
TEMPLATE_VMID = 9100  # the VM of the template build
SEED_TEMPLATE = 9000  # the simulator's seeded template (the source of the VM clone)
_VM = r"/nodes/%s/qemu/%d" % (NODE, VMID)
_CT = r"/nodes/%s/lxc/%d" % (NODE, CTID)
_TPL = r"/nodes/%s/qemu/%d" % (NODE, TEMPLATE_VMID)

PATHS = ("container", "template", "cleanup-vm", "cleanup-container")


class Submission(t.NamedTuple):
    path: str  # container / template / cleanup-vm / cleanup-container
    stage: str  # the stage (or cleanup step) that sends it; faults are armed right before it runs
    method: str
    regex: str  # searched in the /api2/json-relative path
    occurrence: int  # the Nth matching request after the stage starts
    tags: frozenset[str] = frozenset()

    @property
    def name(self) -> str:
        return "%s/%s" % (self.path, self.stage)


TASK = frozenset({"task"})
LOCKABLE_TASK = frozenset({"task", "lockable"})
LOCKABLE = frozenset({"lockable"})

# Every mutating request of each path, in the order the path sends them. Containers carry no ``lockable`` tag: the
# simulator's ``vm_locked`` answers with the VM wording (``VM is locked``), and a container is refused as ``CT is locked``.
SUBMISSIONS: list[Submission] = [
    Submission("container", "template", "POST", r"/nodes/%s/aplinfo$" % NODE, 1, TASK),
    Submission("container", "create", "POST", r"/nodes/%s/lxc$" % NODE, 1, TASK),
    Submission("container", "start", "POST", _CT + r"/status/start$", 1, TASK),
    Submission("container", "snapshot", "POST", _CT + r"/snapshot$", 1, TASK),
    Submission("template", "download", "POST", r"/nodes/%s/storage/local/download-url$" % NODE, 1, TASK),
    Submission("template", "create", "POST", r"/nodes/%s/qemu$" % NODE, 1, TASK),
    Submission("template", "disk", "PUT", _TPL + r"/resize$", 1, LOCKABLE_TASK),
    Submission("template", "configure", "PUT", _TPL + r"/config$", 1, LOCKABLE),
    Submission("template", "start", "POST", _TPL + r"/status/start$", 1, LOCKABLE_TASK),
    Submission("template", "shutdown", "POST", _TPL + r"/status/shutdown$", 1, LOCKABLE_TASK),
    Submission("template", "unconfigure", "PUT", _TPL + r"/config$", 1, LOCKABLE),
    Submission("template", "convert", "POST", _TPL + r"/template$", 1, LOCKABLE_TASK),
    Submission("template", "stamp", "PUT", _TPL + r"/config$", 1, LOCKABLE),
    Submission("cleanup-vm", "stop", "POST", _VM + r"/status/stop$", 1, LOCKABLE_TASK),
    Submission("cleanup-vm", "destroy", "DELETE", _VM + r"$", 1, LOCKABLE_TASK),
    Submission("cleanup-container", "stop", "POST", _CT + r"/status/stop$", 1, TASK),
    Submission("cleanup-container", "destroy", "DELETE", _CT + r"$", 1, TASK),
]


class FaultKind(t.NamedTuple):
    label: str  # the column of the table
    rule: dict[str, t.Any]  # the simulator rule's action and parameters (faults.py)
    needs: str | None = None  # a tag the request must carry (None: every request)
    api_timeout: float = 10.0  # the client's timeout for the run the fault is armed in


# One line per fault kind (the same labels as fault_matrix.py's VM table).
FAULT_KINDS: list[FaultKind] = [
    FaultKind("reply lost after commit (drop_reply)", {"action": "drop_reply"}),
    FaultKind("request lost before it ran (drop_request)", {"action": "drop_request"}),
    FaultKind("HTTP 500", {"action": "http_error", "status": 500, "message": "simulated failure"}),
    FaultKind("HTTP 503", {"action": "http_error", "status": 503, "message": "simulated failure"}),
    FaultKind("HTTP 596", {"action": "http_error", "status": 596, "message": "simulated failure"}),
    FaultKind("timeout (delay 3 s > api_timeout 1.5 s)", {"action": "delay", "seconds": 3.0}, api_timeout=1.5),
    FaultKind("task error", {"action": "task_error", "message": "simulated failure"}, needs="task"),
    FaultKind("VM is locked (backup)", {"action": "vm_locked"}, needs="lockable"),
    FaultKind("500 after the effect (error_after_effect)", {"action": "error_after_effect"}),
    FaultKind("TLS broken while the reply is read (tls_abort_reply)", {"action": "tls_abort_reply"}),
    FaultKind("reply over the 8 MiB bound (oversized_reply)", {"action": "oversized_reply"}),
    # A connection rule (method and path are ignored): the 1st connection after arming is the scope check's handshake, the
    # 2nd the stage client's first connection, which must refuse the swapped certificate before any byte is written.
    FaultKind("certificate swapped after the scope check (cert_swap)", {"action": "cert_swap", "occurrence": 2}),
]


class Case(t.NamedTuple):
    fault: FaultKind
    submission: Submission

    @property
    def id(self) -> str:
        return "%s@%s" % (self.fault.label, self.submission.name)

    def rules(self) -> list[dict[str, t.Any]]:
        """The driver's fault list: arm the one-shot rule right before the submission's stage."""
        sub = self.submission
        return [
            {
                "stage": sub.stage,
                "rule": {"method": sub.method, "path": sub.regex, "occurrence": sub.occurrence, **self.fault.rule},
            }
        ]


def cases() -> list[Case]:
    return [
        Case(kind, sub) for kind in FAULT_KINDS for sub in SUBMISSIONS if kind.needs is None or kind.needs in sub.tags
    ]


def case_id(case: Case) -> str:
    return case.id


# CI: a handful per path, mixing the fault kinds.
CI_CASES = {
    "reply lost after commit (drop_reply)@container/create",
    "request lost before it ran (drop_request)@container/start",
    "HTTP 596@container/snapshot",
    "reply lost after commit (drop_reply)@template/convert",
    "request lost before it ran (drop_request)@template/configure",
    "HTTP 503@template/create",
    "VM is locked (backup)@template/stamp",
    "reply lost after commit (drop_reply)@cleanup-vm/destroy",
    "timeout (delay 3 s > api_timeout 1.5 s)@cleanup-vm/stop",
    "task error@cleanup-container/destroy",
    "HTTP 500@cleanup-container/stop",
}

# Observed outcome -> the contract, in fault_matrix.py's words: "completed" (the same run completed, the fault absorbed);
# "stopped X, re-run completes"; "failed X" (the stage and the operation, or the cleanup, failed with X); "uncertain X,
# still uncertain" (reads could not decide; nothing was sent again). Regenerate with VMANYWARE_RELIABILITY_RECORD=1.
EXPECTED: dict[str, str] = {
    "reply lost after commit (drop_reply)@container/template": "completed",
    "reply lost after commit (drop_reply)@container/create": "completed",
    "reply lost after commit (drop_reply)@container/start": "completed",
    "reply lost after commit (drop_reply)@container/snapshot": "completed",
    "reply lost after commit (drop_reply)@template/download": "completed",
    "reply lost after commit (drop_reply)@template/create": "completed",
    "reply lost after commit (drop_reply)@template/disk": "completed",
    "reply lost after commit (drop_reply)@template/configure": "completed",
    "reply lost after commit (drop_reply)@template/start": "completed",
    "reply lost after commit (drop_reply)@template/shutdown": "completed",
    "reply lost after commit (drop_reply)@template/unconfigure": "completed",
    "reply lost after commit (drop_reply)@template/convert": "completed",
    "reply lost after commit (drop_reply)@template/stamp": "completed",
    "reply lost after commit (drop_reply)@cleanup-vm/stop": "completed",
    "reply lost after commit (drop_reply)@cleanup-vm/destroy": "completed",
    "reply lost after commit (drop_reply)@cleanup-container/stop": "completed",
    "reply lost after commit (drop_reply)@cleanup-container/destroy": "completed",
    "request lost before it ran (drop_request)@container/template": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@container/create": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@container/start": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@container/snapshot": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/download": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/create": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/disk": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/configure": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/start": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/shutdown": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/unconfigure": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/convert": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@template/stamp": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@cleanup-vm/stop": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@cleanup-vm/destroy": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@cleanup-container/stop": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@cleanup-container/destroy": "uncertain reply_lost, still uncertain",
    "HTTP 500@container/template": "uncertain server_error, still uncertain",
    "HTTP 500@container/create": "uncertain server_error, still uncertain",
    "HTTP 500@container/start": "uncertain server_error, still uncertain",
    "HTTP 500@container/snapshot": "uncertain server_error, still uncertain",
    "HTTP 500@template/download": "uncertain server_error, still uncertain",
    "HTTP 500@template/create": "uncertain server_error, still uncertain",
    "HTTP 500@template/disk": "uncertain server_error, still uncertain",
    "HTTP 500@template/configure": "uncertain server_error, still uncertain",
    "HTTP 500@template/start": "uncertain server_error, still uncertain",
    "HTTP 500@template/shutdown": "uncertain server_error, still uncertain",
    "HTTP 500@template/unconfigure": "uncertain server_error, still uncertain",
    "HTTP 500@template/convert": "uncertain server_error, still uncertain",
    "HTTP 500@template/stamp": "uncertain server_error, still uncertain",
    "HTTP 500@cleanup-vm/stop": "uncertain server_error, still uncertain",
    "HTTP 500@cleanup-vm/destroy": "uncertain server_error, still uncertain",
    "HTTP 500@cleanup-container/stop": "uncertain server_error, still uncertain",
    "HTTP 500@cleanup-container/destroy": "uncertain server_error, still uncertain",
    "HTTP 503@container/template": "uncertain server_error, still uncertain",
    "HTTP 503@container/create": "uncertain server_error, still uncertain",
    "HTTP 503@container/start": "uncertain server_error, still uncertain",
    "HTTP 503@container/snapshot": "uncertain server_error, still uncertain",
    "HTTP 503@template/download": "uncertain server_error, still uncertain",
    "HTTP 503@template/create": "uncertain server_error, still uncertain",
    "HTTP 503@template/disk": "uncertain server_error, still uncertain",
    "HTTP 503@template/configure": "uncertain server_error, still uncertain",
    "HTTP 503@template/start": "uncertain server_error, still uncertain",
    "HTTP 503@template/shutdown": "uncertain server_error, still uncertain",
    "HTTP 503@template/unconfigure": "uncertain server_error, still uncertain",
    "HTTP 503@template/convert": "uncertain server_error, still uncertain",
    "HTTP 503@template/stamp": "uncertain server_error, still uncertain",
    "HTTP 503@cleanup-vm/stop": "uncertain server_error, still uncertain",
    "HTTP 503@cleanup-vm/destroy": "uncertain server_error, still uncertain",
    "HTTP 503@cleanup-container/stop": "uncertain server_error, still uncertain",
    "HTTP 503@cleanup-container/destroy": "uncertain server_error, still uncertain",
    "HTTP 596@container/template": "uncertain server_error, still uncertain",
    "HTTP 596@container/create": "uncertain server_error, still uncertain",
    "HTTP 596@container/start": "uncertain server_error, still uncertain",
    "HTTP 596@container/snapshot": "uncertain server_error, still uncertain",
    "HTTP 596@template/download": "uncertain server_error, still uncertain",
    "HTTP 596@template/create": "uncertain server_error, still uncertain",
    "HTTP 596@template/disk": "uncertain server_error, still uncertain",
    "HTTP 596@template/configure": "uncertain server_error, still uncertain",
    "HTTP 596@template/start": "uncertain server_error, still uncertain",
    "HTTP 596@template/shutdown": "uncertain server_error, still uncertain",
    "HTTP 596@template/unconfigure": "uncertain server_error, still uncertain",
    "HTTP 596@template/convert": "uncertain server_error, still uncertain",
    "HTTP 596@template/stamp": "uncertain server_error, still uncertain",
    "HTTP 596@cleanup-vm/stop": "uncertain server_error, still uncertain",
    "HTTP 596@cleanup-vm/destroy": "uncertain server_error, still uncertain",
    "HTTP 596@cleanup-container/stop": "uncertain server_error, still uncertain",
    "HTTP 596@cleanup-container/destroy": "uncertain server_error, still uncertain",
    "timeout (delay 3 s > api_timeout 1.5 s)@container/template": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@container/create": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@container/start": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@container/snapshot": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/download": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/create": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/disk": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/configure": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/start": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/shutdown": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/unconfigure": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/convert": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@template/stamp": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@cleanup-vm/stop": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@cleanup-vm/destroy": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@cleanup-container/stop": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@cleanup-container/destroy": "completed",
    "task error@container/template": "failed task_failed",
    "task error@container/create": "failed task_failed",
    "task error@container/start": "failed task_failed",
    "task error@container/snapshot": "failed task_failed",
    "task error@template/download": "failed task_failed",
    "task error@template/create": "failed task_failed",
    "task error@template/disk": "failed task_failed",
    "task error@template/start": "failed task_failed",
    "task error@template/shutdown": "failed task_failed",
    "task error@template/convert": "failed task_failed",
    "task error@cleanup-vm/stop": "failed task_failed",
    "task error@cleanup-vm/destroy": "failed task_failed",
    "task error@cleanup-container/stop": "failed task_failed",
    "task error@cleanup-container/destroy": "failed task_failed",
    "VM is locked (backup)@template/disk": "completed",
    "VM is locked (backup)@template/configure": "completed",
    "VM is locked (backup)@template/start": "completed",
    "VM is locked (backup)@template/shutdown": "completed",
    "VM is locked (backup)@template/unconfigure": "completed",
    "VM is locked (backup)@template/convert": "completed",
    "VM is locked (backup)@template/stamp": "completed",
    "VM is locked (backup)@cleanup-vm/stop": "completed",
    "VM is locked (backup)@cleanup-vm/destroy": "completed",
    "500 after the effect (error_after_effect)@container/template": "completed",
    "500 after the effect (error_after_effect)@container/create": "completed",
    "500 after the effect (error_after_effect)@container/start": "completed",
    "500 after the effect (error_after_effect)@container/snapshot": "completed",
    "500 after the effect (error_after_effect)@template/download": "completed",
    "500 after the effect (error_after_effect)@template/create": "completed",
    "500 after the effect (error_after_effect)@template/disk": "completed",
    "500 after the effect (error_after_effect)@template/configure": "completed",
    "500 after the effect (error_after_effect)@template/start": "completed",
    "500 after the effect (error_after_effect)@template/shutdown": "completed",
    "500 after the effect (error_after_effect)@template/unconfigure": "completed",
    "500 after the effect (error_after_effect)@template/convert": "completed",
    "500 after the effect (error_after_effect)@template/stamp": "completed",
    "500 after the effect (error_after_effect)@cleanup-vm/stop": "completed",
    "500 after the effect (error_after_effect)@cleanup-vm/destroy": "completed",
    "500 after the effect (error_after_effect)@cleanup-container/stop": "completed",
    "500 after the effect (error_after_effect)@cleanup-container/destroy": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@container/template": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@container/create": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@container/start": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@container/snapshot": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/download": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/create": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/disk": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/configure": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/start": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/shutdown": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/unconfigure": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/convert": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@template/stamp": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@cleanup-vm/stop": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@cleanup-vm/destroy": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@cleanup-container/stop": "completed",
    "TLS broken while the reply is read (tls_abort_reply)@cleanup-container/destroy": "completed",
    "reply over the 8 MiB bound (oversized_reply)@container/template": "completed",
    "reply over the 8 MiB bound (oversized_reply)@container/create": "completed",
    "reply over the 8 MiB bound (oversized_reply)@container/start": "completed",
    "reply over the 8 MiB bound (oversized_reply)@container/snapshot": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/download": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/create": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/disk": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/configure": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/start": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/shutdown": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/unconfigure": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/convert": "completed",
    "reply over the 8 MiB bound (oversized_reply)@template/stamp": "completed",
    "reply over the 8 MiB bound (oversized_reply)@cleanup-vm/stop": "completed",
    "reply over the 8 MiB bound (oversized_reply)@cleanup-vm/destroy": "completed",
    "reply over the 8 MiB bound (oversized_reply)@cleanup-container/stop": "completed",
    "reply over the 8 MiB bound (oversized_reply)@cleanup-container/destroy": "completed",
    "certificate swapped after the scope check (cert_swap)@container/template": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@container/create": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@container/start": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@container/snapshot": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/download": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/create": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/disk": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/configure": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/start": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/shutdown": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/unconfigure": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/convert": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@template/stamp": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@cleanup-vm/stop": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@cleanup-vm/destroy": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@cleanup-container/stop": "stopped certificate_changed, re-run completes",
    "certificate swapped after the scope check (cert_swap)@cleanup-container/destroy": "stopped certificate_changed, re-run completes",
}

# What test_abandon_sends_nothing proves, rendered under the table.
ABANDON_EVIDENCE = (
    "abandon (`vmanyware_operation state=abandoned`): sends no request at all. `abandon_operation` takes only the "
    "journal store (no client is built: the test passes a client factory that fails if called), and the simulator's "
    "request log has no entry between the abandon's start and end, with a rule armed that drops every request; "
    "a stage run afterwards is refused with `operation_abandoned` and sends nothing either. No fault can reach it."
)


# -- evidence from the request log --------------------------------------------------------------------------
PRE_HANDLER_ACTIONS = ("http_error", "vm_locked", "lock_timeout")  # drop_request is logged as request_dropped


def _key(entry: t.Mapping[str, t.Any]) -> tuple[str, str, str]:
    """A submission's identity: the same request sent again carries the same parameters (the digest aside: it is re-read)."""
    params = {k: v for k, v in (entry.get("params") or {}).items() if k != "digest"}
    return entry["method"], entry["path"], json.dumps(params, sort_keys=True, default=str)


def _mutations(entries: t.Iterable[t.Mapping[str, t.Any]]) -> list[t.Mapping[str, t.Any]]:
    return [
        e
        for e in entries
        if e["method"] in ("POST", "PUT", "DELETE")
        and e["path"] != "/access/ticket"
        and not e["path"].endswith("/agent/ping")
    ]


def reached_handler(entries: list[dict[str, t.Any]], faults: list[dict[str, t.Any]]) -> dict[tuple[str, str, str], int]:
    """Copies of each submission that reached Proxmox's handler, from the simulator's request log.

    Not counted: PVE's refusals before the handler (400/401/403/501, schema errors) and the replies an injected pre-handler
    rule produced instead of the handler (as many entries with the rule's status as the rule ``fired``).
    """
    # The collection is on sys.path under pytest only: imported here, so the --results command line needs neither.
    import rel_support as rs  # pylint: disable=import-outside-toplevel

    budget = [[rule, int(rule.get("fired", 0))] for rule in faults if rule.get("action") in PRE_HANDLER_ACTIONS]
    counts: dict[tuple[str, str, str], int] = {}
    for entry in _mutations(entries):
        if entry.get("status") in rs.REFUSED_BEFORE_HANDLER or entry.get("schema_errors"):
            continue
        injected = False
        for item in budget:
            rule = item[0]
            status = int(rule.get("status", 500))
            if (
                item[1] > 0
                and entry.get("status") == status
                and rule.get("method", "*") in ("*", entry["method"])
                and re.search(str(rule.get("path", ".*")), entry["path"])
            ):
                item[1] -= 1
                injected = True
                break
        if injected:
            continue
        key = _key(entry)
        counts[key] = counts.get(key, 0) + 1
    return counts


def resent_after_unknown(entries: list[dict[str, t.Any]]) -> list[str]:
    """Submissions sent again after a copy whose outcome the client could not know (``rs.UNKNOWN_OUTCOME_STATUSES``)."""
    import rel_support as rs  # pylint: disable=import-outside-toplevel

    last: dict[tuple[str, str, str], t.Any] = {}
    resent = []
    for entry in _mutations(entries):
        key = _key(entry)
        if key in last and last[key] in rs.UNKNOWN_OUTCOME_STATUSES:
            resent.append("%s %s after %s" % (entry["method"], entry["path"], last[key]))
        last[key] = entry.get("status")
    return resent


# -- the table ------------------------------------------------------------------------------------------------
def render_table(outcomes: t.Mapping[str, str]) -> str:
    """One row per request (path/stage and the request), one column per fault kind; ``n/a`` where the kind does not apply."""
    lines = [
        "| path/stage | request | " + " | ".join(kind.label for kind in FAULT_KINDS) + " |",
        "| --- | --- |" + " --- |" * len(FAULT_KINDS),
    ]
    for sub in SUBMISSIONS:
        cells = [outcomes.get("%s@%s" % (kind.label, sub.name), "n/a") for kind in FAULT_KINDS]
        lines.append(
            "| %s | `%s %s` | %s |" % (sub.name, sub.method, re.sub(r"[$^\\]", "", sub.regex), " | ".join(cells))
        )
    lines.append("")
    lines.append("- %s" % ABANDON_EVIDENCE)
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description="EXPECTED and the docs table from a recorded run's path_faults.jsonl")
    parser.add_argument("--results", required=True, type=Path)
    parser.add_argument("--doc", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "reliability.md")
    args = parser.parse_args()
    records = [
        json.loads(line)
        for line in (args.results / "path_faults.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    observed = {r["case"]: r["outcome"] for r in records}
    order = [case.id for case in cases()]
    sys.stdout.write(
        "EXPECTED: dict[str, str] = {\n%s}\n"
        % "".join("    %r: %r,\n" % (k, observed[k]) for k in order if k in observed)
    )
    if set(observed) >= set(order):  # only a complete run replaces the table
        text = args.doc.read_text(encoding="utf-8")
        pattern = re.compile(r"(<!-- path-fault-table:begin -->\n).*?(\n<!-- path-fault-table:end -->)", re.S)
        args.doc.write_text(
            pattern.sub(lambda m: m.group(1) + render_table(observed).strip() + m.group(2), text), encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
