#!/usr/bin/env python3
"""The daemon's own memory (RSS) by phase, with an NVMe and with an S3 cold
tier (issue 11 item 7: S3 costs at most 64 MiB more; issue 35 item 6: the
daemon stays within 48 MiB plus its per-file heap, docs/costs-and-waits.md).

For each tier (s3: s3rver on loopback, objects on --server-root; nvme: a
directory under /var/tmp) one mount with hot_size=--hot-size; --size bytes
of random data are written through it by --writers parallel writers (one
file each; the evictor spills while they wait for room), the files evicted
whole, then read back --reads times by as many readers and checked. The daemon's VmRSS is
taken when the mount is idle, after the writes, after the read-back (each
after --settle seconds: what the daemon keeps, not what it had in flight),
and its VmHWM at the end; the last RSS is split into malloc's heap (main
heap and thread arenas), other anonymous mappings (I/O buffers, slabs,
stacks) and file-backed pages (the libraries). Run as root:
  python3 bench/bench_s3_rss.py --build build [--size 1G] [--tiers s3,nvme]
"""

import argparse
import os
import signal
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
import bench_s3  # noqa: E402
from benchlib import (CLEANUP, BenchError, fmt_size, log, on_signal, parse_size,  # noqa: E402
                      proc_status, start_daemon)

MiB = 1 << 20
HEAP_MAX = 64 * MiB  # glibc's arena heaps are aligned on their maximum size
BOUND = 48 * MiB     # issue 35 item 6: the daemon's RSS, plus its per-file heap
PER_FILE = 250       # B of heap per file (docs/costs-and-waits.md)


def rss_split(pid):
    """{heap, anon, file} resident bytes of pid from /proc/PID/smaps: heap =
    malloc's main heap and thread arenas, anon = other anonymous mappings."""
    out = {"heap": 0, "anon": 0, "file": 0}
    cur = None
    with open("/proc/%d/smaps" % pid) as f:
        for ln in f:
            p = ln.split()
            if p and "-" in p[0] and not p[0].endswith(":"):
                start = int(p[0].split("-")[0], 16)
                name = p[5] if len(p) > 5 else ""
                if name.startswith("/"):
                    cur = "file"
                elif name == "[heap]" or (name == "" and start % HEAP_MAX == 0):
                    cur = "heap"
                else:
                    cur = "anon"
            elif p and p[0] == "Rss:":
                out[cur] += int(p[1]) * 1024
    return out


def parallel(jobs, timeout, what):
    """Run the callables in threads; re-raise the first failure."""
    errs = []

    def one(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B902 - re-raised below
            errs.append(e)

    def all_of():
        ts = [threading.Thread(target=one, args=(j,), daemon=True) for j in jobs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    bench_s3.guarded(all_of, timeout, what)
    if errs:
        raise errs[0]


def copy_part(src, dst, off, size, bs=4 * MiB):
    with open(src, "rb", buffering=0) as fi, open(dst, "wb", buffering=0) as fo:
        fi.seek(off)
        while size:
            b = fi.read(min(bs, size))
            fo.write(b)
            size -= len(b)


def run_tier(opts, tier, server, src, shas, shm, mntroot, work):
    mnt = os.path.join(mntroot, tier)
    os.mkdir(mnt)
    o = ["hot_dir=" + os.path.join(shm, tier + "-hot"), "hot_size=%d" % opts.hot_size,
         "state_dir=" + os.path.join(work, tier + "-state"), "io_workers=%d" % opts.io_workers]
    env = dict(os.environ)
    if tier == "s3":
        o += ["s3=s3://%s/rss" % bench_s3.BUCKET, "s3_endpoint=" + server.endpoint,
              "s3_path_style", "s3_part_size=%d" % opts.part_size]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_ACCESS_KEY_ID=bench_s3.KEY_ID, AWS_SECRET_ACCESS_KEY=bench_s3.SECRET)
    else:
        cold = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-cold-", dir="/var/tmp"))
        o.append("nvme=" + cold)
    if opts.spillway_opts:
        o.append(opts.spillway_opts)
    proc = start_daemon("spillway-" + tier, [opts.bin, "-f", "-o", ",".join(o), mnt], mnt,
                        os.path.join(work, tier + ".log"), env=env)
    rss = {}

    def take(phase):
        time.sleep(opts.settle)
        rss[phase] = proc_status(proc.pid)["VmRSS"]

    take("idle")
    part = opts.size // opts.writers
    files = [os.path.join(mnt, "f%d" % i) for i in range(opts.writers)]
    t0 = time.monotonic()
    parallel([lambda i=i: copy_part(src, files[i], i * part, part) for i in range(opts.writers)],
             opts.timeout, "writing")
    dt = time.monotonic() - t0
    take("written")
    for f in files:
        bench_s3.guarded(lambda: os.setxattr(f, "user.spillway.evict", b"1"), opts.timeout,
                         "evict " + f)
    t0 = time.monotonic()
    for _ in range(opts.reads):
        got = {}
        parallel([lambda f=f: got.__setitem__(f, bench_s3.sha_of(f)) for f in files],
                 opts.timeout, "reading back")
        for i, f in enumerate(files):
            if got[f] != shas[i]:
                raise BenchError("%s: %s read back differs" % (tier, f))
    dr = (time.monotonic() - t0) / opts.reads
    take("read")
    split = rss_split(proc.pid)
    hwm = proc_status(proc.pid)["VmHWM"]
    bound = BOUND + PER_FILE * opts.writers
    worst = max(rss.values())
    print("| %s | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f / %.1f / %.1f | %s |" % (
        tier, opts.size / MiB / dt, opts.size / MiB / dr, rss["idle"] / MiB,
        rss["written"] / MiB, rss["read"] / MiB, hwm / MiB, split["heap"] / MiB,
        split["anon"] / MiB, split["file"] / MiB,
        "PASS" if worst <= bound else "MISS (%.1f MiB > %.1f)" % (worst / MiB, bound / MiB)),
        flush=True)
    return worst <= bound


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--bin", help="the spillway binary (default: BUILD/spillway)")
    p.add_argument("--size", type=parse_size, default=1 << 30)
    p.add_argument("--hot-size", type=parse_size, default=64 * MiB)
    p.add_argument("--part-size", type=parse_size, default=16 * MiB)
    p.add_argument("--io-workers", type=int, default=8)
    p.add_argument("--writers", type=int, default=4, help="parallel writers and readers")
    p.add_argument("--reads", type=int, default=2,
                   help="times the files are read back (admit=reread: the first read from "
                        "the segments, the second brings them into RAM)")
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds idle before each RSS sample")
    p.add_argument("--tiers", default="s3,nvme")
    p.add_argument("--spillway-opts", default="")
    p.add_argument("--server-root", default="/dev/shm")
    opts = p.parse_args(argv)
    opts.bin = opts.bin or os.path.join(os.path.abspath(opts.build), "spillway")
    opts.timeout = 120 + opts.size // MiB
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    server, ok = None, False
    try:
        work = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-work-"))
        mntroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-mnt-"))
        shm = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-", dir="/dev/shm"))
        src = os.path.join(shm, "source")
        bench_s3.make_source(src, opts.size)
        part = opts.size // opts.writers
        shas = []
        for i in range(opts.writers):
            tmp = os.path.join(shm, "part")
            copy_part(src, tmp, i * part, part)
            shas.append(bench_s3.sha_of(tmp))
            os.unlink(tmp)
        print("%s through hot_size=%dM, %d writers, then %d readers %d time(s), io_workers=%d; "
              "RSS after %.0f s idle; bound %d MiB + %d B/file" % (
                  fmt_size(opts.size), opts.hot_size >> 20, opts.writers, opts.writers,
                  opts.reads, opts.io_workers, opts.settle, BOUND >> 20, PER_FILE))
        print("| tier | write MiB/s | read MiB/s | RSS idle | after write | after read | "
              "VmHWM | last RSS: heap / other anon / files (MiB) | bound |")
        print("|---|---|---|---|---|---|---|---|---|")
        ok = True
        for tier in opts.tiers.split(","):
            if tier == "s3" and server is None:
                server = bench_s3.S3rver(opts.server_root, os.path.join(work, "s3rver.log"))
                server.start()
            ok = run_tier(opts, tier, server, src, shas, shm, mntroot, work) and ok
    except (BenchError, OSError) as e:
        ok = False
        log("FAILED: %s" % e)
        bench_s3.print_daemon_logs()
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        ok = CLEANUP.run() and ok
        if server is not None:
            server.stop()
            import shutil

            shutil.rmtree(server.dir, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
