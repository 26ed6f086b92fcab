#!/usr/bin/env bash
# Copyright (c) vmanyware developers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# benchmarks/run.sh [run.py options]: vmanyware.proxmox vs community.proxmox against pvesim with the
# venv's interpreter (VENV, default .venv). See docs/benchmarks.md; --smoke for the CI size.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=${VENV:-$repo/.venv}
exec "$venv/bin/python" "$repo/benchmarks/run.py" "$@"
