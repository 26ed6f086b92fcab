# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fidelity tests of the simulated API against documented / source-verified PVE behaviour."""

from __future__ import annotations

import threading
import time
import typing as t

import pytest
import requests
from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin

from .conftest import Api

N = "/nodes/pve-test"


def err(resp: requests.Response) -> tuple[int, str]:
    return resp.status_code, resp.json()["message"] if resp.content else resp.reason


# --- envelope, version, inventory ---------------------------------------------------------


def test_version_and_envelope(api: Api) -> None:
    resp = api.get("/version")
    assert resp.status_code == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.json() == {"data": {"release": "9.1", "repoid": resp.json()["data"]["repoid"], "version": "9.1.3"}}


def test_nodes_storage_network(api: Api) -> None:
    assert [n["node"] for n in api.data(api.get("/nodes"))] == ["pve-test"]
    storages = {s["storage"]: s for s in api.data(api.get(f"{N}/storage"))}
    assert set(storages) == {"local-lvm"}  # the token only has Datastore.* on local-lvm
    lvm = storages["local-lvm"]
    assert lvm["type"] == "lvmthin" and lvm["content"] == "images,rootdir" and lvm["total"] == 200 * 2**30
    assert lvm["avail"] > 150 * 2**30 and lvm["active"] == 1 and lvm["enabled"] == 1
    status = api.data(api.get(f"{N}/storage/local-lvm/status"))
    assert status["total"] == lvm["total"]
    bridges = api.data(api.get(f"{N}/network", type="bridge"))
    assert [b["iface"] for b in bridges] == ["vmbr0"]


def test_template_config_and_digest(api: Api, pvesim: PvesimAdmin) -> None:
    conf = api.data(api.get(f"{N}/qemu/9000/config"))
    assert conf["template"] == 1 and conf["scsi0"] == "local-lvm:base-9000-disk-0,size=8G"
    assert conf["ide2"] == "local-lvm:vm-9000-cloudinit,media=cdrom"
    assert conf["net0"].startswith("virtio=BC:24:11:") and conf["net0"].endswith(",bridge=vmbr0")
    assert conf["agent"] == "1" and conf["ostype"] == "l26" and conf["scsihw"] == "virtio-scsi-single"
    import hashlib

    raw = pvesim.vm(9000)["raw"]
    assert conf["digest"] == hashlib.sha1(raw.encode()).hexdigest()
    assert raw.startswith("#Debian 13 (trixie) cloud image template\nagent: 1\n")


def test_cluster_resources_and_nextid(api: Api) -> None:
    vms = api.data(api.get("/cluster/resources", type="vm"))
    assert [(v["vmid"], v["name"], v["template"], v["type"]) for v in vms] == [(9000, "debian-13", 1, "qemu")]
    assert api.data(api.get("/cluster/nextid")) == 100
    assert api.data(api.get("/cluster/nextid", vmid=201)) == 201
    resp = api.get("/cluster/nextid", vmid=9000)
    assert resp.status_code == 400
    assert resp.json() == {
        "data": None,
        "message": "Parameter verification failed.\n",
        "errors": {"vmid": "VM 9000 already exists"},
    }


def test_containers_options_and_nextid_range(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.add_container(100, name="ct-web")
    pvesim.add_container(101, name="ct-tpl", template=True)
    guests = api.data(api.get("/cluster/resources", type="vm"))
    expected = [("lxc/100", "lxc", 0), ("lxc/101", "lxc", 1), ("qemu/9000", "qemu", 1)]
    assert [(g["id"], g["type"], g["template"]) for g in guests] == expected
    assert api.data(api.get("/cluster/nextid")) == 102
    assert api.get("/cluster/nextid", vmid=101).json()["errors"] == {"vmid": "VM 101 already exists"}
    # a container's VMID is refused as a clone target
    resp = api.post(f"{N}/qemu/9000/clone", newid=100, full=1, storage="local-lvm")
    assert resp.status_code == 500 and resp.reason == "CT 100 already exists on node 'pve-test'"
    # datacenter.cfg next-id: upper is exclusive; without Sys.Audit on / the token does not see it (PVE's filter)
    assert api.data(api.get("/cluster/options")) == {"allowed-tags": []}
    assert pvesim.root_call("PUT", "/cluster/options", **{"next-id": "lower=300,upper=302"}) is None
    assert pvesim.root_call("GET", "/cluster/options")["next-id"] == {"lower": 300, "upper": 302}
    assert api.data(api.get("/cluster/options")) == {"allowed-tags": []}
    assert api.data(api.get("/cluster/nextid")) == 300
    pvesim.add_container(300)
    pvesim.add_container(301)
    resp = api.get("/cluster/nextid")
    assert resp.status_code == 500 and resp.reason == "unable to get any free VMID in range [300, 302]"
    pvesim.root_call("PUT", "/cluster/options", delete="next-id")
    assert "next-id" not in pvesim.root_call("GET", "/cluster/options")
    pvesim.delete_container(100)
    assert api.data(api.get("/cluster/nextid")) == 100
    assert pvesim.schema_violations() == []


# --- errors: 501, 400, 401, 403 ---------------------------------------------------------------


def test_unknown_path_and_unimplemented(api: Api, pvesim: PvesimAdmin) -> None:
    resp = api.get("/foo/bar")
    assert resp.status_code == 501 and resp.json()["message"] == "Method 'GET /foo/bar' not implemented\n"
    resp = api.get(f"{N}/ceph/status")  # in the schema, not simulated
    assert resp.status_code == 501 and resp.json()["message"] == f"Method 'GET {N}/ceph/status' not implemented\n"
    entry = pvesim.requests(path_regex="ceph")[-1]
    assert entry["implemented"] is False and entry["status"] == 501
    assert resp.headers.get("Connection") == "close"  # PVE drops keep-alive after errors


def test_parameter_verification(api: Api) -> None:
    resp = api.post(f"{N}/qemu/9000/clone", newid="abc", bogus="1", full="true")
    assert resp.status_code == 400
    body = resp.json()
    assert body["message"] == "Parameter verification failed.\n" and body["data"] is None
    assert body["errors"] == {
        "newid": "type check ('integer') failed - got 'abc'",
        "bogus": "property is not defined in schema and the schema does not allow additional properties",
        "full": "type check ('boolean') failed - got 'true'",
    }
    assert resp.reason == "Parameter verification failed."


def test_auth_401(pvesim: PvesimAdmin) -> None:
    conn = pvesim.connection
    url = conn["url"] + "/version"
    resp = requests.get(url, verify=conn["ca_file"], timeout=10)
    assert resp.status_code == 401 and resp.reason == "No ticket"
    bad = {"Authorization": f"PVEAPIToken={conn['tokens']['full']['id']}=wrong"}
    resp = requests.get(url, headers=bad, verify=conn["ca_file"], timeout=10)
    assert resp.status_code == 401 and resp.reason == "Authentication failed!"
    pvesim.set_token("vmanyware@pve!full", expire=int(time.time()) - 10)
    good = {"Authorization": f"PVEAPIToken={conn['tokens']['full']['id']}={conn['tokens']['full']['secret']}"}
    resp = requests.get(url, headers=good, verify=conn["ca_file"], timeout=10)
    assert resp.status_code == 401
    pvesim.set_token("vmanyware@pve!full", expire=0)
    assert requests.get(url, headers=good, verify=conn["ca_file"], timeout=10).status_code == 200
    assert all(e["params"] == {} for e in pvesim.requests())
    assert "wrong" not in str(pvesim.requests())


def test_ticket_login_and_csrf(pvesim: PvesimAdmin) -> None:
    conn = pvesim.connection
    base = conn["url"]
    resp = requests.post(
        base + "/access/ticket", data={"username": "root@pam", "password": "nope"}, verify=conn["ca_file"], timeout=10
    )
    assert resp.status_code == 401 and resp.json()["message"] == "authentication failure\n"
    resp = requests.post(
        base + "/access/ticket",
        data={"username": "root@pam", "password": conn["root_password"]},
        verify=conn["ca_file"],
        timeout=10,
    )
    data = resp.json()["data"]
    assert data["username"] == "root@pam" and data["ticket"].startswith("PVE:root@pam:")
    cookies = {"PVEAuthCookie": data["ticket"]}
    assert requests.get(base + "/version", cookies=cookies, verify=conn["ca_file"], timeout=10).status_code == 200
    path = base + f"{N}/qemu/9000/config"
    resp = requests.put(path, data={"description": "x"}, cookies=cookies, verify=conn["ca_file"], timeout=10)
    assert resp.status_code == 401 and resp.reason == "Permission denied - invalid csrf token"
    resp = requests.put(
        path,
        data={"description": "x"},
        cookies=cookies,
        headers={"CSRFPreventionToken": data["CSRFPreventionToken"]},
        verify=conn["ca_file"],
        timeout=10,
    )
    assert resp.status_code == 200 and resp.json() == {"data": None}
    log = pvesim.requests(path_regex="access/ticket")
    assert log and all(e["params"]["password"] == "<redacted>" for e in log)
    assert conn["root_password"] not in str(pvesim.requests())


def test_permissions_403(limited: Api, api: Api, pvesim: PvesimAdmin) -> None:
    resp = limited.post(f"{N}/qemu/9000/clone", newid=201)
    assert resp.status_code == 403
    assert resp.json()["message"] == "Permission check failed (/vms/9000, VM.Clone)\n"
    resp = api.post(f"{N}/qemu/9000/clone", newid=201, pool="nopool")  # RPCEnvironment::check_pool_exist
    assert (
        resp.status_code == 403 and resp.json()["message"] == "Permission check failed (pool 'nopool' does not exist)\n"
    )
    conn = pvesim.connection
    ProxmoxAPI(
        conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"]
    ).pools.post(poolid="nopriv")
    resp = api.post(f"{N}/qemu/9000/clone", newid=201, pool="nopriv")  # and/or form: VM.Allocate on /vms/201 is enough
    assert resp.status_code != 403


def test_limited_token_missing_datastore(pvesim: PvesimAdmin, limited: Api) -> None:
    pvesim.set_token("vmanyware@pve!limited", privileges={"/vms": ["VM.Clone", "VM.Allocate", "VM.Audit"]})
    resp = limited.post(f"{N}/qemu/9000/clone", newid=202, full=1)
    assert resp.status_code == 403
    assert resp.json()["message"] == "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)\n"


def test_access_permissions(api: Api) -> None:
    perms = api.data(api.get("/access/permissions"))
    assert perms["/vms/9000"] == {"VM.Audit": 1, "VM.Clone": 1}
    assert "VM.Allocate" in perms["/vms"] and "VM.Clone" not in perms["/vms"]
    one = api.data(api.req("GET", "/access/permissions", params={"path": "/vms/201"}))
    assert "VM.Allocate" in one["/vms/201"]
    assert api.data(api.req("GET", "/access/permissions", params={"path": "/storage/local"}))["/storage/local"] == {}


# --- clone, locks, concurrency ----------------------------------------------------------------


def test_clone_full_lifecycle(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.set_speed(2)  # slow enough to observe the lock
    upid = api.data(api.post(f"{N}/qemu/9000/clone", newid=201, name="web-1", full=1))
    assert upid.startswith("UPID:pve-test:") and ":qmclone:9000:vmanyware@pve!full:" in upid
    parts = upid.split(":")
    assert len(parts) == 9 and all(len(p) == 8 for p in parts[2:5])
    conf = api.data(api.get(f"{N}/qemu/201/config"))
    assert conf["lock"] == "clone"
    resp = api.put(f"{N}/qemu/201/config", description="x")
    assert resp.status_code == 500 and resp.json()["message"] == "VM is locked (clone)\n"
    pvesim.set_speed(50)
    st = api.wait(upid)
    assert (
        st["exitstatus"] == "OK"
        and st["type"] == "qmclone"
        and st["user"] == "vmanyware@pve"
        and st["tokenid"] == "full"
    )
    conf = api.data(api.get(f"{N}/qemu/201/config"))
    assert "lock" not in conf and "template" not in conf and conf["name"] == "web-1"
    assert conf["scsi0"] == "local-lvm:vm-201-disk-0,size=8G"
    assert conf["ide2"] == "local-lvm:vm-201-cloudinit,media=cdrom"
    tmpl = api.data(api.get(f"{N}/qemu/9000/config"))
    assert conf["net0"] != tmpl["net0"] and conf["net0"].startswith("virtio=BC:24:11:")
    assert conf["smbios1"] != tmpl["smbios1"]
    status = api.data(api.get(f"{N}/qemu/201/status/current"))
    assert (
        status["status"] == "stopped"
        and status["qmpstatus"] == "stopped"
        and status["agent"] == 1
        and status["name"] == "web-1"
    )


def test_linked_clone_default_for_template(api: Api) -> None:
    st = api.run("POST", f"{N}/qemu/9000/clone", newid=202)
    assert st["exitstatus"] == "OK"
    conf = api.data(api.get(f"{N}/qemu/202/config"))
    assert conf["scsi0"] == "local-lvm:base-9000-disk-0/vm-202-disk-0,size=8G"
    assert conf["name"] == "Copy-of-VM-debian-13"
    resp = api.post(f"{N}/qemu/9000/clone", newid=203, storage="local-lvm")
    assert resp.status_code == 500 and resp.json()["message"] == "parameter 'storage' not allowed for linked clones\n"
    resp = api.post(f"{N}/qemu/9000/clone", newid=203, full=1, storage="local")
    assert resp.status_code in (400, 403)


def test_clone_existing_target(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    resp = api.post(f"{N}/qemu/9000/clone", newid=201, full=1)
    assert resp.status_code == 500
    assert resp.json()["message"] == "unable to create VM 201: config file already exists\n"


def test_concurrent_clones_exactly_one_wins(api: Api, pvesim: PvesimAdmin) -> None:
    results: list[requests.Response] = []
    barrier = threading.Barrier(2)

    def worker() -> None:
        client = Api(pvesim.connection)
        barrier.wait()
        results.append(client.post(f"{N}/qemu/9000/clone", newid=250, full=1))

    threads = [threading.Thread(target=worker) for _index in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 500]
    loser = [r for r in results if r.status_code == 500][0]
    assert loser.json()["message"] == "unable to create VM 250: config file already exists\n"
    winner = [r for r in results if r.status_code == 200][0]
    assert api.wait(winner.json()["data"])["exitstatus"] == "OK"


def test_clone_disk_full(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.set_storage("local-lvm", avail=1 << 30)
    st = api.run("POST", f"{N}/qemu/9000/clone", newid=201, full=1)
    assert st["exitstatus"].startswith("clone failed: lvcreate 'pve/vm-201-disk-0' error:")
    assert api.get(f"{N}/qemu/201/config").status_code == 500  # cleaned up
    log = api.data(api.get(f"{N}/tasks/{st['upid']}/log"))
    assert log[-1]["t"].startswith("TASK ERROR: clone failed:")


# --- config updates -------------------------------------------------------------------------


def test_config_put_post_digest_delete(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    conf = api.data(api.get(f"{N}/qemu/201/config"))
    resp = api.put(f"{N}/qemu/201/config", digest="0" * 40, cores=4)
    assert resp.status_code == 500 and resp.json()["message"] == "checksum mismatch (file change by other user?)\n"
    assert api.data(api.put(f"{N}/qemu/201/config", digest=conf["digest"], cores=4, delete="vga")) is None
    new = api.data(api.get(f"{N}/qemu/201/config"))
    assert new["cores"] == 4 and "vga" not in new and new["digest"] != conf["digest"]
    upid = api.data(
        api.post(
            f"{N}/qemu/201/config",
            memory="4096",
            sshkeys="ssh-ed25519%20AAAAC3Nz%20me%40host",
            ipconfig0="ip=10.0.0.5/24,gw=10.0.0.1",
        )
    )
    assert ":qmconfig:201:" in upid and api.wait(upid)["exitstatus"] == "OK"
    new = api.data(api.get(f"{N}/qemu/201/config"))
    assert new["memory"] == "4096" and new["sshkeys"] == "ssh-ed25519%20AAAAC3Nz%20me%40host"
    resp = api.put(f"{N}/qemu/201/config")
    assert resp.status_code == 500 and resp.json()["message"] == "no options specified\n"


def test_config_new_disk_and_net_mac(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    assert api.data(api.put(f"{N}/qemu/201/config", scsi1="local-lvm:4", net1="virtio,bridge=vmbr0")) is None
    conf = api.data(api.get(f"{N}/qemu/201/config"))
    assert conf["scsi1"] == "local-lvm:vm-201-disk-1,size=4G"
    assert conf["net1"].startswith("virtio=BC:24:11:") and conf["net1"].endswith(",bridge=vmbr0")


def test_pending_on_running_vm(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    assert api.run("POST", f"{N}/qemu/201/status/start")["exitstatus"] == "OK"
    assert api.data(api.put(f"{N}/qemu/201/config", cores=4, description="hot", delete="vga")) is None
    current = api.data(api.get(f"{N}/qemu/201/config", current=1))
    assert current["cores"] == 2 and current["description"] == "hot" and current["vga"] == "serial0"
    pending_view = api.data(api.get(f"{N}/qemu/201/config"))
    assert pending_view["cores"] == 4 and "vga" not in pending_view
    pend = {p["key"]: p for p in api.data(api.get(f"{N}/qemu/201/pending"))}
    assert pend["cores"] == {"key": "cores", "value": 2, "pending": 4}
    # the configuration file's digest is one of the listed keys, as in GET config
    assert pend["digest"] == {"key": "digest", "value": pending_view["digest"]}
    assert pend["vga"]["delete"] == 1
    assert "pending" not in pend["description"]
    assert api.run("POST", f"{N}/qemu/201/status/stop")["exitstatus"] == "OK"
    conf = api.data(api.get(f"{N}/qemu/201/config", current=1))
    assert conf["cores"] == 4 and "vga" not in conf


# --- power state ----------------------------------------------------------------------------


def test_start_stop_state_machine(api: Api, clone201: dict[str, t.Any], pvesim: PvesimAdmin) -> None:
    del clone201
    resp = api.post(f"{N}/qemu/9000/status/start")  # the token only has VM.Clone + VM.Audit on /vms/9000 (ACL override)
    assert resp.status_code == 403 and resp.json()["message"] == "Permission check failed (/vms/9000, VM.PowerMgmt)\n"
    pvesim.set_vm_config(201, set={"template": 1})
    resp = api.post(f"{N}/qemu/201/status/start")
    assert resp.status_code == 500 and resp.json()["message"] == "you can't start a vm if it's a template\n"
    pvesim.set_vm_config(201, delete=["template"])
    st = api.run("POST", f"{N}/qemu/201/status/start")
    assert st["type"] == "qmstart" and st["exitstatus"] == "OK"
    cur = api.data(api.get(f"{N}/qemu/201/status/current"))
    assert cur["status"] == "running" and cur["qmpstatus"] == "running" and "pid" in cur
    assert api.run("POST", f"{N}/qemu/201/status/start")["exitstatus"] == "VM 201 already running"
    st = api.run("POST", f"{N}/qemu/201/status/shutdown")
    assert st["type"] == "qmshutdown" and st["exitstatus"] == "OK"
    assert api.data(api.get(f"{N}/qemu/201/status/current"))["status"] == "stopped"
    assert api.run("POST", f"{N}/qemu/201/status/stop")["exitstatus"] == "OK"


def test_start_missing_bridge(api: Api, pvesim: PvesimAdmin, clone201: dict[str, t.Any]) -> None:
    del clone201
    pvesim.delete_bridge("vmbr0")
    assert api.run("POST", f"{N}/qemu/201/status/start")["exitstatus"] == "bridge 'vmbr0' does not exist"


# --- resize ---------------------------------------------------------------------------------


def test_resize(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    st = api.run("PUT", f"{N}/qemu/201/resize", disk="scsi0", size="+2G")
    assert st["type"] == "resize" and st["exitstatus"] == "OK"
    assert api.data(api.get(f"{N}/qemu/201/config"))["scsi0"] == "local-lvm:vm-201-disk-0,size=10G"
    assert api.run("PUT", f"{N}/qemu/201/resize", disk="scsi0", size="12G")["exitstatus"] == "OK"
    assert (
        api.run("PUT", f"{N}/qemu/201/resize", disk="scsi0", size="4G")["exitstatus"]
        == "shrinking disks is not supported"
    )
    assert (
        api.run("PUT", f"{N}/qemu/201/resize", disk="scsi5", size="4G")["exitstatus"] == "disk 'scsi5' does not exist"
    )
    assert api.run("PUT", f"{N}/qemu/201/resize", disk="ide2", size="+1G")["exitstatus"] == "you can't resize a cdrom"
    st = api.run("PUT", f"{N}/qemu/201/resize", disk="scsi0", size="+1G", digest="0" * 40)
    assert st["exitstatus"] == "checksum mismatch (file change by other user?)"


# --- tasks ----------------------------------------------------------------------------------


def test_task_log_paging_and_list_filters(api: Api, clone201: dict[str, t.Any]) -> None:
    upid = clone201["upid"]
    full = api.get(f"{N}/tasks/{upid}/log").json()
    assert full["total"] == len(full["data"]) and full["data"][-1]["t"] == "TASK OK" and full["data"][0]["n"] == 1
    page = api.get(f"{N}/tasks/{upid}/log", start=1, limit=2).json()
    assert [x["n"] for x in page["data"]] == [2, 3] and page["total"] == full["total"]
    api.run("POST", f"{N}/qemu/201/status/start")
    failed = api.run("POST", f"{N}/qemu/201/status/start")
    assert failed["exitstatus"] == "VM 201 already running"
    tasks = api.get(f"{N}/tasks").json()
    assert tasks["total"] == 3 and [t_["type"] for t_ in tasks["data"]] == [
        "qmstart",
        "qmstart",
        "qmclone",
    ]  # newest first
    assert tasks["data"][0]["status"] == "VM 201 already running" and "endtime" in tasks["data"][0]
    assert [x["type"] for x in api.data(api.get(f"{N}/tasks", typefilter="qmclone"))] == ["qmclone"]
    assert [x["id"] for x in api.data(api.get(f"{N}/tasks", vmid=201))] == ["201", "201"]
    assert len(api.data(api.get(f"{N}/tasks", errors=1))) == 1
    assert len(api.data(api.get(f"{N}/tasks", limit=1))) == 1
    assert api.data(api.get(f"{N}/tasks", since=int(time.time()) + 3600)) == []
    assert len(api.data(api.get(f"{N}/tasks", until=int(time.time()) + 3600))) == 3
    assert api.data(api.get(f"{N}/tasks", userfilter="nobody")) == []
    assert api.data(api.get(f"{N}/tasks", source="active")) == []


def test_task_active_listing(api: Api, pvesim: PvesimAdmin) -> None:
    pvesim.set_speed(1)
    upid = api.data(api.post(f"{N}/qemu/9000/clone", newid=201, full=1))
    active = api.data(api.get(f"{N}/tasks", source="active"))
    assert [a["upid"] for a in active] == [upid] and active[0]["status"] == "RUNNING"
    assert api.data(api.get(f"{N}/tasks/{upid}/status"))["status"] == "running"
    assert api.data(api.get(f"{N}/tasks")) == []  # archive only by default
    pvesim.set_speed(100)
    api.wait(upid)


def test_task_unknown_upid(api: Api) -> None:
    assert api.get(f"{N}/tasks/UPID:pve-test:00000001:00000001:00000001:qmstart:1:root@pam:/status").status_code == 500


# --- snapshots ------------------------------------------------------------------------------


def test_snapshots(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    for name in ("current", "pending", "PENDING"):
        resp = api.post(f"{N}/qemu/201/snapshot", snapname=name)
        assert resp.status_code == 500
        assert resp.json()["message"] == f"unable to use snapshot name '{name.lower()}' (reserved name)\n"
    st = api.run("POST", f"{N}/qemu/201/snapshot", snapname="before", description="pre-change")
    assert st["type"] == "qmsnapshot" and st["exitstatus"] == "OK"
    assert (
        api.run("POST", f"{N}/qemu/201/snapshot", snapname="before")["exitstatus"]
        == "snapshot name 'before' already used"
    )
    snaps = api.data(api.get(f"{N}/qemu/201/snapshot"))
    assert [s["name"] for s in snaps] == ["before", "current"]
    assert snaps[1]["parent"] == "before" and snaps[1]["description"] == "You are here!"
    snap_conf = api.data(api.get(f"{N}/qemu/201/snapshot/before/config"))
    assert snap_conf["description"] == "pre-change" and isinstance(snap_conf["snaptime"], int)
    assert api.data(api.get(f"{N}/qemu/201/config", snapshot="before")) == snap_conf  # both read one snapshot config
    for path, params in ((f"{N}/qemu/201/snapshot/nope/config", {}), (f"{N}/qemu/201/config", {"snapshot": "nope"})):
        resp = api.get(path, **params)
        assert resp.status_code == 500 and resp.json()["message"] == "snapshot 'nope' does not exist\n"
    assert api.data(api.get(f"{N}/qemu/201/config"))["parent"] == "before"
    api.run("POST", f"{N}/qemu/201/status/start")
    assert api.run("POST", f"{N}/qemu/201/snapshot", snapname="withram", vmstate=1)["exitstatus"] == "OK"
    snaps = {s["name"]: s for s in api.data(api.get(f"{N}/qemu/201/snapshot"))}
    assert (
        snaps["withram"]["vmstate"] == 1 and snaps["withram"]["parent"] == "before" and snaps["current"]["running"] == 1
    )
    assert api.run("DELETE", f"{N}/qemu/201/snapshot/before")["exitstatus"] == "OK"
    assert api.run("DELETE", f"{N}/qemu/201/snapshot/nope")["exitstatus"] == "snapshot 'nope' does not exist"
    assert [s["name"] for s in api.data(api.get(f"{N}/qemu/201/snapshot"))] == ["withram", "current"]


def test_destroy(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    st = api.run("DELETE", f"{N}/qemu/201")
    assert st["type"] == "qmdestroy" and st["exitstatus"] == "OK"
    resp = api.get(f"{N}/qemu/201/config")
    assert resp.status_code == 500
    assert resp.json()["message"] == "Configuration file 'nodes/pve-test/qemu-server/201.conf' does not exist\n"


def test_destroy_refusals_like_pve(api: Api, clone201: dict[str, t.Any], pvesim: PvesimAdmin) -> None:
    """Protection and a running VM refuse in the request (PVE's early checks); a lock fails the qmdestroy task."""
    del clone201
    pvesim.set_vm_config(201, set={"protection": "1"})
    resp = api.delete(f"{N}/qemu/201", purge=1)
    assert resp.status_code == 500 and resp.json()["message"] == "can't remove VM 201 - protection mode enabled\n"
    pvesim.set_vm_config(201, delete=["protection"])
    api.run("POST", f"{N}/qemu/201/status/start")
    resp = api.delete(f"{N}/qemu/201")
    assert resp.status_code == 500 and resp.json()["message"] == "VM 201 is running - destroy failed\n"
    assert api.run("POST", f"{N}/qemu/201/status/stop")["exitstatus"] == "OK"
    pvesim.set_vm_config(201, set={"lock": "backup"})
    st = api.wait(api.data(api.delete(f"{N}/qemu/201", purge=1)))
    assert st["type"] == "qmdestroy" and st["exitstatus"] == "VM is locked (backup)"
    assert pvesim.vm(201)["config"]["lock"] == "backup"  # nothing was removed
    resp = api.delete(f"{N}/qemu/201", skiplock=1)
    assert resp.status_code == 400 and "skiplock" in resp.json()["errors"]


@pytest.mark.parametrize("unreferenced", [0, 1])
def test_destroy_unreferenced_disks(
    api: Api, clone201: dict[str, t.Any], pvesim: PvesimAdmin, unreferenced: int
) -> None:
    del clone201
    assert api.run("POST", f"{N}/qemu/201/config", scsi1="local-lvm:1")["exitstatus"] == "OK"
    api.data(api.put(f"{N}/qemu/201/config", delete="scsi1"))  # detached: unused0
    pvesim.set_vm_config(201, delete=["unused0"])  # forgotten by the config, still on the storage
    assert "local-lvm:vm-201-disk-1" in pvesim.set_storage("local-lvm")["volumes"]
    params = {"purge": 1, "destroy-unreferenced-disks": unreferenced}
    assert api.wait(api.data(api.delete(f"{N}/qemu/201", **params)))["exitstatus"] == "OK"
    volumes = pvesim.set_storage("local-lvm")["volumes"]
    assert "local-lvm:vm-201-disk-0" not in volumes
    assert ("local-lvm:vm-201-disk-1" in volumes) is (unreferenced == 0)
    assert pvesim.schema_violations() == []


# --- cloud-init and agent -------------------------------------------------------------------


def test_cloudinit_dump_and_pending(api: Api, clone201: dict[str, t.Any]) -> None:
    del clone201
    api.data(
        api.put(
            f"{N}/qemu/201/config",
            ciuser="admin",
            ipconfig0="ip=10.0.0.5/24,gw=10.0.0.1",
            sshkeys="ssh-ed25519%20AAAAC3Nz%20me",
        )
    )
    user = api.data(api.get(f"{N}/qemu/201/cloudinit/dump", type="user"))
    assert user.startswith("#cloud-config") and "admin" in user and "ssh-ed25519 AAAAC3Nz me" in user
    net = api.data(api.get(f"{N}/qemu/201/cloudinit/dump", type="network"))
    assert "10.0.0.5" in net
    meta = api.data(api.get(f"{N}/qemu/201/cloudinit/dump", type="meta"))
    assert meta.startswith("instance-id: ")
    assert isinstance(api.data(api.get(f"{N}/qemu/201/cloudinit")), list)
    assert api.data(api.put(f"{N}/qemu/201/cloudinit")) is None


def test_agent_after_boot(api: Api, clone201: dict[str, t.Any], pvesim: PvesimAdmin) -> None:
    del clone201
    resp = api.post(f"{N}/qemu/201/agent/ping")
    assert resp.status_code == 500 and resp.json()["message"] == "VM 201 is not running\n"
    api.run("POST", f"{N}/qemu/201/status/start")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        resp = api.post(f"{N}/qemu/201/agent/ping")
        if resp.status_code == 200:
            break
        assert resp.json()["message"] == "QEMU guest agent is not running\n"
        time.sleep(0.05)
    assert resp.status_code == 200 and resp.json()["data"] == {"result": {}}
    ifaces = api.data(api.get(f"{N}/qemu/201/agent/network-get-interfaces"))["result"]
    assert any(i["name"] == "lo" for i in ifaces)
    pid = api.data(api.req("POST", f"{N}/qemu/201/agent/exec", data={"command": ["/bin/true"]}))["pid"]
    assert isinstance(pid, int)
    pvesim.add_fault(method="GET", path="/agent/network-get-interfaces", action="agent_not_running", occurrence=1)
    resp = api.get(f"{N}/qemu/201/agent/network-get-interfaces")
    assert resp.status_code == 500 and resp.json()["message"] == "QEMU guest agent is not running\n"
    assert api.get(f"{N}/qemu/201/agent/network-get-interfaces").status_code == 200


def test_agent_call_waits_the_availability_ping(api: Api, clone201: dict[str, t.Any], pvesim: PvesimAdmin) -> None:
    """qemu-server pings the agent (3 s timeout) before every agent command: an agent that comes up within those 3 s
    answers that request; one that does not fails it only after the 3 s (here at speed 2: 1.5 s real)."""
    del clone201
    pvesim.set_speed(2)
    pvesim.set_timings(guest={"agent_up_after": 2.0})
    api.run("POST", f"{N}/qemu/201/status/start")
    resp = api.post(f"{N}/qemu/201/agent/ping")  # about 1 s real before the agent is up
    assert resp.status_code == 200 and resp.json()["data"] == {"result": {}}
    pvesim.add_fault(method="POST", path="/agent/ping", action="agent_not_running", occurrence=1)
    started = time.monotonic()
    resp = api.post(f"{N}/qemu/201/agent/ping")
    assert resp.status_code == 500 and resp.json()["message"] == "QEMU guest agent is not running\n"
    assert time.monotonic() - started >= 1.5
    api.run("POST", f"{N}/qemu/201/status/stop")
    pvesim.set_timings(guest={"agent_up_after": 60.0})
    api.run("POST", f"{N}/qemu/201/status/start")
    started = time.monotonic()
    resp = api.get(f"{N}/qemu/201/agent/network-get-interfaces")
    assert resp.status_code == 500 and resp.json()["message"] == "QEMU guest agent is not running\n"
    assert 1.5 <= time.monotonic() - started < 10


# --- proxmoxer as an independent client -----------------------------------------------------


def test_proxmoxer_flow(prox: t.Any, pvesim: PvesimAdmin) -> None:
    from proxmoxer.core import ResourceException

    assert prox.version.get()["version"] == "9.1.3"
    node = prox.nodes("pve-test")
    upid = node.qemu(9000).clone.post(newid=300, name="px", full=1)
    deadline = time.monotonic() + 20
    while node.tasks(upid).status.get()["status"] != "stopped" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert node.tasks(upid).status.get()["exitstatus"] == "OK"
    assert node.qemu(300).config.get()["name"] == "px"
    node.qemu(300).config.put(cores=2, memory=1024)
    with pytest.raises(ResourceException) as exc:
        node.qemu(300).config.put(cores=0)
    assert exc.value.status_code == 400
    assert [r["vmid"] for r in prox.cluster.resources.get(type="vm")] == [300, 9000]
    violations = [e for e in pvesim.schema_violations() if e["status"] != 400]
    assert violations == []


def test_valid_clients_have_no_schema_violations(api: Api, pvesim: PvesimAdmin, clone201: dict[str, t.Any]) -> None:
    del clone201
    api.run("POST", f"{N}/qemu/201/status/start")
    api.get(f"{N}/qemu/201/status/current")
    api.get(f"{N}/tasks", source="all", limit=10)
    assert pvesim.schema_violations() == []
    assert all(e["token"] == "vmanyware@pve!full" for e in pvesim.requests())
