#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# One row of the support matrix (README.md, docs/development.md): an ansible-core minor version on one Python, in a venv of
# its own (.venv-core-<minor>), with only what the collection and its tests need at run time (requirements.txt, the test
# runner, the simulator); the development toolchain (.venv: ansible-lint, molecule, mypy, ...) stays on the development
# venv's core.
#
#   tools/dev/core_lane.sh <minor> [part ...]      e.g. tools/dev/core_lane.sh 2.21 unit integration demo artifact
#
# Parts (default: unit artifact):
#   unit         tests/unit (the reference-page rendering check needs the docs toolchain, the same on every core: .venv), and
#                tests/integration/test_in_process_action.py: this core is a row of the matrix, the in-process path runs here
#                and the fallback to the module process works
#   integration  the simulator integration suite on this core: the tests that run real ansible / ansible-playbook processes
#                through the collection's playbooks, roles and modules against the simulator (INTEGRATION below), and the
#                simulator's API and schema tests on this Python. The whole of tests/integration and tools/pvesim/tests
#                (415 tests here, about 26 minutes on the shared 2-core machine) runs on the development venv (make pytest);
#                what differs between cores is ansible-core itself, which these exercise
#   demo         tools/dev/demo.sh (make demo) on this core
#   artifact     tools/dev/artifact.sh: the built tarball installed fresh, ansible-doc for every module, the plan playbook
#
# Each row runs on one Python (CORE_LANE_PYTHON overrides): the oldest core on the oldest Python, the newest on the newest,
# 2.20 on 3.12 (2.19 is the development venv's, on the system 3.11). A Python 3.X is python3.X on PATH, else
# ~/.pyenv/versions/3.X.*/bin/python3.X (these machines carry 3.12 and 3.13 under pyenv beside the system 3.11); when the
# preferred one is missing the next one the core supports is taken.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
minor=${1:?usage: core_lane.sh <ansible-core minor, e.g. 2.21> [unit|integration|demo|artifact ...]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(unit artifact)
# The Pythons each core runs on here, preferred first (ansible-core 2.20 and 2.21 need Python 3.12 or later).
case "$minor" in
  2.18|2.19) pythons="3.11 3.12 3.13" ;;
  2.20) pythons="3.12 3.13" ;;
  2.21) pythons="3.13 3.12" ;;
  *) echo "core_lane.sh: ansible-core $minor is not a row of the support matrix (2.18 to 2.21)" >&2; exit 2 ;;
esac
find_python() {
  local version candidate
  for version in $pythons; do
    candidate=$(command -v "python$version" 2>/dev/null || true)
    # A pyenv shim for a version the shim is not set to fails; only a Python that runs counts.
    if [ -n "$candidate" ] && "$candidate" -c '' 2>/dev/null; then echo "$candidate"; return; fi
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/python"$version"; do
      if [ -x "$candidate" ] && "$candidate" -c '' 2>/dev/null; then echo "$candidate"; return; fi
    done
  done
  echo "core_lane.sh: no Python ($pythons) for ansible-core $minor on this machine" >&2
  exit 2
}
python=${CORE_LANE_PYTHON:-$(find_python)}
next="${minor%.*}.$(( ${minor#*.} + 1 ))"
core="ansible-core>=$minor,<$next"
venv=${CORE_LANE_VENV:-$repo/.venv-core-$minor}
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
stamp="$venv/.installed-$(printf '%s-py%s' "$core" "$pyver" | tr -c 'A-Za-z0-9.' _)"
if [ ! -f "$stamp" ] || [ "$stamp" -ot "$repo/requirements.txt" ] || [ "$stamp" -ot "$repo/requirements-test.txt" ] \
    || [ "$stamp" -ot "$repo/tools/pvesim/pyproject.toml" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # The test packages the lane's parts import, with requirements-test.txt's ranges (kept there only); proxmoxer is the
  # simulator tests' independent client, not a runtime dependency.
  # shellcheck disable=SC2046
  "$venv/bin/python" -m pip install -q "$core" -r "$repo/requirements.txt" \
    $(grep -E '^(pytest|proxmoxer|hypothesis|rfc8785)[<>=]' "$repo/requirements-test.txt") "cryptography>=42" -e "$repo/tools/pvesim"
  touch "$stamp"
fi
# The demo finds this checkout as vmanyware.proxmox the way make does (make collection-link), also when run directly.
if [ -z "${ANSIBLE_COLLECTIONS_PATH:-}" ]; then
  export ANSIBLE_COLLECTIONS_PATH="$repo/build/collections"
  mkdir -p "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/vmanyware"
  [ "$(readlink "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/vmanyware/proxmox")" = "$repo" ] \
    || ln -sfn "$repo" "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/vmanyware/proxmox"
fi
INTEGRATION=(
  tests/integration/test_provision_role.py tests/integration/test_lifecycle.py tests/integration/test_group_defaults.py
  tests/integration/test_direct_modules.py tests/integration/test_vmid_roles.py tests/integration/test_template_playbook.py
  tests/integration/test_container_role.py tests/integration/test_onboarding.py tests/integration/test_vmanyware_plan_module.py
  tests/integration/test_inventory_journal.py tests/integration/test_quickstart.py tests/integration/test_artifact.py
  tools/pvesim/tests/test_api.py tools/pvesim/tests/test_schema.py
  # A minute of retry timing through one module, not of ansible-core (make pytest runs it)
  --deselect tests/integration/test_lifecycle.py::test_unresolvable_dispatch_stays_uncertain_and_is_never_sent
)
label="ansible-core $("$venv/bin/python" -c 'import ansible; print(ansible.__version__)') on Python $pyver"
cd "$repo"
for part in "${parts[@]}"; do
  start=$SECONDS
  echo "== $part with $label"
  case "$part" in
    unit)
      "$venv/bin/python" -m pytest tests/unit tests/integration/test_in_process_action.py -q -p no:cacheprovider \
        --deselect tests/unit/test_docs.py::test_reference_pages_match_a_fresh_rendering ;;
    integration)
      "$venv/bin/python" -m pytest -q -p no:cacheprovider "${INTEGRATION[@]}" ;;
    demo) VENV="$venv" "$repo/tools/dev/demo.sh" ;;
    artifact) VENV="$venv" "$repo/tools/dev/artifact.sh" ;;
    *) echo "core_lane.sh: unknown part $part (unit, integration, demo, artifact)" >&2; exit 2 ;;
  esac
  echo "== $part with $label: passed in $(( SECONDS - start )) s"
done
