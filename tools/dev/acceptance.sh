#!/usr/bin/env bash
# Acceptance (issues 10 and 20, docs/real-guest.md "Acceptance", docs/templates.md "Acceptance on a real guest"): a template built
# from the agent-less image (qemu-guest-agent installed over SSH in its preparation boot), then
# the real-guest backend tests, and the provision playbook end to end against pvesim --guests real, i.e. a real QEMU guest with real
# cloud-init, qemu-guest-agent and sshd; then SSH with strict host key checking; then (issue 34) a second guest on a
# static IPv4 address in QEMU's user-mode network, and SSH to that address. Builds or reuses the
# guest image and installs QEMU and the image tools with apt when missing (needs root for both).
# Then (issue 21, docs/containers.md "Acceptance on a real container"): pvesim --containers real and the provision
# playbook on a real LXC container (rootfs from Debian's mirror, cached; lxc and mmdebstrap installed with apt when missing).
# And pvesim --guests container: a VM's agent exec/file endpoints and real cloud-init in an LXC container (same rootfs);
# then the node SSH route (pvesim's node sshd with pct, and ansible-playbook through vmanyware.proxmox.pct), and profiles on a
# real container over both of its transports (pct exec on the node, SSH into the container).
# Skips (exit 0, reason printed) only where QEMU, or a privileged LXC container, cannot run at all. Extra arguments go to pytest.
# Timings: printed at the end; also written to $VMANYWARE_ACCEPTANCE_TIMINGS (and ...-container) when set.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$repo/.venv}
cd "$repo"
# ACCEPTANCE_PARTS: "vm container" (default), or one of them (`make test` runs the two in different lanes).
parts=" ${ACCEPTANCE_PARTS:-vm container} "
if [[ $parts == *" vm "* ]]; then
  "$venv/bin/python" -m pytest -m realguest tests/acceptance/test_real_guest.py tools/pvesim/tests/test_realguest.py -s -q -p no:cacheprovider "$@"
fi
if [[ $parts == *" container "* ]]; then
  start=$SECONDS
  "$venv/bin/python" -m pytest -m realcontainer tests/acceptance/test_real_container.py tools/pvesim/tests/test_realcontainer.py \
    tools/pvesim/tests/test_containerguest.py \
    tools/pvesim/tests/test_nodessh.py tests/integration/test_pct_route.py \
    tests/integration/test_qga_modules.py tests/integration/test_profiles_run.py \
    tests/integration/test_profiles_bake.py tests/integration/test_container_profiles.py -s -q -p no:cacheprovider "$@"
  echo "[acceptance] real-container part: $((SECONDS - start)) s"
fi
