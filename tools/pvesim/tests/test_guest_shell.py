# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated guest's ``sh``: the qga connection plugin's exec and join scripts, simple commands, refusals."""

from __future__ import annotations

import typing as t

from pvesim.cloudinit import drive_files
from pvesim.guest import GuestFaults, GuestTiming, SimulatedGuest
from pvesim.guest.shell import QGA_EXEC_SCRIPT, QGA_JOIN_SCRIPT


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[SimulatedGuest, Clock]:
    config = {"name": "web1", "net0": "virtio=BC:24:11:AA:BB:CC,bridge=vmbr0", "ipconfig0": "ip=dhcp", "agent": "1"}
    clock = Clock()
    guest = SimulatedGuest(201, config, drive_files(config, 201, "pve1"), clock, GuestTiming(), GuestFaults())
    clock.now += 600  # agent up, cloud-init done
    return guest, clock


def run(guest: SimulatedGuest, clock: Clock, argv: list[str]) -> dict[str, t.Any]:
    pid = guest.exec(argv)
    clock.now += 30
    return guest.exec_status(pid)


def test_the_exec_script_runs_ansibles_wrapped_simple_command() -> None:
    guest, clock = make()
    status = run(guest, clock, ["/bin/sh", "-c", QGA_EXEC_SCRIPT, "vmanyware-qga", "/bin/sh -c 'cat /etc/hostname'"])
    assert status["exitcode"] == 0 and status["out-data"] == "web1\n"
    missing = run(guest, clock, ["/bin/sh", "-c", QGA_EXEC_SCRIPT, "vmanyware-qga", "cat /nope"])
    assert missing["exitcode"] == 1 and "No such file" in missing["err-data"]


def test_operators_and_expansions_are_refused_not_misread() -> None:
    guest, clock = make()
    for script in ("cat /etc/hostname; true", "cat $HOME/x", "echo a > /tmp/f", "cat /etc/hostname | cat", "a && b"):
        status = run(guest, clock, ["/bin/sh", "-c", QGA_EXEC_SCRIPT, "vmanyware-qga", script])
        assert status["exitcode"] == 2 and "simple commands only" in status["err-data"], script
    assert run(guest, clock, ["/bin/sh", "-c", "echo hi", "x"])["exitcode"] == 2  # another script with arguments


def test_the_join_script_concatenates_renames_and_removes_the_parts() -> None:
    guest, clock = make()
    guest.file_write("/tmp/d.p.0", b"abc")
    guest.file_write("/tmp/d.p.1", b"def\n")
    joined = run(
        guest, clock, ["/bin/sh", "-c", QGA_JOIN_SCRIPT, "j", "/tmp/d", "/tmp/d.tmp", "/tmp/d.p.0", "/tmp/d.p.1"]
    )
    assert joined["exitcode"] == 0 and guest.file_read("/tmp/d")["content"] == "abcdef\n"
    assert run(guest, clock, ["cat", "/tmp/d.p.0"])["exitcode"] == 1  # parts removed
    failed = run(guest, clock, ["/bin/sh", "-c", QGA_JOIN_SCRIPT, "j", "/tmp/e", "/tmp/e.tmp", "/tmp/missing"])
    assert failed["exitcode"] == 1 and run(guest, clock, ["cat", "/tmp/e"])["exitcode"] == 1
