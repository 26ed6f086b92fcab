# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The command an operator would type on the node for a planned API request (``qm``/``pct``).

Previews list each planned request (method, path, params); ``with_cli`` adds the equivalent
``qm``/``pct`` command line so an operator can compare it with Proxmox's own documentation or run
the step by hand. The mapping follows the documented CLI syntax (``qm clone <vmid> <newid>``,
``qm set``, ``qm resize <vmid> <disk> <size>``, ``qm cloudinit update``, ``qm start``,
``qm snapshot <vmid> <snapname>``, ``qm guest exec <vmid> -- <command>``; ``pct`` likewise). It
works on the request *summary*, redacted (``_redaction.redact``) before the command is built, so a
command never shows a secret nor more than the summary does. Requests without a CLI equivalent get none.

Where the CLI takes a *file* for what the API takes as a value (``qm set --sshkeys <file>``: qemu-server's
``param_mapping`` reads the file and URI-escapes it; ``pct create --ssh-public-keys <file>``: pve-container reads
the file), the command first writes the keys (the API value decoded: ``sshkeys`` is percent-encoded) to
``vmanyware-<vmid>.sshkeys`` in the current directory with a quoted here-document, then passes that file: a
multi-line shell snippet. A value the summary replaced by a placeholder (``<...>``: the template build's ephemeral
key, a redacted value) cannot be written out; the command then names the file it needs instead.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import re
import shlex
import typing as t
from urllib.parse import unquote

from .._core.redaction import redact

_GUEST = r"/nodes/(?P<node>[^/]+)/(?P<kind>qemu|lxc)/(?P<vmid>\d+)"
# (method, path suffix regex, subcommand, positional parameters after the vmid)
_COMMANDS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("POST", r"/clone", "clone", ("newid",)),
    ("PUT", r"/config", "set", ()),
    ("POST", r"/config", "set", ()),
    ("PUT", r"/resize", "resize", ("disk", "size")),
    ("PUT", r"/cloudinit", "cloudinit update", ()),
    ("POST", r"/status/start", "start", ()),
    ("POST", r"/status/stop", "stop", ()),
    ("POST", r"/status/shutdown", "shutdown", ()),
    ("POST", r"/snapshot", "snapshot", ("snapname",)),
    ("POST", r"/agent/exec", "guest exec", ()),
    ("DELETE", r"", "destroy", ()),
)
# pct has no cloudinit and no guest agent; its resize is positional the same way.
_PCT_SUBCOMMANDS = frozenset({"clone", "set", "resize", "start", "stop", "shutdown", "snapshot", "destroy"})
# (tool, subcommand) -> (parameter the CLI reads from a file, how the API value becomes the file's content)
_FILE_PARAMETERS: dict[tuple[str, str], tuple[str, t.Callable[[str], str]]] = {
    ("qm", "set"): (
        "sshkeys",
        lambda value: unquote(value, errors="strict"),
    ),  # qm URI-escapes the file's content itself
    ("pct", "create"): ("ssh-public-keys", lambda value: value),
}
_HEREDOC = "VMANYWARE_SSH_KEYS"


def _value(value: t.Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return ",".join(_value(item) for item in value)
    return str(value)


def _file_parameter(tool: str, subcommand: str, vmid: str, params: dict[str, t.Any]) -> tuple[str, dict[str, t.Any]]:
    """``(preamble, params)``: where the CLI reads a parameter from a file, the shell lines that write the file
    (``cat > <file> <<'...'`` with the API value as the file needs it) and the parameters passing the file instead."""
    name, content_of = _FILE_PARAMETERS.get((tool, subcommand), ("", str))
    if not name or name not in params:
        return "", params
    file_name = "vmanyware-%s.sshkeys" % vmid
    value = _value(params[name])
    params = dict(params)
    if value.startswith("<"):  # a placeholder of the summary (redacted, an ephemeral key): the content is not shown
        params[name] = "<%s: a file holding %s>" % (file_name, value)
        return "", params
    try:
        content = content_of(value)
    except UnicodeDecodeError:
        params[name] = "<%s: a file holding the decoded keys>" % file_name
        return "", params
    lines = content.split("\n") if content else []
    delimiter = _HEREDOC
    while delimiter in lines:
        delimiter += "_"
    params[name] = file_name
    if not lines:
        return ": > %s\n" % file_name, params
    return "cat > %s <<'%s'\n%s\n%s\n" % (file_name, delimiter, "\n".join(lines), delimiter), params


def _node_command(method: str, path: str, params: t.Mapping[str, t.Any]) -> str | None:
    """Node-level requests: ``pct create <vmid> <ostemplate> --option value ...``, ``pveam download <storage> <template>``."""
    if method.upper() != "POST":
        return None
    if re.fullmatch(r"/nodes/[^/]+/lxc", path) and "vmid" in params and "ostemplate" in params:
        preamble, params = _file_parameter("pct", "create", _value(params["vmid"]), dict(params))
        rest = [
            word
            for key, value in params.items()
            if key not in ("vmid", "ostemplate")
            for word in (f"--{key}", _value(value))
        ]
        return (
            preamble
            + "pct create "
            + " ".join(shlex.quote(w) for w in [_value(params["vmid"]), _value(params["ostemplate"]), *rest])
        )
    if re.fullmatch(r"/nodes/[^/]+/aplinfo", path) and "storage" in params and "template" in params:
        return "pveam download " + " ".join(shlex.quote(_value(params[key])) for key in ("storage", "template"))
    return None


def cli_command(method: str, path: str, params: t.Mapping[str, t.Any]) -> str | None:
    """``qm``/``pct``/``pveam`` command line for one request, or ``None`` when there is no equivalent (preceded by the
    lines that write a file the command reads, ``_file_parameter``)."""
    node_command = _node_command(method, path, params)
    if node_command is not None:
        return node_command
    for verb, suffix, subcommand, positional in _COMMANDS:
        if verb != method.upper():
            continue
        match = re.fullmatch(_GUEST + suffix, path)
        if match is None:
            continue
        tool = "qm" if match.group("kind") == "qemu" else "pct"
        if tool == "pct" and subcommand not in _PCT_SUBCOMMANDS:
            return None
        words = [tool, *subcommand.split(), match.group("vmid")]
        preamble, remaining = _file_parameter(tool, subcommand, match.group("vmid"), dict(params))
        for name in positional:
            if name not in remaining:
                return None
            words.append(_value(remaining.pop(name)))
        command = remaining.pop("command", None) if subcommand == "guest exec" else None
        for key, value in remaining.items():
            words += [f"--{key}", _value(value)]
        if command is not None:
            words += ["--", *(_value(item) for item in (command if isinstance(command, (list, tuple)) else [command]))]
        fixed = 1 + len(subcommand.split())  # tool and subcommand words are never quoted
        return preamble + " ".join(word if index < fixed else shlex.quote(word) for index, word in enumerate(words))
    return None


def with_cli(summary: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """A copy of a request summary (``method``, ``path``, ``params`` redacted) with ``cli`` added when one exists."""
    result = dict(summary)
    method, path = summary.get("method"), summary.get("path")
    params = summary.get("params")
    if isinstance(params, t.Mapping):
        params = result["params"] = redact(params)
    if isinstance(method, str) and isinstance(path, str) and isinstance(params, t.Mapping):
        command = cli_command(method, path, params)
        if command is not None:
            result["cli"] = command
    return result
