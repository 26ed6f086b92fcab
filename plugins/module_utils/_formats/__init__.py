# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The operator's documents, offline: strict YAML, refusals (FormatError), the catalog, the definition, SSH keys, the JSON
schemas, canonical hashing, the plan and the template-build document.

May import: ``_core`` and the stage registry's table (``_stages/registry.py``, data only). Never the client, the journal or a stage.

This is a private module_utils package: not a public API.
"""
