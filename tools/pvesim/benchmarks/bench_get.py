# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Startup time and GETs/s (one client thread, keep-alive) of the simulator.

Usage: ``python tools/pvesim/benchmarks/bench_get.py [--seconds 3]``. Targets: start < 2 s, >= 500 GETs/s.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import requests

from pvesim.testing import start_server, stop_server


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--path", default="/version")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pvesim-bench-") as tmp:
        t0 = time.monotonic()
        proc, conn = start_server(tmp)
        startup = time.monotonic() - t0
        try:
            session = requests.Session()
            tok = conn["tokens"]["full"]
            session.headers["Authorization"] = f"PVEAPIToken={tok['id']}={tok['secret']}"
            url = conn["url"] + args.path
            session.get(url, verify=conn["ca_file"]).raise_for_status()  # warm-up (TLS handshake)
            n = 0
            start = time.monotonic()
            while time.monotonic() - start < args.seconds:
                resp = session.get(url, verify=conn["ca_file"])
                if resp.status_code != 200:
                    raise SystemExit(f"unexpected status {resp.status_code}")
                n += 1
            rate = n / (time.monotonic() - start)
        finally:
            stop_server(proc)
    print(f"startup: {startup:.3f} s (until connection.json)")
    print(f"GET {args.path}: {rate:.0f} requests/s over {n} requests (1 thread, keep-alive)")
    return 0 if startup < 2.0 and rate >= 500 else 1


if __name__ == "__main__":
    raise SystemExit(main())
