# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The node SSH route's settings (``_api/node_ssh.py``, its one argument spec); a module says what it does with
    them in its own ``node_ssh`` description, which the fragment's suboptions complete."""

    DOCUMENTATION = r"""
options:
  node_ssh:
    type: dict
    suboptions:
      private_key_file:
        description: The dedicated private key for the node login.
        type: path
        required: true
      known_hosts_file:
        description: The known_hosts file with the nodes' SSH host keys (no trust on first use).
        type: path
        required: true
      user:
        description: The login user on the nodes.
        type: str
        default: root
      port:
        description: The SSH port of a node whose endpoint names none.
        type: int
        default: 22
      endpoints:
        description: Node name to C(host), C(host:port) or C([address]:port); a node not listed is reached by its name.
        type: dict
      connect_timeout:
        description: Seconds to wait for each node's SSH endpoint.
        type: int
        default: 10
"""
