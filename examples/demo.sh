#!/usr/bin/env bash
# Install what is missing, build, mount spillway, run the long-document
# pipeline through the mount, show the stats, unmount.
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
cleanup() {
	if mountpoint -q "$mnt"; then fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"; fi
	if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
}
trap cleanup EXIT INT TERM

"$build/spillway" -f ${opts:+-o "$opts"} "$mnt" &
pid=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; kill -0 "$pid" || exit 1; sleep 0.1; done
mountpoint -q "$mnt" || { echo "mount did not appear" >&2; exit 1; }

"$build/examples/longdoc_pipeline" "$mnt" -p 8 -t "${SPW_DEMO_TOTAL:-2G}" -s 64M
echo "stats:"
getfattr --only-values -n user.spillway.stats "$mnt" | python3 -m json.tool
