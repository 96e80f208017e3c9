#!/usr/bin/env bash
# xfstests (the kernel's fstests) against spillway mounts: FSTYP=fuse, a
# mount helper that runs this build's daemon, test and scratch mounts each
# with its own hot_dir, cold directory and state_dir.
#
#   tests/xfstests/run.sh [--build DIR] [--subset | -g GROUP | TEST...]
#
# --source: only say where the source is, or how to get it (exit 77).
# --subset (what tests/run_all.sh runs, through ctest): the tests named in
# tests/xfstests/subset. -g generic/quick: the whole quick group (about an
# hour on 2 cores). Tests named in tests/xfstests/exclude are never run
# (each line says why). The source is $XFSTESTS_SRC (a checkout, or a
# tarball of one), else ../shared/third_party/xfstests-*.tar.gz beside the
# repository; it is built once with its own make under BUILD/xfstests.
# Needs root (mount, users fsgqa...). Exit: 0 all passed, 1 a failure,
# 77 when the source or /dev/fuse is missing (nothing was run).
set -euo pipefail
# one compound command: bash reads it whole before running it, so an edit of
# this file during a run (an hour for generic/quick) cannot break that run
{
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build="$top/build"
args=()
want_source=0
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$(cd "$2" && pwd); shift 2 ;;
	--source) want_source=1; shift ;;
	--subset) mapfile -t sub < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/subset"); args+=("${sub[@]}"); shift ;;
	*) args+=("$1"); shift ;;
	esac
done
[ ${#args[@]} -gt 0 ] || [ $want_source = 1 ] ||
	{ echo "usage: $0 [--build DIR] [--source | --subset | -g GROUP | TEST...]" >&2; exit 2; }

# The source: an environment variable, else the pinned snapshot beside the
# repository (never copied into it).
src=${XFSTESTS_SRC:-}
if [ -z "$src" ]; then
	src=$(ls -1 "$(dirname "$top")"/shared/third_party/xfstests-*.tar.gz 2>/dev/null | head -n1 || true)
fi
[ -z "$src" ] || [ ! -e "$src" ] || src=$(realpath "$src") # the build stamp names it
if [ -z "$src" ] || [ ! -e "$src" ]; then
	echo "xfstests: SKIPPED, no source: set XFSTESTS_SRC to an xfstests checkout or tarball (git clone https://github.com/kdave/xfstests), or put xfstests-<rev>.tar.gz in ../shared/third_party/"
	exit 77
fi
if [ $want_source = 1 ]; then
	echo "xfstests: source $src"
	exit 0
fi
[ -e /dev/fuse ] || { echo "xfstests: SKIPPED, no /dev/fuse"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "xfstests: needs root (mount, its test users)" >&2; exit 1; }
[ -x "$build/spillway" ] || { echo "xfstests: no $build/spillway (build first)" >&2; exit 1; }

# What xfstests builds and runs with (Debian 12 and 13 names), and the users
# its tests switch to.
xfs_deps() {
	local pkgs=(xfslibs-dev uuid-dev libtool-bin libacl1-dev libaio-dev liburing-dev libcap-dev
		gawk bc acl attr xfsprogs make autoconf automake psmisc util-linux) missing=()
	for p in "${pkgs[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		echo "xfstests: installing ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } ||
			{ echo "xfstests: apt-get install failed" >&2; return 1; }
	fi
	local u
	for u in fsgqa fsgqa2 123456-fsgqa; do
		id "$u" >/dev/null 2>&1 || useradd -m "$u" >/dev/null 2>&1 || useradd "$u" ||
			{ echo "xfstests: cannot add user $u" >&2; return 1; }
	done
}
xfs_deps

# Build once: the tree is unpacked under BUILD/xfstests/<name>, a stamp
# names the source it was built from.
xroot="$build/xfstests"
mkdir -p "$xroot"
name=$(basename "$src"); name=${name%.tar.gz}
xsrc="$xroot/$name"
if [ ! -f "$xsrc/.spw-built" ] || [ "$(cat "$xsrc/.spw-built")" != "$src" ]; then
	echo "xfstests: building $src into $xsrc"
	rm -rf "$xsrc"
	if [ -d "$src" ]; then
		mkdir -p "$xsrc" && cp -a "$src/." "$xsrc/"
	else
		mkdir -p "$xsrc" && tar -xzf "$src" -C "$xsrc" --strip-components=1
	fi
	(cd "$xsrc" && make -j"$(nproc)" >"$xroot/make.log" 2>&1) ||
		{ echo "xfstests: make failed, see $xroot/make.log" >&2; exit 1; }
	echo "$src" >"$xsrc/.spw-built"
fi

# One run's mounts and tiers. The hot tiers on /dev/shm (tmpfs); the cold
# directories and state under the build tree. The helper's name is this
# build's, so runs from two work trees do not share one; the mounts' source
# names are this run's (xfstests finds its mounts by them).
work=$(mktemp -d "$xroot/run.XXXXXX")
chmod 755 "$work" # the test users reach the mounts
shm=$(mktemp -d /dev/shm/spw-xfs.XXXXXX)
sub="spwxfs$(printf %s "$build" | md5sum | cut -c1-8)"
helper="/sbin/mount.fuse.$sub"
mkdir -p "$work/test" "$work/scratch" "$work/cold/test" "$work/cold/scratch" "$work/results"
cat >"$helper" <<EOF
#!/bin/sh
# Written by $here/run.sh for one run, removed at its end: what mount(8)
# runs for -t fuse.$sub (SOURCE MOUNTPOINT -o OPTIONS).
src=\$1 mnt=\$2
shift 2
opts=
while [ \$# -gt 0 ]; do
	case \$1 in
	-o) opts=\$2; shift 2 ;;
	-o*) opts=\${1#-o}; shift ;;
	*) shift ;;
	esac
done
# a remount (-o remount,ro) changes the mount's flags, no daemon starts:
# mount(2) itself, with the flags alone (the kernel knows no spillway option)
case ",\$opts," in
*,remount,*)
	flags=\$(printf %s "\$opts" | tr , '\n' | grep -xE 'remount|ro|rw|(no)?(suid|dev|exec|atime|diratime|relatime|strictatime|lazytime)|sync|async|dirsync' | paste -sd, -)
	exec mount -i -o "\$flags" "\$mnt"
	;;
esac
# the daemon of the last unmount of these directories may still be
# flushing: wait (bounded) until it lets go of their locks (opened, never
# created, here)
opt() { printf %s "\$opts" | tr , '\n' | sed -n "s/^\$1=//p"; }
for lock in "\$(opt state_dir)/lock" "\$(opt hot_dir)/.lock" "\$(opt nvme)/.spillway.lock"; do
	[ -e "\$lock" ] || continue
	{ flock -w 120 9 || { echo "mount.fuse.$sub: \$lock still held" >&2; exit 32; }; } 9<"\$lock"
done
# as mount.fuse3 does for root: dev and suid unless the options say no
exec "$build/spillway" "\$mnt" -o "fsname=\$src,dev,suid,\$opts"
EOF
chmod 755 "$helper"

# spillway's side of the mount: a 64 MiB hot tier of 1 MiB chunks that
# spills from 4 MiB up, so the evictor and the cold tier take part; info
# lines (the recovery summary at mount) would land in the tests' output.
tier_opts() { # NAME
	echo "hot_dir=$shm/$1,nvme=$work/cold/$1,state_dir=$work/state-$1,hot_size=64M,chunk_size=1M,min_spill_size=4M,log_level=warn,allow_other,default_permissions"
}
cat >"$work/local.config" <<EOF
export FSTYP=fuse
export FUSE_SUBTYP=.$sub
export TEST_DEV=spw_${work##*.}_test
export TEST_DIR=$work/test
export SCRATCH_DEV=spw_${work##*.}_scratch
export SCRATCH_MNT=$work/scratch
export TEST_FS_MOUNT_OPTS="-o $(tier_opts test)"
export MOUNT_OPTIONS="-o $(tier_opts scratch)"
export RESULT_BASE=$work/results
EOF

cleanup() {
	local m
	for m in "$work/scratch" "$work/test"; do
		if mountpoint -q "$m"; then
			umount "$m" 2>/dev/null || umount -l "$m" || true
		fi
	done
	# wait for the daemons to finish their unmounts (they hold their
	# directories' locks until they exit)
	for m in "$work/state-test/lock" "$work/state-scratch/lock" "$shm/test/.lock" \
		"$shm/scratch/.lock" "$work/cold/test/.spillway.lock" "$work/cold/scratch/.spillway.lock"; do
		[ -e "$m" ] && { flock -w 120 9 || true; } 9<"$m"
	done
	rm -f "$helper"
	rm -rf "$shm"
}
trap cleanup EXIT

echo "xfstests: $name, results in $work/results"
rc=0
(cd "$xsrc" && HOST_OPTIONS="$work/local.config" ./check -E "$here/exclude" "${args[@]}") \
	>"$work/check.out" 2>&1 || rc=$?
cat "$work/check.out"
# the tests not run, counted by the reason xfstests gave
if grep -q '\[not run\]' "$work/check.out"; then
	echo "xfstests: not run, by reason:"
	sed -n 's/^[^ ]*  *\[not run\] //p' "$work/check.out" |
		sed -e "s/spw_[A-Za-z0-9]*_\(test\|scratch\)/DEV/g" | sort | uniq -c | sort -rn
fi
# the verdict, one line: counted from check's own summary
# ("Ran" names the tests not run too)
tried=$(sed -n 's/^Ran: //p' "$work/check.out" | tail -n1 | wc -w)
notrun=$(sed -n 's/^Not run: //p' "$work/check.out" | tail -n1 | wc -w)
failed=$(sed -n 's/^Failures: //p' "$work/check.out" | tail -n1)
nfail=$(printf %s "$failed" | wc -w)
ran=$((tried - notrun))
if [ "$ran" -le 0 ]; then
	echo "xfstests: FAIL, no test ran (check exited $rc)"
	exit 1
fi
if [ "$nfail" -gt 0 ] || [ "$rc" -ne 0 ]; then
	echo "xfstests: FAIL, $((ran - nfail)) of $ran passed, $notrun not run; failed: $failed (check exited $rc; diffs in $work/results)"
	exit 1
fi
echo "xfstests: PASS, $ran of $ran passed, $notrun not run"
rm -rf "$work"
exit 0
}
