# SPDX-License-Identifier: GPL-3.0-or-later
"""The Proxmox client: TLS (CA, pin, environment bundles), retries, bounds, typed errors, secrets."""

from __future__ import annotations

import gzip
import json
import socket
import ssl
import typing as t

import pytest
import requests
import urllib3

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api import http_errors, libraries, tls
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import provider_scope_id
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.http_errors import map_http_error
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import (
    ConnectionSettings,
    build_settings,
    normalize_fingerprint,
    parse_token_id,
)
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import ConfigurationError, ProviderError
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.redaction import redact

from pve_stubs import RecordedRequest, Reply, fixtures_dir, make_settings, stub_server, tls_material  # noqa: F401  pylint: disable=unused-import

SECRET = "00000000-test-secret-0000-000000000000"
VERSION = {"data": {"version": "9.1.3", "release": "9.1", "repoid": "0123abcd"}}


def _client_for(settings: ConnectionSettings, sleeps: list[float] | None = None, **kwargs: t.Any) -> ProxmoxClient:
    return ProxmoxClient(settings, sleep=(sleeps.append if sleeps is not None else (lambda s: None)), **kwargs)


def _raises(code: str, func: t.Callable[[], t.Any]) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        func()
    assert info.value.code == code, info.value.to_result()
    return info.value


def _refused(func: t.Callable[[], t.Any]) -> ConfigurationError:
    """``tls_unverified``: a connection setting, never a ProviderError (no retry or read path may take it for Proxmox's answer)."""
    with pytest.raises(ConfigurationError) as info:
        func()
    assert info.value.code == "tls_unverified", info.value.to_result()
    return info.value


# -- error mapping -------------------------------------------------------------------------------------------


def _cases(fixtures_dir: t.Any) -> list[dict[str, t.Any]]:
    return json.loads((fixtures_dir / "pve_errors.json").read_text())["cases"]


def test_error_mapping_table(fixtures_dir: t.Any) -> None:
    for case in _cases(fixtures_dir):
        err = map_http_error("GET", "/nodes/pve/qemu/201/config", case["status"], case["reason"], case["body"])
        assert err.code == case["code"], case["name"]
        for key, value in case.get("details", {}).items():
            assert err.details[key] == value, case["name"]
        # Only fixed text and safe facts: no reason phrase, no provider message, no parameter message.
        text = json.dumps(err.to_result())
        assert case["reason"] not in text or case["reason"] in ("Permission check failed",), case["name"]
        assert (
            "s3cr3t-user" not in text
            and "minimum value" not in text
            and "Configuration file" not in text
            and "9000" not in text
        )


# The recorded errors that prove a refusal before any effect (RESTHandler's checks, a lock, exists / does not exist).
PRECHECK_CASES = {
    "token_invalid",
    "no_ticket",
    "perm_allocate",
    "perm_storage",
    "perm_sdn",
    "perm_plain",
    "no_such_path",
    "http_404",
    "config_missing",
    "storage_missing",
    "vm_locked",
    "lock_timeout",
    "digest",
    "already_exists_500",
    "nextid_taken",
    "param_invalid",
}


def test_only_a_reply_that_proves_a_pre_check_refusal_is_flagged_precheck(fixtures_dir: t.Any) -> None:
    cases = _cases(fixtures_dir)
    assert PRECHECK_CASES < {case["name"] for case in cases}
    for case in cases:
        err = map_http_error("POST", "/nodes/pve/qemu/9000/clone", case["status"], case["reason"], case["body"])
        assert err.details["precheck"] is (case["name"] in PRECHECK_CASES), case["name"]


@pytest.mark.parametrize(
    "message,agent,precheck",
    [
        ("QEMU guest agent is not running", "not_running", True),
        ("No QEMU guest agent configured", "not_configured", True),
        ("VM 201 is not running", "vm_not_running", True),
        (
            "VM 201 qga command 'guest-exec' failed - The command guest-exec has been disabled for this instance",
            "exec_disabled",
            True,
        ),
        (
            "Agent error: Guest agent command failed, error was 'Failed to execute child process \u201cx\u201d (Permission denied)'",
            "exec_failed",
            True,
        ),
        # The agent is busy: the command may run already, or later from the agent's queue. Unknown, never "not applied".
        ("guest-exec failed - got timeout", None, False),
        ("VM 201 qmp command 'guest-exec' failed - got timeout", None, False),
        (
            "VM 201 qmp command 'guest-exec' failed - unable to connect to VM 201 qga socket - timeout after 31 retries",
            None,
            False,
        ),
        ("simulated failure", None, False),
    ],
)
def test_agent_exec_500s_are_pre_check_only_for_the_agents_availability_checks(
    message: str, agent: str | None, precheck: bool
) -> None:
    err = map_http_error("POST", "/nodes/pve/qemu/201/agent/exec", 500, "", {"data": None, "message": message + "\n"})
    assert err.code == "server_error" and err.details.get("agent") == agent and err.details["precheck"] is precheck
    assert message not in json.dumps(err.to_result())  # the provider's text is read, never forwarded


def test_error_mapping_over_the_wire(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, fixtures_dir: t.Any
) -> None:
    cases = {c["name"]: c for c in _cases(fixtures_dir)}
    current: dict[str, t.Any] = {}
    server = stub_server(lambda r: Reply(current["status"], current["reason"], current["body"]))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    for name in ("perm_allocate", "config_missing", "nextid_taken", "param_invalid", "vm_locked", "token_invalid"):
        current.update(cases[name])
        err = _raises(cases[name]["code"], lambda: client.post("/nodes/pve/qemu/9000/clone", newid=201))
        for key, value in cases[name].get("details", {}).items():
            assert err.details[key] == value
        assert err.__cause__ is None and err.__context__ is None


def test_unexpected_body(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(200, "OK", b"<html>not json</html>"))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    _raises("unexpected_response", lambda: client.get("/version"))


# -- retries -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_mutation_never_retried_when_connection_drops(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, method: str
) -> None:
    server = stub_server(lambda r: Reply(drop=True))
    sleeps: list[float] = []
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path), sleeps)
    err = _raises("reply_lost", lambda: client.request(method, "/nodes/pve/qemu/9000/clone", {"newid": 201}))
    assert len(server.requests) == 1
    assert sleeps == []
    assert (
        err.__cause__ is None and err.__context__ is None
    )  # nothing from requests (which holds the token) stays chained


@pytest.mark.parametrize("status", [500, 596])
def test_mutation_never_retried_on_5xx(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, status: int
) -> None:
    server = stub_server(lambda r: Reply(status, "Broken pipe", {"data": None}))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    _raises("server_error", lambda: client.post("/nodes/pve/qemu/9000/clone", newid=201))
    assert len(server.requests) == 1


def test_get_retry_bounded_on_dropped_connection(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(drop=True))
    sleeps: list[float] = []
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path), sleeps)
    _raises("reply_lost", lambda: client.get("/version"))
    assert len(server.requests) == 3
    assert sleeps == [0.2, 0.6]


def test_get_retry_on_5xx_then_success(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    replies = iter([Reply(596, "Broken pipe", None), Reply(500, "Internal Server Error", None), Reply(body=VERSION)])
    server = stub_server(lambda r: next(replies))
    sleeps: list[float] = []
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path), sleeps)
    assert client.get("/version")["version"] == "9.1.3"
    assert len(server.requests) == 3 and sleeps == [0.2, 0.6]


@pytest.mark.parametrize(
    "status,code", [(400, "parameter_invalid"), (401, "auth_failed"), (403, "permission_denied"), (501, "server_error")]
)
def test_get_not_retried_on_definite_errors(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, status: int, code: str
) -> None:
    server = stub_server(lambda r: Reply(status, "nope", {"data": None}))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    _raises(code, lambda: client.get("/version"))
    assert len(server.requests) == 1


def test_connection_refused_is_transport_lost() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the request: nothing listens
    sleeps: list[float] = []
    settings = build_settings(host="127.0.0.1", port=port, token_id="a@pve!tk", token_secret=SECRET, timeout=2)
    client = _client_for(settings, sleeps)
    err = _raises("transport_lost", lambda: client.post("/nodes/pve/qemu/9000/clone", newid=201))
    assert sleeps == []
    assert SECRET not in repr(err.to_result())
    # Reported as a refusal (a wrong port, the API down), not as a timeout.
    assert err.details["reason"] == "connection_refused" and "refused" in err.message and "timed out" not in err.message
    err = _raises("transport_lost", lambda: client.get("/version"))
    assert sleeps == [0.2, 0.6]
    assert err.details["reason"] == "connection_refused"
    err = _raises("transport_lost", lambda: tls.certificate_fingerprint(settings))
    assert err.details["reason"] == "connection_refused" and "refused" in err.message


def test_connect_failure_reasons() -> None:
    pool: t.Any = None
    refused = urllib3.exceptions.NewConnectionError(pool, "refused")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    wrapped = requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(pool, "/", refused))
    assert http_errors.connect_failure_reason(wrapped) == "connection_refused"
    timeout = urllib3.exceptions.ConnectTimeoutError(pool, "timed out")
    assert http_errors.connect_failure_reason(
        requests.exceptions.ConnectTimeout(urllib3.exceptions.MaxRetryError(pool, "/", timeout))
    ) == ("connect_timeout")
    assert http_errors.connect_failure_reason(socket.gaierror(-2, "Name or service not known")) == "name_resolution"
    assert http_errors.connect_failure_reason(OSError(101, "Network is unreachable")) == "network_unreachable"
    assert http_errors.connect_failure_reason(OSError("other")) == "connect_failed"


def test_connect_phase_classification() -> None:
    pool: t.Any = None
    new_conn = urllib3.exceptions.NewConnectionError(pool, "refused")
    assert http_errors._is_connect_phase(
        requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(pool, "/", new_conn))
    )
    protocol = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError())
    assert not http_errors._is_connect_phase(requests.exceptions.ConnectionError(protocol))


# -- bounds --------------------------------------------------------------------------------------------------------


def test_read_timeout_is_reply_lost_and_mutation_not_retried(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    server = stub_server(lambda r: Reply(body={"data": "UPID"}, delay=1.0))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path, timeout=0.3))
    _raises("reply_lost", lambda: client.post("/nodes/pve/qemu/9000/clone", newid=201))
    assert len(server.requests) == 1


def test_response_size_cap_declared(stub_server: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(body={"data": "x" * 5000}))
    settings = build_settings(
        host="127.0.0.1",
        port=server.port,
        token_id="a@pve!tk",
        token_secret=SECRET,
        ca_path=tls_material.ca_path,
        max_response_bytes=1024,
    )
    err = _raises("response_too_large", lambda: _client_for(settings).get("/version"))
    assert err.details["limit"] == 1024
    assert len(server.requests) == 1  # not retried


def test_response_size_cap_streamed_decompressed(stub_server: t.Any, tls_material: t.Any) -> None:
    bomb = gzip.compress(json.dumps({"data": "0" * 200_000}).encode())
    server = stub_server(lambda r: Reply(body=bomb, headers={"Content-Encoding": "gzip"}))
    settings = build_settings(
        host="127.0.0.1",
        port=server.port,
        token_id="a@pve!tk",
        token_secret=SECRET,
        ca_path=tls_material.ca_path,
        max_response_bytes=64 * 1024,
    )
    assert len(bomb) < 64 * 1024
    _raises("response_too_large", lambda: _client_for(settings).get("/version"))


def test_default_bounds() -> None:
    settings = build_settings(host="pve", token_id="a@pve!tk", token_secret=SECRET)
    assert settings.max_response_bytes == 8 * 1024 * 1024 and settings.timeout == 30 and settings.port == 8006


# -- TLS -----------------------------------------------------------------------------------------------------------


def test_ca_path_verifies(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    assert client.get("/version")["release"] == "9.1"
    assert client.observed_fingerprint == tls_material.fingerprint


def test_default_trust_refuses_private_ca(stub_server: t.Any, make_settings: t.Any) -> None:
    server = stub_server()
    _raises("tls_verification_failed", lambda: _client_for(make_settings(server.port)).get("/version"))
    assert server.requests == []


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_env_bundle_without_ca_does_not_override_ca_path(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, tls_material.other_ca_path)
    server = stub_server()
    assert _client_for(make_settings(server.port, ca_path=tls_material.ca_path)).get("/version")["version"] == "9.1.3"


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_env_bundle_with_ca_cannot_widen_trust(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, tls_material.ca_path)
    server = stub_server()
    _raises(
        "tls_verification_failed",
        lambda: _client_for(make_settings(server.port, ca_path=tls_material.other_ca_path)).get("/version"),
    )
    _raises("tls_verification_failed", lambda: _client_for(make_settings(server.port)).get("/version"))
    assert server.requests == []


def test_system_trust_store_is_used_without_ca_path_or_pin(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ca_path, no pin: the OS trust store (truststore; on Linux OpenSSL's default paths, which SSL_CERT_FILE selects).

    A CA added to that store (as update-ca-certificates does) is trusted; certifi and REQUESTS_CA_BUNDLE are not consulted.
    """
    assert libraries.HAS_TRUSTSTORE  # requirements.txt installs it
    server = stub_server()
    monkeypatch.setenv("SSL_CERT_FILE", tls_material.ca_path)
    monkeypatch.setenv("SSL_CERT_DIR", str(tls_material.ca_path) + ".absent")
    client = _client_for(make_settings(server.port))
    assert client.get("/version")["release"] == "9.1"
    assert client.observed_fingerprint == tls_material.fingerprint
    assert tls.certificate_fingerprint(make_settings(server.port)) == tls_material.fingerprint  # the same trust
    # A store without that CA refuses, whatever REQUESTS_CA_BUNDLE says; ca_path, when given, is the only anchor.
    monkeypatch.setenv("SSL_CERT_FILE", tls_material.other_ca_path)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", tls_material.ca_path)
    _raises("tls_verification_failed", lambda: _client_for(make_settings(server.port)).get("/version"))
    _raises("tls_verification_failed", lambda: tls.certificate_fingerprint(make_settings(server.port)))
    monkeypatch.setenv("SSL_CERT_FILE", tls_material.ca_path)
    _raises(
        "tls_verification_failed",
        lambda: _client_for(make_settings(server.port, ca_path=tls_material.other_ca_path)).get("/version"),
    )
    assert len(server.requests) == 1


@pytest.mark.parametrize("variable", ["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"])
def test_configured_proxy_is_refused_not_ignored(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    for name in (
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
        "http_proxy",
        "HTTP_PROXY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "http://127.0.0.1:9")
    with pytest.raises(ConfigurationError) as info:
        make_settings(1234, ca_path=tls_material.ca_path)
    assert info.value.code == "proxy_not_supported" and info.value.path == "api_host"
    assert "127.0.0.1:9" not in json.dumps(info.value.to_result())
    # no_proxy naming the host: direct, as always (the proxy is never contacted).
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    server = stub_server()
    assert _client_for(make_settings(server.port, ca_path=tls_material.ca_path)).get("/version")["release"] == "9.1"


def test_http_proxy_alone_does_not_apply(
    make_settings: t.Any, tls_material: t.Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API is https only: a plain-HTTP proxy setting does not route it, so it is no reason to refuse."""
    for name in ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    assert make_settings(1234, ca_path=tls_material.ca_path).host == "127.0.0.1"


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE"])
def test_unverified_tls_sends_nothing_by_default(stub_server: t.Any, make_settings: t.Any, method: str) -> None:
    """validate_certs false and no pin: every request is refused before a connection exists (no token on the wire)."""
    server = stub_server()
    seen: list[t.Any] = []
    client = _client_for(make_settings(server.port, validate_certs=False), request_log=lambda *a: seen.append(a))
    err = _refused(lambda: client.request(method, "/version"))
    assert err.details["rule"] == "verified_tls_required" and SECRET not in json.dumps(err.to_result())
    assert server.requests == [] and server.connections == 0 and seen == []
    assert client.provider_scope_id is None


def test_unverified_read_only_sends_gets_only(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    """The opt-in reads with GETs; any other method is refused in the client, before it is sent; no scope is computed."""
    server = stub_server()
    seen: list[t.Any] = []
    settings = make_settings(server.port, validate_certs=False, unverified_tls_read_only=True)
    assert settings.tls_verified is False
    client = _client_for(settings, request_log=lambda *a: seen.append(a))
    assert client.get("/version")["version"] == "9.1.3"
    for method, call in (("POST", client.post), ("PUT", client.put), ("DELETE", client.delete)):
        err = _refused(lambda: call("/nodes/pve/qemu/201/status/start"))
        assert err.details == {"method": method, "endpoint": "/nodes/pve/qemu/201/status/start", "rule": "read_only"}
    assert [r.method for r in server.requests] == ["GET"] and [a[0] for a in seen] == ["GET"]
    # The certificate was seen on the GET, but an unverified certificate identifies no provider.
    assert client.observed_fingerprint == tls_material.fingerprint and client.provider_scope_id is None


def test_unverified_read_only_never_sends_a_password(stub_server: t.Any) -> None:
    """The ticket login is a POST of the password: refused under the opt-in, so not even a GET goes out."""
    server = stub_server()
    settings = build_settings(
        host="127.0.0.1",
        port=server.port,
        user="root@pam",
        password="pw-" + SECRET,
        validate_certs=False,
        unverified_tls_read_only=True,
    )
    client = _client_for(settings)
    assert _refused(lambda: client.get("/version")).details["rule"] == "password"
    assert _refused(client._login).details == {"method": "POST", "endpoint": "/access/ticket", "rule": "password"}
    assert server.requests == [] and server.connections == 0


def test_read_only_opt_in_is_ignored_over_verified_tls(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    server = stub_server(
        lambda r: Reply(body={"data": "UPID:pve:0000A1B2:00C3D4E5:6789ABCD:qmstart:201:automation@pve!vmanyware:"})
    )
    settings = make_settings(server.port, ca_path=tls_material.ca_path, unverified_tls_read_only=True)
    assert settings.tls_verified is True
    assert _client_for(settings).post("/nodes/pve/qemu/201/status/start").startswith("UPID:")
    assert [r.method for r in server.requests] == ["POST"]


def test_fingerprint_pin_matches(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    colon_upper = ":".join(tls_material.fingerprint[i : i + 2] for i in range(0, 64, 2)).upper()
    settings = make_settings(server.port, fingerprint=colon_upper)
    assert settings.fingerprint == tls_material.fingerprint
    client = _client_for(settings)
    assert client.get("/version")["version"] == "9.1.3"
    assert client.provider_scope_id == provider_scope_id(settings, None)


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_wrong_pin_refused_before_any_request_byte(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, method: str
) -> None:
    server = stub_server()
    wrong = "ab" * 32
    assert wrong != tls_material.fingerprint
    # even a CA that would verify the chain does not rescue a wrong pin
    settings = make_settings(server.port, fingerprint=wrong, ca_path=tls_material.ca_path)
    err = _raises("tls_verification_failed", lambda: _client_for(settings).request(method, "/version", {}))
    assert err.__context__ is None and err.__cause__ is None
    assert server.connections >= 1  # the handshake happened ...
    assert server.requests == []  # ... but no request line, header or token arrived
    assert SECRET not in json.dumps(err.to_result())


# -- settings, token ids, scope ----------------------------------------------------------------------------------


def test_token_id_forms() -> None:
    assert parse_token_id("automation@pve!vmanyware", None) == ("automation@pve", "vmanyware")
    assert parse_token_id("vmanyware", "automation@pve") == ("automation@pve", "vmanyware")
    assert parse_token_id("automation@pve!vmanyware", "automation@pve") == ("automation@pve", "vmanyware")
    for token_id, user, path in [
        ("vmanyware", None, "api_user"),
        ("a@pve!x", "b@pve", "api_user"),
        ("nope!x", None, "api_token_id"),
        ("a@pve!1bad", None, "api_token_id"),
    ]:
        with pytest.raises(ConfigurationError) as info:
            parse_token_id(token_id, user)
        assert info.value.path == path


def test_token_header_sent(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    settings = make_settings(server.port, ca_path=tls_material.ca_path, token_id="vmanyware", user="automation@pve")
    _client_for(settings).get("/version")
    assert server.requests[0].headers["Authorization"] == f"PVEAPIToken=automation@pve!vmanyware={SECRET}"


def test_password_ticket_login(stub_server: t.Any, tls_material: t.Any) -> None:
    def behave(r: RecordedRequest) -> Reply:
        if r.path == "/api2/json/access/ticket":
            return Reply(
                body={"data": {"ticket": "PVE:ticket", "CSRFPreventionToken": "csrf1", "username": "root@pam"}}
            )
        return Reply(body={"data": None})

    server = stub_server(behave)
    settings = build_settings(
        host="127.0.0.1", port=server.port, user="root@pam", password="pw-" + SECRET, ca_path=tls_material.ca_path
    )
    assert "pw-" not in repr(settings)
    client = _client_for(settings)
    client.get("/version")
    client.post("/nodes/pve/qemu/201/status/start")
    login, get, post = server.requests
    assert login.method == "POST" and b"password=" in login.body
    assert "PVEAuthCookie=PVE:ticket" in get.headers["Cookie"] and "CSRFPreventionToken" not in get.headers
    assert post.headers["CSRFPreventionToken"] == "csrf1"


@pytest.mark.parametrize(
    "kwargs,path",
    [
        ({"host": "https://pve"}, "api_host"),
        ({"host": "pve/api"}, "api_host"),
        ({"host": None}, "api_host"),
        ({"host": ""}, "api_host"),
        ({"port": 0}, "api_port"),
        ({"timeout": 0}, "api_timeout"),
        ({"fingerprint": "zz"}, "api_fingerprint"),
        ({"ca_path": "/nonexistent/ca.pem"}, "ca_path"),
        ({"token_secret": None}, "api_token_secret"),
        ({"token_id": None, "token_secret": None}, "api_token_id"),
    ],
)
def test_settings_validation(kwargs: dict[str, t.Any], path: str) -> None:
    values = {"host": "pve", "token_id": "a@pve!tk", "token_secret": SECRET}
    values.update(kwargs)
    with pytest.raises(ConfigurationError) as info:
        build_settings(**values)
    assert info.value.path == path and info.value.code == "configuration_error"
    assert SECRET not in json.dumps(info.value.to_result())
    if path == "api_host" and not values["host"]:
        assert "PROXMOX_HOST" in info.value.message  # an unset host names the variable that sets it


def test_fingerprint_normalization() -> None:
    plain = "0123456789abcdef" * 4
    colon = ":".join(plain[i : i + 2] for i in range(0, 64, 2)).upper()
    assert normalize_fingerprint(colon) == plain == normalize_fingerprint(" " + plain.upper() + " ")


def test_scope_id_stable_and_sensitive() -> None:
    fp = "ab" * 32
    base = build_settings(host="PVE.example.org", token_id="a@pve!tk1", token_secret="s1")
    same = build_settings(host="pve.example.org", token_id="tk2", user="a@pve", token_secret="s2")
    scope = provider_scope_id(base, fp)
    assert scope is not None and scope.startswith("pve:") and len(scope) == 4 + 64
    assert (
        scope
        == provider_scope_id(same, fp.upper())
        == provider_scope_id(same, ":".join([fp[i : i + 2] for i in range(0, 64, 2)]))
    )
    assert (
        scope
        == "pve:"
        + __import__("hashlib")
        .sha256(
            b'{"apiUrl":"https://pve.example.org:8006/api2/json","certificateSha256":"'
            + fp.encode()
            + b'","user":"a@pve"}'
        )
        .hexdigest()
    )
    others = [
        provider_scope_id(build_settings(host="pve2.example.org", token_id="a@pve!tk", token_secret="s"), fp),
        provider_scope_id(build_settings(host="pve.example.org", port=8007, token_id="a@pve!tk", token_secret="s"), fp),
        provider_scope_id(build_settings(host="pve.example.org", token_id="b@pve!tk", token_secret="s"), fp),
        provider_scope_id(base, "cd" * 32),
    ]
    assert len(set(others + [scope])) == 5
    assert provider_scope_id(base, None) is None
    pinned = build_settings(host="pve.example.org", token_id="a@pve!tk", token_secret="s", fingerprint=fp)
    assert provider_scope_id(pinned, None) == scope


# -- secrets, log hook, path builder ---------------------------------------------------------------------------


def test_request_log_hook_redacts(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(body={"data": None}))
    seen: list[tuple[str, str, dict[str, t.Any], int | None]] = []
    client = _client_for(
        make_settings(server.port, ca_path=tls_material.ca_path), request_log=lambda *a: seen.append(a)
    )
    client.put("/nodes/pve/qemu/201/config", cipassword="hunter2", ciuser="admin", cores=2)
    assert seen == [
        ("PUT", "/nodes/pve/qemu/201/config", {"cipassword": "<redacted>", "ciuser": "admin", "cores": 2}, 200)
    ]
    redacted = redact({"password": "x", "api_token_secret": "y", "vmid": 1})
    assert redacted == {"password": "<redacted>", "api_token_secret": "<redacted>", "vmid": 1}
    assert SECRET not in repr(client.settings)


def test_proxmoxer_style_path_builder(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(body={"data": {"template": 1}}))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    assert client.api.nodes("pve").qemu(9000).config.get() == {"template": 1}
    client.api.cluster.nextid.get(vmid=201)
    assert [r.path for r in server.requests] == ["/api2/json/nodes/pve/qemu/9000/config", "/api2/json/cluster/nextid"]
    assert server.requests[1].query == {"vmid": "201"}


def test_list_and_bool_encoding(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(body={"data": {"pid": 1}}))
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    client.post("/nodes/pve/qemu/201/agent/exec", command=["apt-get", "install", "-y", "vim"], full=True)
    assert server.requests[0].body == b"command=apt-get&command=install&command=-y&command=vim&full=1"


# -- "not sent" by fact: only a failure before the first request byte ------------------------------------------------


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_tls_error_while_reading_the_reply_is_reply_lost(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, method: str
) -> None:
    # The request arrived (and may have run); the TLS stream then broke while the client read the reply. Before, any
    # requests SSLError was "tls_verification_failed", which the stage runner counts as not sent, so it was sent again.
    server = stub_server(lambda r: Reply(tls_abort=True))
    sleeps: list[float] = []
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path), sleeps)
    err = _raises("reply_lost", lambda: client.request(method, "/nodes/pve/qemu/9000/clone", {"newid": 201}))
    assert len(server.requests) == 1 and sleeps == []  # a mutation is never retried
    assert err.__cause__ is None and err.__context__ is None
    assert SECRET not in json.dumps(err.to_result())


def test_tls_error_while_reading_a_get_reply_is_retried_as_reply_lost(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    replies = iter([Reply(tls_abort=True), Reply(body=VERSION)])
    server = stub_server(lambda r: next(replies))
    sleeps: list[float] = []
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path), sleeps)
    assert client.get("/version")["version"] == "9.1.3"
    assert len(server.requests) == 2 and sleeps == [0.2]


def test_handshake_failure_of_a_mutation_is_not_sent(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    server = stub_server()
    client = _client_for(make_settings(server.port, ca_path=tls_material.other_ca_path))
    _raises("tls_verification_failed", lambda: client.post("/nodes/pve/qemu/9000/clone", newid=201))
    assert server.connections == 1 and server.requests == []


def test_response_too_large_of_a_mutation_keeps_its_code(stub_server: t.Any, tls_material: t.Any) -> None:
    server = stub_server(lambda r: Reply(body={"data": "x" * 5000}))
    settings = build_settings(
        host="127.0.0.1",
        port=server.port,
        token_id="a@pve!tk",
        token_secret=SECRET,
        ca_path=tls_material.ca_path,
        max_response_bytes=1024,
    )
    _raises("response_too_large", lambda: _client_for(settings).post("/nodes/pve/qemu/9000/clone", newid=201))
    assert (
        len(server.requests) == 1
    )  # it was sent: the stage runner treats this code as ambiguous (_stages/test_runner_transport.py)


def test_exchange_facts_record_the_connection_and_the_first_write(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    server = stub_server()
    adapter = tls.PinnedTLSAdapter()
    client = _client_for(make_settings(server.port, ca_path=tls_material.ca_path), adapter=adapter)
    client.get("/version")
    assert adapter.facts == http_errors.ExchangeFacts(
        connected=True, leaf_sha256=tls_material.fingerprint, written=True
    )
    client.get("/version")  # the kept-alive connection: no new handshake
    assert adapter.facts == http_errors.ExchangeFacts(connected=False, leaf_sha256=None, written=True)
    refused = _client_for(
        make_settings(server.port, ca_path=tls_material.other_ca_path), adapter=tls.PinnedTLSAdapter()
    )
    _raises("tls_verification_failed", lambda: refused.post("/nodes/pve/qemu/9000/clone", newid=201))
    assert refused._adapter.facts == http_errors.ExchangeFacts()  # pylint: disable=protected-access


def test_transport_failure_without_facts_counts_only_proven_pre_send_failures() -> None:
    pool: t.Any = None
    verify = ssl.SSLCertVerificationError(1, "certificate verify failed")
    handshake = requests.exceptions.SSLError(
        urllib3.exceptions.MaxRetryError(pool, "/", urllib3.exceptions.SSLError(verify))
    )
    assert http_errors.transport_failure(handshake, None, "POST", "/x").code == "tls_verification_failed"
    reading = requests.exceptions.SSLError(
        urllib3.exceptions.MaxRetryError(
            pool,
            "/",
            urllib3.exceptions.SSLError(
                ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC] decryption failed or bad record mac")
            ),
        )
    )
    assert http_errors.transport_failure(reading, None, "POST", "/x").code == "reply_lost"
    refused = urllib3.exceptions.NewConnectionError(pool, "refused")
    assert (
        http_errors.transport_failure(
            requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(pool, "/", refused)),
            None,
            "POST",
            "/x",
        ).code
        == "transport_lost"
    )
    # with facts, the fact decides whatever the exception type
    written = http_errors.ExchangeFacts(connected=True, written=True)
    assert http_errors.transport_failure(handshake, written, "POST", "/x").code == "reply_lost"
    assert (
        http_errors.transport_failure(reading, http_errors.ExchangeFacts(), "POST", "/x").code
        == "tls_verification_failed"
    )


# -- binding to the certificate the provider scope was computed from ------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_bound_certificate_mismatch_is_refused_before_any_byte(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any, method: str
) -> None:
    server = stub_server()
    settings = tls.bind_certificate(make_settings(server.port, ca_path=tls_material.ca_path), "AB:" * 31 + "AB")
    assert settings.bound_certificate == "ab" * 32
    sleeps: list[float] = []
    err = _raises(
        "certificate_changed",
        lambda: _client_for(settings, sleeps).request(method, "/nodes/pve/qemu/9000/clone", {"newid": 201}),
    )
    assert server.connections == 1 and server.requests == []  # the handshake happened, no request line or token arrived
    assert sleeps == []  # not retried, not even a GET
    assert err.__cause__ is None and err.__context__ is None
    assert SECRET not in json.dumps(err.to_result())


def test_every_new_connection_is_compared_with_the_bound_certificate(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    # Both certificates verify against the configured CA: only the comparison with the bound leaf tells them apart.
    server = stub_server(
        lambda r: Reply(body=VERSION, headers={"Connection": "close"})
    )  # every request on a new connection
    server.swap_from = 2
    settings = tls.bind_certificate(make_settings(server.port, ca_path=tls_material.ca_path), tls_material.fingerprint)
    client = _client_for(settings)
    assert client.get("/version")["version"] == "9.1.3"
    assert client.observed_fingerprint == tls_material.fingerprint
    _raises("certificate_changed", lambda: client.post("/nodes/pve/qemu/9000/clone", newid=201))
    assert server.connections == 2 and [r.path for r in server.requests] == ["/api2/json/version"]
    # the same server through a client bound to nothing (or to the new leaf) is accepted: the CA verifies both
    unbound = _client_for(make_settings(server.port, ca_path=tls_material.ca_path))
    assert (
        unbound.get("/version")["version"] == "9.1.3" and unbound.observed_fingerprint == tls_material.alt_fingerprint
    )


def test_bound_client_reuses_its_verified_connection(
    stub_server: t.Any, make_settings: t.Any, tls_material: t.Any
) -> None:
    server = stub_server()
    client = _client_for(
        tls.bind_certificate(make_settings(server.port, ca_path=tls_material.ca_path), tls_material.fingerprint)
    )
    assert [client.get("/version")["release"] for _attempt in range(3)] == ["9.1"] * 3
    assert server.connections == 1 and len(server.requests) == 3


def test_a_pin_and_its_binding_agree(stub_server: t.Any, make_settings: t.Any, tls_material: t.Any) -> None:
    server = stub_server()
    settings = make_settings(server.port, fingerprint=tls_material.fingerprint)
    bound = tls.bind_certificate(settings, tls.certificate_fingerprint(settings))  # with a pin: the pin, no contact
    assert _client_for(bound).get("/version")["version"] == "9.1.3"


@pytest.mark.parametrize(
    "message, lock",
    [("VM is locked (backup)", "backup"), ("CT is locked (snapshot)", "snapshot"), ("CT is locked (create)", "create")],
)
def test_a_locked_guest_is_a_pre_check_refusal_for_vms_and_containers(message: str, lock: str) -> None:
    # pve-container's check_lock names its guest type ("CT is locked"): the same refusal before any effect as qemu-server's.
    err = map_http_error("POST", "/nodes/pve/lxc/320/status/start", 500, "", {"data": None, "message": message + "\n"})
    assert err.code == "locked" and err.details["lock"] == lock and err.details["precheck"] is True
