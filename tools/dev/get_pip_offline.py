# SPDX-License-Identifier: GPL-3.0-or-later
"""Offline stand-in for the pip bootstrap script that ansible-test downloads.

ansible-test fetches ``get-pip-<version>.py`` from a host our machines cannot reach, unless the
script is already cached as ``~/.ansible/test/cache/get_pip_<version>.py``. This stand-in does
what ansible-test needs from it: put pip into the fresh virtual environment (``ensurepip``),
then ``pip install`` the pinned packages it was given, from the package index we can reach.
"""

from __future__ import annotations

import ensurepip
import os
import subprocess
import sys

DROPPED = {"--no-setuptools", "--no-wheel"}


def main() -> None:
    """Bootstrap pip, then install the requested packages."""
    ensurepip.bootstrap(upgrade=True)
    args = [arg for arg in sys.argv[1:] if arg not in DROPPED]
    # ansible-test passes only a few environment variables through, so PIP_CERT may be gone:
    # fall back to the system bundle the machine's own pip uses.
    candidates = [os.environ.get(name) for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE")]
    candidates.append("/etc/ssl/certs/ca-certificates.crt")
    cert = next((path for path in candidates if path and os.path.isfile(path)), None)
    if cert:
        args = ["--cert", cert] + args
    if args:
        subprocess.run([sys.executable, "-m", "pip", "install"] + args, check=True)


if __name__ == "__main__":
    main()
