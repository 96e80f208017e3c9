#!/usr/bin/env bash
# spillway journal benchmark (durability): metadata ops/s with the journal on
# vs off vs tmpfs, remount time with 1M files (clean and after kill -9), RSS,
# state_dir size, fsync of a 64 MiB file vs fio and dd on the cold disk.
# usage: bash bench/bench_journal.sh [--quick] [--build BUILD] [--help]
# As root on Debian 12: installs what is missing (apt-get), builds spillway
# with cmake into REPO/build unless --build BUILD (or $SPILLWAY_BUILD) is
# given, then runs bench_journal.py (python3 stdlib); see bench/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
build=${SPILLWAY_BUILD:-}
prev=
for a in "$@"; do
	case $a in
	-h | --help) exec python3 "$here/bench_journal.py" --help ;;
	--build=*) build=${a#--build=} ;;
	esac
	[ "$prev" = --build ] && build=$a
	prev=$a
done
if [ "$(id -u)" != 0 ]; then
	echo "bench_journal.sh: run as root (FUSE mounts, apt-get)" >&2
	exit 1
fi

pkgs=(fio fuse3 python3 build-essential util-linux coreutils)
[ -n "$build" ] || pkgs+=(cmake pkg-config libfuse3-dev liburing-dev libcurl4-openssl-dev
	libssl-dev libxml2-dev libcmocka-dev)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
		missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "bench_journal.sh: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
		{ echo "bench_journal.sh: apt-get install failed" >&2; exit 1; }
fi
[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true

if [ -z "$build" ]; then
	build=$top/build
	echo "bench_journal.sh: building spillway in $build" >&2
	if [ ! -f "$build/CMakeCache.txt" ]; then
		cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	fi
	cmake --build "$build" --target spillway -j"$(nproc)" >/dev/null
	set -- --build "$build" "$@"
fi
exec python3 "$here/bench_journal.py" "$@"
