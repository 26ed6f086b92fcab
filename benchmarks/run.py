# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: vmanyware.proxmox (the provision role) against community.proxmox doing the same job.

One run on one machine: a pvesim simulator with the realistic time model (benchmarks/timings.yml,
scaled by --speed), both tools provisioning N VMs in parallel (N inventory hosts, forks = N),
alternating A/B per repetition, then in-process measurements of the journal and the planner.
Prints seven figure lines ``[1]`` .. ``[7]`` and writes every raw number to ``--json``.

    .venv/bin/python benchmarks/run.py --sizes 1,10,50 --reps 3 --speed 10 --json out.json --plot docs/benchmarks.png
    .venv/bin/python benchmarks/run.py --smoke      # N=1, one repetition, speed 50, small journal/plan counts
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import os
import platform
import re
import resource
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
FIRST_VMID = 301
TASK_STATUS = re.compile(r"^/nodes/[^/]+/tasks/(UPID:[^/]+)/status$")
# the time model of one VM's critical path (keys of timings.yml); figure [3] uses the tasks as run plus the guest waits
OUR_PATH = (
    ("tasks", "qmclone_full"),
    ("tasks", "qmconfig"),
    ("tasks", "resize"),
    ("tasks", "qmstart"),
    ("guest", "cloudinit_done_after_boot"),
    ("tasks", "qmsnapshot"),
)
PEER_PATH = (
    ("tasks", "qmclone_full"),
    ("tasks", "resize"),
    ("tasks", "qmstart"),
    ("guest", "agent_up_after"),
    ("guest", "dhcp_after_agent"),
    ("tasks", "qmsnapshot"),
)


class Interrupted(BaseException):
    """SIGTERM/SIGINT during the runs: stop running, report what was measured."""


def _interrupt(signum: int, frame: t.Any) -> None:
    del frame
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second signal ends the process
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise Interrupted(signum)


def _descendants(root: int) -> list[int]:
    """Every live descendant of ``root`` (ansible's forks call setsid, so a process group is not enough)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat_file.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            children[int(fields[1])].append(int(stat_file.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def run_playbook(cmd: list[str], env: dict[str, str], timeout: float = 3600) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in a new session, so that the playbook's forks and modules die with it."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,  # pylint: disable=consider-using-with
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        for pid in [proc.pid, *_descendants(proc.pid)]:  # only processes this run started
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def failure_excerpt(stdout: str) -> str:
    """The first failure of a playbook's output (what ``fatal:``/``failed:`` said), else its tail."""
    m = re.search(r"^(fatal|failed): .*", stdout, re.M)
    return stdout[m.start() : m.start() + 3000] if m else stdout[-3000:]


def log(msg: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def median(values: t.Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: t.Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


# ------------------------------------------------------------------------------------------------
# simulator


class Simulator:
    """``python -m pvesim serve`` with the time model, plus its admin API."""

    def __init__(self, state_dir: Path, speed: float, timings: Path, storage_lock: str = "on") -> None:
        sys.path.insert(0, str(REPO / "tools" / "pvesim"))
        from pvesim.testing import PvesimAdmin, start_server  # pylint: disable=import-outside-toplevel

        self.proc, self.conn = start_server(
            str(state_dir), speed=speed, extra=["--timings", str(timings), "--storage-lock", storage_lock]
        )
        self.admin = PvesimAdmin(self.conn)
        self.timings = self.admin.timings()
        self.speed = speed

    def stop(self) -> None:
        from pvesim.testing import stop_server  # pylint: disable=import-outside-toplevel

        stop_server(self.proc)


# ------------------------------------------------------------------------------------------------
# the two tools


# The demo seed's local-lvm has 200 GiB: ten 20 GiB VMs do not fit (resize fails with lvextend's
# "Insufficient free space", as PVE would). Every run gets this much instead.
STORAGE_TOTAL = 16 * 1024**4


class Runner:
    def __init__(self, sim: Simulator, work: Path, peer_root: Path, python: str) -> None:
        self.sim = sim
        self.work = work
        self.python = python
        self.bin = Path(python).parent
        conn = sim.conn
        # our collection: a private collections root with a symlink to this checkout
        self.ours_root = work / "collections"
        (self.ours_root / "ansible_collections" / "vmanyware").mkdir(parents=True, exist_ok=True)
        link = self.ours_root / "ansible_collections" / "vmanyware" / "proxmox"
        if not link.exists():
            link.symlink_to(REPO)
        self.peer_root = peer_root
        # ours: the role's default one-task path (vmanyware_provision) or one task per stage (provision_step_by_step)
        self.ours_path = "one-task"
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ANSIBLE_", "PROXMOX_", "VMANYWARE_", "REQUESTS_CA_BUNDLE"))
        }
        base.update(
            {
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_RETRY_FILES_ENABLED": "false",
                "ANSIBLE_DEPRECATION_WARNINGS": "false",
                "ANSIBLE_HOST_KEY_CHECKING": "false",
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                "ANSIBLE_HOME": str(work / "ansible-home"),
                "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
                "ANSIBLE_PYTHON_INTERPRETER": python,
            }
        )
        self.env_ours = {
            **base,
            "ANSIBLE_COLLECTIONS_PATH": str(self.ours_root),
            "PROXMOX_HOST": conn["host"],
            "PROXMOX_PORT": str(conn["port"]),
            "PROXMOX_TOKEN_ID": conn["tokens"]["full"]["id"],
            "PROXMOX_TOKEN_SECRET": conn["tokens"]["full"]["secret"],
            "PROXMOX_CA_PATH": conn["ca_file"],
            "VMANYWARE_PROVISIONING_ENABLED": "true",
            "VMANYWARE_SNAPSHOTS_ENABLED": "true",
        }
        self.env_peer = {**base, "ANSIBLE_COLLECTIONS_PATH": str(peer_root)}
        token_user, token_name = conn["tokens"]["full"]["id"].split("!")
        self.peer_vars = work / "peer-vars.json"
        self.peer_vars.touch(mode=0o600)
        self.peer_vars.write_text(
            json.dumps(
                {
                    "pve_port": conn["port"],
                    "pve_ca_file": conn["ca_file"],
                    "pve_node": conn["node"],
                    "pve_storage": conn["storage"],
                    "pve_template_vmid": conn["template_vmid"],
                    "pve_token_user": token_user,
                    "pve_token_name": token_name,
                    "pve_token_secret": conn["tokens"]["full"]["secret"],
                }
            ),
            encoding="utf-8",
        )

    def inventory(self, n: int) -> Path:
        path = self.work / f"inventory-{n}.ini"
        lines = ["[all]"] + [
            f"vm{FIRST_VMID + i} bench_vmid={FIRST_VMID + i} ansible_connection=local ansible_python_interpreter={self.python}"
            for i in range(n)
        ]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def _playbook(self, tool: str, n: int, state: Path, phase: str = "confirmed") -> tuple[list[str], dict[str, str]]:
        inv = self.inventory(n)
        cmd = [str(self.bin / "ansible-playbook"), "-i", str(inv), "-f", str(n)]
        if tool == "ours":
            cmd += [
                "-e",
                f"bench_catalog_path={REPO / 'examples' / 'catalog.yml'}",
                "-e",
                f"bench_definition_path={HERE / 'definition.yml'}",
                "-e",
                f"bench_state={state}",
                "-e",
                f"bench_phase={phase}",
                "-e",
                f"provision_step_by_step={self.ours_path == 'step-by-step'}",
                str(HERE / "ours.yml"),
            ]
            env = {**self.env_ours, "VMANYWARE_JOURNAL_DIR": str(state / "journal")}
        else:
            cmd += ["-e", f"@{self.peer_vars}", str(HERE / "peer.yml")]
            env = self.env_peer
        return cmd, env

    def review(self, n: int, state: Path) -> None:
        """Ours, first run (no confirmation): writes each host's confirmation block; not timed."""
        self.sim.admin.reset()
        self.sim.admin.set_storage(self.sim.conn["storage"], total=STORAGE_TOTAL)
        cmd, env = self._playbook("ours", n, state, phase="review")
        proc = run_playbook(cmd, env)
        if proc.returncode != 0 or len(list(state.glob("confirm-*.yml"))) != n:
            raise SystemExit(
                f"review run failed ({proc.returncode}):\n{failure_excerpt(proc.stdout)}\n{proc.stderr[-2000:]}"
            )

    def run(self, tool: str, n: int, state: Path) -> dict[str, t.Any]:
        """One timed run on a fresh simulator state: wall, CPU (RUSAGE_CHILDREN), request log, tasks."""
        admin = self.sim.admin
        admin.reset()
        admin.set_storage(self.sim.conn["storage"], total=STORAGE_TOTAL)
        shutil.rmtree(state / "journal", ignore_errors=True)
        for old in state.glob("known_hosts-*"):
            old.unlink()
        cmd, env = self._playbook(tool, n, state)
        load_before = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started_epoch = time.time()
        started = time.monotonic()
        proc = run_playbook(cmd, env)
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        failed_hosts = {
            m.group(1)
            for m in re.finditer(
                r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)", proc.stdout, re.M
            )
            if int(m.group(2)) or int(m.group(3))
        }
        if proc.returncode != 0 and not failed_hosts:
            raise SystemExit(
                f"{tool} N={n} failed ({proc.returncode}, wall {wall:.0f} s) without a failed host:\n"
                f"{failure_excerpt(proc.stdout)}\n{proc.stderr[-2000:]}"
            )
        requests = admin.requests()
        tasks = admin.tasks()
        failed_vms = []
        for i in range(n):  # the job was done: running, snapshot present, disk grown
            vmid = FIRST_VMID + i
            try:
                vm = admin.vm(vmid)
            except RuntimeError:
                vm = {"status": "missing", "snapshots": [], "config": {}}
            if (
                f"vm{vmid}" in failed_hosts
                or vm["status"] != "running"
                or len(vm["snapshots"]) != 1
                or "size=20G" not in vm["config"].get("scsi0", "")
            ):
                failed_vms.append(vmid)
        if len(failed_vms) == n:
            raise SystemExit(
                f"{tool} N={n}: no VM provisioned ({proc.returncode}, wall {wall:.0f} s):\n{failure_excerpt(proc.stdout)}"
            )
        lock_errors = [task for task in tasks if "got timeout" in str(task.get("exitstatus"))]
        # the wall time of what the tool finished: from the start to the end of the last finished VM's snapshot task
        snapshots = [
            task["ended"]
            for task in tasks
            if task["type"] == "qmsnapshot"
            and task["ended"] is not None
            and task["exitstatus"] == "OK"
            and int(task["id"]) not in failed_vms
        ]
        finished_wall = max(snapshots) - started_epoch if snapshots else None
        bad = [e for e in requests if e.get("schema_errors") or e.get("implemented") is False]
        locks = admin.storage_locks()["storages"].get(self.sim.conn["storage"], {})
        return {
            "tool": tool,
            "n": n,
            "wall": wall,
            "cpu": cpu,
            "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "requests": requests,
            "tasks": tasks,
            "schema_or_501": len(bad),
            "failed_vms": failed_vms,
            "lock_timeout_tasks": len(lock_errors),
            "finished_wall": finished_wall,
            "failure_excerpt": failure_excerpt(proc.stdout)[:1500] if failed_vms else "",
            "storage_lock": {k: v for k, v in locks.items() if k != "history"},
        }


# ------------------------------------------------------------------------------------------------
# figures from runs


def by_method(requests: t.Sequence[dict[str, t.Any]], n: int) -> dict[str, float]:
    counts = collections.Counter(e["method"] for e in requests)
    return {m: counts[m] / n for m in sorted(counts)} | {"total": len(requests) / n}


def by_endpoint(requests: t.Sequence[dict[str, t.Any]]) -> dict[str, int]:
    counts = collections.Counter((e.get("endpoint") or f"{e['method']} {e['path']}") for e in requests)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def poll_latencies(run: dict[str, t.Any]) -> tuple[list[float], int]:
    """Per task: first status GET of that UPID that arrived after the task ended, minus the end time.

    Returns (latencies, tasks never polled after their end)."""
    gets: dict[str, list[float]] = collections.defaultdict(list)
    for e in run["requests"]:
        m = TASK_STATUS.match(e["path"]) if e["method"] == "GET" else None
        if m and e["status"] == 200:
            gets[m.group(1)].append(e["time"])
    out: list[float] = []
    missed = 0
    for task in run["tasks"]:
        if task["ended"] is None:
            continue
        later = [ts for ts in gets.get(task["upid"], []) if ts >= task["ended"]]
        if later:
            out.append(min(later) - task["ended"])
        else:
            missed += 1
    return out, missed


def task_path_seconds(run: dict[str, t.Any], vmid: int, template: int) -> float:
    """Real seconds the simulator spent in one VM's tasks (clone is named after the template)."""
    total = 0.0
    for task in run["tasks"]:
        if task["ended"] is None:
            continue
        if task["id"] == str(vmid) or (task["type"] == "qmclone" and task["id"] == str(template)):
            total += task["ended"] - task["created"]
    return total


# ------------------------------------------------------------------------------------------------
# in-process: journal and planner


def _import_collection(root: Path) -> None:
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))


def journal_cost(root: Path, sizes: t.Sequence[int], reps: int, work: Path) -> dict[int, dict[str, float]]:
    """One stage's journal work (create the operation, dispatch, submitted, completed, reload)
    with ``size`` earlier operations in the journal directory. Median over ``reps``, in ms."""
    _import_collection(root)
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats import hashing as _hashing  # pylint: disable=import-outside-toplevel
    from ansible_collections.vmanyware.proxmox.plugins.module_utils import _journal  # pylint: disable=import-outside-toplevel

    definition, mapping = {"name": "bench"}, {"image": "debian-13"}
    definition_hash = _hashing.definition_hash(definition)

    def hashed(vmid: int) -> dict[str, t.Any]:
        """The plan snapshot of ``vmid``: every load checks its hashes against the snapshots (docs/journal.md)."""
        plan = {
            "definitionHash": definition_hash,
            "planHash": _hashing.plan_hash(definition_hash, mapping, vmid),
            "steps": [{"position": 1, "kind": "clone"}],
        }
        return {"plan": plan}

    common = {
        "provider_scope_id": "pve:" + "c" * 64,
        "definition": definition,
        "mapping": mapping,
        "confirmation": {"confirmed": True},
        "target_node": "pve-test",
        "stage_kinds": ["clone", "resources"],
    }
    results: dict[int, dict[str, float]] = {}
    for size in sizes:
        jdir = work / f"journal-{size}"
        shutil.rmtree(jdir, ignore_errors=True)
        jdir.mkdir(mode=0o700)
        store = _journal.JournalStore(str(jdir))
        started = time.monotonic()
        # History: real operations (claims and all); fsync is skipped only while filling it.
        with mock.patch("os.fsync", lambda fd: None):
            for i in range(size):
                doc, _created = store.create_operation(
                    idempotency_key=f"hist-{i}", target_vmid=100000 + i, **common, **hashed(100000 + i)
                )
                store.record_dispatch(doc["operationId"], "clone", {"method": "POST"})
                store.record_completed(doc["operationId"], "clone", {"upid": "UPID:x"})
        fill = time.monotonic() - started
        # Flush the history's unsynced writes now, or the first measured fsync pays for all of them.
        os.sync()
        samples: dict[str, list[float]] = collections.defaultdict(list)
        for r in range(reps):
            t0 = time.perf_counter()
            doc, _created = store.create_operation(
                idempotency_key=f"bench-{r}", target_vmid=900 + r, **common, **hashed(900 + r)
            )
            t1 = time.perf_counter()
            op = doc["operationId"]
            store.record_dispatch(op, "clone", {"method": "POST", "path": "/nodes/pve-test/qemu/9000/clone"})
            store.record_submitted(op, "clone", "UPID:pve-test:00000001:00000001:00000001:qmclone:9000:x@pve!t:")
            store.record_completed(op, "clone", {"vmid": 900 + r})
            t2 = time.perf_counter()
            store.load(op)
            store.target_holder(common["provider_scope_id"], 900 + r)
            t3 = time.perf_counter()
            samples["create"].append((t1 - t0) * 1000)
            samples["stage"].append((t2 - t1) * 1000)
            samples["read"].append((t3 - t2) * 1000)
            samples["total"].append((t3 - t0) * 1000)
        results[size] = {k: median(v) for k, v in samples.items()} | {"fill_s": fill}
        shutil.rmtree(jdir, ignore_errors=True)
    return results


def catalog_text(images: int) -> str:
    base = (REPO / "examples" / "catalog.yml").read_text(encoding="utf-8")
    head, _sep, first = base.partition("images:\n")
    entries = [first.rstrip("\n")]
    for i in range(1, images):
        entries.append(f"""  - image: img-{i:03d}
    node: pve-test
    templateVmid: {9001 + i}
    templateVersion: img-{i:03d}-cloud-20261016
    storage: local-lvm
    bridge: vmbr0
    diskDevice: scsi0
    sourceDiskGiB: 8
    guestUser: debian""")
    return head + "images:\n" + "\n".join(entries) + "\n"


def plan_cost(root: Path, images: int, reps: int, proc_reps: int, work: Path, python: str) -> dict[str, float]:
    _import_collection(root)
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats.plan import build_plan  # pylint: disable=import-outside-toplevel

    catalog = catalog_text(images)
    definition = (HERE / "definition.yml").read_text(encoding="utf-8")
    planned = build_plan(catalog=catalog, definition=definition, target_vmid=FIRST_VMID)  # warm-up (imports, schema)
    assert planned.plan_hash
    samples = []
    for _rep in range(reps):
        t0 = time.perf_counter()
        build_plan(catalog=catalog, definition=definition, target_vmid=FIRST_VMID)
        samples.append((time.perf_counter() - t0) * 1000)
    cat_path = work / f"catalog-{images}.yml"
    cat_path.write_text(catalog, encoding="utf-8")
    args = work / "plan-args.json"
    args.write_text(
        json.dumps(
            {
                "ANSIBLE_MODULE_ARGS": {
                    "catalog_path": str(cat_path),
                    "definition_path": str(HERE / "definition.yml"),
                    "target_vmid": FIRST_VMID,
                }
            }
        ),
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc_samples = []
    for _rep in range(proc_reps):
        t0 = time.monotonic()
        proc = subprocess.run(
            [python, "-m", "ansible_collections.vmanyware.proxmox.plugins.modules.vmanyware_plan", str(args)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        proc_samples.append(time.monotonic() - t0)
        result = json.loads(proc.stdout)
        if result.get("failed") or result.get("plan_hash") != planned.plan_hash:
            raise SystemExit(f"vmanyware_plan process failed: {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return {
        "images": images,
        "build_plan_ms": median(samples),
        "build_plan_p95_ms": percentile(samples, 95),
        "module_process_s": median(proc_samples),
        "module_process_min_s": min(proc_samples),
    }


# ------------------------------------------------------------------------------------------------


def machine_info(python: str) -> dict[str, t.Any]:
    mem_kib = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    core = subprocess.run(
        [python, "-c", "import ansible.release as r; print(r.__version__)"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count(),
        "mem_gib": round(mem_kib / 1048576, 1),
        "python": platform.python_version(),
        "ansible_core": core,
        "platform": platform.platform(),
        "loadavg_start": os.getloadavg(),
    }


def fmt_seconds(values: t.Sequence[float | None]) -> str:
    return "[" + ", ".join("-" if v is None else f"{v:.1f} s" for v in values) + "]"


def fmt_methods(d: dict[str, float]) -> str:
    return " ".join(f"{k}={v:g}" for k, v in d.items() if k != "total") + f" total={d['total']:g}"


def plot(results: dict[str, t.Any], path: Path) -> bool:
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError:
        log("matplotlib not installed: no plot")
        return False
    sizes = sorted(int(n) for n in results["wall"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for tool, color in (("ours", "tab:blue"), ("peer", "tab:orange")):
        med = [results["wall"][str(n)][tool]["median"] for n in sizes]
        ax1.plot(
            sizes, med, marker="o", color=color, label="vmanyware.proxmox" if tool == "ours" else "community.proxmox"
        )
        for n in sizes:
            runs = results["wall"][str(n)][tool]["runs"]
            ax1.scatter([n] * len(runs), runs, color=color, alpha=0.35, s=12)
    ax1.set_xlabel("VMs in parallel (forks = N)")
    ax1.set_ylabel("wall time [s]")
    ax1.set_xscale("log")
    ax1.set_xticks(sizes)
    ax1.set_xticklabels([str(n) for n in sizes])
    ax1.set_title(f"Wall time vs N (speed x{results['config']['speed']:g})")
    ax1.legend()
    ax1.grid(alpha=0.3)
    req = results["requests_per_vm"]
    methods = sorted({m for tool in ("ours", "peer") for m in req[tool] if m != "total"})
    x = range(len(methods))
    ax2.bar(
        [i - 0.2 for i in x],
        [req["ours"].get(m, 0) for m in methods],
        width=0.4,
        color="tab:blue",
        label="vmanyware.proxmox",
    )
    ax2.bar(
        [i + 0.2 for i in x],
        [req["peer"].get(m, 0) for m in methods],
        width=0.4,
        color="tab:orange",
        label="community.proxmox",
    )
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(methods)
    ax2.set_ylabel("API requests per VM (N=1)")
    ax2.set_title(f"Requests per VM: ours {req['ours']['total']:g}, peer {req['peer']['total']:g}")
    ax2.legend()
    ax2.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def measure_sizes(
    args: argparse.Namespace,
    runner: Runner,
    work: Path,
    sizes: list[int],
    reps_for: dict[int, int],  # noqa: C901
    sizes_done: list[int],
    runs: list[dict[str, t.Any]],
    results: dict[str, t.Any],
    begun: float,
) -> None:
    """The A/B runs of every size (appends to ``runs``; failures and skips go into ``results``)."""
    prev_n = 0
    last_per_vm = None  # seconds per VM of the previous size (review + all runs)
    for n in sizes:
        size_started = time.monotonic()
        if args.budget and last_per_vm is not None:
            projected = last_per_vm * n * reps_for[n] / max(1, reps_for[prev_n])
            left = args.budget - (time.monotonic() - begun)
            if projected > left:
                log(f"N={n}: skipped, projected {projected:.0f} s > {left:.0f} s left of --budget")
                results.setdefault("skipped", []).append({"n": n, "projected_s": projected, "left_s": left})
                sizes_done.remove(n)
                continue
        state = work / f"ours-{n}"
        state.mkdir()
        log(f"N={n}: review run (ours, not timed)")
        try:
            runner.review(n, state)
        except SystemExit as exc:
            if n == min(sizes):
                raise
            log(f"N={n}: review failed, size skipped: {str(exc)[-3000:]}")
            results.setdefault("failures", []).append({"n": n, "tool": "ours-review", "error": str(exc)[-3000:]})
            sizes_done.remove(n)
            continue
        reps = reps_for[n]
        for rep in range(reps):
            order = ("ours", "peer") if rep % 2 == 0 else ("peer", "ours")
            pair = []
            for tool in order:
                try:
                    run = runner.run(tool, n, state)
                except SystemExit as exc:  # keep what was measured; a larger N may not fit this machine
                    if n == min(sizes):
                        raise
                    log(f"N={n} rep {rep + 1} {tool} failed: {str(exc)[-3000:]}")
                    results.setdefault("failures", []).append({"n": n, "tool": tool, "error": str(exc)[-3000:]})
                    continue
                run["rep"] = rep
                pair.append(run)
                log(
                    f"N={n} rep {rep + 1}/{reps} {tool}: wall {run['wall']:.2f} s, cpu {run['cpu']:.2f} s, "
                    f"{len(run['requests'])} requests, failed VMs {len(run['failed_vms'])}, lock timeouts {run['lock_timeout_tasks']}, "
                    f"load {run['load'][0]:.2f} -> {run['load'][1]:.2f}"
                )
            runs.extend(pair)  # ratios use only repetitions where both tools completed
        last_per_vm, prev_n = (time.monotonic() - size_started) / n, n


def main(argv: t.Sequence[str] | None = None) -> int:  # noqa: C901
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10,50", help="VM counts run in parallel (forks = N), comma separated")
    ap.add_argument(
        "--reps",
        default="3",
        help="A/B repetitions per size (alternating order; median): one number, or one per "
        "size (e.g. 3,3,1; the last repeats)",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=0,
        help="seconds; skip a size whose projected time (from the previous "
        "size's time per VM) would exceed what is left (0: no limit)",
    )
    ap.add_argument("--speed", type=float, default=10.0, help="simulator clock speed (all simulated durations / F)")
    ap.add_argument("--timings", default=str(HERE / "timings.yml"), help="pvesim time model")
    ap.add_argument(
        "--storage-lock",
        choices=("on", "off"),
        default="on",
        help="pvesim's model of Proxmox's per-storage allocation lock (10 s waiter timeout; docs/simulator.md)",
    )
    ap.add_argument(
        "--storage-concurrency",
        type=int,
        default=None,
        help="ours: VMANYWARE_STORAGE_CONCURRENCY (allocating submissions in flight per storage; default: the collection's)",
    )
    ap.add_argument("--journal-sizes", default="0,1000,10000", help="earlier operations in the journal directory")
    ap.add_argument("--journal-reps", type=int, default=30)
    ap.add_argument("--plan-images", type=int, default=128)
    ap.add_argument("--plan-reps", type=int, default=30)
    ap.add_argument("--plan-proc-reps", type=int, default=5)
    ap.add_argument(
        "--ours-path",
        choices=("one-task", "step-by-step"),
        default="one-task",
        help="ours: every stage in one vmanyware_provision task (the role's default) or one task per stage",
    )
    ap.add_argument(
        "--peer-collections", default=None, help="collections root holding community.proxmox (default: fetch it)"
    )
    ap.add_argument("--python", default=sys.executable, help="interpreter whose bin/ has ansible-playbook")
    ap.add_argument("--json", default=None, help="write all raw results here")
    ap.add_argument("--plot", default=None, help="write the PNG plot here (needs matplotlib)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--smoke", action="store_true", help="smallest run: N=1, 1 repetition, speed 50, 0/50/200 journal, 8 plan reps"
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.sizes, args.reps, args.speed = "1", "1", 50.0
        args.journal_sizes, args.journal_reps, args.plan_reps, args.plan_proc_reps = "0,50,200", 5, 5, 1
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    rep_list = [int(x) for x in args.reps.split(",") if x.strip()]
    reps_for = {n: rep_list[min(i, len(rep_list) - 1)] for i, n in enumerate(sizes)}
    jsizes = [int(x) for x in args.journal_sizes.split(",") if x.strip()]
    python = str(Path(args.python).absolute())  # keep the venv path (no symlink resolution)
    begun = time.monotonic()
    # SIGTERM: unwind through the finally below (stops the simulator, removes the work directory)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    work = Path(tempfile.mkdtemp(prefix="vmanyware-bench-"))
    info = machine_info(python)
    info["command"] = " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    results: dict[str, t.Any] = {
        "machine": info,
        "config": {
            "sizes": sizes,
            "reps": reps_for,
            "speed": args.speed,
            "timings": args.timings,
            "storage_lock": args.storage_lock,
            "storage_concurrency": args.storage_concurrency,
            "ours_path": args.ours_path,
        },
    }
    print(
        f"machine: {info['date']}, nproc={info['nproc']}, mem={info['mem_gib']} GiB, Python {info['python']}, "
        f"ansible-core {info['ansible_core']}, loadavg at start {' '.join(f'{x:.2f}' for x in info['loadavg_start'])}"
    )
    sim = None
    try:
        if args.peer_collections:
            peer_root = Path(args.peer_collections)
        else:
            peer_root = work / "peer"
            proc = subprocess.run(
                ["bash", str(REPO / "tools" / "dev" / "fetch_peer_collection.sh"), str(peer_root)],
                env={**os.environ, "PYTHON": python},
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
        sim = Simulator(work / "sim", args.speed, Path(args.timings), args.storage_lock)
        results["config"]["time_model"] = sim.timings
        runner = Runner(sim, work, peer_root, python)
        runner.ours_path = args.ours_path
        if args.storage_concurrency is not None:
            runner.env_ours["VMANYWARE_STORAGE_CONCURRENCY"] = str(args.storage_concurrency)
        runs: list[dict[str, t.Any]] = []
        sizes_done = list(sizes)
        try:
            measure_sizes(args, runner, work, sizes, reps_for, sizes_done, runs, results, begun)
        except Interrupted:
            log("interrupted: reporting what was measured")
            results["interrupted"] = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        info["loadavg_end"] = os.getloadavg()
        sizes = [n for n in sizes_done if any(r["n"] == n for r in runs)]
        if not sizes:
            print("no complete A/B pair was measured", file=sys.stderr)
            return 1
        results["config"]["sizes_completed"] = sizes
        if results.get("failures") or results.get("skipped"):
            for f in results.get("failures", []):
                print(f"failed: N={f['n']} {f['tool']}: {f['error'].splitlines()[0]}")
            for sk in results.get("skipped", []):
                print(
                    f"skipped: N={sk['n']}: projected {sk['projected_s']:.0f} s > {sk['left_s']:.0f} s left of --budget"
                )

        # [1] requests per VM by method (N=1 runs if any, else the smallest N)
        n0 = min(sizes)
        first = {tool: next(r for r in runs if r["tool"] == tool and r["n"] == n0) for tool in ("ours", "peer")}
        results["requests_per_vm"] = {tool: by_method(first[tool]["requests"], n0) for tool in first}
        results["requests_by_endpoint"] = {tool: by_endpoint(first[tool]["requests"]) for tool in first}
        results["requests_per_vm_by_n"] = {
            str(n): {
                tool: median([len(r["requests"]) / n for r in runs if r["tool"] == tool and r["n"] == n])
                for tool in ("ours", "peer")
            }
            for n in sizes
        }
        results["schema_or_501"] = sum(r["schema_or_501"] for r in runs)
        rq = results["requests_per_vm"]
        print(
            f"[1] requests per VM (N={n0}): ours {fmt_methods(rq['ours'])} | peer {fmt_methods(rq['peer'])} | "
            f"ours/peer {rq['ours']['total'] / rq['peer']['total']:.2f} | per VM by N: "
            + ", ".join(f"N={n} {v['ours']:g}/{v['peer']:g}" for n, v in results["requests_per_vm_by_n"].items())
        )

        # [2] wall time, paired ratios
        results["wall"] = {}
        parts = []
        for n in sizes:
            per = {tool: [r["wall"] for r in runs if r["tool"] == tool and r["n"] == n] for tool in ("ours", "peer")}
            by_rep = {(r["tool"], r["rep"]): r["wall"] for r in runs if r["n"] == n}
            ratios = [
                by_rep[("ours", rep)] / by_rep[("peer", rep)]
                for rep in sorted({r["rep"] for r in runs if r["n"] == n})
                if ("ours", rep) in by_rep and ("peer", rep) in by_rep
            ]
            results["wall"][str(n)] = {tool: {"median": median(v), "runs": v} for tool, v in per.items()}
            results["wall"][str(n)]["ratio_median"] = median(ratios)
            results["wall"][str(n)]["ratios"] = ratios
            loads = [value for r in runs if r["n"] == n for value in r["load"]]
            results["wall"][str(n)]["load"] = [min(loads), max(loads)] if loads else None
            parts.append(
                f"N={n}: ours {median(per['ours']):.1f} s, peer {median(per['peer']):.1f} s, ratio {median(ratios):.2f} "
                f"({len(ratios)} paired runs; ratios {' '.join(f'{x:.2f}' for x in ratios)}; load average "
                f"{min(loads):.1f}-{max(loads):.1f})"
            )
        print("[2] wall time (median; ratio = median of same-repetition ours/peer): " + "; ".join(parts))

        # [3] overhead over the critical path, N=1 only. The path is the VM's tasks as the simulator ran them (so the
        # storage lock's allocation and resize seconds count when it is on) plus the guest's wait from the model; with
        # more VMs a clone task cannot be told apart from the others (its id is the template's) and tasks queue.
        model = sim.timings
        if n0 != 1:
            print("[3] overhead over the critical path: needs N=1 among --sizes")
        else:
            ours_model_path = sum(model[a][b] for a, b in OUR_PATH) / args.speed
            peer_model_path = sum(model[a][b] for a, b in PEER_PATH) / args.speed
            ours_wall = results["wall"][str(n0)]["ours"]["median"]
            peer_wall = results["wall"][str(n0)]["peer"]["median"]
            measured = {
                tool: median(
                    [
                        task_path_seconds(r, FIRST_VMID, sim.conn["template_vmid"])
                        for r in runs
                        if r["tool"] == tool and r["n"] == n0
                    ]
                )
                for tool in ("ours", "peer")
            }
            ours_path = measured["ours"] + model["guest"]["cloudinit_done_after_boot"] / args.speed
            peer_path = (
                measured["peer"] + (model["guest"]["agent_up_after"] + model["guest"]["dhcp_after_agent"]) / args.speed
            )
            results["overhead"] = {
                "n": n0,
                "ours_critical_path_s": ours_path,
                "peer_critical_path_s": peer_path,
                "ours_model_path_s": ours_model_path,
                "peer_model_path_s": peer_model_path,
                "ours_wall_s": ours_wall,
                "peer_wall_s": peer_wall,
                "ours_overhead": ours_wall / ours_path,
                "peer_overhead": peer_wall / peer_path,
                "ours_task_seconds_measured": measured["ours"],
                "peer_task_seconds_measured": measured["peer"],
            }
            print(
                f"[3] overhead over the critical path (N={n0}): ours {ours_wall:.1f} s / {ours_path:.1f} s = {ours_wall / ours_path:.2f}x "
                f"(path: the VM's tasks as run, {measured['ours']:.1f} s, + cloud-init done after boot; time model without the storage "
                f"lock {ours_model_path:.1f} s) | peer {peer_wall:.1f} s / {peer_path:.1f} s = {peer_wall / peer_path:.2f}x "
                f"(tasks {measured['peer']:.1f} s + IPv4 lease after boot; model {peer_model_path:.1f} s)"
            )

        # [4] poll latency
        results["poll_latency"] = {}
        parts = []
        for tool in ("ours", "peer"):
            lat: list[float] = []
            missed = 0
            for r in runs:
                if r["tool"] == tool:
                    got, miss = poll_latencies(r)
                    lat += got
                    missed += miss
            results["poll_latency"][tool] = {
                "median_s": median(lat),
                "p95_s": percentile(lat, 95),
                "tasks": len(lat),
                "not_polled": missed,
            }
            parts.append(
                f"{tool} median {median(lat):.3f} s p95 {percentile(lat, 95):.3f} s ({len(lat)} tasks, {missed} not polled after end)"
            )
        print("[4] poll latency (task end -> first status GET after it): " + "; ".join(parts))

        # [5] controller CPU per VM
        results["cpu_per_vm"] = {}
        parts = []
        for n in sizes:
            per = {
                tool: median([r["cpu"] / n for r in runs if r["tool"] == tool and r["n"] == n])
                for tool in ("ours", "peer")
            }
            results["cpu_per_vm"][str(n)] = per
            parts.append(
                f"N={n}: ours {per['ours']:.2f} s, peer {per['peer']:.2f} s, ratio {per['ours'] / per['peer']:.2f}"
            )
        print("[5] controller CPU seconds per VM (user+sys of the ansible-playbook tree): " + "; ".join(parts))

        # [8] failed VMs under the storage lock, and wall time counting only what each tool finished
        results["contention"] = {}
        parts = []
        for n in sizes:
            per: dict[str, t.Any] = {}
            for tool in ("ours", "peer"):
                tool_runs = [r for r in runs if r["tool"] == tool and r["n"] == n]
                failed = [len(r["failed_vms"]) for r in tool_runs]
                per[tool] = {
                    "failed_vms": failed,
                    "lock_timeout_tasks": [r["lock_timeout_tasks"] for r in tool_runs],
                    "wall": [r["wall"] for r in tool_runs],
                    "finished": [n - f for f in failed],
                    "finished_wall": [r["finished_wall"] for r in tool_runs],
                    "storage_lock": [r["storage_lock"] for r in tool_runs],
                }
            per["ratio"] = results["wall"][str(n)]["ratio_median"]
            results["contention"][str(n)] = per
            parts.append(
                f"N={n}: failed VMs ours {per['ours']['failed_vms']} peer {per['peer']['failed_vms']}, "
                f"lock-timeout tasks ours {per['ours']['lock_timeout_tasks']} peer {per['peer']['lock_timeout_tasks']}, "
                f"finished ours {per['ours']['finished']} peer {per['peer']['finished']}, wall ratio {per['ratio']:.2f}, "
                f"last finished VM's snapshot after ours {fmt_seconds(per['ours']['finished_wall'])} "
                f"peer {fmt_seconds(per['peer']['finished_wall'])}"
            )
        print(f"[8] storage lock ({args.storage_lock}): " + "; ".join(parts))

        # [6] journal cost
        log("journal cost")
        jc = journal_cost(runner.ours_root, jsizes, args.journal_reps, work)
        results["journal"] = {str(k): v for k, v in jc.items()}
        base = jc[jsizes[0]]["total"]
        print(
            "[6] journal cost of one stage (create + dispatch/submitted/completed + reload, median ms): "
            + ", ".join(f"{k} earlier ops {v['total']:.2f} ms" for k, v in jc.items())
            + f" | largest/empty {jc[jsizes[-1]]['total'] / base:.2f}"
        )

        # [7] plan and preflight
        log("plan cost")
        pc = plan_cost(runner.ours_root, args.plan_images, args.plan_reps, args.plan_proc_reps, work, python)
        results["plan"] = pc
        print(
            f"[7] plan: build_plan with a {pc['images']}-image catalog {pc['build_plan_ms']:.2f} ms median "
            f"(p95 {pc['build_plan_p95_ms']:.2f} ms, in-process); vmanyware_plan module process {pc['module_process_s']:.2f} s median "
            f"(min {pc['module_process_min_s']:.2f} s)"
        )
        results["elapsed_s"] = time.monotonic() - begun
        print(
            f"done in {results['elapsed_s']:.0f} s; schema errors or 501s in all runs: {results['schema_or_501']}; "
            f"loadavg at end {' '.join(f'{x:.2f}' for x in info['loadavg_end'])}"
        )
        if args.plot:
            plot(results, Path(args.plot))
        if args.json:
            slim = dict(results)
            slim["runs"] = [
                {k: v for k, v in r.items() if k not in ("requests", "tasks")} | {"requests": len(r["requests"])}
                for r in runs
            ]
            Path(args.json).write_text(json.dumps(slim, indent=1, default=str), encoding="utf-8")
        return 0
    finally:
        if sim is not None:
            sim.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"work directory kept: {work}")


if __name__ == "__main__":
    sys.exit(main())
