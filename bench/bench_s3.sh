#!/bin/sh
# spillway S3 tier benchmark (issue 4): spill to / restore from S3 vs aws s3 cp.
# usage: bench/bench_s3.sh [--size 512M] [--quick] [--build BUILD] [--help]
# The work is done by bench_s3.py (python3 stdlib); see bench/README.md.
exec python3 "$(dirname "$0")/bench_s3.py" "$@"
