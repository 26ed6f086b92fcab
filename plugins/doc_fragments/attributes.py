# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Descriptions of the attributes every vmanyware module documents; modules add C(support) (C(action) is the same for all)."""

    DOCUMENTATION = r"""
options: {}
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
    details:
      - When the task runs on the controller (C(connection=local), without C(become) or C(async)), the module's own code runs
        inside Ansible's worker process instead of a new Python process; options, defaults, environment fallbacks, the task's
        C(environment), results and C(no_log) censoring are the same. This saves most of a second per task.
      - Otherwise, or with E(VMANYWARE_IN_PROCESS=false) in the controller's environment, or when the controller's Python lacks
        a required library, the module runs as an ordinary module process under C(ansible_python_interpreter).
  check_mode:
    description: Can run in C(check_mode) and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in C(check_mode)), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second invocation indicates no change.
      - This assumes that the system controlled/queried by the module has not changed in a relevant way.
"""
