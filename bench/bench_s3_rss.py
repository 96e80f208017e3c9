#!/usr/bin/env python3
"""Daemon peak RSS while spilling to S3 vs to a cold directory (issue "small
objects", item 7).

For each tier (s3: s3rver on loopback, objects on --server-root; nvme: a
directory under /var/tmp) one mount with hot_size=--hot-size and the same
io_workers / s3_part_size; --size bytes of random data are written through
it (the evictor spills while the writer waits for room), then the file is
evicted whole (the rest spilled) and read back and checked. Reported: write
MiB/s (spill-bound), the daemon's VmHWM (/proc/PID/status) after the spill,
and VmHWM after the read-back. Run as root:
  python3 bench/bench_s3_rss.py --build build [--size 1G] [--tiers s3,nvme]
"""

import argparse
import os
import signal
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
import bench_s3  # noqa: E402
from benchlib import CLEANUP, BenchError, log, on_signal, parse_size, start_daemon  # noqa: E402

MiB = 1 << 20


def hwm(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1]) / 1024.0
    raise BenchError("no VmHWM for pid %d" % pid)


def run_tier(opts, tier, server, src, sha, shm, mntroot, work):
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
    f = os.path.join(mnt, "big")
    t0 = time.monotonic()
    bench_s3.guarded(lambda: bench_s3.copy_into(src, f), opts.timeout, "writing " + f)
    dt = time.monotonic() - t0
    bench_s3.guarded(lambda: os.setxattr(f, "user.spillway.evict", b"1"), opts.timeout, "evict")
    dt_all = time.monotonic() - t0
    h_spill = hwm(proc.pid)
    if bench_s3.guarded(lambda: bench_s3.sha_of(f), opts.timeout, "reading " + f) != sha:
        raise BenchError("%s: read back differs" % tier)
    h_read = hwm(proc.pid)
    print("%-5s write %6.1f MiB/s  write+evict %6.1f MiB/s  VmHWM after spill %6.1f MiB, "
          "after read-back %6.1f MiB" % (tier, opts.size / MiB / dt, opts.size / MiB / dt_all,
                                           h_spill, h_read), flush=True)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--build", default="build")
    p.add_argument("--size", type=parse_size, default=1 << 30)
    p.add_argument("--hot-size", type=parse_size, default=256 * MiB)
    p.add_argument("--part-size", type=parse_size, default=16 * MiB)
    p.add_argument("--io-workers", type=int, default=8)
    p.add_argument("--tiers", default="s3,nvme")
    p.add_argument("--spillway-opts", default="")
    p.add_argument("--server-root", default="/dev/shm")
    opts = p.parse_args(argv)
    opts.bin = os.path.join(os.path.abspath(opts.build), "spillway")
    opts.timeout = 120 + opts.size // MiB
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    server, ok = None, False
    try:
        work = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-work-"))
        mntroot = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-mnt-"))
        shm = CLEANUP.add_dir(tempfile.mkdtemp(prefix="spw-rss-", dir="/dev/shm"))
        src = os.path.join(shm, "source")
        sha = bench_s3.make_source(src, opts.size)
        for tier in opts.tiers.split(","):
            if tier == "s3" and server is None:
                server = bench_s3.S3rver(opts.server_root, os.path.join(work, "s3rver.log"))
                server.start()
            run_tier(opts, tier, server, src, sha, shm, mntroot, work)
        ok = True
    except (BenchError, OSError) as e:
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
