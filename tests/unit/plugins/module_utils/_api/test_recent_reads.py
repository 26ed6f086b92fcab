# SPDX-License-Identifier: GPL-3.0-or-later
"""The rules of ``_recent_reads`` (its module docstring): what a recorded observation serves, what makes it stale.

The chained run against the simulator (tests/integration/test_provision_module.py) counts the reads saved and shows
that a VM another client started, or a configuration (``sshkeys``) another client changed, inside the window stops the
run before anything unprotected is sent.
"""

from __future__ import annotations

import typing as t
from pathlib import Path

import pytest

from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ProviderError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._journal import JournalStore
from ansible_collections.vmanyware.proxmox.plugins.module_utils._operation.create import instance_tag
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.recent_reads import ObservingClient, RecentReads
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.runner import StageRunner
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.protocol import StageSettings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.outcomes import StageError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.registry import VM as VM_GUEST, stage_spec
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.logic import build_logic
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages import common
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.clone import CloneStage
from ansible_collections.vmanyware.proxmox.plugins.module_utils._stages.vm.start import StartStage

from stage_fakes import TEMPLATE, FakeClient, complete, context, fixture, new_operation, pve_error  # noqa: E402  pylint: disable=C0413

VM = "/nodes/pve-test/qemu/201"
OTHER = "/nodes/pve-test/qemu/202"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def observed(
    status: str = "stopped", config: dict[str, t.Any] | None = None
) -> tuple[ObservingClient, FakeClient, RecentReads, Clock]:
    """An observing client over a fake one that answers the VM's config and power state, and every write with null."""
    clock = Clock()
    reads = RecentReads(max_age=5.0, clock=clock)
    fake = FakeClient(
        {
            VM + "/config": config or {"digest": "d1", "cores": 2},
            VM + "/status/current": {"status": status},
            OTHER + "/status/current": {"status": "running"},
        },
        default=None,
    )
    fake.replies = [None] * 20
    return ObservingClient(fake, reads), fake, reads, clock


def test_a_configuration_serves_one_check_until_a_write_or_its_age() -> None:
    client, _fake, reads, clock = observed()
    client.get(VM + "/config")
    assert reads.take(VM) == {"digest": "d1", "cores": 2}
    assert reads.take(VM) is None  # served once
    client.get(VM + "/config")
    client.put(VM + "/config", cores=4)
    assert reads.take(VM) is None  # any write forgets the configurations read before it, even a power-neutral one
    client.get(VM + "/config")
    clock.now += 5.1
    assert reads.take(VM) is None  # too old to be "just observed"
    client.get(VM + "/config", current=1)
    assert reads.take(VM) is None  # only the plain configuration read counts
    assert reads.saved == {"config": 1} and reads.served == 1


def test_a_pending_list_records_the_configuration_in_effect_only() -> None:
    clock = Clock()
    reads = RecentReads(max_age=5.0, clock=clock)
    listed = [
        {"key": "digest", "value": "d1"},
        {"key": "cores", "value": 2},
        {"key": "memory", "value": 1024, "pending": 2048},
    ]
    fake = FakeClient({VM + "/pending": listed, OTHER + "/pending": [{"key": "cores", "value": 2}]}, default=None)
    fake.replies = [None] * 5
    client = ObservingClient(fake, reads)
    client.get(VM + "/pending")
    assert reads.take(VM) == {"digest": "d1", "cores": 2, "memory": 1024}  # the values in effect
    assert reads.take(VM) is None  # served once
    assert not hasattr(reads, "take_pending")  # no stage skips its pending read on a list read earlier
    client.get(OTHER + "/pending")
    assert reads.take(OTHER) is None  # no digest listed: not an observation
    client.get(VM + "/pending")
    client.put(VM + "/cloudinit")
    assert reads.take(VM) is None  # any write forgets it
    client.get(VM + "/pending")
    clock.now += 5.1
    assert reads.take(VM) is None  # too old
    assert reads.saved == {"config": 1}


def test_a_power_state_serves_every_check_within_its_age() -> None:
    client, _fake, reads, clock = observed()
    client.get(VM + "/status/current")
    assert reads.power(VM) == "stopped" and reads.power(VM) == "stopped"
    clock.now += 5.0
    assert reads.power(VM) == "stopped"  # still within max_age
    clock.now += 0.1
    assert reads.power(VM) is None and reads.power(VM) is None  # too old, and gone
    assert reads.saved == {"power": 3}


@pytest.mark.parametrize(
    "suffix, params",
    [("/config", {"cores": 4, "digest": "d1"}), ("/resize", {"disk": "scsi0", "size": "20G"}), ("/cloudinit", {})],
)
def test_power_neutral_writes_keep_the_power_state(suffix: str, params: dict[str, t.Any]) -> None:
    client, _fake, reads, _clock = observed()
    client.get(VM + "/status/current")
    client.get(OTHER + "/status/current")
    client.get(VM + "/config")
    client.request("PUT", VM + suffix, params)
    assert reads.take(VM) is None  # the configuration is forgotten all the same
    assert reads.power(VM) == "stopped" and reads.power(OTHER) == "running"


@pytest.mark.parametrize(
    "method, suffix, params",
    [
        ("POST", "/status/start", {}),
        ("POST", "/status/stop", {}),
        ("POST", "/agent/exec", {"command": ["true"]}),
        ("POST", "/agent/ping", {}),
        ("POST", "/snapshot", {"snapname": "s1"}),
        ("POST", "/config", {"cores": 4}),
        ("PUT", "/firewall/options", {"enable": 1}),
        ("DELETE", "", {}),
    ],
)
def test_any_other_write_forgets_every_power_state(method: str, suffix: str, params: dict[str, t.Any]) -> None:
    client, _fake, reads, _clock = observed()
    client.get(VM + "/status/current")
    client.get(OTHER + "/status/current")
    client.request(method, VM + suffix, params)
    assert reads.power(VM) is None and reads.power(OTHER) is None


def test_a_write_without_a_normal_answer_forgets_everything_even_a_power_neutral_one() -> None:
    client, fake, reads, _clock = observed()
    client.get(VM + "/status/current")
    fake.routes["PUT " + VM + "/config"] = ProviderError("lost", code="reply_lost")
    with pytest.raises(ProviderError):
        client.put(VM + "/config", cores=4, digest="d1")
    assert reads.power(VM) is None


def _with_recorded_power(tmp_path: Path, kind: str, status: str) -> tuple[t.Any, FakeClient, RecentReads]:
    """A context of stage ``kind`` whose observing client has just read the power state ``status``."""
    store = JournalStore(str(tmp_path))
    operation_id = new_operation(store)
    client, fake, reads, _clock = observed(status=status)
    client.get(VM + "/status/current")
    return context(store, operation_id, kind, t.cast(t.Any, client)), fake, reads


def test_precondition_power_reads_unless_the_stage_trusts_a_recent_one(tmp_path: Path) -> None:
    ctx, fake, reads = _with_recorded_power(tmp_path, "readiness", "running")
    before = len(fake.log)
    assert common.precondition_power(ctx) == "running" and len(fake.log) == before + 1  # no RecentReads: it reads
    ctx.recent_power = reads
    assert common.precondition_power(ctx) == "running" and len(fake.log) == before + 1  # taken, not read


def test_which_stages_trust_which_observation() -> None:
    trusts = {
        kind: (type(logic).trusts_recent_config, type(logic).trusts_recent_power)
        for kind in ("clone", "resources", "disk", "cloudinit", "seed", "start", "readiness", "packages", "snapshot")
        for logic in [build_logic(stage_spec(kind, VM_GUEST), {})]
    }
    assert trusts == {
        "clone": (
            False,
            False,
        ),  # reads nothing of the target before its write (nextid, then the config only when taken)
        # their writes carry the digest; Proxmox does not check the power state for them, so they read it
        "resources": (True, False),
        "disk": (True, False),
        "cloudinit": (True, False),
        # PUT cloudinit and POST status/start carry no digest: configuration, pending list and power state read right before
        "seed": (False, False),
        "start": (False, False),
        "readiness": (False, True),  # Proxmox refuses guest agent requests on a VM that is not running
        "packages": (False, False),
        "snapshot": (False, False),
    }
    # rules 7 and 8: only the clone takes the template configuration and "VMID free" (the preflight's)
    sources = {
        kind
        for kind in trusts
        for logic in [type(build_logic(stage_spec(kind, VM_GUEST), {}))]
        if logic.trusts_recent_template or logic.trusts_recent_vmid_free
    }
    assert sources == {"clone"}


def nextid_client() -> tuple[ObservingClient, FakeClient, RecentReads, Clock]:
    clock = Clock()
    reads = RecentReads(max_age=5.0, clock=clock)
    fake = FakeClient(
        {
            "/cluster/nextid": lambda params: params.get("vmid", 100),
            TEMPLATE + "/config": {"digest": "t1", "template": 1},
            VM + "/status/current": {"status": "stopped"},
        },
        default=None,
    )
    fake.replies = [None] * 20
    return ObservingClient(fake, reads), fake, reads, clock


def test_vmid_free_serves_one_check_until_a_write_or_its_age() -> None:
    client, _fake, reads, clock = nextid_client()
    client.get("/cluster/nextid", vmid=201)
    assert reads.vmid_free(202) is False  # another VMID was not asked
    assert reads.vmid_free(201) is True and reads.vmid_free(201) is False  # served once
    client.get("/cluster/nextid", vmid=201)
    client.put(VM + "/config", cores=4)
    assert reads.vmid_free(201) is False  # any write forgets it, even a power-neutral one: it might be the one taking N
    client.get("/cluster/nextid", vmid=201)
    clock.now += 5.1
    assert reads.vmid_free(201) is False  # too old
    client.get("/cluster/nextid")  # the datacenter's next free id: not an answer about a VMID
    assert reads.vmid_free(100) is False
    assert reads.saved == {"vmid_free": 1}


def test_vmid_taken_is_never_recorded() -> None:
    client, fake, reads, _clock = nextid_client()
    fake.routes["/cluster/nextid"] = pve_error("nextid_taken")
    with pytest.raises(ProviderError):
        client.get("/cluster/nextid", vmid=201)
    fake.routes["/cluster/nextid"] = 300  # an answer that is not the VMID asked: not a "free"
    client.get("/cluster/nextid", vmid=201)
    assert reads.vmid_free(201) is False


def test_a_write_without_a_normal_answer_forgets_free_vmids_too() -> None:
    client, fake, reads, _clock = nextid_client()
    client.get("/cluster/nextid", vmid=201)
    fake.routes["POST " + TEMPLATE + "/clone"] = ProviderError("lost", code="reply_lost")
    with pytest.raises(ProviderError):
        client.post(TEMPLATE + "/clone", newid=201, full=1, storage="local-lvm", name="x", description="y")
    assert reads.vmid_free(201) is False


def test_a_template_configuration_is_served_once_and_counted_apart() -> None:
    client, _fake, reads, _clock = nextid_client()
    client.get(TEMPLATE + "/config")
    assert reads.take(TEMPLATE, "template") == {"digest": "t1", "template": 1}
    assert reads.take(TEMPLATE, "template") is None
    assert reads.saved == {"template": 1}


def _clone_context(tmp_path: Path, trusted: bool) -> tuple[t.Any, FakeClient, RecentReads]:
    store = JournalStore(str(tmp_path))
    operation_id = new_operation(store)
    client, fake, reads, _clock = nextid_client()
    fake.routes[TEMPLATE + "/config"] = fixture("template_config")
    client.get(TEMPLATE + "/config")
    client.get("/cluster/nextid", vmid=201)
    fake.log.clear()
    ctx = context(store, operation_id, "clone", t.cast(t.Any, client))
    if trusted:
        ctx.recent_template = ctx.recent_vmid = reads
    return ctx, fake, reads


def test_the_clone_takes_the_template_and_the_free_vmid_only_when_handed_them(tmp_path: Path) -> None:
    ctx, fake, reads = _clone_context(tmp_path / "a", trusted=False)
    CloneStage().preconditions(ctx)  # a stage module (one process per stage): both read
    assert [(method, path) for method, path, _params in fake.log] == [
        ("GET", TEMPLATE + "/config"),
        ("GET", "/cluster/nextid"),
    ]
    ctx, fake, reads = _clone_context(tmp_path / "b", trusted=True)
    CloneStage().preconditions(ctx)
    assert fake.log == [] and reads.saved == {"template": 1, "vmid_free": 1}
    assert ctx.facts["allocations"] == 2 and ctx.facts["adopt"] is False  # the same decision as on fresh reads


def test_the_runner_hands_the_clone_what_it_trusts(tmp_path: Path) -> None:
    store = JournalStore(str(tmp_path))
    operation_id = new_operation(store)
    reads = RecentReads()
    ctx = StageRunner(store, FakeClient(), CloneStage(), StageSettings(recent_reads=reads))._context(operation_id)  # pylint: disable=W0212
    assert (
        ctx.recent_template is reads
        and ctx.recent_vmid is reads
        and ctx.recent_reads is None
        and ctx.recent_power is None
    )
    ctx = StageRunner(store, FakeClient(), StartStage(), StageSettings(recent_reads=reads))._context(operation_id)  # pylint: disable=W0212
    assert ctx.recent_template is None and ctx.recent_vmid is None


def _start_ready(
    tmp_path: Path, recorded: str, actual: str, digest_now: str = "d9"
) -> tuple[StageRunner, t.Any, FakeClient, RecentReads]:
    """An operation whose stages before start completed at digest d9, and an observing client that has just read the
    VM's configuration (d9, ours) and power state ``recorded`` (as the seed stage's read-back and an earlier stage did);
    the VM's power state is ``actual`` now, its configuration's digest ``digest_now``."""
    store = JournalStore(str(tmp_path))
    operation_id = new_operation(store)
    document = store.load(operation_id)
    config = {"digest": "d9", "description": common.binding_description(document), "tags": instance_tag(operation_id)}
    for item in document["stages"]:
        if item["kind"] == "start":
            break
        complete(
            store,
            operation_id,
            item["kind"],
            {"digest": "d9", "seedDigest": "d9", "seedHashes": {}} if item["kind"] == "seed" else {"digest": "d9"},
        )
    client, fake, reads, _clock = observed(status=recorded, config=config)
    fake.routes[VM + "/pending"] = []
    client.get(VM + "/config")
    client.get(VM + "/status/current")
    fake.routes[VM + "/status/current"] = {"status": actual}
    fake.routes[VM + "/config"] = dict(config, digest=digest_now)
    runner = StageRunner(
        store,
        client,
        StartStage(),
        StageSettings(environ={"VMANYWARE_PROVISIONING_ENABLED": "true"}, recent_reads=reads),
    )
    ctx = runner._context(operation_id)  # pylint: disable=protected-access  # the context the runner hands the stage
    fake.log.clear()
    return runner, ctx, fake, reads


def test_start_reads_configuration_power_and_pending_itself(tmp_path: Path) -> None:
    runner, ctx, fake, reads = _start_ready(tmp_path, "stopped", "stopped")
    assert ctx.recent_reads is None and ctx.recent_power is None  # the runner hands start no recorded observation
    runner.logic.preconditions(ctx)
    assert [(method, path) for method, path, _params in fake.log] == [
        ("GET", VM + "/config"),
        ("GET", VM + "/status/current"),
        ("GET", VM + "/pending"),
    ]
    assert reads.saved == {}


def test_start_sees_a_configuration_changed_since_the_recorded_read(tmp_path: Path) -> None:
    # Another client changed the configuration (sshkeys, say) after the seed stage's read-back recorded digest d9.
    runner, ctx, fake, reads = _start_ready(tmp_path, "stopped", "stopped", digest_now="d10")
    with pytest.raises(StageError) as info:
        runner.logic.preconditions(ctx)
    assert info.value.code == "conflict" and info.value.details["rule"] == "digest_unchanged"
    assert ("GET", VM + "/config") in [(method, path) for method, path, _params in fake.log] and reads.saved == {}


def test_start_never_takes_a_recorded_power_state(tmp_path: Path) -> None:
    # Another client started the VM since "stopped" was recorded: start reads the power state itself.
    runner, ctx, fake, _reads = _start_ready(tmp_path, "stopped", "running")
    with pytest.raises(StageError) as info:
        runner.logic.preconditions(ctx)
    assert info.value.details["rule"] == "stopped"
    assert [(method, path) for method, path, _params in fake.log] == [
        ("GET", VM + "/config"),
        ("GET", VM + "/status/current"),
    ]


def test_a_lost_reply_is_resolved_by_reads_not_by_a_recorded_observation(tmp_path: Path) -> None:
    ctx, fake, reads = _with_recorded_power(tmp_path, "start", "stopped")
    ctx.recent_power = reads  # even if a stage were handed the recorded state, resolution reads
    fake.routes[VM + "/status/current"] = {"status": "running"}  # the start applied: the record is stale
    fake.routes["/nodes/pve-test/tasks"] = []
    fake.log.clear()
    assert StartStage().resolve_lost_reply(ctx).verdict == "applied"
    assert ("GET", VM + "/status/current", {}) in fake.log
