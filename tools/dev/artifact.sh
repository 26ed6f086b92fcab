#!/usr/bin/env bash
# The collection as users get it: build the tarball, install it into a fresh collections path (nothing of this checkout
# on ANSIBLE_COLLECTIONS_PATH), then use it from there: ansible-doc for every module of the action group, and the plan
# playbook on the bundled examples. Uses $VENV (default .venv); CI runs it for the newest and the oldest ansible-core.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=$(cd "${VENV:-$repo/.venv}" && pwd)
export PATH="$venv/bin:$PATH"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
version=$(ansible --version)
echo "== artifact with ${version%%$'\n'*}"
ansible-galaxy collection build --force --output-path "$work/dist" "$repo" >/dev/null
tarball=$(ls "$work"/dist/vmanyware-proxmox-*.tar.gz)
caches='\.mypy_cache|\.ruff_cache|\.coverage[^/]*|\.plugin-cache\.yaml|\.pytest_cache|\.hypothesis|\.cache|\.molecule|\.ansible|\.venv'
if tar -tzf "$tarball" | grep -E "(^|/)($caches)(/|\$)"; then
  echo "caches in $tarball (add them to build_ignore in galaxy.yml)" >&2
  exit 1
fi
# What a user gets and nothing of the development setup (build_ignore in galaxy.yml; tests/integration/test_artifact.py too).
shipped="FILES.json LICENSE MANIFEST.json README.md awx bindep.txt changelogs docs examples execution-environment.yml meta playbooks plugins"
shipped="$shipped requirements.txt roles"
tops=$(tar -tzf "$tarball" | cut -d/ -f1 | sort -u | xargs)
[ "$tops" = "$(tr ' ' '\n' <<<"$shipped" | sort | xargs)" ] || { echo "the tarball holds: $tops; expected: $shipped" >&2; exit 1; }
echo "tarball: $(stat -c %s "$tarball") bytes, top level: $tops"
export ANSIBLE_COLLECTIONS_PATH="$work/collections"
ansible-galaxy collection install --collections-path "$work/collections" "$tarball" >/dev/null
installed="$work/collections/ansible_collections/vmanyware/proxmox"
cd "$work"  # away from the checkout: nothing resolves to it
modules=$(python - "$installed/meta/runtime.yml" <<'PY'
import sys, yaml
print(" ".join(yaml.safe_load(open(sys.argv[1]))["action_groups"]["proxmox"]))
PY
)
fqcns=$(for module in $modules; do printf 'vmanyware.proxmox.%s ' "$module"; done)
# One ansible-doc run for all modules; every page must come from the installed tarball.
# shellcheck disable=SC2086
count=$(ansible-doc --json $fqcns | python -c '
import json, sys
docs, root = json.load(sys.stdin), sys.argv[1]
wrong = [name for name, page in docs.items() if not page["doc"]["filename"].startswith(root + "/")]
sys.exit("not from the installed tarball: %s" % wrong) if wrong or not docs else print(len(docs))' "$installed")
[ "$count" -eq "$(wc -w <<<"$modules")" ] || { echo "ansible-doc documented $count of the modules: $modules" >&2; exit 1; }
echo "ansible-doc: $count modules from the installed tarball"
out=$(ansible-playbook -i localhost, -c local vmanyware.proxmox.plan -e vmanyware_catalog_path="$installed/examples/catalog.yml" \
  -e vmanyware_definition_path="$installed/examples/definition.yml" -e vmanyware_target_vmid=201)
plan_hash=5873419e09d564384061d4dffd58480fcc2e768a4cd773163e9cbde3c14957df
grep -q "planHash    $plan_hash" <<<"$out" || { echo "$out" >&2; echo "the plan playbook of the installed tarball did not print the plan" >&2; exit 1; }
echo "plan playbook from the installed tarball: planHash $plan_hash"
