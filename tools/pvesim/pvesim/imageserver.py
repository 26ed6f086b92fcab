# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A loopback HTTP server for cloud images, the download source of ``download-url`` in tests.

``ImageServer(directory)`` serves the files of one directory on 127.0.0.1 (a free port) until
``close()``; ``url(name)`` is the URL of one file. ``qcow2_stub(virtual_size)`` is the smallest
file whose qcow2 header declares ``virtual_size`` (enough for the simulated API, which reads the
header like ``qemu-img info`` does; not a bootable disk).
"""

from __future__ import annotations

import functools
import http.server
import struct
import threading
import typing as t
from pathlib import Path


def qcow2_stub(virtual_size: int, payload: bytes = b"") -> bytes:
    """A qcow2 v3 header (magic, version, no backing file, 64 KiB clusters, ``virtual_size``) plus ``payload``."""
    return b"QFI\xfb" + struct.pack(">IQIIQ", 3, 0, 0, 16, virtual_size) + payload


class ImageServer:
    def __init__(self, directory: str | Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> "ImageServer":
        return self

    def __exit__(self, *exc: t.Any) -> None:
        self.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: t.Any) -> None:
        pass
