#!/usr/bin/env bash
# The full reliability run (docs/reliability.md): >= 300 crash trials, the whole fault matrix, 20 concurrent
# operations plus racing pairs, 50-client load, >= 10,000 fuzz cases, the secret scan and the TLS refusals.
# Then the figures and the fault table of docs/reliability.md are regenerated from this run's results.
# Usage: tools/dev/reliability.sh [extra pytest args]   (the CI subset is: pytest -m reliability)
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$repo/.venv}
results=$(mktemp -d "${TMPDIR:-/tmp}/vmanyware-reliability.XXXXXX")
cd "$repo"
started=$(date +%s)
VMANYWARE_RELIABILITY_FULL=1 VMANYWARE_RELIABILITY_RESULTS="$results" \
  "$venv/bin/python" -m pytest tests/reliability -p no:cacheprovider -q -rxXf --basetemp "$results/tmp" "$@" \
  2>&1 | tee "$results/pytest.log"
status=${PIPESTATUS[0]}
seconds=$(( $(date +%s) - started ))
"$venv/bin/python" tests/reliability/report.py --results "$results" --seconds "$seconds" --status "$status" \
  --command "tools/dev/reliability.sh"
echo "results: $results (pytest exit status $status, ${seconds}s); docs/reliability.md updated"
exit "$status"
