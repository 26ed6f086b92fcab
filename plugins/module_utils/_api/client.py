# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one Proxmox VE HTTP client of the collection.

Design choice: the client talks to the API through ``requests`` directly, with a thin
proxmoxer-compatible path builder (``client.api.nodes("pve").qemu(100).config.get()``) on top,
and builds the token ``Authorization`` header itself (one line; proxmoxer is not a dependency:
docs/development.md). proxmoxer's own session cannot give the control this collection needs: its ticket login posts
through the module-level ``requests.post`` (outside any pinned adapter and with the
environment's CA bundle), it keeps ``trust_env`` on, it reads whole bodies without a bound, it
cannot pin a certificate during the handshake, and it cannot tell "nothing was sent" from
"sent, reply lost". So this package owns (this file: the request path, ``ProxmoxClient``; ``settings.py``: the
connection settings and their validation; ``tls.py``: verification, pinning, the recording adapter, certificate
binding; ``http_errors.py``: HTTP and transport failures into fixed codes; ``libraries.py``: requests/urllib3):

- TLS: verified unless ``validate_certs`` is explicitly false; ``session.trust_env`` is off and
  ``verify=`` is passed per request (REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE never override
  ``ca_path``); an optional SHA-256 pin is checked by urllib3 (``assert_fingerprint``) right
  after the handshake, before any request byte (so before any credential) is written. A pin
  replaces the CA chain check (the usual self-signed PVE certificate). No request (so no token, no
  password) is ever sent over TLS that neither a CA nor a pin verifies (``tls_unverified``), except GETs
  with an API token under the explicit ``unverified_tls_read_only`` opt-in (``tls_refusal``); no
  provider scope is computed from an unverified certificate (``provider_scope_id``). The trust anchor, in order:
  the pin, else ``ca_path``, else the operating system's trust store (``truststore``, as pip
  uses it; without that package, OpenSSL's default paths), never certifi's bundle. A client bound to a certificate
  (``bound_certificate``: the one an operation's provider scope was computed from) compares the leaf of every new
  connection with it right after the handshake, before any byte is written (``certificate_changed``).
- "not sent" by fact, not by exception type: the adapter's connections record, per request, whether a new
  connection was made and which leaf it presented, and whether any byte of the request was written. Only a failure
  before the first byte is "not sent" (``transport_lost``, ``tls_verification_failed``, ``certificate_changed``);
  any failure after it (a TLS error or reset while reading the reply, a timeout, a reply over the bound, an
  undecodable reply) leaves the outcome unknown (``reply_lost``, ``response_too_large``, ``unexpected_response``).
- proxies: none. A proxy the environment configures for the API's URL (``https_proxy``/``all_proxy``
  without a matching ``no_proxy``) is refused (``proxy_not_supported``), not silently bypassed.
- bounded, streamed responses (``max_response_bytes``) and a per-request timeout;
- no retry of any mutation; bounded retries with backoff for GETs on connection errors and 5xx;
- typed errors with fixed codes (``_core/errors.py``); no raw provider body, no secret in any error.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import hashlib
import json
import time
import typing as t
import warnings
from urllib.parse import quote

from .._core.errors import ConfigurationError, ProviderError
from .._core.protocols import ApiVerbs
from .._core.redaction import redact
from .http_errors import REPLY_LOST_TEXT, ExchangeFacts, map_http_error, provider_error, transport_failure
from .libraries import HAS_REQUESTS, requests, urllib3
from .settings import ConnectionSettings, system_trust_context
from .tls import PinnedTLSAdapter, provider_scope_id, tls_refusal

GET_ATTEMPTS = 3
GET_BACKOFF = (0.2, 0.6)
MUTATING_METHODS = frozenset({"POST", "PUT", "DELETE"})
_CHUNK = 64 * 1024


RequestLog = t.Callable[[str, str, t.Mapping[str, t.Any], t.Optional[int]], None]


class _Resource:
    """proxmoxer-style path builder: ``client.api.nodes("pve").qemu(100).config.get()``."""

    def __init__(self, client: ProxmoxClient, path: str = "") -> None:
        self._client = client
        self._path = path

    def __getattr__(self, name: str) -> _Resource:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Resource(self._client, f"{self._path}/{name}")

    def __call__(self, *segments: t.Any) -> _Resource:
        path = self._path
        for segment in segments:
            path = f"{path}/{segment}"
        return _Resource(self._client, path)

    def get(self, **params: t.Any) -> t.Any:
        return self._client.get(self._path, **params)

    def post(self, **params: t.Any) -> t.Any:
        return self._client.post(self._path, **params)

    def put(self, **params: t.Any) -> t.Any:
        return self._client.put(self._path, **params)

    def delete(self, **params: t.Any) -> t.Any:
        return self._client.delete(self._path, **params)


class ProxmoxClient(ApiVerbs):
    """Typed, bounded access to the PVE API.

    ``get``/``post``/``put``/``delete`` (path positional-only, so ``path=`` can be an API parameter) return the
    response's ``data``; ``request`` returns the whole
    JSON envelope (``data``, ``total`` ...). ``request_log`` (optional) is called once per attempt with
    ``(method, path, redacted params, HTTP status or None)``.
    """

    def __init__(
        self,
        settings: ConnectionSettings,
        *,
        request_log: RequestLog | None = None,
        adapter: t.Any = None,
        sleep: t.Callable[[float], None] = time.sleep,
        clock: t.Callable[[], float] = time.monotonic,
    ) -> None:
        if not HAS_REQUESTS:
            raise ConfigurationError("The Python library requests is required.")
        self.settings = settings
        self._request_log = request_log
        self._sleep = sleep
        self._clock = clock
        self._session = requests.Session()
        self._session.trust_env = False
        self._session.verify = self._verify
        self._session.headers["Accept"] = "application/json"
        system_store = settings.validate_certs and not settings.fingerprint and not settings.ca_path
        self._adapter = (
            adapter
            if adapter is not None
            else PinnedTLSAdapter(
                settings.fingerprint, settings.bound_certificate, system_trust_context() if system_store else None
            )
        )
        self._session.mount("https://", self._adapter)
        self._ticket: tuple[str, str] | None = None
        self.observed_fingerprint: str | None = None
        self.api = _Resource(self)

    # -- lifecycle ---------------------------------------------------------------------------------
    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ProxmoxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def provider_scope_id(self) -> str | None:
        return provider_scope_id(self.settings, self.observed_fingerprint)

    @property
    def _verify(self) -> bool | str:
        if self.settings.fingerprint:
            return False  # the pin is the trust anchor, checked by urllib3 during the handshake
        if not self.settings.validate_certs:
            return False
        return self.settings.ca_path or True

    # -- public verbs (get/post/put/delete: ApiVerbs) ---------------------------------------------------
    def request(self, method: str, path: str, params: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
        """Send one request (GETs retried on connection errors and 5xx); return the JSON envelope."""
        method = method.upper()
        params = {k: v for k, v in (params or {}).items() if v is not None}
        if not path.startswith("/"):
            path = "/" + path
        refusal = tls_refusal(self.settings, method, path)
        if refusal is not None:  # before the login and the request: nothing is sent, nothing is logged
            raise refusal
        attempts = GET_ATTEMPTS if method == "GET" else 1
        for attempt in range(attempts):
            try:
                return self._send_once(method, path, params)
            except ProviderError as err:
                retryable = err.code in ("transport_lost", "reply_lost") or (
                    err.code == "server_error" and err.details.get("status") != 501
                )
                if method != "GET" or not retryable or attempt + 1 >= attempts:
                    raise
                self._sleep(GET_BACKOFF[min(attempt, len(GET_BACKOFF) - 1)])
        raise AssertionError("unreachable")  # pragma: no cover

    # -- internals -------------------------------------------------------------------------------------------
    def _log(self, method: str, path: str, params: t.Mapping[str, t.Any], status: int | None) -> None:
        if self._request_log is not None:
            self._request_log(method, path, redact(params), status)

    def _auth(self, method: str) -> tuple[t.Any, dict[str, str], dict[str, str]]:
        settings = self.settings
        if settings.uses_token:
            return (
                None,
                {"Authorization": "PVEAPIToken=%s!%s=%s" % (settings.user, settings.token_name, settings.token_secret)},
                {},
            )
        if self._ticket is None:
            self._login()
        if self._ticket is None:  # pragma: no cover - _login sets it or raises
            raise AssertionError("no ticket after login")
        ticket, csrf = self._ticket
        headers = {"CSRFPreventionToken": csrf} if method != "GET" else {}
        return None, headers, {"PVEAuthCookie": ticket}

    def _login(self) -> None:
        params = {"username": self.settings.user, "password": self.settings.password}
        data = self._exchange("POST", "/access/ticket", params, auth=None, headers={}, cookies={}).get("data")
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("ticket"), str)
            or not isinstance(data.get("CSRFPreventionToken"), str)
        ):
            raise provider_error(
                "unexpected_response",
                "Proxmox answered the login with an unexpected body.",
                method="POST",
                path="/access/ticket",
            )
        if data.get("NeedTFA"):
            raise provider_error(
                "auth_failed",
                "The user requires a second factor; use an API token.",
                method="POST",
                path="/access/ticket",
            )
        self._ticket = (data["ticket"], data["CSRFPreventionToken"])

    def _send_once(self, method: str, path: str, params: dict[str, t.Any]) -> dict[str, t.Any]:
        auth, headers, cookies = self._auth(method)
        return self._exchange(method, path, params, auth=auth, headers=headers, cookies=cookies)

    def _exchange(
        self,
        method: str,
        path: str,
        params: dict[str, t.Any],
        *,
        auth: t.Any,
        headers: dict[str, str],
        cookies: dict[str, str],
    ) -> dict[str, t.Any]:
        refusal = tls_refusal(self.settings, method, path)  # every exchange, the login included
        if refusal is not None:
            raise refusal
        url = self.settings.base_url + quote(path, safe="/:@!=,._~-")
        encoded = {k: _encode_value(v) for k, v in params.items()}
        query, form = (encoded, None) if method in ("GET", "DELETE") else (None, encoded)
        timeout = self.settings.timeout
        started = self._clock()
        # Errors are built inside the except blocks but raised outside them, so no exception from
        # requests/urllib3 (whose ``request`` carries the Authorization header) stays chained as context.
        failure: ProviderError | None = None
        response: t.Any = None
        begin = getattr(self._adapter, "begin", None)
        facts: ExchangeFacts | None = begin() if begin is not None else None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                response = self._session.request(
                    method,
                    url,
                    params=query,
                    data=form,
                    auth=auth,
                    headers=headers,
                    cookies=cookies,
                    verify=self._verify,
                    timeout=(timeout, timeout),
                    stream=True,
                    allow_redirects=False,
                )
        except requests.exceptions.RequestException as exc:
            failure = transport_failure(exc, facts, method, path)
        if failure is not None:
            self._log(method, path, params, None)
            raise failure
        try:
            self._observe_certificate(response, facts)
            body = self._read_bounded(response, method, path, started)
        finally:
            response.close()
            self._log(method, path, params, response.status_code)
        parsed: t.Any = None
        if body:
            try:
                parsed = json.loads(body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                parsed = None
        status = response.status_code
        if status >= 300:
            raise map_http_error(method, path, status, response.reason or "", parsed)
        if not isinstance(parsed, dict) or "data" not in parsed:
            raise provider_error(
                "unexpected_response",
                "Proxmox answered with a body the collection does not understand.",
                method=method,
                path=path,
                status=status,
            )
        return parsed

    def _read_bounded(self, response: t.Any, method: str, path: str, started: float) -> bytes:
        limit = self.settings.max_response_bytes
        declared = response.headers.get("Content-Length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise provider_error(
                "response_too_large",
                "The response exceeded the configured size bound.",
                method=method,
                path=path,
                status=response.status_code,
                limit=limit,
            )
        chunks: list[bytes] = []
        size = 0
        lost = False
        try:
            for chunk in response.raw.stream(_CHUNK, decode_content=True):
                size += len(chunk)
                if size > limit:
                    raise provider_error(
                        "response_too_large",
                        "The response exceeded the configured size bound.",
                        method=method,
                        path=path,
                        status=response.status_code,
                        limit=limit,
                    )
                chunks.append(chunk)
                if self._clock() - started > self.settings.timeout:
                    raise provider_error(
                        "reply_lost",
                        "The reply did not arrive within the timeout; the outcome is unknown.",
                        method=method,
                        path=path,
                        status=response.status_code,
                    )
        except ProviderError:
            raise
        except (urllib3.exceptions.HTTPError, OSError, requests.exceptions.RequestException):
            lost = True
        if lost:
            raise provider_error("reply_lost", REPLY_LOST_TEXT, method=method, path=path, status=response.status_code)
        return b"".join(chunks)

    def _observe_certificate(self, response: t.Any, facts: ExchangeFacts | None) -> None:
        if self.observed_fingerprint is not None:
            return
        if facts is not None:
            self.observed_fingerprint = (
                facts.leaf_sha256
            )  # None on a reused connection (its leaf was seen when it was made)
            return
        try:  # a transport that records nothing (tests mount their own adapter)
            sock = response.raw.connection.sock
            der = sock.getpeercert(binary_form=True)
        except Exception:  # pylint: disable=broad-exception-caught
            return
        if der:
            self.observed_fingerprint = hashlib.sha256(der).hexdigest()


def _encode_value(value: t.Any) -> t.Any:
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (list, tuple)):
        return [_encode_value(v) for v in value]
    return value
