# SPDX-License-Identifier: GPL-3.0-or-later
"""The shared connection options: names, env fallbacks, no_log, doc fragment, settings helper."""

from __future__ import annotations

import yaml

from ansible_collections.vmanyware.proxmox.plugins.doc_fragments.connection import ModuleDocFragment
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.argspec import (
    CONNECTION_OPTION_NAMES,
    connection_argument_spec,
    connection_settings,
)

ENV = {
    "api_host": "PROXMOX_HOST",
    "api_port": "PROXMOX_PORT",
    "api_user": "PROXMOX_USER",
    "api_token_id": "PROXMOX_TOKEN_ID",
    "api_token_secret": "PROXMOX_TOKEN_SECRET",
    "api_password": "PROXMOX_PASSWORD",
    "validate_certs": "PROXMOX_VALIDATE_CERTS",
    "ca_path": "PROXMOX_CA_PATH",
    "api_fingerprint": "PROXMOX_FINGERPRINT",
    "api_timeout": "PROXMOX_TIMEOUT",
    "unverified_tls_read_only": "PROXMOX_UNVERIFIED_TLS_READ_ONLY",
}


def test_spec_names_env_and_no_log() -> None:
    spec = connection_argument_spec()
    assert tuple(spec) == CONNECTION_OPTION_NAMES
    assert {name: option["fallback"][1] for name, option in spec.items()} == {
        k: [v, "PROXMOX_API_TIMEOUT"] if k == "api_timeout" else [v] for k, v in ENV.items()
    }
    assert {name for name, option in spec.items() if option.get("no_log")} == {"api_token_secret", "api_password"}
    assert (
        spec["api_port"]["default"] == 8006
        and spec["validate_certs"]["default"] is True
        and spec["api_timeout"]["default"] == 30
    )
    assert spec["unverified_tls_read_only"] == {
        "type": "bool",
        "default": False,
        "fallback": spec["unverified_tls_read_only"]["fallback"],
    }
    assert connection_argument_spec() is not spec  # a fresh copy each time


def test_doc_fragment_matches_spec() -> None:
    options = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    spec = connection_argument_spec()
    assert set(options) == set(spec)
    for name, option in spec.items():
        assert options[name]["type"] == option["type"], name
        assert options[name].get("default") == option.get("default"), name
        assert ENV[name] in " ".join(options[name]["description"]), name


def test_settings_from_params() -> None:
    params = {name: None for name in CONNECTION_OPTION_NAMES}
    params.update(
        {
            "api_host": "PVE.Example.org",
            "api_port": 8006,
            "api_user": "automation@pve",
            "api_token_id": "vmanyware",
            "api_token_secret": "s",
            "validate_certs": True,
            "ca_path": "",
            "api_timeout": 12.5,
        }
    )
    settings = connection_settings(params)
    assert (settings.host, settings.user, settings.token_name, settings.ca_path, settings.timeout) == (
        "pve.example.org",
        "automation@pve",
        "vmanyware",
        None,
        12.5,
    )


def test_empty_environment_values_count_as_unset(monkeypatch) -> None:
    """An AWX credential with optional fields left empty injects ``PROXMOX_PORT=""`` etc.: defaults apply, nothing fails."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    for variable in ENV.values():
        monkeypatch.setenv(variable, "")
    monkeypatch.setenv("PROXMOX_HOST", "pve.example.org")
    result = ArgumentSpecValidator(connection_argument_spec()).validate({})
    assert result.error_messages == []
    params = result.validated_parameters
    assert (params["api_port"], params["api_timeout"], params["validate_certs"]) == (8006, 30, True)
    assert params["ca_path"] is None and params["api_fingerprint"] is None and params["api_user"] is None
    assert params["api_host"] == "pve.example.org"


def test_unverified_read_only_opt_in_from_params_and_environment(monkeypatch) -> None:
    """Off unless set; named for what it is, and readable from PROXMOX_UNVERIFIED_TLS_READ_ONLY."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    base = {name: None for name in CONNECTION_OPTION_NAMES}
    base.update(
        {
            "api_host": "pve.example.org",
            "api_token_id": "automation@pve!vmanyware",
            "api_token_secret": "s",
            "validate_certs": False,
        }
    )
    assert (
        connection_settings(base).unverified_tls_read_only is False and connection_settings(base).tls_verified is False
    )
    assert connection_settings(dict(base, unverified_tls_read_only=True)).unverified_tls_read_only is True
    monkeypatch.setenv("PROXMOX_HOST", "pve.example.org")
    monkeypatch.setenv("PROXMOX_UNVERIFIED_TLS_READ_ONLY", "true")
    params = ArgumentSpecValidator(connection_argument_spec()).validate({}).validated_parameters
    assert params["unverified_tls_read_only"] is True
    monkeypatch.setenv("PROXMOX_UNVERIFIED_TLS_READ_ONLY", "")
    assert (
        ArgumentSpecValidator(connection_argument_spec()).validate({}).validated_parameters["unverified_tls_read_only"]
        is False
    )


def test_timeout_from_community_proxmox_variable(monkeypatch) -> None:
    """community.proxmox's PROXMOX_API_TIMEOUT is accepted; PROXMOX_TIMEOUT wins when both are set."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    monkeypatch.delenv("PROXMOX_TIMEOUT", raising=False)
    monkeypatch.setenv("PROXMOX_API_TIMEOUT", "7")
    assert ArgumentSpecValidator(connection_argument_spec()).validate({}).validated_parameters["api_timeout"] == 7
    monkeypatch.setenv("PROXMOX_TIMEOUT", "9")
    assert ArgumentSpecValidator(connection_argument_spec()).validate({}).validated_parameters["api_timeout"] == 9
    monkeypatch.setenv("PROXMOX_TIMEOUT", "")  # empty counts as unset: the other name applies
    assert ArgumentSpecValidator(connection_argument_spec()).validate({}).validated_parameters["api_timeout"] == 7
    assert "PROXMOX_API_TIMEOUT" in " ".join(
        yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]["api_timeout"]["description"]
    )
