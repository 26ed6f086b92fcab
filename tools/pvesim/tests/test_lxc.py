# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Containers, appliance templates and storage content in the simulator (pve-container / pve-manager behaviour)."""

from __future__ import annotations

import re
import time
import typing as t

import pytest

from pvesim.lxc import TEMPLATE_STORAGE_ACL
from pvesim.state import FULL_TOKEN_ACL
from pvesim.testing import PvesimAdmin

from .conftest import Api
from .test_api import err as raw_err

N = "/nodes/pve-test"
TEMPLATE = "debian-12-standard_12.12-1_amd64.tar.zst"
OSTEMPLATE = f"local:vztmpl/{TEMPLATE}"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnly0000000000000000000000 op@host"


@pytest.fixture()
def fast(pvesim: PvesimAdmin) -> t.Iterator[PvesimAdmin]:
    pvesim.set_speed(100.0)
    pvesim.set_token("vmanyware@pve!full", privileges={**FULL_TOKEN_ACL, **TEMPLATE_STORAGE_ACL})
    try:
        yield pvesim
    finally:
        pvesim.set_speed(10.0)


def err(resp: t.Any) -> tuple[int, str]:
    status, message = raw_err(resp)
    return status, message.rstrip("\n")


def _download(api: Api) -> dict[str, t.Any]:
    return api.run("POST", f"{N}/aplinfo", storage="local", template=TEMPLATE)


def _create(api: Api, vmid: int = 310, **extra: t.Any) -> dict[str, t.Any]:
    params = {
        "vmid": vmid,
        "ostemplate": OSTEMPLATE,
        "hostname": f"ct-{vmid}",
        "rootfs": "local-lvm:8",
        "cores": 2,
        "memory": 1024,
        "swap": 0,
        "net0": "name=eth0,bridge=vmbr0,ip=dhcp",
        "ssh-public-keys": KEY,
        "description": "vmanyware binding",
        "tags": "vmanyware",
        **extra,
    }
    return api.run("POST", f"{N}/lxc", **params)


def test_aplinfo_lists_and_downloads_into_vztmpl(api: Api, fast: PvesimAdmin) -> None:
    apl = api.data(api.get(f"{N}/aplinfo"))
    debian12 = sorted(a["version"] for a in apl if a["package"] == "debian-12-standard")
    assert debian12 == ["12.12-1", "12.7-1"]
    assert all(a["type"] == "lxc" and a["template"].startswith(a["package"] + "_" + a["version"]) for a in apl)
    assert api.data(api.get(f"{N}/storage/local/content", content="vztmpl")) == []
    st = _download(api)
    assert st["exitstatus"] == "OK"
    task = next(task for task in fast.tasks() if task["upid"] == st["upid"])
    assert task["type"] == "download" and task["id"] == TEMPLATE
    content = api.data(api.get(f"{N}/storage/local/content", content="vztmpl"))
    assert [(c["volid"], c["format"], c["content"]) for c in content] == [(OSTEMPLATE, "tzst", "vztmpl")]
    assert err(api.post(f"{N}/aplinfo", storage="local", template="nope_1.0_amd64.tar.zst"))[0] == 400
    # the permission check comes first (schema: Datastore.AllocateTemplate on the storage)
    assert err(api.post(f"{N}/aplinfo", storage="local-lvm", template=TEMPLATE)) == (
        403,
        "Permission check failed (/storage/local-lvm, Datastore.AllocateTemplate)",
    )
    # the limited token has no privilege on /storage/local
    assert Api(fast.connection, "limited").post(f"{N}/aplinfo", storage="local", template=TEMPLATE).status_code == 403


def test_create_start_interfaces_snapshot_stop_destroy(api: Api, fast: PvesimAdmin) -> None:
    assert err(api.post(f"{N}/lxc", vmid=310, ostemplate=OSTEMPLATE)) == (500, f"can't find file '{OSTEMPLATE}'")
    _download(api)
    st = _create(api)
    assert st["exitstatus"] == "OK", st
    task = next(task for task in fast.tasks() if task["upid"] == st["upid"])
    assert (task["type"], task["id"]) == ("vzcreate", "310")
    conf = api.data(api.get(f"{N}/lxc/310/config"))
    assert (
        conf["hostname"] == "ct-310"
        and conf["unprivileged"] == 1
        and conf["ostype"] == "debian"
        and conf["arch"] == "amd64"
    )
    assert conf["cores"] == 2 and conf["memory"] == 1024 and conf["swap"] == 0
    assert conf["rootfs"] == "local-lvm:vm-310-disk-0,size=8G"
    mac = re.fullmatch(r"name=eth0,bridge=vmbr0,hwaddr=(BC:24:11:[0-9A-F:]{8}),ip=dhcp,type=veth", conf["net0"])
    assert mac, conf["net0"]
    assert "ssh-public-keys" not in conf and conf["description"] == "vmanyware binding" and conf["tags"] == "vmanyware"
    assert fast.set_storage("local-lvm")["volumes"]["local-lvm:vm-310-disk-0"] == 8 << 30
    resources = {r["vmid"]: r for r in api.data(api.get("/cluster/resources", type="vm"))}
    assert (
        resources[310]["type"] == "lxc" and resources[310]["name"] == "ct-310" and resources[310]["tags"] == "vmanyware"
    )
    assert api.get("/cluster/nextid", vmid=310).status_code == 400
    assert (
        err(api.post(f"{N}/lxc", vmid=310, ostemplate=OSTEMPLATE, rootfs="local-lvm:4"))[1]
        == "CT 310 already exists on node 'pve-test'"
    )
    assert err(api.get(f"{N}/lxc/310/interfaces")) == (500, "CT 310 is not running")

    assert api.run("POST", f"{N}/lxc/310/status/start")["exitstatus"] == "OK"
    assert err(api.post(f"{N}/lxc/310/status/start")) == (500, "CT 310 already running")
    assert api.data(api.get(f"{N}/lxc/310/status/current"))["status"] == "running"
    eth0: dict[str, t.Any] = {}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "inet" not in eth0:
        ifaces = api.data(api.get(f"{N}/lxc/310/interfaces"))
        assert ifaces[0]["name"] == "lo"
        eth0 = next(i for i in ifaces if i["name"] == "eth0")
        time.sleep(0.05)
    assert (
        eth0["hwaddr"] == mac.group(1).lower() and eth0["inet"].startswith("192.0.2.") and eth0["inet"].endswith("/24")
    )

    assert (
        api.run("POST", f"{N}/lxc/310/snapshot", snapname="ready", description="after packages")["exitstatus"] == "OK"
    )
    snaps = {s["name"]: s for s in api.data(api.get(f"{N}/lxc/310/snapshot"))}
    assert set(snaps) == {"ready", "current"} and snaps["current"]["parent"] == "ready"
    assert err(api.delete(f"{N}/lxc/310")) == (500, "unable to destroy CT 310 - container is running")
    assert api.run("POST", f"{N}/lxc/310/status/shutdown", forceStop=1)["exitstatus"] == "OK"
    assert err(api.post(f"{N}/lxc/310/status/stop")) == (500, "CT 310 not running")
    assert api.run("DELETE", f"{N}/lxc/310", purge=1)["exitstatus"] == "OK"
    assert "local-lvm:vm-310-disk-0" not in fast.set_storage("local-lvm")["volumes"]
    assert err(api.get(f"{N}/lxc/310/config")) == (
        500,
        "Configuration file 'nodes/pve-test/lxc/310.conf' does not exist",
    )
    assert not fast.schema_violations()


def test_create_rules_privileges_and_failures(api: Api, limited: Api, fast: PvesimAdmin) -> None:
    _download(api)
    # rootfs must be on a storage with rootdir content
    assert err(api.post(f"{N}/lxc", vmid=311, ostemplate=OSTEMPLATE, rootfs="local:8")) == (
        400,
        "Parameter verification failed.",
    )
    # privileged containers need Sys.Modify on /; features other than nesting are root@pam's
    assert (
        api.post(f"{N}/lxc", vmid=311, ostemplate=OSTEMPLATE, rootfs="local-lvm:4", unprivileged=0).status_code == 403
    )
    assert (
        api.post(f"{N}/lxc", vmid=311, ostemplate=OSTEMPLATE, rootfs="local-lvm:4", features="keyctl=1").status_code
        == 403
    )
    st = _create(api, 311, features="nesting=1")
    assert st["exitstatus"] == "OK" and api.data(api.get(f"{N}/lxc/311/config"))["features"] == "nesting=1"
    # the limited token cannot allocate space on local-lvm
    assert limited.post(f"{N}/lxc", vmid=312, ostemplate=OSTEMPLATE, rootfs="local-lvm:4").status_code == 403
    # a failed create removes the reserved config and its volume
    fast.set_storage("local-lvm", avail=1 << 30)
    st = _create(api, 313)
    assert st["exitstatus"].startswith("lvcreate 'pve/vm-313-disk-0' error")
    assert 313 not in {r["vmid"] for r in api.data(api.get("/cluster/resources", type="vm"))}
    # the ID is reserved (lock: create) while the task runs
    fast.set_storage("local-lvm", avail=None)
    fast.set_speed(1.0)
    upid = api.data(api.post(f"{N}/lxc", vmid=314, ostemplate=OSTEMPLATE, rootfs="local-lvm:4", description="binding"))
    listed = {r["vmid"]: r for r in api.data(api.get("/cluster/resources", type="vm"))}
    assert listed[314].get("lock") == "create"
    assert api.get("/cluster/nextid", vmid=314).status_code == 400
    fast.set_speed(100.0)
    assert api.wait(upid)["exitstatus"] == "OK"
    assert not fast.schema_violations()


def test_template_storage_needs_its_privileges(api: Api, pvesim: PvesimAdmin) -> None:
    """The demo full token alone may not read or fill the template storage (its ACL has no /storage/local)."""
    assert api.get(f"{N}/storage/local/content").status_code == 403
    assert err(api.post(f"{N}/aplinfo", storage="local", template=TEMPLATE)) == (
        403,
        "Permission check failed (/storage/local, Datastore.AllocateTemplate)",
    )
    pvesim.set_token("vmanyware@pve!full", privileges={**FULL_TOKEN_ACL, **TEMPLATE_STORAGE_ACL})
    assert api.get(f"{N}/storage/local/content").status_code == 200


def test_admin_container_stub_is_served(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_container(330, name="legacy")
    assert api.data(api.get(f"{N}/lxc/330/status/current"))["name"] == "legacy"
    assert [c["vmid"] for c in api.data(api.get(f"{N}/lxc"))] == [330]
    assert api.data(api.get(f"{N}/lxc/330/config"))["hostname"] == "legacy"


def test_admin_config_edit_and_the_destroy_refusals(api: Api, pvesim: PvesimAdmin) -> None:
    """``PUT /_pvesim/containers/{vmid}/config`` (what an operator might set by hand) and what DELETE then refuses."""
    pvesim.add_container(330, name="legacy")
    assert (
        pvesim.set_container_config(330, set={"protection": "1", "description": "by hand"})["config"]["protection"]
        == "1"
    )
    assert api.data(api.get(f"{N}/lxc/330/config"))["protection"] == 1
    assert err(api.delete(f"{N}/lxc/330", purge=1)) == (500, "can't remove CT 330 - protection mode enabled")
    pvesim.set_container_config(330, set={"lock": "backup"}, delete=["protection"])
    assert err(api.delete(f"{N}/lxc/330", purge=1)) == (500, "CT is locked (backup)")
    pvesim.set_container_config(330, delete=["lock"])
    assert api.run("DELETE", f"{N}/lxc/330", **{"purge": 1, "destroy-unreferenced-disks": 1})["exitstatus"] == "OK"
    assert api.data(api.get(f"{N}/lxc")) == []
    assert not pvesim.schema_violations()
