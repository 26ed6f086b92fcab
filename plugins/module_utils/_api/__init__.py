# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Talking to Proxmox: the client (settings, TLS and pinning, HTTP error classification, transport), tasks, Proxmox
configuration parsing, certificate inspection, the connection argument spec, CLI equivalents, recent reads, storage
admission, the guest agent transport of the connection plugin.

May import: ``_core``. Never the journal.

This is a private module_utils package: not a public API.
"""
