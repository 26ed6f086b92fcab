# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The stages of a template build (docs/templates.md, "Stages"), one file per stage kind (the ``disk`` kind is the VM's
``_stages/vm/disk.py``).

download -> create -> configure -> start -> prepare -> generalize -> shutdown -> unconfigure ->
convert -> stamp. Every stage follows the protocol of the stage runner (``_stages/runner.py``): preconditions by GET, the
dispatch recorded before the request (after the provisioning gate is re-read: a closed gate sends
nothing and leaves the stage pending), a known task reconciled by GET, a submission whose outcome is
unknown resolved by reads only (never sent again: ``uncertain`` when reads cannot decide), an
independent read-back.

``prepare`` and ``generalize`` change nothing through the API: the role does the work in the guest
over SSH (``ansible.builtin.apt`` and friends) and hands the stage what it saw; the stage checks
the guest agent answers through the API and records the evidence. On a simulated guest the role
runs a *stand-in* instead (``prepared_by: stand-in``): it is recorded as such, written into the
template's stamp, and a stand-in build never produces an ``imageDefaultUser`` attestation.

May import: what ``_stages`` may, the stage framework (``_stages/*.py``) and ``_stages/vm`` (the start and disk stages).

This is a private module_utils package: not a public API.
"""
