#!/usr/bin/env python3
"""FUSE over io_uring (issue 35 item 4): io_uring=on against io_uring=off,
the same binary (built against libfuse 3.18+), the same machine, one run.

Per round, for each mode in turn (the order alternates between rounds), one
mount (passthrough=off, so every read reaches the daemon; hot tier on
/dev/shm, cold directory on --cold) and these steps:

  randread   fio 4 KiB O_DIRECT random reads of a 64 MiB hot file, psync,
             --jobs jobs, --secs seconds: requests per second (each read is
             one FUSE request) and the daemon's CPU microseconds per request;
  write4k    fio 4 KiB sequential writes of 64 MiB, psync: requests per
             second and CPU per request;
  write, spill, read   bench_cpu.py's steps (dd of --size bytes in 4 files,
             evict them, cat them cold with the caches dropped): the daemon's
             CPU seconds per GiB, and fio's for the same I/O beside;
  read4      the same 4 files written again, evicted, and read cold by 4
             readers at once (restore=open: readers wait for restores):
             MiB/s and the daemon's CPU seconds per GiB.

fio beside the request rows: the same job on a file in /dev/shm (no FUSE).

Medians over --rounds rounds (after one warm-up round, not counted), and the
on/off ratio of each. The kernel's switch, /sys/module/fuse/parameters/
enable_uring, must be Y for io_uring=on to take effect: with --set-param the
bench sets it for the run and puts back what it found (it only matters to
daemons that ask for io_uring); the mount's log line says whether the rings
ran, and the bench stops if they did not. Run as root:

  python3 bench/bench_uring.py --build build-3.18 [--size 1G] [--rounds 3] [--set-param]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import bench_cpu  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
PARAM = "/sys/module/fuse/parameters/enable_uring"
MODES = ("off", "on")


def fio_rate(args):
    """(requests per second, fio's CPU seconds) of a fio job."""
    cmd = ["fio", "--name=u", "--output-format=json"] + args
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout
    js = json.loads(out[out.index(b"{"):])["jobs"]
    iops = sum(j["read"]["iops"] + j["write"]["iops"] for j in js)
    cpu = sum((j["usr_cpu"] + j["sys_cpu"]) / 100.0 * j["job_runtime"] / 1000.0 for j in js)
    return iops, cpu


def requests(m, path, fio_args, count=None, secs=None):
    """(requests/s, the daemon's CPU us/request) of a fio job on the mount:
    count requests, or as many as it made in secs seconds."""
    c0 = sum(m.cpu())
    iops, _ = fio_rate(["--filename=" + path] + fio_args)
    c1 = sum(m.cpu())
    n = count if count else iops * secs
    return iops, (c1 - c0) / max(1.0, n) * 1e6


def wait_log(m, what, secs=10):
    """The mount's log once it holds `what` (op_init runs just after the
    mount appears), or all of it at the deadline."""
    t0 = time.monotonic()
    while True:
        with open(m.log) as f:
            log = f.read()
        if what in log or time.monotonic() - t0 > secs:
            return log
        time.sleep(0.05)


def one_mode(a, mode, src, digest):
    m = bench_cpu.Mount(a.binary, a.cold, "passthrough=off,io_uring=%s%s" % (
        mode, "," + a.opts if a.opts else ""))
    try:
        log = wait_log(m, "io_uring o")
        if mode == "on" and "io_uring on" not in log:
            raise RuntimeError("io_uring=on did not start the rings: %s" % log.strip()[-400:])
        out = {}
        hotf = os.path.join(m.mnt, "hot64")
        with open(hotf, "wb") as f:
            f.write(os.urandom(64 * MiB))
        rr = ["--rw=randread", "--bs=4k", "--direct=1", "--ioengine=psync", "--size=64M",
              "--numjobs=%d" % a.jobs, "--time_based", "--runtime=%d" % a.secs,
              "--group_reporting=0"]
        out["randread"] = requests(m, hotf, rr, secs=a.secs)
        out["write4k"] = requests(m, os.path.join(m.mnt, "w4k"),
                                  ["--rw=write", "--bs=4k", "--ioengine=psync", "--size=64M"],
                                  count=64 * MiB // 4096)
        os.unlink(hotf)
        os.unlink(os.path.join(m.mnt, "w4k"))
        cpu = bench_cpu.one_run(a, m, src, digest, None, None)
        for step in ("write", "spill", "read"):
            out[step] = (cpu[step][0] + cpu[step][1], cpu[step][3])  # daemon, fio
        out["read4"] = parallel_cold_read(a, m, src)
        return out
    finally:
        m.close()


def parallel_cold_read(a, m, src):
    """(MiB/s, daemon CPU s/GiB) of 4 readers reading 4 evicted files at once."""
    per = a.size // 4
    names = [os.path.join(m.mnt, "p%d" % i) for i in range(4)]
    for i, n in enumerate(names):
        subprocess.run(["dd", "if=" + src, "of=" + n, "bs=1M", "count=%d" % (per // MiB),
                        "skip=%d" % (i * per // MiB), "status=none"], check=True)
        os.setxattr(n, "user.spillway.evict", b"1")
    bench_cpu.drop_caches()
    c0 = sum(m.cpu())
    t0 = time.monotonic()
    ps = [subprocess.Popen(["cat", n], stdout=subprocess.DEVNULL) for n in names]
    for p in ps:
        if p.wait() != 0:
            raise RuntimeError("cat failed")
    dt = time.monotonic() - t0
    c1 = sum(m.cpu())
    for n in names:
        os.unlink(n)
    return a.size / MiB / dt, (c1 - c0) / (a.size / GiB)


def fio_beside(a):
    """The request rows' fio jobs on /dev/shm: {step: (requests/s, CPU us/request)}."""
    f = tempfile.mktemp(prefix="buring-fio-", dir="/dev/shm")
    try:
        with open(f, "wb") as out:
            out.write(os.urandom(64 * MiB))
        iops, cpu = fio_rate(["--filename=" + f, "--rw=randread", "--bs=4k", "--direct=1",
                              "--ioengine=psync", "--size=64M", "--numjobs=%d" % a.jobs,
                              "--time_based", "--runtime=%d" % a.secs])
        res = {"randread": (iops, cpu / (iops * a.secs) * 1e6)}
        os.unlink(f)
        iops, cpu = fio_rate(["--filename=" + f, "--rw=write", "--bs=4k", "--ioengine=psync",
                              "--size=64M"])
        res["write4k"] = (iops, cpu / (64 * MiB // 4096) * 1e6)
        return res
    finally:
        if os.path.exists(f):
            os.unlink(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--size", type=bench_cpu.parse_size, default=GiB)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2, help="fio jobs of the 4 KiB random reads")
    ap.add_argument("--secs", type=int, default=5, help="seconds of the 4 KiB random reads")
    ap.add_argument("--cold", default="/var/tmp")
    ap.add_argument("--opts", default="", help="more mount options for both modes")
    ap.add_argument("--set-param", action="store_true",
                    help="set %s to Y for the run (and put it back)" % PARAM)
    a = ap.parse_args()
    a.files = 4
    a.binary = os.path.join(a.build, "spillway")
    found = None
    src = os.path.join(a.cold, "buring-src-%d" % os.getpid())
    rounds = {mode: [] for mode in MODES + ("fio",)}
    try:
        if a.set_param and os.path.exists(PARAM):
            with open(PARAM) as f:
                found = f.read().strip()
            with open(PARAM, "w") as f:
                f.write("Y\n")
        digest = bench_cpu.make_source(src, a.size)
        for r in range(a.rounds + 1):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                res = one_mode(a, mode, src, digest)
                print("%s %s: %s" % ("warm-up" if r == 0 else "round %d" % r, mode, json.dumps(
                    {k: [round(x, 3) for x in v] for k, v in res.items()})), file=sys.stderr)
                if r:
                    rounds[mode].append(res)
            if r:
                res = fio_beside(a)
                print("round %d fio: %s" % (r, json.dumps(res)), file=sys.stderr)
                rounds["fio"].append(res)
    finally:
        if found is not None:
            with open(PARAM, "w") as f:
                f.write(found + "\n")
        if os.path.exists(src):
            os.unlink(src)

    def med(mode, step, i):
        return statistics.median(x[step][i] for x in rounds[mode])
    print("FUSE over io_uring, %s: medians of %d rounds, modes alternated; passthrough=off" % (
        os.uname().release, a.rounds))
    print("| step | io_uring=off | io_uring=on | on/off | fio, same I/O |")
    print("|---|---|---|---|---|")
    for step, what in (("randread", "4 KiB O_DIRECT random reads, %d jobs" % a.jobs),
                       ("write4k", "4 KiB writes")):
        for i, unit, fmt in ((0, "requests/s", "%.0f"), (1, "daemon CPU us/request", "%.1f")):
            off, on = med("off", step, i), med("on", step, i)
            print(("| %s: %s | " + fmt + " | " + fmt + " | %.2fx | " + fmt + " |") % (
                what, unit, off, on, on / off, med("fio", step, i)))
    for step, what in (("write", "write (dd 1M)"), ("spill", "spill (evict)"),
                       ("read", "cold read (cat)")):
        off, on = med("off", step, 0), med("on", step, 0)
        print("| %s: daemon CPU s/GiB | %.2f | %.2f | %.2fx | %.2f |" % (
            what, off, on, on / off, med("off", step, 1)))
    for i, unit, fmt in ((0, "MiB/s", "%.0f"), (1, "daemon CPU s/GiB", "%.2f")):
        off, on = med("off", "read4", i), med("on", "read4", i)
        print(("| cold read, 4 readers at once: %s | " + fmt + " | " + fmt + " | %.2fx | - |") % (
            unit, off, on, on / off))


if __name__ == "__main__":
    main()
