# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container acceptance (issue 21): the shipped provision playbook end to end against pvesim ``--containers real``.

plan -> preflight -> confirmation -> template (the simulator's appliance index) -> create, start (a real LXC
container from Debian's mirror, docs/containers.md) -> readiness (the address appears once the container's
real sshd answers) -> packages over SSH (the operator's key, ``ansible.builtin.apt`` from Debian's mirror, the
provisioning gate re-read before each write) -> snapshot (gated; a record of the simulator: the real tree is not
copied). Trust is explicit: ``provision_trust_on_first_use: true``, and the test compares the fingerprint the role
printed with the container's own host key. Then ``lxc-attach`` proves the package is really installed, and the
container is deleted through the API; every container is stopped and destroyed in ``finally`` too.

Opt-in like the real-guest acceptance (``-m realcontainer`` or ``PVESIM_REALCONTAINER=1``); the one command is
``tools/dev/acceptance.sh``. Timings are printed and written to ``$VMANYWARE_ACCEPTANCE_TIMINGS`` (with ``-container``) when set.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml
from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin, build_container_rootfs, ensure_realcontainer_tools, lxc_cleanup, start_server

pytestmark = [pytest.mark.slow, pytest.mark.realcontainer]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
NODE = "pve-test"
CTID = 201
PACKAGE = "hello"
MUTATING = ("POST", "PUT", "DELETE")


def _say(msg: str) -> None:
    sys.stdout.write(f"[ct-acceptance] {msg}\n")
    sys.stdout.flush()


def _playbook(tmp: Path, env: dict[str, str], extra: list[str], name: str) -> tuple[int, str]:
    argv = [str(BIN / "ansible-playbook"), "vmanyware.proxmox.provision", *extra]
    res = subprocess.run(argv, env=env, cwd=str(tmp), capture_output=True, text=True, timeout=900, check=False)
    (tmp / f"{name}.log").write_text(res.stdout + res.stderr, encoding="utf-8")
    return res.returncode, res.stdout + res.stderr


def _attach(lxcpath: Path, *argv: str) -> str:
    res = subprocess.run(
        ["lxc-attach", "-P", str(lxcpath), "-n", f"ct{CTID}", "--", *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_provision_playbook_on_a_real_container(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # pylint: disable=too-many-locals,too-many-statements
    if os.environ.get("PVESIM_REALCONTAINER") != "1" and "realcontainer" not in (
        request.config.getoption("markexpr") or ""
    ):
        pytest.skip(
            "real-container acceptance is opt-in: tools/dev/acceptance.sh (pytest -m realcontainer, or PVESIM_REALCONTAINER=1)"
        )
    t_total = time.monotonic()
    timings: dict[str, t.Any] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    ensure_realcontainer_tools(_say)
    timings["tools_s"] = round(time.monotonic() - t_total, 1)
    rootfs, timings["rootfs_build_s"] = build_container_rootfs(str(REPO), _say)

    key = tmp_path / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "vmanyware-ct-acceptance", "-f", str(key)], check=True
    )
    definition = yaml.safe_load((HERE / "definition-container.yml").read_text(encoding="utf-8"))
    definition["access"]["sshPublicKeys"] = [key.with_suffix(".pub").read_text(encoding="utf-8").strip()]
    definition_file = tmp_path / "definition.yml"
    definition_file.write_text(yaml.safe_dump(definition, sort_keys=False), encoding="utf-8")

    state = tmp_path / "sim"
    state.mkdir()
    lxcpath = state / "lxc"
    journal = tmp_path / "journal"
    confirm = tmp_path / "confirm.yml"
    known_hosts = tmp_path / "known_hosts"
    proc, conn = start_server(str(state), speed=50, extra=["--containers", "real", "--container-rootfs", rootfs])
    try:
        admin = PvesimAdmin(conn)
        from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel
        from pvesim.lxc import TEMPLATE_STORAGE_ACL  # pylint: disable=import-outside-toplevel

        admin.set_token(conn["tokens"]["full"]["id"], privileges={**FULL_TOKEN_ACL, **TEMPLATE_STORAGE_ACL})
        env = dict(
            os.environ,
            PROXMOX_HOST=conn["host"],
            PROXMOX_PORT=str(conn["port"]),
            PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
            PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
            PROXMOX_CA_PATH=conn["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(journal),
            VMANYWARE_PROVISIONING_ENABLED="true",
            VMANYWARE_SNAPSHOTS_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_PIPELINING="1",
        )
        ssh_port = 20000 + CTID % 10000  # pvesim.realcontainer: sshd of CT <vmid> on 127.0.0.1:<20000 + vmid % 10000>
        extra = [
            "-e",
            f"vmanyware_catalog_path={REPO / 'examples' / 'catalog-containers.yml'}",
            "-e",
            f"vmanyware_definition_path={definition_file}",
            "-e",
            f"vmanyware_target_vmid={CTID}",
            "-e",
            f"vmanyware_confirmation_file={confirm}",
            "-e",
            f"vmanyware_known_hosts_file={known_hosts}",
            # the SSH transport to the container: its loopback port; the host key stays keyed on the recorded address
            "-e",
            "provision_container_ssh_host=127.0.0.1",
            "-e",
            f"provision_container_ssh_port={ssh_port}",
            "-e",
            f"provision_ssh_private_key_file={key}",
            "-e",
            "provision_trust_on_first_use=true",
        ]

        # 1. without confirmation: plan + preflight, the confirmation file, nothing sent
        t0 = time.monotonic()
        rc, out = _playbook(tmp_path, env, extra, "run1")
        timings["plan_preflight_s"] = round(time.monotonic() - t0, 1)
        assert rc == 0, out[-4000:]
        assert "provision_confirmation:" in confirm.read_text(encoding="utf-8")
        assert [e for e in admin.requests() if e["method"] in MUTATING] == []

        # 2. confirmed: every stage, on the real container
        t0 = time.monotonic()
        rc, out = _playbook(tmp_path, env, [*extra, "-e", f"@{confirm}"], "run2")
        timings["playbook_apply_s"] = round(time.monotonic() - t0, 1)
        assert rc == 0, out[-6000:]
        log = admin.requests()
        sent = [f"{e['method']} {e['path']}" for e in log if e["method"] in MUTATING]
        ct = f"/nodes/{NODE}/lxc/{CTID}"
        assert sent == [
            f"POST /nodes/{NODE}/aplinfo",
            f"POST /nodes/{NODE}/lxc",
            f"POST {ct}/status/start",
            f"POST {ct}/snapshot",
        ], sent
        assert [e for e in log if e.get("schema_errors")] == []
        (doc_path,) = journal.glob("op-*.json")
        op = json.loads(doc_path.read_text(encoding="utf-8"))
        assert op["status"] == "completed"
        assert [(s["kind"], s["status"]) for s in op["stages"]] == [
            (kind, "completed") for kind in ("template", "create", "start", "readiness", "packages", "snapshot")
        ]
        address = op["handoff"]["ipv4"]
        packages = next(s for s in op["stages"] if s["kind"] == "packages")["evidence"]

        # the package, really installed inside the container, in the version the stage recorded
        status = _attach(lxcpath, "dpkg-query", "-W", "-f", "${Status} ${Version}", PACKAGE)
        assert status == f"install ok installed {packages['installed'][PACKAGE]}", (status, packages)
        assert packages["installedBy"] == "ssh"
        assert _attach(lxcpath, "hostname") == definition["name"]
        # trust was explicit: the fingerprint the role printed is the container's own host key, recorded under the address
        own = _attach(lxcpath, "ssh-keygen", "-lf", "/etc/ssh/ssh_host_ed25519_key.pub").split()[1]
        assert own in out and "trusted on first use (provision_trust_on_first_use: true)" in out
        recorded = subprocess.run(
            ["ssh-keygen", "-lf", str(known_hosts)], capture_output=True, text=True, check=True
        ).stdout.split()
        assert recorded[1] == own, recorded
        assert (
            subprocess.run(
                ["ssh-keygen", "-F", address, "-f", str(known_hosts)], capture_output=True, check=False
            ).returncode
            == 0
        )
        api = ProxmoxAPI(
            conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"]
        )
        snapshots = [s["name"] for s in api.nodes(NODE).lxc(CTID).snapshot.get() if s["name"] != "current"]
        assert len(snapshots) == 1 and re.fullmatch(r"vmanyware-[0-9a-z-]+", snapshots[0]), snapshots

        # 3. clean up through the API: stop, then delete (the real container and its tree go)
        t0 = time.monotonic()
        node = api.nodes(NODE)
        for call in (node.lxc(CTID).status.stop.post, node.lxc(CTID).delete):
            upid = call()
            while (status_ := node.tasks(upid).status.get())["status"] != "stopped":
                time.sleep(0.3)
            assert status_["exitstatus"] == "OK", status_
        assert not (lxcpath / f"ct{CTID}").exists()
        timings["cleanup_s"] = round(time.monotonic() - t0, 1)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=120)
        leftovers = lxc_cleanup(str(lxcpath))
        timings["total_s"] = round(time.monotonic() - t_total, 1)
        _say(f"simulator state {state}, playbook logs {tmp_path}/run*.log; destroyed in cleanup: {leftovers}")
        _say(f"timings: {json.dumps(timings)}")
        if os.environ.get("VMANYWARE_ACCEPTANCE_TIMINGS"):
            Path(os.environ["VMANYWARE_ACCEPTANCE_TIMINGS"] + "-container").write_text(
                json.dumps(timings, indent=1) + "\n", encoding="utf-8"
            )
    assert leftovers == []
