# SPDX-License-Identifier: GPL-3.0-or-later
"""The guest agent transport of the qga connection plugin: exec once and poll, parts joined by a rename, chunked reads,
fixed errors (docs/guest-agent-connection.md)."""

from __future__ import annotations

import os
import pwd
import subprocess
import typing as t
from pathlib import Path

import pytest
from qga_guest_fake import AGENT, NODE, VMID, FakeGuest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.guest_agent import (
    EXEC_NAME,
    EXEC_SCRIPT,
    JOIN_SCRIPT,
    READ_CHUNK_BYTES,
    WRITE_PART_BYTES,
    AgentLimits,
    GuestAgentTransport,
    command_argv,
    join_argv,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import map_http_error, provider_error
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, ProviderError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def transport(guest: FakeGuest, clock: Clock | None = None, **limits: t.Any) -> GuestAgentTransport:
    clock = clock or Clock()
    return GuestAgentTransport(
        guest.client, NODE, VMID, AgentLimits(**limits), sleep=clock.sleep, clock=lambda: clock.now, token=lambda: "t0k"
    )


def agent_failure(text: str, status: int = 500) -> ProviderError:
    """What the client raises for a Proxmox reply with ``text`` as its message (classified, never forwarded)."""
    return map_http_error("POST", AGENT + "/exec", status, "", {"message": text})


# -- commands ---------------------------------------------------------------------------------------------------------


def test_a_command_runs_once_through_sh_and_is_polled_on_the_task_schedule() -> None:
    guest, clock = FakeGuest(polls=3), Clock()
    guest.results.append({"exited": 1, "exitcode": 3, "out-data": "h\u00e9llo\n", "err-data": "warn\n"})
    result = transport(guest, clock).run("cat /etc/hostname")
    assert (result.rc, result.stdout, result.stderr) == (3, "h\u00e9llo\n".encode(), b"warn\n")
    assert guest.commands == [["/bin/sh", "-c", EXEC_SCRIPT, EXEC_NAME, "cat /etc/hostname"]]
    assert guest.client.paths() == [AGENT + "/exec"] + [AGENT + "/exec-status"] * 4
    assert clock.sleeps == [
        0.25,
        0.25,
        0.5,
        0.5,
    ]  # as long as it has run so far, at most 0.5 s apart in the first minute


def test_the_poll_pause_is_capped_in_the_first_minute_and_after() -> None:
    guest, clock = FakeGuest(polls=150), Clock()
    transport(guest, clock).run("sleep 70")
    early = [p for i, p in enumerate(clock.sleeps) if sum(clock.sleeps[:i]) < 60]
    assert max(early) <= 0.5 and max(clock.sleeps) == 1.0


def test_a_killed_command_reports_128_plus_the_signal() -> None:
    guest = FakeGuest()
    guest.results.append({"exited": 1, "signal": 9})
    assert transport(guest).run("sleep 100").rc == 137


def test_stdin_goes_as_input_data_and_is_bounded() -> None:
    guest = FakeGuest()
    transport(guest).run("cat", b"line\n")
    assert guest.stdin == ["line\n"]
    with pytest.raises(ProviderError) as err:
        transport(guest).run("cat", b"x" * 65537)
    assert err.value.code == "qga_file_too_large" and len(guest.commands) == 1


def test_a_command_over_the_timeout_fails_naming_its_pid_and_is_not_sent_again() -> None:
    guest, clock = FakeGuest(polls=10_000), Clock()
    with pytest.raises(ProviderError) as err:
        transport(guest, clock, command_timeout=5).run("sleep 600")
    assert err.value.code == "qga_command_timeout" and err.value.details["pid"] == 1000
    assert "PID 1000" in err.value.message and "5 s" in err.value.message
    assert clock.now == pytest.approx(5.0) and len(guest.commands) == 1


@pytest.mark.parametrize(
    "failure",
    [
        provider_error("reply_lost", "lost", method="POST", path=AGENT + "/exec"),
        provider_error("response_too_large", "big", method="POST", path=AGENT + "/exec", status=200),
        agent_failure("VM 201 qga command 'guest-exec' failed - got timeout"),
        provider_error("server_error", "x", method="POST", path=AGENT + "/exec", status=503, precheck=False),
    ],
    ids=["reply_lost", "too_large", "got_timeout", "503"],
)
def test_an_exec_whose_reply_was_lost_is_never_sent_again(failure: ProviderError) -> None:
    guest = FakeGuest()
    guest.client.routes["POST %s/exec" % AGENT] = failure
    with pytest.raises(ProviderError) as err:
        transport(guest).run("apt-get install -y nginx")
    assert err.value.code == "qga_exec_outcome_unknown"
    assert "no PID is known" in err.value.message and "may be running" in err.value.message
    assert guest.client.paths() == [AGENT + "/exec"]  # one exec, no status read: there is no PID to read


def test_an_exec_reply_without_a_pid_is_an_unknown_outcome() -> None:
    guest = FakeGuest()
    guest.client.routes["POST %s/exec" % AGENT] = {"nopid": 1}
    with pytest.raises(ProviderError) as err:
        transport(guest).run("true")
    assert err.value.code == "qga_exec_outcome_unknown" and guest.client.paths() == [AGENT + "/exec"]


@pytest.mark.parametrize(
    ("failure", "code", "detail"),
    [
        (agent_failure("QEMU guest agent is not running"), "qga_agent_unavailable", ("reason", "not_running")),
        (agent_failure("No QEMU guest agent configured"), "qga_agent_unavailable", ("reason", "not_configured")),
        (
            agent_failure("The command guest-exec has been disabled for this instance"),
            "qga_agent_unavailable",
            ("reason", "exec_disabled"),
        ),
        (agent_failure("VM 201 is not running"), "qga_vm_not_running", ("vmid", 201)),
        (
            agent_failure("Permission check failed (/vms/201, VM.GuestAgent.Unrestricted)", 403),
            "permission_denied",
            ("privilege", "VM.GuestAgent.Unrestricted"),
        ),
    ],
    ids=["not_running", "not_configured", "exec_disabled", "vm_stopped", "permission"],
)
def test_refusals_before_the_command_map_to_fixed_codes(
    failure: ProviderError, code: str, detail: tuple[str, t.Any]
) -> None:
    guest = FakeGuest()
    guest.client.routes["POST %s/exec" % AGENT] = failure
    with pytest.raises(ProviderError) as err:
        transport(guest).run("id")
    assert err.value.code == code and code in ERROR_CODES
    assert err.value.details[detail[0]] == detail[1]
    assert "Permission check failed" not in err.value.message  # the provider's text is never forwarded


def test_a_lost_status_reply_is_read_again_and_the_command_not_sent_again() -> None:
    guest = FakeGuest(polls=0)
    guest.results.append({"exited": 1, "exitcode": 0, "out-data": "ok\n"})
    lost = provider_error("reply_lost", "lost", method="GET", path=AGENT + "/exec-status")
    status = guest.client.routes["%s/exec-status" % AGENT]
    answers = iter([lost, lost])
    guest.client.routes["%s/exec-status" % AGENT] = lambda params: next(answers, None) or status(params)
    assert transport(guest).run("echo ok").stdout == b"ok\n"
    assert guest.client.paths() == [AGENT + "/exec"] + [AGENT + "/exec-status"] * 3


def test_status_lost_beyond_the_rereads_names_the_pid() -> None:
    guest = FakeGuest()
    guest.client.routes["%s/exec-status" % AGENT] = provider_error(
        "reply_lost", "x", method="GET", path=AGENT + "/exec-status"
    )
    with pytest.raises(ProviderError) as err:
        transport(guest, status_rereads=2).run("true")
    assert err.value.code == "qga_exec_status_lost" and "PID 1000" in err.value.message
    assert guest.client.paths() == [AGENT + "/exec"] + [AGENT + "/exec-status"] * 3


def test_a_consumed_status_is_lost_at_once() -> None:
    guest = FakeGuest()
    guest.client.routes["%s/exec-status" % AGENT] = map_http_error(
        "GET", AGENT + "/exec-status", 500, "", {"message": "Agent error: Invalid parameter 'pid'"}
    )
    with pytest.raises(ProviderError) as err:
        transport(guest).run("true")
    assert err.value.code == "qga_exec_status_lost" and guest.client.paths().count(AGENT + "/exec-status") == 1


def test_truncated_output_is_refused() -> None:
    guest = FakeGuest()
    guest.results.append({"exited": 1, "exitcode": 0, "out-data": "x", "out-truncated": 1})
    with pytest.raises(ProviderError) as err:
        transport(guest).run("yes")
    assert err.value.code == "qga_output_truncated" and "PID 1000" in err.value.message


# -- files ------------------------------------------------------------------------------------------------------------

BINARY = bytes(range(256)) * 3


@pytest.mark.parametrize(
    ("size", "parts"),
    [
        (0, 1),
        (1, 1),
        (WRITE_PART_BYTES - 1, 1),
        (WRITE_PART_BYTES, 1),
        (WRITE_PART_BYTES + 1, 2),
        (3 * WRITE_PART_BYTES + 5, 4),
    ],
)
def test_put_writes_base64_parts_and_joins_them_with_one_rename(size: int, parts: int) -> None:
    guest = FakeGuest()
    data = (BINARY * (size // len(BINARY) + 1))[:size]
    transport(guest).write_file(data, "/root/.ansible/tmp/x/AnsiballZ_ping.py")
    writes = guest.client.calls("POST")[:-1]
    assert [call[1] for call in writes] == [AGENT + "/file-write"] * parts
    assert all(len(call[2]["content"]) <= 61440 and call[2]["encode"] is False for call in writes)
    stem = "/root/.ansible/tmp/x/AnsiballZ_ping.py.vmanyware-qga-t0k"
    assert [call[2]["file"] for call in writes] == ["%s.%04d" % (stem, i) for i in range(parts)]
    assert guest.commands == [
        join_argv("/root/.ansible/tmp/x/AnsiballZ_ping.py", stem + ".tmp", [c[2]["file"] for c in writes])
    ]
    assert guest.files == {"/root/.ansible/tmp/x/AnsiballZ_ping.py": data}  # parts and temporary file removed


def test_a_failed_join_is_a_clear_failure_and_leaves_no_destination() -> None:
    guest = FakeGuest()
    with pytest.raises(ProviderError) as err:
        transport(guest).write_file(b"data", "/missing/dir/file")
    assert err.value.code == "qga_transfer_failed" and guest.files == {}


def test_put_refuses_a_file_over_the_limit_before_sending() -> None:
    guest = FakeGuest()
    with pytest.raises(ProviderError) as err:
        transport(guest, file_size_limit=10).write_file(b"x" * 11, "/tmp/f")
    assert err.value.code == "qga_file_too_large" and guest.client.log == []


@pytest.mark.parametrize("read_limit", [None, 1000, 7])
def test_fetch_reads_base64_chunks_while_truncated(read_limit: int | None) -> None:
    guest = FakeGuest(read_limit=read_limit)
    data = BINARY * 7
    guest.files["/etc/blob"] = data
    assert transport(guest).read_file("/etc/blob") == data
    reads = guest.client.calls("GET")
    assert [call[2]["offset"] for call in reads] == list(range(0, len(data), read_limit or len(data)))
    assert all(call[2]["count"] == READ_CHUNK_BYTES and call[2]["decode"] is False for call in reads)


def test_fetch_over_the_limit_fails_and_a_truncated_read_without_data_never_loops() -> None:
    guest = FakeGuest(read_limit=10)
    guest.files["/big"] = b"y" * 100
    with pytest.raises(ProviderError) as err:
        transport(guest, file_size_limit=25).read_file("/big")
    assert err.value.code == "qga_file_too_large" and len(guest.client.calls("GET")) == 3
    guest.client.routes["%s/file-read" % AGENT] = {"content": "", "truncated": 1}
    with pytest.raises(ProviderError) as err:
        transport(guest).read_file("/big")
    assert err.value.code == "unexpected_response"


def test_fetch_of_a_missing_file_is_not_found() -> None:
    guest = FakeGuest()
    guest.client.routes["%s/file-read" % AGENT] = map_http_error(
        "GET", AGENT + "/file-read", 500, "", {"message": "Agent error: failed to open file '/nope' (mode: 'r')"}
    )
    with pytest.raises(ProviderError) as err:
        transport(guest).read_file("/nope")
    assert err.value.code == "not_found" and "/nope" not in err.value.message


# -- the scripts, run by a real /bin/sh ------------------------------------------------------------------------------


def test_the_exec_script_sets_home_from_passwd_when_the_agent_gives_none(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}  # as qemu-ga under systemd: no HOME
    out = subprocess.run(command_argv('printf "%s|%s" "$HOME" ~'), env=env, capture_output=True, check=True, text=True)
    home = pwd.getpwuid(os.getuid()).pw_dir
    assert out.stdout == "%s|%s" % (home, home)
    kept = subprocess.run(
        command_argv('echo "$HOME"'), env=dict(env, HOME=str(tmp_path)), capture_output=True, text=True, check=True
    )
    assert kept.stdout.strip() == str(tmp_path)
    quoted = subprocess.run(
        command_argv("echo '$1 stays' \"a b\""), env=env, capture_output=True, text=True, check=True
    )
    assert quoted.stdout == "$1 stays a b\n"  # the command is $1 of the script, never spliced into it


def test_the_join_script_renames_into_place_and_removes_the_parts(tmp_path: Path) -> None:
    parts = []
    for index, chunk in enumerate([b"\x00\xffab", b"", b"cd\n"]):
        part = tmp_path / ("p.%d" % index)
        part.write_bytes(chunk)
        parts.append(str(part))
    dest = tmp_path / "dest"
    dest.write_bytes(b"old")
    done = subprocess.run(join_argv(str(dest), str(tmp_path / "dest.tmp"), parts), capture_output=True, check=False)
    assert done.returncode == 0 and dest.read_bytes() == b"\x00\xffabcd\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest"]
    part = tmp_path / "q"
    part.write_bytes(b"new")
    failed = subprocess.run(
        join_argv(str(tmp_path / "no" / "dest"), str(tmp_path / "no" / "t"), [str(part)]), check=False
    )
    assert failed.returncode == 1 and not part.exists()


def test_the_scripts_are_those_the_simulated_guest_runs() -> None:
    from pvesim.guest import shell  # the simulator implements exactly these texts

    assert (shell.QGA_EXEC_SCRIPT, shell.QGA_JOIN_SCRIPT) == (EXEC_SCRIPT, JOIN_SCRIPT)
