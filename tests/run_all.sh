#!/usr/bin/env bash
# Install what is missing, build, run every test (unit + integration on real
# mounts); then the hardening runs: unit tests, short fuzz runs and a subset of
# the integration tests on an ASan+UBSan build (tests/sanitize.sh), then the
# unit tests and the concurrent integration tests on a ThreadSanitizer build
# (tests/tsan.sh). Both hardening runs always run; either failing fails this.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/deps.sh"
spw_deps
spw_s3_deps "$top"
build="$top/build"
# the debug-only checks on (CMakeLists.txt, SPW_CHECKS): every test runs
# with the chunk state moves, the one-inode-lock rule and assert() checked
spw_build "$top" "$build" -DSPW_CHECKS=ON
# Python clients of the tests (Ray, PyTorch, safetensors, NumPy): a venv under
# the build tree, made once from tests/requirements-py.txt
. "$top/tests/pydeps.sh"
spw_py_deps "$top" "$build"
# mount -t fuse.spillway (tested) finds the program on the default PATH
cmake --install "$build" >/dev/null
(cd "$build" && ctest --output-on-failure --timeout 900 -j"$(nproc)" "$@")
# ctest ran xfstests' subset (xfstests_subset) when its source is there;
# else this says how to get it
bash "$top/tests/xfstests/run.sh" --source || true
# The same sources still build against the system's libfuse when it is older
# than 3.17 (Debian 12's 3.14: passthrough compiled out); its unit tests run.
if ! pkg-config --atleast-version=3.17 fuse3; then
	old="$top/build-oldfuse"
	echo "== build against the system's libfuse $(pkg-config --modversion fuse3) (no passthrough)"
	spw_build_oldfuse "$top" "$old"
	(cd "$old" && ctest --output-on-failure --timeout 300 -j"$(nproc)" -L unit)
fi
rc=0
"$top/tests/sanitize.sh" || rc=1
"$top/tests/tsan.sh" || rc=1
exit $rc
