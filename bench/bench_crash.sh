#!/usr/bin/env bash
# Thousands of crash states (tests/crash/README.md): test_crash_states with a
# bigger budget, once per seed, with namespace operations kept in order (what
# ext4/xfs/btrfs do) and, with --unordered, also lost out of order (POSIX).
# usage: bash bench/bench_crash.sh [--build BUILD] [--states N] [--seeds "1 2 3"]
#                                  [--unordered] [--assume-durable REGEX] [--keep DIR]
# --assume-durable: namespace operations on matching paths count as durable at
# once, to look past a finding already reported (none open now: the state_dir
# mkdir it was made for is fsync'd since).
# Needs a built tree (tests/run_all.sh or spw_build of tests/deps.sh: the
# daemon, spillway-fsck and tests/spw_record.so) and root for the mounts.
# Prints each run's summary lines and failures; exit 1 if any run failed.
# About 0.15 s a state on 2 cores: the default 3 seeds x 2000 states take
# about 15 minutes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${SPILLWAY_BUILD:-$top/build}
states=2000
seeds="1 2 3"
unordered=0
keep=
assume=
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift ;;
	--build=*) build=${1#--build=} ;;
	--states) states=$2; shift ;;
	--seeds) seeds=$2; shift ;;
	--unordered) unordered=1 ;;
	--keep) keep=$2; shift ;;
	--assume-durable) assume=$2; shift ;;
	-h | --help) sed -n '2,13p' "$0"; exit 0 ;;
	*) echo "bench_crash.sh: unknown argument $1" >&2; exit 2 ;;
	esac
	shift
done
if [ "$(id -u)" != 0 ]; then
	echo "bench_crash.sh: run as root (FUSE mounts)" >&2
	exit 1
fi
for f in spillway spillway-fsck tests/spw_record.so; do
	[ -e "$build/$f" ] || { echo "bench_crash.sh: $build/$f is missing: build first" >&2; exit 1; }
done
fail=0
total=0
start=$(date +%s)
for seed in $seeds; do
	for mode in ordered unordered; do
		[ $mode = unordered ] && [ $unordered = 0 ] && continue
		echo "== seed $seed, namespace operations $mode, $states states"
		out=$(mktemp)
		env SPW_CRASH_STATES="$states" SPW_CRASH_SEED="$seed" \
			SPW_CRASH_UNORDERED=$([ $mode = unordered ] && echo 1 || echo 0) \
			SPW_CRASH_MAX_FAILURES=20 SPW_CRASH_TIMEOUT=$((states + 300)) \
			${keep:+SPW_CRASH_KEEP="$keep/$seed-$mode"} \
			${assume:+SPW_CRASH_ASSUME_DURABLE="$assume"} \
			python3 "$top/tests/crash/test_crash_states.py" --build "$build" -k test_crash_states \
			>"$out" 2>&1 && rc=0 || rc=$?
		grep '^\[crash\]' "$out" || true
		if [ $rc != 0 ]; then
			fail=1
			sed -n '/^AssertionError/,/^----------/p' "$out" | head -200
		fi
		n=$(sed -n 's/^\[crash\] \([0-9]*\) states in.*/\1/p' "$out")
		total=$((total + ${n:-0}))
		rm -f "$out"
	done
done
echo "== $total states in $(($(date +%s) - start)) s: $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
