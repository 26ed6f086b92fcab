"""Benchmark on a real guest (issue 36): time from the confirmed run's start to a verified SSH login, ours against the
equal-work peer, one VM, on pvesim ``--guests real`` (a real QEMU guest: real cloud-init, qemu-guest-agent and sshd;
docs/real-guest.md).

Per repetition and tool (the order alternates), on a fresh simulator state with the demo seed on the unscaled clock:

- ours: the review run (plan and preflight, writes the confirmation block; not timed), then the confirmed run of the
  provision role (benchmarks/ours.yml); the peer: benchmarks/peer-equal.yml (community.proxmox plus ``uri`` calls for
  ``cloud-init status --wait`` and the host keys through the agent);
- the clock starts when the timed playbook starts and stops when ``ssh`` logs in as the definition's user with
  ``StrictHostKeyChecking=yes`` against the known_hosts file the tool wrote (a login refused or failing is retried
  once a second for up to 120 s, and the time until it works counts);
- then, over that SSH session, the guest's own boot time (``systemd-analyze``: kernel + userspace until the boot
  target, cloud-init's final stage included) and its uptime at the login.

Prints one line per run and the medians; ``--json`` writes every number. Needs root (QEMU, the image build) and the
guest image of tools/guest-image/build.sh (built or reused). Both tools run the same job as benchmarks/run.py (its
Simulator and Runner), with a key pair generated for the run in the definition and in the peer's ``sshkeys``.

    .venv/bin/python benchmarks/real_guest.py --reps 3 --json /tmp/real-guest.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run as bench  # pylint: disable=wrong-import-position

LOGIN_TIMEOUT = 120.0
SYSTEMD_ANALYZE = re.compile(r"=\s*(?:(?P<min>\d+)min\s*)?(?P<s>[\d.]+)s")


def guest_image() -> str:
    proc = subprocess.run(
        [str(bench.REPO / "tools" / "guest-image" / "build.sh")],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(f"tools/guest-image/build.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


def ssh_argv(port: int, key: Path, known_hosts: Path, address: str, command: str) -> list[str]:
    return [
        "ssh",
        "-p",
        str(port),
        "-i",
        str(key),
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={known_hosts}",
        "-o",
        f"HostKeyAlias={address}",  # the tool wrote the lines for the guest's address; the login goes to the forward
        "-o",
        "ConnectTimeout=10",
        "debian@127.0.0.1",
        command,
    ]


def login(port: int, key: Path, known_hosts: Path, address: str) -> tuple[float, int]:
    """Log in until it works (or LOGIN_TIMEOUT): the moment it worked and the attempts."""
    deadline = time.monotonic() + LOGIN_TIMEOUT
    attempts, error = 0, ""
    while time.monotonic() < deadline:
        attempts += 1
        proc = subprocess.run(
            ssh_argv(port, key, known_hosts, address, "true"), capture_output=True, text=True, check=False, timeout=60
        )
        if proc.returncode == 0:
            return time.monotonic(), attempts
        error = proc.stderr.strip()[-300:]
        time.sleep(1)
    raise SystemExit(f"no SSH login within {LOGIN_TIMEOUT:.0f} s ({attempts} attempts): {error}")


def boot_seconds(analyze: str) -> float | None:
    """The total of ``systemd-analyze``'s "Startup finished in ... = T" (``1min 24.490s`` forms too); None before the
    boot finished."""
    match = SYSTEMD_ANALYZE.search(analyze)
    return float(match["s"]) + 60 * int(match["min"] or 0) if match else None


def boot_figures(port: int, key: Path, known_hosts: Path, address: str) -> dict[str, float | None]:
    proc = subprocess.run(
        ssh_argv(port, key, known_hosts, address, "systemd-analyze; cat /proc/uptime"),
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    boot = boot_seconds(proc.stdout)
    uptime_line = [line for line in proc.stdout.splitlines() if re.fullmatch(r"[\d.]+ [\d.]+", line.strip())]
    return {"boot_s": boot, "uptime_at_login_s": float(uptime_line[-1].split()[0]) if uptime_line else None}


def guest_address(known_hosts: Path) -> str:
    """The address the tool recorded the host keys under (both tools write ``ADDRESS TYPE KEY`` lines)."""
    for line in known_hosts.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            return line.split()[0].split(",")[0].strip("[]").split("]:")[0]
    raise SystemExit(f"{known_hosts}: no host key line")


def one_run(runner: bench.Runner, tool: str, state: Path, key: Path) -> dict[str, t.Any]:
    if tool == "ours":
        runner.review(1, state)  # not timed: the operator reads the plan and the preflight, then confirms
    started = time.monotonic()
    result = runner.run(tool, 1, state)
    if result["failed_vms"]:
        raise SystemExit(f"{tool}: the VM was not provisioned: {result['errors']}\n{result['failure_excerpt']}")
    vm = runner.sim.admin.vm(bench.FIRST_VMID)
    known_hosts = state / f"known_hosts-vm{bench.FIRST_VMID}"
    address = guest_address(known_hosts)
    logged_in, attempts = login(int(vm["ssh_forward_port"]), key, known_hosts, address)
    starts = [task for task in result["tasks"] if task["type"] == "qmstart" and task.get("created") is not None]
    figures = {
        "tool": tool,
        "to_login_s": round(logged_in - started, 1),
        "playbook_s": round(result["wall"], 1),
        "login_attempts": attempts,
        "requests": len(result["requests"]),
        "address": address,
        **boot_figures(int(vm["ssh_forward_port"]), key, known_hosts, address),
    }
    if starts:  # the start task's own begin (epoch) to the login, on the same clock
        figures["start_task_to_login_s"] = round(time.time() - (time.monotonic() - logged_in) - starts[0]["created"], 1)
    return figures


def main(argv: t.Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tools", default="ours,equal", help="comma separated, of: ours, equal")
    ap.add_argument(
        "--newest-peer", default="fetch", help="as benchmarks/run.py --newest-peer (default: build or reuse)"
    )
    ap.add_argument("--guest-accel", default="auto", choices=("auto", "kvm", "tcg"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args(argv)
    tools = [tool for tool in args.tools.split(",") if tool]
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        raise SystemExit("needs ssh and ssh-keygen (openssh-client)")
    image = guest_image()
    work = Path(tempfile.mkdtemp(prefix="vmanyware-realguest-bench-"))
    key = work / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench@real-guest", "-f", str(key)], check=True
    )
    definition = yaml.safe_load((HERE / "definition.yml").read_text(encoding="utf-8"))
    definition["access"]["sshPublicKeys"] = [Path(f"{key}.pub").read_text(encoding="utf-8").strip()]
    definition_path = work / "definition.yml"
    definition_path.write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")
    setups: dict[str, bench.Ansible] = {}
    if "equal" in tools:
        newest = bench.newest_peer(args.newest_peer)
        if newest is None:
            raise SystemExit("no newest peer: run tools/dev/fetch_newest_peer.sh, or --newest-peer fetch")
        setups["equal"] = newest
    sim = bench.Simulator(
        work / "pvesim",
        speed=1.0,
        timings=HERE / "timings.yml",
        seed="demo",
        extra=["--guests", "real", "--guest-image", image, "--guest-accel", args.guest_accel],
    )
    runs: list[dict[str, t.Any]] = []
    try:
        runner = bench.Runner(sim, work, sys.executable, setups, definition=definition_path)
        for rep in range(args.reps):
            order = tools if rep % 2 == 0 else list(reversed(tools))
            for tool in order:
                state = work / f"state-{tool}-{rep}"
                state.mkdir()
                figures = one_run(runner, tool, state, key) | {"rep": rep + 1, "load": round(os.getloadavg()[0], 2)}
                runs.append(figures)
                print(json.dumps(figures), flush=True)
    finally:
        sim.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, t.Any] = {}
    for tool in tools:
        mine = [r for r in runs if r["tool"] == tool]
        summary[tool] = {
            key_: statistics.median([r[key_] for r in mine if r.get(key_) is not None])
            for key_ in ("to_login_s", "playbook_s", "boot_s", "uptime_at_login_s", "requests")
            if any(r.get(key_) is not None for r in mine)
        }
        print(
            f"{bench.LABELS[tool]}: median of {len(mine)}: " + ", ".join(f"{k} {v:g}" for k, v in summary[tool].items())
        )
    if "ours" in summary and "equal" in summary:
        ratio = summary["ours"]["to_login_s"] / summary["equal"]["to_login_s"]
        summary["ratio_to_login"] = round(ratio, 3)
        print(f"ours / equal-work peer, time to a verified SSH login (medians): {ratio:.2f}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"machine": bench.machine_info(sys.executable), "runs": runs, "summary": summary}, indent=1),
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
