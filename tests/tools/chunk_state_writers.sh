#!/bin/sh
# chunk_state_writers.sh — a chunk's state has one writer, chunk_set_state()
# in index/chunk_state.c (which asserts the legal moves in debug builds); the
# compiler cannot enforce that, this does: exit 1, listing them, when C code in
# index/, tier/, fs/ or mount-helpers/ assigns `->state = CHUNK_...` or
# `.state = CHUNK_...` anywhere else (unit-test fixtures in tests/ may).
# Usage: chunk_state_writers.sh [SRCDIR]
cd "${1:-.}" || exit 2
hits=$(grep -rnE '(->|\.)state[[:space:]]*=[[:space:]]*CHUNK_' --include='*.c' --include='*.h' \
	index tier fs mount-helpers | grep -v '^index/chunk_state\.c:')
if [ -n "$hits" ]; then
	echo "chunk state written outside chunk_set_state() (index/chunk_state.c):"
	echo "$hits"
	exit 1
fi
exit 0
