#!/usr/bin/env bash
# Run ansible-test sanity on a copy of this checkout laid out as ansible_collections/vmanyware/proxmox.
# ansible-test needs that layout, and its pip bootstrap script is served from a cache we pre-fill
# (tools/dev/get_pip_offline.py) because its download host is unreachable here.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
venv=${VENV:-$repo/.venv}
build=${SANITY_BUILD_DIR:-$repo/build/sanity}
pip_version=$("$venv/bin/python" - <<'PY'
import ansible_test._internal.python_requirements as r, inspect, re
src = inspect.getsource(r)
print(re.search(r"pip='([0-9.]+)'", src).group(1))
PY
)
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
cp "$repo/tools/dev/get_pip_offline.py" "$cache/get_pip_${pip_version//./_}.py"

dest="$build/ansible_collections/vmanyware/proxmox"
rm -rf "$build"
mkdir -p "$dest"
# Tracked and new (not ignored) files, exactly what a commit of the work tree would hold.
(cd "$repo" && git ls-files -z -co --exclude-standard | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' \
  | tar --null -T - -cf -) | tar -xf - -C "$dest"
cd "$dest"
git init -q . && git add -A >/dev/null
export PATH="$venv/bin:$PATH"
exec ansible-test sanity --venv --python 3.11 --color no "$@"
