# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's error hierarchy.

Every failure the collection reports carries a fixed ``code`` from ``ERROR_CODES`` and a
message written by the collection itself. Input values, secrets and raw provider responses
are never put into an error: callers pass the *path* of an offending field and the *rule*
it broke, not the value. Modules turn these errors into ``fail_json`` in one place
(``_module.py``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import typing as t

# code -> one-line meaning. docs/errors.md is generated from (and tested against) this table.
ERROR_CODES: dict[str, str] = {
    # input validation
    "invalid_catalog": "The template catalog is not a valid v1 TemplateCatalog.",
    "invalid_definition": "The environment definition is not a valid v1 Environment.",
    "invalid_preset": "A preset is not a valid v1 Preset, or the presets cannot be read.",
    "preset_not_found": "The definition names a preset that is not among the presets.",
    "preset_version_mismatch": "The preset's version or hash differs from the one the definition pins.",
    "invalid_ssh_key_source": "An SSH key source is misconfigured, cannot be read, or holds an invalid public key.",
    "invalid_profile": "A profile is not a valid v1 Profile, or the profiles cannot be read.",
    "profile_not_found": "The definition (or a profile it requires) names a profile that is not among the profiles.",
    "profile_version_mismatch": "The profile's version or declaration hash differs from the one the definition pins.",
    "invalid_profile_vars": "A profile's variables are unknown to it, of the wrong type, or missing.",
    "profile_requires_cycle": "The profiles the definition requests require each other in a cycle.",
    "profile_distro_unsupported": "A profile does not support the distro family of the image's catalog mapping.",
    "distro_family_not_recorded": "The catalog mapping records no distroFamily, which profiles need.",
    "invalid_template_build": "The template build is not a valid v1 TemplateBuild.",
    "invalid_target_vmid": "The target VMID is outside 100-999999999 or equals the template VMID.",
    "invalid_target_node": "The target node is not a node name, is auto (resolved by placement first), or cannot hold this guest.",
    "target_node_conflict": "The target node differs from the node the definition's targetNode names.",
    "placement_required": "The definition asks for targetNode auto: run placement and plan with the node it chose.",
    "image_not_mapped": "The definition's image has no mapping in the template catalog.",
    "repeat_image_removed": "The repeated operation's image is no longer in the template catalog.",
    "repeat_mapping_changed": "The template catalog maps the repeated operation's image differently than when it was recorded.",
    "disk_shrink_unsupported": "The requested disk is smaller than the template's recorded source disk.",
    "network_not_in_catalog": "The definition's network is not one of the template catalog's networks.",
    "invalid_network_address": "The definition's address does not fit its network (mode, subnet, gateway).",
    "invalid_plan": "The inputs are inconsistent and no plan can be built from them.",
    "invalid_option": "A module option has an invalid value.",
    "configuration_error": "A configuration gate or connection setting has an invalid value.",
    "proxy_not_supported": "A proxy is configured for the Proxmox API; the collection connects directly only (add the host to no_proxy).",
    # provider access
    "tls_verification_failed": "The server certificate did not match the configured CA or fingerprint pin.",
    "tls_unverified": "TLS is not verified (validate_certs is false and no api_fingerprint pin is set), so no credential is sent: "
    "configure a CA file (ca_path), the system CAs or a SHA-256 pin.",
    "certificate_changed": "The server presented another certificate than the one the operation's provider scope was computed from; nothing was sent.",
    "auth_failed": "Proxmox rejected the credentials (HTTP 401).",
    "permission_denied": "The token lacks a privilege on a path (HTTP 403).",
    "not_found": "The requested object does not exist.",
    "locked": "The target is locked by another task.",
    "conflict": "The configuration changed concurrently (digest/checksum mismatch) or the object already exists.",
    "parameter_invalid": "Proxmox rejected a request parameter (HTTP 400).",
    "server_error": "Proxmox answered with a server error.",
    "transport_lost": "The connection failed before the request could reach Proxmox.",
    "reply_lost": "The request was sent but its reply was lost; the outcome is unknown.",
    "response_too_large": "The response exceeded the configured size bound.",
    "unexpected_response": "Proxmox answered with a body the collection does not understand.",
    # tasks
    "task_failed": "A Proxmox task ended with an error.",
    "task_timeout": "A Proxmox task did not finish before the deadline.",
    "task_unobservable": "The task status could not be polled.",
    # gates and operations
    "provisioning_disabled": (
        "The provisioning gate is closed: VMANYWARE_PROVISIONING_ENABLED is false, or unset without provisioning_enabled."
        " To provision, set it to true in the environment (or use the credential with provisioning enabled in AWX),"
        " or, where the environment leaves it unset, pass provisioning_enabled: true to the task."
    ),
    "snapshot_disabled": "A snapshot was declared but the snapshots gate is closed (VMANYWARE_SNAPSHOTS_ENABLED false, or unset without snapshots_enabled).",
    "preflight_failed": "At least one preflight check did not pass.",
    "internal_error": "An unexpected internal error occurred.",
    # local files and the operation journal (docs/journal.md)
    "invalid_json": "A local file is oversized, not UTF-8, or not strict JSON (duplicate keys, NaN, trailing data).",
    "io_error": "A local file or directory could not be read or written.",
    "journal_corrupt": "A journal file is not a valid operation document; it was left untouched for the operator.",
    "journal_conflict": "The operation changed concurrently or is not in the state the update expects.",
    "journal_locked": "A journal lock could not be acquired before the deadline.",
    "conflicting_operation": "Another operation already holds the same target (provider scope and VMID).",
    "idempotency_key_conflict": "The idempotency key was already used with different inputs.",
    # confirmation and stages (docs/operations.md, docs/stages.md)
    "confirmation_required": "No complete confirmation of this exact plan was given; review the plan and pass the confirmation block.",
    "plan_changed": "The confirmation does not match the freshly computed plan, provider scope or target.",
    "attestation_required": "Creation needs a validated imageDefaultUser attestation on the catalog mapping.",
    "stage_precondition_failed": "The target is not in the state this stage requires; nothing was sent.",
    "stage_out_of_order": "An earlier stage of the operation has not completed.",
    "stage_failed": "The stage failed earlier; the operation keeps the target for the operator.",
    "outcome_uncertain": "A submission's outcome is unknown and reads cannot prove it; it is never sent again: check Proxmox, then re-run or abandon.",
    "observation_mismatch": "After the request, Proxmox does not show the state the stage requested.",
    "profile_failed": "A profile's role did not run to a clean end; its stage is uncertain (re-run it explicitly, or abandon).",
    "profile_uncertain": "A profile's stage is uncertain (its run may have applied part of the role); it runs again only when asked.",
    "profile_transport_unsupported": "The profile transport does not fit the guest type (qga: VMs only; pct: containers only); nothing ran.",
    "vmid_taken": "The VMID is used by a guest this operation did not create, or leased by another owner; nothing was sent.",
    "no_free_vmid": "No VMID of the range is free on Proxmox and unheld by local operations and leases.",
    "no_node_qualifies": "Placement found no cluster node that qualifies for the plan; nothing was chosen.",
    "address_taken": "The address is declared by a guest, or leased to another owner; nothing was reserved.",
    "no_free_address": "No address of the network's pool is free of guests, local operations and leases.",
    # lifecycle (docs/operations.md, "Lifecycle")
    "operation_abandoned": "The operation was abandoned by the operator; no stage runs on it any more.",
    "operation_cleaned": "The operation's guest is being or was removed by vmanyware_cleanup; no stage runs on it any more.",
    "controller_gone": "The run's controller (ansible-playbook) is gone; the run stopped before its next request (a re-run resumes).",
    "run_cancelled": "SIGTERM or SIGINT asked the run to stop; it stopped before its next request (a re-run resumes).",
    "lifecycle_disabled": "VMANYWARE_LIFECYCLE_ENABLED is not exactly true (or the environment says false).",
    "cleanup_not_eligible": "The operation is not failed, uncertain or abandoned (a completed one needs allow_completed).",
    "cleanup_binding_mismatch": "The guest's description does not bind it to exactly this operation (id and plan hash); nothing was sent.",
    "cleanup_template": "The guest is a template; cleanup never removes templates; nothing was sent.",
    "cleanup_protected": "The guest has protection enabled; nothing was sent.",
    "cleanup_running": "The guest is running and stop was not requested; nothing was sent.",
    # guest stages (docs/stages.md, "Guest stages")
    "seed_incompatible": "The generated cloud-init user-data uses a form the collection does not accept (e.g. the deprecated scalar user:).",
    "seed_mismatch": "The generated cloud-init seed does not carry exactly the requested user, keys and network.",
    "guest_agent_unavailable": "The QEMU guest agent did not answer before the readiness deadline.",
    "guest_network_unavailable": "The guest had no usable IPv4 address on the provisioned NIC before the readiness deadline.",
    "guest_exec_unavailable": "The guest agent refuses guest-exec (disabled in its configuration); readiness and packages need it.",
    "cloudinit_failed": "cloud-init in the guest reported an error or a degraded run.",
    "readiness_timeout": "cloud-init in the guest did not finish before the readiness deadline.",
    "package_install_failed": "Installing the declared packages in the guest failed.",
    "package_version_missing": "A declared package is not installed in the declared version after the install.",
    "image_checksum_mismatch": "The downloaded cloud image does not match the declared checksum; Proxmox kept nothing of it.",
    # container stages (docs/containers.md)
    "template_not_found": "No container template matches the catalog mapping (ostemplate or appliance version glob).",
    # the guest agent connection plugin vmanyware.proxmox.qga (docs/guest-agent-connection.md)
    "qga_agent_unavailable": "The VM's QEMU guest agent is not running, not configured (agent: 1) or refuses guest-exec; nothing ran.",
    "qga_vm_not_running": "The VM is not running, so its guest agent cannot run anything; nothing ran.",
    "qga_exec_outcome_unknown": "The reply to the guest-agent exec was lost: no PID is known and the command may be running; it is not sent again.",
    "qga_exec_status_lost": "The exit status of a started command could not be read (reply lost or status already consumed); the error names its PID.",
    "qga_command_timeout": "The command did not exit within command_timeout; it may still run in the guest (the error names its PID).",
    "qga_output_truncated": "The guest agent truncated the command's stdout or stderr at its capture limit; the result is refused.",
    "qga_file_too_large": "A file to transfer is larger than file_size_limit; nothing was transferred.",
    "qga_transfer_failed": "Joining the uploaded parts into the destination file failed in the guest; the destination was not replaced.",
    # the node SSH route: pct exec over SSH to the node (docs/containers.md, "The node SSH route (pct exec)")
    "node_ssh_host_key_not_verified": "The node's SSH host key is not in the given known_hosts file or differs from it; nothing ran on the node.",
    "node_ssh_auth_failed": "The node refused the SSH login with the dedicated key; nothing ran on the node.",
    "node_ssh_unreachable": "The node's SSH endpoint could not be reached; nothing ran on the node.",
    "node_ssh_pct_missing": "The node has no pct command (not a Proxmox VE node, or another PATH).",
    "node_ssh_pct_failed": "pct on the node failed before it reached the container.",
    "node_ssh_container_not_found": "The container does not exist on the node the route reaches.",
    "node_ssh_container_not_running": "The container is not running; pct exec needs a running container.",
    "node_ssh_command_timeout": "A command over the node SSH route did not finish before the command timeout.",
    "node_ssh_transfer_failed": "Copying a file into or out of the container over the node SSH route failed.",
}


_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def snake_case(name: str) -> str:
    """``operationId`` -> ``operation_id``: the style of every key a module returns (Ansible's)."""
    return _CAMEL_HUMP.sub("_", name).lower()


def snake_keys(value: t.Any) -> t.Any:
    """``value`` with every mapping key in snake_case, recursively (values untouched).

    For what the modules return of the journal's camelCase records (the public view, evidence,
    hand-off). Never for the plan or the confirmation documents, which keep their own field names.
    """
    if isinstance(value, t.Mapping):
        return {snake_case(str(key)): snake_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [snake_keys(item) for item in value]
    return value


class VmanywareError(Exception):
    """Base of every error the collection raises on purpose.

    ``message`` is fixed application text. ``path`` names an input field (``images[3].bridge``);
    ``details`` holds further safe, non-secret facts (never raw input or provider bodies).
    """

    default_code = "internal_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        code: str | None = None,
        path: str | None = None,
        details: t.Mapping[str, t.Any] | None = None,
    ) -> None:
        self.code = code or self.default_code
        if self.code not in ERROR_CODES:
            raise ValueError("unregistered error code")
        self.message = message or ERROR_CODES[self.code]
        self.path = path
        self.details: dict[str, t.Any] = dict(details or {})
        super().__init__(self.message)

    def to_result(self) -> dict[str, t.Any]:
        """The safe, structured form that modules return with ``failed: true``."""
        result: dict[str, t.Any] = {"msg": self.message, "error_code": self.code}
        if self.path is not None:
            result["error_path"] = self.path
        if self.details:
            # Keys in snake_case like every module return key; values as they are (expected_confirmation keeps its fields).
            result["error_details"] = {snake_case(str(key)): value for key, value in self.details.items()}
        return result


class InputError(VmanywareError):
    """Invalid catalog, definition, option or plan input."""

    default_code = "invalid_option"


class ConfigurationError(VmanywareError):
    """A gate or connection setting that is not usable."""

    default_code = "configuration_error"


class ProviderError(VmanywareError):
    """Proxmox answered with an error, or could not be reached."""

    default_code = "server_error"


class TaskError(VmanywareError):
    """A Proxmox task failed, timed out or could not be observed."""

    default_code = "task_failed"


class NodeSshError(VmanywareError):
    """The node SSH route (``pct exec`` over SSH) failed: ssh itself, pct on the node, or the container's state."""

    default_code = "node_ssh_unreachable"
