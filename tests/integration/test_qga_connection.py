# SPDX-License-Identifier: GPL-3.0-or-later
"""The connection plugin vmanyware.proxmox.qga in real ``ansible-playbook`` runs against the simulator's default guest:
raw commands, put_file then a read-back, fetch_file, a lost exec reply never re-sent, and the TLS rules (nothing is sent
over unverified TLS or to a server that fails the pin). docs/guest-agent-connection.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import typing as t
from pathlib import Path

import pytest
import yaml

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tasks import wait_task

NODE = "pve-test"
VMID = 201
EXEC = r"/qemu/201/agent/exec$"


def running_vm(conn: dict[str, t.Any]) -> None:
    """VM 201 cloned from the simulator's template 9000, started, its agent answering."""
    settings = build_settings(
        host=conn["host"],
        port=conn["port"],
        token_id=conn["tokens"]["full"]["id"],
        token_secret=conn["tokens"]["full"]["secret"],
        ca_path=conn["ca_file"],
        timeout=10,
    )
    with ProxmoxClient(settings) as client:
        node = "/nodes/%s/qemu" % NODE
        upid = client.post(node + "/9000/clone", newid=VMID, name="qga-1", full=1)
        assert wait_task(client, upid, timeout=60).status == "ok"
        assert wait_task(client, client.post(node + "/%d/status/start" % VMID), timeout=60).status == "ok"
        deadline = time.monotonic() + 60
        while True:
            try:
                client.post(node + "/%d/agent/ping" % VMID)
                return
            except Exception:  # pylint: disable=broad-exception-caught  # not up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def playbook(tmp_path: Path, tasks: list[dict[str, t.Any]], hostvars: dict[str, t.Any] | None = None) -> Path:
    inventory = {
        "all": {
            "hosts": {
                "qga-1": dict(
                    {"ansible_connection": "vmanyware.proxmox.qga", "vmanyware_vmid": VMID, "vmanyware_node": NODE},
                    **(hostvars or {}),
                )
            }
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    play = [{"name": "In the guest", "hosts": "qga-1", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    return tmp_path / "play.yml"


def run(pvesim: t.Any, tmp_path: Path, path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    conn = pvesim.connection
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")}
    env.update(
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    env.update(extra)
    for name in [key for key, value in env.items() if value == ""]:
        del env[name]  # unset
    ansible_playbook = str(Path(sys.executable).parent / "ansible-playbook")
    return subprocess.run(
        [ansible_playbook, "-i", str(tmp_path / "inventory.yml"), str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_raw_put_and_fetch_run_through_the_guest_agent(pvesim: t.Any, tmp_path: Path) -> None:
    running_vm(pvesim.connection)
    source = tmp_path / "motd"
    source.write_text("written through file-write\n" * 3000, encoding="utf-8")  # 81 KB: two parts
    tasks = [
        {"name": "hostname", "ansible.builtin.raw": "cat /etc/hostname", "register": "hostname"},
        {"name": "show", "ansible.builtin.debug": {"msg": "HOSTNAME={{ hostname.stdout | trim }}"}},
    ]
    done = run(pvesim, tmp_path, playbook(tmp_path, tasks))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r'"msg": "HOSTNAME=[a-z0-9][a-z0-9.-]*"', done.stdout), done.stdout  # cat ran in the guest
    execs = pvesim.requests("POST", EXEC)
    assert len(execs) == 1 and pvesim.requests("GET", r"/agent/exec-status$")
    assert pvesim.schema_violations() == []

    script = tmp_path / "transfer.py"
    script.write_text(TRANSFER, encoding="utf-8")
    conn = pvesim.connection
    env = dict(
        os.environ,
        PROXMOX_HOST=conn["host"],
        PROXMOX_PORT=str(conn["port"]),
        PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
        PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
        PROXMOX_CA_PATH=conn["ca_file"],
    )
    out = subprocess.run(
        [sys.executable, str(script), os.environ["ANSIBLE_COLLECTIONS_PATH"], str(source), str(tmp_path / "back")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "rc=0 same=True fetched=True", out.stdout + out.stderr
    assert (tmp_path / "back").read_bytes() == source.read_bytes()
    writes = pvesim.requests("POST", r"/agent/file-write$")
    assert len(writes) == 2  # 81 KB in two base64 parts, joined by one exec
    assert pvesim.schema_violations() == []


# put_file, a raw read-back and fetch_file through Ansible's own connection loader (what a copy task calls).
TRANSFER = r"""
import sys
from ansible.plugins.loader import connection_loader, init_plugin_loader, shell_loader
from ansible.playbook.play_context import PlayContext
init_plugin_loader([sys.argv[1]])
conn = connection_loader.get("vmanyware.proxmox.qga", PlayContext(), None)
conn.set_options(var_options={"vmanyware_vmid": 201, "vmanyware_node": "pve-test"})
conn._shell = shell_loader.get("sh")
conn.put_file(sys.argv[2], "/etc/motd")
rc, out, err = conn.exec_command("/bin/sh -c 'cat /etc/motd'")
same = out == open(sys.argv[2], "rb").read()
conn.fetch_file("/etc/motd", sys.argv[3])
fetched = open(sys.argv[3], "rb").read() == out
conn.close()
print("rc=%d same=%s fetched=%s" % (rc, same, fetched))
"""


def test_a_lost_exec_reply_fails_the_host_and_is_not_sent_again(pvesim: t.Any, tmp_path: Path) -> None:
    running_vm(pvesim.connection)
    pvesim.clear_requests()
    pvesim.add_fault("POST", EXEC, "drop_reply", occurrence=1)
    done = run(pvesim, tmp_path, playbook(tmp_path, [{"name": "id", "ansible.builtin.raw": "cat /etc/hostname"}]))
    assert done.returncode != 0
    assert "[qga_exec_outcome_unknown]" in done.stdout and "UNREACHABLE" in done.stdout
    assert len(pvesim.requests("POST", EXEC)) == 1 and pvesim.requests("GET", r"/agent/exec-status$") == []
    assert pvesim.connection["tokens"]["full"]["secret"] not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"PROXMOX_VALIDATE_CERTS": "false", "PROXMOX_CA_PATH": ""}, "[tls_unverified]"),
        (
            {"PROXMOX_VALIDATE_CERTS": "false", "PROXMOX_CA_PATH": "", "PROXMOX_UNVERIFIED_TLS_READ_ONLY": "true"},
            "[tls_unverified]",
        ),
        ({"PROXMOX_FINGERPRINT": "00" * 32}, "[tls_verification_failed]"),
    ],
    ids=["validate_certs_false", "read_only_opt_in", "wrong_pin"],
)
def test_unverified_or_wrongly_pinned_tls_sends_no_exec(
    pvesim: t.Any, tmp_path: Path, extra: dict[str, str], code: str
) -> None:
    running_vm(pvesim.connection)
    pvesim.clear_requests()
    done = run(pvesim, tmp_path, playbook(tmp_path, [{"name": "id", "ansible.builtin.raw": "id"}]), **extra)
    assert done.returncode != 0 and code in done.stdout, done.stdout + done.stderr
    assert pvesim.requests(path_regex=r"/agent/") == []
    assert pvesim.connection["tokens"]["full"]["secret"] not in done.stdout + done.stderr
