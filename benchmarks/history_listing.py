# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How long listing the history of N operations takes (docs/benchmarks.md, "Listing operations").

Writes N valid operation documents (the examples' plan, distinct ids, creation times, VMIDs and
statuses) into a fresh journal directory, then times ``_history.list_operations`` three ways: the
first listing (no summary cache: every document is loaded and validated), a listing with the cache,
and a filtered listing with the cache. Usage: ``python benchmarks/history_listing.py [N]``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    count = int(argv[1]) if len(argv) > 1 else 10000
    links = tempfile.mkdtemp()  # an ansible_collections layout pointing at this checkout
    os.makedirs(os.path.join(links, "ansible_collections", "vmanyware"))
    os.symlink(REPO, os.path.join(links, "ansible_collections", "vmanyware", "proxmox"))
    sys.path.insert(0, links)
    try:
        return _run(count)
    finally:
        shutil.rmtree(links)


def _run(count: int) -> int:
    # pylint: disable=import-outside-toplevel
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.hashing import plan_hash
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal.history import Filters, list_operations
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import (
        JournalStore,
        new_operation_document,
        new_operation_id,
    )
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import expected_confirmation
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan

    planned = build_plan(
        catalog_path=REPO / "examples/catalog.yml", definition_path=REPO / "examples/definition.yml", target_vmid=201
    )
    scope = "pve:" + "c" * 64
    snapshots = {
        "definition": planned.definition,
        "mapping": planned.mapping,
        "plan": planned.plan,
        "confirmation": expected_confirmation(planned.plan, scope),
    }
    kinds = [step["kind"] for step in planned.plan["steps"]]
    with tempfile.TemporaryDirectory() as tmp:
        store = JournalStore(os.path.join(tmp, "journal"))
        for index in range(count):
            created = "2026-%02d-%02dT%02d:%02d:%02d.000000Z" % (
                1 + index % 12,
                1 + index % 28,
                index % 24,
                index % 60,
                index % 60,
            )
            vmid = 1000 + index  # the plan's hash binds its VMID (the journal checks it on load)
            plan = dict(
                planned.plan,
                planHash=plan_hash(planned.definition_hash, planned.mapping, vmid),
                target=dict(planned.plan["target"], vmid=vmid),
            )
            document = new_operation_document(
                new_operation_id(),
                None,
                {"scope": scope, "node": "pve", "vmid": vmid},
                dict(snapshots, plan=plan, confirmation=expected_confirmation(plan, scope)),
                kinds,
                created,
            )
            if index % 3 == 0:
                document["status"] = "completed"
                for item in document["stages"]:
                    item.update(
                        status="completed",
                        submissionStarted=True,
                        attempts=1,
                        dispatchedAt=created,
                        completedAt=created,
                        request={"noop": True},
                    )
            with open(store.operation_path(document["operationId"]), "w", encoding="utf-8") as handle:
                json.dump(document, handle)
        size = os.path.getsize(store.operation_path(document["operationId"]))
        timings = {}
        for name, filters in (
            ("first listing (no cache)", Filters()),
            ("listing (cache)", Filters()),
            ("filtered listing (cache)", Filters(status=("completed",), since="2026-06-01T00:00:00.000000Z")),
        ):
            started = time.perf_counter()
            result = list_operations(store, filters, limit=100)
            timings[name] = time.perf_counter() - started
            counts = (result["total"], len(result["operations"]), len(result["skipped_files"]))
            print("%-28s %7.3f s  (%d matches, %d returned, %d skipped)" % ((name, timings[name]) + counts))
            if result["skipped_files"]:
                raise SystemExit("a written operation was skipped: the benchmark's documents are not valid")
        print("operations: %d, document size: %d bytes, python %s" % (count, size, sys.version.split()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
