#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# fetch_newest_peer.sh [DEST]
#
# The newest peer of benchmarks/run.py (issue 36): a virtualenv with Python 3.13 (pyenv) holding the
# `ansible` package 14.5.0 from PyPI, which brings community.proxmox 2.0.0 and ansible-core 2.21.x,
# plus what community.proxmox's modules import at run time (proxmoxer, requests). ansible 14 needs
# Python >= 3.12, so the project's .venv (3.11) cannot run it.
#
# DEST defaults to ${VMANYWARE_CACHE:-~/.cache/vmanyware}/peer-newest (outside the repository).
# Idempotent: a DEST whose python already has ansible==14.5.0, proxmoxer and requests is kept as it is.
# Prints the versions (python, ansible, ansible-core, community.proxmox, proxmoxer, requests) and, last,
# the line `peer-venv: DEST`.
#
# Environment: PEER_PYTHON (the interpreter to build the venv from; default: pyenv's 3.13.0 as
# `PYENV_VERSION=3.13.0 python3.13`), VMANYWARE_CACHE.
# Exit status: 0 ok; 2 usage or no Python >= 3.12; 75 (EX_TEMPFAIL) pip could not reach the index.
set -euo pipefail

ANSIBLE_VERSION=14.5.0

if [ $# -gt 1 ]; then
    echo "usage: $0 [DEST]" >&2
    exit 2
fi
dest=${1:-${VMANYWARE_CACHE:-$HOME/.cache/vmanyware}/peer-newest}

versions() {
    "$dest/bin/python" - <<'PY'
import importlib.metadata as md
import json
import pathlib
import platform

import ansible.release
import ansible_collections.community.proxmox as cp

manifest = json.loads((pathlib.Path(cp.__path__[0]) / "MANIFEST.json").read_text())
print(f"python {platform.python_version()}")
print(f"ansible {md.version('ansible')}")
print(f"ansible-core {ansible.release.__version__}")
print(f"community.proxmox {manifest['collection_info']['version']}")
print(f"proxmoxer {md.version('proxmoxer')}")
print(f"requests {md.version('requests')}")
PY
}

ready() {
    [ -x "$dest/bin/python" ] && [ -x "$dest/bin/ansible-playbook" ] \
        && "$dest/bin/python" -c "
import importlib.metadata as md, sys
sys.exit(0 if md.version('ansible') == '$ANSIBLE_VERSION' and md.version('proxmoxer') and md.version('requests') else 1)
" 2>/dev/null
}

if ! ready; then
    if [ -n "${PEER_PYTHON:-}" ]; then
        base=("$PEER_PYTHON")
    elif PYENV_VERSION=3.13.0 python3.13 --version >/dev/null 2>&1; then
        base=(env PYENV_VERSION=3.13.0 python3.13)
    elif command -v python3.12 >/dev/null 2>&1; then
        base=(python3.12)
    else
        echo "fetch_newest_peer: no Python >= 3.12 (pyenv 3.13.0 or python3.12); set PEER_PYTHON" >&2
        exit 2
    fi
    if ! "${base[@]}" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)'; then
        echo "fetch_newest_peer: ${base[*]} is older than 3.12 (ansible $ANSIBLE_VERSION needs 3.12+)" >&2
        exit 2
    fi
    rm -rf "$dest"
    mkdir -p "$(dirname "$dest")"
    "${base[@]}" -m venv "$dest"
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    if ! "$dest/bin/python" -m pip install --quiet --disable-pip-version-check \
            "ansible==$ANSIBLE_VERSION" proxmoxer requests 2>"$log"; then
        cat "$log" >&2
        rm -rf "$dest"  # no half-built venv is taken for a ready one next time
        if grep -qiE "connection|network|resolve|timed out|No matching distribution" "$log"; then
            echo "fetch_newest_peer: cannot install ansible==$ANSIBLE_VERSION (index unreachable?)" >&2
            exit 75
        fi
        exit 1
    fi
fi
versions
echo "peer-venv: $dest"
