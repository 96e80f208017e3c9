#!/usr/bin/env bash
# Install the Debian packages spillway builds and tests with, if missing.
# Sourced by examples/demo.sh and tests/run_all.sh; needs root on Debian 12.
spw_deps() {
	local pkgs=(build-essential cmake pkg-config libfuse3-dev fuse3 liburing-dev
		libcurl4-openssl-dev libssl-dev libxml2-dev libcmocka-dev python3 fio attr)
	local missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "installing: ${missing[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			{ echo "apt-get install failed" >&2; return 1; }
	fi
	[ -e /dev/fuse ] || modprobe fuse 2>/dev/null || true
}

spw_build() {
	local top=$1 build=$2
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}
