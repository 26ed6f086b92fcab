# SPDX-License-Identifier: GPL-3.0-or-later
"""Render the figures and the fault table of docs/reliability.md from one run's results (tools/dev/reliability.sh).

``python report.py --results DIR --seconds N --command CMD [--doc docs/reliability.md]`` replaces the text between
``<!-- figures:begin/end -->`` and ``<!-- fault-table:begin/end -->``. Nothing but counts, codes and names is read
from the results (they hold no secret; the session scan checks that too).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import sys
import typing as t
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fault_matrix as fm  # noqa: E402  pylint: disable=wrong-import-position


def _load(results: Path, name: str) -> list[dict[str, t.Any]]:
    path = results / ("%s.jsonl" % name)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _replace(text: str, marker: str, body: str) -> str:
    pattern = re.compile(r"(<!-- %s:begin -->\n).*?(\n<!-- %s:end -->)" % (marker, marker), re.S)
    if not pattern.search(text):
        raise SystemExit("docs/reliability.md lacks the %s markers" % marker)
    return pattern.sub(lambda m: m.group(1) + body.strip() + m.group(2), text)


def test_status(results: Path) -> list[str]:
    """FAILED / XFAIL / XPASS lines of the pytest summary the run script keeps in pytest.log."""
    path = results / "pytest.log"
    if not path.exists():
        return []
    return [
        line.strip()
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
        if re.match(r"^(FAILED|XFAIL|XPASS|ERROR) tests/", line)
    ]


def figures(results: Path, seconds: int, command: str, status: int) -> str:
    crash = _load(results, "crash")
    points = _load(results, "points")
    faults = _load(results, "faults")
    conc = _load(results, "concurrency")
    load = _load(results, "load")
    fuzz = _load(results, "fuzz")
    secrets = _load(results, "secrets")
    tls = _load(results, "tls")
    lines = [
        "Last full run: %s UTC, `%s`, %d min %02d s wall clock on the shared 2-core machine; pytest exit status %d."
        % (
            datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            command,
            seconds // 60,
            seconds % 60,
            status,
        ),
        "",
    ]
    summary = test_status(results)
    if summary:
        lines += ["Not passed in that run:", ""] + ["- `%s`" % line[:220] for line in summary] + [""]
    modes = collections.Counter(r["mode"] for r in crash)
    outcomes = collections.Counter(r["outcome"] for r in crash)
    uncertain = collections.Counter(
        ("%s (by design; the request never reached Proxmox)" % r["stage"])
        if r["request_reached"] is False
        else ("%s (a guest exec started, its reply unknown: never re-issued)" % r["stage"])
        if r["stage"] in ("readiness", "packages") and r["request_reached"] is None
        else "%s (request reached Proxmox: %s)" % (r["stage"], r["request_reached"])
        for r in crash
        if r["outcome"] == "uncertain"
    )
    covered = {r["point"] for r in crash if r["point"] and r["point"].startswith(("journal:", "http:"))}
    kills = [
        r["point"] or "" for r in crash if (r["point"] or "").startswith(("kill@", "SIGKILL:", "SIGTERM:", "SIGINT:"))
    ]
    calibrations = {c["mode"]: c for c in _load(results, "calibration")}
    enumerated = points[-1]["count"] if points else 0
    lines += [
        "**Crash consistency**",
        "",
        "| figure | value |",
        "| --- | --- |",
        "| trials | %d (%s) |" % (len(crash), ", ".join("%s %d" % kv for kv in sorted(modes.items()))),
        "| kill points enumerated (journal writes x 2 sides, mutating requests x 2 sides) | %d |" % enumerated,
        "| distinct hook kill points covered | %d |" % len(covered),
        "| kills (signal:target) on an event, or at a random point of a measured uninterrupted run (a fraction of it, or a delay after a request) "
        "| %d trials (%s) |"
        % (
            len(kills),
            ", ".join(
                "%s %d" % kv for kv in sorted(collections.Counter(":".join(k.split(":")[:2]) for k in kills).items())
            ),
        ),
        "| uninterrupted runs measured for the calibration | %s |"
        % (
            ", ".join(
                "%s %.1f s, %d mutating requests" % (mode, c["seconds"], c["requests"])
                for mode, c in sorted(calibrations.items())
            )
            or "none"
        ),
        "| trials whose re-run was killed again | %d |"
        % sum(1 for r in crash if r.get("rekill", r["name"].startswith("pt2-"))),
        "| processes alive 30 s after a kill (a worker that did not stop by itself) | %d |"
        % sum(r.get("lingered", 0) for r in crash),
        "| mutating requests after a kill beyond the one in flight | %d |"
        % sum(max(0, r.get("after_kill", 0) - 1) for r in crash),
        "| journals recording a cancel (controller_gone / run_cancelled) | %d |"
        % sum(1 for r in crash if r.get("cancelled")),
        "| runs (first + re-runs) | %d |" % sum(r["runs"] for r in crash),
        "| duplicate clone/start/resize/snapshot/install requests | %d |"
        % sum(sum(r["duplicates"].values()) for r in crash),
        "| re-sent submissions (a copy after an unknown outcome, or config/cloudinit PUTs beyond one per stage) | %d |"
        % sum(r.get("resent", 0) for r in crash),
        "| torn journal files | %d |" % sum(r["torn"] for r in crash),
        "| other VMs created | %d |" % sum(len(r["extra_vms"]) for r in crash),
        "| completed VMs not equal to the plan | %d |" % sum(1 for r in crash if r["state_mismatch"]),
        "| orphan operation files (crash inside create_operation; documented, harmless) | %d |"
        % sum(r.get("orphans", 0) for r in crash),
        "| outcomes | %s |" % ", ".join("%s %d" % kv for kv in sorted(outcomes.items())),
        "| uncertain stops by stage | %s |" % (", ".join("%s: %d" % kv for kv in sorted(uncertain.items())) or "none"),
        "| mean seconds per trial | %.1f |" % (sum(r["seconds"] for r in crash) / max(1, len(crash))),
        "",
    ]
    fault_outcomes = collections.Counter(r["outcome"].split(",")[0].split(" ")[0] for r in faults)
    lines += [
        "**Faults**: %d cases (fault x stage), %d duplicate requests, %d re-sent submissions, %d torn journals, %d other VMs; "
        "first-run outcomes: %s."
        % (
            len(faults),
            sum(sum(r["duplicates"].values()) for r in faults),
            sum(r.get("resent", 0) for r in faults),
            sum(r["torn"] for r in faults),
            sum(len(r["extra_vms"]) for r in faults),
            ", ".join("%s %d" % kv for kv in sorted(fault_outcomes.items())),
        ),
        "",
    ]
    for record in conc:
        lines += [
            "**Concurrency**: %d operations in one `ansible-playbook --forks %d` plus 2 in a second process aimed at two of the "
            "same VMIDs, %.0f s; %d completed, %d clones reached the simulator (one per VMID), %d torn journals; pairs: %s."
            % (
                record["hosts"],
                record["hosts"],
                record["seconds"],
                record["completed"],
                record["clones"],
                record["torn"],
                "; ".join(
                    "%s -> winner %s, loser reported %s" % (k, v["winner"], "/".join(v["loser_codes"]))
                    for k, v in sorted(record["pairs"].items())
                ),
            ),
            "",
        ]
    for record in load:
        lines += [
            "**Simulator under load**: %d concurrent clients, %d requests in %.1f s = %.0f requests/s, %d errors, latency p50 %.0f ms, "
            "p99 %.0f ms, max %.0f ms."
            % (
                record["clients"],
                record["requests"],
                record["seconds"],
                record["requests_per_second"],
                record["errors"],
                record["p50_ms"],
                record["p99_ms"],
                record["max_ms"],
            ),
            "",
        ]
    if fuzz:
        total = sum(r["total"] for r in fuzz)
        per = collections.Counter()
        for r in fuzz:
            per.update(r["cases"])
        counts = ", ".join("%s %d" % kv for kv in sorted(per.items()))
        lines += [
            "**Hostile input**: %d generated and explicit cases (%s), profile `%s`; any traceback or echoed value fails a test "
            "(see the list above)." % (total, counts, fuzz[-1]["profile"]),
            "",
        ]
    for record in secrets:
        if "session_scan_files" in record:
            lines += [
                "**Secrets**: session scan of %d files (every run's output, journals, logs, results) for %d canary secrets: %d hits."
                % (record["session_scan_files"], record["canaries"], len(record["session_scan_hits"])),
                "",
            ]
        elif "runs" in record:
            lines += [
                "**SSH key comment canary**: %d playbook runs; comment found in %s; in the journal at %s; detached from its key: %d; "
                "in default-verbosity output: %d."
                % (
                    record["runs"],
                    ", ".join(record["key_comment_files"]),
                    ", ".join(record["key_comment_in_journal"]),
                    len(record["key_comment_detached"]),
                    len(record["key_comment_in_default_output"]),
                ),
                "",
            ]
    if tls:
        lines += [
            "**TLS**: "
            + "; ".join(
                "%s: %s, %d requests logged by the simulator" % (r["case"], "/".join(r["codes"]), r["requests_logged"])
                for r in tls
            )
            + ".",
            "",
        ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", required=True, type=Path)
    parser.add_argument("--seconds", required=True, type=int)
    parser.add_argument("--command", required=True)
    parser.add_argument("--status", type=int, default=0)
    parser.add_argument("--doc", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "reliability.md")
    args = parser.parse_args()
    text = args.doc.read_text(encoding="utf-8")
    text = _replace(text, "figures", figures(args.results, args.seconds, args.command, args.status))
    observed = {r["case"]: r["outcome"] for r in _load(args.results, "faults")}
    if set(observed) >= {fm.case_id(case) for case in fm.cases()}:  # only a complete matrix replaces the table
        text = _replace(text, "fault-table", fm.render_table(observed))
    args.doc.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
