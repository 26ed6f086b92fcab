# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark: vmanyware.proxmox (the provision role) against community.proxmox doing the same job.

One run on one machine: a pvesim simulator (by default the three-node cluster seed, template 9001 on
shared storage) with the realistic time model (benchmarks/timings.yml, scaled by --speed) and the
storage lock, every tool provisioning N VMs in parallel (N inventory hosts, forks = N unless
--forks), rotating the order per repetition, then in-process measurements of the journal and the
planner. Tools (docs/benchmarks.md, "Issue 36: method"):

    ours    vmanyware.proxmox's provision role (benchmarks/ours.yml), target_node auto on the cluster
    peer    community.proxmox "as documented" (benchmarks/peer.yml), newest release
    equal   community.proxmox doing equal work (benchmarks/peer-equal.yml), newest release
    pinned  peer.yml with the pinned community.proxmox 1.4.0 and the project's ansible-core

The newest release (ansible 14.5.0: community.proxmox 2.0.0, ansible-core 2.21) lives in the venv of
tools/dev/fetch_newest_peer.sh; without it, peer and equal run with the pinned collection and the
pinned column is left out. Figure lines ``[1]`` .. ``[11]`` (``[12]`` with --slices), every raw
number in ``--json``.

    .venv/bin/python benchmarks/run.py --sizes 1,10 --reps 1 --speed 10 --json out.json --plot docs/benchmarks.png
    .venv/bin/python benchmarks/run.py --sizes 10 --slices 4 --slice-n 20 ...     # AWX-style slices too
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
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import typing as t
from pathlib import Path
from unittest import mock

import requests as http
import yaml

REPO = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
FIRST_VMID = 301
TASK_STATUS = re.compile(r"^/nodes/[^/]+/tasks/(UPID:[^/]+)/status$")
ALL_TOOLS = ("ours", "peer", "equal", "pinned")
LABELS = {
    "ours": "vmanyware.proxmox",
    "peer": "peer (as documented)",
    "equal": "peer (equal work)",
    "pinned": "peer (as documented, pinned)",
}
PEER_PLAYBOOKS = {"peer": "peer.yml", "equal": "peer-equal.yml", "pinned": "peer.yml"}
NEWEST_PEER_DEFAULT = Path(os.environ.get("VMANYWARE_CACHE", str(Path.home() / ".cache" / "vmanyware"))) / "peer-newest"
# the three nodes of pvesim's cluster seed (pvesim.state.CLUSTER_NODES) and its template on shared storage
CLUSTER_NODES = ("pve-test", "pve-test2", "pve-test3")
CLUSTER_TEMPLATE = {"vmid": 9001, "name": "debian-13-shared", "node": "pve-test", "storage": "shared"}
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
# what each tool waits for in the guest after the start task (ours and the equal-work peer: cloud-init done)
GUEST_WAIT = {
    "ours": ("cloudinit_done_after_boot",),
    "equal": ("cloudinit_done_after_boot",),
    "peer": ("agent_up_after", "dhcp_after_agent"),
    "pinned": ("agent_up_after", "dhcp_after_agent"),
}


class Interrupted(BaseException):
    """SIGTERM/SIGINT during the runs: stop running, report what was measured."""


def _interrupt(signum: int, frame: t.Any) -> None:
    del frame
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second signal ends the process
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    raise Interrupted(signum)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat_file.read_text(encoding="utf-8").rsplit(")", 1)[1].split()
            children[int(fields[1])].append(int(stat_file.parent.name))
    return children


def _descendants(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of ``root`` (ansible's forks call setsid, so a process group is not enough)."""
    children = _children_map() if children is None else children
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _pss_kib(pid: int) -> int:
    """The process's proportional set size (``Pss:`` of /proc/PID/smaps_rollup), 0 when it is gone."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh,
    ):
        for line in fh:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


class PssSampler(threading.Thread):
    """Peak of the summed PSS of the controller: the roots added (ansible-playbook / ansible-runner processes) and
    every live descendant (forks, module processes), sampled every ``interval`` s, or twice as long as one sample took
    (so the sampler itself stays a small share of the machine). PSS counts shared pages once over all sharers, so the
    sum over a process tree is its real memory, unlike a sum of RSS."""

    def __init__(self, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.roots: list[int] = []
        self.interval = interval
        self.peak_kib = 0
        self.procs_at_peak = 0
        self.max_procs = 0
        self.samples = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def add(self, pid: int) -> None:
        with self._lock:
            self.roots.append(pid)

    def sample(self) -> float:
        began = time.monotonic()
        with self._lock:
            roots = list(self.roots)
        if roots:
            children = _children_map()
            pids = set(roots)
            for root in roots:
                pids.update(_descendants(root, children))
            total = sum(_pss_kib(pid) for pid in pids)
            self.samples += 1
            self.max_procs = max(self.max_procs, len(pids))
            if total > self.peak_kib:
                self.peak_kib, self.procs_at_peak = total, len(pids)
        return time.monotonic() - began

    def run(self) -> None:
        while not self._halt.is_set():
            took = self.sample()
            self._halt.wait(max(self.interval, 2 * took))

    def stop(self) -> dict[str, t.Any]:
        self._halt.set()
        self.join()
        return {
            "pss_peak_mib": round(self.peak_kib / 1024, 1),
            "procs_at_peak": self.procs_at_peak,
            "max_procs": self.max_procs,
            "samples": self.samples,
        }


def _kill_tree(pid: int) -> None:
    for each in [pid, *_descendants(pid)]:  # only processes this run started
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)


def run_playbook(
    cmd: list[str], env: dict[str, str], timeout: float = 3600, sampler: PssSampler | None = None
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` in a new session, so that the playbook's forks and modules die with it."""
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,  # pylint: disable=consider-using-with
        start_new_session=True,
    )
    if sampler is not None:
        sampler.add(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_tree(proc.pid)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def failure_excerpt(stdout: str) -> str:
    """The first failure of a playbook's output (what ``fatal:``/``failed:`` said), else its tail."""
    m = re.search(r"^(fatal|failed): .*", stdout, re.MULTILINE)
    return stdout[m.start() : m.start() + 3000] if m else stdout[-3000:]


FATAL = re.compile(
    r"^(?:fatal|failed): \[([^\]]+)\](?: \(item=[^)]*\))?(?:: (?:FAILED!|UNREACHABLE!))? => (.*)$", re.MULTILINE
)


def host_errors(stdout: str) -> dict[str, str]:
    """The first error of each failed host in a playbook's output: its result's ``msg`` (and ``code`` where the
    module gives one), else the result line itself, cut to 300 characters."""
    errors: dict[str, str] = {}
    for m in FATAL.finditer(stdout):
        host, body = m.group(1), m.group(2)
        if host in errors:
            continue
        text = body
        with contextlib.suppress(ValueError, AttributeError):
            result = json.loads(body)
            text = str(result.get("msg") or result.get("message") or body)
            code = result.get("code") or (result.get("error") or {}).get("code") if isinstance(result, dict) else None
            if code and str(code) not in text:
                text = f"{code}: {text}"
        errors[host] = " ".join(text.split())[:300]
    return errors


def recap_failed_hosts(stdout: str) -> set[str]:
    return {
        m.group(1)
        for m in re.finditer(
            r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)", stdout, re.MULTILINE
        )
        if int(m.group(2)) or int(m.group(3))
    }


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


def ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else float("nan")


# ------------------------------------------------------------------------------------------------
# simulator


class Simulator:
    """``python -m pvesim serve`` with the time model and the seed, plus its admin API."""

    def __init__(
        self,
        state_dir: Path,
        speed: float,
        timings: Path,
        storage_lock: str = "on",
        seed: str = "cluster",
        extra: t.Sequence[str] = (),
    ):
        sys.path.insert(0, str(REPO / "tools" / "pvesim"))
        from pvesim.testing import PvesimAdmin, start_server  # pylint: disable=import-outside-toplevel

        self.seed = seed
        self.proc, self.conn = start_server(
            str(state_dir),
            speed=speed,
            extra=["--timings", str(timings), "--storage-lock", storage_lock, "--seed", seed, *extra],
            timeout=60,  # a real-guest simulator checks QEMU and the image before it serves
        )
        self.admin = PvesimAdmin(self.conn)
        self.timings = self.admin.timings()
        self.speed = speed
        if seed == "cluster":
            self.nodes = list(CLUSTER_NODES)
            self.template = dict(CLUSTER_TEMPLATE)
        else:
            self.nodes = [self.conn["node"]]
            self.template = {
                "vmid": self.conn["template_vmid"],
                "name": "debian-13",
                "node": self.conn["node"],
                "storage": self.conn["storage"],
            }
        token = self.conn["tokens"]["full"]
        self.api = http.Session()
        self.api.headers["Authorization"] = f"PVEAPIToken={token['id']}={token['secret']}"

    def fresh(self) -> None:
        """The seed again, storages large enough for every size (see STORAGE_TOTAL), an empty request log."""
        self.admin.reset(self.seed)
        for storage in dict.fromkeys((self.conn["storage"], self.template["storage"])):
            self.admin.set_storage(storage, total=STORAGE_TOTAL)

    def vm_nodes(self) -> dict[int, dict[str, t.Any]]:
        """Every VM of the cluster: its node, name and memory in bytes (``GET /cluster/resources?type=vm``, one
        request, read after the run's request log was taken)."""
        resp = self.api.get(
            f"https://{self.conn['host']}:{self.conn['port']}/api2/json/cluster/resources",
            params={"type": "vm"},
            verify=self.conn["ca_file"],  # per call: a session's verify loses to REQUESTS_CA_BUNDLE
            timeout=30,
        )
        resp.raise_for_status()
        return {
            int(e["vmid"]): {"node": e.get("node", ""), "name": e.get("name", ""), "maxmem": e.get("maxmem", 0)}
            for e in resp.json()["data"]
            if not e.get("template")
        }

    def stop(self) -> None:
        from pvesim.testing import stop_server  # pylint: disable=import-outside-toplevel

        stop_server(self.proc)


# ------------------------------------------------------------------------------------------------
# the tools


# The demo seed's local-lvm has 200 GiB and the cluster's shared storage 2 TiB: ten (or ninety-seven) 20 GiB VMs do
# not fit (resize fails with lvextend's "Insufficient free space", as PVE would). Every run gets this much instead.
STORAGE_TOTAL = 16 * 1024**4


class Ansible(t.NamedTuple):
    """One ansible-core + collections pairing a tool runs with."""

    name: str  # "ours", "newest", "pinned"
    python: str  # interpreter of the venv (its bin/ has ansible-playbook); also the hosts' interpreter
    collections: Path  # ANSIBLE_COLLECTIONS_PATH
    versions: dict[str, str]

    @property
    def bin(self) -> Path:
        return Path(self.python).parent


def core_version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import ansible.release as r; print(r.__version__)"], capture_output=True, text=True, check=False
    ).stdout.strip()


def proxmox_version(collections_root: Path) -> str:
    manifest = collections_root / "ansible_collections" / "community" / "proxmox" / "MANIFEST.json"
    try:
        return str(json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]["version"])
    except (OSError, ValueError, KeyError):
        return "?"


def newest_peer(path: str | None) -> Ansible | None:
    """The venv of tools/dev/fetch_newest_peer.sh: ``auto`` uses the default one if it exists, ``fetch`` builds it
    (or reuses it), ``none`` none, else that directory."""
    if path in (None, "none"):
        return None
    venv = NEWEST_PEER_DEFAULT if path in ("auto", "fetch") else Path(path)
    if path == "fetch" or (path not in ("auto",) and not (venv / "bin" / "ansible-playbook").exists()):
        proc = subprocess.run(
            ["bash", str(REPO / "tools" / "dev" / "fetch_newest_peer.sh"), str(venv)],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"fetch_newest_peer.sh failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    if not (venv / "bin" / "ansible-playbook").exists():
        return None
    python = str(venv / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    root = Path(site)
    return Ansible(
        "newest",
        python,
        root,
        {"ansible-core": core_version(python), "community.proxmox": proxmox_version(root), "python": python_of(python)},
    )


def python_of(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=False
    ).stdout.strip()


class Runner:
    def __init__(
        self,
        sim: Simulator,
        work: Path,
        ours_python: str,
        setups: dict[str, Ansible],
        forks: int | None = None,
        ours_placement: str = "auto",
        definition: Path = HERE / "definition.yml",
    ) -> None:
        self.sim = sim
        self.work = work
        self.setups = setups  # tool -> Ansible
        self.forks = forks
        conn = sim.conn
        # our collection: a private collections root with a symlink to this checkout
        self.ours_root = work / "collections"
        (self.ours_root / "ansible_collections" / "vmanyware").mkdir(parents=True, exist_ok=True)
        link = self.ours_root / "ansible_collections" / "vmanyware" / "proxmox"
        if not link.exists():
            link.symlink_to(REPO)
        self.ours_python = ours_python
        # ours: the role's default one-task path (vmanyware_provision) or one task per stage (provision_step_by_step)
        self.ours_path = "one-task"
        # one job for every tool: the peers put the definition's SSH key into sshkeys
        self.definition = definition
        job = yaml.safe_load(definition.read_text(encoding="utf-8"))
        ssh_key = job["access"]["sshPublicKeys"][0]
        self.catalog = REPO / "examples" / "catalog.yml"
        self.target_node = ""
        if sim.seed == "cluster":  # the example catalog's image on the shared template; placement picks the node
            catalog = yaml.safe_load(self.catalog.read_text(encoding="utf-8"))
            catalog["images"][0]["templateVmid"] = sim.template["vmid"]
            catalog["images"][0]["storage"] = sim.template["storage"]
            self.catalog = work / "catalog-cluster.yml"
            self.catalog.write_text(yaml.safe_dump(catalog, sort_keys=False), encoding="utf-8")
            self.target_node = ours_placement  # auto: vmanyware_placement; round-robin: the peers' assignment
        self.base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ANSIBLE_", "PROXMOX_", "VMANYWARE_", "REQUESTS_CA_BUNDLE"))
        }
        self.base.update(
            {
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_RETRY_FILES_ENABLED": "false",
                "ANSIBLE_DEPRECATION_WARNINGS": "false",
                "ANSIBLE_HOST_KEY_CHECKING": "false",
                "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH": "false",
                "ANSIBLE_HOME": str(work / "ansible-home"),
                "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp"),
            }
        )
        self.env_ours = {
            **self.base,
            "ANSIBLE_PYTHON_INTERPRETER": ours_python,
            "ANSIBLE_COLLECTIONS_PATH": str(self.ours_root),
            "PROXMOX_HOST": conn["host"],
            "PROXMOX_PORT": str(conn["port"]),
            "PROXMOX_TOKEN_ID": conn["tokens"]["full"]["id"],
            "PROXMOX_TOKEN_SECRET": conn["tokens"]["full"]["secret"],
            "PROXMOX_CA_PATH": conn["ca_file"],
            "VMANYWARE_PROVISIONING_ENABLED": "true",
            "VMANYWARE_SNAPSHOTS_ENABLED": "true",
        }
        token_user, token_name = conn["tokens"]["full"]["id"].split("!")
        self.peer_vars = work / "peer-vars.json"
        self.peer_vars.touch(mode=0o600)
        self.peer_vars.write_text(
            json.dumps(
                {
                    "pve_port": conn["port"],
                    "pve_ca_file": conn["ca_file"],
                    "pve_nodes": sim.nodes,
                    "pve_storage": sim.template["storage"],
                    "pve_template_vmid": sim.template["vmid"],
                    "pve_template_name": sim.template["name"],
                    "pve_template_node": sim.template["node"],
                    "pve_token_user": token_user,
                    "pve_token_name": token_name,
                    "pve_token_secret": conn["tokens"]["full"]["secret"],
                    "pve_ssh_public_key": ssh_key,
                    "pve_memory_mib": job["resources"]["memoryMiB"],
                }
            ),
            encoding="utf-8",
        )

    def python_for(self, tool: str) -> str:
        return self.ours_python if tool == "ours" else self.setups[tool].python

    def inventory(self, n: int, python: str) -> Path:
        """One host per VM; with ``target_node`` ``round-robin`` each host also names its node (``bench_target_node``),
        the assignment the peer playbooks compute."""
        path = self.work / f"inventory-{n}-{abs(hash(python))}.ini"
        lines = ["[all]"]
        for i in range(n):
            line = f"vm{FIRST_VMID + i} bench_vmid={FIRST_VMID + i} ansible_connection=local ansible_python_interpreter={python}"
            if self.target_node == "round-robin":
                line += f" bench_target_node={self.sim.nodes[i % len(self.sim.nodes)]}"
            lines.append(line)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    def _playbook(self, tool: str, n: int, state: Path, phase: str = "confirmed") -> tuple[list[str], dict[str, str]]:
        python = self.python_for(tool)
        inv = self.inventory(n, python)
        cmd = [str(Path(python).parent / "ansible-playbook"), "-i", str(inv), "-f", str(self.forks or n)]
        if tool == "ours":
            cmd += [
                "-e",
                f"bench_catalog_path={self.catalog}",
                "-e",
                f"bench_definition_path={self.definition}",
                "-e",
                f"bench_state={state}",
                "-e",
                f"bench_phase={phase}",
                *(["-e", f"bench_target_node={self.target_node}"] if self.target_node != "round-robin" else []),
                "-e",
                f"provision_step_by_step={self.ours_path == 'step-by-step'}",
                str(HERE / "ours.yml"),
            ]
            env = {**self.env_ours, "VMANYWARE_JOURNAL_DIR": str(state / "journal")}
        else:
            setup = self.setups[tool]
            cmd += ["-e", f"@{self.peer_vars}", "-e", f"bench_state={state}", str(HERE / PEER_PLAYBOOKS[tool])]
            env = {
                **self.base,
                "ANSIBLE_PYTHON_INTERPRETER": setup.python,
                "ANSIBLE_COLLECTIONS_PATH": str(setup.collections),
            }
        return cmd, env

    def review(self, n: int, state: Path) -> None:
        """Ours, first run (no confirmation): writes each host's confirmation block; not timed."""
        self.sim.fresh()
        cmd, env = self._playbook("ours", n, state, phase="review")
        proc = run_playbook(cmd, env)
        if proc.returncode != 0 or len(list(state.glob("confirm-*.yml"))) != n:
            raise SystemExit(
                f"review run failed ({proc.returncode}):\n{failure_excerpt(proc.stdout)}\n{proc.stderr[-2000:]}"
            )

    def run(self, tool: str, n: int, state: Path) -> dict[str, t.Any]:
        """One timed run on a fresh simulator state: wall, CPU (RUSAGE_CHILDREN), peak PSS, request log, tasks."""
        sim, admin = self.sim, self.sim.admin
        sim.fresh()
        shutil.rmtree(state / "journal", ignore_errors=True)
        for old in state.glob("known_hosts-*"):
            old.unlink()
        cmd, env = self._playbook(tool, n, state)
        load_before = os.getloadavg()[0]
        sampler = PssSampler()
        sampler.start()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started_epoch = time.time()
        started = time.monotonic()
        try:
            proc = run_playbook(cmd, env, sampler=sampler)
        finally:
            memory = sampler.stop()
        wall = time.monotonic() - started
        ended_epoch = started_epoch + wall
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        failed_hosts = recap_failed_hosts(proc.stdout)
        if proc.returncode != 0 and not failed_hosts:
            raise SystemExit(
                f"{tool} N={n} failed ({proc.returncode}, wall {wall:.0f} s) without a failed host:\n"
                f"{failure_excerpt(proc.stdout)}\n{proc.stderr[-2000:]}"
            )
        requests = admin.requests()
        tasks = admin.tasks()
        placed = sim.vm_nodes()
        errors_by_host = host_errors(proc.stdout)
        failed: dict[int, str] = {}
        for i in range(n):  # the job was done: running, snapshot present, disk grown (and the host keys written)
            vmid = FIRST_VMID + i
            host = f"vm{vmid}"
            try:
                vm = admin.vm(vmid)
            except RuntimeError:
                vm = {"status": "missing", "snapshots": [], "config": {}}
            reasons = []
            if host in failed_hosts:
                reasons.append(errors_by_host.get(host, "failed (no error line found)"))
            if vm["status"] != "running":
                reasons.append(f"VM {vm['status']}")
            if len(vm["snapshots"]) != 1:
                reasons.append(f"{len(vm['snapshots'])} snapshots")
            if "size=20G" not in vm["config"].get("scsi0", ""):
                reasons.append("disk not grown")
            if tool in ("ours", "equal"):
                known = state / f"known_hosts-{host}"
                if not known.exists() or not known.read_text(encoding="utf-8").strip():
                    reasons.append("no known_hosts written")
            if reasons:
                failed[vmid] = "; ".join(reasons)
        if len(failed) == n and n == 1:
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
            and int(task["id"]) not in failed
        ]
        finished_wall = max(snapshots) - started_epoch if snapshots else None
        bad = [e for e in requests if e.get("schema_errors") or e.get("implemented") is False]
        locks = admin.storage_locks()["storages"].get(sim.template["storage"], {})
        nodes = collections.Counter(placed[FIRST_VMID + i]["node"] for i in range(n) if FIRST_VMID + i in placed)
        return {
            "tool": tool,
            "n": n,
            "forks": self.forks or n,
            "wall": wall,
            "cpu": cpu,
            "memory": memory,
            "load": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "requests": requests,
            "tasks": tasks,
            "schema_or_501": len(bad),
            "schema_examples": [{k: e.get(k) for k in ("method", "path", "status", "schema_errors")} for e in bad[:5]],
            "failed_vms": sorted(failed),
            "errors": {str(k): v for k, v in sorted(failed.items())},
            "nodes": dict(sorted(nodes.items())),
            "lock_timeout_tasks": len(lock_errors),
            "finished_wall": finished_wall,
            "phases": journal_phases(state / "journal", started_epoch, ended_epoch) if tool == "ours" else None,
            "failure_excerpt": failure_excerpt(proc.stdout)[:1500] if failed else "",
            "storage_lock": {k: v for k, v in locks.items() if k != "history"},
        }


# ------------------------------------------------------------------------------------------------
# AWX-style job slices: K ansible-runner processes at once, each with its slice of one inventory, one shared journal

SLICE_PLAYBOOK = """\
---
- name: Provision one VM per inventory host (one slice of the inventory)
  hosts: all
  gather_facts: false
  roles:
    - role: vmanyware.proxmox.provision
      provision_catalog_path: "{{ slice_catalog_path }}"
      provision_definition_path: "{{ slice_definition_dir }}/{{ inventory_hostname }}.yml"
      provision_target_vmid: auto
      provision_target_node: "{{ slice_target_node }}"
      provision_vmid_range: "{{ slice_vmid_range }}"
      provision_vmid_owner: "{{ inventory_hostname }}"
      provision_confirmation: "{{ (lookup('ansible.builtin.file', slice_confirm_dir ~ '/' ~ inventory_hostname ~ '.yml',
        errors='ignore') | default('{}', true) | from_yaml).provision_confirmation | default({}) }}"
      provision_confirmation_file: "{{ slice_confirm_dir }}/{{ inventory_hostname }}.yml"
      provision_known_hosts_file: "{{ slice_confirm_dir }}/known_hosts-{{ inventory_hostname }}"
      provision_add_host: false
"""


def run_slices(runner: Runner, k: int, n: int, forks: int | None) -> dict[str, t.Any]:
    """The same n VMs (hosts s000.., each with its own definition named after it, ``target_vmid: auto`` from one range
    with the host as lease owner, ``target_node`` auto on the cluster) as k slices: host i in slice i mod k, each
    slice an ``ansible-runner run`` process of its own (its own private data dir and process tree, as AWX runs a
    sliced job), all with one journal directory. Review (plan, preflight, confirmation files) and apply both run
    sliced; the apply is timed. Checks: distinct VMIDs, one VM per host, one operation per host, no torn journal
    document, no ``conflicting_operation``."""
    sim = runner.sim
    root = runner.work / f"slices-{k}-{n}"
    shutil.rmtree(root, ignore_errors=True)
    definitions, confirm, journal = root / "definitions", root / "confirm", root / "journal"
    definitions.mkdir(parents=True)
    confirm.mkdir()
    names = [f"s{i:03d}" for i in range(n)]
    base = yaml.safe_load(runner.definition.read_text(encoding="utf-8"))  # with --memory-mib's memory
    for name in names:
        (definitions / f"{name}.yml").write_text(yaml.safe_dump(dict(base, name=name)), encoding="utf-8")
    vmid_range = [FIRST_VMID, FIRST_VMID + 2 * n + 10]
    extravars = {
        "slice_catalog_path": str(runner.catalog),
        "slice_definition_dir": str(definitions),
        "slice_confirm_dir": str(confirm),
        "slice_vmid_range": vmid_range,
    }
    if runner.target_node != "round-robin":  # else each host's own node, in the inventory below
        extravars["slice_target_node"] = runner.target_node
    envvars = {k_: v for k_, v in runner.env_ours.items() if k_.startswith(("PROXMOX_", "VMANYWARE_", "ANSIBLE_"))}
    envvars["VMANYWARE_JOURNAL_DIR"] = str(journal)  # the shared volume every slice mounts
    slices = [names[i::k] for i in range(k)]
    pdds = []
    for i, hosts in enumerate(slices):
        pdd = root / f"slice-{i}"
        (pdd / "project").mkdir(parents=True)
        (pdd / "project" / "slice.yml").write_text(SLICE_PLAYBOOK, encoding="utf-8")
        (pdd / "inventory").mkdir()
        inventory = {
            "all": {
                "hosts": {
                    h: {"ansible_connection": "local", "ansible_python_interpreter": runner.ours_python}
                    | (
                        {"slice_target_node": sim.nodes[names.index(h) % len(sim.nodes)]}
                        if runner.target_node == "round-robin"
                        else {}
                    )
                    for h in hosts
                }
            }
        }
        (pdd / "inventory" / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
        (pdd / "env").mkdir()
        (pdd / "env" / "extravars").write_text(yaml.safe_dump(extravars), encoding="utf-8")
        (pdd / "env" / "envvars").write_text(yaml.safe_dump(envvars), encoding="utf-8")
        pdds.append((pdd, len(hosts)))
    bin_dir = Path(runner.ours_python).parent
    env = {**runner.base, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def launch(ident: str, sampler: PssSampler | None) -> tuple[list[int], float]:
        procs = []
        started = time.monotonic()
        for pdd, count in pdds:
            cmd = [
                str(bin_dir / "ansible-runner"),
                "run",
                str(pdd),
                "-p",
                "slice.yml",
                "--ident",
                ident,
                "--forks",
                str(forks or count),
                "--rotate-artifacts",
                "0",
            ]
            with open(pdd / f"{ident}.out", "w", encoding="utf-8") as out:
                proc = subprocess.Popen(  # pylint: disable=consider-using-with
                    cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
            procs.append(proc)
            if sampler is not None:
                sampler.add(proc.pid)
        try:
            codes = [proc.wait(timeout=3600) for proc in procs]
        except BaseException:
            for proc in procs:
                _kill_tree(proc.pid)
            raise
        return codes, time.monotonic() - started

    sim.fresh()
    codes, review_wall = launch("review", None)
    if codes != [0] * k:
        tails = [(pdd / "review.out").read_text(encoding="utf-8")[-2000:] for pdd, _slice in pdds]
        raise SystemExit(f"slices K={k}: review failed {codes}:\n" + "\n".join(tails))
    sim.admin.clear_requests()
    sampler = PssSampler()
    sampler.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        codes, wall = launch("apply", sampler)
    finally:
        memory = sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    outputs = [(pdd / "apply.out").read_text(encoding="utf-8") for pdd, _slice in pdds]
    errors: dict[str, str] = {}
    for out in outputs:
        errors.update(host_errors(out))
    docs, torn = [], 0
    for path in sorted(journal.glob("op-*.json")):
        try:
            docs.append(json.loads(path.read_text(encoding="utf-8")))
        except ValueError:
            torn += 1
    per_host = collections.Counter(doc.get("plan", {}).get("definitionName") for doc in docs)
    completed = {doc["plan"]["definitionName"] for doc in docs if doc.get("status") == "completed"}
    claims = collections.Counter(doc.get("target", {}).get("vmid") for doc in docs)
    requests = sim.admin.requests()
    clones = collections.Counter(
        int(e["params"]["newid"])
        for e in requests
        if e["method"] == "POST"
        and e["path"].endswith("/clone")
        and isinstance(e.get("status"), int)
        and e["status"] < 300
    )
    placed = sim.vm_nodes()
    by_name = collections.Counter(v["name"] for v in placed.values() if v["name"] in set(names))
    conflicts = sum(out.count("conflicting_operation") for out in outputs)
    return {
        "k": k,
        "n": n,
        "rc": codes,
        "wall": wall,
        "review_wall": review_wall,
        "cpu": cpu,
        "memory": memory,
        "requests": len(requests),
        "provisioned": len(completed),
        "failed": sorted(set(names) - completed),
        "errors": errors,
        "duplicate_vms": sum(c - 1 for c in by_name.values() if c > 1) + sum(c - 1 for c in clones.values() if c > 1),
        "vms_per_host_max": max(by_name.values(), default=0),
        # the guests' memory as Proxmox has it (--memory-mib reaches the slices' definitions too)
        "guest_memory_mib": sorted({v["maxmem"] >> 20 for v in placed.values() if v["name"] in set(names)}),
        "distinct_vmids": len(clones),
        # a conflict: a torn document, an operation refused as conflicting, a host with two operations, or a VMID
        # two operations target
        "journal_conflicts": conflicts
        + torn
        + sum(c - 1 for c in per_host.values() if c > 1)
        + sum(c - 1 for c in claims.values() if c > 1),
        "torn_documents": torn,
        "conflicting_operation": conflicts,
        "operations": len(docs),
        "nodes": dict(sorted(collections.Counter(v["node"] for v in placed.values() if v["name"] in names).items())),
    }


# ------------------------------------------------------------------------------------------------
# figures from runs


def _epoch(stamp: str) -> float:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def journal_phases(journal: Path, started: float, ended: float) -> dict[str, float] | None:
    """Where ours' wall time went, from the journal's own timestamps (medians over the run's operations): before the
    operation was created (ansible-playbook's start, the plan, the preflight, the confirmation check), from its creation
    to its last stage's completion (the stages: the tasks, the guest wait, and ours' reads and polls around them), and
    from there to the playbook's exit (the handoff's tasks, known_hosts, Ansible's end)."""
    before, stages, after = [], [], []
    for path in journal.glob("op-*.json"):
        document = json.loads(path.read_text(encoding="utf-8"))
        done = [_epoch(item["completedAt"]) for item in document["stages"] if item.get("completedAt")]
        if not done:
            continue
        created = _epoch(document["createdAt"])
        before.append(created - started)
        stages.append(max(done) - created)
        after.append(ended - max(done))
    if not before:
        return None
    return {"before_operation_s": median(before), "stages_s": median(stages), "after_stages_s": median(after)}


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
    from ansible_collections.vmanyware.proxmox.plugins.module_utils import _journal  # pylint: disable=import-outside-toplevel
    from ansible_collections.vmanyware.proxmox.plugins.module_utils._formats import hashing as _hashing  # pylint: disable=import-outside-toplevel

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
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
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
    """Wall time and failed VMs against N for every tool (docs/benchmarks.png)."""
    try:
        import matplotlib  # pylint: disable=import-outside-toplevel

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    except ImportError:
        log("matplotlib not installed: no plot (pip install matplotlib into the venv)")
        return False
    sizes = sorted(int(n) for n in results["wall"])
    tools = results["config"]["tools"]
    colors = {"ours": "tab:blue", "peer": "tab:orange", "equal": "tab:red", "pinned": "tab:gray"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for tool in tools:
        have = [n for n in sizes if tool in results["wall"][str(n)]]
        label = LABELS[tool] + (
            f" ({results['config']['peers'][tool]['community.proxmox']})" if tool in results["config"]["peers"] else ""
        )
        ax1.plot(
            have, [results["wall"][str(n)][tool]["median"] for n in have], marker="o", color=colors[tool], label=label
        )
        ax2.plot(
            have,
            [results["failed"][str(n)][tool]["median"] for n in have],
            marker="o",
            color=colors[tool],
            label=label,
        )
    for ax in (ax1, ax2):
        ax.set_xlabel("VMs in parallel (N)")
        ax.set_xscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([str(n) for n in sizes])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8, loc="upper left")
    most = max(
        (results["failed"][str(n)][tool]["median"] for n in sizes for tool in results["failed"][str(n)]), default=0
    )
    ax2.set_ylim(-0.05 * max(1, most), 1.1 * max(1, most))
    ax2.yaxis.get_major_locator().set_params(integer=True)
    ax1.set_ylabel("wall time [s]")
    ax2.set_ylabel("failed VMs")
    seed = results["config"]["seed"]
    ax1.set_title(f"Wall time vs N ({seed} seed, speed x{results['config']['speed']:g})")
    ax2.set_title("Failed VMs vs N")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def measure_sizes(
    args: argparse.Namespace,
    runner: Runner,
    work: Path,
    sizes: list[int],
    reps_for: dict[int, int],
    sizes_done: list[int],
    runs: list[dict[str, t.Any]],
    results: dict[str, t.Any],
    begun: float,
    tools: list[str],
) -> None:
    """The runs of every size (appends to ``runs``; failures and skips go into ``results``)."""
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
        state = work / f"state-{n}"
        state.mkdir()
        if "ours" in tools:
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
        size_tools = args.tools_from[1] if args.tools_from and n >= args.tools_from[0] else tools
        for rep in range(reps):
            order = size_tools[rep % len(size_tools) :] + size_tools[: rep % len(size_tools)]  # each goes first in turn
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
                runs.append(run)
                if (
                    args.requests_dir
                ):  # every request of the run in order, for a breakdown by stage (docs/benchmarks.md)
                    dump = Path(args.requests_dir) / f"requests-{tool}-n{n}-rep{rep + 1}.json"
                    keys = ("seq", "time", "method", "path", "status")
                    dump.write_text(json.dumps([{k: e.get(k) for k in keys} for e in run["requests"]], indent=0))
                log(
                    f"N={n} rep {rep + 1}/{reps} {tool}: wall {run['wall']:.2f} s, cpu {run['cpu']:.2f} s, "
                    f"{len(run['requests'])} requests, failed VMs {len(run['failed_vms'])}, lock timeouts "
                    f"{run['lock_timeout_tasks']}, peak PSS {run['memory']['pss_peak_mib']:.0f} MiB, nodes "
                    f"{run['nodes']}, load {run['load'][0]:.2f} -> {run['load'][1]:.2f}"
                )
        last_per_vm, prev_n = (time.monotonic() - size_started) / n, n


def _per(runs: list[dict[str, t.Any]], tool: str, n: int, fn: t.Callable[[dict[str, t.Any]], float]) -> list[float]:
    return [fn(r) for r in runs if r["tool"] == tool and r["n"] == n]


def _paired(runs: list[dict[str, t.Any]], n: int, other: str, key: str = "wall") -> list[float]:
    """ours/other of the same repetition, for every repetition where both completed."""
    by_rep = {(r["tool"], r["rep"]): r[key] for r in runs if r["n"] == n}
    return [
        by_rep[("ours", rep)] / by_rep[(other, rep)]
        for rep in sorted({r["rep"] for r in runs if r["n"] == n})
        if ("ours", rep) in by_rep and (other, rep) in by_rep and by_rep[(other, rep)]
    ]


def report(
    args: argparse.Namespace,
    runner: Runner,
    sim: Simulator,
    runs: list[dict[str, t.Any]],
    sizes: list[int],
    tools: list[str],
    results: dict[str, t.Any],
) -> None:
    """Figures [1]-[5] and [8]-[11] from the runs (printed, and into ``results``)."""
    others = [tool for tool in tools if tool != "ours"]
    have_ours = "ours" in tools

    def with_ratios(values: dict[str, float], fmt: str = "{:.2f}") -> str:
        parts = [f"{tool} {fmt.format(values[tool])}" for tool in tools if tool in values]
        if have_ours:
            parts += [f"ours/{o} {ratio(values.get('ours'), values.get(o)):.2f}" for o in others if o in values]
        return ", ".join(parts)

    # [1] requests per VM by method (the smallest N), and per N
    n0 = min(sizes)
    first = {tool: next((r for r in runs if r["tool"] == tool and r["n"] == n0), None) for tool in tools}
    results["requests_per_vm"] = {tool: by_method(r["requests"], n0) for tool, r in first.items() if r}
    results["requests_by_endpoint"] = {tool: by_endpoint(r["requests"]) for tool, r in first.items() if r}
    results["requests_per_vm_by_n"] = {
        str(n): {tool: median(_per(runs, tool, n, lambda r: len(r["requests"]) / r["n"])) for tool in tools}
        for n in sizes
    }
    results["schema_or_501"] = sum(r["schema_or_501"] for r in runs)
    rq = results["requests_per_vm"]
    print(
        f"[1] requests per VM (N={n0}): "
        + " | ".join(f"{tool} {fmt_methods(rq[tool])}" for tool in tools if tool in rq)
        + " | per VM by N: "
        + "; ".join(f"N={n} " + with_ratios(v, "{:.1f}") for n, v in results["requests_per_vm_by_n"].items())
    )

    # [2] wall time, paired ratios
    results["wall"] = {}
    parts = []
    for n in sizes:
        entry: dict[str, t.Any] = {}
        for tool in tools:
            walls = _per(runs, tool, n, lambda r: r["wall"])
            if walls:
                entry[tool] = {"median": median(walls), "runs": walls}
        for other in others:
            ratios = _paired(runs, n, other) if have_ours else []
            entry[f"ratio_{other}"] = {"median": median(ratios), "runs": ratios}
        loads = [value for r in runs if r["n"] == n for value in r["load"]]
        entry["load"] = [min(loads), max(loads)] if loads else None
        results["wall"][str(n)] = entry
        # the header's ratio: the median of the same-repetition ratios (with_ratios' ratio of the medians differs
        # whenever the repetitions do)
        walls_text = ", ".join(f"{tool} {entry[tool]['median']:.1f}" for tool in tools if tool in entry)
        ratios_text = "".join(
            f", ours/{other} {entry[f'ratio_{other}']['median']:.3f}"
            for other in others
            if have_ours and entry[f"ratio_{other}"]["runs"]
        )
        parts.append(
            f"N={n}: {walls_text}{ratios_text}"
            + (f" (load average {min(loads):.1f}-{max(loads):.1f})" if loads else "")
        )
    print("[2] wall time, s (median; ratio = median of same-repetition ours/other): " + "; ".join(parts))

    # [3] overhead over the critical path, N=1 only: the VM's tasks as the simulator ran them (so the storage lock's
    # allocation and resize seconds count) plus the guest's wait from the model; with more VMs a clone task cannot be
    # told apart from the others (its id is the template's) and tasks queue.
    model = sim.timings
    if n0 != 1:
        print("[3] overhead over the critical path: needs N=1 among --sizes")
    else:
        results["overhead"] = {"n": 1}
        parts = []
        for tool in tools:
            walls = _per(runs, tool, 1, lambda r: r["wall"])
            if not walls:
                continue
            tasks_s = median(_per(runs, tool, 1, lambda r: task_path_seconds(r, FIRST_VMID, sim.template["vmid"])))
            guest_s = sum(model["guest"][key] for key in GUEST_WAIT[tool]) / args.speed
            path = tasks_s + guest_s
            wall = median(walls)
            phases = [r["phases"] for r in runs if r["tool"] == tool and r["n"] == 1 and r.get("phases")]
            results["overhead"][tool] = {
                "phases": {key: median([p[key] for p in phases]) for key in phases[0]} if phases else None,
                "wall_s": wall,
                "critical_path_s": path,
                "task_seconds_measured": tasks_s,
                "guest_wait_s": guest_s,
                "overhead": wall / path,
            }
            phased = results["overhead"][tool]["phases"]
            parts.append(
                f"{tool} {wall:.1f} s / {path:.1f} s = {wall / path:.2f}x (tasks {tasks_s:.1f} s + guest {guest_s:.1f} s)"
                + (
                    f" [journal: {phased['before_operation_s']:.1f} s before the operation, {phased['stages_s']:.1f} s"
                    f" stages, {phased['after_stages_s']:.1f} s after]"
                    if phased
                    else ""
                )
            )
        print(
            "[3] overhead over the critical path (N=1; path = the VM's tasks as run + the guest wait from the model: "
            "cloud-init done for ours and equal, agent + IPv4 lease for peer and pinned): " + "; ".join(parts)
        )

    # [4] poll latency
    results["poll_latency"] = {}
    parts = []
    for tool in tools:
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
        per = {tool: median(_per(runs, tool, n, lambda r: r["cpu"] / r["n"])) for tool in tools}
        results["cpu_per_vm"][str(n)] = per
        parts.append(f"N={n}: " + with_ratios(per))
    print("[5] controller CPU seconds per VM (user+sys of the ansible-playbook tree): " + "; ".join(parts))

    # [8] failed VMs (with each failure's error), lock timeouts
    results["failed"] = {}
    results["contention"] = {}
    parts = []
    for n in sizes:
        per: dict[str, t.Any] = {}
        for tool in tools:
            tool_runs = [r for r in runs if r["tool"] == tool and r["n"] == n]
            if not tool_runs:
                continue
            counts = [len(r["failed_vms"]) for r in tool_runs]
            errors = collections.Counter(e for r in tool_runs for e in r["errors"].values())
            per[tool] = {
                "median": median(counts),
                "runs": counts,
                "errors": {str(r["rep"]): r["errors"] for r in tool_runs},
                "distinct_errors": dict(errors.most_common()),
            }
            results["contention"].setdefault(str(n), {})[tool] = {
                "lock_timeout_tasks": [r["lock_timeout_tasks"] for r in tool_runs],
                "finished_wall": [r["finished_wall"] for r in tool_runs],
                "storage_lock": [r["storage_lock"] for r in tool_runs],
            }
        results["failed"][str(n)] = per
        parts.append(
            f"N={n}: "
            + ", ".join(
                f"{tool} {per[tool]['runs']}"
                + (
                    " (" + "; ".join(f"{c}x {e[:160]}" for e, c in list(per[tool]["distinct_errors"].items())[:3]) + ")"
                    if per[tool]["distinct_errors"]
                    else ""
                )
                + f" lock timeouts {results['contention'][str(n)][tool]['lock_timeout_tasks']}"
                for tool in tools
                if tool in per
            )
        )
    print(f"[8] failed VMs (storage lock {args.storage_lock}): " + "; ".join(parts))

    # [9] peak memory of the controller: summed PSS of the process tree
    results["memory"] = {}
    parts = []
    for n in sizes:
        per = {
            tool: max(_per(runs, tool, n, lambda r: r["memory"]["pss_peak_mib"]), default=float("nan"))
            for tool in tools
        }
        procs = {tool: max(_per(runs, tool, n, lambda r: r["memory"]["max_procs"]), default=0) for tool in tools}
        results["memory"][str(n)] = {"pss_peak_mib": per, "max_procs": procs, "forks": runner.forks or n}
        parts.append(f"N={n} (forks {runner.forks or n}): " + with_ratios(per, "{:.0f} MiB"))
    print("[9] controller peak memory (sum of PSS over the process tree, max over repetitions): " + "; ".join(parts))

    # [10] time per VM as N grows
    results["time_per_vm"] = {}
    parts = []
    for n in sizes:
        per = {tool: results["wall"][str(n)][tool]["median"] / n for tool in tools if tool in results["wall"][str(n)]}
        results["time_per_vm"][str(n)] = per
        parts.append(f"N={n}: " + with_ratios(per, "{:.2f} s"))
    print("[10] wall time per VM: " + "; ".join(parts))

    # [11] where the VMs went
    results["nodes"] = {}
    parts = []
    for n in sizes:
        per = {tool: next((r["nodes"] for r in runs if r["tool"] == tool and r["n"] == n), {}) for tool in tools}
        results["nodes"][str(n)] = per
        parts.append(f"N={n}: " + ", ".join(f"{tool} {per[tool]}" for tool in tools))
    print(
        f"[11] VMs per node ({sim.seed} seed; ours target_node {runner.target_node or 'as catalog'}, peers round-robin): "
        + "; ".join(parts)
    )


def main(argv: t.Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,10", help="VM counts run in parallel (forks = N), comma separated")
    ap.add_argument(
        "--reps",
        default="1",
        help="repetitions per size (rotating order; median): one number, or one per size (e.g. 3,3,1; the last repeats)",
    )
    ap.add_argument(
        "--tools",
        default=",".join(ALL_TOOLS),
        help="comma separated, of: ours, peer (as documented), equal (equal work), pinned (as documented, pinned "
        "community.proxmox); pinned is left out when the newest peer is absent (peer and equal then are the pinned one)",
    )
    ap.add_argument(
        "--newest-peer",
        default="auto",
        help="the newest peer's venv (tools/dev/fetch_newest_peer.sh): auto (the default location if it exists), fetch "
        "(build it there first), none, or a directory",
    )
    ap.add_argument(
        "--tools-from",
        default=None,
        metavar="N:TOOLS",
        help="from size N on, only these of --tools (e.g. 50:ours,equal: the slow peers' large sizes left out)",
    )
    ap.add_argument(
        "--memory-mib",
        type=int,
        default=None,
        help="every tool's guest memory instead of benchmarks/definition.yml's 2048 (the cluster's three nodes have "
        "56 GiB free each, and placement refuses what does not fit: 2048 MiB fits 84 VMs, 512 MiB 336)",
    )
    ap.add_argument("--seed", choices=("cluster", "demo"), default="cluster", help="pvesim seed (default: three nodes)")
    ap.add_argument("--forks", type=int, default=None, help="ansible forks (default: N, one per VM)")
    ap.add_argument(
        "--ours-placement",
        choices=("auto", "round-robin"),
        default="auto",
        help="cluster seed: ours with target_node auto (vmanyware_placement), or the peers' round-robin node per host",
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
    ap.add_argument("--slices", type=int, default=0, help="also run the ours job as K AWX-style slices (and as 1)")
    ap.add_argument("--slice-n", type=int, default=8, help="VMs of the sliced job")
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
        "--peer-collections",
        default=None,
        help="collections root holding the pinned community.proxmox (default: fetch it)",
    )
    ap.add_argument(
        "--python", default=sys.executable, help="interpreter whose bin/ has ansible-playbook (the pinned peer's too)"
    )
    ap.add_argument(
        "--ours-python",
        default=None,
        help="run ours with this interpreter's venv (its ansible-core; needs requirements.txt there; default --python)",
    )
    ap.add_argument("--json", default=None, help="write all raw results here")
    ap.add_argument("--plot", default=None, help="write the PNG plot here (needs matplotlib)")
    ap.add_argument(
        "--requests-dir",
        default=None,
        help="write each timed run's requests in order (method, path, status, time) to DIR/requests-TOOL-nN-repR.json",
    )
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="smallest run: N=1, 1 repetition, speed 50, tools ours,peer,equal, 0/50/200 journal, 5 plan reps",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.sizes, args.reps, args.speed = "1", "1", 50.0
        args.journal_sizes, args.journal_reps, args.plan_reps, args.plan_proc_reps = "0,50,200", 5, 5, 1
        if args.tools == ",".join(ALL_TOOLS):
            args.tools = "ours,peer,equal"
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    rep_list = [int(x) for x in args.reps.split(",") if x.strip()]
    reps_for = {n: rep_list[min(i, len(rep_list) - 1)] for i, n in enumerate(sizes)}
    jsizes = [int(x) for x in args.journal_sizes.split(",") if x.strip()]
    tools = [x.strip() for x in args.tools.split(",") if x.strip()]
    unknown = set(tools) - set(ALL_TOOLS)
    if args.tools_from:
        from_n, _colon, from_tools = args.tools_from.partition(":")
        args.tools_from = (int(from_n), [x for x in tools if x in from_tools.split(",")])
        unknown |= set(from_tools.split(",")) - set(tools)
    if unknown:
        ap.error(f"unknown tools: {', '.join(sorted(unknown))}")
    python = str(Path(args.python).absolute())  # keep the venv path (no symlink resolution)
    ours_python = str(Path(args.ours_python).absolute()) if args.ours_python else python
    begun = time.monotonic()
    # SIGTERM: unwind through the finally below (stops the simulator, removes the work directory)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    work = Path(tempfile.mkdtemp(prefix="vmanyware-bench-"))
    info = machine_info(python)
    info["command"] = " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])])
    results: dict[str, t.Any] = {"machine": info}
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
        pinned = Ansible(
            "pinned",
            python,
            peer_root,
            {
                "ansible-core": info["ansible_core"],
                "community.proxmox": proxmox_version(peer_root),
                "python": info["python"],
            },
        )
        newest = newest_peer(args.newest_peer)
        if (newest is None or newest.versions == pinned.versions) and "pinned" in tools:
            tools.remove("pinned")
            log("no newest peer (or it is the pinned one): peer and equal run with the pinned community.proxmox")
        setups = {tool: (newest or pinned) for tool in ("peer", "equal")} | {"pinned": pinned}
        ours_setup = {"ansible-core": core_version(ours_python), "python": python_of(ours_python)}
        labels = dict(LABELS)
        for tool in ("peer", "equal", "pinned"):
            v = setups[tool].versions
            labels[tool] += f", community.proxmox {v['community.proxmox']}, ansible-core {v['ansible-core']}"
        labels["ours"] += f", ansible-core {ours_setup['ansible-core']}"
        results["config"] = {
            "sizes": sizes,
            "reps": reps_for,
            "speed": args.speed,
            "seed": args.seed,
            "tools": tools,
            "labels": labels,
            "forks": args.forks,
            "ours_placement": args.ours_placement if args.seed == "cluster" else None,
            "timings": args.timings,
            "storage_lock": args.storage_lock,
            "storage_concurrency": args.storage_concurrency,
            "ours_path": args.ours_path,
            "ours": ours_setup,
            "peers": {tool: setups[tool].versions for tool in ("peer", "equal", "pinned") if tool in tools},
        }
        print(
            f"machine: {info['date']}, nproc={info['nproc']}, mem={info['mem_gib']} GiB, "
            f"loadavg at start {' '.join(f'{x:.2f}' for x in info['loadavg_start'])}; seed {args.seed}, speed x{args.speed:g}"
        )
        for tool in tools:
            print(f"tool {tool}: {labels[tool]}")
        sim = Simulator(work / "sim", args.speed, Path(args.timings), args.storage_lock, args.seed)
        results["config"]["time_model"] = sim.timings
        definition = HERE / "definition.yml"
        if args.memory_mib:
            job = yaml.safe_load(definition.read_text(encoding="utf-8"))
            job["resources"]["memoryMiB"] = args.memory_mib
            definition = work / "definition.yml"
            definition.write_text(yaml.safe_dump(job, sort_keys=False), encoding="utf-8")
        runner = Runner(
            sim,
            work,
            ours_python,
            setups,
            forks=args.forks,
            ours_placement=args.ours_placement,
            definition=definition,
        )
        runner.ours_path = args.ours_path
        if args.storage_concurrency is not None:
            runner.env_ours["VMANYWARE_STORAGE_CONCURRENCY"] = str(args.storage_concurrency)
        runs: list[dict[str, t.Any]] = []
        sizes_done = list(sizes)
        try:
            measure_sizes(args, runner, work, sizes, reps_for, sizes_done, runs, results, begun, tools)
            if args.slices:
                results["slices"] = []
                for k in sorted({1, args.slices}):
                    log(f"slices: K={k}, {args.slice_n} VMs")
                    sl = run_slices(runner, k, args.slice_n, args.forks)
                    results["slices"].append(sl)
                    log(f"slices K={k}: apply wall {sl['wall']:.1f} s, provisioned {sl['provisioned']}/{args.slice_n}")
        except Interrupted:
            log("interrupted: reporting what was measured")
            results["interrupted"] = True
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        info["loadavg_end"] = os.getloadavg()
        sizes = [n for n in sizes_done if any(r["n"] == n for r in runs)]
        if not sizes:
            print("no complete run was measured", file=sys.stderr)
            return 1
        results["config"]["sizes_completed"] = sizes
        for f in results.get("failures", []):
            print(f"failed: N={f['n']} {f['tool']}: {f['error'].splitlines()[0]}")
        for sk in results.get("skipped", []):
            print(f"skipped: N={sk['n']}: projected {sk['projected_s']:.0f} s > {sk['left_s']:.0f} s left of --budget")

        report(args, runner, sim, runs, sizes, tools, results)

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
        pc = plan_cost(runner.ours_root, args.plan_images, args.plan_reps, args.plan_proc_reps, work, ours_python)
        results["plan"] = pc
        print(
            f"[7] plan: build_plan with a {pc['images']}-image catalog {pc['build_plan_ms']:.2f} ms median "
            f"(p95 {pc['build_plan_p95_ms']:.2f} ms, in-process); vmanyware_plan module process {pc['module_process_s']:.2f} s median "
            f"(min {pc['module_process_min_s']:.2f} s)"
        )

        # [12] AWX-style slices
        if results.get("slices"):
            one = next(s for s in results["slices"] if s["k"] == 1)
            parts = []
            for sl in results["slices"]:
                sl["speedup"] = one["wall"] / sl["wall"] if sl["wall"] else float("nan")
                parts.append(
                    f"K={sl['k']}: apply wall {sl['wall']:.1f} s (speed-up {sl['speedup']:.2f}), provisioned "
                    f"{sl['provisioned']}/{sl['n']}, duplicate VMs {sl['duplicate_vms']}, journal conflicts "
                    f"{sl['journal_conflicts']} (torn {sl['torn_documents']}, conflicting_operation "
                    f"{sl['conflicting_operation']}), distinct VMIDs {sl['distinct_vmids']}, CPU/VM "
                    f"{sl['cpu'] / sl['n']:.2f} s, peak PSS {sl['memory']['pss_peak_mib']:.0f} MiB, nodes {sl['nodes']}"
                    + (f", errors {dict(list(sl['errors'].items())[:3])}" if sl["errors"] else "")
                )
            print(
                f"[12] AWX-style slices of {args.slice_n} VMs (ansible-runner processes, one journal): "
                + "; ".join(parts)
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
