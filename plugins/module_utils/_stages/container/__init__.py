# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The container stages (``guestType: container``): one file per stage kind (docs/containers.md).

They follow the same protocol as the VM stages (``_stages/runner.py``): preconditions by GET,
the gates re-read before every new write (provisioning; the snapshot also the snapshots gate), the
dispatch journaled before sending, a known task followed by GET only, a submission whose outcome is
unknown resolved by reads and never sent again (``uncertain`` when reads cannot decide).

- ``template``: the newest appliance version matching the catalog glob (the node's ``aplinfo``
  plus the storage's ``vztmpl`` content); ``POST /nodes/{node}/aplinfo`` only when it is missing.
  The resolved volume is the stage's evidence, and ``create`` uses exactly that volume.
- ``create``: ``POST /nodes/{node}/lxc`` (a ``vzcreate`` task whose id is the VMID) with the
  binding description, the ``vmanyware`` tag, ``unprivileged``, ``features`` only when declared,
  ``rootfs STORAGE:diskGiB`` and ``net0`` with a MAC derived from the operation id, so the MAC is
  in the journaled request before anything is sent. A lost reply: a container with our
  description (or only ``lock: create`` with exactly one running ``vzcreate`` task of ours) is
  applied; nothing there is never re-sent: the stage becomes ``uncertain``.
- ``start``: ``POST .../status/start`` (``vzstart``), observed ``running``.
- ``readiness``: ``GET .../interfaces`` until the interface with the recorded MAC has a usable
  IPv4; the deadline is journaled when the stage first starts. Containers have no agent: host
  keys cannot be read through the API, so readiness records no known_hosts (docs/containers.md,
  "SSH trust").

May import: what ``_stages`` may, the stage framework (``_stages/*.py``) and ``_stages/vm`` (shared guest helpers).

This is a private module_utils package: not a public API.
"""
