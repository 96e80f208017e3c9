#!/bin/sh
# spillway tiering benchmark (issue 3): spill / restore vs fio on the cold disk,
# time to first byte of a cold file, segment packing, the example pipeline.
# usage: bench/bench_tier.sh [--quick] [--build BUILD] [--cold-root DIR] [--help]
# The work is done by bench_tier.py (python3 stdlib); see bench/README.md.
exec python3 "$(dirname "$0")/bench_tier.py" "$@"
