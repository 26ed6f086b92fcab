# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""pvesim.schema: matching and PVE::JSONSchema-like parameter verification."""

from __future__ import annotations

import gzip
import json
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from pvesim.schema import NoSuchMethod, NoSuchPath, Schema, errors_to_dict

REPO = Path(__file__).resolve().parents[3]


def _shared_schema() -> Path:
    """The contract's copy in the ``shared/`` folder beside the repository checkout (``../shared/pve-api/``).

    From a ``git worktree`` the checkout is the main working tree the worktree belongs to.
    """
    checkouts = [REPO]
    done = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--path-format=absolute", "--git-common-dir"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0 and done.stdout.strip():
        checkouts.append(Path(done.stdout.strip()).parent)
    candidates = [checkout.parent / "shared" / "pve-api" / "pve-9.1.3-schema.json" for checkout in checkouts]
    return next((path for path in candidates if path.is_file()), candidates[0])


SHARED = _shared_schema()
NODE = "/nodes/pve-test"


@pytest.fixture(scope="module")
def schema() -> Schema:
    return Schema.load()


def errs(schema: Schema, method: str, path: str, **params: object) -> dict[str, str]:
    return errors_to_dict(schema.validate(method, path, params))


@pytest.mark.skipif(not SHARED.is_file(), reason="no shared/ folder beside this checkout (../shared/pve-api/)")
def test_bundled_copy_equals_shared_file() -> None:
    raw = resources.files("pvesim").joinpath("data", "pve-9.1.3-schema.json.gz").read_bytes()
    with open(SHARED, "rb") as fh:
        assert json.loads(gzip.decompress(raw)) == json.load(fh)


def test_load_explicit_path_is_cached(tmp_path: Path) -> None:
    path = tmp_path / "schema.json.gz"
    path.write_bytes(resources.files("pvesim").joinpath("data", "pve-9.1.3-schema.json.gz").read_bytes())
    assert Schema.load(str(path)) is Schema.load(str(path))
    assert Schema.load(str(path)) is not Schema.load()


def test_match_literal_and_params(schema: Schema) -> None:
    ep, params = schema.match("GET", "/api2/json/nodes/pve-test/qemu/201/status/current")
    assert ep.path == "/nodes/{node}/qemu/{vmid}/status/current"
    assert params == {"node": "pve-test", "vmid": "201"}
    ep, _params = schema.match("POST", f"{NODE}/qemu/201/status/start")
    assert ep.path.endswith("/status/start")


def test_match_errors(schema: Schema) -> None:
    with pytest.raises(NoSuchPath):
        schema.match("GET", "/foo")
    with pytest.raises(NoSuchMethod):
        schema.match("PATCH", "/version")
    with pytest.raises(NoSuchMethod):
        schema.match("DELETE", "/version")


def test_valid_requests(schema: Schema) -> None:
    assert not errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid="201", full="1", name="web-1", storage="local-lvm")
    assert not errs(
        schema,
        "POST",
        f"{NODE}/qemu/201/config",
        net0="virtio=BC:24:11:00:00:01,bridge=vmbr0",
        ipconfig0="ip=10.0.0.5/24,gw=10.0.0.1",
        sshkeys="ssh-ed25519%20AAAA%20me",
        agent="enabled=1,fstrim_cloned_disks=1",
        boot="order=scsi0;net0",
        tags="a;b",
        delete="cores,memory",
        scsi1="local-lvm:10,discard=on",
        cpu="host",
        cicustom="user=local:snippets/u.yaml",
        memory="4096",
    )
    assert not errs(schema, "GET", "/cluster/resources", type="vm")
    assert not errs(schema, "PUT", f"{NODE}/qemu/201/resize", disk="scsi0", size="+2G")


def test_json_types(schema: Schema) -> None:
    assert not errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid=201, full=True)
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid=True)
    assert e["newid"] == "type check ('integer') failed - got JSON::PP::Boolean"
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid={"a": 1})
    assert e["newid"] == "type check ('integer') failed - got HASH"


def test_required_and_unknown(schema: Schema) -> None:
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", bogus="1")
    assert e["newid"] == "property is missing and it is not optional"
    assert e["bogus"] == "property is not defined in schema and the schema does not allow additional properties"


def test_types_and_ranges(schema: Schema) -> None:
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid="99")
    assert e["newid"] == "invalid format - value does not look like a valid VM ID\n"
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid="abc")
    assert e["newid"] == "type check ('integer') failed - got 'abc'"
    e = errs(schema, "POST", f"{NODE}/qemu/201/config", cores="0")
    assert e["cores"] == "value must have a minimum value of 1"
    e = errs(schema, "POST", f"{NODE}/qemu/201/config", background_delay="31")
    assert e["background_delay"] == "value must have a maximum value of 30"


def test_boolean_wire_rules(schema: Schema) -> None:
    """On the wire PVE accepts only 0/1 (or JSON booleans); property strings accept on/off/yes/no/true/false."""
    for ok in ("0", "1"):
        assert not errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid="201", full=ok)
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid="201", full="true")
    assert e["full"] == "type check ('boolean') failed - got 'true'"
    for ok in ("yes", "on", "true", "0", "off"):
        assert not errs(schema, "POST", f"{NODE}/qemu/201/config", agent=ok)
    e = errs(schema, "POST", f"{NODE}/qemu/201/config", agent="maybe")
    assert e["agent"].startswith("invalid format - format error\nagent.enabled: type check ('boolean') failed")


def test_enum_pattern_length(schema: Schema) -> None:
    e = errs(schema, "GET", "/cluster/resources", type="vms")
    assert e["type"].startswith("value 'vms' does not have a value in the enumeration 'vm, storage, node, sdn")
    e = errs(schema, "PUT", f"{NODE}/qemu/201/resize", disk="scsi0", size="2X")
    assert e["size"] == "value does not match the regex pattern"
    e = errs(schema, "PUT", f"{NODE}/qemu/201/resize", disk="scsi0", size="x2G")  # anchored
    assert e["size"] == "value does not match the regex pattern"
    e = errs(schema, "PUT", f"{NODE}/qemu/201/resize", disk="scsi0", size="2G", digest="a" * 41)
    assert e["digest"] == "value may only be 40 characters long"


def test_formats(schema: Schema) -> None:
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid="201", name="web_1", storage="x", pool="a b")
    assert e["name"] == "invalid format - value does not look like a valid DNS name\n"
    assert e["storage"] == "invalid format - storage ID 'x' cannot be shorter than 2 characters\n"
    assert e["pool"].startswith("invalid format - ")
    e = errs(schema, "POST", f"{NODE}/qemu/201/config", sshkeys="ssh-rsa AAA", tags="a b!", delete="1abc")
    assert e["sshkeys"] == "invalid format - invalid urlencoded string: ssh-rsa AAA\n"
    assert e["tags"] == "value does not match the regex pattern" or e["tags"].startswith("invalid format")
    assert e["delete"] == "invalid format - invalid configuration ID '1abc'\n"
    e = errs(schema, "GET", f"{NODE}/qemu/201/status/current", node="bad_node")
    assert e["node"] == "invalid format - value does not look like a valid node name\n"


def test_property_strings(schema: Schema) -> None:
    path = f"{NODE}/qemu/201/config"
    e = errs(schema, "POST", path, net0="virtio=BC:24:11:00:00:01,bridge=vmbr0,foo=1")
    assert e["net0"] == "invalid format - invalid key in comma-separated list property: foo\n"
    e = errs(schema, "POST", path, net0="virtio=01:24:11:00:00:01")
    assert "net0.macaddr: invalid format - value does not look like a valid unicast MAC address" in e["net0"]
    e = errs(schema, "POST", path, ipconfig0="ip=10.0.0.5,gw=x")
    assert e["ipconfig0"].startswith("invalid format - format error\n")
    assert (
        "ipconfig0.ip: invalid format - value does not look like a valid ipv4 network configuration" in e["ipconfig0"]
    )
    e = errs(schema, "POST", path, scsi0="local-lvm:vm-201-disk-0,cache=fast")
    assert "scsi0.cache: value 'fast' does not have a value in the enumeration" in e["scsi0"]
    e = errs(schema, "POST", path, vga="type=serial0,type=std")
    assert e["vga"] == "invalid format - duplicate key in comma-separated list property: type\n"
    assert not errs(schema, "POST", path, ipconfig0="ip=dhcp", ipconfig1="ip6=auto")
    e = errs(schema, "POST", path, boot="order=scsi0;foo1")
    assert "boot.order: invalid format - invalid boot device 'foo1'" in e["boot"]


def test_indexed_params(schema: Schema) -> None:
    path = f"{NODE}/qemu/201/config"
    assert not errs(schema, "POST", path, net31="virtio,bridge=vmbr0", scsi30="local-lvm:1", ide3="none,media=cdrom")
    for bad in ("net32", "scsi31", "ide4", "net01", "virtio16"):
        e = errs(schema, "POST", path, **{bad: "x"})
        assert e[bad] == "property is not defined in schema and the schema does not allow additional properties"


def test_repeated_keys_and_lists(schema: Schema) -> None:
    e = errs(schema, "POST", f"{NODE}/qemu/9000/clone", newid=["201", "202"])
    assert e["newid"].startswith("type check ('integer') failed")
    assert not errs(schema, "POST", f"{NODE}/qemu/201/agent/exec", command=["/bin/sh", "-c", "true"])


def test_unknown_path_reported(schema: Schema) -> None:
    e = schema.validate("GET", "/nope", {})
    assert e and e[0].param == ""
