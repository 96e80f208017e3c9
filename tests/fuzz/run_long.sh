#!/usr/bin/env bash
# Run every fuzz target for SECONDS each (default 300) on its corpus, then
# print executions and coverage per target. Needs the hardening build
# (tests/sanitize.sh makes it; BUILD defaults to build-asan). New inputs go
# to BUILD/tests/fuzz/fuzz-out/<target>/new; crashes to .../artifacts/ —
# copy a crash into tests/fuzz/corpus/<target>/ as a regression input once
# it is fixed.
#   tests/fuzz/run_long.sh [seconds] [target...]
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-"$top/build-asan"}
secs=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(journal_record journal_replay checkpoint segment s3xml
	s3_headers credentials options sigv4 xattr)
fail=0
printf '%-16s %10s %8s %8s %s\n' target execs cov ft result
for t in "${targets[@]}"; do
	bin="$build/tests/fuzz/fuzz_$t"
	out="$build/tests/fuzz/fuzz-out/$t"
	mkdir -p "$out/new" "$out/artifacts"
	maxlen=4096
	case $t in segment) maxlen=65536 ;; journal_replay | checkpoint) maxlen=16384 ;; esac
	"$bin" -max_total_time="$secs" -max_len=$maxlen -print_final_stats=1 \
		-artifact_prefix="$out/artifacts/" "$out/new" "$top/tests/fuzz/corpus/$t" \
		>"$out/long.log" 2>&1
	rc=$?
	execs=$(grep -a 'stat::number_of_executed_units' "$out/long.log" | awk '{print $2}')
	cov=$(grep -aoE 'cov: [0-9]+' "$out/long.log" | tail -1 | awk '{print $2}')
	ft=$(grep -aoE 'ft: [0-9]+' "$out/long.log" | tail -1 | awk '{print $2}')
	res=ok
	[ $rc -eq 0 ] || { res="FAILED (log $out/long.log)"; fail=1; }
	printf '%-16s %10s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$res"
done
exit $fail
