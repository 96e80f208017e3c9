#!/usr/bin/env bash
# Install what is missing, build, run every test (unit + integration on real
# mounts); then the hardening run: unit tests, short fuzz runs and a subset of
# the integration tests on an ASan+UBSan build (tests/sanitize.sh).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/deps.sh"
spw_deps
spw_s3_deps "$top"
build="$top/build"
spw_build "$top" "$build"
# mount -t fuse.spillway (tested) finds the program on the default PATH
cmake --install "$build" >/dev/null
(cd "$build" && ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@")
"$top/tests/sanitize.sh"
