# SPDX-License-Identifier: GPL-3.0-or-later
"""Every fault kind on every mutating request of the container, template build and cleanup paths (path_faults.py).

A case arms its one-shot rule right before the stage that sends the request (path_driver.py, in-process, one
simulator), runs the path, then clears the faults and re-runs (at most twice) as an operator would. Every case asserts,
from the simulator's request log: no submission reached Proxmox's handler more than once, none was sent again after a
copy whose outcome was unknown; a stage left ``uncertain`` says what to check; no journal torn, no second guest. The
outcome itself is compared with path_faults.EXPECTED (the contract; VMANYWARE_RELIABILITY_RECORD=1 records it instead).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import time
import typing as t
from pathlib import Path

import pytest
import yaml

import path_faults as pf
import rel_support as rs

CASES = pf.cases() if rs.FULL else [c for c in pf.cases() if c.id in pf.CI_CASES]
RECORD = os.environ.get("VMANYWARE_RELIABILITY_RECORD") == "1"
DOC = rs.REPO / "docs" / "reliability.md"
PATH_DRIVER = rs.HERE / "path_driver.py"
FAST_GUEST = {
    "agent_up_after": 0.0,
    "dhcp_after_agent": 0.0,
    "cloudinit_done_after_boot": 0.0,
    "cloudinit_apt_window": 0.0,
    "apt_install": 0.0,
    "apt_update": 0.0,
}
GIB = 1024**3
BUILD_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO build@controller"
# The faulted run reads for 6 s (above the largest injected delay, so a delayed copy is seen by the same run); by the
# re-runs every delayed copy has landed (observe waits for it), so they read for 2 s.
FIRST = {"readiness_timeout": 20.0, "wait_budget": 6.0}
RERUN = {"readiness_timeout": 20.0, "wait_budget": 2.0}
# The guests a path may leave (besides the simulator's seeded template 9000): qemu VMIDs, lxc VMIDs.
GUESTS = {
    "container": ((), (pf.CTID,)),
    "template": ((pf.TEMPLATE_VMID,), ()),
    "cleanup-vm": ((pf.VMID,), ()),
    "cleanup-container": ((), (pf.CTID,)),
    "abandon": ((pf.VMID,), ()),
}


@pytest.fixture(scope="module")
def image_url(tmp_path_factory: pytest.TempPathFactory) -> t.Iterator[tuple[str, str]]:
    from pvesim.imageserver import ImageServer, qcow2_stub  # pylint: disable=import-outside-toplevel

    image = qcow2_stub(3 * GIB, b"agent-less cloud image")
    root = tmp_path_factory.mktemp("images")
    (root / "debian.qcow2").write_bytes(image)
    with ImageServer(root) as server:
        yield server.url("debian.qcow2"), hashlib.sha256(image).hexdigest()


def _prepare(sim: rs.Simulator) -> None:
    """Privileges of every path (container templates, template downloads) and fast simulated guests."""
    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel

    privileges = {path: list(privs) for path, privs in FULL_TOKEN_ACL.items()}
    privileges["/storage/local"] = sorted(
        set(privileges.get("/storage/local", [])) | {"Datastore.AllocateTemplate", "Datastore.Audit"}
    )
    privileges["/nodes/pve-test"] = sorted(set(privileges.get("/nodes/pve-test", [])) | {"Sys.AccessNetwork"})
    sim.admin.set_token(sim.token[0], privileges=privileges)
    for vmid in (pf.VMID, pf.TEMPLATE_VMID):
        sim.admin.set_guest(vmid, **FAST_GUEST)


def _template_document(image: tuple[str, str]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "vmanyware.dev/v1",
            "kind": "TemplateBuild",
            "image": "debian-13",
            "source": {"url": image[0], "checksum": image[1], "checksumAlgorithm": "sha256"},
            "node": "pve-test",
            "storage": "local-lvm",
            "importStorage": "local",
            "bridge": "vmbr0",
            "templateVmid": pf.TEMPLATE_VMID,
            "templateVersion": "debian-13-test",
            "guestUser": "debian",
            "diskGiB": 8,
            "buildAddress": {"address": "192.0.2.50/24", "gateway": "192.0.2.1"},
        }
    )


def _definitions() -> dict[str, str]:
    vm = rs.definition_data(snapshot=False)
    vm["packages"] = []
    container = rs.definition_data(snapshot=True)
    container["packages"] = []
    container["image"] = "debian-12-ct"
    return {
        "definition": yaml.safe_dump(vm, sort_keys=False),
        "container_definition": yaml.safe_dump(container, sort_keys=False),
        "catalog": rs.catalog_text(),
        "container_catalog": (rs.REPO / "examples/catalog-containers.yml").read_text(encoding="utf-8"),
    }


def path_run(
    sim: rs.Simulator, path: str, workdir: Path, image: tuple[str, str], extra: dict[str, t.Any] | None = None
) -> rs.Run:
    """One run of ``path`` (path_driver.py in its own process; state between runs in ``workdir``)."""
    vmid = pf.CTID if path in ("container", "cleanup-container") else pf.VMID
    config = {
        "conn": sim.driver_conn(),
        "admin": sim.admin_conf(),
        "journal_dir": str(workdir / "journal"),
        "path": path,
        "vmid": vmid,
        "state_file": str(workdir / "state.json"),
        "template_document": _template_document(image),
        "build_ssh_public_key": BUILD_KEY,
        **_definitions(),
        **(extra or {}),
    }
    fd, name = tempfile.mkstemp(suffix=".json", prefix="vmanyware-path-driver-")
    with os.fdopen(fd, "w") as handle:
        json.dump(config, handle)
    try:
        env = dict(os.environ)
        env.pop(rs.CRASH_ENV, None)
        return rs.run_killable([sys.executable, str(PATH_DRIVER), name], env)
    finally:
        os.unlink(name)


def _track(path: str, documents: list[dict[str, t.Any]]) -> tuple[str, dict[str, t.Any]]:
    """The status and failure of what the path drives: the operation's stages, or its cleanup track."""
    if not documents:
        return "none", {}
    document = documents[0]
    if path.startswith("cleanup"):
        cleanup = (document.get("lifecycle") or {}).get("cleanup") or {}
        return str(cleanup.get("status", "none")), cleanup.get("failure") or {}
    return str(document["status"]), document.get("failure") or {}


def _guests(sim: rs.Simulator) -> tuple[list[int], list[int]]:
    qemu = sim.vmids()
    lxc = sorted(int(ct["vmid"]) for ct in sim.api_get("/nodes/%s/lxc" % rs.NODE))
    return qemu, lxc


def observe(sim: rs.Simulator, case: pf.Case, workdir: Path, image: tuple[str, str]) -> dict[str, t.Any]:
    _prepare(sim)
    path = case.submission.path
    first = path_run(
        sim, path, workdir, image, extra={"faults": case.rules(), "api_timeout": case.fault.api_timeout, **FIRST}
    )
    result = rs.driver_result(first)
    if case.fault.rule["action"] == "delay":
        time.sleep(
            float(case.fault.rule["seconds"]) + 0.5
        )  # let the delayed copy reach the handler before anything is counted
    faults = sim.admin.faults()
    sim.admin.clear_faults()
    documents, torn = rs.journal_state(workdir / "journal")
    messages: list[str] = []
    if first.rc == 0 and result.get("result") == "completed":
        outcome = "completed"
    else:
        status, failure = _track(path, documents)
        messages.append(str(failure.get("message") or ""))
        if status == "failed":
            outcome = "failed %s" % failure.get("code")
        else:
            label = (
                ("uncertain %s" % failure.get("code"))
                if status == "uncertain"
                else ("stopped %s" % result.get("code", "rc=%s" % first.rc))
            )
            final = "still %s" % status
            for _again in range(2):
                rerun = path_run(sim, path, workdir, image, extra=RERUN)
                documents, torn_now = rs.journal_state(workdir / "journal")
                torn += torn_now
                status, failure = _track(path, documents)
                messages.append(str(failure.get("message") or ""))
                if rerun.rc == 0 and rs.driver_result(rerun).get("result") == "completed":
                    final = "re-run completes"
                    break
                if status == "failed":
                    final = "re-run fails %s" % failure.get("code")
                    break
            outcome = "%s, %s" % (label, final)
    entries = sim.admin.requests()
    reached = pf.reached_handler(entries, faults)
    qemu, lxc = _guests(sim)
    allowed_qemu, allowed_lxc = GUESTS[path]
    return {
        "case": case.id,
        "fault": case.fault.label,
        "request": case.submission.name,
        "outcome": outcome,
        "torn": torn,
        "operations": len(documents),
        "twice": {" ".join(k[:2]): v for k, v in reached.items() if v > 1},
        "resent": pf.resent_after_unknown(entries),
        "fired": sum(int(f.get("fired", 0)) for f in faults),
        "extra_guests": [v for v in qemu if v not in (rs.TEMPLATE, *allowed_qemu)]
        + [v for v in lxc if v not in allowed_lxc],
        "uncertain_messages": [m for m in messages if m] if "uncertain" in outcome else [],
        "path_done": outcome.endswith("completes") or outcome == "completed",
        "left": {"qemu": qemu, "lxc": lxc},
    }


def _param(case: pf.Case) -> t.Any:
    return pytest.param(case, id=case.id)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_path_fault(sim: rs.Simulator, tmp_path: Path, image_url: tuple[str, str], case: pf.Case) -> None:
    record = observe(sim, case, tmp_path, image_url)
    rs.write_result("path_faults", record)
    if RECORD:
        sys.stderr.write("    %r: %r,\n" % (record["case"], record["outcome"]))
    assert record["fired"] >= 1, record  # the fault really happened
    assert record["torn"] == 0 and record["operations"] == 1 and record["extra_guests"] == [], record
    assert record["twice"] == {}, record  # no submission reached Proxmox twice
    assert record["resent"] == [], record  # an unknown submission is never sent again
    for message in record["uncertain_messages"]:
        assert re.search(r"\bcheck\b", message, re.I), record  # an uncertain stage names what to check
    if record["path_done"] and case.submission.path.startswith("cleanup"):
        target = pf.CTID if case.submission.path == "cleanup-container" else pf.VMID
        assert target not in record["left"]["qemu"] + record["left"]["lxc"], (
            record
        )  # a completed cleanup removed the guest
    if not RECORD:
        assert record["outcome"] == pf.EXPECTED.get(case.id), record


@pytest.mark.parametrize("path", ["container", "template", "cleanup-vm", "cleanup-container"])
def test_path_completes_without_faults(
    sim: rs.Simulator, tmp_path: Path, image_url: tuple[str, str], path: str
) -> None:
    """The baseline every case starts from: the path completes and sends each of its listed submissions exactly once."""
    _prepare(sim)
    run = path_run(sim, path, tmp_path, image_url, extra=FIRST)
    assert run.rc == 0 and rs.driver_result(run)["result"] == "completed", run.stdout[-2000:] + run.stderr[-2000:]
    entries = sim.admin.requests()
    for sub in pf.SUBMISSIONS:
        if sub.path == path:
            sent = [e for e in entries if e["method"] == sub.method and re.search(sub.regex, e["path"])]
            assert len(sent) >= sub.occurrence, (sub, [e["path"] for e in entries if e["method"] != "GET"])
    assert all(v == 1 for v in pf.reached_handler(entries, []).values())


def test_abandon_sends_nothing(sim: rs.Simulator, tmp_path: Path, image_url: tuple[str, str]) -> None:
    """Abandon has no submission: with a rule armed that drops every request, it completes and the log has no new entry."""
    _prepare(sim)
    setup = path_run(sim, "abandon", tmp_path, image_url, extra=RERUN)
    assert setup.rc == 0 and rs.driver_result(setup).get("setup") is True, setup.stdout[-2000:] + setup.stderr[-2000:]
    before = len(sim.admin.requests())
    sim.admin.add_fault(method="*", path=".*", action="drop_request", occurrence="every")
    run = path_run(sim, "abandon", tmp_path, image_url, extra=RERUN)
    result = rs.driver_result(run)
    faults = sim.admin.faults()
    sim.admin.clear_faults()
    entries = sim.admin.requests()
    assert run.rc == 0 and result["abandon"]["changed"] is True, run.stdout[-2000:] + run.stderr[-2000:]
    # the stage run after the abandonment is refused before any request; the operation's creation reads nothing either
    assert result["after"] == "operation_abandoned", result
    assert entries[before:] == [] and sum(int(f.get("fired", 0)) for f in faults) == 0, entries[before:]
    documents, torn = rs.journal_state(tmp_path / "journal")
    assert torn == 0 and len(documents) == 1 and documents[0]["release"]["reason"] == "abandoned"


def test_path_fault_table_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- path-fault-table:begin -->\n(.*?)\n<!-- path-fault-table:end -->", text, re.S)
    assert match, "docs/reliability.md has no generated path fault table"
    assert match.group(1).strip() == pf.render_table(pf.EXPECTED).strip()
    assert set(pf.EXPECTED) == {c.id for c in pf.cases()}


def test_request_log_evidence_counts_copies() -> None:
    def put(status: object, **params: object) -> dict[str, object]:
        return {"method": "PUT", "path": "/nodes/pve-test/qemu/9100/config", "status": status, "params": params}

    rule = {"method": "PUT", "path": r"/config$", "action": "vm_locked", "fired": 1}
    # an injected refusal did not reach the handler; the later copy is the only one that did
    assert pf.reached_handler([put(200, ciuser="a"), put(500, delete="x"), put(200, delete="x")], [rule]) == {
        ("PUT", "/nodes/pve-test/qemu/9100/config", '{"ciuser": "a"}'): 1,
        ("PUT", "/nodes/pve-test/qemu/9100/config", '{"delete": "x"}'): 1,
    }
    # a copy after a lost reply is a resend, a different request to the same path is not; the digest is not part of the identity
    assert pf.resent_after_unknown([put("dropped", ciuser="a"), put(200, delete="x")]) == []
    assert (
        len(pf.resent_after_unknown([put("request_dropped", ciuser="a", digest="1"), put(200, ciuser="a", digest="2")]))
        == 1
    )
    assert pf.reached_handler([put("dropped", ciuser="a"), put(200, ciuser="a")], []) == {
        ("PUT", "/nodes/pve-test/qemu/9100/config", '{"ciuser": "a"}'): 2
    }
