# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Rows of cells as aligned lines: the ``check_table`` filter's table, and ``vmanyware_provision``'s preflight lines.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t


def aligned_lines(rows: t.Sequence[t.Sequence[str]]) -> list[str]:
    """One line per row, every column but the last padded to its widest cell (the last is free text)."""
    columns = max((len(row) for row in rows), default=0)
    widths = [max((len(row[column]) for row in rows if column < len(row)), default=0) for column in range(columns)]
    return [
        "  ".join([cell.ljust(widths[column]) for column, cell in enumerate(row[:-1])] + list(row[-1:])).rstrip()
        for row in rows
    ]


def check_row(check: t.Mapping[str, t.Any]) -> list[str]:
    """The cells of one preflight check: status, code, message."""
    return [str(check.get("status", "")), str(check.get("code", "")), str(check.get("message", ""))]
