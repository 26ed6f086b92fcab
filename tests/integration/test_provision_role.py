# SPDX-License-Identifier: GPL-3.0-or-later
"""The provision playbook as operators run it: review, check-mode preview, apply, re-run, plan change.

Real ``ansible-playbook`` processes against the simulator; the simulator's request log and the
journal directory are the independent evidence of what happened.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import typing as t
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MUTATING = ("POST", "PUT", "DELETE")


class Operator:
    """Runs ``vmanyware.proxmox.provision`` with the simulator's connection in the environment."""

    def __init__(self, pvesim: t.Any, tmp_path: Path) -> None:
        conn = pvesim.connection
        self.tmp = tmp_path
        self.journal = tmp_path / "journal"
        self.confirm = tmp_path / "confirm.yml"
        self.env = dict(
            os.environ,
            PROXMOX_HOST=conn["host"],
            PROXMOX_PORT=str(conn["port"]),
            PROXMOX_TOKEN_ID=conn["tokens"]["full"]["id"],
            PROXMOX_TOKEN_SECRET=conn["tokens"]["full"]["secret"],
            PROXMOX_CA_PATH=conn["ca_file"],
            VMANYWARE_JOURNAL_DIR=str(self.journal),
            VMANYWARE_PROVISIONING_ENABLED="true",
            ANSIBLE_NOCOLOR="1",
        )

    def run(self, *extra: str, definition: Path | None = None) -> subprocess.CompletedProcess[str]:
        args = [
            str(BIN / "ansible-playbook"),
            "vmanyware.proxmox.provision",
            "-e",
            "vmanyware_catalog_path=%s" % (REPO / "examples/catalog.yml"),
            "-e",
            "vmanyware_definition_path=%s" % (definition or REPO / "examples/definition.yml"),
            "-e",
            "vmanyware_target_vmid=201",
            "-e",
            "vmanyware_confirmation_file=%s" % self.confirm,
            "-e",
            "vmanyware_known_hosts_file=%s" % (self.tmp / "known_hosts"),
            *extra,
        ]
        return subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=600, check=False)


def _mutations(pvesim: t.Any) -> list[str]:
    return ["%s %s" % (entry["method"], entry["path"]) for entry in pvesim.requests() if entry["method"] in MUTATING]


def _reads(pvesim: t.Any, path: str) -> int:
    return sum(1 for entry in pvesim.requests() if entry["method"] == "GET" and entry["path"] == path)


def test_review_preview_apply_and_rerun(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    operator = Operator(pvesim, tmp_path)

    review = operator.run()
    assert review.returncode == 0, review.stdout[-3000:]
    assert "confirmation_required" not in review.stdout and "provision_confirmation:" in review.stdout
    assert _mutations(pvesim) == []
    assert not list(operator.journal.glob("op-*.json"))
    block = yaml.safe_load(operator.confirm.read_text())["provision_confirmation"]
    assert block["confirmed"] is True and block["targetVmid"] == 201

    preview = operator.run("-e", "@%s" % operator.confirm, "--check", "--diff")
    assert preview.returncode == 0, preview.stdout[-3000:]
    assert "POST /nodes/pve-test/qemu/9000/clone" in preview.stdout
    assert _mutations(pvesim) == []
    assert not list(operator.journal.glob("op-*.json"))

    pvesim.clear_requests()
    applied = operator.run("-e", "@%s" % operator.confirm)
    assert applied.returncode == 0, applied.stdout[-3000:]
    assert "8  packages   completed" in applied.stdout  # stage positions are 1-based, like the plan steps
    # The confirmed run checks inside its one task (a line per check as it runs, not the table again at the end: it is
    # shown once per run), and the clone takes what that preflight read: the template's configuration and the VMID are
    # read once in the whole run.
    assert re.search(r"\[localhost\] preflight passed\s+privileges", applied.stdout), applied.stdout[-3000:]
    assert len(re.findall(r"passed\s+vmid_free\s", applied.stdout)) == 1, applied.stdout[-3000:]
    assert "Preflight against Proxmox" not in applied.stdout  # the preflight role's task did not run
    assert _reads(pvesim, "/nodes/pve-test/qemu/9000/config") == 1
    assert _reads(pvesim, "/cluster/nextid") == 1 and _reads(pvesim, "/version") == 1
    assert all(
        str(entry["params"].get("vmid")) == "201"
        for entry in pvesim.requests(method="GET", path_regex=r"^/cluster/nextid$")
    )
    sent = _mutations(pvesim)
    assert sent.count("POST /nodes/pve-test/qemu/9000/clone") == 1
    assert sent.count("POST /nodes/pve-test/qemu/201/status/start") == 1
    assert sent.count("PUT /nodes/pve-test/qemu/201/resize") == 1
    assert (tmp_path / "known_hosts").read_text().count("ssh-ed25519") == 1
    pvesim.clear_requests()

    again = operator.run("-e", "@%s" % operator.confirm)
    assert again.returncode == 0, again.stdout[-3000:]
    assert _mutations(pvesim) == []
    assert re.search(r"localhost\s+:\s+ok=\d+\s+changed=0\s", again.stdout), again.stdout[-1500:]


def test_a_changed_plan_stops_with_plan_changed(pvesim: t.Any, tmp_path: Path) -> None:
    operator = Operator(pvesim, tmp_path)
    assert operator.run().returncode == 0
    changed = tmp_path / "definition.yml"
    changed.write_text((REPO / "examples/definition.yml").read_text().replace("cores: 2", "cores: 4"))
    result = operator.run("-e", "@%s" % operator.confirm, definition=changed)
    assert result.returncode != 0
    assert "plan_changed" in result.stdout
    assert _mutations(pvesim) == []


def test_a_confirmation_with_a_field_missing_prints_the_block_again_and_changes_nothing(
    pvesim: t.Any, tmp_path: Path
) -> None:
    """On the one-task path the vmanyware_provision task checks the confirmation (as vmanyware_operation does on the
    other paths): confirmed: true with a field missing is no confirmation, so the role prints the block and stops."""
    operator = Operator(pvesim, tmp_path)
    assert operator.run().returncode == 0
    block = yaml.safe_load(operator.confirm.read_text())["provision_confirmation"]
    partial = tmp_path / "partial.yml"
    partial.write_text(
        yaml.safe_dump({"provision_confirmation": {key: value for key, value in block.items() if key != "bridge"}})
    )
    operator.confirm.unlink()
    pvesim.clear_requests()
    result = operator.run("-e", "@%s" % partial)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "provision_confirmation:" in result.stdout and "Nothing was changed" in result.stdout
    assert yaml.safe_load(operator.confirm.read_text())["provision_confirmation"] == block  # the file is written again
    assert "[localhost] preflight" not in result.stdout and "stage 1/" not in result.stdout
    assert _mutations(pvesim) == [] and pvesim.requests() == [] and not list(operator.journal.glob("op-*.json"))


def test_a_failed_preflight_stops_a_new_operation_before_anything_is_recorded(pvesim: t.Any, tmp_path: Path) -> None:
    operator = Operator(pvesim, tmp_path)
    assert operator.run().returncode == 0
    # The limited token lacks privileges the stages need: the preflight fails, and with no recorded
    # operation to resume, the step-by-step run stops before recording one.
    limited = pvesim.connection["tokens"]["limited"]
    operator.env.update(PROXMOX_TOKEN_ID=limited["id"], PROXMOX_TOKEN_SECRET=limited["secret"])
    result = operator.run("-e", "@%s" % operator.confirm, "-e", "provision_step_by_step=true")
    assert result.returncode != 0
    assert "check(s) failed (see the table above); nothing was changed" in result.stdout, result.stdout[-3000:]
    assert _mutations(pvesim) == [] and not list(operator.journal.glob("op-*.json"))


def test_a_failed_preflight_of_the_one_task_path_records_nothing_and_a_rerun_runs(
    pvesim: t.Any, tmp_path: Path
) -> None:
    pvesim.set_speed(200)
    operator = Operator(pvesim, tmp_path)
    assert operator.run().returncode == 0
    full = dict(operator.env)
    limited = pvesim.connection["tokens"]["limited"]
    operator.env.update(PROXMOX_TOKEN_ID=limited["id"], PROXMOX_TOKEN_SECRET=limited["secret"])
    pvesim.clear_requests()
    failed = operator.run("-e", "@%s" % operator.confirm)
    assert failed.returncode != 0
    # the checks were shown as they ran, and the failure names the code; nothing at all was sent
    assert re.search(r"\[localhost\] preflight failed\s+privileges", failed.stdout), failed.stdout[-3000:]
    assert '"error_code": "preflight_failed"' in failed.stdout and "Nothing was recorded or sent" in failed.stdout, (
        failed.stdout[-3000:]
    )
    assert _mutations(pvesim) == [] and all(entry["method"] == "GET" for entry in pvesim.requests())
    # The preflight ran before the record: no operation to abandon.
    assert not list(operator.journal.glob("op-*.json"))
    # The step-by-step path stops the same way (its preflight also comes before its record).
    again = operator.run("-e", "@%s" % operator.confirm, "-e", "provision_step_by_step=true")
    assert again.returncode != 0 and "nothing was changed" in again.stdout, again.stdout[-3000:]
    assert _mutations(pvesim) == [] and not list(operator.journal.glob("op-*.json"))
    # With the privileges back, the same confirmation records the operation and completes it.
    operator.env = full
    resumed = operator.run("-e", "@%s" % operator.confirm)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    [path] = list(operator.journal.glob("op-*.json"))
    assert yaml.safe_load(path.read_text())["status"] == "completed"
    assert _mutations(pvesim).count("POST /nodes/pve-test/qemu/9000/clone") == 1


@pytest.mark.parametrize("step_by_step", [False, True], ids=["one-task", "step-by-step"])
def test_long_tasks_show_progress_without_resending(pvesim: t.Any, tmp_path: Path, step_by_step: bool) -> None:
    operator = Operator(pvesim, tmp_path)
    assert operator.run().returncode == 0
    pvesim.set_speed(4)  # a full clone now takes about 2 s; the role checks back every second
    applied = operator.run(
        "-e",
        "@%s" % operator.confirm,
        "-e",
        "provision_wait_budget=1",
        "-e",
        "provision_step_by_step=%s" % step_by_step,
    )
    assert applied.returncode == 0, applied.stdout[-3000:]
    if step_by_step:
        assert re.search(r"clone still running", applied.stdout), applied.stdout[-3000:]
        assert "[localhost] stage 1/" not in applied.stdout  # the one task did not run
    else:
        # the one task prints while it runs: a line per stage, and one per second of the clone
        assert re.search(r"\[localhost\] stage 1/\d+ clone: still running after", applied.stdout), applied.stdout[
            -3000:
        ]
        assert re.search(r"\[localhost\] stage (\d+)/\1 packages: completed", applied.stdout), applied.stdout[-3000:]
        assert "Follow up until done" not in applied.stdout
    assert _mutations(pvesim).count("POST /nodes/pve-test/qemu/9000/clone") == 1
    # the agent-verified host keys for later plays: by the one task itself, or by the step-by-step path's own task
    assert (tmp_path / "known_hosts").read_text().count("ssh-ed25519") == 1
    assert ("Install the agent-verified SSH host keys" in applied.stdout) == step_by_step


def test_repeat_plans_a_recorded_operation_again_for_a_new_vmid(pvesim: t.Any, tmp_path: Path) -> None:
    pvesim.set_speed(200)
    operator = Operator(pvesim, tmp_path)
    assert operator.run().returncode == 0
    pvesim.add_fault(method="POST", path=r"/qemu/9000/clone$", action="task_error", occurrence=1)
    failed = operator.run("-e", "@%s" % operator.confirm)
    assert failed.returncode != 0 and "task_failed" in failed.stdout
    (source,) = [path.stem for path in operator.journal.glob("op-*.json")]
    original = yaml.safe_load(operator.confirm.read_text())["provision_confirmation"]
    pvesim.clear_requests()

    def repeat(
        *extra: str, vmid: int = 202, catalog: Path | None = REPO / "examples/catalog.yml"
    ) -> subprocess.CompletedProcess[str]:
        args = [
            str(BIN / "ansible-playbook"),
            "vmanyware.proxmox.provision",
            "-e",
            "vmanyware_repeat_operation=%s" % source,
            "-e",
            "vmanyware_target_vmid=%d" % vmid,
            "-e",
            "vmanyware_confirmation_file=%s" % operator.confirm,
            "-e",
            "vmanyware_known_hosts_file=%s" % (tmp_path / "known_hosts"),
            *extra,
        ]
        if catalog is not None:
            args += ["-e", "vmanyware_catalog_path=%s" % catalog]
        return subprocess.run(args, env=operator.env, capture_output=True, text=True, timeout=600, check=False)

    # The repeat is checked against the current catalog: it must be given one ...
    without = repeat(catalog=None)
    assert without.returncode != 0 and "needs the current catalog" in without.stdout, without.stdout[-3000:]
    # ... that still maps the image (the template was taken out of the catalog: refused with a fixed code) ...
    current = yaml.safe_load((REPO / "examples/catalog.yml").read_text())
    removed = tmp_path / "catalog-removed.yml"
    removed.write_text(yaml.safe_dump(dict(current, images=[])))
    gone = repeat(catalog=removed)
    assert gone.returncode != 0 and '"error_code": "repeat_image_removed"' in gone.stdout, gone.stdout[-3000:]
    # ... exactly as recorded (another template VMID and storage now: refused, the fields named).
    changed = tmp_path / "catalog-changed.yml"
    changed.write_text(
        yaml.safe_dump(dict(current, images=[dict(current["images"][0], templateVmid=9001, storage="other-lvm")]))
    )
    moved = repeat(catalog=changed)
    assert moved.returncode != 0 and '"error_code": "repeat_mapping_changed"' in moved.stdout, moved.stdout[-3000:]
    assert re.search(r'"fields": \[\s*"storage",\s*"templateVmid"\s*\]', moved.stdout), moved.stdout[-3000:]
    # Nothing was recorded or sent, and no confirmation block was printed for a refused repeat.
    assert _mutations(pvesim) == [] and len(list(operator.journal.glob("op-*.json"))) == 1
    assert "provision_confirmation:" not in gone.stdout + moved.stdout

    same = repeat(vmid=201)
    assert same.returncode != 0 and "repeat it with a new provision_target_vmid" in same.stdout
    review = repeat()
    assert review.returncode == 0, review.stdout[-3000:]
    assert "Repeating operation %s" % source in review.stdout and "provision_confirmation:" in review.stdout
    block = yaml.safe_load(operator.confirm.read_text())["provision_confirmation"]
    assert block["targetVmid"] == 202 and block["definitionHash"] == original["definitionHash"]
    assert block["planHash"] != original["planHash"] and _mutations(pvesim) == []
    applied = repeat("-e", "@%s" % operator.confirm)
    assert applied.returncode == 0, applied.stdout[-3000:]
    assert _mutations(pvesim).count("POST /nodes/pve-test/qemu/9000/clone") == 1
    assert pvesim.vm(202)["config"]["name"] == "kernel-lab"
    assert len(list(operator.journal.glob("op-*.json"))) == 2
