# SPDX-License-Identifier: GPL-3.0-or-later
"""The reliability harness (docs/reliability.md): simulator, runs that get killed, and the per-trial checks.

Imported by basename from the tests in this directory and from ``tools/dev/reliability.sh``'s report step.
Evidence is always independent of the code under test: the simulator's request log and VM state (admin API)
and the journal files read back with the journal's own strict loader.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import typing as t
from pathlib import Path

import requests
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.cancel import process_start
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crash_harness"))
import vmanyware_crash_hook as crash_hook  # noqa: E402  pylint: disable=wrong-import-position  # the crash points, injected

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
DRIVER = HERE / "driver.py"
NODE = "pve-test"
TEMPLATE = 9000
FULL = os.environ.get("VMANYWARE_RELIABILITY_FULL") == "1"
PROFILE = "reliability-full" if FULL else "reliability-ci"  # hypothesis profiles registered in conftest.py
RESULTS_DIR = Path(
    os.environ.get("VMANYWARE_RELIABILITY_RESULTS") or (Path(tempfile.gettempdir()) / "vmanyware-reliability")
)
CRASH_ENV = crash_hook.ENV_CRASH_AT
MUTATING = ("POST", "PUT", "DELETE")
# Statuses with which PVE refuses before its handler runs (auth, permission, parameters, unknown method).
# Statuses of requests that never reached the handler: PVE's refusals, and the simulator's drop_request fault.
REFUSED_BEFORE_HANDLER = (400, 401, 403, 501, "request_dropped")
# Every process output is also kept here (set by conftest) so the secret scan covers it; every simulator's
# token secrets are remembered as canaries.
OUTPUT_DIR: Path | None = None
CANARY_SECRETS: list[str] = []
_OUTPUTS = [0]


# -- inputs ---------------------------------------------------------------------------------------------
def catalog_text() -> str:
    return (REPO / "examples/catalog.yml").read_text(encoding="utf-8")


def definition_data(snapshot: bool = True, name: str = "kernel-lab") -> dict[str, t.Any]:
    data = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    data["snapshotAfterProvisioning"] = snapshot
    data["name"] = name
    return t.cast(dict, data)


def definition_text(snapshot: bool = True, name: str = "kernel-lab") -> str:
    return yaml.safe_dump(definition_data(snapshot, name), sort_keys=False)


# -- simulator -------------------------------------------------------------------------------------------
class Simulator:
    """A dedicated pvesim (own state dir and log file) plus token-authenticated reads."""

    def __init__(self, state_dir: Path, speed: float = 1000.0) -> None:
        from pvesim.testing import PvesimAdmin, start_server  # pylint: disable=import-outside-toplevel

        state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir
        self.proc, self.connection = start_server(str(state_dir), speed)
        self.admin = PvesimAdmin(self.connection)
        self.speed = speed
        CANARY_SECRETS.extend(token["secret"] for token in self.connection["tokens"].values())
        CANARY_SECRETS.append(self.connection["root_password"])

    def stop(self) -> None:
        from pvesim.testing import stop_server  # pylint: disable=import-outside-toplevel

        stop_server(self.proc)

    @property
    def token(self) -> tuple[str, str]:
        full = self.connection["tokens"]["full"]
        return full["id"], full["secret"]

    def api_get(self, path: str, **params: t.Any) -> t.Any:
        token_id, secret = self.token
        resp = requests.get(
            self.connection["url"] + path,
            params=params,
            verify=self.connection["ca_file"],
            timeout=30,
            headers={"Authorization": "PVEAPIToken=%s=%s" % (token_id, secret)},
        )
        resp.raise_for_status()
        return resp.json()["data"]

    def vmids(self) -> list[int]:
        return sorted(int(vm["vmid"]) for vm in self.api_get("/nodes/%s/qemu" % NODE))

    def driver_conn(self) -> dict[str, t.Any]:
        token_id, secret = self.token
        return {
            "host": self.connection["host"],
            "port": self.connection["port"],
            "token_id": token_id,
            "token_secret": secret,
            "ca_file": self.connection["ca_file"],
        }

    def admin_conf(self) -> dict[str, str]:
        return {
            "url": self.connection["admin_url"],
            "token": self.connection["admin_token"],
            "ca_file": self.connection["ca_file"],
        }

    def playbook_env(self, journal: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        token_id, secret = self.token
        env = dict(
            os.environ,
            PROXMOX_HOST=self.connection["host"],
            PROXMOX_PORT=str(self.connection["port"]),
            PROXMOX_TOKEN_ID=token_id,
            PROXMOX_TOKEN_SECRET=secret,
            PROXMOX_CA_PATH=self.connection["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(journal),
            VMANYWARE_PROVISIONING_ENABLED="true",
            VMANYWARE_SNAPSHOTS_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
        )
        env.update(extra or {})
        # Only a point given here counts (never one of this process); it also puts the harness on PYTHONPATH.
        return crash_hook.child_env(env, (extra or {}).get(CRASH_ENV))


# -- processes -------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    killed: bool
    seconds: float
    kill_seq: int | None = None  # the simulator's last log entry before the kill
    lingered: list[int] = dataclasses.field(default_factory=list)  # processes alive ORPHAN_GRACE after the kill


@dataclasses.dataclass(frozen=True)
class Kill:
    """How a run is killed (docs/reliability.md, "How trials kill"): what, with which signal, and when.

    ``target``: ``sender``: the processes that send the requests (every descendant of the run: ansible's task worker,
    which ansible-core starts in a session of its own, and any module process; for the driver, the driver itself),
    ansible-playbook left alive; ``group``: the run's process group (what Ctrl-C, a terminal hang-up or ansible-runner's
    cancel reach: the controller, never the worker, which must then stop by itself, the cancel rule); ``tree``: both.
    When: once ``request`` (method, path regex, occurrence) reached the simulator's request log (plus ``delay``), or
    at ``at`` seconds, a point computed from the measured length of an uninterrupted run (``calibrate``), never a
    constant: a trial never depends on the machine's speed.
    """

    target: str = "tree"
    sig: int = signal.SIGKILL
    request: tuple[str, str, int] | None = None
    params: str | None = None  # with ``request``: a regex its parameters (JSON) must match too
    delay: float = 0.0
    at: float | None = None

    def label(self) -> str:
        when = ("%s %s#%d" % self.request if self.request else "@%.2fs" % (self.at or 0.0)) + (
            "+%.2fs" % self.delay if self.delay else ""
        )
        return "%s:%s:%s" % (signal.Signals(self.sig).name, self.target, when)


# After a kill, the processes that survive it (ansible's orphaned worker) must stop by themselves within this long.
ORPHAN_GRACE = 30.0
POLL = 0.05


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (``/proc``)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as handle:
                text = handle.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            parents[int(name)] = int(fields[1])
    return parents


def descendants(pid: int) -> dict[int, int]:
    """Every live descendant of ``pid`` with its start time (so a reused pid is never killed or waited for)."""
    parents = _parents()
    found: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        current = frontier.pop()
        for child, parent in parents.items():
            if parent == current and child not in found:
                start = process_start(child)
                if start is not None:
                    found[child] = start
                    frontier.append(child)
    return found


def _alive(known: dict[int, int]) -> dict[int, int]:
    return {pid: start for pid, start in known.items() if process_start(pid) == start}


def _signal_all(known: dict[int, int], sig: int) -> None:
    for pid, start in known.items():
        if process_start(pid) == start:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _last_seq(sim: Simulator | None) -> int:
    if sim is None:
        return 0
    entries = sim.admin.requests()
    return max((int(entry.get("seq") or 0) for entry in entries), default=0)


def _triggered(kill: Kill, sim: Simulator | None, started: float, seen: dict[str, float], base_seq: int) -> bool:
    now = time.monotonic()
    if kill.request is None:
        return kill.at is not None and now - started >= kill.at
    if "event" not in seen:
        if sim is None:
            raise AssertionError("a kill on a request needs the simulator")
        method, regex, occurrence = kill.request
        matching = [
            entry
            for entry in sim.admin.requests(method, regex)
            if int(entry.get("seq") or 0) > base_seq
            and (kill.params is None or re.search(kill.params, json.dumps(entry.get("params") or {}, sort_keys=True)))
        ]
        if len(matching) < occurrence:
            return False
        seen["event"] = now
    return now - seen["event"] >= kill.delay


def run_killable(
    args: list[str],
    env: dict[str, str],
    kill_after: float | None = None,
    timeout: float = 600.0,
    cwd: str | None = None,
    kill: Kill | None = None,
    sim: Simulator | None = None,
) -> Run:
    """Run ``args`` in its own process group; ``kill`` (or ``kill_after`` seconds: a SIGKILL of the whole tree) as it says.

    After a kill, what survived it (ansible's task worker when only the group was killed) must stop by itself within
    ``ORPHAN_GRACE`` (the cancel rule); the ones that did not are the run's ``lingered``. At the end everything the run
    started is SIGKILLed: nothing may linger into the next run. ``kill_seq``: the last simulator log entry before the kill.
    """
    if kill is None and kill_after is not None:
        kill = Kill(at=kill_after)
    started = time.monotonic()
    seen: dict[str, float] = {}
    known: dict[int, int] = {}
    killed = False
    kill_seq: int | None = None
    lingered: list[int] = []
    base_seq = (
        _last_seq(sim) if kill is not None and kill.request is not None else 0
    )  # occurrences count from this run's start
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=err, start_new_session=True, cwd=cwd)  # pylint: disable=consider-using-with
        try:
            if kill is None:
                proc.wait(timeout=timeout)
            else:
                while proc.poll() is None and time.monotonic() - started < timeout:
                    known.update(descendants(proc.pid))
                    # a kill of the sender waits until a process sends (between two tasks there is no worker)
                    if (kill.target != "sender" or _alive(known)) and _triggered(kill, sim, started, seen, base_seq):
                        known.update(descendants(proc.pid))
                        kill_seq = _last_seq(sim)
                        if kill.target in ("sender", "tree"):
                            _signal_all(known, kill.sig)
                        if kill.target in ("group", "tree"):
                            _signal_group(proc.pid, kill.sig)
                        killed = True
                        break
                    time.sleep(POLL)
                if killed:
                    try:
                        proc.wait(timeout=ORPHAN_GRACE)
                    except subprocess.TimeoutExpired:
                        pass
                    deadline = time.monotonic() + ORPHAN_GRACE
                    while _alive(known) and time.monotonic() < deadline:
                        time.sleep(POLL)
                    lingered = sorted(_alive(known))
                proc.wait(timeout=max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            pass
        # SIGKILL everything again: nothing started by this run may linger into the next one.
        known.update(descendants(proc.pid))
        _signal_group(proc.pid, signal.SIGKILL)
        _signal_all(known, signal.SIGKILL)
        proc.wait()
        out.seek(0)
        err.seek(0)
        result = Run(proc.returncode, out.read(), err.read(), killed, time.monotonic() - started, kill_seq, lingered)
    if OUTPUT_DIR is not None:
        OUTPUT_DIR.mkdir(parents=True, exist_ok=True)
        _OUTPUTS[0] += 1
        name = "%05d-%d-%s.log" % (
            _OUTPUTS[0],
            os.getpid(),
            Path(args[0]).name if "driver" not in " ".join(args) else "driver",
        )
        (OUTPUT_DIR / name).write_text(
            "$ %s\n--- stdout\n%s\n--- stderr\n%s" % (" ".join(args[:2]), result.stdout, result.stderr),
            encoding="utf-8",
        )
    return result


def mutations_after(sim: Simulator, seq: int | None) -> list[dict[str, t.Any]]:
    """Mutating requests the simulator logged after entry ``seq`` (the last one before a kill)."""
    if seq is None:
        return []
    return [entry for entry in sim.admin.requests() if entry["method"] in MUTATING and int(entry.get("seq") or 0) > seq]


def driver_run(
    sim: Simulator,
    journal: Path,
    vmid: int,
    *,
    crash_at: str | None = None,
    crash_stage: str | None = None,
    kill_after: float | None = None,
    snapshot: bool = True,
    enumerate_points: bool = False,
    extra: dict[str, t.Any] | None = None,
    conn: dict[str, t.Any] | None = None,
    name: str = "kernel-lab",
    kill: Kill | None = None,
) -> Run:
    config = {
        "conn": conn or sim.driver_conn(),
        "admin": sim.admin_conf(),
        "journal_dir": str(journal),
        "vmid": vmid,
        "catalog": catalog_text(),
        "definition": definition_text(snapshot, name),
        "crash_at": crash_at,
        "crash_stage": crash_stage,
        "enumerate": enumerate_points,
        "chained": os.environ.get("VMANYWARE_RELIABILITY_CHAINED") == "1",
        **(extra or {}),
    }
    fd, path = tempfile.mkstemp(suffix=".json", prefix="vmanyware-driver-")
    with os.fdopen(fd, "w") as handle:
        json.dump(config, handle)
    try:
        env = dict(os.environ)
        env.pop(CRASH_ENV, None)
        return run_killable([sys.executable, str(DRIVER), path], env, kill_after=kill_after, kill=kill, sim=sim)
    finally:
        os.unlink(path)


def driver_result(run: Run) -> dict[str, t.Any]:
    for line in reversed(run.stdout.strip().splitlines()):
        try:
            return t.cast(dict, json.loads(line))
        except ValueError:
            continue
    return {}


class Playbook:
    """The provision playbook as an operator runs it (two steps: review writes the confirmation, then apply)."""

    def __init__(
        self, sim: Simulator, workdir: Path, vmid: int, *, snapshot: bool = True, name: str = "kernel-lab"
    ) -> None:
        self.sim = sim
        self.workdir = workdir
        self.vmid = vmid
        workdir.mkdir(parents=True, exist_ok=True)
        self.journal = workdir / "journal"
        self.confirm = workdir / "confirm.yml"
        self.definition = workdir / "definition.yml"
        self.definition.write_text(definition_text(snapshot, name), encoding="utf-8")

    def args(self, *extra: str) -> list[str]:
        return [
            str(BIN / "ansible-playbook"),
            "vmanyware.proxmox.provision",
            "-e",
            "vmanyware_catalog_path=%s" % (REPO / "examples/catalog.yml"),
            "-e",
            "vmanyware_definition_path=%s" % self.definition,
            "-e",
            "vmanyware_target_vmid=%d" % self.vmid,
            "-e",
            "vmanyware_confirmation_file=%s" % self.confirm,
            "-e",
            "vmanyware_known_hosts_file=%s" % (self.workdir / "known_hosts"),
            *extra,
        ]

    def review(self) -> Run:
        run = run_killable(self.args(), self.sim.playbook_env(self.journal), cwd=str(self.workdir))
        if run.rc != 0 or not self.confirm.exists():
            raise AssertionError("review run failed: " + run.stdout[-2000:])
        return run

    def apply(
        self,
        *,
        crash_at: str | None = None,
        kill_after: float | None = None,
        extra_args: tuple[str, ...] = (),
        env_extra: dict[str, str] | None = None,
        kill: Kill | None = None,
    ) -> Run:
        extra = dict(env_extra or {})
        if crash_at:
            extra[CRASH_ENV] = crash_at
        return run_killable(
            self.args("-e", "@%s" % self.confirm, *extra_args),
            self.sim.playbook_env(self.journal, extra),
            kill_after=kill_after,
            cwd=str(self.workdir),
            kill=kill,
            sim=self.sim,
        )


# -- evidence ----------------------------------------------------------------------------------------------
def journal_state(journal: Path) -> tuple[list[dict[str, t.Any]], int]:
    """Every operation document, loaded with the journal's strict loader; returns (documents, torn count)."""
    if not journal.exists():
        return [], 0
    store = JournalStore(str(journal))
    documents: list[dict[str, t.Any]] = []
    torn = 0
    for path in sorted(journal.glob("op-*.json")):
        try:
            document = store.load(path.stem)
            # The target claim must be readable too (never torn).
            store.target_holder(document["target"]["scope"], document["target"]["vmid"])
            documents.append(document)
        except VmanywareError:
            torn += 1
    return documents, torn


def is_orphan(journal: Path, document: dict[str, t.Any]) -> bool:
    store = JournalStore(str(journal))
    holder = store.target_holder(document["target"]["scope"], document["target"]["vmid"])
    return holder != document["operationId"] and all(not stage["submissionStarted"] for stage in document["stages"])


def _command(entry: dict[str, t.Any]) -> str:
    command = entry.get("params", {}).get("command")
    return " ".join(command) if isinstance(command, list) else str(command or "")


PRE_HANDLER_ACTIONS = ("http_error", "lock_timeout", "vm_locked")


def mutation_counts(
    entries: list[dict[str, t.Any]],
    vmid: int,
    faults: list[dict[str, t.Any]] | None = None,
    not_run: t.Collection[str] = (),
) -> dict[str, int]:
    """Mutating requests for ``vmid`` that reached the simulator's handler.

    Not counted: requests PVE refuses before its handler (auth, permission, schema: 400/401/403/501) and, with
    ``faults`` (the simulator's rule list with counters), replies an injected rule produced instead of the handler.
    """
    injected = [
        (rule, int(rule.get("fired", 0)))
        for rule in faults or []
        if rule.get("action") in PRE_HANDLER_ACTIONS
        or (rule.get("action") == "checksum_mismatch" and not re.search(r"resize|config", str(rule.get("path", ""))))
    ]
    budget = {id(rule): fired for rule, fired in injected}
    vm = "/nodes/%s/qemu/%d" % (NODE, vmid)
    counts = {"clone": 0, "start": 0, "resize": 0, "snapshot": 0, "install": 0}
    other = {"config": 0, "cloudinit": 0}
    for entry in entries:
        if (
            entry["method"] not in MUTATING
            or entry.get("status") in REFUSED_BEFORE_HANDLER
            or entry.get("schema_errors")
        ):
            continue
        path = entry["path"]
        skip = False
        for rule, _fired in injected:
            if (
                budget[id(rule)] > 0
                and rule.get("method", "*") in ("*", entry["method"])
                and re.search(str(rule.get("path", ".*")), path)
                and isinstance(entry.get("status"), int)
                and entry["status"] >= 500
            ):
                budget[id(rule)] -= 1
                skip = True
                break
        if skip:
            continue
        if path == "/nodes/%s/qemu/%d/clone" % (NODE, TEMPLATE) and str(entry.get("params", {}).get("newid")) == str(
            vmid
        ):
            counts["clone"] += 1
        elif path == vm + "/status/start":
            counts["start"] += 1
        elif path == vm + "/resize":
            counts["resize"] += 1
        elif path == vm + "/snapshot" and entry["method"] == "POST":
            counts["snapshot"] += 1
        elif path == vm + "/agent/exec" and re.search(r"apt-get install", _command(entry)):
            command = entry.get("params", {}).get("command")
            # A copy the guest's exec-marker wrapper refused (superseded before it reached the wrapper) installed nothing.
            if not (isinstance(command, list) and len(command) > 4 and command[4] in not_run):
                counts["install"] += 1
        elif path == vm + "/config" and entry["method"] == "PUT":
            other["config"] += 1
        elif path == vm + "/cloudinit" and entry["method"] == "PUT":
            other["cloudinit"] += 1
    if OTHER_COUNTS is not None:
        OTHER_COUNTS.update(other)
    return counts


def wrapper_not_run(sim: t.Any, vmid: int) -> set[str]:
    """The exec markers whose command the simulated guest's wrapper did not run (superseded, or a marker run before), from
    the guest itself (``GET /_pvesim/vms/{vmid}``: ``exec_wrapper``), independent of the collection's journal."""
    try:
        info = sim.admin.vm(vmid)
    except Exception:  # pylint: disable=broad-exception-caught  # no such VM (any more): nothing ran there
        return set()
    return {marker for marker, what in (info.get("exec_wrapper") or {}).items() if what != "ran"}


# Informational: PUT config / PUT cloudinit requests that reached the handler in the last mutation_counts call.
OTHER_COUNTS: dict[str, int] | None = {}
# Accepted (2xx) PUT config / PUT cloudinit per operation: resources and cloudinit one config PUT each, seed one
# regeneration. A definite refusal (500 checksum mismatch...) does not count: the stage may dispatch again after it.
ACCEPTED_PER_OPERATION = {"/config": 2, "/cloudinit": 1}


def resent_submissions(entries: list[dict[str, t.Any]], vmid: int) -> int:
    """Re-sent submissions in a simulator request log: every mutating request sent again after a copy whose outcome the
    client could not know (reply dropped, request dropped, 503/596), plus config / cloudinit PUTs accepted more often than
    once per stage (a copy the client timed out on but Proxmox ran, then sent again). Clone, start, resize, snapshot and
    install copies that reached the handler are counted by ``mutation_counts`` (duplicates).

    Read-only guest-agent pings are not submissions and are left out.
    """
    resent = 0
    vm = "/nodes/%s/qemu/%d" % (NODE, vmid)
    accepted = {suffix: 0 for suffix in ACCEPTED_PER_OPERATION}
    last: dict[tuple[str, str, str], t.Any] = {}
    for entry in entries:
        if entry["method"] not in MUTATING or entry["path"].endswith("/agent/ping"):
            continue
        # The same request again carries the same parameters (a resend is a copy); another stage's request to the same
        # path (resources and cloudinit both PUT config) does not.
        key = (entry["method"], entry["path"], json.dumps(entry.get("params") or {}, sort_keys=True, default=str))
        if key in last and last[key] in UNKNOWN_OUTCOME_STATUSES:
            resent += 1
        last[key] = entry.get("status")
        status = entry.get("status")
        if entry["method"] == "PUT" and isinstance(status, int) and status < 300:
            for suffix in accepted:
                if entry["path"] == vm + suffix:
                    accepted[suffix] += 1
    return resent + sum(max(0, accepted[suffix] - allowed) for suffix, allowed in ACCEPTED_PER_OPERATION.items())


# Simulator log statuses after which the client cannot know whether its request took effect.
UNKNOWN_OUTCOME_STATUSES = (
    "dropped",
    "request_dropped",
    503,
    596,
    "tls_aborted",
    "oversized_reply",
)  # the transport faults: the request ran, its reply was never read


def state_mismatches(sim: Simulator, vmid: int, document: dict[str, t.Any]) -> list[str]:
    """The VM in the simulator compared with the plan of ``document``: names of what differs."""
    plan = document["plan"]
    resources = document["definition"]["resources"]
    try:
        vm = sim.admin.vm(vmid)
    except RuntimeError:
        return ["vm missing"]
    config = vm["config"]
    wrong = []
    if config.get("cores") != str(resources["cores"]):
        wrong.append("cores")
    if config.get("memory") != str(resources["memoryMiB"]):
        wrong.append("memory")
    device = document["mapping"]["diskDevice"]
    if "size=%dG" % resources["diskGiB"] not in config.get(device, ""):
        wrong.append("disk")
    if config.get("tags") != "vmanyware-" + document["operationId"]:
        wrong.append("tag")
    if vm["status"] != "running":
        wrong.append("running")
    if plan["snapshotAfterProvisioning"] and "vmanyware-" + document["operationId"][-12:] not in vm["snapshots"]:
        wrong.append("snapshot")
    if vm.get("pending") or vm.get("pending_delete"):
        wrong.append("pending")
    return wrong


# -- trials -------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TrialSpec:
    """One crash trial: where the first run dies, and whether a later run is killed again."""

    name: str
    mode: str  # "driver" (stages in one python process) or "playbook" (a real ansible-playbook)
    point: str | None = None  # VMANYWARE_TEST_CRASH_AT for the first run
    stage: str | None = None  # driver only: arm the point while this stage runs
    kill_after: float | None = None  # SIGKILL the run's whole process tree after this many seconds (a calibrated point)
    rekill_after: float | None = None  # SIGKILL the second run as well
    vmid: int = 201
    kill: Kill | None = None  # how the first run is killed (instead of kill_after)
    rekill: Kill | None = None  # how the second run is killed (instead of rekill_after)
    env: dict[str, str] | None = None  # playbook only: extra environment of every run (VMANYWARE_IN_PROCESS=false...)
    args: tuple[str, ...] = ()  # playbook only: extra arguments of every run (-e provision_step_by_step=true...)


@dataclasses.dataclass
class TrialResult:
    name: str
    mode: str
    point: str | None
    runs: int
    outcome: str  # completed / uncertain / failed / stuck
    code: str | None
    stage: str | None
    message: str | None
    duplicates: dict[str, int]
    torn: int
    state_mismatch: list[str]
    extra_vms: list[int]
    request_reached: bool | None
    seconds: float
    orphans: int = 0
    rekill: bool = False
    resent: int = 0
    killed: bool = False  # the first run was killed (its kill point was reached before it ended)
    after_kill: int = 0  # mutating requests the simulator logged after the first kill (at most the one in flight)
    lingered: int = 0  # processes still alive ORPHAN_GRACE after a kill (an orphaned worker that did not stop)
    cancelled: list[str] = dataclasses.field(default_factory=list)  # the journal's evidence.cancelled codes, per stage

    def to_json(self) -> dict[str, t.Any]:
        return dataclasses.asdict(self)


MAX_RUNS = 6
CRASH_WAIT_BUDGET = 2.0


def run_trial(sim: Simulator, spec: TrialSpec, workdir: Path, playbook: Playbook | None = None) -> TrialResult:
    """Reset the simulator, run until completed or stopped (killing as the spec says), check every run."""
    started = time.monotonic()
    sim.admin.reset()
    journal = playbook.journal if playbook else workdir / "journal"
    if journal.exists():
        for path in journal.rglob("*"):
            if path.is_file():
                path.unlink()
    torn = 0
    runs = 0
    uncertain_seen = 0
    document: dict[str, t.Any] | None = None
    outcome, code, stage, message = "stuck", None, None, None
    orphans = 0
    killed, after_kill, lingered = False, 0, 0
    for runs in range(1, MAX_RUNS + 1):
        point = spec.point if runs == 1 else None
        kill_after = spec.kill_after if runs == 1 else (spec.rekill_after if runs == 2 else None)
        kill = spec.kill if runs == 1 else (spec.rekill if runs == 2 else None)
        if playbook is not None:
            run = playbook.apply(
                crash_at=point, kill_after=kill_after, kill=kill, env_extra=spec.env, extra_args=spec.args
            )
        else:
            # A crash leaves no request held at the simulator: 2 s of reads decide whatever reads can decide.
            run = driver_run(
                sim,
                journal,
                spec.vmid,
                crash_at=point,
                crash_stage=spec.stage,
                kill_after=kill_after,
                extra={"wait_budget": CRASH_WAIT_BUDGET},
                kill=kill,
            )
        lingered += len(run.lingered)
        if runs == 1:
            killed = run.killed
            # what reached the simulator after the kill: by then every survivor stopped or was counted as lingering
            after_kill = len(mutations_after(sim, run.kill_seq))
        documents, torn_now = journal_state(journal)
        torn += torn_now
        # An operation file without claims and without any dispatch is the documented orphan of a crash
        # inside create_operation (docs/journal.md); anything else beyond one operation is a duplicate.
        active = [d for d in documents if not is_orphan(journal, d)]
        orphans = len(documents) - len(active)
        document = active[0] if len(active) == 1 else None
        if len(active) > 1:
            outcome, message = "duplicate-operations", "%d operation files" % len(active)
            break
        if document is None:
            continue
        status = document["status"]
        if status == "completed" and run.rc == 0:
            outcome = "completed"
            break
        if status in ("failed", "uncertain"):
            failure = document["failure"] or {}
            code, stage, message = failure.get("code"), failure.get("stage"), failure.get("message")
            if status == "uncertain" and uncertain_seen < 1:
                uncertain_seen += 1  # an uncertain stage is resolved again by the next run
                continue
            outcome = status
            break
    entries = sim.admin.requests()
    counts = mutation_counts(entries, spec.vmid, not_run=wrapper_not_run(sim, spec.vmid))
    resent = resent_submissions(entries, spec.vmid)
    duplicates = {k: v for k, v in counts.items() if v > 1}
    mismatch: list[str] = []
    if outcome == "completed" and document is not None:
        mismatch = state_mismatches(sim, spec.vmid, document)
    extra_vms = [v for v in sim.vmids() if v not in (TEMPLATE, spec.vmid)]
    reached = None
    if outcome == "uncertain" and stage:
        reached = (
            counts.get({"packages": "install"}.get(stage, stage), 0) > 0
            if stage in ("clone", "start", "snapshot", "packages")
            else None
        )
    cancelled = [
        str(item["evidence"]["cancelled"].get("code"))
        for item in (document or {}).get("stages", [])
        if isinstance(item["evidence"].get("cancelled"), dict)
    ]
    label = spec.point or (
        spec.kill.label() if spec.kill else ("kill@%.2fs" % spec.kill_after if spec.kill_after else None)
    )
    return TrialResult(
        spec.name,
        spec.mode,
        label,
        runs,
        outcome,
        code,
        stage,
        message,
        duplicates,
        torn,
        mismatch,
        extra_vms,
        reached,
        time.monotonic() - started,
        orphans,
        spec.rekill_after is not None or spec.rekill is not None,
        resent,
        killed,
        after_kill,
        lingered,
        cancelled,
    )


def write_result(category: str, record: dict[str, t.Any]) -> None:
    """Append one JSON line to the results of this run (read by tools/dev/reliability.sh's report)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with open(RESULTS_DIR / ("%s.jsonl" % category), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=True) + "\n")


def rng(seed: str) -> random.Random:
    return random.Random(seed)
