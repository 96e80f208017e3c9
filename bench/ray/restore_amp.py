#!/usr/bin/env python3
"""
restore_amp - how many bytes spillway restores for a reader of cold files,
by restore mode: the pattern that made spillway restore 2x what Ray asked
for (issue 23, bench/ray/README.md).

Mounts BUILD/spillway (hot tier --hot-size, one cold dir), writes --files
files of --file-size MiB (Ray's fused spill files are ~80-100 MiB), lets the
evictor spill the overflow (the last file stays partly hot, as Ray leaves
its files; --evict makes every file cold), then reads every file in 8 MiB objects (open, seek,
read, close: Ray's restore worker), pausing --pause-ms after each MiB (Ray
copies each object into plasma, the aggregator checks it). Prints what the
mount restored against what was read, for each --modes entry.

With a hot tier near its spill threshold and a reader slower than the
restore, chunks restored ahead of the reader - the whole file with
restore=open, readahead with restore=lazy - are dropped by the evictor
(clean, so first) before they are read, and the reader restores them again.
Measured 2026-12-03 (4 files of 80 MiB, 64 MiB hot tier, 30 ms per MiB):
restore=open 2.11x, lazy 1.59x - Ray's own figures were 2.0-2.3x and
1.6-1.7x; with --evict (the hot tier empty) open 1.43x, lazy 1.00x; without
the pause 1.0-1.1x.

    sudo python3 bench/ray/restore_amp.py [--build build] [--hot-size 64M] [--files 4]
        [--file-size 80] [--pause-ms 30] [--modes open,lazy]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(opts, mode):
    d = tempfile.mkdtemp(prefix="spw-ramp-", dir=opts.cold_root)
    shm = tempfile.mkdtemp(prefix="spw-ramp-", dir="/dev/shm")
    mnt, cold = os.path.join(d, "mnt"), os.path.join(d, "cold")
    os.mkdir(mnt)
    os.mkdir(cold)
    o = "hot_dir=%s/hot,hot_size=%s,nvme=%s,chunk_size=1M,min_spill_size=8M,restore=%s" % (
        shm, opts.hot_size, cold, mode)
    p = subprocess.Popen([os.path.join(opts.build, "spillway"), "-f", "-o", o, mnt],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 10
        while not os.path.ismount(mnt):
            if p.poll() is not None or time.monotonic() > end:
                raise RuntimeError("spillway did not mount")
            time.sleep(0.01)

        def stats():
            return json.loads(os.getxattr(mnt, "user.spillway.stats"))

        files = [os.path.join(mnt, "f%d" % k) for k in range(opts.files)]
        for f in files:
            with open(f, "wb", buffering=MiB) as fh:
                for i in range(opts.file_size):
                    fh.write(bytes([i % 251]) * MiB)
        # as Ray leaves them: the evictor has spilled the overflow, the last
        # file written is still (partly) hot; with --evict every file is cold
        end = time.monotonic() + 60
        while stats()["hot"]["used"] > 0.75 * stats()["hot"]["limit"]:
            if time.monotonic() > end:
                raise RuntimeError("the evictor did not get below spill_threshold")
            time.sleep(0.02)
        for f in files if opts.evict else []:
            os.setxattr(f, "user.spillway.evict", b"1")
        for f in files if opts.evict else []:
            end = time.monotonic() + 60
            while True:
                s = dict(kv.split("=") for kv in os.getxattr(f, "user.spillway.state").decode()
                         .split())
                if s["hot"] == "0" and s["spilling"] == "0":
                    break
                if time.monotonic() > end:
                    raise RuntimeError("%s did not go cold: %s" % (f, s))
                time.sleep(0.02)
        r0 = stats()["restored"]["bytes"]
        t0 = time.monotonic()
        for f in files:
            for obj in range(opts.file_size // 8):
                with open(f, "rb") as fh:
                    fh.seek(obj * 8 * MiB)
                    for k in range(8):
                        b = fh.read(MiB)
                        if b[:1] != bytes([(obj * 8 + k) % 251]):
                            raise RuntimeError("%s: wrong data at MiB %d" % (f, obj * 8 + k))
                        time.sleep(opts.pause_ms / 1000.0)
        dt = time.monotonic() - t0
        s = stats()
        r = s["restored"]["bytes"] - r0
        read = opts.files * (opts.file_size // 8) * 8 * MiB
        print("restore=%-4s hot %s, %d files of %d MiB, %d ms pause per MiB: read %d MiB in "
              "%.1fs, restored %d MiB (%.2fx), readahead chunks %d"
              % (mode, opts.hot_size, opts.files, opts.file_size, opts.pause_ms, read // MiB, dt,
                 r // MiB, r / read, s["readahead_chunks"]), flush=True)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], stderr=subprocess.DEVNULL)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--hot-size", default="64M")
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--file-size", type=int, default=80, help="MiB, a multiple of 8")
    ap.add_argument("--pause-ms", type=float, default=30)
    ap.add_argument("--modes", default="open,lazy")
    ap.add_argument("--evict", action="store_true", help="evict every file before reading")
    ap.add_argument("--cold-root", default="/var/tmp")
    opts = ap.parse_args()
    for m in opts.modes.split(","):
        run(opts, m)
    return 0


if __name__ == "__main__":
    sys.exit(main())
