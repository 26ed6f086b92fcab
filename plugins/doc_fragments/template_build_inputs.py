# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The TemplateBuild input options (argument spec: `_template_build.template_build_argument_spec()`)."""

    DOCUMENTATION = r"""
options:
  template_build_path:
    description:
      - Path on the controller of the template build document, a v1 C(TemplateBuild) YAML file of at most 64 KiB.
      - The format is strict; see C(docs/templates.md) in the collection.
      - Exactly one of O(template_build_path) and O(template_build) is required.
    type: path
  template_build:
    description:
      - The template build document as inline YAML text (same format and limits as the file of O(template_build_path)).
      - Exactly one of O(template_build_path) and O(template_build) is required.
    type: str
notes:
  - An invalid document fails with C(error_code=invalid_template_build), the path of the offending field in C(error_path) and the
    rule it broke in C(error_details.rule); input values are never echoed.
  - C(templateVmid=auto) is valid in the document but needs VMID allocation, which this version does not include
    (rule C(auto_needs_allocation)).
"""
