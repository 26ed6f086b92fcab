# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The HTTPS server: PVE request pipeline (auth, schema, permissions, faults, handler) + admin API.

Web stack: the standard library (``http.server.ThreadingHTTPServer`` + ``ssl``). It starts in
milliseconds, needs no dependency, gives full control over the socket (``drop_reply`` closes it
without a reply) and over status lines (PVE puts its message in the reason phrase). The TLS
handshake runs in the per-connection thread, never in the accept loop.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import secrets
import socket
import ssl
import threading
import time
import typing as t
import urllib.parse

from . import guestlink
from .admin import AdminApi
from .api.core import ApiError, Call, Sim, param_error, perm_error
from .api.permissions import check_permissions
from .certs import make_certs
from .clock import Clock
from .faults import DEFAULT_OVERSIZED_BYTES, ERROR_AFTER_EFFECT_MESSAGE, FaultSet, FaultSpecError
from .requestlog import RequestLog, redact
from .routes import HANDLERS
from .schema import NoSuchMethod, NoSuchPath, Schema, errors_to_dict, validate_params
from .state import State
from .storagelock import StorageLocks
from .timings import apply_timings, load_timings_file
from .uploads import UPLOAD_PATH_RE, UploadReceiver

API_PREFIX = "/api2/json"
ADMIN_PREFIX = "/_pvesim"
ADMIN_HEADER = "X-Pvesim-Admin"
NO_AUTH = {
    ("GET", "/access/domains"),
    ("GET", "/access/ticket"),
    ("POST", "/access/ticket"),
    ("POST", "/access/vncticket"),
}
MAX_BODY = 512 * 1024  # pve-http-server's $limit_max_post: a larger body is refused with 501 "for data too large"
MAX_DRAIN = 256 * 1024 * 1024  # an oversized body up to this is read and dropped, so the client reads the refusal


class DropReply(Exception):
    """Close the connection without replying (fault ``drop_reply``)."""

    log_status = "dropped"


class DropRequest(DropReply):
    """Close the connection without replying before the request runs (fault ``drop_request``): nothing happened."""

    log_status = "request_dropped"


class AbortTLSReply(DropReply):
    """The request ran; break the TLS stream instead of replying (fault ``tls_abort_reply``)."""

    log_status = "tls_aborted"


# A TLS 1.2/1.3 application-data record of random bytes: written under the TLS layer, no client can decrypt it.
TLS_GARBAGE_HEADER = b"\x17\x03\x03\x00\x40"


class Reply:
    """What goes back on the wire."""

    def __init__(
        self,
        status: int,
        body: t.Any,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
        log_status: str | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.reason = reason
        self.headers = headers or {}
        self.raw = raw
        self.log_status = log_status  # the request log's status when it is not the HTTP status (``oversized_reply``)


def error_reply(err: ApiError) -> Reply:
    body: dict[str, t.Any] = {"data": None, "message": err.message}
    if err.errors:
        body["errors"] = err.errors
    return Reply(err.status, body, reason=err.message.split("\n", 1)[0])


class App(AdminApi, UploadReceiver):
    """The simulator application (independent of the socket layer)."""

    def __init__(self, schema: Schema, seed: str = "demo", speed: float = 1.0, admin_token: str | None = None) -> None:
        self.schema = schema
        self.clock = Clock(speed)
        self.faults = FaultSet()
        self.sim = Sim(State(seed), self.clock, self.faults)
        self.log = RequestLog()
        self.admin_token = admin_token or secrets.token_hex(24)
        self.auth_delay = 3.0  # PVE delays every 401 by 3 s (scaled by the clock speed)
        self.start_durations: dict[str, float] = dict(self.sim.durations)
        self.start_guest_timing: dict[str, float] = dict(self.sim.guest_timing)
        self.start_storage_lock = True

    # ---------------------------------------------------------------------------------------
    def handle(
        self,
        method: str,
        raw_path: str,
        headers: t.Mapping[str, str],
        body: bytes,
        form: dict[str, t.Any] | None = None,
        refusal: ApiError | None = None,
    ) -> Reply:
        """One request. An upload arrives as ``form`` (its body already streamed to a file by ``handle_upload``);
        ``refusal`` answers an authenticated request with an error before any handler runs."""
        url = urllib.parse.urlsplit(raw_path)
        path = urllib.parse.unquote(url.path)
        if path.startswith(ADMIN_PREFIX + "/") or path == ADMIN_PREFIX:
            return self.handle_admin(method, path[len(ADMIN_PREFIX) :], headers, body)
        if not path.startswith("/api2/"):
            return Reply(501, None, reason="no such uri", raw=b"no such uri")
        if not path.startswith(API_PREFIX + "/") and path != API_PREFIX:
            m = re.match(r"/api2/([a-z][a-z0-9]+)", path)
            fmt = m.group(1) if m else ""
            return Reply(501, None, reason=f"no formatter for uri {path}, {fmt}", raw=b"")
        rel = Schema.relative_path(path)
        entry: dict[str, t.Any] = {
            "time": time.time(),
            "method": method,
            "path": rel,
            "params": {},
            "status": None,
            "token": None,
            "schema_errors": {},
            "endpoint": None,
            "implemented": None,
        }
        try:
            reply = self._handle_api(method, rel, url.query, headers, body, entry, form, refusal)
        except DropReply as drop:
            entry["status"] = drop.log_status
            self.log.add(entry)
            raise
        entry["status"] = reply.log_status or reply.status
        self.log.add(entry)
        return reply

    def _parse_params(self, method: str, query: str, headers: t.Mapping[str, str], body: bytes) -> dict[str, t.Any]:
        params: dict[str, t.Any] = {}

        def add(k: str, v: t.Any) -> None:
            if k in params:
                prev = params[k]
                params[k] = (prev if isinstance(prev, list) else [prev]) + [v]
            else:
                params[k] = v

        for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True):
            add(k, v)
        if method in ("POST", "PUT") and body:
            ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype == "application/json":
                try:
                    data = json.loads(body)
                except ValueError as exc:
                    raise ApiError(400, f"unable to parse JSON body - {exc}") from exc
                if not isinstance(data, dict):
                    raise ApiError(400, "JSON body must be an object")
                for k, v in data.items():
                    params[k] = v
            else:
                for k, v in urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
                    add(k, v)
        return params

    def _authenticate(
        self, method: str, rel: str, headers: t.Mapping[str, str], upload: bool = False
    ) -> tuple[str | None, bool]:
        """Returns (subject, is_token); raises ApiError(401)."""
        st = self.sim.state
        cookie = headers.get("Cookie") or ""
        auth = headers.get("Authorization") or ""
        ticket = None
        m = re.search(r"(?:^|;\s*)PVEAuthCookie=([^;\s]+)", cookie) or re.match(r"PVEAuthCookie=(\S+)", auth)
        if m:
            ticket = urllib.parse.unquote(m.group(1))
        api_token = None
        if not ticket:
            m = re.match(r"PVEAPIToken=(.+)", auth)
            if m:
                api_token = m.group(1).strip()
        if (method, rel) in NO_AUTH:
            return None, False
        with st.lock:
            if api_token:
                tokenid, sep, secret = api_token.rpartition("=")
                if not sep:
                    tokenid, sep, secret = api_token.rpartition(":")
                token = st.tokens.get(tokenid)
                user = st.users.get(tokenid.split("!")[0])
                ok = (
                    token is not None
                    and user is not None
                    and user.enable
                    and secrets.compare_digest(token.secret, secret)
                    and not (token.expire and token.expire < time.time())
                    and not (user.expire and user.expire < time.time())
                )
                if not ok:
                    raise ApiError(401, "Authentication failed!")
                return tokenid, True
            if not ticket:
                raise ApiError(401, "No ticket")
            info = st.tickets.get(ticket)
            if info is None or info[1] < time.time():
                raise ApiError(401, "Authentication failed!")
            if method != "GET" and not upload:  # PVE skips the CSRF check for uploads (native HTML forms)
                csrf = headers.get("CSRFPreventionToken")
                if not csrf or st.csrf.get(ticket) != csrf:
                    raise ApiError(401, "Permission denied - invalid csrf token")
            return info[0], False

    def _handle_api(
        self,
        method: str,
        rel: str,
        query: str,
        headers: t.Mapping[str, str],
        body: bytes,
        entry: dict[str, t.Any],
        form: dict[str, t.Any] | None = None,
        refusal: ApiError | None = None,
    ) -> Reply:
        sim = self.sim
        try:
            params = form if form is not None else self._parse_params(method, query, headers, body)
        except ApiError as err:
            return error_reply(err)
        entry["params"] = redact(params)
        try:
            subject, is_token = self._authenticate(method, rel, headers, upload=form is not None)
        except ApiError as err:
            if self.auth_delay:
                time.sleep(self.clock.real_seconds(self.auth_delay))
            entry["token"] = None
            return Reply(401, None, reason=err.message.strip(), raw=b"")
        entry["token"] = subject
        if refusal is not None:
            return error_reply(refusal)
        try:
            ep, uri_params = self.schema.match(method, rel)
        except (NoSuchPath, NoSuchMethod):
            entry["implemented"] = False
            return error_reply(ApiError(501, f"Method '{method} {rel}' not implemented"))
        entry["endpoint"] = f"{method} {ep.path}"
        handler = HANDLERS.get((method, ep.path))
        entry["implemented"] = handler is not None
        merged = dict(params)
        dup: dict[str, str] = {}
        for k, v in uri_params.items():
            if k in merged and merged[k] != v:
                dup[k] = "duplicate parameter (already defined in URI) with conflicting values!"
            merged[k] = v
        schema_errors = errors_to_dict(validate_params(ep, merged))
        entry["schema_errors"] = schema_errors
        if handler is None:
            return error_reply(ApiError(501, f"Method '{method} {rel}' not implemented"))
        if subject is None:
            subject = "nobody@pve"
        call: Call | None = None
        try:
            if dup:
                raise param_error(dup)
            if is_token and not ep.allowtoken:
                raise perm_error(f"URI '{rel}' not available with API token, need proper ticket.\n")
            with sim.state.lock:
                check_permissions(sim, ep.permissions, subject, merged)
            if schema_errors:
                raise param_error(schema_errors)
            fired = self.faults.match(method, rel)
            call = Call(method, rel, ep.path, merged, subject, fired)
            if any(f.action == "drop_request" for f in fired):
                raise DropRequest()
            self._pre_faults(call)
            with sim.state.lock:
                data = handler(sim, call)
            wait = call.extra.pop("wait_task", None)
            if wait is not None:
                data = wait()
        except ApiError as err:
            if call is not None and any(f.action == "drop_reply" for f in call.faults):
                raise DropReply() from err
            if call is not None and any(f.action == "tls_abort_reply" for f in call.faults):
                raise AbortTLSReply() from err
            return error_reply(err)
        if any(f.action == "drop_reply" for f in call.faults):
            raise DropReply()
        if any(f.action == "tls_abort_reply" for f in call.faults):
            raise AbortTLSReply()
        for f in call.faults:
            if f.action == "error_after_effect":  # the effect happened above; the reply says it failed
                return error_reply(
                    ApiError(int(f.params.get("status", 500)), str(f.params.get("message", ERROR_AFTER_EFFECT_MESSAGE)))
                )
        out: dict[str, t.Any] = {"data": data}
        if call.extra.get("total"):
            out["total"] = call.extra["total"]
        oversized = [f for f in call.faults if f.action == "oversized_reply"]
        if oversized:
            # the reply as Proxmox would send it, padded past the bound (the client reads none of it)
            out["pad"] = "x" * int(oversized[0].params.get("size", DEFAULT_OVERSIZED_BYTES))
            return Reply(200, out, log_status="oversized_reply")
        return Reply(200, out)

    def _pre_faults(self, call: Call) -> None:
        vmid = call.params.get("vmid")
        for f in call.faults:
            if f.action == "delay":
                time.sleep(float(f.params.get("seconds", 1.0)))
        for f in call.faults:
            if f.action == "http_error":
                raise ApiError(int(f.params.get("status", 500)), str(f.params.get("message", "simulated error")))
            if f.action == "lock_timeout":
                lock_id = call.params.get("newid", vmid) if call.template.endswith("/clone") else vmid
                raise ApiError(500, f"can't lock file '/var/lock/qemu-server/lock-{lock_id}.conf' - got timeout")
            if f.action == "vm_locked":
                raise ApiError(500, f"VM is locked ({f.params.get('lock', 'backup')})")
            if f.action == "checksum_mismatch" and (call.method, call.template) not in (
                ("POST", "/nodes/{node}/qemu/{vmid}/config"),
                ("PUT", "/nodes/{node}/qemu/{vmid}/resize"),
            ):
                raise ApiError(500, "checksum mismatch (file change by other user?)")
            if (
                f.action in ("dhcp_never", "cloudinit_error")
                and vmid is not None
                and "/agent/" not in call.template
                and not call.template.endswith("/cloudinit/dump")
                and not call.template.endswith("/cloudinit")
            ):
                knobs = self.sim.guest_knobs.setdefault(int(vmid), {})
                knobs[f.action] = True
                with self.sim.state.lock:
                    vm = self.sim.state.vms.get(int(vmid))
                    if vm is not None and vm.guest is not None:
                        guestlink.apply_knobs(vm.guest, {f.action: True})

    # ---------------------------------------------------------------------------------------
    # admin API
    def handle_admin(self, method: str, path: str, headers: t.Mapping[str, str], body: bytes) -> Reply:
        given = headers.get(ADMIN_HEADER) or ""
        if not secrets.compare_digest(given, self.admin_token):
            return Reply(403, {"data": None, "message": "admin token required\n"}, reason="admin token required")
        try:
            data = json.loads(body) if body else {}
        except ValueError:
            return Reply(400, {"data": None, "message": "invalid JSON body\n"}, reason="invalid JSON body")
        try:
            result = self._admin(method, path.rstrip("/") or "/", data if isinstance(data, dict) else {})
        except (ValueError, KeyError, TypeError, FaultSpecError) as exc:
            return Reply(400, {"data": None, "message": f"{exc}\n"}, reason="bad request")
        except LookupError as exc:
            return Reply(404, {"data": None, "message": f"{exc}\n"}, reason="not found")
        if result is NotImplemented:
            return Reply(404, {"data": None, "message": f"no admin endpoint {method} {path}\n"}, reason="not found")
        return Reply(200, {"data": result})

    def reset(self, seed: str = "demo") -> None:
        sim = self.sim
        sim.stop_event.set()
        old = sim.state
        new_state = State(seed)
        new_state.apply_seed(seed, secrets_from=old)
        with old.lock:
            sim.state = new_state
        sim.tasks.clear()
        sim.guest_knobs.clear()
        # back to the time model given at start (--timings), so run-time changes do not leak
        sim.durations = dict(self.start_durations)
        sim.guest_timing = dict(self.start_guest_timing)
        if getattr(sim, "guest_backend", None) is not None:
            sim.guest_backend.reset()  # real guests: stop every QEMU, drop every VM disk
        if getattr(sim, "container_backend", None) is not None:
            sim.container_backend.reset()  # real containers: stop and remove every one
        sim.stop_event = threading.Event()
        # fresh storage locks and statistics, on or off as given at start (--storage-lock)
        sim.storage_locks = StorageLocks(sim.clock, sim.stop_event, sim.durations)
        sim.storage_locks.enabled = self.start_storage_lock
        self.faults.clear()
        self.log.clear()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    disable_nagle_algorithm = True
    timeout = 60

    def log_message(self, format: str, *args: t.Any) -> None:  # pylint: disable=redefined-builtin
        del format, args

    def _dispatch(self) -> None:
        app: App = self.server.app  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        upload = self.command == "POST" and UPLOAD_PATH_RE.fullmatch(
            Schema.relative_path(urllib.parse.unquote(urllib.parse.urlsplit(self.path).path))
        )
        try:
            if upload:
                consumed = [0]

                def read(size: int) -> bytes:
                    data = self.rfile.read(size)
                    consumed[0] += len(data)
                    return data

                reply, complete = app.handle_upload(self.path, self.headers, read, length)
                self.close_connection = True  # PVE ends the connection after an upload
                if not complete:
                    self._drain(length - consumed[0])
            elif length > MAX_BODY:
                self._drain(length)
                reply = error_reply(ApiError(501, "for data too large"))
            else:
                body = self.rfile.read(length) if length else b""
                reply = app.handle(self.command, self.path, self.headers, body)  # type: ignore[arg-type]
        except AbortTLSReply:
            self._abort_tls()
            return
        except DropReply:
            self.close_connection = True
            try:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            except OSError:
                pass
            try:
                self.connection.close()
            except OSError:
                pass
            return
        except Exception as exc:  # pylint: disable=broad-except
            reply = error_reply(ApiError(500, f"internal simulator error: {exc.__class__.__name__}: {exc}"))
        if reply.raw is not None:
            payload = reply.raw
            ctype = "text/plain;charset=UTF-8"
        else:
            payload = json.dumps(reply.body, separators=(",", ":")).encode()
            ctype = "application/json;charset=UTF-8"
        reason = reply.reason
        if reason is not None:
            reason = reason.split("\n", 1)[0].replace("\r", " ")
            # http.server writes the status line as Latin-1: a UTF-8 message (GLib's quotes) goes out as its bytes
            reason = reason.encode("utf-8", errors="replace").decode("latin-1")
        self.send_response(reply.status, reason)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        for k, v in reply.headers.items():
            self.send_header(k, v)
        if reply.status >= 400 or self.close_connection:  # an error, or an upload: PVE says it closes
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _drain(self, remaining: int) -> None:
        """Read and drop a body the reply refuses, so the client, still sending it, reads the reply instead of a
        broken stream (PVE answers first and closes; over loopback the simulator can afford to read)."""
        self.close_connection = True
        if remaining > MAX_DRAIN:
            return
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 1 << 16))
            if not chunk:
                return
            remaining -= len(chunk)

    def _abort_tls(self) -> None:
        """Break the TLS stream (fault ``tls_abort_reply``): a record written under the TLS layer, which the client
        cannot decrypt while it waits for the reply, then an orderly TCP close (no reset that could arrive first)."""
        self.close_connection = True
        try:
            os.write(self.connection.fileno(), TLS_GARBAGE_HEADER + os.urandom(64))
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch


class _TLSServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self, addr: tuple[str, int], ctx: ssl.SSLContext, app: App, alt_ctx: ssl.SSLContext | None = None
    ) -> None:
        super().__init__(addr, _Handler)
        self.ctx = ctx
        self.alt_ctx = alt_ctx or ctx  # the alternate certificate, presented under the ``cert_swap`` fault
        self.app = app

    def finish_request(self, request: t.Any, client_address: t.Any) -> None:
        ctx = self.alt_ctx if self.app.faults.swap_certificate() else self.ctx
        try:
            tls = ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request: t.Any, client_address: t.Any) -> None:
        del request, client_address


class PvesimServer:
    """Start/stop wrapper used by ``__main__`` and tests."""

    def __init__(
        self,
        state_dir: str,
        port: int = 0,
        seed: str = "demo",
        speed: float = 1.0,
        schema_path: str | None = None,
        faults_file: str | None = None,
        guests: str = "simulated",
        guest_image: str | None = None,
        guest_accel: str = "auto",
        timings_file: str | None = None,
        storage_lock: bool = True,
        containers: str = "simulated",
        container_rootfs: str | None = None,
        node_ssh_authorized_keys: str | None = None,
    ) -> None:
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        self.app = App(Schema.load(schema_path), seed=seed, speed=speed)
        self.app.start_storage_lock = self.app.sim.storage_locks.enabled = storage_lock
        self.guest_backend: t.Any = None
        if guests == "real":
            # real QEMU guests (pvesim.realguest, docs/real-guest.md); fails here when the image or QEMU is missing
            from .realguest import RealGuestBackend  # pylint: disable=import-outside-toplevel

            if not guest_image:
                raise ValueError("--guests real needs --guest-image DIR (built by tools/guest-image/build.sh)")
            self.guest_backend = RealGuestBackend(guest_image, self.state_dir, accel=guest_accel)
        elif guests == "container":
            # VM guests as LXC containers whose agent commands really run (pvesim.containerguest, docs/simulator-guest.md)
            from .containerguest import ContainerGuestBackend  # pylint: disable=import-outside-toplevel

            if not container_rootfs:
                raise ValueError(
                    "--guests container needs --container-rootfs DIR (built by tools/container-rootfs/build.sh)"
                )
            self.guest_backend = ContainerGuestBackend(container_rootfs, self.state_dir)
        elif guests != "simulated":
            raise ValueError(f"unknown guest backend {guests!r} (simulated, real or container)")
        self.guests_kind = guests
        self.app.sim.guest_backend = self.guest_backend
        self.container_backend: t.Any = None
        if containers == "real":
            # real LXC containers (pvesim.realcontainer, docs/containers.md); fails here when the rootfs or lxc is missing
            from .realcontainer import RealContainerBackend  # pylint: disable=import-outside-toplevel

            if not container_rootfs:
                raise ValueError(
                    "--containers real needs --container-rootfs DIR (built by tools/container-rootfs/build.sh)"
                )
            self.container_backend = RealContainerBackend(container_rootfs, self.state_dir)
        elif containers != "simulated":
            raise ValueError(f"unknown container backend {containers!r} (simulated or real)")
        self.app.sim.container_backend = self.container_backend
        self.node_ssh: t.Any = None
        if node_ssh_authorized_keys:
            # each node's sshd with pct (pvesim.nodessh, docs/containers.md "The node SSH route (pct exec)")
            from .nodessh import NodeSshEndpoints  # pylint: disable=import-outside-toplevel

            self.node_ssh = NodeSshEndpoints(
                self.state_dir, sorted(self.app.sim.state.members), node_ssh_authorized_keys
            )
        if timings_file:
            apply_timings(self.app.sim, load_timings_file(timings_file))
            self.app.start_durations = dict(self.app.sim.durations)
            self.app.start_guest_timing = dict(self.app.sim.guest_timing)
        if faults_file:
            from .faults import load_fault_file  # pylint: disable=import-outside-toplevel

            for spec in load_fault_file(faults_file):
                self.app.faults.add(spec)
        self.certs = make_certs(self.state_dir, self.app.sim.state.node)
        contexts = []
        for prefix in ("", "alt_"):
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(self.certs[prefix + "cert_file"], self.certs[prefix + "key_file"])
            contexts.append(ctx)
        self.httpd = _TLSServer(("127.0.0.1", port), contexts[0], self.app, alt_ctx=contexts[1])
        self.port = self.httpd.server_address[1]
        self.thread: threading.Thread | None = None

    def connection_info(self) -> dict[str, t.Any]:
        st = self.app.sim.state
        tokens = {
            name: {"id": f"vmanyware@pve!{name}", "secret": st.tokens[f"vmanyware@pve!{name}"].secret}
            for name in ("full", "limited")
        }
        return {
            "url": f"https://127.0.0.1:{self.port}/api2/json",
            "host": "127.0.0.1",
            "port": self.port,
            "ca_file": self.certs["ca_file"],
            "fingerprint_sha256": self.certs["fingerprint_sha256"],
            "alt_fingerprint_sha256": self.certs["alt_fingerprint_sha256"],
            "node": st.node,
            "template_vmid": 9000,
            "storage": "local-lvm",
            "bridge": "vmbr0",
            "tokens": tokens,
            "root_password": st.users["root@pam"].password,
            "admin_token": self.app.admin_token,
            "admin_url": f"https://127.0.0.1:{self.port}{ADMIN_PREFIX}",
            "pid": os.getpid(),
            "guests": self.guests_kind,
            **({"guest_accel": self.guest_backend.accel} if self.guest_backend is not None else {}),
            "containers": "real" if self.container_backend is not None else "simulated",
            **({"node_ssh": self.node_ssh.info} if self.node_ssh is not None else {}),
        }

    def write_connection_file(self) -> str:
        path = os.path.join(self.state_dir, "connection.json")
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.connection_info(), fh, indent=2)
        os.replace(tmp, path)
        return path

    def start(self) -> None:
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="pvesim-http", daemon=True
        )
        if self.node_ssh is not None:
            self.node_ssh.start()
            self.app.node_ssh_info = self.node_ssh.info
        self.thread.start()
        self.write_connection_file()

    def stop(self) -> None:
        self.app.sim.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        if self.thread is not None:
            self.thread.join(timeout=5)
        if self.guest_backend is not None:
            self.guest_backend.stop_all()
        if self.container_backend is not None:
            self.container_backend.stop_all()
        if self.node_ssh is not None:
            self.node_ssh.stop_all()
