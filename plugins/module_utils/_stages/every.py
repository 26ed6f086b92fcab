# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every stage logic module the registry names by string, imported by name.

The registry (``_stages/__init__.py``) loads a row's logic class with ``importlib`` on first use: it cannot import the
stage files, which import it. AnsiballZ packages only the module_utils a module imports by name, so a module run as a
module process (``VMANYWARE_IN_PROCESS=false``, ``become``, a host other than the controller) lacked them
(``vmanyware_provision``, ``vmanyware_container``, adoption, a template build's disk stage: ``internal_error``).
``_stage_module`` imports this file, so every module that builds logic from the registry has every class at hand.
The cleanup steps (``_lifecycle``) are not listed: ``vmanyware_cleanup`` imports that file itself.
tests/unit/plugins/module_utils/_stages/test_registry.py checks that this list names every module the registry does.
"""

from __future__ import annotations

from ansible_collections.vmanyware.proxmox.plugins.module_utils import _template_stages  # noqa: F401  pylint: disable=unused-import
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import (  # noqa: F401  pylint: disable=unused-import
    clone,
    cloudinit,
    container,
    disk,
    packages,
    readiness,
    resources,
    seed,
    snapshot,
    start,
)
