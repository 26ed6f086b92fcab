#!/usr/bin/env bash
# Lint the collection's plugin and role documentation with antsibull-docs, then render the module, filter and role
# reference pages (Markdown) into docs/reference/ with tools/dev/render_reference.py.
# Before rendering it (re)writes the RETURN blocks of the stage modules, cleanup and the preflights from
# tools/dev/return_docs.yml (tools/dev/gen_return_docs.py; with --check it fails when one is out of date).
#   tools/dev/build_docs.sh           lint, then (re)write docs/reference/
#   tools/dev/build_docs.sh --check   lint, then fail when docs/reference/ differs from a fresh rendering (CI)
# LINT=0 skips the lint (the rendering alone takes ~2 s; the lint ~20-30 s, most of it rstcheck).
# Uses $VENV (default .venv) and ANSIBLE_COLLECTIONS_PATH (default build/collections, linked like make collection-link).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$repo/.venv}
export PATH="$venv/bin:$PATH"
if [ -z "${ANSIBLE_COLLECTIONS_PATH:-}" ]; then
  export ANSIBLE_COLLECTIONS_PATH="$repo/build/collections"
  mkdir -p "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/vmanyware"
  ln -sfn "$repo" "$ANSIBLE_COLLECTIONS_PATH/ansible_collections/vmanyware/proxmox"
fi
mode=()
[ "${1:-}" = "--check" ] && mode=(--check)
cd "$repo"
if [ "${LINT:-1}" != 0 ]; then
  # Run from the collection root on the checkout itself: antsibull-docs copies the git-tracked and untracked,
  # not ignored files to a temporary collection tree, renders every plugin and role page to RST and validates
  # the schema, the markup and the references to this collection (and rstchecks the RST).
  echo "== antsibull-docs lint-collection-docs --plugin-docs ."
  antsibull-docs lint-collection-docs --plugin-docs .
fi
# The RETURN blocks of the stage modules, cleanup and the preflights come from tools/dev/return_docs.yml.
echo "== RETURN from tools/dev/return_docs.yml ${mode[*]:-}"
"$venv/bin/python" tools/dev/gen_return_docs.py "${mode[@]}"
echo "== render docs/reference ${mode[*]:-}"
"$venv/bin/python" tools/dev/render_reference.py "${mode[@]}" docs/reference
