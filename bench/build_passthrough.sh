#!/bin/sh
# Build libfuse's passthrough_ll example (the FUSE peer the benchmark compares
# spillway against) from Debian's libfuse3-dev examples.
#
# usage: bench/build_passthrough.sh OUTDIR    -> prints OUTDIR/passthrough_ll
set -eu

out=${1:?usage: build_passthrough.sh OUTDIR}
src=${PASSTHROUGH_SRC:-/usr/share/doc/libfuse3-dev/examples}

for f in passthrough_ll.c passthrough_helpers.h; do
	if [ ! -r "$src/$f" ]; then
		echo "build_passthrough: $src/$f missing (apt-get install libfuse3-dev)" >&2
		exit 1
	fi
done

mkdir -p "$out"
# Compile from a copy so the example's #include "passthrough_helpers.h" resolves
# even if the docs directory ever ships the files compressed elsewhere.
cp "$src/passthrough_ll.c" "$src/passthrough_helpers.h" "$out/"
# shellcheck disable=SC2046
cc -O2 -Wall -o "$out/passthrough_ll" "$out/passthrough_ll.c" \
	$(pkg-config fuse3 --cflags --libs)
echo "$out/passthrough_ll"
