#!/usr/bin/env python3
"""spillway fault-in benchmark (issue 13): cold reads at device speed.

One run prints, for each build given (--build, and --base for a before/after
comparison), against plain files on the same cold disk:

  first byte  open + 4 KiB pread of an evicted file, caches dropped, at
              offset 0 and at a random offset, over --files files
              (restore=lazy: the fault-in path alone), p50/p99;
  random 4k   4 KiB preads at random offsets of evicted files (each file
              evicted again before its read), p50/p99;
  sequential  a cold --seq-size file read through the mount (1 MiB reads,
              restore=open, the default) vs fio sequential read (io_uring,
              O_DIRECT, 1 MiB, iodepth 8) of a file in the cold directory;
  cpu         daemon user+sys CPU seconds (/proc/PID/stat) per GiB spilled
              (evict of the sequential file) and per GiB restored (its read).

Plain files have their page cache dropped with posix_fadvise(DONTNEED) and
/proc/sys/vm/drop_caches before every sample. Run as root:

  python3 bench/bench_faultin.py --build build [--base OLD_BUILD] [--cold /var/tmp]
"""

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
KiB = 1 << 10


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError:
        pass


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Mount:
    def __init__(self, binary, cold_root, opts):
        self.hot = tempfile.mkdtemp(prefix="fib-hot-", dir="/dev/shm")
        self.cold = tempfile.mkdtemp(prefix="fib-cold-", dir=cold_root)
        self.mnt = tempfile.mkdtemp(prefix="fib-mnt-")
        self.log = tempfile.mktemp(prefix="fib-log-")
        o = "hot_dir=%s,hot_size=3G,nvme=%s,min_spill_size=64M,chunk_size=4M,state_dir=none" % (
            self.hot, self.cold) + ("," + opts if opts else "")
        self.proc = subprocess.Popen([binary, "-f", "-o", o, self.mnt],
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        t0 = time.time()
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None or time.time() - t0 > 20:
                raise RuntimeError("mount failed: " + open(self.log).read()[-2000:])
            time.sleep(0.05)

    def path(self, n):
        return os.path.join(self.mnt, n)

    def stats(self):
        return json.loads(os.getxattr(self.mnt, "user.spillway.stats"))

    def close(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=False)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for d in (self.hot, self.cold, self.mnt):
            shutil.rmtree(d, ignore_errors=True)
        os.unlink(self.log)


def write_file(path, size, seed, sync=False):
    rng = random.Random(seed)
    blk = rng.randbytes(MiB)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        for off in range(0, size, MiB):
            os.pwrite(fd, blk[:min(MiB, size - off)], off)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def evict(path):
    os.setxattr(path, "user.spillway.evict", b"1")


def timed_read(path, off, n=4 * KiB, plain=False):
    if plain:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    try:
        if not plain:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        b = os.pread(fd, n, off)
    finally:
        os.close(fd)
    dt = time.perf_counter() - t0
    assert len(b) == n
    return dt


def first_byte(binary, a, plain_dir):
    """{case: [seconds]} for spillway (restore=lazy) and plain files."""
    m = Mount(binary, a.cold, "restore=lazy")
    out = {}
    try:
        names = ["f%03d" % i for i in range(a.files)]
        for i, n in enumerate(names):
            write_file(m.path(n), a.file_size, i)
            if not os.path.exists(os.path.join(plain_dir, n)):
                write_file(os.path.join(plain_dir, n), a.file_size, i, sync=True)
        rng = random.Random(7)
        offs = [rng.randrange(0, a.file_size - 4 * KiB) // 4096 * 4096 for _ in names]
        for case, olist in (("offset 0", [0] * len(names)), ("random offset", offs)):
            for kind in ("spillway", "plain"):
                xs = []
                if kind == "spillway":
                    for n in names:
                        evict(m.path(n))
                drop_caches()
                for n, off in zip(names, olist):
                    p = m.path(n) if kind == "spillway" else os.path.join(plain_dir, n)
                    xs.append(timed_read(p, off, plain=kind == "plain"))
                out[(case, kind)] = xs
        # random 4k reads, files evicted again, 4 reads per file
        for kind in ("spillway", "plain"):
            xs = []
            if kind == "spillway":
                for n in names:
                    evict(m.path(n))
            drop_caches()
            for r in range(4):
                for n in names:
                    p = m.path(n) if kind == "spillway" else os.path.join(plain_dir, n)
                    off = rng.randrange(0, a.file_size - 4 * KiB) // 4096 * 4096
                    xs.append(timed_read(p, off, plain=kind == "plain"))
            out[("random 4k", kind)] = xs
        out["stats"] = m.stats()
    finally:
        m.close()
    return out


def fio_read(path, size):
    r = subprocess.run(["fio", "--name=seq", "--filename=" + path, "--rw=read", "--bs=1M",
                        "--size=%d" % size, "--ioengine=io_uring", "--direct=1",
                        "--iodepth=8", "--output-format=json"],
                       capture_output=True, text=True, timeout=600)
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]["read"]
    return size / MiB / (job["runtime"] / 1000.0)


def sequential(binary, a, plain_dir):
    m = Mount(binary, a.cold, "restore=open")
    try:
        p = m.path("seq")
        write_file(p, a.seq_size, 99)
        pid = m.proc.pid
        c0 = cpu_s(pid)
        evict(p)
        c1 = cpu_s(pid)
        drop_caches()
        t0 = time.perf_counter()
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            got = 0
            while True:
                b = os.read(fd, MiB)
                if not b:
                    break
                got += len(b)
        finally:
            os.close(fd)
        dt = time.perf_counter() - t0
        c2 = cpu_s(pid)
        assert got == a.seq_size
        gib = a.seq_size / (1 << 30)
        st = m.stats()
        return {"mount_MiBps": a.seq_size / MiB / dt, "cpu_spill_s_per_GiB": (c1 - c0) / gib,
                "cpu_restore_s_per_GiB": (c2 - c1) / gib, "stats": st}
    finally:
        m.close()


def run_build(binary, a, plain_dir, fio_mibps):
    fb = first_byte(binary, a, plain_dir)
    sq = sequential(binary, a, plain_dir)
    rows = []
    for case in ("offset 0", "random offset", "random 4k"):
        s, p = fb[(case, "spillway")], fb[(case, "plain")]
        rows.append((case, pct(s, 50) * 1e3, pct(s, 99) * 1e3, pct(p, 50) * 1e3,
                     pct(p, 99) * 1e3))
    return {"rows": rows, "seq": sq, "fio": fio_mibps, "lat": fb["stats"].get("latency")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--base", help="an older build to compare with")
    ap.add_argument("--cold", default="/var/tmp")
    ap.add_argument("--files", type=int, default=50)
    ap.add_argument("--file-size", type=int, default=16 * MiB)
    ap.add_argument("--seq-size", type=int, default=1 << 30)
    a = ap.parse_args()
    plain_dir = tempfile.mkdtemp(prefix="fib-plain-", dir=a.cold)
    try:
        fpath = os.path.join(plain_dir, "fio.dat")
        write_file(fpath, a.seq_size, 5, sync=True)
        fio = fio_read(fpath, a.seq_size)
        os.unlink(fpath)
        builds = [("after", a.build)] + ([("before", a.base)] if a.base else [])
        res = {}
        for name, b in builds:
            res[name] = run_build(os.path.join(b, "spillway"), a, plain_dir, fio)
        print("\n%d files of %d MiB, 4 KiB reads, ms (p50 / p99); plain = same files on %s"
              % (a.files, a.file_size // MiB, a.cold))
        for name, r in res.items():
            print("[%s]" % name)
            for case, s50, s99, p50, p99 in r["rows"]:
                print("  %-14s spillway %7.2f / %7.2f   plain %6.2f / %6.2f   ratio p50 %.2fx"
                      % (case, s50, s99, p50, p99, s50 / p50))
            sq = r["seq"]
            print("  sequential     mount %.0f MiB/s  fio %.0f MiB/s  ratio %.2fx"
                  % (sq["mount_MiBps"], r["fio"], sq["mount_MiBps"] / r["fio"]))
            print("  cpu            %.2f s/GiB spilled, %.2f s/GiB restored"
                  % (sq["cpu_spill_s_per_GiB"], sq["cpu_restore_s_per_GiB"]))
            if r["lat"]:
                print("  daemon latency %s" % json.dumps(r["lat"]))
    finally:
        shutil.rmtree(plain_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
