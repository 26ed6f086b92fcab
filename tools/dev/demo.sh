#!/usr/bin/env bash
# The README's main command (make demo): start the bundled Proxmox VE simulator with the demo
# datacenter, run the example playbook against it with verified TLS, then stop the simulator.
# Against a real Proxmox VE, run the same playbook with PROXMOX_* set instead (README.md).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$repo/.venv}
state=$(mktemp -d "${TMPDIR:-/tmp}/vmanyware-demo.XXXXXX")
"$venv/bin/python" -m pvesim serve --port 0 --state-dir "$state/sim" --seed demo --speed "${DEMO_SPEED:-20}" \
  > "$state/pvesim.log" 2>&1 &
sim=$!
cleanup() { kill -TERM "$sim" 2>/dev/null || true; wait "$sim" 2>/dev/null || true; rm -rf "$state"; }
trap cleanup EXIT
for _ in $(seq 1 100); do [ -s "$state/sim/connection.json" ] && break; sleep 0.1; done
[ -s "$state/sim/connection.json" ] || { cat "$state/pvesim.log" >&2; exit 1; }
eval "$("$venv/bin/python" - "$state/sim/connection.json" <<'PY'
import json, shlex, sys
c = json.load(open(sys.argv[1]))
env = {"PROXMOX_HOST": c["host"], "PROXMOX_PORT": c["port"], "PROXMOX_TOKEN_ID": c["tokens"]["full"]["id"],
       "PROXMOX_TOKEN_SECRET": c["tokens"]["full"]["secret"], "PROXMOX_CA_PATH": c["ca_file"]}
print("\n".join("export %s=%s" % (k, shlex.quote(str(v))) for k, v in env.items()))
PY
)"
export VMANYWARE_JOURNAL_DIR="$state/journal"
export VMANYWARE_PROVISIONING_ENABLED=true
echo "pvesim listening on https://${PROXMOX_HOST}:${PROXMOX_PORT} (verified with its CA)"
run() {
  "$venv/bin/ansible-playbook" -i "$repo/examples/inventory.yml" vmanyware.proxmox.provision -e vmanyware_catalog_path="$repo/examples/catalog.yml" \
    -e vmanyware_definition_path="$repo/examples/definition.yml" -e vmanyware_target_vmid=201 \
    -e vmanyware_confirmation_file="$state/confirm.yml" -e vmanyware_known_hosts_file="$state/known_hosts" "$@"
}
echo "== 1/2: plan and preflight; without a confirmation the playbook prints one and changes nothing"
run
echo "== 2/2: the same playbook with the reviewed confirmation: every stage, then the handoff"
run -e @"$state/confirm.yml" "$@"
