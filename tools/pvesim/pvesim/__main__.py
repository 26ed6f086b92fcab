# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""``python -m pvesim serve --port PORT --state-dir DIR [--seed demo] [--speed F] [--schema P] [--faults F]
[--timings FILE] [--storage-lock on|off] [--guests simulated|real|container [--guest-image DIR]
[--guest-accel auto|kvm|tcg]] [--containers simulated|real] [--container-rootfs DIR]
[--node-ssh-authorized-keys FILE]``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import typing as t


def main(argv: t.Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pvesim", description="Proxmox VE 9.x API simulator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTPS simulator on 127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="TCP port (0: pick a free one)")
    serve.add_argument("--state-dir", required=True, help="directory for certificates and connection.json")
    serve.add_argument(
        "--seed", default="demo", help="initial state: demo (one node) or cluster (three nodes, docs/simulator.md)"
    )
    serve.add_argument(
        "--speed", type=float, default=1.0, help="simulated clock speed factor (task durations are divided by it)"
    )
    serve.add_argument("--schema", default=None, help="API schema JSON (default: the bundled pve-9.1.3 schema)")
    serve.add_argument("--faults", default=None, help="JSON/YAML file with fault rules to install at start")
    serve.add_argument(
        "--timings",
        default=None,
        help="JSON/YAML time model: {tasks: {qmclone_full: 20, ...}, guest: {agent_up_after: 8, ...}} (simulated seconds)",
    )
    serve.add_argument(
        "--storage-lock",
        choices=("on", "off"),
        default="on",
        help="model Proxmox's per-storage allocation lock (10 s waiter timeout; docs/simulator.md)",
    )
    serve.add_argument(
        "--guests",
        choices=("simulated", "real", "container"),
        default="simulated",
        help="guest backend: simulated (default), real QEMU VMs (docs/real-guest.md), or LXC containers whose agent "
        "commands really run (container; needs --container-rootfs; docs/simulator-guest.md)",
    )
    serve.add_argument(
        "--guest-image", default=None, help="with --guests real: image directory from tools/guest-image/build.sh"
    )
    serve.add_argument(
        "--guest-accel",
        choices=("auto", "kvm", "tcg"),
        default="auto",
        help="with --guests real: QEMU accelerator (auto: KVM only with kvm_intel/kvm_amd loaded)",
    )
    serve.add_argument(
        "--containers",
        choices=("simulated", "real"),
        default="simulated",
        help="container backend: simulated (default) or real LXC containers (docs/containers.md)",
    )
    serve.add_argument(
        "--container-rootfs",
        default=None,
        help="with --containers real or --guests container: directory from tools/container-rootfs/build.sh",
    )
    serve.add_argument(
        "--node-ssh-authorized-keys",
        default=None,
        help="offer each node's SSH endpoint with pct on 127.0.0.1, accepting these public keys (docs/containers.md)",
    )
    args = parser.parse_args(argv)

    from .realcontainer import ContainerRootfsError  # pylint: disable=import-outside-toplevel
    from .nodessh import NodeSshError  # pylint: disable=import-outside-toplevel
    from .realguest import GuestImageError  # pylint: disable=import-outside-toplevel
    from .server import PvesimServer  # pylint: disable=import-outside-toplevel

    if args.guests == "real" and not args.guest_image:
        parser.error("--guests real needs --guest-image DIR (build it with tools/guest-image/build.sh)")
    if args.guests == "container" and not args.container_rootfs:
        parser.error("--guests container needs --container-rootfs DIR (build it with tools/container-rootfs/build.sh)")
    if args.containers == "real" and not args.container_rootfs:
        parser.error("--containers real needs --container-rootfs DIR (build it with tools/container-rootfs/build.sh)")
    try:
        server = PvesimServer(
            args.state_dir,
            port=args.port,
            seed=args.seed,
            speed=args.speed,
            schema_path=args.schema,
            faults_file=args.faults,
            guests=args.guests,
            guest_image=args.guest_image,
            guest_accel=args.guest_accel,
            timings_file=args.timings,
            storage_lock=args.storage_lock == "on",
            containers=args.containers,
            container_rootfs=args.container_rootfs,
            node_ssh_authorized_keys=args.node_ssh_authorized_keys,
        )
    except GuestImageError as exc:
        sys.stderr.write(f"pvesim: cannot use real guests: {exc}\n")
        return 2
    except ContainerRootfsError as exc:
        sys.stderr.write(
            f"pvesim: cannot use real containers ({args.containers}) or container guests ({args.guests}): {exc}\n"
        )
        return 2
    except NodeSshError as exc:
        sys.stderr.write(f"pvesim: cannot offer the node SSH endpoints: {exc}\n")
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: t.Any) -> None:
        del signum, frame
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.start()
    except NodeSshError as exc:
        sys.stderr.write(f"pvesim: cannot offer the node SSH endpoints: {exc}\n")
        server.stop()
        return 2
    sys.stderr.write(f"pvesim listening on https://127.0.0.1:{server.port}/api2/json (state dir {server.state_dir})\n")
    sys.stderr.flush()
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()  # also stops every real guest's QEMU
    return 0


if __name__ == "__main__":
    sys.exit(main())
