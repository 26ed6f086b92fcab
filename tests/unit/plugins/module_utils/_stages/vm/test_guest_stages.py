# SPDX-License-Identifier: GPL-3.0-or-later
"""Guest stages without the simulator: request building (schema-validated), sshkeys encoding, seed verdicts,
readiness decisions, known_hosts formatting, dpkg parsing, and the runner hooks they rely on.

Recorded PVE replies: tests/unit/fixtures/pve_guest_stages.json (captured from pvesim, whose guest and
cloud-init models follow qemu-server, QGA and cloud-init).
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import time
import typing as t
from pathlib import Path

import pytest
from pvesim.cloudinit import decode_sshkeys as pve_decode_sshkeys
from pvesim.guest import _fingerprint as pvesim_fingerprint

from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import guest_exec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import map_http_error
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ERROR_CODES, VmanywareError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import ADOPTED_REQUEST, JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import (
    StageContext,
    StageLogic,
    StageSettings,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import (
    GuestCommand,
    GuestOutcome,
    Request,
    StageError,
    StageInProgress,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import guest as _guest
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm import readiness as readiness_module
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.cloudinit import CloudinitStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.packages import (
    PackagesStage,
    dpkg_query_argv,
    install_argv,
    missing_packages,
    parse_dpkg,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.readiness import (
    CLOUDINIT_PROBE,
    ReadinessStage,
    cloudinit_verdict,
    host_keys,
    parse_cloudinit_status,
    usable_ipv4,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.seed import (
    SeedStage,
    validate_network,
    validate_user_data,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.snapshot import SnapshotStage, snapshot_name
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.start import StartStage

from stage_fakes import FakeClient, assert_valid
from pve_fake import in_turn
from hashed_plan import hashed_plan

REPO = Path(__file__).resolve().parents[6]
REC = json.loads((REPO / "tests/unit/fixtures/pve_guest_stages.json").read_text(encoding="utf-8"))
VM = "/nodes/pve-test/qemu/201"
KEYS = list(REC["sshPublicKeys"])
MAC = REC["config_before"]["net0"].split(",")[0].split("=")[1]


def _hashes() -> tuple[str, str]:
    lines = REC["config_before"]["description"].split("\n")
    return lines[1].split()[1], lines[2].split()[1]


def operation(attested: bool = True, packages: list[dict[str, str]] | None = None) -> dict[str, t.Any]:
    definition_hash, plan_hash = _hashes()
    mapping: dict[str, t.Any] = {"image": "debian-13", "node": "pve-test", "templateVmid": 9000, "guestUser": "debian"}
    if attested:
        mapping["imageDefaultUser"] = {
            "name": "debian",
            "templateVersion": "v",
            "passwordLocked": True,
            "noAuthorizedKeys": True,
        }
    stage = {"kind": "resources", "evidence": {"digest": REC["config_before"]["digest"], "macaddr": MAC}}
    return {
        "operationId": REC["operationId"],
        "target": {"node": "pve-test", "vmid": 201},
        "mapping": mapping,
        "definition": {"access": {"sshPublicKeys": KEYS}},
        "plan": {
            "bridge": "vmbr0",
            "guestUser": "debian",
            "definitionHash": definition_hash,
            "planHash": plan_hash,
            "definitionName": "kernel-lab",
            "packages": packages or [],
        },
        "stages": [stage, {"kind": "cloudinit", "evidence": {}}],
        "handoff": {},
    }


def ctx_for(kind: str = "cloudinit", **kwargs: t.Any) -> StageContext:
    return StageContext(operation=operation(**kwargs), client=FakeClient(), kind=kind)


def valid(request: Request) -> None:
    assert_valid(request.method, request.path, request.params)


# -- sshkeys ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "keys",
    [
        KEYS,
        [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA+b/c= a+b@host",
            "ssh-rsa AAAAB3Nz+/== comment with spaces % and %41 and #",
        ],
    ],
)
def test_sshkeys_round_trip_through_pves_decoder(keys: list[str]) -> None:
    encoded = _guest.encode_sshkeys(keys)
    assert "+" not in encoded and " " not in encoded and "\n" not in encoded
    assert pve_decode_sshkeys(encoded) == keys and _guest.decode_sshkeys(encoded) == keys
    assert REC["config_after"]["sshkeys"] == _guest.encode_sshkeys(KEYS)


# -- cloudinit -------------------------------------------------------------------------------------------
def test_cloudinit_request_attested() -> None:
    ctx = ctx_for()
    ctx.facts["config"] = REC["config_before"]
    request = CloudinitStage().request(ctx)
    assert request is not None
    valid(request)
    assert request.params == {
        "digest": REC["config_before"]["digest"],
        "net0": "virtio=%s,bridge=vmbr0" % MAC,
        "ipconfig0": "ip=dhcp",
        "citype": "nocloud",
        "sshkeys": _guest.encode_sshkeys(KEYS),
        "ciupgrade": 0,
        "delete": "cipassword,ciuser,cicustom",
    }


def test_cloudinit_request_without_attestation_sets_ciuser() -> None:
    ctx = ctx_for(attested=False)
    ctx.facts["config"] = REC["config_before"]
    request = CloudinitStage().request(ctx)
    assert request is not None and request.params["ciuser"] == "debian" and request.params["delete"] == "cipassword"
    valid(request)


def test_cloudinit_observe_and_resolution() -> None:
    ctx = ctx_for()
    ctx.client = FakeClient({VM + "/config": REC["config_after"]})
    assert CloudinitStage().observe(ctx)["digest"] == REC["config_after"]["digest"]
    assert CloudinitStage().resolve_lost_reply(ctx).verdict == "applied"
    ctx.client = FakeClient({VM + "/config": REC["config_before"]})
    assert CloudinitStage().resolve_lost_reply(ctx).verdict == "not_applied"
    changed = dict(REC["config_before"], digest="0" * 40)
    ctx.client = FakeClient({VM + "/config": changed})
    assert CloudinitStage().resolve_lost_reply(ctx).verdict == "undecidable"
    wrong = dict(REC["config_after"], sshkeys=_guest.encode_sshkeys(KEYS + KEYS))
    ctx.client = FakeClient({VM + "/config": wrong})
    with pytest.raises(StageError) as info:
        CloudinitStage().observe(ctx)
    assert info.value.code == "observation_mismatch" and info.value.details["fields"] == ["sshkeys"]


def test_cloudinit_drive_must_be_the_targets_own() -> None:
    assert _guest.cloudinit_drive(REC["config_before"], 201) == "ide2"
    assert _guest.cloudinit_drive({"ide2": "local-lvm:vm-9000-cloudinit,media=cdrom"}, 201) is None
    assert _guest.cloudinit_drive({"ide2": "local-lvm:vm-2010-cloudinit,media=cdrom"}, 201) is None


# -- seed ------------------------------------------------------------------------------------------------
def _verdict(text: str, attested: bool = True) -> str | None:
    try:
        validate_user_data(text, KEYS, attested=attested, guest_user="debian")
    except StageError as err:
        return "%s/%s" % (err.code, err.details["rule"])
    return None


def test_seed_user_data_verdicts() -> None:
    good = REC["dump"]["user"]
    assert _verdict(good) is None
    scalar = good.replace("users:\n", "user: debian\nusers:\n")
    assert (
        _verdict(scalar) == "seed_incompatible/scalar_user"
        and _verdict(scalar, attested=False) == "seed_incompatible/scalar_user"
    )
    assert _verdict(good.replace("users:\n", "user:\nusers:\n")) == "seed_mismatch/user_present"
    assert _verdict(good.replace("users:\n", "user:\n  name: debian\nusers:\n")) == "seed_mismatch/user_present"
    assert _verdict(good.replace("  - default\n", "  - default\n  - name: other\n")) == "seed_mismatch/named_users"
    assert _verdict(good.replace("users:\n  - default\n", "")) == "seed_mismatch/default_user"
    assert _verdict(good.replace("alice@laptop", "mallory@laptop")) == "seed_mismatch/ssh_authorized_keys"
    assert _verdict(good.replace("chpasswd:", "password: x\nchpasswd:")) == "seed_mismatch/password_present"
    assert _verdict(good.replace("#cloud-config\n", "")) == "seed_mismatch/cloud_config_header"
    # Without an attestation the default user is not enough: the mapping's guest user must be listed.
    assert _verdict(good, attested=False) == "seed_mismatch/guest_user"
    assert _verdict(good.replace("  - default\n", "  - default\n  - debian\n"), attested=False) is None


def test_seed_lost_reply_is_resolved_by_the_cloudinit_pending_list() -> None:
    ctx = ctx_for("seed")
    ctx.client = FakeClient({VM + "/cloudinit": [{"key": "citype", "value": "nocloud"}]})
    assert SeedStage().resolve_lost_reply(ctx).verdict == "applied"
    ctx.client = FakeClient(
        {VM + "/cloudinit": [{"key": "sshkeys", "value": "old", "pending": "new"}, {"key": "ciuser", "delete": 1}]}
    )
    resolution = SeedStage().resolve_lost_reply(ctx)
    assert resolution.verdict == "not_applied" and "not sent again" in resolution.message


def test_seed_network_verdicts() -> None:
    validate_network(REC["dump"]["network"], MAC)
    with pytest.raises(StageError) as info:
        validate_network(REC["dump"]["network"], "BC:24:11:00:00:01")
    assert info.value.details["rule"] == "nic_mac"
    with pytest.raises(StageError) as info:
        validate_network(REC["dump"]["network"].replace("type: dhcp4", "type: static"), MAC)
    assert info.value.details["rule"] == "dhcp4"


@pytest.mark.parametrize("pending_lists_digest", [True, False])
def test_seed_observe_records_hashes_only(pending_lists_digest: bool) -> None:
    ctx = ctx_for("seed")
    ctx.operation["stages"][1]["evidence"] = {"digest": REC["config_after"]["digest"]}
    ctx.operation["stages"].append({"kind": "seed", "evidence": {}})
    # GET pending, as qemu-server lists it: every key's value in effect, the file's digest among them
    pending = [
        {"key": key, "value": value}
        for key, value in REC["config_after"].items()
        if pending_lists_digest or key != "digest"
    ]
    routes: dict[str, t.Any] = {
        VM + "/pending": pending,
        VM + "/config": REC["config_after"],
        VM + "/cloudinit/dump": lambda p: REC["dump"][p["type"]],
    }
    ctx.client = FakeClient(routes)
    evidence = SeedStage().observe(ctx)
    assert evidence["seedHashes"]["user"] == hashlib.sha256(REC["dump"]["user"].encode()).hexdigest()
    assert evidence["seedDigest"] == REC["config_after"]["digest"]
    assert "ssh-ed25519" not in json.dumps(evidence)
    # the digest comes from the pending list; a list without one makes the stage read the configuration
    assert client_paths_before_dumps(ctx.client) == (
        [VM + "/pending"] if pending_lists_digest else [VM + "/pending", VM + "/config"]
    )
    valid(SeedStage().request(ctx))  # type: ignore[arg-type]


def client_paths_before_dumps(client: FakeClient) -> list[str]:
    paths = client.paths()
    return paths[: paths.index(VM + "/cloudinit/dump")]


# -- start and snapshot ---------------------------------------------------------------------------------
def test_start_and_snapshot_requests() -> None:
    ctx = ctx_for("start")
    valid(t.cast(Request, StartStage().request(ctx)))
    request = t.cast(Request, SnapshotStage().request(ctx))
    valid(request)
    name = snapshot_name(REC["operationId"])
    assert request.params["snapname"] == name and request.params["vmstate"] == 0 and len(name) <= 40
    ctx.facts["snapshots"] = {name: {}}
    assert SnapshotStage().request(ctx) is None


@pytest.mark.parametrize("adopted", [False, True])
def test_snapshot_lists_snapshots_before_its_write_only_for_an_adopted_operation(adopted: bool) -> None:
    # The runner dispatches only a stage that never sent its write (or whose write was refused with no effect): the
    # operation's own name cannot be listed then. An adopted VM may already carry it: that stage reads and sends nothing.
    ctx = ctx_for("snapshot")
    if adopted:
        ctx.operation["stages"][0]["request"] = dict(ADOPTED_REQUEST)
    name = snapshot_name(REC["operationId"])
    ctx.client = FakeClient(
        {VM + "/config": REC["config_after"], VM + "/snapshot": [{"name": name, "snaptime": 1}, {"name": "current"}]}
    )
    SnapshotStage().preconditions(ctx)
    request = SnapshotStage().request(ctx)
    if adopted:
        assert ctx.client.paths() == [VM + "/config", VM + "/snapshot"] and request is None
    else:
        assert ctx.client.paths() == [VM + "/config"] and request is not None and request.params["snapname"] == name


def test_snapshot_stage_declares_both_gates() -> None:
    # The runner re-reads them before the write (tests/unit/plugins/module_utils/_stages/test_runner.py).
    assert SnapshotStage.gates == ("VMANYWARE_PROVISIONING_ENABLED", "VMANYWARE_SNAPSHOTS_ENABLED")
    assert ReadinessStage.gates == () and StartStage.gates == ("VMANYWARE_PROVISIONING_ENABLED",)


# -- readiness -------------------------------------------------------------------------------------------
def test_cloudinit_status_parsing() -> None:
    done = REC["exec_status_cloudinit_done"]
    assert parse_cloudinit_status(done["out-data"]) == ("done", "done")
    assert cloudinit_verdict(done["out-data"], done["exitcode"]) == "done"
    assert cloudinit_verdict("..status: done\nextended_status: done\n", 0) == "done"
    # ``--wait`` prints its dots, then a newline before the status (cloud-init's print_status)
    assert (
        cloudinit_verdict("...\n" + done["out-data"], 0) == "done"
        and cloudinit_verdict("\n" + done["out-data"], 0) == "done"
    )
    assert cloudinit_verdict("....\nstatus: error\nextended_status: error - done\n", 1) == "failed:error"
    assert cloudinit_verdict("status: running\nextended_status: running\n", 0) == "running"
    assert cloudinit_verdict("status: error\nextended_status: error - done\n", 1) == "failed:error"
    assert cloudinit_verdict("status: done\nextended_status: degraded done\n", 2) == "failed:degraded"
    assert cloudinit_verdict("garbage", 0) == "failed:unknown"


def _readiness_ctx(
    client: FakeClient, outcomes: list[GuestOutcome], sleeps: list[float]
) -> tuple[StageContext, list[GuestCommand]]:
    ctx = ctx_for("readiness")
    ctx.operation["stages"].append({"kind": "readiness", "evidence": {"deadline": time.time() + 60}})
    ctx.client = client
    ctx.settings = StageSettings(sleep=sleeps.append)
    commands: list[GuestCommand] = []

    def guest_runner(
        _ctx: StageContext, command: GuestCommand, _deadline: float, _started: float | None
    ) -> GuestOutcome:
        commands.append(command)
        return outcomes.pop(0)

    ctx.guest_runner = guest_runner
    return ctx, commands


def _agent_error(path: str, text: str) -> Exception:
    return map_http_error("POST", VM + path, 500, text, {"data": None, "message": text + "\n"})


def _agent_not_running() -> Exception:
    return _agent_error("/agent/ping", "QEMU guest agent is not running")


def _no_file(params: t.Mapping[str, t.Any]) -> Exception:
    return _agent_error(
        "/agent/file-read",
        "VM 201 qga command 'guest-file-open' failed - failed to open file '%s' (mode: 'r'): "
        "No such file or directory" % params["file"],
    )


def _fake_wall_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """readiness' wall clock, advanced only by the test (an attempt that takes time, the stage's sleeps)."""
    now = [time.time()]
    monkeypatch.setattr(readiness_module, "wall_clock", lambda: now[0])
    return now


def test_readiness_pings_less_often_then_waits_for_cloudinit_with_one_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_wall_clock(monkeypatch)
    key = REC["file_read_ed25519"]
    client = FakeClient(
        {
            "POST " + VM + "/agent/ping": in_turn(_agent_not_running(), _agent_not_running(), {}),
            VM + "/agent/network-get-interfaces": REC["interfaces"],
            VM + "/agent/file-read": lambda params: (
                key if params["file"].endswith("ed25519_key.pub") else _no_file(params)
            ),
        }
    )
    sleeps: list[float] = []
    done = REC["exec_status_cloudinit_done"]
    ctx, commands = _readiness_ctx(client, [GuestOutcome("exited", 7, 0, "." * 12 + "\n" + done["out-data"])], sleeps)
    evidence = ReadinessStage().observe(ctx)
    assert (
        evidence["cloudinit"] == "done"
        and evidence["ipv4"] == "10.10.0.203"
        and list(evidence["hostKeyFingerprints"]) == ["ssh-ed25519"]
    )
    # pings: at once, then 0.5 s and 0.75 s later (the agent needs seconds after power-on); one waiting cloud-init probe
    assert sleeps == pytest.approx([0.5, 0.75])
    assert [c.argv for c in commands] == [("cloud-init", "status", "--long", "--wait")] and commands[
        0
    ].name == "cloud-init-status"
    assert (
        client.paths()
        == [VM + "/agent/ping"] * 3 + [VM + "/agent/network-get-interfaces"] + [VM + "/agent/file-read"] * 3
    )


def test_readiness_pings_again_at_once_after_a_ping_that_waited(monkeypatch: pytest.MonkeyPatch) -> None:
    # Proxmox pings the agent for up to 3 s before it answers "not running": the interval (0.5 s, then 0.75 s) runs from
    # one ping's start to the next, so a ping that waited is followed at once, one that failed after 0.2 s 0.55 s later.
    now = _fake_wall_clock(monkeypatch)
    answers = [(3.0, _agent_not_running()), (0.2, _agent_not_running()), (0.0, {})]

    def ping(_params: t.Mapping[str, t.Any]) -> t.Any:
        took, answer = answers.pop(0)
        now[0] += took
        if isinstance(answer, Exception):
            raise answer
        return answer

    client = FakeClient(
        {
            "POST " + VM + "/agent/ping": ping,
            VM + "/agent/network-get-interfaces": REC["interfaces"],
            VM + "/agent/file-read": REC["file_read_ed25519"],
        }
    )
    sleeps: list[float] = []
    ctx, _commands = _readiness_ctx(
        client, [GuestOutcome("exited", 7, 0, REC["exec_status_cloudinit_done"]["out-data"])], sleeps
    )
    ReadinessStage().observe(ctx)
    assert sleeps == pytest.approx([0.0, 0.55])
    assert client.paths()[:3] == [VM + "/agent/ping"] * 3


@pytest.mark.parametrize(
    ("exitcode", "out", "state"),
    [
        (1, "..\nstatus: error\nextended_status: error - done\n", "error"),
        (2, "..\nstatus: done\nextended_status: degraded done\n", "degraded"),
    ],
)
def test_readiness_fails_on_what_the_waiting_probe_reports(exitcode: int, out: str, state: str) -> None:
    client = FakeClient({"POST " + VM + "/agent/ping": {}})
    ctx, _commands = _readiness_ctx(client, [GuestOutcome("exited", 7, exitcode, out)], [])
    with pytest.raises(StageError) as info:
        ReadinessStage().observe(ctx)
    assert info.value.code == "cloudinit_failed" and info.value.details["cloudinitState"] == state
    assert client.paths() == [VM + "/agent/ping"]  # no interface or key read after a failed cloud-init


def test_readiness_probes_again_when_a_resumed_probe_of_the_old_form_says_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_wall_clock(monkeypatch)
    # A marker journaled by the repeated probe (no --wait) is resumed by its PID; its "running" leads to the waiting probe.
    client = FakeClient(
        {
            "POST " + VM + "/agent/ping": {},
            VM + "/agent/network-get-interfaces": REC["interfaces"],
            VM + "/agent/file-read": REC["file_read_ed25519"],
        }
    )
    done = REC["exec_status_cloudinit_done"]
    outcomes = [
        GuestOutcome("exited", 5, 0, "status: running\nextended_status: running\n"),
        GuestOutcome("exited", 6, 0, done["out-data"]),
    ]
    sleeps: list[float] = []
    ctx, commands = _readiness_ctx(client, outcomes, sleeps)
    assert (
        ReadinessStage().observe(ctx)["cloudinit"] == "done" and len(commands) == 2 and sleeps == pytest.approx([0.2])
    )


def test_usable_ipv4_on_the_net0_interface_only() -> None:
    interfaces = REC["interfaces"]["result"]
    assert usable_ipv4(interfaces, MAC) == "10.10.0.203"
    assert usable_ipv4(interfaces, "00:00:00:00:00:00") is None  # loopback
    only_link_local = copy.deepcopy(interfaces)
    only_link_local[1]["ip-addresses"] = [{"ip-address-type": "ipv4", "ip-address": "169.254.3.4", "prefix": 16}]
    assert usable_ipv4(only_link_local, MAC) is None
    assert usable_ipv4(None, MAC) is None


def test_known_hosts_and_fingerprints_like_ssh_keygen() -> None:
    line = REC["file_read_ed25519"]["content"].strip()
    known, prints = host_keys({"ssh-ed25519": line}, "10.10.0.203")
    kind, blob = line.split()[:2]
    assert known == ["10.10.0.203 %s %s" % (kind, blob)]
    expected = "SHA256:" + base64.b64encode(hashlib.sha256(base64.b64decode(blob)).digest()).decode().rstrip("=")
    assert prints == {"ssh-ed25519": expected} and expected == pvesim_fingerprint(line)
    with pytest.raises(ValueError):
        _guest.ssh_fingerprint("ssh-ed25519 !!!")


def test_agent_errors_are_classified_without_their_text() -> None:
    cases = {
        "QEMU guest agent is not running": "not_running",
        "VM 201 qga command 'guest-exec' failed - The command guest-exec has been disabled for this instance": "exec_disabled",
        "VM 201 qga command 'guest-exec-status' failed - Invalid parameter 'pid'": "unknown_pid",
    }
    for text, token in cases.items():
        err = map_http_error("POST", VM + "/agent/exec", 500, text, {"data": None, "message": text + "\n"})
        assert err.code == "server_error" and err.details["agent"] == token and text not in json.dumps(err.to_result())
    assert CLOUDINIT_PROBE == ("cloud-init", "status", "--long", "--wait")


# -- packages --------------------------------------------------------------------------------------------
def test_dpkg_parsing_and_missing() -> None:
    status = REC["exec_status_dpkg"]
    installed = parse_dpkg(status["out-data"])
    assert installed == {"sudo": "1.9.16p2-3"}
    assert parse_dpkg("vim\trc \t2:9.1\nbash:amd64\tii \t5.2\n") == {"bash": "5.2"}
    declared = [{"name": "sudo"}, {"name": "nosuchpkg"}, {"name": "sudo2", "version": "1"}]
    assert missing_packages(declared, installed) == [{"name": "nosuchpkg"}, {"name": "sudo2", "version": "1"}]
    assert missing_packages([{"name": "sudo", "version": "0.1"}], installed) == [{"name": "sudo", "version": "0.1"}]
    assert missing_packages([{"name": "sudo", "version": "1.9.16p2-3"}], installed) == []


def test_package_commands_are_fixed_arrays_run_as_the_wrappers_positional_parameters() -> None:
    argv = install_argv([{"name": "git"}, {"name": "jq", "version": "1.7.1-6"}])
    assert argv[:3] == ["/usr/bin/env", "DEBIAN_FRONTEND=noninteractive", "apt-get"] and argv[-3:] == [
        "--",
        "git",
        "jq=1.7.1-6",
    ]
    assert "--no-install-recommends" in argv and not any(a in ("sh", "bash", "-c") for a in argv)
    query = dpkg_query_argv(["git"])
    assert query[1].startswith("--showformat=") and query[2] == "-W"
    ctx = ctx_for("packages", packages=[{"name": "git"}])
    ctx.facts["missing"] = [{"name": "git"}]
    request = t.cast(Request, PackagesStage().request(ctx))
    valid(request)
    command = request.params["command"]
    # The fixed wrapper, a marker unique to the operation and this dispatch, then the install argv untouched (never interpolated).
    assert command[:4] == ["/bin/sh", "-c", guest_exec.EXEC_WRAPPER, "vmanyware"] and command[5:] == install_argv(
        [{"name": "git"}]
    )
    assert (
        command[4]
        == guest_exec.exec_marker_path(ctx.operation["operationId"], "install", 1)
        == guest_exec.marker_of_argv(command)
    )
    ctx.facts["missing"] = []
    assert PackagesStage().request(ctx) is None


def test_new_error_codes_registered() -> None:
    for code in (
        "seed_incompatible",
        "seed_mismatch",
        "guest_agent_unavailable",
        "guest_network_unavailable",
        "guest_exec_unavailable",
        "cloudinit_failed",
        "readiness_timeout",
        "package_install_failed",
        "package_version_missing",
    ):
        assert code in ERROR_CODES


# -- runner hooks the guest stages use ------------------------------------------------------------------
HASH = "a" * 64


@pytest.fixture()
def store(tmp_path: Path) -> JournalStore:
    return JournalStore(str(tmp_path / "journal"))


def _op(store: JournalStore, kinds: list[str]) -> str:
    document, _created = store.create_operation(
        idempotency_key="k",
        provider_scope_id="pve:" + HASH,
        definition={},
        mapping={},
        plan=hashed_plan({}, {}, 201),
        confirmation={},
        target_node="pve-test",
        target_vmid=201,
        stage_kinds=kinds,
    )
    return t.cast(str, document["operationId"])


class Waiting(StageLogic):
    kind = "readiness"
    final_codes = frozenset({"guest_agent_unavailable"})

    def __init__(self, outcome: BaseException | None) -> None:
        self.outcome = outcome

    def preconditions(self, ctx: StageContext) -> None:
        if self.outcome is not None:
            raise self.outcome

    def request(self, ctx: StageContext) -> Request | None:
        return None

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        return {"ready": True}


def test_runner_in_progress_final_codes_and_completion(store: JournalStore, tmp_path: Path) -> None:
    operation_id = _op(store, ["readiness"])
    # The runner journals what the hook established (hooks have no journal of their own).
    runner = StageRunner(
        store, None, Waiting(StageInProgress({"phase": "agent"}, evidence={"deadline": 1.0})), StageSettings()
    )
    result = runner.run(operation_id)
    assert (
        result["done"] is False and result["progress"] == {"phase": "agent"} and result["stage"]["status"] == "pending"
    )
    assert store.stage(store.load(operation_id), "readiness")["evidence"] == {"deadline": 1.0}
    done = StageRunner(store, None, Waiting(None), StageSettings()).run(operation_id)
    assert done["done"] and store.load(operation_id)["status"] == "completed"

    other = JournalStore(str(tmp_path / "other"))
    operation_id = _op(other, ["readiness"])
    with pytest.raises(StageError):
        StageRunner(other, None, Waiting(StageError(code="guest_agent_unavailable")), StageSettings()).run(operation_id)
    assert other.load(operation_id)["status"] == "failed"


# -- task ids of start and snapshot (issue 31) ------------------------------------------------------------
def _upid(task_type: str, task_id: str, node: str = "pve-test") -> str:
    return "UPID:%s:00001234:00005678:65000000:%s:%s:vmanyware@pve!full:" % (node, task_type, task_id)


@pytest.mark.parametrize("logic,task_type", [(StartStage(), "qmstart"), (SnapshotStage(), "qmsnapshot")])
def test_start_and_snapshot_accept_only_a_task_of_their_own_type_for_the_target(
    logic: StageLogic, task_type: str
) -> None:
    ctx = ctx_for(logic.kind)
    request = t.cast(Request, logic.request(ctx))
    assert logic.accept_reply(ctx, request, _upid(task_type, "201")) == (_upid(task_type, "201"), {})
    others = [
        _upid(task_type, "202"),
        _upid(task_type, "201", node="pve-other"),
        _upid("qmclone", "201"),
        _upid("qmstart" if task_type == "qmsnapshot" else "qmsnapshot", "201"),
        _upid("vz" + task_type[2:], "201"),
        "not-a-upid",
    ]
    for reply in others:
        with pytest.raises(VmanywareError) as info:
            logic.accept_reply(ctx, request, reply)
        assert info.value.code == "unexpected_response"


# -- the exec marker in the guest (issue 31) ---------------------------------------------------------------
class GuestFiles:
    """The guest's files behind ``agent/file-read`` / ``agent/file-write`` (QGA's error text for a missing file)."""

    def __init__(self, files: dict[str, str] | None = None, unreadable: bool = False) -> None:
        self.files = dict(files or {})
        self.unreadable = unreadable
        self.writes: list[str] = []

    def read(self, params: dict[str, t.Any]) -> t.Any:
        if self.unreadable:
            return map_http_error(
                "GET", VM + "/agent/file-read", 500, "", {"message": "QEMU guest agent is not running\n"}
            )
        if params["file"] not in self.files:
            return map_http_error(
                "GET",
                VM + "/agent/file-read",
                500,
                "",
                {
                    "message": "VM 201 qga command 'guest-file-open' failed - failed to open file '%s' (mode: 'r'): No such file or directory\n"
                    % params["file"]
                },
            )
        return {"content": self.files[params["file"]], "bytes-read": len(self.files[params["file"]])}

    def write(self, params: dict[str, t.Any]) -> None:
        self.writes.append(params["file"])
        self.files[params["file"]] = params["content"]

    def client(self) -> FakeClient:
        return FakeClient({VM + "/agent/file-read": self.read, "POST " + VM + "/agent/file-write": self.write})


def _install_ctx(files: GuestFiles, dpkg: str = "") -> tuple[StageContext, str]:
    ctx = ctx_for("packages", packages=[{"name": "git"}])
    ctx.facts["missing"] = [{"name": "git"}]
    request = t.cast(Request, PackagesStage().request(ctx))
    ctx.operation["stages"].append(
        {"kind": "packages", "status": "dispatching", "attempts": 1, "request": request.summary(), "evidence": {}}
    )
    ctx.client = files.client()

    def runner(_ctx: StageContext, command: GuestCommand, _deadline: float, _started: float | None) -> GuestOutcome:
        return GuestOutcome("exited", 7, 0, dpkg)

    ctx.guest_runner = runner
    return ctx, t.cast(str, guest_exec.marker_of_argv(request.params["command"]))


def test_a_lost_install_whose_marker_shows_it_started_is_applied_and_followed_through_the_marker() -> None:
    files = GuestFiles()
    ctx, marker = _install_ctx(files)
    files.files[marker + ".started"] = ""
    resolution = PackagesStage().resolve_lost_reply(ctx)
    assert resolution.verdict == "applied" and resolution.upid is None and files.writes == []
    assert resolution.evidence["install"]["file"] == marker and resolution.evidence["install"]["pid"] is None
    assert resolution.evidence["installResolvedBy"] == "marker"


def test_a_lost_install_that_never_started_is_superseded_before_it_may_be_sent_again() -> None:
    files = GuestFiles()
    ctx, marker = _install_ctx(files)
    resolution = PackagesStage().resolve_lost_reply(ctx)
    assert resolution.verdict == "not_applied" and resolution.proven and files.writes == [marker + ".superseded"]
    # A queued copy that starts late finds the superseded file: the same resolution still says never started.
    files.files[marker + ".started"] = ""
    files.files[marker + ".exit"] = "superseded\n"
    assert PackagesStage().resolve_lost_reply(ctx).proven


def test_a_lost_install_whose_marker_cannot_be_read_is_decided_by_dpkg_query_only() -> None:
    ctx, _marker = _install_ctx(GuestFiles(unreadable=True))
    resolution = PackagesStage().resolve_lost_reply(ctx)
    assert (
        resolution.verdict == "not_applied" and not resolution.proven
    )  # reads again within the budget, then uncertain
    ctx, _marker = _install_ctx(GuestFiles(unreadable=True), dpkg="git\tii \t1:2.47.3-0+deb13u1\n")
    assert PackagesStage().resolve_lost_reply(ctx).verdict == "applied"


def test_a_readiness_probe_with_an_unknown_outcome_is_resolved_once_its_marker_can_be_read() -> None:
    marker = guest_exec.exec_marker_path(REC["operationId"], "probe", 1)
    for files, verdict in (
        (GuestFiles(unreadable=True), "undecidable"),
        (GuestFiles({marker + ".started": ""}), "applied"),
        (GuestFiles(), "applied"),
    ):
        ctx = ctx_for("readiness")
        ctx.operation["stages"].append(
            {
                "kind": "readiness",
                "status": "uncertain",
                "attempts": 1,
                "evidence": {},
                "request": {
                    "method": "POST",
                    "path": VM + "/agent/exec",
                    "probe": "cloud-init-status",
                    "marker": marker,
                    "params": {"command": ["cloud-init"]},
                },
            }
        )
        ctx.client = files.client()
        resolution = ReadinessStage().resolve_lost_reply(ctx)
        assert resolution.verdict == verdict and not resolution.final
