#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Build a small Debian 12 (bookworm) guest image for pvesim's real-guest backend
# (`python -m pvesim serve --guests real --guest-image DIR`, see docs/real-guest.md), in two variants
# from one mmdebstrap run: with qemu-guest-agent (what the VM path needs) and without it (what stock
# Debian and Ubuntu cloud images ship: the template build's input, docs/templates.md).
#
#   tools/guest-image/build.sh [OUT_DIR]
#
# Output (in OUT_DIR, default ${VMANYWARE_CACHE:-~/.cache/vmanyware}/guest-image/<key>/):
#   disk.qcow2    ext4 root filesystem on the whole disk (no partition table, no bootloader)
#   disk-noagent.qcow2, packages-noagent.txt
#                 the same root filesystem before qemu-guest-agent (and only what it pulls in) was added
#   vmlinuz       the linux-image-cloud-amd64 kernel, for QEMU's direct kernel boot
#   initrd.img    its initramfs
#   image.json    key, kernel command line, package versions of note, build timings
#   packages.txt  every installed package and version
# The last line printed on stdout is the image directory.
#
# <key> is a hash of this script, the package list and the cloud.cfg.d snippets: an existing
# image with the same key is reused (nothing is downloaded), anything else rebuilds it.
# Needs root (the tree must hold real root ownership for mkfs.ext4 -d), mmdebstrap,
# e2fsprogs >= 1.43 (mkfs.ext4 -d) and qemu-img. No loop mounts: mmdebstrap writes a directory, mkfs.ext4 -d copies it into a
# sparse raw file, qemu-img converts that to qcow2.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SUITE=bookworm
MIRROR="${VMANYWARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${VMANYWARE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
ROOT_SIZE="${VMANYWARE_GUEST_ROOT_SIZE:-2G}"   # the filesystem; pvesim grows the overlay to the VM's scsi0 size
CMDLINE="root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.show_status=0"

# The package list (on top of mmdebstrap's "apt" variant: Essential packages + apt). Debian 12's
# cloud-init renders NoCloud network-config with its "eni" renderer first (ifupdown +
# isc-dhcp-client, as on Debian's own bookworm cloud images), so no netplan/networkd here.
PACKAGES=(
  linux-image-cloud-amd64 initramfs-tools kmod udev
  systemd systemd-sysv dbus
  cloud-init openssh-server sudo ca-certificates python3-apt
  ifupdown isc-dhcp-client iproute2 netbase
  e2fsprogs procps
)
# Added on top of the agent-less root for disk.qcow2: one mmdebstrap run downloads these .debs (and
# the dependencies the root lacks) in a customize hook, so a fresh machine pays one bootstrap, not two.
AGENT_PACKAGES=(qemu-guest-agent)

log() { printf '[build.sh %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
need() { command -v "$1" >/dev/null 2>&1 || { echo "build.sh: '$1' not found; apt-get install -y $2" >&2; exit 2; }; }
[[ "$(id -u)" == 0 ]] || { echo "build.sh: run as root (mmdebstrap --mode=root, file ownership for mkfs.ext4 -d)" >&2; exit 2; }
need mmdebstrap mmdebstrap
need mkfs.ext4 e2fsprogs
need qemu-img qemu-utils

KEY="$(
  {
    cat "$0"
    printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY_MIRROR" "$ROOT_SIZE" "$CMDLINE" "${PACKAGES[@]}" -- "${AGENT_PACKAGES[@]}"
    for f in "$HERE"/cloud.cfg.d/*.cfg; do printf '== %s\n' "$(basename "$f")"; cat "$f"; done
  } | sha256sum | cut -c1-16
)"
CACHE_ROOT="${VMANYWARE_CACHE:-$HOME/.cache/vmanyware}/guest-image"
OUT="${1:-$CACHE_ROOT/$KEY}"

if [[ -f "$OUT/image.json" && -f "$OUT/disk.qcow2" && -f "$OUT/disk-noagent.qcow2" && -f "$OUT/vmlinuz" && -f "$OUT/initrd.img" ]] \
   && grep -q "\"key\": \"$KEY\"" "$OUT/image.json"; then
  log "cached image $KEY is up to date ($OUT)"
  echo "$OUT"
  exit 0
fi

mkdir -p "$(dirname "$OUT")"
WORK="$(mktemp -d "$(dirname "$OUT")/.build-$KEY.XXXXXX")"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT
ROOTFS="$WORK/rootfs"
T0=$(date +%s)

AGENT_DEBS="$WORK/agent-debs"
mkdir -p "$AGENT_DEBS"
log "mmdebstrap $SUITE (${#PACKAGES[@]} extra packages; ${AGENT_PACKAGES[*]} downloaded only) into $ROOTFS"
IFS=, ; INCLUDE="${PACKAGES[*]}"; unset IFS
# The hook runs while the bootstrap's package lists are still there: apt resolves what the agent needs on
# top of this root and downloads exactly those .debs, which leave the tree before it is imaged.
mmdebstrap --variant=apt --mode=root --format=directory \
  --components=main --include="$INCLUDE" \
  --aptopt='APT::Install-Recommends "false"' \
  --customize-hook="mkdir -p \"\$1/tmp/agent-debs/partial\" && chroot \"\$1\" apt-get install -y -q --download-only \
-o Dir::Cache::Archives=/tmp/agent-debs/ ${AGENT_PACKAGES[*]} && mv \"\$1\"/tmp/agent-debs/*.deb '$AGENT_DEBS/' && rm -rf \"\$1/tmp/agent-debs\"" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  "$SUITE" "$ROOTFS" \
  "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY_MIRROR $SUITE-security main" >&2
T1=$(date +%s)

log "customizing the root filesystem"
# cloud-init settings
install -m 0644 "$HERE"/cloud.cfg.d/*.cfg "$ROOTFS/etc/cloud/cloud.cfg.d/"
# no SSH host keys in the image: cloud-init (cc_ssh) generates them on first boot
rm -f "$ROOTFS"/etc/ssh/ssh_host_*
# empty machine-id: systemd generates one at boot (not "uninitialized": no first-boot presets)
: > "$ROOTFS/etc/machine-id"
rm -f "$ROOTFS/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$ROOTFS/var/lib/dbus/machine-id"
# names and addresses; cloud-init rewrites both (manage_etc_hosts, hostname)
echo localhost > "$ROOTFS/etc/hostname"
cat > "$ROOTFS/etc/hosts" <<'EOF'
127.0.0.1	localhost
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF
: > "$ROOTFS/etc/resolv.conf"   # dhclient writes it from the DHCP lease; a static address: the hook below
# ifupdown applies `dns-nameservers` (where cloud-init's eni renderer puts network-config's nameservers) only through
# resolvconf, which a minimal image lacks: without it a static address (the template build's preparation boot) has no
# resolver. This hook stands in for resolvconf: on every ifup of a stanza that is not DHCP (cloud-init's eni renderer
# puts the network-config's nameservers on lo) it writes them, so a static-address clone of a template built with a
# static build address gets its own resolver, not the template's stale file (issue 34's acceptance found 10.10.0.1
# there). A DHCP stanza leaves the file to dhclient, which writes it from the lease.
cat > "$ROOTFS/etc/network/if-up.d/vmanyware-resolv" <<'EOF'
#!/bin/sh
[ -n "$IF_DNS_NAMESERVERS" ] || exit 0
[ "$METHOD" != dhcp ] || exit 0
{
  [ -z "$IF_DNS_SEARCH" ] || echo "search $IF_DNS_SEARCH"
  for ns in $IF_DNS_NAMESERVERS; do echo "nameserver $ns"; done
} > /etc/resolv.conf
EOF
chmod 0755 "$ROOTFS/etc/network/if-up.d/vmanyware-resolv"
cat > "$ROOTFS/etc/fstab" <<'EOF'
/dev/vda	/	ext4	rw,discard,errors=remount-ro	0	1
EOF
cat > "$ROOTFS/etc/network/interfaces" <<'EOF'
# cloud-init writes the guest's interfaces to /etc/network/interfaces.d/50-cloud-init
auto lo
iface lo inet loopback

source /etc/network/interfaces.d/*
EOF
# units that burn CPU under TCG for nothing on a short-lived test guest
for unit in e2scrub_reap.service e2scrub_all.timer fstrim.timer apt-daily.timer apt-daily-upgrade.timer; do
  ln -sf /dev/null "$ROOTFS/etc/systemd/system/$unit"
done
cp "$ROOTFS"/boot/vmlinuz-* "$WORK/vmlinuz"
cp "$ROOTFS"/boot/initrd.img-* "$WORK/initrd.img"
chmod 0644 "$WORK/vmlinuz" "$WORK/initrd.img"
KERNEL_VERSION="$(basename "$ROOTFS"/boot/vmlinuz-*)"; KERNEL_VERSION="${KERNEL_VERSION#vmlinuz-}"
T2=$(date +%s)

# image SUFFIX: packagesSUFFIX.txt and diskSUFFIX.qcow2 of the tree as it is now
image() {
  dpkg-query --admindir="$ROOTFS/var/lib/dpkg" -W -f '${Package}\t${Version}\n' | sort > "$WORK/packages$1.txt"
  log "mkfs.ext4 -d ($(du -sm "$ROOTFS" | cut -f1) MiB of files into a $ROOT_SIZE filesystem) for disk$1.qcow2"
  truncate -s "$ROOT_SIZE" "$WORK/disk.raw"
  mkfs.ext4 -q -F -L rootfs -d "$ROOTFS" -E root_owner=0:0 "$WORK/disk.raw"
  qemu-img convert -f raw -O qcow2 "$WORK/disk.raw" "$WORK/disk$1.qcow2"
  rm -f "$WORK/disk.raw"
}
image -noagent
T3=$(date +%s)

log "adding ${AGENT_PACKAGES[*]} ($(find "$AGENT_DEBS" -name '*.deb' | wc -l) .debs) to the same root"
mkdir -p "$ROOTFS/tmp/agent-debs"
cp "$AGENT_DEBS"/*.deb "$ROOTFS/tmp/agent-debs/"
printf '#!/bin/sh\nexit 101\n' > "$ROOTFS/usr/sbin/policy-rc.d"   # no service starts inside the chroot
chmod 0755 "$ROOTFS/usr/sbin/policy-rc.d"
chroot "$ROOTFS" sh -c 'dpkg -i /tmp/agent-debs/*.deb' >&2
rm -rf "$ROOTFS/tmp/agent-debs" "$ROOTFS/usr/sbin/policy-rc.d"
ROOTFS_MB=$(du -sm "$ROOTFS" | cut -f1)
image ""
rm -rf "$ROOTFS"
T4=$(date +%s)

ver() { awk -F'\t' -v p="$1" '$1 == p { print $2 }' "$WORK/packages.txt"; }
cat > "$WORK/image.json" <<EOF
{
  "key": "$KEY",
  "suite": "$SUITE",
  "kernel": "vmlinuz",
  "initrd": "initrd.img",
  "disk": "disk.qcow2",
  "disk_format": "qcow2",
  "disk_noagent": "disk-noagent.qcow2",
  "cmdline": "$CMDLINE",
  "kernel_version": "$KERNEL_VERSION",
  "default_user": "debian",
  "versions": {"cloud-init": "$(ver cloud-init)", "qemu-guest-agent": "$(ver qemu-guest-agent)", "openssh-server": "$(ver openssh-server)"},
  "rootfs_mib": $ROOTFS_MB,
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "timings_s": {"mmdebstrap": $((T1 - T0)), "customize": $((T2 - T1)), "image_noagent": $((T3 - T2)), "image_agent": $((T4 - T3)),
                "total": $((T4 - T0))}
}
EOF
rm -rf "$OUT"
mkdir -p "$OUT"
mv "$WORK/disk.qcow2" "$WORK/disk-noagent.qcow2" "$WORK/vmlinuz" "$WORK/initrd.img" "$WORK/packages.txt" "$WORK/packages-noagent.txt" "$OUT/"
mv "$WORK/image.json" "$OUT/image.json"   # last: its presence marks a complete image
log "done in $((T4 - T0)) s (mmdebstrap $((T1 - T0)) s, customize $((T2 - T1)) s, agent-less image $((T3 - T2)) s, agent image $((T4 - T3)) s)"
echo "$OUT"
