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
  profiles_path:
    description:
      - Directory on the controller of the profile declarations, v1 C(Profile) files (C(*.yml), C(*.yaml), read in name order), for the
        profiles the build bakes (the TemplateBuild's C(profiles)).
      - Read only when the build bakes profiles; absent, the C(profiles) directory beside O(template_build_path) when it exists.
      - The plan records each profile that runs with its version, declaration hash and variables, so a changed declaration changes the
        plan hash; the stamp and the catalog mapping record them as C(bakedProfiles). See C(docs/templates.md), "Baking profiles".
      - Mutually exclusive with O(profiles).
    type: path
  profiles:
    description:
      - The profile declarations inline, a list of v1 C(Profile) documents (YAML text or dictionaries). Mutually exclusive with
        O(profiles_path).
    type: list
    elements: raw
notes:
  - An invalid document fails with C(error_code=invalid_template_build), the path of the offending field in C(error_path) and the
    rule it broke in C(error_details.rule); input values are never echoed.
  - C(templateVmid=auto) is valid in the document but needs VMID allocation, which this version does not include
    (rule C(auto_needs_allocation)).
  - Profiles to bake are refused as a definition's are (V(profile_not_found), V(invalid_profile_vars), V(invalid_profile),
    V(profile_requires_cycle), V(profile_version_mismatch)), and with V(profile_distro_unsupported) or V(distro_family_not_recorded)
    when a profile does not support the build's C(distroFamily) or the build declares none.
"""
