#!/bin/sh
# spillway foundation benchmark (issue 2): tmpfs vs passthrough_ll vs spillway.
# usage: bench/bench_fs.sh [--size 1G] [--quick] [--build BUILD] [--help]
# The work is done by bench_fs.py (python3 stdlib); see bench/README.md.
exec python3 "$(dirname "$0")/bench_fs.py" "$@"
