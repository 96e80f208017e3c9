#!/usr/bin/env bash
# Install the Debian packages spillway builds and tests with, if missing.
# Sourced by examples/demo.sh and tests/run_all.sh; needs root on Debian 12.
spw_deps() {
	local pkgs=(build-essential cmake pkg-config libfuse3-dev fuse3 liburing-dev
		libcurl4-openssl-dev libssl-dev libxml2-dev libcmocka-dev python3 python3-numpy fio attr acl man-db groff-base fiu-utils
		rclone mergerfs s3fs clang libclang-rt-dev meson ninja-build dpkg-dev)
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

# libfuse 3.17 or newer, for FUSE passthrough (docs/passthrough.md); with a
# second argument 3.18, libfuse 3.18 or newer, for FUSE over io_uring
# (io_uring=on, bench/bench_uring.py). The system's when it is new enough
# (Debian 13 has 3.17); otherwise (Debian 12 ships 3.14) Debian's own source
# package, fetched with apt through a private sources list (the machine's
# apt sources are never edited) — 3.17 from Debian 13 (trixie), 3.18 from
# Debian's next release (forky, testing) — built once into
# $top/build/libfuse (3.18: $top/build/libfuse-3.18, with liburing and
# libnuma for its rings). Prints the prefix for CMAKE_PREFIX_PATH, or nothing
# when the system's libfuse is used.
spw_libfuse() {
	local top=$1 want=${2:-3.17}
	local prefix="$top/build/libfuse" suite=trixie name="Debian 13's"
	if [ "$want" = 3.18 ]; then
		prefix="$top/build/libfuse-3.18" suite=forky name="Debian forky's"
	fi
	local src="$prefix-src"
	if pkg-config --atleast-version="$want" fuse3 2>/dev/null; then
		return 0
	fi
	if [ -e "$prefix/lib/pkgconfig/fuse3.pc" ]; then
		echo "$prefix"
		return 0
	fi
	if [ "$want" = 3.18 ] && ! dpkg-query -W -f='${Status}' libnuma-dev 2>/dev/null | grep -q 'install ok installed'; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libnuma-dev >/dev/null ||
			{ echo "spw_libfuse: cannot install libnuma-dev" >&2; return 1; }
	fi
	local uri
	uri=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[ -n "$uri" ] || uri=$(awk '$1 == "deb" && $2 !~ /^\[/ { print $2; exit }' /etc/apt/sources.list 2>/dev/null || true)
	[ -n "$uri" ] || { echo "spw_libfuse: no Debian mirror in the apt sources" >&2; return 1; }
	rm -rf "$src" && mkdir -p "$src/lists/partial" "$src/get" || return 1
	echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $uri $suite main" >"$src/sources.list"
	local apt_opts=(-o "Dir::Etc::sourcelist=$src/sources.list" -o "Dir::Etc::sourceparts=-"
		-o "Dir::State::Lists=$src/lists" -o "APT::Get::List-Cleanup=0" -o "APT::Sandbox::User=root" -qq)
	echo "building libfuse $want+ from $name source package into $prefix" >&2
	apt-get "${apt_opts[@]}" update >&2 &&
		(cd "$src/get" && apt-get "${apt_opts[@]}" source --download-only fuse3 >&2) &&
		(cd "$src/get" && dpkg-source -x --no-check ./fuse3_*.dsc tree >/dev/null) ||
		{ echo "spw_libfuse: could not fetch $name fuse3 source package" >&2; return 1; }
	(cd "$src/get/tree" && meson setup b --prefix="$prefix" --libdir=lib --buildtype=release \
		-Dexamples=false -Dutils=false -Dtests=false >/dev/null && ninja -C b install >/dev/null) ||
		{ echo "spw_libfuse: building libfuse failed" >&2; return 1; }
	pkg-config --atleast-version="$want" "$prefix/lib/pkgconfig/fuse3.pc" ||
		{ echo "spw_libfuse: built libfuse is older than $want" >&2; return 1; }
	rm -rf "$src"
	echo "$prefix"
}

# The hardening build (docs/testing.md, "Hardening"): clang, ASan+UBSan, the libFuzzer
# targets of tests/fuzz. Its own build dir; never installed.
spw_build_asan() {
	local top=$1 build=$2 fuse
	fuse=$(spw_libfuse "$top") || return 1
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
		-DCMAKE_PREFIX_PATH="$fuse" -DSPW_SANITIZE=address,undefined -DSPW_FUZZ=ON \
		-DSPW_CHECKS=ON >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}

# The build users get: linked to libfuse 3.17+ (spw_libfuse). Further
# arguments go to cmake after the defaults: tests/run_all.sh builds with
# -DSPW_CHECKS=ON (the debug-only checks: CMakeLists.txt), anyone else
# gets them off again.
spw_build() {
	local top=$1 build=$2 fuse
	fuse=$(spw_libfuse "$top") || return 1
	# a build tree configured against another libfuse is configured anew
	# (pkg-config results are cached)
	if [ -n "$fuse" ] && [ -f "$build/CMakeCache.txt" ] && ! grep -q "^FUSE3_LIBDIR:INTERNAL=$fuse/lib$" "$build/CMakeCache.txt"; then
		rm -f "$build/CMakeCache.txt"
	fi
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$fuse" \
		-DSPW_CHECKS=OFF "${@:3}" >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}

# A build against libfuse 3.18+ (spw_libfuse TOP 3.18): io_uring=on takes
# effect (with the kernel's /sys/module/fuse/parameters/enable_uring = Y).
# Not the default build: bench/README.md, "FUSE over io_uring", says why.
spw_build_uring() {
	local top=$1 build=$2 fuse
	fuse=$(spw_libfuse "$top" 3.18) || return 1
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$fuse" >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}

# The same sources against the system's libfuse when it is older than 3.17
# (Debian 12's 3.14): passthrough compiled out. Checked in CI by building it
# and running its unit tests.
spw_build_oldfuse() {
	local top=$1 build=$2
	cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPW_CHECKS=ON >/dev/null &&
		cmake --build "$build" -j"$(nproc)" >/dev/null
}
