# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The plan inputs every vmanyware module takes (argument spec: `_plan.plan_input_argument_spec()`)."""

    DOCUMENTATION = r"""
options:
  catalog_path:
    description:
      - Path on the controller of the template catalog, a v1 C(TemplateCatalog) YAML file of at most 64 KiB.
      - The format is strict; see C(docs/formats.md) in the collection.
      - Exactly one of O(catalog_path) and O(catalog) is required.
    type: path
  catalog:
    description:
      - The template catalog as inline YAML text (same format and limits as the file of O(catalog_path)), or as a dictionary
        (for example from C(group_vars)), which is validated as data, never converted to text.
      - Exactly one of O(catalog_path) and O(catalog) is required.
    type: raw
  definition_path:
    description:
      - Path on the controller of the environment definition, a v1 C(Environment) YAML file of at most 64 KiB.
      - Exactly one of O(definition_path) and O(definition) is required.
    type: path
  definition:
    description:
      - The environment definition as inline YAML text (same format and limits as the file of O(definition_path)), or as a
        dictionary (for example from C(group_vars)), which is validated as data, never converted to text.
      - Exactly one of O(definition_path) and O(definition) is required.
    type: raw
  target_vmid:
    description:
      - The VMID the new virtual machine will get, 100-999999999.
      - Must differ from the template VMID of the selected catalog mapping.
      - It is part of the plan hash.
    type: int
    required: true
  target_node:
    description:
      - The node the new guest goes to, a concrete node name as M(vmanyware.proxmox.vmanyware_placement) chose it (V(auto) is
        refused with C(invalid_target_node), since placement runs first). Absent, the definition's C(targetNode), else the node of
        the image's catalog mapping; the plan and every hash are then exactly as without this option.
      - A catalog mapping of the image on that node is cloned there (a per-node template); otherwise the image's first mapping is
        cloned with Proxmox's C(target) parameter, and the mapping the plan hashes records C(targetNode). The plan document's
        C(clone) says which (C(method) V(per-node-template) or V(target), C(sourceNode)). See "Placement" in C(docs/operations.md).
      - Must agree with the definition's C(targetNode) when it names a node (C(target_node_conflict)).
    type: str
  addresses:
    description:
      - "The addresses leased for a definition whose C(network) asks for C(address: auto), as C(ipv4) and C(ipv6) keys
        (M(vmanyware.proxmox.vmanyware_address) reserves them; the roles pass them on)."
      - Each must lie in the catalog network's pool; the plan records it, so it is part of the plan hash.
      - An address the definition gives itself needs no entry here (one given must be the same).
    type: dict
  ssh_key_sources:
    description:
      - The operator's SSH key sources, each C(name) (a lowercase DNS label, not V(definition)) and C(path) (a public key file, or a
        directory whose C(*.pub) files are read in name order; symbolic links are refused).
      - Every guest gets their keys besides the definition's own, unless the definition leaves a source out
        (C(access.excludeKeySources)); each key is checked as the definition's are, listed once (with every source that gives it),
        and the plan lists each with its sources and SHA-256 fingerprint. See C(docs/profiles.md), "SSH key sources".
      - Absent or empty, the plan and every hash are exactly as without this option.
    type: list
    elements: dict
notes:
  - Invalid inputs fail with a fixed C(error_code) (for example V(invalid_catalog), V(invalid_definition), V(invalid_target_vmid),
    V(image_not_mapped), V(disk_shrink_unsupported), V(network_not_in_catalog), V(invalid_network_address),
    V(invalid_plan), V(invalid_preset), V(preset_not_found), V(preset_version_mismatch), V(invalid_ssh_key_source), V(invalid_profile),
    V(profile_not_found), V(invalid_profile_vars), V(profile_distro_unsupported)),
    the path of the offending field in C(error_path) and the
    rule it broke in C(error_details.rule); input values are never echoed.
"""

    # Where a definition's presets and profiles come from: every module that reads a definition, planned or not.
    DEFINITION_SOURCES = r"""
options:
  presets_path:
    description:
      - Directory on the controller of the presets, v1 C(Preset) files (C(*.yml), C(*.yaml), read in name order), each a named,
        versioned fragment (C(image), C(resources), C(network)) a definition may start from with C(preset.name).
      - Read only when the definition names a preset; absent, the C(presets) directory beside O(catalog_path) when it exists.
      - The definition's own fields win, field by field; the plan records the preset's name, version and hash, so a changed preset
        changes the plan hash. See C(docs/profiles.md), "Presets".
      - Mutually exclusive with O(presets).
    type: path
  presets:
    description:
      - The presets inline, a list of v1 C(Preset) documents (YAML text or dictionaries). Mutually exclusive with O(presets_path).
    type: list
    elements: raw
  profiles_path:
    description:
      - Directory on the controller of the profile declarations, v1 C(Profile) files (C(*.yml), C(*.yaml), read in name order),
        each naming the Ansible role that implements it, the distro families it supports, its typed variables and the profiles
        it requires.
      - Read only when the definition requests profiles (C(profiles)); absent, the C(profiles) directory beside O(catalog_path)
        when it exists.
      - The plan lists the profiles in run order with their version, declaration hash and variables, pins them in the
        definition, so a changed declaration changes the plan hash, and picks among templates of the image the one with the most
        requested profiles baked in. See C(docs/profiles.md), "Profiles".
      - Mutually exclusive with O(profiles).
    type: path
  profiles:
    description:
      - The profile declarations inline, a list of v1 C(Profile) documents (YAML text or dictionaries). Mutually exclusive with
        O(profiles_path).
    type: list
    elements: raw
"""
