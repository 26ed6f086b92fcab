#!/usr/bin/env bash
# The oldest ansible-core meta/runtime.yml's requires_ansible admits (2.18), in a venv of its own: the unit tests, then
# tools/dev/artifact.sh (the built tarball installed fresh: ansible-doc for every module, the plan playbook).
# The development venv (.venv) carries the newest ansible-core that installs here; everything else runs there.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${OLDEST_VENV:-$repo/.venv-oldest-core}
core=${OLDEST_CORE:-ansible-core>=2.18,<2.19}
stamp="$venv/.installed-$(printf '%s' "$core" | tr -c 'A-Za-z0-9.' _)"
if [ ! -f "$stamp" ]; then
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "$core" -r "$repo/requirements.txt" "pytest>=8,<10" "hypothesis>=6.100,<7" "rfc8785>=0.1.4,<1" \
    -e "$repo/tools/pvesim"
  touch "$stamp"
fi
echo "== unit tests with $("$venv/bin/python" -c 'import ansible; print("ansible-core", ansible.__version__)')"
cd "$repo"
# The reference-page check needs the docs toolchain and is the same for every ansible-core: it runs in .venv.
"$venv/bin/python" -m pytest tests/unit -q -p no:cacheprovider --deselect tests/unit/test_docs.py::test_reference_pages_match_a_fresh_rendering
VENV="$venv" "$repo/tools/dev/artifact.sh"
