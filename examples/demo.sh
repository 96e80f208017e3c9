#!/usr/bin/env bash
# Install what is missing, build, mount spillway, run the long-document
# pipeline through the mount, show the mount's tiers (spillctl stats) and where
# a few of its files are (spillctl status), unmount.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tests/deps.sh"
spw_deps
build="$top/build"
spw_build "$top" "$build"

work="$top/work"
mnt="$work/mnt"
mkdir -p "$mnt" "$work/cold"
opts=${SPW_DEMO_OPTS-hot_size=512M,nvme=$work/cold}
pid=
# Unmounting makes the daemon spill what is still in RAM to the cold tier and
# remove its hot files; it exits when that is done: wait for it (SIGTERM
# would do the same), SIGKILL only if it is stuck.
cleanup() {
	if mountpoint -q "$mnt"; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"; fi
	if [ -n "$pid" ]; then
		for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		pid=
	fi
}
trap cleanup EXIT INT TERM

shm_before=$(ls -d /dev/shm/spillway-* 2>/dev/null || true)
"$build/spillway" -f ${opts:+-o "$opts"} "$mnt" &
pid=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; kill -0 "$pid" || exit 1; sleep 0.1; done
mountpoint -q "$mnt" || { echo "mount did not appear" >&2; exit 1; }

"$build/examples/longdoc_pipeline" "$mnt" -p 8 -t "${SPW_DEMO_TOTAL:-2G}" -s 64M

# The human view: the tiers of the mount, then where a few files are (chunk
# counts per state). `spillctl stats --json` prints the daemon's raw JSON.
spillctl="$top/mount-helpers/spillctl"
echo
"$spillctl" stats "$mnt"
echo
files=("$mnt"/tensor-*.bin)
if [ "${#files[@]}" -gt 4 ]; then files=("${files[@]:0:2}" "${files[@]: -2}"); fi
"$spillctl" status "${files[@]}"
echo

# Give the RAM back: unmount, wait for the daemon, and check that nothing of
# this mount is left in /dev/shm (with a cold tier and without keep_hot).
cleanup
case ",$opts," in
*,keep_hot,*) exit 0 ;;
*nvme=* | *s3=*) ;;
*) exit 0 ;;
esac
left=$(comm -13 <(echo "$shm_before") <(ls -d /dev/shm/spillway-* 2>/dev/null || true))
if [ -n "$left" ]; then
	echo "RAM not given back: left in /dev/shm: $left" >&2
	du -sh $left >&2 || true
	exit 1
fi
echo "unmounted: nothing of the mount left in /dev/shm (the data is in $work/cold)"
