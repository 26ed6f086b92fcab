# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one list of secret-bearing keys, and the one redaction every path uses.

The client's request log, the journal (request summaries, evidence, hand-off), the stage
requests summaries that results and previews show (and their ``qm``/``pct`` command, built
from the summary) all call ``redact``: a value under a secret-bearing key becomes
``"<redacted>"``, at any depth, whatever the key's case.

A key is secret-bearing when it contains one of ``SECRET_KEY_MARKERS`` (``password``,
``cipassword``, ``api_token_secret``, ``ticket``, ``PVEAuthCookie``, ``CSRFPreventionToken``,
``Authorization``...) or equals one of ``SECRET_KEY_NAMES`` (short names that would match
unrelated keys as substrings, e.g. ``otp`` in ``hotplug``, and guest-agent data: the input and
output of a command run in the guest). SSH public keys (``sshkeys``) are not secrets: the
journal keeps them, as the definition snapshot does (docs/journal.md); nor are booleans.

Free text from Proxmox (task log lines, a task's exit status) has no keys: ``redact_text`` applies the
same list to ``key=value`` and ``key: value`` pairs in it (an ``Authorization`` header, ``password=``,
a ``ticket:``, a ``PVEAPIToken=``), and hides the credentials of a URL (``scheme://user:secret@``).

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import copy
import re
import typing as t

REDACTED = "<redacted>"

# Matched case-insensitively as substrings of the key.
SECRET_KEY_MARKERS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "ticket",
    "token",
    "csrf",
    "cookie",
    "authorization",
    "private_key",
    "privatekey",
    "private-key",
)
# Matched case-insensitively as whole keys.
SECRET_KEY_NAMES = frozenset(
    {
        "otp",
        "tfa",
        "totp",
        "input-data",
        "out-data",
        "err-data",
        "content",
        "stdin",
        "stdout",
        "stderr",
    }
)


def is_secret_key(key: t.Any) -> bool:
    """Whether values under ``key`` are never logged, stored or shown."""
    lowered = str(key).lower()
    return lowered in SECRET_KEY_NAMES or any(marker in lowered for marker in SECRET_KEY_MARKERS)


def redact(value: t.Any) -> t.Any:
    """A deep copy of ``value`` where every value under a secret-bearing key is ``"<redacted>"``.

    Booleans are kept: a flag about a secret (``passwordLocked``, the attestation a template build verified
    and its stamp reads back from the journal) is not one.
    """
    if isinstance(value, t.Mapping):
        return {
            key: REDACTED if is_secret_key(key) and not isinstance(item, bool) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(item) for item in value]
    return copy.deepcopy(value)


# ``key=value`` / ``key: value`` in free text whose key ``is_secret_key`` (the pattern is built from the same two
# lists). A value is a quoted string, or a run of characters up to a space, quote, comma, semicolon or ``&`` (a query
# string), after an optional authentication scheme (``Authorization: Bearer <token>``).
_KEY_CHARS = r"[A-Za-z0-9_.\-]"
_TEXT_PAIR = re.compile(
    r"(?P<key>(?<!%s)(?:%s*(?:%s)%s*|(?:%s))(?!%s))"
    % (
        _KEY_CHARS,
        _KEY_CHARS,
        "|".join(re.escape(marker) for marker in SECRET_KEY_MARKERS),
        _KEY_CHARS,
        "|".join(re.escape(name) for name in sorted(SECRET_KEY_NAMES)),
        _KEY_CHARS,
    )
    + r"""(?P<sep>["']?\s*[:=]\s*)"""
    + r"""(?P<value>(?:(?:Bearer|Basic|Digest|Negotiate|Token)\s+)?(?:"[^"]*"|'[^']*'|[^\s'",;&]+))""",
    re.IGNORECASE,
)
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)[^/\s:@]+:[^/\s@]+@")


def redact_text(text: str) -> str:
    """``text`` with the value of every secret-bearing ``key=value`` / ``key: value`` pair, and the credentials of
    every URL, replaced by ``"<redacted>"`` (task log lines, exit statuses: Proxmox text that a result may show)."""
    return _TEXT_PAIR.sub(r"\g<key>\g<sep>" + REDACTED, _URL_CREDENTIALS.sub(r"\g<scheme>" + REDACTED + "@", text))
