#!/usr/bin/env bash
# ThreadSanitizer run of the tiering and restore tests (test_tiering.py,
# which drives the evictor, segment writers and restore workers at once),
# then passthrough opens and writes over cold data (test_overlay.py).
# Too slow for every CI run: see docs/testing.md ("Hardening") for how long it takes.
# Its own build dir (build-tsan, clang, -DSPW_SANITIZE=thread); reports go
# through the harness like ASan's, suppressions in tests/sanitizer/tsan.supp.
#   tests/tsan.sh [unittest args, e.g. TestStraddleUnderPressure]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/deps.sh"
build="$top/build-tsan"
t0=$SECONDS
fuse=$(spw_libfuse "$top") # the libfuse users get: passthrough opens in play
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	-DCMAKE_PREFIX_PATH="$fuse" -DSPW_SANITIZE=thread >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "tsan: build $((SECONDS - t0))s"
t1=$SECONDS
rc=0
python3 "$top/tests/integration/test_tiering.py" --build "$build" "$@" || rc=$?
echo "tsan: test_tiering $((SECONDS - t1))s, status $rc"
if [ $# -eq 0 ]; then
	t1=$SECONDS
	python3 "$top/tests/integration/test_passthrough.py" --build "$build" || rc=$?
	echo "tsan: test_passthrough $((SECONDS - t1))s, status $rc"
	t1=$SECONDS
	python3 "$top/tests/integration/test_overlay.py" --build "$build" OverlayTest \
		OverlayDurabilityTest || rc=$?
	echo "tsan: test_overlay $((SECONDS - t1))s, status $rc"
fi
exit $rc
