#!/usr/bin/env python3
"""bench_reqsize - what larger FUSE requests give where the daemon still
serves (issue 40, item 5).

The kernel caps a FUSE request at fs.fuse.max_pages_limit pages (6.13+;
256 = 1 MiB by default). spillway asks for requests up to 4 MiB and libfuse
(3.17+) sizes its buffers from the same limit, so the limit alone decides.
This bench sets the sysctl to 256, 512 and 1024 pages (1, 2, 4 MiB) in turn,
and restores its old value at the end, whatever happens; a node keeps the
value its administrator chose (spillway never changes it).

Per size, medians of --repeat rounds of:
  write   a 1 GiB stream into RAM (hot_size 2G; dd bs=4M): MiB/s and the
          daemon's CPU seconds per GiB
  read    the same file evicted into segments (extents=off: the daemon's
          path), caches dropped, read once sequentially (dd bs=4M): MiB/s
          and daemon CPU per GiB
Run as root: sudo python3 bench/bench_reqsize.py [--build build] [--repeat 3]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

SYSCTL = "/proc/sys/fs/fuse/max_pages_limit"
SIZE = 1 << 30


def set_limit(pages):
    with open(SYSCTL, "w") as f:
        f.write("%d\n" % pages)


def dd(args, timeout=300):
    t0 = time.monotonic()
    r = subprocess.run(["dd"] + args + ["bs=4M", "status=none"], capture_output=True,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise bl.BenchError("dd %s: %s" % (" ".join(args), r.stderr.strip()))
    return time.monotonic() - t0


def cpu(pid):
    t = bl.cpu_times(pid)
    if t is None:
        raise bl.BenchError("the daemon (pid %d) is gone" % pid)
    return t[0] + t[1]


def round_once(spillway, pages, work):
    mnt = tempfile.mkdtemp(prefix="spw-rq-mnt-", dir=work)
    cold = tempfile.mkdtemp(prefix="spw-rq-cold-", dir="/var/tmp")
    bl.CLEANUP.add_dir(cold)
    hot = os.path.join(tempfile.mkdtemp(prefix="spw-rq-hot-", dir="/dev/shm"), "hot")
    bl.CLEANUP.add_dir(os.path.dirname(hot))
    opts = "hot_dir=%s,hot_size=2G,nvme=%s,extents=off,mem_pressure=off,admit=reread" % (hot, cold)
    log = os.path.join(work, "spillway-%d.log" % pages)
    proc = bl.start_daemon("spillway", [spillway, "-f", "-o", opts, mnt], mnt, log)
    path = os.path.join(mnt, "f")
    c0 = cpu(proc.pid)
    tw = dd(["if=/dev/zero", "of=" + path, "count=%d" % (SIZE >> 22), "conv=fsync"])
    c1 = cpu(proc.pid)
    os.setxattr(path, "user.spillway.evict", b"1")
    bl.drop_caches()
    c2 = cpu(proc.pid)
    tr = dd(["if=" + path, "of=/dev/null"])
    c3 = cpu(proc.pid)
    bl.CLEANUP.stop_daemon("spillway", proc, mnt)
    bl.CLEANUP.daemons = [d for d in bl.CLEANUP.daemons if d[1] is not proc]
    os.rmdir(mnt)
    gib = SIZE / bl.GiB
    return {"write MiB/s": SIZE / bl.MiB / tw, "write daemon s/GiB": (c1 - c0) / gib,
            "read MiB/s": SIZE / bl.MiB / tr, "read daemon s/GiB": (c3 - c2) / gib}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(bl.REPO, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pages", default="256,512,1024")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_reqsize: run as root (the sysctl, drop_caches, FUSE)", file=sys.stderr)
        return 77
    if not os.path.exists(SYSCTL):
        print("bench_reqsize: %s missing (kernel before 6.13): requests stay at 1 MiB"
              % SYSCTL, file=sys.stderr)
        return 77
    spillway = os.path.join(a.build, "spillway")
    with open(SYSCTL) as f:
        old = int(f.read())
    sizes = [int(p) for p in a.pages.split(",")]
    work = bl.CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rq-"))
    res = {p: [] for p in sizes}

    def body():
        for r in range(a.repeat):
            for p in (sizes if r % 2 == 0 else list(reversed(sizes))):
                set_limit(p)
                res[p].append(round_once(spillway, p, work))
                bl.log("round %d, %d pages: %s" % (r + 1, p, {k: round(v, 2) for k, v
                                                             in res[p][-1].items()}))

    def restore():
        set_limit(old)

    rc = bl.run_guarded(body, after_cleanup=restore)
    if rc:
        return rc
    print("larger FUSE requests (fs.fuse.max_pages_limit; was %d, restored): medians of %d"
          % (old, a.repeat))
    keys = list(res[sizes[0]][0])
    print("%-10s " % "request" + " ".join("%20s" % k for k in keys))
    base = {k: bl.med([x[k] for x in res[sizes[0]]]) for k in keys}
    for p in sizes:
        cells = []
        for k in keys:
            xs = [x[k] for x in res[p]]
            m = bl.med(xs)
            cells.append("%8.2f (%4.2fx) %s" % (m, m / base[k] if base[k] else 0,
                                                "%.2f-%.2f" % (min(xs), max(xs))))
        print("%-10s " % ("%d KiB" % (p * 4)) + " ".join("%20s" % c for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
