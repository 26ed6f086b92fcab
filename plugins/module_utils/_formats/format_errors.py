# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""How a document is refused: ``FormatError``, its codes and the fixed texts of its rules.

Every failure to read a catalog, a definition or a template build document is a ``FormatError``
with its document's code (``invalid_catalog``, ``invalid_definition``, ...), the *path* of the
offending field and a fixed *rule* name; no value from the input (not even an unknown key, a
YAML parser message or an SSH key comment) is ever part of an error.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

from .._core.errors import ERROR_CODES, InputError
from .schemas import SchemaViolation, check_schema

CATALOG = "invalid_catalog"
DEFINITION = "invalid_definition"
PRESET = "invalid_preset"
KEY_SOURCE = "invalid_ssh_key_source"

# Fixed texts of the rules that are not schema keywords (schema rules carry their own text).
RULE_TEXTS: dict[str, str] = {
    "source": "exactly one of inline text or a file path must be given",
    "unreadable": "the file cannot be read as a regular file",
    "too_large": "the document is larger than 64 KiB",
    "not_utf8": "the document is not valid UTF-8",
    "yaml_syntax": "the document is not valid YAML",
    "multiple_documents": "the stream contains more than one YAML document",
    "anchor": "YAML anchors are not allowed",
    "alias": "YAML aliases are not allowed",
    "explicit_tag": "explicit YAML tags are not allowed",
    "too_deep": "the document nests deeper than 32 levels",
    "key_type": "mapping keys must be plain strings",
    "duplicate_key": "a mapping repeats a key",
    "duplicate_image": "repeats the image identifier of an earlier mapping",
    "default_user_root": "must not be root",
    "default_user_mismatch": "must equal the mapping's guestUser",
    "template_version_mismatch": "must equal the mapping's templateVersion",
    "ssh_key_type_unsupported": "uses a key type other than ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa",
    "ssh_key_encoding": "does not carry valid base64 key data",
    "ssh_key_type_mismatch": "declares a key type that differs from the type encoded in the key data",
    "ssh_key_invalid": "does not encode a well-formed public key of its type",
    "ssh_key_curve_mismatch": "encodes an ECDSA curve that differs from the declared key type",
    "ssh_key_too_short": "is an RSA key shorter than 2048 bits",
    "duplicate_ssh_key": "repeats an earlier SSH public key",
    "duplicate_package": "repeats the name of an earlier package",
    "duplicate_preset": "repeats the name of an earlier preset",
    "preset_field_not_allowed": "is a definition field a preset may not carry (image, resources, network and profiles only)",
    "too_many_presets": "holds more than 256 preset files",
    "not_a_directory": "is not a directory",
    "duplicate_key_source": "repeats the name of an earlier SSH key source",
    "reserved_key_source": "uses the name definition, which labels the definition's own keys",
    "unknown_key_source": "names no configured SSH key source",
    "symlink": "is a symbolic link (key sources must be regular files or directories)",
    "too_many_files": "holds more than 64 *.pub files",
    "ssh_key_line": "is not an OpenSSH public key line (type, base64 key data, optional comment)",
    "too_many_keys": "gives the guest more than 16 SSH public keys in all",
    "container_template_source": "must give exactly one of ostemplate and appliance",
    "duplicate_network": "repeats the name of an earlier network",
    "dhcp_static_field": "is a static setting; this mode takes none",
    "static_subnet_required": "a static network needs its subnet",
    "subnet_host_bits": "must be the subnet's network address (host bits zero)",
    "subnet_too_small": "must leave room for a guest and a gateway (prefix /30 at most; IPv6 /126)",
    "gateway_outside_subnet": "must be a host address of the subnet",
    "no_address_family": "configures neither IPv4 nor IPv6",
    "invalid_address": "is not a valid address of its family",
    "search_domain_conflict": "differs from the other family's search domain (Proxmox has one)",
    "pool_outside_subnet": "must be an address of the subnet",
    "pool_order": "must not come before the range's first address",
    "pool_empty": "is a range holding only a reserved address",
    "too_many_profiles": "holds more than 256 profile files",
    "duplicate_profile": "repeats the name of an earlier profile declaration",
    "too_many_variables": "declares more than 64 variables",
    "variable_name": "is not a variable name ([a-z_][a-z0-9_]*, at most 64 characters)",
    "variable_default": "must give exactly one of a default and required: true",
    "variable_type": "is not of the variable's declared type",
    "duplicate_requires": "repeats an earlier required profile, or names the profile itself",
    "duplicate_profile_request": "requests a profile an earlier entry requests",
    "required_by": "records requiredBy (and no vars) only for a profile added because the listed profiles require it",
    "unknown_variable": "is not a variable the profile declares",
    "required_variable": "lacks a variable the profile requires (a profile added by requires gets defaults only)",
    "duplicate_baked_profile": "repeats the name of an earlier baked profile",
}


class FormatError(InputError):
    """A catalog or definition refused by a fixed ``rule`` at ``path``; carries no input value."""

    def __init__(
        self, code: str, path: str, rule: str, text: str | None = None, *, extra: t.Mapping[str, int] | None = None
    ) -> None:
        details: dict[str, t.Any] = {"rule": rule}
        details.update(extra or {})
        text = text if text is not None else RULE_TEXTS[rule]
        self.text = text  # the fixed text, so a refusal can be located again (a preset's file, a key source's)
        message = "%s At %s: %s." % (ERROR_CODES[code], path, text)
        super().__init__(message, code=code, path=path, details=details)

    @property
    def rule(self) -> str:
        return t.cast(str, self.details["rule"])

    def located(self, code: str, path: str) -> FormatError:
        """The same refusal (rule, text, position) as ``code`` at ``path``."""
        extra = {key: value for key, value in self.details.items() if key != "rule"}
        return FormatError(code, path, self.rule, self.text, extra=extra)


def check_document_schema(schema: dict[str, t.Any], data: t.Any, code: str) -> None:
    """A violation of the JSON Schema ``schema`` (``schemas.py``) by ``data`` as a ``FormatError`` of ``code``."""
    try:
        check_schema(schema, data)
    except SchemaViolation as violation:
        raise FormatError(code, violation.path, violation.rule, violation.text) from None
