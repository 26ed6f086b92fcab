#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# run.sh PEER_GIT OUT
#
# community.proxmox's own integration targets (proxmox, proxmox_pool, proxmox_template of release 1.4.0) against
# pvesim, task files unchanged, only variables set (docs/simulator.md, "The peer's own suite"). Not part of CI:
# CI cannot fetch the peer's repository, and its source stays out of ours.
#
#   PEER_GIT  a clone (or bare mirror) of github.com/ansible-collections/community.proxmox holding tag $PEER_REF
#   OUT       a scratch directory: venvs, the simulator's state, logs, tasks-<target>.jsonl and a summary per run
#
# Environment: CORES (default "2.18 2.19": ansible-core minors to run with, in throwaway venvs, since the template
# target pip-installs into its interpreter's environment), MODES (default "asis counted repaired"), PEER_REF
# (default 1.4.0), PVESIM_PYTHON (default .venv/bin/python of this repository), SPEED (simulated clock, default 50).
#   asis      as ansible-test runs a target: the first failure ends it
#   counted   the play sets ignore_errors, so every task runs and is counted (summarize.py)
#   repaired  counted, on targets whose assert conditions lost their Jinja delimiters (repair_asserts.py): evidence
#             of which failures are the suite's own templating
# The targets name no api_port: pvesim listens on 8006. They create and destroy VMs, so the simulator is fresh for
# every target (seed cluster: the shared NFS storage takes qcow2 images, which the move-disk task needs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
[ $# -eq 2 ] || { echo "usage: $0 PEER_GIT OUT" >&2; exit 2; }
peer_git=$1
out=$(mkdir -p "$2" && cd "$2" && pwd)
ref=${PEER_REF:-1.4.0}
pvesim_python=${PVESIM_PYTHON:-$repo/.venv/bin/python}
targets="proxmox proxmox_pool proxmox_template"

# The collection (from the ansible wheel, as the CI peer test gets it) with the targets inside its tree: a playbook
# inside a collection resolves the targets' short module names, as under ansible-test.
collections=$out/collections
PYTHON=$pvesim_python bash "$repo/tools/dev/fetch_peer_collection.sh" "$collections" >/dev/null
integration=$collections/ansible_collections/community/proxmox/tests/integration
rm -rf "$integration" && mkdir -p "$integration/targets"
for target in $targets; do
    mkdir -p "$integration/targets/$target"
    git --git-dir="$(git -C "$peer_git" rev-parse --absolute-git-dir)" archive "$ref" "tests/integration/targets/$target" |
        tar -x -C "$integration/targets/$target" --strip-components=4
done
"$pvesim_python" "$here/repair_asserts.py" "$integration/targets" "$integration/targets-repaired"

start_pvesim() {
    rm -rf "$out/state" && mkdir -p "$out/state"
    PYTHONPATH=$repo/tools/pvesim "$pvesim_python" -m pvesim serve --port 8006 --seed cluster \
        --speed "${SPEED:-50}" --state-dir "$out/state" >"$out/pvesim.log" 2>&1 &
    pvesim_pid=$!
    for _ in $(seq 100); do [ -f "$out/state/connection.json" ] && return 0; sleep 0.1; done
    echo "pvesim did not start: $(cat "$out/pvesim.log")" >&2
    return 1
}

write_vars() {
    "$pvesim_python" - "$out/state/connection.json" "$out/vars.json" <<'PY'
import json, sys
conn = json.load(open(sys.argv[1]))
# The variables the three targets read (their own defaults: proxmox_pool's poolid/member/member_type).
variables = {
    "api_host": "127.0.0.1", "user": "root", "domain": "pam", "api_password": conn["root_password"],
    "validate_certs": True, "node": conn["node"], "storage": "local-lvm", "from_vmid": conn["template_vmid"],
    "disk": "virtio0", "target_storage": "shared", "target_format": "qcow2", "target_vm": 150, "target_disk": "virtio1",
}
with open(sys.argv[2], "w", encoding="utf-8") as handle:
    json.dump(variables, handle)
PY
    chmod 600 "$out/vars.json"
    # system CAs plus the simulator's: the template target pip-installs from PyPI under the same REQUESTS_CA_BUNDLE
    cat /etc/ssl/certs/ca-certificates.crt "$out/state/pvesim-ca.pem" >"$out/ca-bundle.pem"
}

write_play() {  # target mode
    local ignore=""
    [ "$2" != asis ] && ignore="  ignore_errors: true"
    cat >"$integration/play-$1.yml" <<PLAY
- hosts: localhost
  connection: local
  gather_facts: true
$ignore
  environment:
    REQUESTS_CA_BUNDLE: $out/ca-bundle.pem
  pre_tasks:
    - name: The second VM the suite's move-disk task assumes (the wrapper's, not the suite's)
      community.proxmox.proxmox_kvm:
        api_host: "{{ api_host }}"
        api_user: "{{ user }}@{{ domain }}"
        api_password: "{{ api_password }}"
        node: "{{ node }}"
        vmid: "{{ from_vmid }}"
        newid: "{{ target_vm }}"
        clone: debian-13
        name: peer-target
        full: true
        storage: "{{ storage }}"
        timeout: 60
      when: "'$1' == 'proxmox'"
  roles:
    - $1
PLAY
}

for core in ${CORES:-2.18 2.19}; do
    venv=$out/venv-$core
    if [ ! -x "$venv/bin/ansible-playbook" ]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install -q "ansible-core==$core.*" proxmoxer requests
    fi
    for mode in ${MODES:-asis counted repaired}; do
        result=$out/results/core-$core-$mode
        rm -rf "$result" && mkdir -p "$result"
        roles=targets
        [ "$mode" = repaired ] && roles=targets-repaired
        for target in $targets; do
            "$venv/bin/pip" install -q proxmoxer requests_toolbelt  # the template target removes and downgrades them
            start_pvesim
            write_vars
            write_play "$target" "$mode"
            rc=0
            ANSIBLE_ROLES_PATH=$integration/$roles ANSIBLE_COLLECTIONS_PATH=$collections \
                ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false ANSIBLE_PYTHON_INTERPRETER=$venv/bin/python \
                ANSIBLE_CALLBACK_PLUGINS=$here ANSIBLE_CALLBACK_RESULT_FORMAT=yaml PEER_TASKLOG=$result/tasks-$target.jsonl \
                "$venv/bin/ansible-playbook" -i localhost, "$integration/play-$target.yml" -e "@$out/vars.json" \
                >"$result/$target.log" 2>&1 || rc=$?
            kill "$pvesim_pid"; wait "$pvesim_pid" 2>/dev/null || true
            echo "core $core $mode $target: rc=$rc $(grep -E '^localhost' "$result/$target.log" | tr -s ' ')"
        done
        "$pvesim_python" "$here/summarize.py" "$result" | tee "$result/summary.txt"
    done
done
