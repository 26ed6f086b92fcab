# SPDX-License-Identifier: GPL-3.0-or-later
"""The fault x stage matrix: every simulator fault, for every stage where it applies, and its expected outcome.

``EXPECTED`` is the contract; tests/reliability/test_faults.py asserts each observed outcome equals it, the full
run (tools/dev/reliability.sh) renders the table of docs/reliability.md from the observed results, and
test_fault_table_is_current checks the committed table equals ``render_table(EXPECTED)``.
"""

from __future__ import annotations

import typing as t

VMID = 201
VM = r"/nodes/pve-test/qemu/%d" % VMID
ENDPOINTS: dict[str, tuple[str, str, int]] = {
    # stage: (method, path regex, occurrence of the stage's own mutating request after the stage starts)
    "clone": ("POST", r"/qemu/9000/clone$", 1),
    "resources": ("PUT", VM + r"/config$", 1),
    "disk": ("PUT", VM + r"/resize$", 1),
    "cloudinit": ("PUT", VM + r"/config$", 1),
    "seed": ("PUT", VM + r"/cloudinit$", 1),
    "start": ("POST", VM + r"/status/start$", 1),
    "readiness": ("POST", VM + r"/agent/ping$", 1),
    "packages": ("POST", VM + r"/agent/exec$", 3),  # dpkg-query, apt-get update, then the install
    "snapshot": ("POST", VM + r"/snapshot$", 1),
}
ALL = list(ENDPOINTS)
TASK_STAGES = ["clone", "disk", "start", "snapshot"]
LOCKABLE = ["clone", "resources", "disk", "cloudinit", "start", "snapshot"]


class Case(t.NamedTuple):
    fault: str  # label in the table
    stage: str
    rules: list[dict[str, t.Any]]  # [{"stage": arm before this stage, "rule": {...}}]
    api_timeout: float = 10.0


def _one_shot(stage: str, action: str, **params: t.Any) -> list[dict[str, t.Any]]:
    method, path, occurrence = ENDPOINTS[stage]
    return [
        {"stage": stage, "rule": {"method": method, "path": path, "occurrence": occurrence, "action": action, **params}}
    ]


def _every(
    stage: str, method: str, path: str, action: str, arm: str | None = None, **params: t.Any
) -> list[dict[str, t.Any]]:
    return [
        {
            "stage": arm or stage,
            "rule": {"method": method, "path": path, "occurrence": "every", "action": action, **params},
        }
    ]


def cases() -> list[Case]:
    out: list[Case] = []
    for stage in ALL:
        out.append(Case("reply lost after commit (drop_reply)", stage, _one_shot(stage, "drop_reply")))
    for stage in ALL:
        out.append(Case("request lost before it ran (drop_request)", stage, _one_shot(stage, "drop_request")))
    for status in (500, 503, 596):
        for stage in ALL:
            out.append(
                Case(
                    "HTTP %d" % status,
                    stage,
                    _one_shot(stage, "http_error", status=status, message="simulated failure"),
                )
            )
    for stage in ALL:
        out.append(
            Case(
                "timeout (delay 3 s > api_timeout 1.5 s)",
                stage,
                _one_shot(stage, "delay", seconds=3.0),
                api_timeout=1.5,
            )
        )
    for stage in TASK_STAGES:
        out.append(Case("task error", stage, _one_shot(stage, "task_error", message="simulated failure")))
    for stage in TASK_STAGES:
        out.append(Case("task WARNINGS: 2", stage, _one_shot(stage, "task_warnings", count=2)))
    for stage in LOCKABLE:
        out.append(Case("lock timeout (can't lock file)", stage, _one_shot(stage, "lock_timeout")))
    for stage in LOCKABLE:
        out.append(Case("VM is locked (backup)", stage, _one_shot(stage, "vm_locked")))
    for stage in ("resources", "disk", "cloudinit"):
        out.append(Case("checksum mismatch", stage, _one_shot(stage, "checksum_mismatch")))
    out.append(Case("agent not running", "readiness", _every("readiness", "*", VM + r"/agent/", "agent_not_running")))
    out.append(Case("agent not running", "packages", _every("packages", "*", VM + r"/agent/", "agent_not_running")))
    out.append(
        Case("DHCP never", "readiness", _every("readiness", "POST", VM + r"/status/start$", "dhcp_never", arm="start"))
    )
    out.append(
        Case(
            "cloud-init error",
            "readiness",
            _every("readiness", "POST", VM + r"/status/start$", "cloudinit_error", arm="start"),
        )
    )
    out.append(Case("cloud-init error", "seed", _every("seed", "*", VM + r"/cloudinit", "cloudinit_error")))
    out.append(Case("exec disabled", "readiness", _every("readiness", "POST", VM + r"/agent/exec$", "exec_disabled")))
    out.append(Case("exec disabled", "packages", _every("packages", "POST", VM + r"/agent/exec$", "exec_disabled")))
    for stage in ("clone", "disk"):
        out.append(Case("disk full", stage, _one_shot(stage, "disk_full")))
    for stage in ALL:
        out.append(Case(AFTER_EFFECT, stage, _after_effect(stage)))
    out.extend(transport_cases())
    return out


TLS_ABORT = "TLS broken while the reply is read (tls_abort_reply)"
OVERSIZED = "reply over the 8 MiB bound (oversized_reply)"
CERT_SWAP = "certificate swapped after the scope check (cert_swap)"


def transport_cases() -> list[Case]:
    """The transport edges (issue 31): two post-send failures that once passed for "not sent", and a certificate that
    changes between the provider-scope check and the client's own connection. ``cert_swap`` from the 2nd connection
    after arming: the 1st is the scope check's handshake (``bind_scope``), the 2nd the stage client's first connection."""
    out: list[Case] = []
    for stage in ALL:
        out.append(Case(TLS_ABORT, stage, _one_shot(stage, "tls_abort_reply")))
    for stage in ALL:
        out.append(Case(OVERSIZED, stage, _one_shot(stage, "oversized_reply")))
    for stage in ALL:
        out.append(Case(CERT_SWAP, stage, [{"stage": stage, "rule": {"action": "cert_swap", "occurrence": 2}}]))
    return out


# A 500 after the effect: the handler ran (the task started, the command started in the guest), the reply says it failed.
AFTER_EFFECT = "500 after the effect (error_after_effect)"


def _after_effect(stage: str) -> list[dict[str, t.Any]]:
    if stage == "readiness":  # its one request that starts work in the guest: the cloud-init probe's exec
        return [
            {
                "stage": stage,
                "rule": {
                    "method": "POST",
                    "path": VM + r"/agent/exec$",
                    "occurrence": 1,
                    "action": "error_after_effect",
                },
            }
        ]
    return _one_shot(stage, "error_after_effect")


def case_id(case: Case) -> str:
    return "%s@%s" % (case.fault, case.stage)


CI_CASES = {
    "reply lost after commit (drop_reply)@start",
    "request lost before it ran (drop_request)@clone",
    "HTTP 503@resources",
    "HTTP 596@clone",
    "timeout (delay 3 s > api_timeout 1.5 s)@disk",
    "task error@clone",
    "task WARNINGS: 2@snapshot",
    "VM is locked (backup)@cloudinit",
    "checksum mismatch@resources",
    "exec disabled@packages",
    "disk full@disk",
    "DHCP never@readiness",
    "500 after the effect (error_after_effect)@packages",
}

# Observed outcome -> the contract. "completed": the same run completed (fault absorbed); "stopped X, re-run
# completes": the run failed with code X, the operation stayed open, the next run completed after reconciling;
# "failed X": the stage and the operation failed with X (the VM is kept for the operator); "uncertain X ...".
EXPECTED: dict[str, str] = {
    "reply lost after commit (drop_reply)@clone": "completed",
    "reply lost after commit (drop_reply)@resources": "completed",
    "reply lost after commit (drop_reply)@disk": "completed",
    "reply lost after commit (drop_reply)@cloudinit": "completed",
    "reply lost after commit (drop_reply)@seed": "completed",
    "reply lost after commit (drop_reply)@start": "completed",
    "reply lost after commit (drop_reply)@readiness": "completed",
    "reply lost after commit (drop_reply)@packages": "completed",
    "reply lost after commit (drop_reply)@snapshot": "completed",
    "request lost before it ran (drop_request)@clone": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@resources": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@disk": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@cloudinit": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@seed": "completed",
    "request lost before it ran (drop_request)@start": "uncertain reply_lost, still uncertain",
    "request lost before it ran (drop_request)@readiness": "completed",
    "request lost before it ran (drop_request)@packages": "completed",
    "request lost before it ran (drop_request)@snapshot": "uncertain reply_lost, still uncertain",
    "HTTP 500@clone": "uncertain server_error, still uncertain",
    "HTTP 500@resources": "uncertain server_error, still uncertain",
    "HTTP 500@disk": "uncertain server_error, still uncertain",
    "HTTP 500@cloudinit": "uncertain server_error, still uncertain",
    "HTTP 500@seed": "completed",
    "HTTP 500@start": "uncertain server_error, still uncertain",
    "HTTP 500@readiness": "stopped server_error, re-run completes",
    "HTTP 500@packages": "completed",
    "HTTP 500@snapshot": "uncertain server_error, still uncertain",
    "HTTP 503@clone": "uncertain server_error, still uncertain",
    "HTTP 503@resources": "uncertain server_error, still uncertain",
    "HTTP 503@disk": "uncertain server_error, still uncertain",
    "HTTP 503@cloudinit": "uncertain server_error, still uncertain",
    "HTTP 503@seed": "completed",
    "HTTP 503@start": "uncertain server_error, still uncertain",
    "HTTP 503@readiness": "stopped server_error, re-run completes",
    "HTTP 503@packages": "completed",
    "HTTP 503@snapshot": "uncertain server_error, still uncertain",
    "HTTP 596@clone": "uncertain server_error, still uncertain",
    "HTTP 596@resources": "uncertain server_error, still uncertain",
    "HTTP 596@disk": "uncertain server_error, still uncertain",
    "HTTP 596@cloudinit": "uncertain server_error, still uncertain",
    "HTTP 596@seed": "completed",
    "HTTP 596@start": "uncertain server_error, still uncertain",
    "HTTP 596@readiness": "stopped server_error, re-run completes",
    "HTTP 596@packages": "completed",
    "HTTP 596@snapshot": "uncertain server_error, still uncertain",
    "timeout (delay 3 s > api_timeout 1.5 s)@clone": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@resources": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@disk": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@cloudinit": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@seed": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@start": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@readiness": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@packages": "completed",
    "timeout (delay 3 s > api_timeout 1.5 s)@snapshot": "completed",
    "task error@clone": "failed task_failed",
    "task error@disk": "failed task_failed",
    "task error@start": "failed task_failed",
    "task error@snapshot": "failed task_failed",
    "task WARNINGS: 2@clone": "completed",
    "task WARNINGS: 2@disk": "completed",
    "task WARNINGS: 2@start": "completed",
    "task WARNINGS: 2@snapshot": "completed",
    "lock timeout (can't lock file)@clone": "completed",
    "lock timeout (can't lock file)@resources": "completed",
    "lock timeout (can't lock file)@disk": "completed",
    "lock timeout (can't lock file)@cloudinit": "completed",
    "lock timeout (can't lock file)@start": "completed",
    "lock timeout (can't lock file)@snapshot": "completed",
    "VM is locked (backup)@clone": "completed",
    "VM is locked (backup)@resources": "completed",
    "VM is locked (backup)@disk": "completed",
    "VM is locked (backup)@cloudinit": "completed",
    "VM is locked (backup)@start": "completed",
    "VM is locked (backup)@snapshot": "completed",
    "checksum mismatch@resources": "stopped conflict, re-run completes",
    "checksum mismatch@disk": "failed task_failed",
    "checksum mismatch@cloudinit": "stopped conflict, re-run completes",
    "agent not running@readiness": "failed guest_agent_unavailable",
    "agent not running@packages": "stopped server_error, re-run completes",
    "DHCP never@readiness": "failed guest_network_unavailable",
    "cloud-init error@readiness": "failed cloudinit_failed",
    "cloud-init error@seed": "stopped server_error, re-run completes",
    "exec disabled@readiness": "failed guest_exec_unavailable",
    "exec disabled@packages": "failed guest_exec_unavailable",
    "disk full@clone": "failed task_failed",
    "disk full@disk": "failed task_failed",
    "500 after the effect (error_after_effect)@clone": "completed",
    "500 after the effect (error_after_effect)@resources": "completed",
    "500 after the effect (error_after_effect)@disk": "completed",
    "500 after the effect (error_after_effect)@cloudinit": "completed",
    "500 after the effect (error_after_effect)@seed": "completed",
    "500 after the effect (error_after_effect)@start": "completed",
    "500 after the effect (error_after_effect)@readiness": "completed",
    "500 after the effect (error_after_effect)@packages": "completed",
    "500 after the effect (error_after_effect)@snapshot": "completed",
}

# The transport edges (transport_cases): a post-send failure is resolved by reads (completed, never re-sent); a
# ping whose reply is over the bound stops readiness (a read-only probe, re-run); a swapped certificate is refused before any byte.
EXPECTED.update(
    {
        "TLS broken while the reply is read (tls_abort_reply)@clone": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@resources": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@disk": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@cloudinit": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@seed": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@start": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@readiness": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@packages": "completed",
        "TLS broken while the reply is read (tls_abort_reply)@snapshot": "completed",
        "reply over the 8 MiB bound (oversized_reply)@clone": "completed",
        "reply over the 8 MiB bound (oversized_reply)@resources": "completed",
        "reply over the 8 MiB bound (oversized_reply)@disk": "completed",
        "reply over the 8 MiB bound (oversized_reply)@cloudinit": "completed",
        "reply over the 8 MiB bound (oversized_reply)@seed": "completed",
        "reply over the 8 MiB bound (oversized_reply)@start": "completed",
        "reply over the 8 MiB bound (oversized_reply)@readiness": "stopped response_too_large, re-run completes",
        "reply over the 8 MiB bound (oversized_reply)@packages": "completed",
        "reply over the 8 MiB bound (oversized_reply)@snapshot": "completed",
        "certificate swapped after the scope check (cert_swap)@clone": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@resources": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@disk": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@cloudinit": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@seed": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@start": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@readiness": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@packages": "stopped certificate_changed, re-run completes",
        "certificate swapped after the scope check (cert_swap)@snapshot": "stopped certificate_changed, re-run completes",
    }
)
CI_CASES |= {TLS_ABORT + "@start", OVERSIZED + "@snapshot", CERT_SWAP + "@clone"}


def render_table(outcomes: t.Mapping[str, str]) -> str:
    stages = ALL
    faults: list[str] = []
    for case in cases():
        if case.fault not in faults:
            faults.append(case.fault)
    lines = ["| fault | " + " | ".join(stages) + " |", "| --- |" + " --- |" * len(stages)]
    for fault in faults:
        cells = [outcomes.get("%s@%s" % (fault, stage), "n/a") for stage in stages]
        lines.append("| %s | %s |" % (fault, " | ".join(cells)))
    return "\n".join(lines)
