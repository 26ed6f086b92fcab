# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A profile's role run against one guest in a nested ``ansible-playbook`` on the controller (docs/profiles.md, "Running profiles").

``NestedPlaybook`` is what the run needs (argv, environment, the generated files); ``prepare`` writes the generated files
into a private directory (0700, every file 0600) and ``run_nested`` runs it:

- the inventory names the guest with ``vmanyware.proxmox.qga`` (``vmanyware_vmid``/``vmanyware_node``), SSH (the
  handoff's address and user, ``StrictHostKeyChecking=yes`` against a known_hosts file written from the handoff, or the
  operator's known_hosts file with the recorded address as ``HostKeyAlias``) or ``vmanyware.proxmox.pct`` (a container
  by ``pct exec`` over SSH to its node: the node's host key verified, the dedicated key, pipelining);
- the API connection of the qga transport goes in the child's environment (``PROXMOX_*``), never on its command line or in
  a file; the profile's variables go in a 0600 extra-vars file (``-e @file``);
- the counts come from the ``PLAY RECAP`` line of ansible-core's default callback (ansible-core ships no JSON stdout
  callback; its recap format is the same on every core of the support matrix), read from a 0600 output file;
- the child dies with its parent: ``PR_SET_PDEATHSIG`` (SIGTERM) on Linux, so a task worker killed by a cancelled
  ``ansible-playbook`` (ansible-core runs each worker in a session of its own, _core/cancel.py) takes the nested run with
  it; a cancel the worker sees itself (``cancel_check``) ends the child's process group (SIGTERM, then SIGKILL).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import typing as t

from .._api.argspec import connection_environment
from .._core.cancel import raise_if_cancelled

GUEST_ALIAS = "vmanyware_guest"
# connection option -> the environment variable the qga connection plugin reads it from (plugins/connection/qga.py)
API_ENVIRONMENT = connection_environment()
_RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+"
    r"failed=(?P<failed>\d+)",
    re.MULTILINE,
)
# After SIGTERM, the child gets this long (seconds) to end before SIGKILL.
TERM_GRACE = 10.0
POLL = 0.5
PR_SET_PDEATHSIG = 1


@dataclasses.dataclass(frozen=True)
class GuestTarget:
    """How the nested run reaches the guest: ``qga`` (vmid, node), ``ssh`` (address, user, known_hosts lines or the
    operator's known_hosts file) or ``pct`` (the node's SSH endpoint in ``address``/``port``/``user``, its known_hosts
    file and the dedicated key)."""

    transport: str
    vmid: int
    node: str
    address: str | None = None
    user: str | None = None
    known_hosts: tuple[str, ...] = ()
    port: int | None = None
    private_key_file: str | None = None
    known_hosts_file: str | None = None
    host_key_alias: str | None = None
    connect_timeout: int | None = None


@dataclasses.dataclass(frozen=True)
class NestedPlaybook:
    """A prepared nested run: what to start, with which environment, in which private directory."""

    argv: list[str]
    env: dict[str, str]
    workdir: str
    output_path: str


@dataclasses.dataclass(frozen=True)
class NestedResult:
    """The counts of the recap (summed over hosts; there is one), the exit status and the duration."""

    ok: int
    changed: int
    failed: int
    unreachable: int
    rc: int
    seconds: float
    recap_found: bool = True


NestedRunner = t.Callable[[NestedPlaybook, t.Callable[[], t.Optional[str]], float], NestedResult]


def collections_root() -> str | None:
    """The collections path this collection is installed in (``.../ansible_collections/vmanyware/proxmox``'s parent's
    parent), None when this file is not in such a tree (a module process's payload)."""
    parts = os.path.abspath(__file__).split(os.sep)
    if "ansible_collections" not in parts:
        return None
    index = len(parts) - 1 - parts[::-1].index("ansible_collections")
    root = os.sep.join(parts[:index]) or os.sep
    return root if os.path.isdir(os.path.join(root, "ansible_collections", "vmanyware", "proxmox")) else None


def _inventory(target: GuestTarget, known_hosts_path: str | None) -> dict[str, t.Any]:
    host: dict[str, t.Any] = {"vmanyware_vmid": target.vmid, "vmanyware_node": target.node}
    if target.transport == "qga":
        host["ansible_connection"] = "vmanyware.proxmox.qga"
    elif target.transport == "pct":
        # the container by pct exec on its node (plugins/connection/pct.py): the node's host key checked against the
        # operator's file, only the dedicated key offered; pipelining sends each module on stdin (no temp-file round trip)
        host.update(
            ansible_connection="vmanyware.proxmox.pct",
            ansible_host=target.address,
            ansible_port=target.port or 22,
            ansible_user=target.user or "root",
            ansible_private_key_file=target.private_key_file,
            vmanyware_pct_known_hosts_file=target.known_hosts_file,
            proxmox_vmid=target.vmid,
            ansible_pipelining=True,
        )
        if target.connect_timeout is not None:
            host["vmanyware_pct_connect_timeout"] = target.connect_timeout
    else:
        options = ["-o", "StrictHostKeyChecking=yes", "-o", "UserKnownHostsFile=%s" % known_hosts_path]
        if target.host_key_alias:  # the key is known under the recorded address, whatever address the connection uses
            options += ["-o", "HostKeyAlias=%s" % target.host_key_alias]
        host.update(
            ansible_connection="ssh",
            ansible_host=target.address,
            ansible_user=target.user,
            ansible_ssh_common_args=" ".join(shlex.quote(option) for option in options),
        )
        if target.port is not None:
            host["ansible_port"] = target.port
        if target.private_key_file:
            host["ansible_ssh_private_key_file"] = target.private_key_file
    return {"all": {"hosts": {GUEST_ALIAS: host}}}


def _playbook(profile: str, role: str, become: bool) -> list[dict[str, t.Any]]:
    return [
        {
            "name": "Profile %s" % profile,
            "hosts": GUEST_ALIAS,
            "gather_facts": True,
            "become": become,
            "roles": [{"role": role}],
        }
    ]


def _write_private(path: str, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def child_environment(base: t.Mapping[str, str], connection: t.Mapping[str, t.Any], transport: str) -> dict[str, str]:
    """The nested run's environment: the worker's, every ``PROXMOX_*`` replaced by this task's connection (qga only: an
    SSH run needs no API credential, so none is passed), plain output and this collection on the collections path."""
    env = {key: value for key, value in base.items() if not key.startswith("PROXMOX_")}
    if transport == "qga":
        for option, name in API_ENVIRONMENT.items():
            value = connection.get(option)
            if value is None or value == "":
                continue
            env[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    env.update(
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_HOST_KEY_CHECKING="True",
        PYTHONUNBUFFERED="1",
    )
    root = collections_root()
    if root is not None:
        paths = [root] + [item for item in base.get("ANSIBLE_COLLECTIONS_PATH", "").split(os.pathsep) if item]
        env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def prepare(
    profile: str,
    role: str,
    variables: t.Mapping[str, t.Any],
    target: GuestTarget,
    connection: t.Mapping[str, t.Any],
    *,
    become: bool = False,
    base_env: t.Mapping[str, str] | None = None,
    python: str | None = None,
    temp_root: str | None = None,
) -> NestedPlaybook:
    """Write the inventory, playbook, extra vars (and known_hosts for SSH) into a new private directory; the argv names
    files only. The caller removes ``workdir`` (``cleanup``)."""
    workdir = tempfile.mkdtemp(prefix="vmanyware-profile-", dir=temp_root)  # 0700
    known_hosts_path = target.known_hosts_file
    if target.transport == "ssh" and known_hosts_path is None:
        known_hosts_path = os.path.join(workdir, "known_hosts")
        _write_private(known_hosts_path, "".join(line + "\n" for line in target.known_hosts))
    inventory = os.path.join(workdir, "inventory.json")
    playbook = os.path.join(workdir, "playbook.json")
    extra_vars = os.path.join(workdir, "vars.json")
    # JSON is YAML: no quoting rule of ours decides how a value or a role name is read back
    _write_private(inventory, json.dumps(_inventory(target, known_hosts_path), sort_keys=True))
    _write_private(playbook, json.dumps(_playbook(profile, role, become), sort_keys=True))
    _write_private(extra_vars, json.dumps(dict(variables), sort_keys=True))
    argv = [python or sys.executable, "-m", "ansible.cli.playbook", "-i", inventory, "-e", "@" + extra_vars, playbook]
    env = child_environment(os.environ if base_env is None else base_env, connection, target.transport)
    return NestedPlaybook(argv=argv, env=env, workdir=workdir, output_path=os.path.join(workdir, "output.txt"))


def cleanup(nested: NestedPlaybook) -> None:
    shutil.rmtree(nested.workdir, ignore_errors=True)


def parse_recap(text: str) -> dict[str, int] | None:
    """The recap's counts of the guest, None when the output has no recap line for it (the run died before it)."""
    for match in _RECAP.finditer(text):
        if match.group("host") == GUEST_ALIAS:
            return {key: int(match.group(key)) for key in ("ok", "changed", "unreachable", "failed")}
    return None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent died before prctl: nobody would send the signal
        os._exit(1)


def _end(process: subprocess.Popen[bytes]) -> None:
    for signum, grace in ((signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, TERM_GRACE)):
        try:
            os.killpg(process.pid, signum)
        except OSError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_nested(
    nested: NestedPlaybook,
    cancel_check: t.Callable[[], str | None],
    timeout: float,
    *,
    clock: t.Callable[[], float] = time.monotonic,
) -> NestedResult:
    """Start the nested run and wait for it, the cancel asked every ``POLL`` seconds; ``RunCancelled`` after its process
    group was ended; a run past ``timeout`` is ended too and reported with rc -1."""
    started = clock()
    with open(nested.output_path, "wb") as output:
        os.chmod(nested.output_path, 0o600)
        process = subprocess.Popen(  # pylint: disable=consider-using-with  # waited for below, ended on every path
            nested.argv,
            env=nested.env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so a cancel ends the whole nested run
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # pylint: disable=subprocess-popen-preexec-fn
        )
        try:
            while process.poll() is None:
                if clock() - started > timeout:
                    _end(process)
                    break
                raise_if_cancelled(cancel_check)
                time.sleep(POLL)
        except BaseException:
            _end(process)
            raise
    with open(nested.output_path, encoding="utf-8", errors="replace") as handle:
        counts = parse_recap(handle.read())
    rc = process.returncode if process.returncode is not None else -1
    if clock() - started > timeout:
        rc = -1
    seconds = round(clock() - started, 2)
    if counts is None:
        return NestedResult(ok=0, changed=0, failed=0, unreachable=0, rc=rc, seconds=seconds, recap_found=False)
    return NestedResult(
        ok=counts["ok"],
        changed=counts["changed"],
        failed=counts["failed"],
        unreachable=counts["unreachable"],
        rc=rc,
        seconds=seconds,
    )
