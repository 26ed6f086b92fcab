# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The request log (``GET /_pvesim/requests``): every request with its parameters, secrets redacted."""

from __future__ import annotations

import re
import threading
import typing as t

SECRET_KEY_RE = re.compile(r"password|secret|ticket|otp|tfa-challenge|csrf|token", re.I)


def redact(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    return {k: ("<redacted>" if SECRET_KEY_RE.search(k) else v) for k, v in params.items()}


class RequestLog:
    """Evidence: one entry per ``/api2`` request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[dict[str, t.Any]] = []
        self.seq = 0

    def add(self, entry: dict[str, t.Any]) -> None:
        with self.lock:
            self.seq += 1
            entry["seq"] = self.seq
            self.entries.append(entry)

    def list(self) -> list[dict[str, t.Any]]:
        with self.lock:
            return [dict(e) for e in self.entries]

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
