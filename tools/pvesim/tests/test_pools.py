# SPDX-License-Identifier: GPL-3.0-or-later
"""Resource pools: /pools (list, get, create), clone with pool=, and ACLs inherited through /pool/{poolid}."""

from __future__ import annotations


from proxmoxer import ProxmoxAPI

from pvesim.testing import PvesimAdmin

from .conftest import Api

POOL_PRIVS = ["VM.Allocate", "VM.Audit", "VM.Config.CPU", "VM.Config.Memory", "VM.PowerMgmt", "Pool.Audit"]


def root(pvesim: PvesimAdmin) -> ProxmoxAPI:
    conn = pvesim.connection
    return ProxmoxAPI(
        conn["host"], port=conn["port"], user="root@pam", password=conn["root_password"], verify_ssl=conn["ca_file"]
    )


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
