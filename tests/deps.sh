#!/usr/bin/env bash
# Install the Debian packages spillway builds and tests with, if missing.
# Sourced by examples/demo.sh and tests/run_all.sh; needs root on Debian 12.
spw_deps() {
	local pkgs=(build-essential cmake pkg-config libfuse3-dev fuse3 liburing-dev
		libcurl4-openssl-dev libssl-dev libxml2-dev libcmocka-dev python3 python3-numpy fio attr man-db groff-base fiu-utils
		rclone mergerfs s3fs clang-14 libclang-rt-14-dev)
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

# The S3 tests run a real S3-compatible server (@20minutes/s3rver, pinned in
# tests/s3/package-lock.json) on loopback.
spw_s3_deps() {
	local top=$1
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		export DEBIAN_FRONTEND=noninteractive
		apt-get install -y -qq nodejs npm >/dev/null || { echo "cannot install node" >&2; return 1; }
	fi
	if [ ! -d "$top/tests/s3/node_modules/@20minutes/s3rver" ]; then
		(cd "$top/tests/s3" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
			{ echo "npm ci in tests/s3 failed" >&2; return 1; }
	fi
}

# The hardening build (README "Hardening"): clang, ASan+UBSan, the libFuzzer
# targets of tests/fuzz. Its own build dir; never installed.
spw_build_asan() {
	local top=$1 build=$2
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
		-DSPW_SANITIZE=address,undefined -DSPW_FUZZ=ON >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}

spw_build() {
	local top=$1 build=$2
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}
