# SPDX-License-Identifier: GPL-3.0-or-later
"""Resource pools: /pools (list, get, create), clone with pool=, and ACLs inherited through /pool/{poolid}."""

from __future__ import annotations


from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin

from .conftest import Api, raw_call, root_api

POOL_PRIVS = ["VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Memory", "VM.PowerMgmt", "Pool.Audit"]


def root(pvesim: PvesimAdmin) -> ProxmoxAPI:
    return root_api(pvesim)


def pool_only_token(pvesim: PvesimAdmin) -> Api:
    """The limited token with nothing on /vms: only the pool (and the template, storage, bridge) are granted."""
    pvesim.set_token(
        "vmanyware@pve!limited",
        privileges={
            "/pool/lab": POOL_PRIVS,
            "/vms/9000": ["VM.Clone", "VM.Audit"],
            "/storage/local-lvm": ["Datastore.AllocateSpace"],
            "/sdn/zones/localnetwork/vmbr0": ["SDN.Use"],
        },
    )
    return Api(pvesim.connection, "limited")


def test_create_list_and_get(pvesim: PvesimAdmin, api: Api) -> None:
    admin = root(pvesim)
    admin.pools.post(poolid="lab", comment="vmanyware guests")
    assert admin.pools.get() == [{"poolid": "lab", "comment": "vmanyware guests"}]
    assert admin.pools.get(poolid="lab") == [{"poolid": "lab", "comment": "vmanyware guests", "members": []}]
    assert admin.pools("lab").get() == {"comment": "vmanyware guests", "members": []}
    again = api.req("POST", "/pools", data={"poolid": "lab"})
    assert again.status_code == 403  # the full token has no Pool.Allocate
    assert api.data(api.get("/pools")) == []  # and no Pool.Audit: the list is filtered, not refused
    missing = admin._store["session"].request("GET", admin._store["base_url"] + "/pools/nosuch")  # pylint: disable=protected-access
    assert missing.status_code == 500 and "pool 'nosuch' does not exist" in missing.reason
    assert pvesim.schema_violations() == []


def test_clone_into_a_pool_and_inherit_its_acl(pvesim: PvesimAdmin) -> None:
    admin = root(pvesim)
    admin.pools.post(poolid="lab")
    token = pool_only_token(pvesim)
    refused = token.req("POST", "/nodes/pve-test/qemu/9000/clone", data={"newid": 201, "full": 1})
    assert refused.status_code == 403  # no VM.Allocate on /vms/201, and no pool named
    nosuch = token.req("POST", "/nodes/pve-test/qemu/9000/clone", data={"newid": 201, "full": 1, "pool": "other"})
    assert nosuch.status_code == 403  # VM.Allocate is checked on /pool/other, which the token lacks
    status = token.run("POST", "/nodes/pve-test/qemu/9000/clone", newid=201, full=1, name="lab-1", pool="lab")
    assert status["exitstatus"] == "OK"
    assert [m["vmid"] for m in admin.pools("lab").get()["members"]] == [201]
    # /vms/201 now carries the pool's privileges: the pool-only token configures and starts it.
    perms = token.data(token.req("GET", "/access/permissions", params={"path": "/vms/201"}))
    assert set(perms["/vms/201"]) >= {"VM.Allocate", "VM.Config.CPU", "VM.PowerMgmt"}
    assert token.req("PUT", "/nodes/pve-test/qemu/201/config", data={"cores": 4}).status_code == 200
    assert (
        token.req("PUT", "/nodes/pve-test/qemu/201/config", data={"cores": 4, "agent": "1"}).status_code == 403
    )  # no VM.Config.Options
    vm = next(r for r in token.data(token.get("/cluster/resources", type="vm")) if r["vmid"] == 201)
    assert vm["pool"] == "lab"
    assert pvesim.schema_violations() == []


def test_clone_into_a_missing_pool(pvesim: PvesimAdmin, api: Api) -> None:
    pvesim.set_token(
        "vmanyware@pve!full",
        privileges={"/": ["VM.Allocate", "VM.Clone", "VM.Audit", "Datastore.AllocateSpace", "SDN.Use"]},
    )
    reply = api.req("POST", "/nodes/pve-test/qemu/9000/clone", data={"newid": 202, "full": 1, "pool": "nosuch"})
    assert reply.status_code == 403 and "pool 'nosuch' does not exist" in reply.reason
    assert 202 not in [r["vmid"] for r in api.data(api.get("/cluster/resources", type="vm"))]


def test_members_added_moved_and_removed(pvesim: PvesimAdmin) -> None:
    """PUT /pools/{poolid} (and PUT /pools?poolid=): guests and storages join and leave, with Pool.pm's refusals."""
    admin = root(pvesim)
    admin.pools.post(poolid="lab", comment="first")
    admin.pools.post(poolid="other")
    admin.pools("lab").put(vms="9000", storage="local-lvm", comment="vmanyware guests")
    members = admin.pools("lab").get()["members"]
    assert [(m["type"], m["id"]) for m in members] == [("qemu", "qemu/9000"), ("storage", "storage/pve-test/local-lvm")]
    storage = members[1]
    assert storage["storage"] == "local-lvm" and storage["node"] == "pve-test" and storage["maxdisk"] == 200 * 2**30
    assert admin.pools.get(poolid="lab")[0]["comment"] == "vmanyware guests"
    assert admin.pools.get(poolid="lab", type="storage")[0]["members"] == [storage]
    assert raw_call(admin, "PUT", "/pools/lab", vms="9000")[:2] == (
        500,
        "update pools failed: VM 9000 is already a pool member",
    )
    assert raw_call(admin, "PUT", "/pools/other", vms="9000")[:2] == (
        500,
        "update pools failed: VM 9000 belongs already to pool 'lab' and 'allow-move' is not set",
    )
    assert raw_call(admin, "PUT", "/pools/lab", storage="local-lvm")[:2] == (
        500,
        "update pools failed: Storage 'local-lvm' is already a pool member",
    )
    # all or nothing (one locked user.cfg write): the first storage of a refused list is not added either
    assert raw_call(admin, "PUT", "/pools/lab", storage="local,local")[:2] == (
        500,
        "update pools failed: Storage 'local' is already a pool member",
    )
    assert [m["id"] for m in admin.pools("lab").get()["members"]] == ["qemu/9000", "storage/pve-test/local-lvm"]
    admin.pools.put(poolid="other", vms="9000", **{"allow-move": 1})  # the newer form: poolid as a parameter
    assert [m["vmid"] for m in admin.pools("other").get()["members"]] == [9000]
    assert [m["type"] for m in admin.pools("lab").get()["members"]] == ["storage"]
    assert raw_call(admin, "PUT", "/pools/lab", vms="9000", delete=1)[:2] == (
        500,
        "update pools failed: VM 9000 is not a pool member",
    )
    admin.pools("lab").put(storage="local-lvm", delete=1)
    assert admin.pools("lab").get()["members"] == []
    assert raw_call(admin, "PUT", "/pools/nosuch", vms="9000")[:2] == (
        500,
        "update pools failed: pool 'nosuch' does not exist",
    )
    assert pvesim.schema_violations() == []


def test_member_changes_need_the_members_privileges(pvesim: PvesimAdmin) -> None:
    """Pool.Allocate on the pool is not enough: check_perm_modify wants VM.Allocate (or Permissions.Modify) on the
    guest and Datastore.Allocate on the storage."""
    root(pvesim).pools.post(poolid="lab")
    pvesim.set_token("vmanyware@pve!limited", privileges={"/pool/lab": ["Pool.Allocate", "Pool.Audit"]})
    token = Api(pvesim.connection, "limited")
    assert token.req("PUT", "/pools/lab", data={"vms": "9000"}).status_code == 403
    assert token.req("PUT", "/pools/lab", data={"storage": "local-lvm"}).status_code == 403
    pvesim.set_token(
        "vmanyware@pve!limited",
        privileges={
            "/pool/lab": ["Pool.Allocate"],
            "/vms/9000": ["VM.Allocate"],
            "/storage/local-lvm": ["Datastore.Allocate"],
        },
    )
    assert token.data(token.req("PUT", "/pools/lab", data={"vms": "9000", "storage": "local-lvm"})) is None
    assert token.req("PUT", "/pools/other", data={"comment": "x"}).status_code == 403  # no Pool.Allocate there


def test_only_an_empty_pool_is_deleted(pvesim: PvesimAdmin) -> None:
    """DELETE /pools/{poolid} and DELETE /pools?poolid=: members refuse it; its ACL entries go with it."""
    admin = root(pvesim)
    admin.pools.post(poolid="lab")
    admin.pools("lab").put(vms="9000", storage="local")
    assert raw_call(admin, "DELETE", "/pools/lab")[:2] == (
        500,
        "delete pool failed: pool 'lab' is not empty (contains VM 9000)",
    )
    admin.pools("lab").put(vms="9000", delete=1)
    assert raw_call(admin, "DELETE", "/pools?poolid=lab")[:2] == (
        500,
        "delete pool failed: pool 'lab' is not empty (contains storage 'local')",
    )
    admin.pools("lab").put(storage="local", delete=1)
    pvesim.set_token("vmanyware@pve!limited", privileges={"/pool/lab": ["Pool.Audit"]})
    token = Api(pvesim.connection, "limited")
    assert token.data(token.get("/pools")) == [{"poolid": "lab"}]
    admin.pools.delete(poolid="lab")
    assert admin.pools.get() == []
    assert token.data(token.req("GET", "/access/permissions", params={"path": "/pool/lab"})) == {"/pool/lab": {}}
    admin.pools.post(poolid="lab")  # the same name again: the old ACL entry is gone
    assert token.data(token.get("/pools")) == []
    assert raw_call(admin, "DELETE", "/pools/nosuch")[:2] == (500, "delete pool failed: pool 'nosuch' does not exist")
    assert pvesim.schema_violations() == []
