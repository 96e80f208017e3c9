#!/usr/bin/env bash
# Install what is missing, build, run every test (unit + integration on real mounts).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/deps.sh"
spw_deps
build="$top/build"
spw_build "$top" "$build"
cd "$build"
ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@"
