# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Options of the stage modules (``_stage_module.stage_argument_spec``) and of the journal."""

    JOURNAL = r"""
options:
  journal_dir:
    description:
      - Directory of the local operation journal (one JSON file per operation, mode 0600).
      - When unset, E(VMANYWARE_JOURNAL_DIR) is used, else C($XDG_STATE_HOME/vmanyware/journal), else
        C(~/.local/state/vmanyware/journal).
      - In AWX / Automation Platform, point it at persistent storage; see C(docs/awx.md) in the collection.
    type: path
"""

    DOCUMENTATION = r"""
options:
  operation_id:
    description:
      - The operation returned by M(vmanyware.proxmox.vmanyware_operation).
      - The stage reads its inputs only from that operation's immutable snapshots in the journal.
      - Required, except in check mode with O(preview_operation).
      - In check mode, the O(operation_id) that M(vmanyware.proxmox.vmanyware_operation) returned for a preview (the operation
        is not recorded) previews against that document; the action plugin passes it as O(preview_operation) from the fact
        C(vmanyware_preview_operation), so a playbook written for the normal mode runs unchanged with C(--check).
    type: str
  preview_operation:
    description:
      - Check mode only, when no operation is recorded yet (a C(--check) run of the whole workflow), the
        C(preview_document) that M(vmanyware.proxmox.vmanyware_operation) returned in check mode. Not needed when
        O(operation_id) is that preview's id (see there).
      - The stage then reads Proxmox and returns the requests it would send, against that in-memory document;
        nothing is written. Outside check mode this option is refused.
    type: dict
  set_operation_fact:
    description:
      - Set the fact C(vmanyware_operation) (the operation's public view) from this run. By default a stage sets no fact, so
        it never overwrites one the playbook relies on; register the result, or read the operation with
        M(vmanyware.proxmox.vmanyware_operation_info).
    type: bool
    default: false
  wait_budget:
    description:
      - How long this run waits for a running Proxmox task before returning RV(done=false) with progress.
      - Re-running the module keeps following the same task by reading it; nothing is sent again.
      - When unset, the module waits up to O(timeout).
      - It also bounds how long a run keeps reading when a submission's outcome is unknown (a lost reply); when unset,
        up to 30 seconds. The submission is never sent again; if reads cannot prove its effect the stage is
        C(uncertain) and the module fails with C(outcome_uncertain) (a later run reads again).
    type: float
  timeout:
    description:
      - Deadline in seconds for the stage's Proxmox task. When it passes, the module fails with C(task_timeout)
        and the stage stays submitted, so a re-run reconciles the task instead of sending anything again.
      - When unset, each stage uses its own default (for example 600 seconds for a full clone).
    type: float
  lock_wait:
    description:
      - How long to wait out a C(VM is locked) refusal (the request changed nothing) before failing with C(locked).
    type: float
    default: 60
  provisioning_enabled:
    description:
      - Opens the provisioning gate for this stage's writes when E(VMANYWARE_PROVISIONING_ENABLED) is unset (or empty).
      - The gate is re-read before every new write (never for following a known task by reads); when it is closed
        the module fails with C(provisioning_disabled), sends nothing and the stage stays pending.
      - An environment value of exactly C(false) wins over this option (the administrator's kill switch).
    type: bool
  catalog_path:
    description:
      - The template catalog file. When given (the provision role passes it), every new write first checks that the
        catalog's mapping for the operation's image still equals the one the operation was confirmed with;
        otherwise the module fails with C(plan_changed) and sends nothing.
      - Mutually exclusive with O(catalog).
    type: path
  catalog:
    description:
      - The template catalog as inline YAML text or as a dictionary (validated as data); the same check as O(catalog_path).
    type: raw
  storage_concurrency:
    description:
      - Admission control for stages that allocate on a storage (clone, disk). At most this many of their requests are in
        flight per storage at a time, counted across every fork, C(ansible-playbook) process and AWX job that shares the
        journal directory (one C(flock)ed slot file per place under C(<journal_dir>/admission/)).
      - Proxmox runs every volume allocation and free on a storage under one lock whose waiters give up after 10 seconds
        (C(can't lock file '/var/lock/pve-manager/pve-storage-<id>' - got timeout)); many clones at once fail that way.
        A stage waiting for a slot has sent nothing; when O(wait_budget) passes it returns RV(done=false) with the waiting
        time as progress. A slot is given back when the task ended or, while another run waits for a slot of that
        storage, as soon as the task logged its allocations (C(allocated target volume)).
      - V(0) turns admission control off. See C(docs/concurrency.md) in the collection.
      - If not specified, the value of the E(VMANYWARE_STORAGE_CONCURRENCY) environment variable is used.
    type: int
    default: 3
"""
