# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared connection options (documented by the ``vmanyware.proxmox.connection`` doc fragment).

Names and environment fallbacks follow community.proxmox. Modules merge
``connection_argument_spec()`` into their own spec and turn the values into a plain
``ConnectionSettings`` with ``connection_settings(params)``; the client never sees ``module.params``.
"""

from __future__ import annotations

import os
import typing as t

from ansible.module_utils.errors import AnsibleFallbackNotFound

from .settings import DEFAULT_PORT, DEFAULT_TIMEOUT, ConnectionSettings, build_settings


def set_env_fallback(*names: str, **kwargs: t.Any) -> str:
    """Like Ansible's ``env_fallback``, but a variable set to the empty string counts as unset.

    A controller credential with an optional field left empty injects ``PROXMOX_PORT=""``; that
    must mean "use the default", not "convert '' to an integer".
    """
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    raise AnsibleFallbackNotFound


CONNECTION_OPTION_NAMES = (
    "api_host",
    "api_port",
    "api_user",
    "api_token_id",
    "api_token_secret",
    "api_password",
    "validate_certs",
    "ca_path",
    "api_fingerprint",
    "api_timeout",
    "unverified_tls_read_only",
)


def connection_argument_spec() -> dict[str, dict[str, t.Any]]:
    """A fresh copy of the connection options' argument spec."""
    return {
        "api_host": {"type": "str", "fallback": (set_env_fallback, ["PROXMOX_HOST"])},
        "api_port": {"type": "int", "default": DEFAULT_PORT, "fallback": (set_env_fallback, ["PROXMOX_PORT"])},
        "api_user": {"type": "str", "fallback": (set_env_fallback, ["PROXMOX_USER"])},
        "api_token_id": {"type": "str", "fallback": (set_env_fallback, ["PROXMOX_TOKEN_ID"])},
        "api_token_secret": {"type": "str", "no_log": True, "fallback": (set_env_fallback, ["PROXMOX_TOKEN_SECRET"])},
        "api_password": {"type": "str", "no_log": True, "fallback": (set_env_fallback, ["PROXMOX_PASSWORD"])},
        "validate_certs": {"type": "bool", "default": True, "fallback": (set_env_fallback, ["PROXMOX_VALIDATE_CERTS"])},
        "ca_path": {"type": "path", "fallback": (set_env_fallback, ["PROXMOX_CA_PATH"])},
        "api_fingerprint": {"type": "str", "fallback": (set_env_fallback, ["PROXMOX_FINGERPRINT"])},
        "api_timeout": {
            "type": "float",
            "default": DEFAULT_TIMEOUT,
            "fallback": (set_env_fallback, ["PROXMOX_TIMEOUT", "PROXMOX_API_TIMEOUT"]),
        },
        "unverified_tls_read_only": {
            "type": "bool",
            "default": False,
            "fallback": (set_env_fallback, ["PROXMOX_UNVERIFIED_TLS_READ_ONLY"]),
        },
    }


def connection_environment() -> dict[str, str]:
    """Connection option -> the ``PROXMOX_*`` variable its fallback reads first, for handing a connection to a child
    process through its environment (the nested profile run's qga connection). ``unverified_tls_read_only`` is left
    out: a child that sends commands must never inherit the read-only TLS exception."""
    return {
        option: spec["fallback"][1][0]
        for option, spec in connection_argument_spec().items()
        if option != "unverified_tls_read_only"
    }


def connection_settings(params: t.Mapping[str, t.Any]) -> ConnectionSettings:
    """Build validated ``ConnectionSettings`` from option values (``configuration_error`` on bad values).

    Empty strings (an environment variable set to nothing) count as unset.
    """
    params = {k: (None if v == "" else v) for k, v in params.items()}
    return build_settings(
        host=params.get("api_host"),
        port=params.get("api_port"),
        user=params.get("api_user"),
        token_id=params.get("api_token_id"),
        token_secret=params.get("api_token_secret"),
        password=params.get("api_password"),
        validate_certs=params.get("validate_certs", True),
        ca_path=params.get("ca_path"),
        fingerprint=params.get("api_fingerprint"),
        timeout=params.get("api_timeout"),
        unverified_tls_read_only=bool(params.get("unverified_tls_read_only")),
    )
