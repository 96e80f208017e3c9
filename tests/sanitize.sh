#!/usr/bin/env bash
# The hardening run of tests/run_all.sh, on its own build dir (build-asan:
# clang, -DSPW_SANITIZE=address,undefined -DSPW_FUZZ=ON):
#   1. every unit test under ASan+UBSan (LeakSanitizer at exit);
#   2. each fuzz target for SPW_FUZZ_RUNS (20000) iterations on its corpus;
#   3. integration tests under ASan+UBSan: POSIX parity, passthrough opens
#      (readers and writers mixed, pressure, kill -9), the racy tiering
#      paths, small objects, the kill -9 durability rounds
#      (SPW_CRASH_ROUNDS=4), a short fsx and writes over cold data
#      (overlays: random writes, folds, kill -9, S3), admission both ways
#      (reads once, re-reads, write-around, its kill -9, fsx -A), extents
#      and their online scrub. The
#      builds abort on an illegal chunk state move, a second inode lock
#      or a failed assert() (SPW_CHECKS). The harness fails a test when
#      any program it started wrote a sanitizer report.
# Usage: tests/sanitize.sh [BUILD_DIR]   (deps as for tests/run_all.sh)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/deps.sh"
asan=${1:-"$top/build-asan"}
t0=$SECONDS
spw_build_asan "$top" "$asan"
echo "sanitize: build $((SECONDS - t0))s"
t1=$SECONDS
(cd "$asan" && SPW_S3_DIR="$top/tests/s3" ctest --output-on-failure --timeout 900 -j"$(nproc)" -L 'unit|fuzz')
echo "sanitize: unit tests and fuzz runs $((SECONDS - t1))s"
t1=$SECONDS
fail=0
# run NAME "VAR=value ..." [unittest args]
run() {
	local name=$1 envs=$2
	shift 2
	echo "sanitize: $name"
	# shellcheck disable=SC2086 # envs is a list of VAR=value words
	env $envs python3 "$top/tests/integration/$name.py" --build "$asan" "$@" \
		>"$asan/$name.sanitize.log" 2>&1 ||
		{ fail=1; echo "FAILED: $name (log $asan/$name.sanitize.log)"; tail -40 "$asan/$name.sanitize.log"; }
}
# a subset that keeps the whole README test command (tests/tsan.sh runs
# after this) under 25 minutes on 2 cores: every POSIX op, the tiering
# paths that race (spills vs writes, concurrent restores, GC, restores that
# cannot get room), kill -9 rounds and fsx against a tiny hot tier
run test_posix ""
run test_passthrough ""
run test_tiering "" TestWriteSpillRace TestConcurrentRestore TestGC TestStraddleUnderPressure
run test_small_objects "" TestEvictFreesEverything TestNoWaitForRoomThatCannotCome
run test_durability "SPW_CRASH_ROUNDS=4" TestCrash
run test_fsx "SPW_FSX_SEEDS=1,2 SPW_FSX_OPS=3000"
run test_overlay "" OverlayTest OverlayDurabilityTest OverlayS3Test
run test_admission ""
run test_extents ""
run test_scrub ""
run test_extent_evict ""
run test_extent_demote ""
echo "sanitize: integration subset $((SECONDS - t1))s (total $((SECONDS - t0))s)"
exit $fail
