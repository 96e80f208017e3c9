#!/usr/bin/env python3
"""What one small file costs the node: spillway's daemon heap and the kernel slab.

Mounts spillway (BUILD/spillway) with a cold directory on a real disk and a
small hot tier (hot_size=64M), so nearly every file goes cold, then creates
N small files (default 1M of 100 B, in 1,000 directories) and reports:

  rss       daemon VmRSS of the empty mount (the base), after the files, and
            VmHWM; (after - base) / N = heap bytes per file above the base;
  slab      /proc/meminfo Slab (SReclaimable + SUnreclaim) after the files
            minus before, per file — once as left by the workload (the
            kernel's FUSE inodes and dentries still cached) and once after
            `echo 2 > /proc/sys/vm/drop_caches` (what the kernel cannot give
            back); fuse_inode and dentry slab counts from /proc/slabinfo;
  hot_dir   files left in hot_dir (a cold file keeps none).

Run as root: python3 bench/mem_per_file.py [--build BUILD] [-n 1000000]
[--size 100] [--dirs 1000] [--hot-size 64M] [--json FILE].
Used by bench_small.py for the same figures; exit 1 only when the harness fails.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
import benchlib  # noqa: E402  (cleanup, daemons, drop_caches)
from benchlib import meminfo, proc_status  # noqa: E402

MiB = 1 << 20


def slabinfo(names=("fuse_inode", "dentry", "shmem_inode_cache", "kmalloc-64")):
    """Active objects x object size per named cache, in bytes."""
    out = {}
    try:
        with open("/proc/slabinfo") as f:
            for line in f:
                fields = line.split()
                if fields and fields[0] in names:
                    out[fields[0]] = int(fields[1]) * int(fields[3])
    except OSError:
        pass
    return out


def settle(pid, secs=1.0):
    """Let the daemon's background work (spills, checkpoint) quiesce."""
    time.sleep(secs)
    return proc_status(pid)


def create_files(root, n, size, ndirs, first=0, payload=None):
    """n files of `size` bytes spread over ndirs directories; returns seconds."""
    payload = payload or (b"x" * size)
    t0 = time.monotonic()
    per = (n + ndirs - 1) // ndirs
    for d in range(ndirs):
        dp = os.path.join(root, "d%04d" % d)
        os.makedirs(dp, exist_ok=True)
        for i in range(d * per, min(n, (d + 1) * per)):
            fd = os.open(os.path.join(dp, "f%07d" % (first + i)), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, payload)
            os.close(fd)
    return time.monotonic() - t0


def count_hot(hot_dir):
    return sum(1 for e in os.scandir(hot_dir) if e.is_file() and e.name.isdigit())


def measure_spillway(opts, build, n, size, ndirs, hot_size, workdir):
    mnt = os.path.join(workdir, "mnt")
    hot = os.path.join(benchlib.CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-mem-hot-",
                                                                  dir="/dev/shm")), "hot")
    cold = os.path.join(workdir, "cold")
    os.makedirs(mnt)
    os.makedirs(cold)
    benchlib.drop_caches(2)
    slab0, slabs0 = meminfo(), slabinfo()
    args = [os.path.join(build, "spillway"), "-f", "-o",
            "hot_dir=%s,hot_size=%s,nvme=%s" % (hot, hot_size, cold), mnt]
    proc = benchlib.start_daemon("spillway", args, mnt, os.path.join(workdir, "spillway.log"))
    base = settle(proc.pid)
    secs = create_files(mnt, n, size, ndirs)
    after = settle(proc.pid, 3.0)
    slab1, slabs1 = meminfo(), slabinfo()
    hot_files = count_hot(hot)
    benchlib.drop_caches(2)
    time.sleep(0.5)
    slab2, slabs2 = meminfo(), slabinfo()
    after2 = proc_status(proc.pid)
    res = {
        "files": n, "size": size, "dirs": ndirs, "hot_size": hot_size,
        "create_per_s": n / secs,
        "rss_base": base["VmRSS"], "rss": after["VmRSS"], "hwm": after["VmHWM"],
        "rss_after_drop": after2["VmRSS"],
        "rss_per_file": (after["VmRSS"] - base["VmRSS"]) / n,
        "slab_per_file": (slab1["Slab"] - slab0["Slab"]) / n,
        "slab_unreclaim_per_file": (slab1["SUnreclaim"] - slab0["SUnreclaim"]) / n,
        "slab_per_file_after_drop": (slab2["Slab"] - slab0["Slab"]) / n,
        "slab_caches_before": slabs0, "slab_caches": slabs1, "slab_caches_after_drop": slabs2,
        "hot_files": hot_files,
    }
    return res


def report(r, out=sys.stdout):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p("spillway, %d files of %d B in %d dirs, hot_size=%s (%.0f creates/s)"
      % (r["files"], r["size"], r["dirs"], r["hot_size"], r["create_per_s"]))
    p("  daemon RSS  base %.1f MiB, after %.1f MiB (HWM %.1f MiB): %.0f B/file above the base"
      % (r["rss_base"] / MiB, r["rss"] / MiB, r["hwm"] / MiB, r["rss_per_file"]))
    p("  kernel slab %+.0f B/file (unreclaimable %+.0f), after drop_caches=2 %+.0f B/file"
      % (r["slab_per_file"], r["slab_unreclaim_per_file"], r["slab_per_file_after_drop"]))
    for name in sorted(r["slab_caches"]):
        b0 = r["slab_caches_before"].get(name, 0)
        p("    %-18s %+8.1f MiB, after drop %+8.1f MiB" % (
            name, (r["slab_caches"][name] - b0) / MiB,
            (r["slab_caches_after_drop"].get(name, 0) - b0) / MiB))
    p("  hot files left in hot_dir: %d" % r["hot_files"])


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("SPILLWAY_BUILD",
                                                      os.path.join(HERE, "..", "build")))
    ap.add_argument("-n", "--files", type=int, default=1000000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--dirs", type=int, default=1000)
    ap.add_argument("--hot-size", default="64M")
    ap.add_argument("--workdir", default="/var/tmp", help="parent of mount and cold dir")
    ap.add_argument("--json")
    o = ap.parse_args(argv)
    benchlib.raise_nofile()
    work = benchlib.CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-mem-", dir=o.workdir))
    rc = 0
    try:
        r = measure_spillway(o, o.build, o.files, o.size, o.dirs, o.hot_size, work)
        report(r)
        if o.json:
            with open(o.json, "w") as f:
                json.dump(r, f, indent=1)
    except (benchlib.BenchError, OSError) as e:
        print("mem_per_file: %s" % e, file=sys.stderr)
        rc = 1
    finally:
        if not benchlib.CLEANUP.run():
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
