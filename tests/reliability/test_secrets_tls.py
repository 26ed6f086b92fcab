# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets and TLS.

Canaries: every simulator of the session has random token secrets (uuid4) and a random root password; they are
the canary secrets (pvesim's admin API cannot set a secret, and a fresh random one is a better canary than a
fixed string). The SSH key comment canary is planted in the definition of the runs below.

Rule for the secret: it appears nowhere we write: no process output (also with -vvvv, --check --diff, failures),
no journal file, no ansible log, no result file. Only the simulator's own ``connection.json`` holds it (that is
how tests learn it). Rule for the key comment (a public key is not a secret, but it shows where definition content
flows): it may appear only in (1) the journal's ``definition`` snapshot and (2) the journal's cloudinit stage
``request`` summary (``sshkeys``, what was sent), and in the simulator's own VM config; it must not appear in any
output, log, or result file.

TLS: wrong CA, wrong fingerprint pin, an expired certificate (from a CA the client trusts), and a self-signed
certificate without a pin are refused (``tls_verification_failed``), and the simulator's request log shows that
no request (hence no token) arrived. With ``validate_certs`` false and no pin every request is refused before a
connection exists (``tls_unverified``); under ``unverified_tls_read_only`` only GETs with a token go out (a POST
and any password login are refused in the client).
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import socket
import ssl
import threading
import typing as t
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import rel_support as rs
from test_crash import FAST_GUEST

from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.client import ProxmoxClient
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.tls import certificate_fingerprint
from ansible_collections.vmanyware.proxmox.plugins.module_utils._api.settings import build_settings
from ansible_collections.vmanyware.proxmox.plugins.module_utils._core.errors import VmanywareError

KEY_COMMENT = "canary-key-" + hashlib.sha256(str(id(object())).encode()).hexdigest()[:12]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOK42LaKHQ1bNNIG3KlABIQ77kwljfXjfi9bunMkuYAO " + KEY_COMMENT


def _files(root: Path) -> t.Iterator[Path]:
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            yield path


def scan(roots: t.Sequence[Path], needles: t.Sequence[str]) -> list[str]:
    """Files under ``roots`` (except each simulator's connection.json) that contain any needle."""
    hits = []
    encoded = [n.encode() for n in needles if n]
    for root in roots:
        if not root.exists():
            continue
        for path in _files(root):
            if path.name == "connection.json":
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            if any(needle in data for needle in encoded):
                hits.append(str(path))
    return hits


def _key_locations(journal: Path) -> dict[str, int]:
    """Where the key comment sits inside the journal documents (JSON paths)."""
    import json  # pylint: disable=import-outside-toplevel

    found: dict[str, int] = {}

    def walk(value: t.Any, path: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, path + "." + key if not path.startswith("stages[") or key != "kind" else path)
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, "%s[%d]" % (path, index))
        elif isinstance(value, str) and KEY_COMMENT in value:
            found[path] = found.get(path, 0) + 1

    for path in journal.glob("op-*.json"):
        document = json.loads(path.read_text(encoding="utf-8"))
        for index, stage in enumerate(document["stages"]):
            walk(stage, "stages[%s]" % stage["kind"])
        walk({k: v for k, v in document.items() if k != "stages"}, "")
    return found


def test_secret_and_key_comment_stay_where_they_belong(rel_sim: rs.Simulator, tmp_path: Path) -> None:
    sim = rel_sim
    sim.admin.reset()
    sim.admin.set_guest(201, **FAST_GUEST)
    sim.admin.set_guest(202, **FAST_GUEST)
    book = rs.Playbook(sim, tmp_path / "ok", 201)
    data = rs.definition_data(snapshot=True)
    data["access"]["sshPublicKeys"] = [KEY]
    import yaml  # pylint: disable=import-outside-toplevel

    book.definition.write_text(yaml.safe_dump(data, sort_keys=False, width=100000), encoding="utf-8")
    log = tmp_path / "ansible.log"
    env = {"ANSIBLE_LOG_PATH": str(log)}
    runs = [
        rs.run_killable(book.args(), sim.playbook_env(book.journal, env), cwd=str(book.workdir))
    ]  # review, default verbosity
    assert runs[0].rc == 0 and book.confirm.exists(), runs[0].stdout[-2000:]
    if rs.FULL:
        runs.append(book.apply(extra_args=("--check", "--diff", "-vvvv"), env_extra=env))
    runs.append(book.apply(extra_args=("-vvvv", "--diff"), env_extra=env))
    assert runs[-1].rc == 0, runs[-1].stdout[-3000:]
    # Failing runs, also at -vvvv: a changed plan (plan_changed); in the full run also a default-verbosity re-run,
    # a task error at clone and a crashed run.
    changed = dict(data, resources=dict(data["resources"], cores=4))
    book.definition.write_text(yaml.safe_dump(changed, sort_keys=False, width=100000), encoding="utf-8")
    runs.append(book.apply(extra_args=("-vvvv",), env_extra=env))
    assert runs[-1].rc != 0 and "plan_changed" in runs[-1].stdout
    book.definition.write_text(yaml.safe_dump(data, sort_keys=False, width=100000), encoding="utf-8")
    if rs.FULL:
        runs.append(book.apply(env_extra=env))  # re-run at default verbosity
        failing = rs.Playbook(sim, tmp_path / "fail", 202)
        failing.definition.write_text(yaml.safe_dump(data, sort_keys=False, width=100000), encoding="utf-8")
        failing.review()
        sim.admin.add_fault("POST", r"/qemu/9000/clone$", "task_error", message="simulated failure")
        runs.append(failing.apply(extra_args=("-vvvv",), env_extra=env))
        assert runs[-1].rc != 0 and "task_failed" in runs[-1].stdout
        sim.admin.clear_faults()
        runs.append(failing.apply(extra_args=("-vvvv",), env_extra=env, crash_at=r"http:after_reply:GET:/version"))
    # The secret: in no output, journal, log.
    secrets = list(rs.CANARY_SECRETS)
    for run in runs:
        for secret in secrets:
            assert secret not in run.stdout and secret not in run.stderr
    assert scan([tmp_path], secrets) == []
    # The key comment: only as part of the whole public key line, where the definition or the request that
    # installs the key is stored or shown; never detached (in a message), never in default-verbosity output.
    blob = KEY.split()[1]
    detached = []
    for path in scan([tmp_path], [KEY_COMMENT]):
        if Path(path).name == "definition.yml":
            continue  # the operator's own input
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
            if KEY_COMMENT in line and blob not in line:
                detached.append((path, line[:200]))
    outputs = {"review": runs[0]}
    if rs.FULL:
        outputs["default verbosity re-run"] = runs[4]  # review, check, apply, plan_changed, re-run
    quiet_hits = [name for name, run in outputs.items() if KEY_COMMENT in run.stdout + run.stderr]
    files = sorted(
        {
            Path(p).name if "/journal/" not in p else "journal/" + Path(p).name[:3] + "*.json"
            for p in scan([tmp_path], [KEY_COMMENT])
        }
    )
    locations = _key_locations(book.journal)
    rs.write_result(
        "secrets",
        {
            "runs": len(runs),
            "secret_hits": 0,
            "key_comment_files": files,
            "key_comment_detached": detached,
            "key_comment_in_default_output": quiet_hits,
            "key_comment_in_journal": sorted(locations),
        },
    )
    assert detached == [] and quiet_hits == [], (detached, quiet_hits)
    assert set(locations) <= {".definition.access.sshPublicKeys[0]", "stages[cloudinit].request.params.sshkeys"}, (
        locations
    )


# -- TLS ---------------------------------------------------------------------------------------------------------
def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _leaf(tmp: Path, *, expired: bool, self_signed: bool) -> tuple[str, str, str]:
    """(cert, key, ca) files: an expired leaf from our own CA, or a self-signed leaf."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("reliability CA"))
        .issuer_name(_name("reliability CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=400))
        .not_valid_after(now + datetime.timedelta(days=400))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    before, after = (
        (now - datetime.timedelta(days=60), now - datetime.timedelta(days=1))
        if expired
        else (now - datetime.timedelta(days=1), now + datetime.timedelta(days=30))
    )
    issuer, signer = (_name("127.0.0.1"), key) if self_signed else (ca.subject, ca_key)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(signer, hashes.SHA256())
    )
    paths = tmp / "cert.pem", tmp / "key.pem", tmp / "ca.pem"
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    paths[2].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return str(paths[0]), str(paths[1]), str(paths[2])


class Relay:
    """A TLS endpoint with its own certificate that forwards decrypted bytes to the simulator (over verified TLS)."""

    def __init__(self, cert: str, key: str, sim: rs.Simulator) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(cert, key)
        self.upstream = ssl.create_default_context(cafile=sim.connection["ca_file"])
        self.target = (sim.connection["host"], sim.connection["port"])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.forwarded = 0
        self.handshakes_ok = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _addr = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        self.handshakes_ok += 1
        upstream = self.upstream.wrap_socket(socket.create_connection(self.target), server_hostname=self.target[0])

        def pump(src: t.Any, dst: t.Any, count: bool) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    if count:
                        self.forwarded += len(data)
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                for sock in (src, dst):
                    try:
                        sock.close()
                    except OSError:
                        pass

        threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()
        pump(client, upstream, True)

    def close(self) -> None:
        self.listener.close()


def _with_client(settings: t.Any, method: str, path: str, params: dict[str, t.Any]) -> t.Any:
    with ProxmoxClient(settings) as client:
        return client.request(method, path, params)


def _attempt(settings: t.Any) -> list[str]:
    codes = []
    for call in (
        lambda: "pin" if certificate_fingerprint(settings) == settings.fingerprint else "contacted",
        lambda: _with_client(settings, "GET", "/version", {}),
        lambda: _with_client(settings, "POST", "/nodes/pve-test/qemu/9000/clone", {"newid": 250, "full": 1}),
    ):
        try:
            value = call()
            codes.append(value if value in ("pin", "contacted") else "accepted")
        except VmanywareError as err:
            codes.append(err.code)
    return codes


@pytest.mark.parametrize(
    "case",
    [
        "wrong_ca",
        "wrong_fingerprint",
        "expired",
        "self_signed_unpinned",
        "control_relay",
        "unverified",
        "unverified_read_only",
        "unverified_read_only_password",
    ],
)
def test_tls_refusals_send_no_token(rel_sim: rs.Simulator, tmp_path: Path, case: str) -> None:
    sim = rel_sim
    sim.admin.reset()
    token_id, secret = sim.token
    host, port = sim.connection["host"], sim.connection["port"]
    relay = None
    kwargs: dict[str, t.Any] = {}
    if case == "wrong_ca":
        _cert, _key, other_ca = _leaf(tmp_path, expired=False, self_signed=False)
        kwargs["ca_path"] = other_ca
    elif case == "wrong_fingerprint":
        kwargs["fingerprint"] = "00" * 32
    else:
        unverified = case.startswith("unverified")
        cert, key, ca = _leaf(
            tmp_path, expired=case == "expired", self_signed=case == "self_signed_unpinned" or unverified
        )
        relay = Relay(cert, key, sim)
        port = relay.port
        kwargs["ca_path"] = None if case == "self_signed_unpinned" or unverified else ca
        if unverified:  # validate_certs false, no pin: a self-signed certificate anybody could present
            kwargs.update(validate_certs=False, unverified_tls_read_only=case != "unverified")
    if case == "control_relay":
        kwargs["ca_path"] = ca
    token = {"token_id": token_id, "token_secret": secret}
    credential = {"user": "root@pam", "password": secret} if case == "unverified_read_only_password" else token
    settings = build_settings(host=host, port=port, timeout=10, **credential, **kwargs)
    sim.admin.clear_requests()
    try:
        codes = _attempt(settings)
    finally:
        if relay is not None:
            relay.close()
    log = sim.admin.requests()
    rs.write_result(
        "tls",
        {
            "case": case,
            "codes": codes,
            "requests_logged": len(log),
            "bytes_forwarded": relay.forwarded if relay else None,
        },
    )
    if case == "control_relay":
        # The relay itself works: with its CA trusted, requests do reach the simulator (so the refusals above are real).
        assert codes[:2] == ["contacted", "accepted"] and len(log) >= 1
        return
    if case == "unverified_read_only":
        # The explicit read-only opt-in: the GET goes out (over the unverified relay), the POST is refused in the client.
        assert codes == ["contacted", "accepted", "tls_unverified"], codes
        assert [entry["method"] for entry in log] == ["GET"]
        return
    if case.startswith("unverified"):
        # validate_certs false without the opt-in, or a password with it: the handshake that reads the certificate sends no
        # HTTP byte; every request is refused before a connection exists, so no token or password left the controller.
        assert codes == ["contacted", "tls_unverified", "tls_unverified"], codes
        assert log == [] and relay is not None and relay.forwarded == 0 and relay.handshakes_ok == 1
        return
    # With a pin, certificate_fingerprint returns the pin without contacting anything (documented); the requests are refused.
    first = "pin" if case == "wrong_fingerprint" else "tls_verification_failed"
    assert codes == [first, "tls_verification_failed", "tls_verification_failed"], codes
    assert log == []  # no request, hence no token, reached the simulator
    if relay is not None:
        assert relay.forwarded == 0


def test_zz_no_secret_anywhere_in_the_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Last test of the suite: every file this session wrote (outputs of every run, journals, results) is free of
    every simulator's token secrets and root password."""
    roots = [tmp_path_factory.getbasetemp(), rs.RESULTS_DIR]
    hits = scan(roots, rs.CANARY_SECRETS)
    files = sum(1 for root in roots if root.exists() for _p in _files(root))
    rs.write_result(
        "secrets", {"session_scan_files": files, "session_scan_hits": hits, "canaries": len(rs.CANARY_SECRETS)}
    )
    assert hits == []
