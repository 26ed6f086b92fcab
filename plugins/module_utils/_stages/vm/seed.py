# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Stage ``seed``: regenerate the Cloud-Init drive and validate what Proxmox generated (docs/stages.md).

``PUT {vm}/cloudinit`` (synchronous, returns null) regenerates the drive from the config; the
three parts are then read with ``GET {vm}/cloudinit/dump?type=user|network|meta`` and judged:

- attestation mode (``imageDefaultUser`` on the mapping): no ``user`` key at all, ``users``
  holds ``default`` and no named entry, ``ssh_authorized_keys`` is exactly the requested keys,
  no ``password``;
- a scalar ``user: NAME`` (deprecated in cloud-init) is ``seed_incompatible`` in any mode;
  other ``user`` values (null, mapping) are ``seed_mismatch`` in attestation mode;
- network-config (v1) configures the planned IPv4 on the NIC whose MAC is net0's: DHCP, or a static network's address,
  netmask and gateway, and its DNS servers and search domain (docs/networks.md).

Only verdicts and SHA-256 hashes of the three parts are recorded or returned, never their text.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from ..._api.pveconfig import config_of_pending, net_macaddr, read_pending
from ..protocol import StageContext, StageLogic
from ..outcomes import Request, Resolution, StageError
from .. import guest as _guest
from .. import nic as _nic
from ..adoption import AdoptionHook, Decision, Observations
from .cloudinit import attested as cloudinit_attested

try:
    import yaml
except ImportError:  # pragma: no cover - exercised by the sanity import test only
    HAS_YAML = False
else:
    HAS_YAML = True

DUMP_TYPES = ("user", "network", "meta")


def _load(text: str, part: str) -> t.Any:
    if not HAS_YAML:  # pragma: no cover
        raise StageError("The Python library PyYAML is required to validate the seed.", code="configuration_error")
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise StageError(
            "The generated cloud-init %s data is not valid YAML." % part,
            code="seed_mismatch",
            details={"part": part, "rule": "yaml"},
        ) from None


def _bad(code: str, part: str, rule: str) -> StageError:
    messages = {
        "seed_incompatible": "The generated cloud-init user-data uses a form the collection does not accept.",
        "seed_mismatch": "The generated cloud-init seed does not match the requested user, keys or network.",
    }
    return StageError(messages[code], code=code, details={"stage": "seed", "part": part, "rule": rule})


def validate_user_data(text: str, keys: t.Sequence[str], *, attested: bool, guest_user: str) -> None:
    """Raise ``seed_incompatible`` / ``seed_mismatch`` unless the user-data carries exactly what was requested."""
    if not text.startswith("#cloud-config\n"):
        raise _bad("seed_mismatch", "user", "cloud_config_header")
    data = _load(text, "user")
    if not isinstance(data, dict):
        raise _bad("seed_mismatch", "user", "mapping")
    if "user" in data:
        if isinstance(data["user"], str):
            raise _bad("seed_incompatible", "user", "scalar_user")
        if attested:
            raise _bad("seed_mismatch", "user", "user_present")
        raise _bad("seed_incompatible", "user", "user_form")
    if "password" in data:
        raise _bad("seed_mismatch", "user", "password_present")
    users = data.get("users")
    if not isinstance(users, list) or "default" not in users:
        raise _bad("seed_mismatch", "user", "default_user")
    if any(not isinstance(entry, str) for entry in users):
        raise _bad("seed_mismatch", "user", "named_users")
    if not attested and guest_user not in users:
        raise _bad("seed_mismatch", "user", "guest_user")
    found = data.get("ssh_authorized_keys")
    if not isinstance(found, list) or [str(item) for item in found] != list(keys):
        raise _bad("seed_mismatch", "user", "ssh_authorized_keys")


def validate_network(text: str, mac: str, nic: t.Mapping[str, t.Any] | None = None) -> None:
    """network-config v1 with a physical entry for ``mac`` configuring ``nic``'s IPv4 (default: DHCPv4), and its
    DNS settings in the ``nameserver`` entry."""
    nic = nic or {"bridge": "", "ipv4": {"mode": "dhcp"}}
    data = _load(text, "network")
    if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("config"), list):
        raise _bad("seed_mismatch", "network", "version_1")
    for entry in data["config"]:
        if (
            isinstance(entry, dict)
            and entry.get("type") == "physical"
            and str(entry.get("mac_address", "")).lower() == mac.lower()
        ):
            mismatch = _nic.network_config_mismatch(entry, nic)
            if mismatch is not None:
                raise _bad("seed_mismatch", "network", mismatch)
            if not _nic.nameservers_match(data["config"], nic):
                raise _bad("seed_mismatch", "network", "nameserver")
            return
    raise _bad("seed_mismatch", "network", "nic_mac")


def validate_meta(text: str) -> None:
    data = _load(text, "meta")
    if not isinstance(data, dict) or not data.get("instance-id"):
        raise _bad("seed_mismatch", "meta", "instance_id")


def read_dumps(ctx: StageContext) -> dict[str, str]:
    dumps: dict[str, str] = {}
    for part in DUMP_TYPES:
        text = ctx.client.get(ctx.vm_path + "/cloudinit/dump", type=part)
        if not isinstance(text, str):
            raise StageError(
                "Proxmox answered the cloud-init dump with an unexpected body.", code="unexpected_response"
            )
        dumps[part] = text
    return dumps


def dump_hashes(dumps: t.Mapping[str, str]) -> dict[str, str]:
    return {part: _guest.sha256_text(dumps[part]) for part in DUMP_TYPES}


class SeedStage(StageLogic, AdoptionHook):
    kind = "seed"
    task_type = None
    default_timeout = 60.0
    final_codes = frozenset({"seed_incompatible", "seed_mismatch"})
    # No recent read serves its preconditions (docs/stages.md "Reads reused"): ``PUT {vm}/cloudinit`` carries no digest
    # and Proxmox does not check the power state for it, so nothing refuses it on a configuration or power state changed
    # since the cloudinit stage's read-back; its own read-back would only notice the change after the drive was rewritten.

    def preconditions(self, ctx: StageContext) -> None:
        config = _guest.require_stopped_settled(ctx)
        if _guest.cloudinit_drive(config, ctx.vmid) is None:
            raise StageError(
                "The target has no Cloud-Init drive of its own (vm-<vmid>-cloudinit); nothing was sent.",
                details={"stage": ctx.kind, "rule": "cloudinit_drive"},
            )

    def request(self, ctx: StageContext) -> Request | None:
        return Request("PUT", ctx.vm_path + "/cloudinit", {})

    def observe(self, ctx: StageContext) -> dict[str, t.Any]:
        # The pending list holds the configuration in effect with its digest; without a digest in it, read the configuration.
        config = config_of_pending(read_pending(ctx.client, ctx.vm_path))
        if not isinstance(config.get("digest"), str):
            config = _guest.read_config(ctx)
        if config["digest"] != _guest.latest_digest(ctx):
            raise StageError(
                "The configuration changed while the seed was generated.",
                code="observation_mismatch",
                details={"stage": ctx.kind, "rule": "digest_unchanged"},
            )
        mac = _guest.clone_mac(ctx)
        dumps = read_dumps(ctx)
        attested = isinstance(ctx.mapping.get("imageDefaultUser"), dict)
        validate_user_data(
            dumps["user"],
            ctx.definition["access"]["sshPublicKeys"],
            attested=attested,
            guest_user=ctx.plan["guestUser"],
        )
        validate_network(dumps["network"], mac, _nic.planned(ctx))
        validate_meta(dumps["meta"])
        return {
            "seedHashes": dump_hashes(dumps),
            "seedDigest": config["digest"],
            "digest": config["digest"],
            "seedVerdict": "valid",
        }

    def resolve_lost_reply(self, ctx: StageContext) -> Resolution:
        """``GET {vm}/cloudinit`` lists the Cloud-Init values that differ between the configuration and the drive:
        none -> the drive was regenerated from the current configuration (applied); any -> no effect yet."""
        items = ctx.client.get(ctx.vm_path + "/cloudinit")
        if not isinstance(items, list):
            return Resolution.undecidable(
                "Proxmox answered the Cloud-Init pending list with an unexpected body; check the VM's "
                "Cloud-Init drive before re-running."
            )
        if not any(isinstance(item, dict) and ("pending" in item or "delete" in item) for item in items):
            return Resolution.applied(seedResolvedBy="cloudinit_pending")
        return Resolution(
            "not_applied",
            message=(
                "The Cloud-Init drive still differs from the configuration (GET cloudinit lists pending values) after the "
                "regeneration's reply was lost; it is not sent again. Check the VM, then re-run or abandon the operation."
            ),
        )

    # -- adoption (``_stages._adoption``) ------------------------------------------------------------
    def adopt(self, obs: Observations) -> Decision:
        ctx = obs.context(self.kind)
        if not obs.start_evidenced:
            return Decision(
                "pending",
                "Regenerating the Cloud-Init drive leaves nothing a read can tell apart and is harmless to repeat; "
                "the seed stage regenerates and validates it again.",
            )
        mac = net_macaddr(obs.config.get("net0")) or ""
        dumps = t.cast("dict[str, str]", obs.once("dumps", lambda: read_dumps(ctx)))
        try:
            validate_user_data(
                dumps["user"],
                ctx.definition["access"]["sshPublicKeys"],
                attested=cloudinit_attested(ctx),
                guest_user=ctx.plan["guestUser"],
            )
            validate_network(dumps["network"], mac, _nic.planned(ctx))
            validate_meta(dumps["meta"])
        except StageError:
            return Decision(
                "uncertain",
                "The VM was started but its Cloud-Init seed does not validate now; check the VM's Cloud-Init "
                "settings in Proxmox before re-running the seed stage.",
            )
        digest = obs.config["digest"]
        return Decision(
            "completed",
            "The VM was started (the start stage runs only after the seed stage completed) and the seed validates.",
            {"seedHashes": dump_hashes(dumps), "seedDigest": digest, "digest": digest, "seedVerdict": "valid"},
        )
