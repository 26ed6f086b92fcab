# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Each node's SSH endpoint with a ``pct`` command: ``python -m pvesim serve ... --node-ssh-authorized-keys FILE``.

One OpenSSH server (Debian's ``openssh-server``, ``/usr/sbin/sshd``) per node of the start seed, on
``127.0.0.1:<free port>``, as root, with its own ed25519 host key made in ``<state-dir>/nodessh/<node>/`` and an
``authorized_keys`` holding the keys of the given file (no password, no keyboard-interactive, root only). Its
sessions find ``pct`` first on PATH (a ``ForceCommand`` wrapper puts ``<node dir>/bin`` in front and runs the
requested command with ``/bin/sh -c``); that ``pct`` is :func:`pct_main` below.

What ``pct`` implements, from pve-container's ``PVE::CLI::pct`` (facts, not code): ``status <vmid>`` prints
``status: running`` or ``status: stopped``; ``exec <vmid> -- <argv>`` runs ``lxc-attach -n <ct> -- <argv>`` and
passes stdin, stdout, stderr and the exit code through (``missing command`` without argv); ``push <vmid> <file>
<destination> [--perms P]`` and ``pull <vmid> <path> <destination>`` copy a file into or out of a running container
(``can only push files to a running CT`` / ``can only pull files from a running VM`` otherwise); ``help`` lists
the commands. A VMID whose configuration is not on this node fails as pct does (``Configuration file
'nodes/<node>/lxc/<vmid>.conf' does not exist``); a ``die`` in pct exits 255. The container's state comes from the
admin API (``connection.json`` of the state dir), its process from the real-container backend
(:mod:`pvesim.realcontainer`, ``lxc-attach -P <lxcpath>``); a simulated container has no process to attach to.

The admin API reports the endpoints (``GET /_pvesim/node-ssh``: per node host, port, host key line and SHA-256
fingerprint); ``connection.json`` carries the same under ``node_ssh``.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import shlex
import socket
import ssl
import subprocess
import sys
import time
import typing as t
import urllib.error
import urllib.request

__all__ = ["NodeSshEndpoints", "NodeSshError", "pct_main"]

SSHD = "/usr/sbin/sshd"


class NodeSshError(Exception):
    """sshd is missing, or a node's endpoint did not come up."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write(path: str, text: str, mode: int) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(path, mode)


def host_key_fingerprint(public_line: str) -> str:
    """``SHA256:<base64>`` as ``ssh-keygen -lf`` prints it."""
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


class NodeSshEndpoints:
    """The sshd of every node; ``stop_all`` ends them (server stop, ``atexit``)."""

    def __init__(self, state_dir: str, nodes: t.Sequence[str], authorized_keys_file: str) -> None:
        if not os.path.isfile(SSHD):
            raise NodeSshError(f"{SSHD} not found (apt-get install openssh-server)")
        with open(authorized_keys_file, encoding="utf-8") as fh:
            self.authorized_keys = "".join(line.strip() + "\n" for line in fh if line.strip())
        if not self.authorized_keys:
            raise NodeSshError(f"{authorized_keys_file} holds no public key")
        self.state_dir = os.path.abspath(state_dir)
        self.nodes = list(nodes)
        self.info: dict[str, dict[str, t.Any]] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
        atexit.register(self.stop_all)

    def node_dir(self, node: str) -> str:
        return os.path.join(self.state_dir, "nodessh", node)

    def _prepare(self, node: str, port: int) -> str:
        base = self.node_dir(node)
        os.makedirs(os.path.join(base, "bin"), exist_ok=True)
        key = os.path.join(base, "ssh_host_ed25519_key")
        if not os.path.isfile(key):  # the node keeps its host key across restarts on the same state dir
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{node}", "-f", key], check=True)
        _write(os.path.join(base, "authorized_keys"), self.authorized_keys, 0o600)
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        _write(
            os.path.join(base, "bin", "pct"),
            "#!/bin/sh\n# pvesim: pct of node "
            + node
            + " (pvesim/nodessh.py)\n"
            + f"PYTHONPATH={shlex.quote(package_root)} exec {shlex.quote(sys.executable)} -m pvesim.nodessh pct "
            + f'--state-dir {shlex.quote(self.state_dir)} --node {shlex.quote(node)} "$@"\n',
            0o755,
        )
        # sshd runs the ForceCommand with the user's shell; the session then runs the requested command with sh -c
        _write(
            os.path.join(base, "session"),
            "#!/bin/sh\n"
            + f"PATH={shlex.quote(os.path.join(base, 'bin'))}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
            + 'export PATH\nexec /bin/sh -c "${SSH_ORIGINAL_COMMAND:-exit 0}"\n',
            0o755,
        )
        config = os.path.join(base, "sshd_config")
        _write(
            config,
            "\n".join(
                [
                    f"# pvesim node {node} (pvesim/nodessh.py)",
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {key}",
                    "PidFile none",
                    f"AuthorizedKeysFile {os.path.join(base, 'authorized_keys')}",
                    "AllowUsers root",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitUserEnvironment no",
                    "AllowTcpForwarding no",
                    "X11Forwarding no",
                    f"ForceCommand {os.path.join(base, 'session')}",
                    "LogLevel INFO",
                    "",
                ]
            ),
            0o600,
        )
        return config

    def start(self) -> None:
        for node in self.nodes:
            port = _free_port()
            config = self._prepare(node, port)
            log = open(os.path.join(self.node_dir(node), "sshd.log"), "ab")  # pylint: disable=consider-using-with
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                [SSHD, "-D", "-e", "-f", config], stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True
            )
            log.close()
            self._procs[node] = proc
            deadline = time.monotonic() + 15
            while not self._banner(port):
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.stop_all()
                    raise NodeSshError(f"node {node}: sshd did not start (see {self.node_dir(node)}/sshd.log)")
                time.sleep(0.1)
            with open(os.path.join(self.node_dir(node), "ssh_host_ed25519_key.pub"), encoding="utf-8") as fh:
                public = " ".join(fh.read().split()[:2])
            self.info[node] = {
                "host": "127.0.0.1",
                "port": port,
                "user": "root",
                "host_key": public,
                "host_key_fingerprint": host_key_fingerprint(public),
                "known_hosts_line": f"[127.0.0.1]:{port} {public}",
            }

    @staticmethod
    def _banner(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.settimeout(1)
                return sock.recv(4).startswith(b"SSH-")
        except OSError:
            return False

    def stop_all(self) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._procs.clear()


# ---------------------------------------------------------------------------------------------------------------------
# pct, run by sshd's sessions (a process of its own: python -m pvesim.nodessh pct ...)

HELP = """USAGE: pct <COMMAND> [ARGS] [OPTIONS]
       pct status <vmid>
       pct exec <vmid> [<extra-args>]
       pct push <vmid> <file> <destination> [OPTIONS]
       pct pull <vmid> <path> <destination> [OPTIONS]
       pct help
(pvesim: only these pct commands are simulated)
"""


class _Die(Exception):
    """pct's ``die``: the message on stderr, exit 255."""


def _admin(state_dir: str, path: str) -> t.Any:
    with open(os.path.join(state_dir, "connection.json"), encoding="utf-8") as fh:
        conn = json.load(fh)
    request = urllib.request.Request(conn["admin_url"] + path, headers={"X-Pvesim-Admin": conn["admin_token"]})
    context = ssl.create_default_context(cafile=conn["ca_file"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:  # nosec - loopback admin API
            return json.load(response)["data"]
    except urllib.error.HTTPError:
        return None


def _container(state_dir: str, node: str, vmid_text: str) -> dict[str, t.Any]:
    if not vmid_text.isdigit() or not 100 <= int(vmid_text) <= 999_999_999:
        raise _Die(f"400 Parameter verification failed.\nvmid: invalid format - value '{vmid_text}' is not a VMID\n")
    info = _admin(state_dir, f"/containers/{int(vmid_text)}")
    if not isinstance(info, dict) or info.get("node") != node:
        raise _Die(f"Configuration file 'nodes/{node}/lxc/{int(vmid_text)}.conf' does not exist\n")
    return info


def _running(info: dict[str, t.Any]) -> bool:
    if info.get("container_backend") == "real":
        return info.get("lxc_state") == "RUNNING"
    return info.get("status") == "running"


def _attach(info: dict[str, t.Any], argv: t.Sequence[str]) -> list[str]:
    if info.get("container_backend") != "real":
        raise _Die(
            f"pvesim: CT {info['vmid']} is a simulated container (no process to attach to; use --containers real)\n"
        )
    return ["lxc-attach", "-P", str(info["lxcpath"]), "-n", str(info["lxc_name"]), "--", *argv]


def _options(args: list[str], names: t.Sequence[str]) -> tuple[list[str], dict[str, str]]:
    positional, options = [], {}
    while args:
        arg = args.pop(0)
        if arg.startswith("-") and arg.lstrip("-") in names and args:
            options[arg.lstrip("-")] = args.pop(0)
        else:
            positional.append(arg)
    return positional, options


def _pct(state_dir: str, node: str, args: list[str]) -> int:
    command = args.pop(0) if args else "help"
    if command == "help":
        sys.stdout.write(HELP)
        return 0
    if command not in ("status", "exec", "push", "pull"):
        raise _Die(f"unknown command 'pct {command}'\n{HELP}")
    if not args:
        raise _Die("400 not enough arguments\n")
    info = _container(state_dir, node, args.pop(0))
    if command == "status":
        sys.stdout.write(f"status: {'running' if _running(info) else 'stopped'}\n")
        return 0
    if command == "exec":
        if args[:1] == ["--"]:
            args.pop(0)
        if not args:
            raise _Die("missing command\n")
        argv = _attach(info, args)
        sys.stdout.flush()
        os.execvp(argv[0], argv)
    positional, options = _options(args, ("perms", "user", "group"))
    if len(positional) != 2:
        raise _Die("400 wrong number of arguments\n")
    local, inside = positional if command == "push" else reversed(positional)
    if not _running(info):
        raise _Die(
            "can only push files to a running CT\n" if command == "push" else "can only pull files from a running VM\n"
        )
    if command == "push":
        script = 'cat > "$1"' + (' && chmod "$2" "$1"' if "perms" in options else "")
        extra = [options["perms"].lstrip("0") or "0"] if "perms" in options else []
        try:
            with open(local, "rb") as src:
                res = subprocess.run(
                    _attach(info, ["/bin/sh", "-c", script, "sh", inside, *extra]), stdin=src, check=False
                )
        except OSError:
            raise _Die(f"failed to open {local} for reading\n") from None
        return 0 if res.returncode == 0 else 255
    with open(local, "wb") as dst:
        res = subprocess.run(_attach(info, ["cat", "--", inside]), stdout=dst, stderr=subprocess.DEVNULL, check=False)
    if res.returncode != 0:
        raise _Die(f"failed to open {inside}: No such file or directory\n")
    return 0


def pct_main(argv: t.Sequence[str] | None = None) -> int:
    """``pct`` of one node: ``python -m pvesim.nodessh pct --state-dir DIR --node NODE <pct arguments>``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 5 or args[0] != "pct" or args[1] != "--state-dir" or args[3] != "--node":
        sys.stderr.write("usage: python -m pvesim.nodessh pct --state-dir DIR --node NODE <pct arguments>\n")
        return 2
    try:
        return _pct(args[2], args[4], args[5:])
    except _Die as die:
        sys.stderr.write(str(die))
        return 255


if __name__ == "__main__":
    sys.exit(pct_main())
