# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Count a peer-suite run (run.sh): per target, the tasks that did what the suite expects and the ones that did not.

A task passes when it succeeded, or when it is one of the suite's own "should fail" tasks (``ignore_errors: true`` in
its task file, checked by the next assert) and it failed. Usage: summarize.py DIR (the tasks-<target>.jsonl files).
"""

from __future__ import annotations

import json
import pathlib
import sys

# The suite's tasks that are meant to fail (1.4.0 line numbers): the assert after each checks the failure.
EXPECTED_FAILURES = {("proxmox_pool", 13), ("proxmox_pool", 120), ("proxmox_pool", 139), ("proxmox_template", 29)}


def summarize(directory: pathlib.Path) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for log in sorted(directory.glob("tasks-*.jsonl")):
        target = log.name[len("tasks-") : -len(".jsonl")]
        counts = {"pass": 0, "fail": 0}
        print(f"== {target}")
        for line in log.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if "/targets" not in entry["path"]:
                continue  # fact gathering and the wrapper's own pre-task
            number = int(entry["path"].rsplit(":", 1)[-1])
            failed = entry["status"] == "failed"
            passed = failed if (target, number) in EXPECTED_FAILURES else not failed
            counts["pass" if passed else "fail"] += 1
            if not passed:
                print(f"  FAIL line {number}: {entry['task']} | {entry['msg'][:200]}")
        print(f"  {counts['pass']} pass, {counts['fail']} fail")
        totals[target] = counts
    return totals


if __name__ == "__main__":
    result = summarize(pathlib.Path(sys.argv[1]))
    print("total:", sum(c["pass"] for c in result.values()), "pass,", sum(c["fail"] for c in result.values()), "fail")
