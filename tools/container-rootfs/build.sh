#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Build the root file system of pvesim's real containers (`python -m pvesim serve --containers real
# --container-rootfs DIR`, docs/containers.md "A real container on this machine"): Debian 12
# (bookworm) from Debian's mirror, the minbase variant plus openssh-server, python3 and python3-apt
# (Ansible's apt module). Proxmox's appliance (debian-12-standard) cannot be downloaded here, and
# ships these packages too. The same tree backs `--guests container` (pvesim/containerguest.py: VMs
# whose agent commands really run), hence cloud-init with what its default modules call (passwd's
# useradd, sudo, locales' locale-gen); `--containers real` never starts cloud-init.
#
#   tools/container-rootfs/build.sh [OUT_DIR]
#
# Output (in OUT_DIR, default ${VMANYWARE_CACHE:-~/.cache/vmanyware}/container-rootfs/<key>/):
#   rootfs.tar    the tree (SSH host keys removed: pvesim makes new ones for every container)
#   rootfs.json   key, suite, package versions of note, build time
#   tree/         made by `pvesim --guests container` on first use: the tar unpacked once, the
#                 read-only lower layer of every VM container's overlay
# The last line printed on stdout is the output directory. <key> hashes this script and the package
# list: an existing build with the same key is reused (nothing is downloaded).
set -euo pipefail

SUITE=bookworm
MIRROR="${VMANYWARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES=(openssh-server python3 python3-apt iproute2 cloud-init passwd sudo locales)

log() { printf '[container-rootfs %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
[[ "$(id -u)" == 0 ]] || { echo "build.sh: run as root (mmdebstrap --mode=root keeps real file ownership)" >&2; exit 2; }
command -v mmdebstrap >/dev/null 2>&1 || { echo "build.sh: 'mmdebstrap' not found; apt-get install -y mmdebstrap" >&2; exit 2; }

KEY="$({ cat "$0"; printf '%s\n' "$SUITE" "$MIRROR" "${PACKAGES[@]}"; } | sha256sum | cut -c1-16)"
OUT="${1:-${VMANYWARE_CACHE:-$HOME/.cache/vmanyware}/container-rootfs/$KEY}"
if [[ -f "$OUT/rootfs.json" && -f "$OUT/rootfs.tar" ]]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi

mkdir -p "$OUT"
work="$(mktemp -d "$OUT/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start=$SECONDS
log "mmdebstrap $SUITE minbase + ${PACKAGES[*]}"
# --dpkgopt path-exclude: no documentation or locales (smaller, faster to copy for every container)
mmdebstrap --mode=root --variant=minbase --include="$(IFS=,; echo "${PACKAGES[*]}")" \
  --dpkgopt='path-exclude=/usr/share/{doc,man,info,locale}/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
  --customize-hook='chroot "$1" dpkg-query -W -f "\${Package} \${Version}\n" openssh-server python3 python3-apt cloud-init > "$1"/.vmw-versions' \
  --customize-hook='mv "$1"/.vmw-versions '"$work"'/versions' \
  "$SUITE" "$work/rootfs.tar" "$MIRROR" >&2
python3 - "$work" "$KEY" "$SUITE" "$((SECONDS - start))" <<'PY'
import json, sys
work, key, suite, seconds = sys.argv[1:]
versions = dict(line.split(" ", 1) for line in open(f"{work}/versions", encoding="utf-8").read().splitlines() if line)
json.dump({"key": key, "suite": suite, "variant": "minbase", "tar": "rootfs.tar", "packages": versions, "build_s": int(seconds)},
          open(f"{work}/rootfs.json", "w", encoding="utf-8"), indent=1)
PY
mv "$work/rootfs.tar" "$OUT/rootfs.tar"
mv "$work/rootfs.json" "$OUT/rootfs.json"
log "built in $((SECONDS - start)) s: $OUT ($(du -sh "$OUT/rootfs.tar" | cut -f1))"
echo "$OUT"
