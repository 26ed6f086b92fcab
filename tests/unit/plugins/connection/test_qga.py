# SPDX-License-Identifier: GPL-3.0-or-later
"""The connection plugin vmanyware.proxmox.qga over a fake client: options and their precedence, verified TLS only,
become, files, and the fixed errors Ansible sees (docs/guest-agent-connection.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
from ansible.errors import AnsibleConnectionFailure, AnsibleError
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import become_loader, shell_loader
from pve_fake import FakeClient
from qga_guest_fake import AGENT, NODE, VMID, FakeGuest

from ansible_collections.vmanyware.proxmox.plugins.connection import qga
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.guest_agent import EXEC_NAME
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import map_http_error, provider_error

SECRET = "0b5e55ed-5ec2-4e7a-9c3d-5ec2e7a9c3d1"
ROOT = next(Path(p) for p in sys.path if (Path(p) / "ansible_collections" / "vmanyware" / "proxmox").is_dir())
# The options as Ansible's config would resolve them from these host vars (set directly: the collection is imported as a
# plain package in the unit tests, so the plugin loader cannot load it here; test_option_precedence runs the real loader).
DEFAULTS: dict[str, t.Any] = {
    "api_host": None,
    "api_port": 8006,
    "api_user": None,
    "api_token_id": None,
    "api_token_secret": None,
    "api_password": None,
    "validate_certs": True,
    "ca_path": None,
    "api_fingerprint": None,
    "api_timeout": 30.0,
    "unverified_tls_read_only": False,
    "api_connection": None,
    "vmid": None,
    "node": None,
    "command_timeout": 600.0,
    "file_size_limit": 64 * 1024 * 1024,
    "status_rereads": 3,
}
BASE = {
    "vmid": VMID,
    "node": NODE,
    "api_host": "pve.example.invalid",
    "api_token_id": "ops@pve!ansible",
    "api_token_secret": SECRET,
    "api_fingerprint": "ab" * 32,
}


def connection(options: dict[str, t.Any] | None = None, guest: FakeGuest | None = None) -> t.Any:
    conn = qga.Connection(PlayContext(), None)
    given = {key: value for key, value in dict(BASE, **(options or {})).items() if value is not None}  # None: unset
    conn._options = dict(DEFAULTS, **given)  # pylint: disable=protected-access
    conn._origins = {name: ("var: vmanyware_qga_%s" % name if name in given else "default") for name in DEFAULTS}  # pylint: disable=protected-access
    conn._shell = shell_loader.get("sh")  # pylint: disable=protected-access  # as the task executor sets it
    built: list[t.Any] = []

    def client(settings: t.Any) -> t.Any:
        built.append(settings)
        fake = guest.client if guest is not None else FakeClient()
        fake.close = lambda: None  # type: ignore[attr-defined]
        return fake

    conn.built = built
    qga.ProxmoxClient = client
    return conn


@pytest.fixture(autouse=True)
def _restore_client() -> t.Iterator[None]:
    original = qga.ProxmoxClient
    yield
    qga.ProxmoxClient = original


def test_ansible_doc_renders_the_plugin_with_the_shared_options() -> None:
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "connection", "--json", "vmanyware.proxmox.qga"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    doc = json.loads(out.stdout)["vmanyware.proxmox.qga"]["doc"]
    options = doc["options"]
    assert {"api_host", "api_token_secret", "ca_path", "api_fingerprint", "vmid", "node", "command_timeout"} <= set(
        options
    )
    assert (
        options["api_host"]["env"] == [{"name": "PROXMOX_HOST"}]
        and "Host name" in options["api_host"]["description"][0]
    )
    assert {"name": "vmanyware_vmid"} in options["vmid"]["vars"] and options["api_port"]["default"] == 8006


PRECEDENCE = """
import json, sys
from ansible.plugins.loader import connection_loader, init_plugin_loader
from ansible.playbook.play_context import PlayContext
init_plugin_loader([sys.argv[1]])
from ansible_collections.vmanyware.proxmox.plugins.connection import qga
built = []
class Stop(Exception):
    pass
def client(settings):
    built.append(settings)
    raise Stop()
qga.ProxmoxClient = client
for variables in json.loads(sys.argv[2]):
    conn = connection_loader.get("vmanyware.proxmox.qga", PlayContext(), None)
    conn.set_options(var_options=variables)
    try:
        conn._connect()
    except Stop:
        pass
print(json.dumps([[s.host, s.port, s.timeout] for s in built]))
"""


def test_option_precedence_var_then_mapping_then_environment(tmp_path: Path) -> None:
    """Through Ansible's real plugin loader and config: the option's variable, the mapping, PROXMOX_*, the default."""
    common = {
        "vmanyware_vmid": VMID,
        "vmanyware_node": NODE,
        "vmanyware_qga_api_token_id": "ops@pve!ansible",
        "vmanyware_qga_api_token_secret": SECRET,
    }
    runs = [
        dict(
            common,
            vmanyware_connection={"api_host": "mapping.invalid", "api_port": 9000, "api_timeout": 7},
            vmanyware_qga_api_host="var.invalid",
        ),
        dict(common, vmanyware_connection={"api_port": 9000}),
        dict(common, vmanyware_qga_api_connection={}),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXMOX_")}
    env.update(PROXMOX_HOST="env.invalid", PROXMOX_FINGERPRINT="ab" * 32, PROXMOX_TIMEOUT="12")
    script = tmp_path / "precedence.py"
    script.write_text(PRECEDENCE, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script), str(ROOT), json.dumps(runs)], env=env, capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [
        ["var.invalid", 9000, 7.0],  # the option's own variable over the mapping; the mapping over PROXMOX_TIMEOUT
        ["env.invalid", 9000, 12.0],  # the mapping over the default; the environment where the mapping says nothing
        ["env.invalid", 8006, 12.0],  # the default port
    ]


@pytest.mark.parametrize(
    "variables",
    [
        {"api_fingerprint": None, "validate_certs": False},
        {
            "api_fingerprint": None,
            "validate_certs": False,
            "unverified_tls_read_only": True,
        },
    ],
    ids=["unverified", "read_only_opt_in"],
)
def test_unverified_tls_refuses_before_any_request(variables: dict[str, t.Any]) -> None:
    guest = FakeGuest()
    conn = connection(variables, guest)
    with pytest.raises(AnsibleConnectionFailure) as err:
        conn.exec_command("id")
    assert str(err.value).startswith("[tls_unverified]") and SECRET not in str(err.value)
    assert conn.built == [] and guest.client.log == []


def test_exec_returns_bytes_and_runs_the_command_as_the_scripts_argument() -> None:
    guest = FakeGuest()
    guest.results.append({"exited": 1, "exitcode": 0, "out-data": "pve-guest\n"})
    conn = connection(guest=guest)
    assert conn.exec_command("/bin/sh -c 'cat /etc/hostname'") == (0, b"pve-guest\n", b"")
    assert guest.commands[0][3:] == [EXEC_NAME, "/bin/sh -c 'cat /etc/hostname'"]


def test_become_sudo_wraps_the_command_and_sends_the_password_as_stdin() -> None:
    guest = FakeGuest()
    conn = connection(guest=guest)
    sudo = become_loader.get("sudo")
    sudo.set_options(direct={"become_user": "app", "become_pass": SECRET})
    conn.set_become_plugin(sudo)
    cmd = sudo.build_become_command("/bin/sh -c 'id -un'", conn._shell)  # pylint: disable=protected-access
    conn.exec_command(cmd)
    sent = guest.commands[0][4]
    assert sent == cmd and sent.startswith("sudo -H -S -p ") and "-u app" in sent and "BECOME-SUCCESS-" in sent
    assert SECRET not in sent and guest.stdin == [SECRET + "\n"]


def test_become_su_without_password_sends_no_stdin() -> None:
    guest = FakeGuest()
    conn = connection(guest=guest)
    su = become_loader.get("su")
    su.set_options(direct={"become_user": "app"})
    conn.set_become_plugin(su)
    cmd = su.build_become_command("/bin/sh -c 'id -un'", conn._shell)  # pylint: disable=protected-access
    conn.exec_command(cmd)
    assert guest.commands[0][4].startswith("su  app -c ") and guest.stdin == [None]


def test_put_and_fetch_round_trip_binary_files(tmp_path: Path) -> None:
    guest = FakeGuest(read_limit=4096)
    conn = connection(guest=guest)
    data = os.urandom(200_000)
    (tmp_path / "in").write_bytes(data)
    conn.put_file(str(tmp_path / "in"), "/root/.ansible/tmp/a/payload")
    assert guest.files == {"/root/.ansible/tmp/a/payload": data}
    conn.fetch_file("/root/.ansible/tmp/a/payload", str(tmp_path / "out"))
    assert (tmp_path / "out").read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == ["in", "out"]


def test_a_fetch_over_the_limit_leaves_no_local_file(tmp_path: Path) -> None:
    guest = FakeGuest(read_limit=100)
    guest.files["/var/log/big"] = b"z" * 1000
    conn = connection({"file_size_limit": 500}, guest)
    with pytest.raises(AnsibleError) as err:
        conn.fetch_file("/var/log/big", str(tmp_path / "big"))
    assert str(err.value).startswith("[qga_file_too_large]") and list(tmp_path.iterdir()) == []
    (tmp_path / "large").write_bytes(b"x" * 501)
    with pytest.raises(AnsibleError) as err:
        conn.put_file(str(tmp_path / "large"), "/tmp/large")
    assert str(err.value).startswith("[qga_file_too_large]") and not guest.client.calls("POST")


@pytest.mark.parametrize(
    ("route", "failure", "code", "unreachable"),
    [
        (
            "POST %s/exec",
            provider_error("reply_lost", "x", method="POST", path=AGENT + "/exec"),
            "qga_exec_outcome_unknown",
            True,
        ),
        (
            "POST %s/exec",
            map_http_error("POST", AGENT + "/exec", 500, "", {"message": "QEMU guest agent is not running"}),
            "qga_agent_unavailable",
            True,
        ),
        (
            "POST %s/exec",
            map_http_error("POST", AGENT + "/exec", 500, "", {"message": "VM 201 is not running"}),
            "qga_vm_not_running",
            True,
        ),
        (
            "POST %s/exec",
            map_http_error(
                "POST", AGENT + "/exec", 403, "Permission check failed (/vms/201, VM.GuestAgent.Unrestricted)", None
            ),
            "permission_denied",
            False,
        ),
        (
            "POST %s/exec",
            map_http_error("POST", AGENT + "/exec", 401, "authentication failure", None),
            "auth_failed",
            True,
        ),
        (
            "%s/exec-status",
            provider_error("reply_lost", "x", method="GET", path=AGENT + "/exec-status"),
            "qga_exec_status_lost",
            True,
        ),
        ("%s/exec-status", {"exited": 0}, "qga_command_timeout", False),
    ],
    ids=["exec_lost", "agent_down", "vm_stopped", "permission", "auth", "status_lost", "timeout"],
)
def test_failures_reach_ansible_with_a_fixed_code_and_no_secret(
    route: str, failure: t.Any, code: str, unreachable: bool
) -> None:
    guest = FakeGuest()
    guest.client.routes[route % AGENT] = failure
    conn = connection({"command_timeout": 0.5, "status_rereads": 1}, guest)
    with pytest.raises(AnsibleError) as err:
        conn.exec_command("echo %s" % "x")
    assert str(err.value).startswith("[%s] " % code)
    assert isinstance(err.value, AnsibleConnectionFailure) is unreachable
    assert SECRET not in str(err.value) and "ops@pve!ansible" not in str(err.value)
    assert guest.client.paths("POST") == [AGENT + "/exec"]  # never sent twice
