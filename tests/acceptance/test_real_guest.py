# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Acceptance (issues 10 and 20): a template built from a cloud image, then the provision playbook from it, end to end
against pvesim ``--guests real``.

The template playbook downloads the agent-less image (``build.sh``'s ``disk-noagent.qcow2``, the stock
cloud-image case) from a loopback HTTP server with its checksum, imports it, and boots it for the
preparation: real cloud-init applies the build address, the guest user and the ephemeral key; the role
installs qemu-guest-agent from Debian's repository over SSH, generalizes, shuts down, converts and
stamps; the catalog mapping it prints carries the ``imageDefaultUser`` attestation it verified.

The provision playbook then clones *that* template: a real QEMU guest (real cloud-init, the
qemu-guest-agent the build installed, sshd) boots from the seed the collection's stages verified;
readiness sees the real ``cloud-init status: done``, the real DHCP address and the real host keys;
the packages stage installs a package from Debian's mirror through QEMU's user-mode NAT; a second play
then logs in over SSH with strict host key checking against the known_hosts lines the role wrote.
Then (issue 34) a second guest from the same template on a static IPv4 address inside QEMU's user-mode
network (``_static_run``): readiness sees that address through the real agent, and SSH logs in to it.
docs/real-guest.md ("Acceptance") and docs/templates.md explain the pieces.

Opt-in like ``tools/pvesim/tests/test_realguest.py`` (``-m realguest`` or ``PVESIM_REALGUEST=1``);
the one command is ``tools/dev/acceptance.sh``. Skipped only where QEMU cannot run at all. Timings are
printed and written to ``<tmp>/acceptance-timings.json`` (and to ``$VMANYWARE_ACCEPTANCE_TIMINGS`` when set).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import typing as t
from pathlib import Path

import pytest
import requests
import yaml

from pvesim.imageserver import ImageServer
from pvesim.state import FULL_TOKEN_ACL
from pvesim.testing import PvesimAdmin, ensure_realguest_tools

pytestmark = [pytest.mark.slow, pytest.mark.realguest]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
BUILD_SH = REPO / "tools" / "guest-image" / "build.sh"
NODE = "pve-test"
VMID = 201
TEMPLATE_VMID = 9001  # the demo seed's prebuilt template is 9000; the provision run clones the one built here
PACKAGE = "hello"
# Scales only the simulated task durations (clone, resize, start bookkeeping); the real guest runs on the
# real clock, and every deadline of the collection (readiness, packages) is wall-clock time.
SPEED = 50
MUTATING = ("POST", "PUT", "DELETE")
READINESS_TIMEOUT = 900
# Issue 34: a second guest on a static IPv4 address inside QEMU's user-mode network (slirp's defaults: 10.0.2.0/24, the
# gateway 10.0.2.2 and the DNS forwarder 10.0.2.3; its DHCP hands out 10.0.2.15, which this guest must not take).
STATIC_VMID = 202
PROFILES_VMID = 203
STATIC_ADDRESS = "10.0.2.50"
USERNET = {
    "name": "usernet",
    "bridge": "vmbr0",
    "ipv4": {
        "mode": "static",
        "subnet": "10.0.2.0/24",
        "gateway": "10.0.2.2",
        "dns": ["10.0.2.3"],
        "searchDomain": "acceptance.test",
    },
}


def _say(msg: str) -> None:
    sys.stdout.write(f"[acceptance] {msg}\n")
    sys.stdout.flush()


def _opted_in(config: pytest.Config) -> bool:
    return os.environ.get("PVESIM_REALGUEST") == "1" or "realguest" in (config.getoption("markexpr") or "")


def _build_image(timings: dict[str, t.Any]) -> str:
    t0 = time.monotonic()
    res = subprocess.run([str(BUILD_SH)], capture_output=True, text=True, check=False, timeout=1800)
    timings["image_build_s"] = round(time.monotonic() - t0, 1)
    assert res.returncode == 0, f"build.sh failed:\n{res.stderr[-4000:]}"
    image_dir = res.stdout.strip().splitlines()[-1]
    meta = json.loads(Path(image_dir, "image.json").read_text(encoding="utf-8"))
    timings["image_cache_hit"] = timings["image_build_s"] < 5
    _say(
        f"guest image {image_dir} ({'cache hit' if timings['image_cache_hit'] else 'built'} in {timings['image_build_s']} s)"
    )
    return image_dir


def _start_pvesim(state: Path, image_dir: str) -> tuple[subprocess.Popen[bytes], dict[str, t.Any]]:
    state.mkdir(parents=True)
    conn_file = state / "connection.json"
    with open(state / "pvesim.log", "ab") as err:
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [
                sys.executable,
                "-m",
                "pvesim",
                "serve",
                "--port",
                "0",
                "--state-dir",
                str(state),
                "--seed",
                "demo",
                "--speed",
                str(SPEED),
                "--guests",
                "real",
                "--guest-image",
                image_dir,
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if conn_file.exists():
            return proc, json.loads(conn_file.read_text(encoding="utf-8"))
        if proc.poll() is not None:
            raise AssertionError(
                f"pvesim exited with {proc.returncode}: {(state / 'pvesim.log').read_text(errors='replace')}"
            )
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("pvesim did not write connection.json")


def _stop_pvesim(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # QEMU still dies with it (PR_SET_PDEATHSIG)
            proc.wait()
    return int(proc.returncode)


def _qemu_pids(state: Path) -> list[int]:
    res = subprocess.run(["pgrep", "-f", f"qemu-system.*{state}"], capture_output=True, text=True, check=False)
    return [int(p) for p in res.stdout.split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, OSError):
        return False


def _playbook(
    tmp: Path, env: dict[str, str], extra: list[str], name: str, timeout: float = 1500, playbook: str = "acceptance.yml"
) -> tuple[int, str]:
    """Run tests/acceptance/``playbook``, echoing its output live (visible with -s); returns (rc, output)."""
    argv = [str(BIN / "ansible-playbook"), str(HERE / playbook), *extra]
    lines: list[str] = []
    with (
        open(tmp / f"{name}.log", "w", encoding="utf-8") as log,
        subprocess.Popen(
            argv, env=env, cwd=str(tmp), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc,
    ):
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                log.write(line)
                sys.stdout.write(line)
                sys.stdout.flush()
            rc = proc.wait()
        finally:
            watchdog.cancel()
    return rc, "".join(lines)


def _template_build(
    tmp: Path, env: dict[str, str], admin: PvesimAdmin, conn_file: Path, image_dir: str, timings: dict[str, t.Any]
) -> dict[str, t.Any]:
    """Build the template from the agent-less image with the shipped playbook; returns the catalog mapping it printed."""
    # The template build's extra privileges (docs/templates.md, "Privileges") on top of the full token's.
    privileges = {path: list(privs) for path, privs in FULL_TOKEN_ACL.items()}
    privileges["/storage/local"] = ["Datastore.AllocateTemplate", "Datastore.Audit"]
    privileges[f"/nodes/{NODE}"] = privileges[f"/nodes/{NODE}"] + ["Sys.AccessNetwork"]
    # the new template: everything the build does on /vms, and cloning it afterwards (as /vms/9000 grants for the demo template)
    privileges[f"/vms/{TEMPLATE_VMID}"] = [*privileges["/vms"], "VM.Clone"]
    conn = json.loads(conn_file.read_text(encoding="utf-8"))
    admin.set_token(conn["tokens"]["full"]["id"], privileges=privileges)
    env = dict(
        env, VMANYWARE_JOURNAL_DIR=str(tmp / "template-journal")
    )  # the provision run's journal holds its operation only
    image = Path(image_dir, "disk-noagent.qcow2")
    digest = hashlib.sha256()
    with open(image, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    build_file, confirm, mapping_file = tmp / "template-build.yml", tmp / "template-confirm.yml", tmp / "mapping.yml"
    with ImageServer(image_dir) as images:
        build_file.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "vmanyware.dev/v1",
                    "kind": "TemplateBuild",
                    "image": "debian-13",
                    "source": {
                        "url": images.url(image.name),
                        "checksum": digest.hexdigest(),
                        "checksumAlgorithm": "sha256",
                    },
                    "node": NODE,
                    "storage": "local-lvm",
                    "importStorage": "local",
                    "bridge": "vmbr0",
                    "templateVmid": TEMPLATE_VMID,
                    "templateVersion": "debian-12-acceptance",
                    "diskGiB": 8,
                    "guestUser": "debian",
                    # inside the node's resolver network (pvesim's node DNS is 10.10.0.1): slirp serves DNS there (realguest.slirp_network)
                    "buildAddress": {"address": "10.10.0.50/24", "gateway": "10.10.0.254"},
                }
            ),
            encoding="utf-8",
        )
        extra = [
            "-e",
            f"vmanyware_template_build_path={build_file}",
            "-e",
            f"vmanyware_confirmation_file={confirm}",
            "-e",
            f"vmanyware_catalog_mapping_file={mapping_file}",
            "-e",
            f"acceptance_template_vmid={TEMPLATE_VMID}",
            "-e",
            f"acceptance_pvesim_connection_file={conn_file}",
        ]
        _say("template run 1/2: without confirmation")
        rc, out = _playbook(tmp, env, extra, "template1", timeout=600, playbook="template.yml")
        assert rc == 0, out[-4000:]
        assert [e for e in admin.requests() if e["method"] in MUTATING] == []
        _say(
            "template run 2/2: with -e @template-confirm.yml (download, import, preparation boot over SSH, generalize, convert, stamp)"
        )
        t0 = time.monotonic()
        rc, out = _playbook(tmp, env, [*extra, "-e", f"@{confirm}"], "template2", playbook="template.yml")
        timings["template_build_s"] = round(time.monotonic() - t0, 1)
        assert rc == 0, out[-6000:]
    assert "STAND-IN" not in out
    # the guest agent came from Debian's repository during the preparation boot: the image had none
    assert "qemu-guest-agent" not in Path(image_dir, "packages-noagent.txt").read_text(encoding="utf-8").split()
    mapping = yaml.safe_load(mapping_file.read_text(encoding="utf-8"))
    assert isinstance(mapping, list) and len(mapping) == 1, mapping
    item = mapping[0]
    assert item["templateVmid"] == TEMPLATE_VMID and item["sourceDiskGiB"] == 8 and item["guestUser"] == "debian"
    assert item["imageDefaultUser"] == {
        "name": "debian",
        "templateVersion": "debian-12-acceptance",
        "passwordLocked": True,
        "noAuthorizedKeys": True,
    }, item
    vm = f"/nodes/{NODE}/qemu/{TEMPLATE_VMID}"
    log = admin.requests()
    marks = {
        "start": next((e["time"] for e in log if e["method"] == "POST" and e["path"] == f"{vm}/status/start"), None),
        "agent": next((e["time"] for e in log if e["path"] == f"{vm}/agent/info" and e["status"] == 200), None),
        "shutdown": next(
            (e["time"] for e in log if e["method"] == "POST" and e["path"] == f"{vm}/status/shutdown"), None
        ),
        "template": next((e["time"] for e in log if e["method"] == "POST" and e["path"] == f"{vm}/template"), None),
    }
    if None not in marks.values():
        # boot, SSH, apt update + install of the agent, until the installed agent answers; then generalize; then ACPI shutdown
        timings["template_boot_to_agent_installed_s"] = round(marks["agent"] - marks["start"], 1)
        timings["template_generalize_s"] = round(marks["shutdown"] - marks["agent"], 1)
        timings["template_shutdown_to_convert_s"] = round(marks["template"] - marks["shutdown"], 1)
    sent = [f"{e['method']} {e['path']}" for e in log if e["method"] in MUTATING]
    for request in (
        f"POST /nodes/{NODE}/storage/local/download-url",
        f"POST /nodes/{NODE}/qemu",
        f"POST {vm}/status/start",
        f"POST {vm}/status/shutdown",
        f"POST {vm}/template",
    ):
        assert sent.count(request) == 1, (request, sent)
    config = admin.vm(TEMPLATE_VMID)["config"]
    assert str(config["template"]) == "1" and config["scsi0"].startswith(f"local-lvm:base-{TEMPLATE_VMID}-disk-")
    assert not {"ipconfig0", "sshkeys", "ciuser"} & set(config)
    return t.cast(dict, item)


def _command(entry: dict[str, t.Any]) -> list[str]:
    cmd = entry.get("params", {}).get("command", [])
    return [cmd] if isinstance(cmd, str) else list(cmd)


def _timings_from_log(log: list[dict[str, t.Any]], timings: dict[str, t.Any]) -> None:
    """Boot and package timings from the simulator's request log (arrival times of the collection's own requests)."""
    vm = f"/nodes/{NODE}/qemu/{VMID}"
    start = next((e["time"] for e in log if e["method"] == "POST" and e["path"] == f"{vm}/status/start"), None)
    if start is None:
        return
    after = [e for e in log if e["time"] >= start]
    execs = [e for e in after if e["method"] == "POST" and e["path"] == f"{vm}/agent/exec"]
    marks = {
        "agent": next((e["time"] for e in after if e["path"] == f"{vm}/agent/ping" and e["status"] == 200), None),
        # readiness asks for the interfaces only once cloud-init reported done
        "cloudinit": next((e["time"] for e in after if e["path"] == f"{vm}/agent/network-get-interfaces"), None),
        "packages": next((e["time"] for e in execs if _command(e)[:1] == ["dpkg-query"]), None),
        "update": next((e["time"] for e in execs if "update" in _command(e)), None),
        "install": next((e["time"] for e in execs if "install" in _command(e)), None),
        "last_agent": max((e["time"] for e in after if "/agent/" in e["path"]), default=None),
    }
    spans = {
        "boot_to_agent_s": ("agent", None),
        "boot_to_cloudinit_done_s": ("cloudinit", None),
        "packages_stage_s": ("last_agent", "packages"),
        "apt_update_s": ("install", "update"),
        "apt_install_s": ("last_agent", "install"),
    }
    for name, (end, begin) in spans.items():
        t_end, t_begin = marks[end], (start if begin is None else marks[begin])
        if t_end is not None and t_begin is not None:
            timings[name] = round(t_end - t_begin, 1)


def _ssh(port: int, key: Path, known_hosts: Path, alias: str, command: str) -> subprocess.CompletedProcess[str]:
    """One login through the loopback forward, strict host key checking against ``known_hosts`` under ``alias``."""
    return subprocess.run(
        [
            "ssh",
            "-p",
            str(port),
            "-i",
            str(key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            f"HostKeyAlias={alias}",
            "debian@127.0.0.1",
            command,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def _configure_both_ways(
    tmp_path: Path, env: dict[str, str], journal: Path, key: Path, forward_port: int, admin: PvesimAdmin
) -> dict[str, float]:
    """configure.yml on the provisioned VM over SSH, then through the guest agent (issue 35): both from the journal
    inventory, the same tasks on files of their own; the wall time of each run. The qga run has no SSH client at all."""
    seconds: dict[str, float] = {}
    inventories = {
        "ssh": {
            "plugin": "vmanyware.proxmox.journal",
            "journal_dir": str(journal),
            "compose": {
                "ansible_ssh_common_args": "ansible_ssh_common_args ~ ' -o HostKeyAlias=' ~ ansible_host",
                "ansible_host": "'127.0.0.1'",
                "ansible_port": str(forward_port),
            },
        },
        "qga": {"plugin": "vmanyware.proxmox.journal", "journal_dir": str(journal), "connection": "qga"},
    }
    for via, inventory in inventories.items():
        source = tmp_path / f"configure-{via}.vmanyware_journal.yml"
        source.write_text(json.dumps(inventory), encoding="utf-8")
        run_env = dict(env, ANSIBLE_SSH_EXECUTABLE="/bin/false") if via == "qga" else env
        seen = len(admin.requests())
        started = time.monotonic()
        rc, out = _playbook(
            tmp_path,
            run_env,
            ["-i", str(source), "-e", f"ansible_ssh_private_key_file={key}", "-e", f"configure_via={via}"],
            f"configure-{via}",
            timeout=900,
            playbook="configure.yml",
        )
        seconds[f"configure_{via}_s"] = round(time.monotonic() - started, 1)
        assert rc == 0, out[-4000:]
        assert re.search(r": ok=7\s+changed=2\s+unreachable=0\s+failed=0", out), out[-2000:]
        execs = [e for e in admin.requests()[seen:] if e["method"] == "POST" and e["path"].endswith("/agent/exec")]
        # over SSH the agent runs nothing; through the agent every module runs there
        assert (len(execs) > 0) == (via == "qga"), len(execs)
    _say(
        f"configure.yml over SSH {seconds['configure_ssh_s']} s, through the guest agent {seconds['configure_qga_s']} s"
    )
    return seconds


def _agent_output(conn: dict[str, t.Any], vm: str, argv: list[str]) -> str:
    """The stdout of ``argv`` run in the guest by the test itself through agent/exec (the check reads what the real
    guest holds, independently of the collection's code)."""
    token = conn["tokens"]["full"]
    headers = {"Authorization": f"PVEAPIToken={token['id']}={token['secret']}"}
    started = requests.post(
        conn["url"] + f"{vm}/agent/exec", json={"command": argv}, verify=conn["ca_file"], timeout=60, headers=headers
    )
    assert started.status_code == 200, started.text
    pid = started.json()["data"]["pid"]
    for _attempt in range(120):
        status = requests.get(
            conn["url"] + f"{vm}/agent/exec-status",
            params={"pid": pid},
            verify=conn["ca_file"],
            timeout=60,
            headers=headers,
        ).json()["data"]
        if status.get("exited"):
            assert status.get("exitcode") == 0, status
            return t.cast(str, status.get("out-data", ""))
        time.sleep(0.5)
    raise AssertionError(f"{argv} did not end in the guest")


def _profiles_run(
    tmp: Path,
    env: dict[str, str],
    admin: PvesimAdmin,
    conn: dict[str, t.Any],
    mapping: dict[str, t.Any],
    key: Path,
    timings: dict[str, t.Any],
) -> int:
    """Issue 35: a third guest from a definition with two profiles, provisioned by playbooks/provision.yml with no SSH
    client at all (``ANSIBLE_SSH_EXECUTABLE=/bin/false``): both roles run through the guest agent, each in its own
    journaled stage, and the real guest holds what they wrote. Returns its QEMU pid."""
    t0, since = time.monotonic(), time.time()
    sub = tmp / "profiles"
    sub.mkdir()
    definition = yaml.safe_load((HERE / "definition-profiles.yml").read_text(encoding="utf-8"))
    definition["access"]["sshPublicKeys"] = [key.with_suffix(".pub").read_text(encoding="utf-8").strip()]
    (sub / "definition.yml").write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")
    # the declarations in the profiles directory beside the catalog (the default profiles_path)
    (sub / "profiles").mkdir()
    for declaration in sorted((REPO / "examples" / "profiles").glob("*.yml")):
        (sub / "profiles" / declaration.name).write_text(declaration.read_text(encoding="utf-8"), encoding="utf-8")
    (sub / "catalog.yml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "vmanyware.dev/v1",
                "kind": "TemplateCatalog",
                "images": [dict(mapping, distroFamily="debian")],
            },
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    journal, confirm = sub / "journal", sub / "confirm.yml"
    env = dict(env, VMANYWARE_JOURNAL_DIR=str(journal), ANSIBLE_SSH_EXECUTABLE="/bin/false")
    extra = [
        "-e",
        f"vmanyware_catalog_path={sub / 'catalog.yml'}",
        "-e",
        f"vmanyware_definition_path={sub / 'definition.yml'}",
        "-e",
        f"vmanyware_target_vmid={PROFILES_VMID}",
        "-e",
        f"vmanyware_confirmation_file={confirm}",
        "-e",
        f"vmanyware_known_hosts_file={sub / 'known_hosts'}",
        "-e",
        f"provision_readiness_timeout={READINESS_TIMEOUT}",
    ]
    provision = str(REPO / "playbooks" / "provision.yml")
    _say("profiles run 1/2: without confirmation")
    rc, out = _playbook(sub, env, extra, "profiles1", timeout=600, playbook=provision)
    assert rc == 0 and confirm.exists(), out[-4000:]
    assert out.index("profile:base") < out.index("profile:ssh-hardening"), out[-4000:]
    _say("profiles run 2/2: with -e @confirm.yml, no SSH client")
    t_apply = time.monotonic()
    rc, out = _playbook(sub, env, [*extra, "-e", f"@{confirm}"], "profiles2", playbook=provision)
    timings["profiles_apply_s"] = round(time.monotonic() - t_apply, 1)
    assert rc == 0, out[-6000:]
    assert "profile 2/2 ssh-hardening: running role vmanyware.proxmox.profile_ssh_hardening through qga" in out

    docs = [json.loads(p.read_text(encoding="utf-8")) for p in journal.glob("op-*.json")]
    assert len(docs) == 1, [p.name for p in journal.iterdir()]
    op = docs[0]
    assert op["status"] == "completed" and all(s["status"] == "completed" for s in op["stages"]), op["status"]
    stages = {s["kind"]: s for s in op["stages"]}
    assert [kind for kind in stages if kind.startswith("profile:")] == ["profile:base", "profile:ssh-hardening"]
    for kind in ("profile:base", "profile:ssh-hardening"):
        evidence = stages[kind]["evidence"]
        assert evidence["transport"] == "qga" and evidence["failed"] == 0 and evidence["changed"] >= 1, evidence
        timings[f"{kind.replace(':', '_').replace('-', '_')}_s"] = evidence["seconds"]
    _say(
        f"profiles: base {stages['profile:base']['evidence']}, ssh-hardening {stages['profile:ssh-hardening']['evidence']}"
    )

    vm = f"/nodes/{NODE}/qemu/{PROFILES_VMID}"
    log = [e for e in admin.requests() if e["time"] >= since]
    assert [e for e in log if e.get("schema_errors")] == []
    assert _agent_output(conn, vm, ["cat", "/etc/motd"]).strip() == "acceptance-profiles"
    dropin = _agent_output(conn, vm, ["cat", "/etc/ssh/sshd_config.d/50-vmanyware-hardening.conf"])
    assert "PasswordAuthentication no" in dropin and "PermitRootLogin prohibit-password" in dropin, dropin
    assert _agent_output(conn, vm, ["getent", "group", "vmadmin"]).startswith("vmadmin:")
    # sshd took the drop-in: its effective configuration (sshd -T) says so
    effective = _agent_output(conn, vm, ["/usr/sbin/sshd", "-T"]).splitlines()
    assert "passwordauthentication no" in effective, effective
    # OpenSSH prints prohibit-password under its older name
    assert {"permitrootlogin without-password", "permitrootlogin prohibit-password"} & set(effective), effective
    timings["profiles_run_s"] = round(time.monotonic() - t0, 1)
    return int(admin.vm(PROFILES_VMID)["qemu_pid"])


def _static_run(  # noqa: C901
    tmp: Path,
    env: dict[str, str],
    admin: PvesimAdmin,
    conn: dict[str, t.Any],
    conn_file: Path,
    mapping: dict[str, t.Any],
    key: Path,
    timings: dict[str, t.Any],
) -> int:
    """Issue 34: provision a second guest whose definition names the static network ``usernet`` (10.0.2.50 inside
    QEMU's user-mode network), with the same acceptance.yml; returns its QEMU pid.

    The simulator shapes the guest's ``-netdev user`` after ``ipconfig0`` (``qemu_launch.slirp_network``: here slirp's
    own defaults) and forwards ``127.0.0.1:<ssh_forward_port>`` to 10.0.2.50:22, the static address itself: the
    controller cannot route into slirp, so that forward is the transport, and SSH checks the host key the role recorded
    under 10.0.2.50 (HostKeyAlias). Real cloud-init configures the address from Proxmox's network-config, the real
    agent reports it to readiness, and the checks over SSH show it static on eth0 with no DHCP client and no lease.
    """
    # pylint: disable=too-many-locals,too-many-statements
    t0, since = time.monotonic(), time.time()
    sub = tmp / "static"
    sub.mkdir()
    definition = yaml.safe_load((HERE / "definition-static.yml").read_text(encoding="utf-8"))
    definition["access"]["sshPublicKeys"] = [key.with_suffix(".pub").read_text(encoding="utf-8").strip()]
    assert definition["network"] == {"name": USERNET["name"], "ipv4": {"address": STATIC_ADDRESS}}
    definition_file, catalog = sub / "definition.yml", sub / "catalog.yml"
    definition_file.write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")
    catalog.write_text(
        yaml.safe_dump(
            {"apiVersion": "vmanyware.dev/v1", "kind": "TemplateCatalog", "images": [mapping], "networks": [USERNET]},
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    journal, confirm, known_hosts, results_file = (
        sub / "journal",
        sub / "confirm.yml",
        sub / "known_hosts",
        sub / "ssh-results.json",
    )
    env = dict(env, VMANYWARE_JOURNAL_DIR=str(journal))
    extra = [
        "-e",
        f"vmanyware_catalog_path={catalog}",
        "-e",
        f"vmanyware_definition_path={definition_file}",
        "-e",
        f"vmanyware_target_vmid={STATIC_VMID}",
        "-e",
        f"vmanyware_confirmation_file={confirm}",
        "-e",
        f"vmanyware_known_hosts_file={known_hosts}",
        "-e",
        f"acceptance_pvesim_connection_file={conn_file}",
        "-e",
        f"acceptance_ssh_private_key_file={key}",
        "-e",
        f"acceptance_results_file={results_file}",
        # no packages in this definition: the SSH play's dpkg check reads the server it logs in to
        "-e",
        "acceptance_package=openssh-server",
        "-e",
        f"provision_readiness_timeout={READINESS_TIMEOUT}",
    ]
    _say(f"static run 1/2: without confirmation (network usernet, {STATIC_ADDRESS})")
    rc, out = _playbook(sub, env, extra, "static1", timeout=600)
    assert rc == 0, out[-4000:]
    assert confirm.exists()
    assert [e for e in admin.requests() if e["method"] in MUTATING and e["time"] >= since] == []

    _say("static run 2/2: with -e @confirm.yml")
    t_apply = time.monotonic()
    rc, out = _playbook(sub, env, [*extra, "-e", f"@{confirm}"], "static2")
    timings["static_apply_s"] = round(time.monotonic() - t_apply, 1)
    assert rc == 0, out[-6000:]

    vm = f"/nodes/{NODE}/qemu/{STATIC_VMID}"
    log = [e for e in admin.requests() if e["time"] >= since]
    start = next(e["time"] for e in log if e["method"] == "POST" and e["path"] == f"{vm}/status/start")
    reads = [e["time"] for e in log if e["path"] == f"{vm}/agent/network-get-interfaces" and e["status"] == 200]
    timings["static_boot_to_address_s"] = round(max(reads) - start, 1)
    assert [e for e in log if e.get("schema_errors")] == []

    # what Proxmox holds: the static ipconfig0 and the network's DNS settings the cloudinit stage set
    config = admin.vm(STATIC_VMID)["config"]
    assert config["ipconfig0"] == f"ip={STATIC_ADDRESS}/24,gw=10.0.2.2", config
    assert config["nameserver"] == "10.0.2.3" and config["searchdomain"] == "acceptance.test", config

    # the operation: every stage completed, no packages stage; the handoff names the static address
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in journal.glob("op-*.json")]
    assert len(docs) == 1, [p.name for p in journal.iterdir()]
    op = docs[0]
    assert op["status"] == "completed" and all(s["status"] == "completed" for s in op["stages"]), op["status"]
    assert [s["kind"] for s in op["stages"]] == [
        "clone",
        "resources",
        "disk",
        "cloudinit",
        "seed",
        "start",
        "readiness",
    ]
    handoff = op["handoff"]
    assert handoff["ipv4"] == STATIC_ADDRESS and handoff.get("address", STATIC_ADDRESS) == STATIC_ADDRESS, handoff
    kh = [line for line in known_hosts.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    assert sorted(kh) == sorted(handoff["knownHosts"]) and all(line.startswith(f"{STATIC_ADDRESS} ") for line in kh)

    # the real guest agent reports the static address on eth0, and not slirp's DHCP address
    token = conn["tokens"]["full"]
    resp = requests.get(
        conn["url"] + f"{vm}/agent/network-get-interfaces",
        verify=conn["ca_file"],
        timeout=60,
        headers={"Authorization": f"PVEAPIToken={token['id']}={token['secret']}"},
    )
    assert resp.status_code == 200, resp.text
    eth0 = next(i for i in resp.json()["data"]["result"] if i["name"] == "eth0")
    v4 = [(a["ip-address"], a["prefix"]) for a in eth0["ip-addresses"] if a["ip-address-type"] == "ipv4"]
    assert v4 == [(STATIC_ADDRESS, 24)], eth0

    # the controller's way in: QEMU forwards the loopback port to the static address itself
    info = admin.vm(STATIC_VMID)
    port = int(info["ssh_forward_port"])
    assert info["guest_address"] == STATIC_ADDRESS, info
    cmdline = Path(f"/proc/{info['qemu_pid']}/cmdline").read_text(encoding="utf-8").split("\0")
    netdev = cmdline[cmdline.index("-netdev") + 1]
    assert f"hostfwd=tcp:127.0.0.1:{port}-{STATIC_ADDRESS}:22" in netdev.split(","), netdev

    # what acceptance.yml's SSH play saw (strict host key checking under the handed-over address)
    ssh = json.loads(results_file.read_text(encoding="utf-8"))
    _say(f"static run over SSH: {json.dumps(ssh)}")
    net = dict(line.split("=", 1) for line in ssh["network"] if "=" in line)
    assert ssh["user"] == "debian" and ssh["hostname"] == definition["name"] and ssh["sshPort"] == port
    assert ssh["cloudinit"].startswith("status: done") and ssh["handoffAddress"] == STATIC_ADDRESS
    # exactly the static address on eth0: no "dynamic" lifetime (a DHCP lease has one), no dhclient running
    assert net["eth0"].count(" inet ") == 1 and f" inet {STATIC_ADDRESS}/24 " in net["eth0"], net
    assert "dynamic" not in net["eth0"] and net["dhclient"] == "0", net
    assert net["ifupdown"] == "iface eth0 inet static|", net
    assert net["route"].startswith("default via 10.0.2.2 dev eth0"), net
    assert "nameserver 10.0.2.3" in net["resolv"].split("|") and net["dns"], net

    # and the test's own logins: the key recorded under the static address opens it, under slirp's DHCP address it fails
    res = _ssh(port, key, known_hosts, STATIC_ADDRESS, "ip -4 -o addr show scope global")
    assert res.returncode == 0 and [line.split()[3] for line in res.stdout.splitlines()] == [f"{STATIC_ADDRESS}/24"], (
        res.stdout,
        res.stderr,
    )
    res = _ssh(port, key, known_hosts, "10.0.2.15", "true")
    assert res.returncode == 255 and "Host key verification failed" in res.stderr, res.stderr
    timings["static_run_s"] = round(time.monotonic() - t0, 1)
    return int(info["qemu_pid"])


def test_provision_playbook_on_a_real_guest(request: pytest.FixtureRequest, tmp_path: Path) -> None:  # noqa: C901
    # pylint: disable=too-many-locals,too-many-statements
    if not _opted_in(request.config):
        pytest.skip(
            "real-guest acceptance is opt-in: tools/dev/acceptance.sh (pytest -m realguest, or PVESIM_REALGUEST=1)"
        )
    t_total = time.monotonic()
    timings: dict[str, t.Any] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    ensure_realguest_tools(_say)
    image_dir = _build_image(timings)

    key = tmp_path / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vmanyware-acceptance", "-f", str(key)], check=True
    )
    pubkey = key.with_suffix(".pub").read_text(encoding="utf-8").strip()
    definition = yaml.safe_load((HERE / "definition.yml").read_text(encoding="utf-8"))
    definition["access"]["sshPublicKeys"] = [pubkey]
    definition_file = tmp_path / "definition.yml"
    definition_file.write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")
    assert [p["name"] for p in definition["packages"]] == [PACKAGE]

    state = tmp_path / "sim"
    journal = tmp_path / "journal"
    confirm = tmp_path / "confirm.yml"
    known_hosts = tmp_path / "known_hosts"
    results_file = tmp_path / "ssh-results.json"
    proc, conn = _start_pvesim(state, image_dir)
    admin = PvesimAdmin(conn)
    qemu_pid = static_qemu_pid = profiles_qemu_pid = None
    provision_log: list[dict[str, t.Any]] | None = None
    try:
        env = dict(
            os.environ,
            PROXMOX_HOST=conn["host"],
            PROXMOX_PORT=str(conn["port"]),
            PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
            PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
            PROXMOX_CA_PATH=conn["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(journal),
            VMANYWARE_PROVISIONING_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_SSH_RETRIES="0",
            # one SSH round trip per module instead of four: each costs seconds on a TCG guest
            ANSIBLE_PIPELINING="1",
        )
        # 0. the template this run provisions from, built from the agent-less image on the real guest
        mapping = _template_build(tmp_path, env, admin, state / "connection.json", image_dir, timings)
        catalog = tmp_path / "catalog.yml"
        catalog.write_text(
            yaml.safe_dump(
                {"apiVersion": "vmanyware.dev/v1", "kind": "TemplateCatalog", "images": [mapping]}, sort_keys=False
            ),
            encoding="utf-8",
        )
        admin.clear_requests()
        extra = [
            "-e",
            f"vmanyware_catalog_path={catalog}",
            "-e",
            f"vmanyware_definition_path={definition_file}",
            "-e",
            f"vmanyware_target_vmid={VMID}",
            "-e",
            f"vmanyware_confirmation_file={confirm}",
            "-e",
            f"vmanyware_known_hosts_file={known_hosts}",
            "-e",
            f"acceptance_pvesim_connection_file={state / 'connection.json'}",
            "-e",
            f"acceptance_ssh_private_key_file={key}",
            "-e",
            f"acceptance_results_file={results_file}",
            "-e",
            f"acceptance_package={PACKAGE}",
            # the role's default (300 s) fits an idle 2-core machine (cloud-init done after 90-150 s under TCG); on a
            # 2-core machine shared with other test runs the first agent reply took up to 250 s (docs/real-guest.md)
            "-e",
            f"provision_readiness_timeout={READINESS_TIMEOUT}",
        ]

        # 1. without confirmation: plan + preflight, the confirmation file, nothing sent
        _say("run 1/2: without confirmation")
        rc, out = _playbook(tmp_path, env, extra, "run1", timeout=600)
        assert rc == 0, out[-4000:]
        assert confirm.exists() and "provision_confirmation:" in confirm.read_text(encoding="utf-8")
        assert [e for e in admin.requests() if e["method"] in MUTATING] == []
        assert not results_file.exists()

        # 2. with the reviewed confirmation: every stage on the real guest, then the SSH play
        _say("run 2/2: with -e @confirm.yml")
        t_apply = time.monotonic()
        rc, out = _playbook(tmp_path, env, [*extra, "-e", f"@{confirm}"], "run2")
        timings["playbook_apply_s"] = round(time.monotonic() - t_apply, 1)
        apply_end = time.time()
        assert rc == 0, out[-6000:]
        info = admin.vm(VMID)
        qemu_pid = info["qemu_pid"]
        log = admin.requests()
        last_agent = max(e["time"] for e in log if "/agent/" in e["path"])
        timings["packages_done_to_playbook_end_s"] = round(
            apply_end - last_agent, 1
        )  # summary, SSH play, operation check

        # the simulator's request log: each mutation exactly once, one apt-get install exec
        sent = [f"{e['method']} {e['path']}" for e in log if e["method"] in MUTATING]
        vm = f"/nodes/{NODE}/qemu/{VMID}"
        assert sent.count(f"POST /nodes/{NODE}/qemu/{TEMPLATE_VMID}/clone") == 1, sent  # the template built above
        assert sent.count(f"POST {vm}/status/start") == 1, sent
        assert sent.count(f"PUT {vm}/resize") == 1, sent
        execs = [_command(e) for e in log if e["method"] == "POST" and e["path"] == f"{vm}/agent/exec"]
        installs = [c for c in execs if "install" in c]
        assert len(installs) == 1 and installs[0][-1] == PACKAGE, execs
        assert sum(1 for c in execs if "update" in c) == 1, execs
        assert [e for e in log if e.get("schema_errors")] == []

        # the operation: completed, every stage completed (the playbook's last play asserted it through operation_info too)
        docs = [json.loads(p.read_text(encoding="utf-8")) for p in journal.glob("op-*.json")]
        assert len(docs) == 1, [p.name for p in journal.iterdir()]
        op = docs[0]
        assert op["status"] == "completed" and all(s["status"] == "completed" for s in op["stages"]), op["status"]
        assert [s["kind"] for s in op["stages"]] == [
            "clone",
            "resources",
            "disk",
            "cloudinit",
            "seed",
            "start",
            "readiness",
            "packages",
        ]
        handoff = op["handoff"]
        assert handoff["ipv4"] == "10.0.2.15", handoff

        # what the SSH play saw (strict host key checking against the role's known_hosts, through the forward)
        ssh = json.loads(results_file.read_text(encoding="utf-8"))
        _say(f"over SSH: {json.dumps(ssh)}")
        assert ssh["user"] == "debian" and ssh["hostname"] == definition["name"]
        assert ssh["dpkg"].startswith("install ok installed ") and ssh["cloudinit"].startswith("status: done")
        assert ssh["handoffAddress"] == "10.0.2.15" and " inet 10.0.2.15/" in ssh["eth0"]
        # slirp's DHCP lease: a "dynamic" lifetime and dhclient running (the static run below shows neither)
        net = dict(line.split("=", 1) for line in ssh["network"] if "=" in line)
        assert " dynamic " in net["eth0"] and net["dhclient"] != "0" and net["ifupdown"] == "iface eth0 inet dhcp|", net
        assert ssh["sshPort"] == info["ssh_forward_port"]
        # the disk stage grew the overlay; cloud-init's resize_rootfs grew the filesystem (ext4 overhead < 5 %)
        assert ssh["rootBytes"] > 0.95 * definition["resources"]["diskGiB"] * 2**30, ssh["rootBytes"]
        # the user-data cloud-init consumed is the one the seed stage verified (hash) and Proxmox's dump still shows
        seed_stage = next(s for s in op["stages"] if s["kind"] == "seed")
        resp = requests.get(
            conn["url"] + f"{vm}/cloudinit/dump",
            params={"type": "user"},
            verify=conn["ca_file"],
            timeout=30,
            headers={"Authorization": f"PVEAPIToken={conn['tokens']['full']['id']}={conn['tokens']['full']['secret']}"},
        )
        dump_hash = hashlib.sha256(resp.json()["data"].encode("utf-8")).hexdigest()
        assert ssh["userDataSha256"] == seed_stage["evidence"]["seedHashes"]["user"] == dump_hash

        # the role's known_hosts holds exactly the agent-verified keys under the handed-over address
        kh = [
            line for line in known_hosts.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
        ]
        assert sorted(kh) == sorted(handoff["knownHosts"]) and all(line.startswith("10.0.2.15 ") for line in kh), kh
        # and strict checking is really in force: the same login under another address is refused
        res = _ssh(info["ssh_forward_port"], key, known_hosts, "10.0.2.16", "true")
        assert res.returncode == 255 and "Host key verification failed" in res.stderr, res.stderr

        # 3. the journal inventory plugin feeds a play that logs in with the plugin's strict host key options; as in
        # acceptance.yml only the transport changes (compose: the loopback forward, HostKeyAlias = the recorded address)
        _say("run 3: a play on the vmanyware.proxmox.journal inventory")
        source = tmp_path / "provisioned.vmanyware_journal.yml"
        source.write_text(
            json.dumps(
                {
                    "plugin": "vmanyware.proxmox.journal",
                    "journal_dir": str(journal),
                    "compose": {
                        "ansible_ssh_common_args": "ansible_ssh_common_args ~ ' -o HostKeyAlias=' ~ ansible_host",
                        "ansible_host": "'127.0.0.1'",
                        "ansible_port": str(int(info["ssh_forward_port"])),
                    },
                }
            ),
            encoding="utf-8",
        )
        inventory_results = tmp_path / "inventory-results.json"
        rc, out = _playbook(
            tmp_path,
            env,
            [
                "-i",
                str(source),
                "-e",
                f"ansible_ssh_private_key_file={key}",
                "-e",
                f"acceptance_results_file={inventory_results}",
            ],
            "run3",
            timeout=600,
            playbook="inventory.yml",
        )
        assert rc == 0, out[-4000:]
        seen = json.loads(inventory_results.read_text(encoding="utf-8"))
        _say(f"over SSH from the journal inventory: {json.dumps(seen)}")
        assert seen["host"] == f"{definition['name']}-{VMID}" and seen["operation"] == op["operationId"]
        assert seen["user"] == "debian" and seen["hostname"] == definition["name"]
        assert (
            "-o StrictHostKeyChecking=yes" in seen["sshArgs"]
            and f"UserKnownHostsFile={journal / 'known_hosts' / op['operationId']}" in seen["sshArgs"]
        )
        assert sorted((journal / "known_hosts" / op["operationId"]).read_text(encoding="utf-8").splitlines()) == sorted(
            handoff["knownHosts"]
        )

        # 3b. issue 35: the same configure play over SSH and through the guest agent, timed (the provisioning
        # timings come from the request log before it, which these agent calls would extend)
        provision_log = admin.requests()
        timings.update(_configure_both_ways(tmp_path, env, journal, key, int(info["ssh_forward_port"]), admin))

        # 4. issue 34: a second guest on a static address in QEMU's user-mode network, SSH to that address
        _say(f"static run: VM {STATIC_VMID} on the static network {USERNET['name']} ({STATIC_ADDRESS})")
        static_qemu_pid = _static_run(tmp_path, env, admin, conn, state / "connection.json", mapping, key, timings)

        # 5. issue 35: a third guest with two profiles, provisioned with no SSH client, its profiles through the agent
        _say(f"profiles run: VM {PROFILES_VMID} with profiles base and ssh-hardening, no SSH")
        profiles_qemu_pid = _profiles_run(tmp_path, env, admin, conn, mapping, key, timings)
    finally:
        try:
            timings["accel"] = admin.vm(VMID).get("accel")
            _timings_from_log(admin.requests() if provision_log is None else provision_log, timings)
        except Exception as exc:  # pylint: disable=broad-exception-caught  # timings are best effort when a step failed
            _say(f"some timings unavailable: {exc!r}")
        _say(
            f"simulator log {state / 'pvesim.log'}, guest console {state / f'vm-{VMID}.console.log'}, playbook logs {tmp_path}/run*.log"
        )
        rc = _stop_pvesim(proc)
        time.sleep(0.5)
        leftovers = _qemu_pids(state)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        timings["total_s"] = round(time.monotonic() - t_total, 1)
        _say(f"timings: {json.dumps(timings)}")
        for path in filter(
            None, [str(tmp_path / "acceptance-timings.json"), os.environ.get("VMANYWARE_ACCEPTANCE_TIMINGS")]
        ):
            Path(path).write_text(json.dumps(timings, indent=1) + "\n", encoding="utf-8")
    # no QEMU survives the simulator
    assert rc == 0, (state / "pvesim.log").read_text(errors="replace")[-3000:]
    assert leftovers == []
    assert qemu_pid is not None and not _alive(qemu_pid)
    assert static_qemu_pid is not None and not _alive(static_qemu_pid)
    assert profiles_qemu_pid is not None and not _alive(profiles_qemu_pid)
