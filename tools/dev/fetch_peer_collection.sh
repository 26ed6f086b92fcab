#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# fetch_peer_collection.sh DEST
#
# Put community.proxmox (the independent client of the simulator fidelity test,
# tools/pvesim/tests/test_peer_community_proxmox.py) into the collections root DEST, without
# installing the `ansible` package: download the pinned ansible wheel with `pip download --no-deps`
# (hash-checked, cached under ~/.cache/vmanyware/wheels) and extract only
# ansible_collections/community/proxmox/. That collection's plugins import nothing outside
# ansible-core and community.proxmox itself (its MANIFEST declares no dependencies; checked with
# grep for `ansible_collections.` imports), so nothing else is extracted.
#
# Environment: PYTHON (interpreter with pip; default python3), VMANYWARE_CACHE (default
# ~/.cache/vmanyware).
# Exit status: 0 ok; 2 usage; 75 (EX_TEMPFAIL) the wheel could not be downloaded (no network or
# index unreachable) -- the test skips on that one (fails under CI=true); anything else: a bug.
set -euo pipefail

ANSIBLE_VERSION=12.3.0
# sha256 of ansible-12.3.0-py3-none-any.whl as published on PyPI.
ANSIBLE_SHA256=cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414
WHEEL=ansible-${ANSIBLE_VERSION}-py3-none-any.whl
PREFIX=ansible_collections/community/proxmox/

if [ $# -ne 1 ]; then
    echo "usage: $0 DEST" >&2
    exit 2
fi
dest=$1
python=${PYTHON:-python3}
cache=${VMANYWARE_CACHE:-$HOME/.cache/vmanyware}/wheels
mkdir -p "$cache" "$dest"

have_wheel() {
    [ -f "$cache/$WHEEL" ] && echo "$ANSIBLE_SHA256  $cache/$WHEEL" | sha256sum -c --status -
}

if ! have_wheel; then
    rm -f "$cache/$WHEEL"
    req=$(mktemp)
    echo "ansible==${ANSIBLE_VERSION} --hash=sha256:${ANSIBLE_SHA256}" >"$req"
    log=$(mktemp)
    trap 'rm -f "$req" "$log"' EXIT
    if ! "$python" -m pip download --no-deps --only-binary=:all: --require-hashes -r "$req" \
            -d "$cache" --quiet --disable-pip-version-check 2>"$log"; then
        cat "$log" >&2
        if grep -q "HASHES" "$log"; then
            echo "fetch_peer_collection: $WHEEL does not match the pinned sha256" >&2
            exit 1
        fi
        echo "fetch_peer_collection: cannot download $WHEEL (no network or index unreachable)" >&2
        exit 75
    fi
    if ! have_wheel; then
        echo "fetch_peer_collection: $cache/$WHEEL missing or sha256 mismatch after download" >&2
        exit 1
    fi
fi

"$python" - "$cache/$WHEEL" "$dest" "$PREFIX" <<'PY'
import os
import shutil
import sys
import zipfile

wheel, dest, prefix = sys.argv[1:]
target = os.path.join(dest, prefix)
shutil.rmtree(target, ignore_errors=True)
count = 0
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        name = info.filename
        if not name.startswith(prefix) or info.is_dir():
            continue
        if os.path.isabs(name) or ".." in name.split("/"):
            raise SystemExit(f"unsafe member {name!r}")
        zf.extract(info, dest)
        count += 1
if not os.path.isfile(os.path.join(target, "MANIFEST.json")):
    raise SystemExit(f"{prefix}MANIFEST.json not found in {wheel}")
print(f"extracted {count} files of community.proxmox into {dest}")
PY
