# SPDX-License-Identifier: GPL-3.0-or-later
"""The provision playbook with a container plan: review, check-mode preview, apply, re-run (real ansible-playbook, simulator)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_provision_role import REPO, Operator, _mutations  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.integration


def test_container_plan_through_the_provision_playbook(pvesim: object, tmp_path: Path) -> None:
    from pvesim.state import FULL_TOKEN_ACL  # pylint: disable=import-outside-toplevel
    pvesim.set_token(pvesim.connection["tokens"]["full"]["id"],  # type: ignore[attr-defined]
                     privileges={**FULL_TOKEN_ACL, "/storage/local": ["Datastore.AllocateTemplate", "Datastore.Audit"]})
    pvesim.set_speed(200)  # type: ignore[attr-defined]
    definition = yaml.safe_load((REPO / "examples/definition.yml").read_text(encoding="utf-8"))
    definition.update({"image": "debian-12-ct", "packages": []})
    definition_path = tmp_path / "definition.yml"
    definition_path.write_text(yaml.safe_dump(definition), encoding="utf-8")
    operator = Operator(pvesim, tmp_path)

    def run(*extra: str) -> str:
        completed = operator.run("-e", "vmanyware_catalog_path=%s" % (REPO / "examples/catalog-containers.yml"), *extra,
                                 definition=definition_path)
        assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-2000:]
        return completed.stdout

    review = run()
    assert "source      container debian-12-ct from debian-12-standard 12.* unprivileged on pve-test" in review
    assert "container_template" in review and _mutations(pvesim) == []
    preview = run("-e", "@%s" % operator.confirm, "--check", "--diff")
    assert "POST /nodes/pve-test/aplinfo" in preview and _mutations(pvesim) == []
    applied = run("-e", "@%s" % operator.confirm)
    assert _mutations(pvesim) == ["POST /nodes/pve-test/aplinfo", "POST /nodes/pve-test/lxc", "POST /nodes/pve-test/lxc/201/status/start"]
    (document_path,) = operator.journal.glob("op-*.json")
    document = yaml.safe_load(document_path.read_text(encoding="utf-8"))
    assert document["status"] == "completed" and [item["status"] for item in document["stages"]] == ["completed"] * 4
    assert document["handoff"]["ipv4"] in applied  # the summary shows the recorded address
    pvesim.clear_requests()  # type: ignore[attr-defined]
    run("-e", "@%s" % operator.confirm)
    assert _mutations(pvesim) == []
