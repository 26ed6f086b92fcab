# -*- coding: utf-8 -*-
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The HTTP libraries the client stands on (requests, urllib3, truststore), imported once.

When one is missing the names still exist (``HAS_REQUESTS``/``HAS_TRUSTSTORE`` say so), so every module imports and
fails with a clear message instead of a traceback; the ``Base*`` names are the classes the TLS layer extends.

This is a private module_utils file: not a public API.
"""

from __future__ import annotations

import typing as t

__all__ = [
    "HAS_REQUESTS",
    "HAS_TRUSTSTORE",
    "BaseAdapter",
    "BaseConnection",
    "BasePool",
    "BasePoolManager",
    "BaseSSLFailure",
    "requests",
    "truststore",
    "urllib3",
]

try:
    import requests
    import requests.adapters
    import requests.utils
    import requests.exceptions
    import urllib3
    import urllib3.connection
    import urllib3.connectionpool
    import urllib3.exceptions
    import urllib3.poolmanager
except ImportError:  # pragma: no cover - exercised by the sanity import test only
    HAS_REQUESTS = False
    requests = None  # type: ignore[assignment]
    urllib3 = None  # type: ignore[assignment]
    BaseAdapter: t.Any = object
    BaseConnection: t.Any = object
    BasePool: t.Any = object
    BasePoolManager: t.Any = object
    BaseSSLFailure: t.Any = Exception
else:
    HAS_REQUESTS = True
    BaseAdapter = requests.adapters.HTTPAdapter
    BaseConnection = urllib3.connection.HTTPSConnection
    BasePool = urllib3.connectionpool.HTTPSConnectionPool
    BasePoolManager = urllib3.poolmanager.PoolManager
    BaseSSLFailure = urllib3.exceptions.SSLError

try:
    import truststore
except ImportError:  # pragma: no cover - requirements.txt installs it; OpenSSL's default paths then
    HAS_TRUSTSTORE = False
    truststore = None  # type: ignore[assignment]
else:
    HAS_TRUSTSTORE = True
