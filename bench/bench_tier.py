#!/usr/bin/env python3
"""spillway tiering benchmark (issue 3): spill, restore, first byte, packing, pipeline.

Measures the cold-tier paths of spillway against fio on the same cold
directory, on a real disk (default /var/tmp):

  spill      setxattr user.spillway.evict on a dirty file (synchronous
             spill + drop), bytes / seconds, vs fio sequential write
             (io_uring, O_DIRECT, 1M, iodepth 8, end_fsync) of the same bytes;
  restore    a cold file read sequentially through the mount (restore=open
             prefetch), and the user.spillway.warm xattr, vs fio sequential
             read (io_uring, O_DIRECT, 1M, iodepth 8);
  ttfb       open + 4 KiB read at offset 0 of a cold file, caches dropped,
             p50/p99 over many opens;
  segments   many small objects through a small hot tier: segments written
             vs the ideal spilled_bytes / min_spill_size;
  pipeline   examples/longdoc_pipeline through a mount with a small hot tier
             vs the same program on a plain directory on the cold disk.

A warm-up round runs first and is discarded; medians of the measured rounds
are printed with the ratios and the issue's targets. Misses are
informational: the exit status is non-zero only when the harness fails.
Uses benchlib.py's cleanup, daemon and tool helpers (same directory).
Every mount, daemon and temp dir is removed on every exit path. Run as root.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import zlib

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import benchlib  # noqa: E402  (shared: cleanup, daemons, tools)
from benchlib import (  # noqa: E402
    CLEANUP,
    REPO,
    Watchdog,
    cold_fs,
    med,
    print_table,
    GiB,
    MiB,
    BenchError,
    drop_caches,
    fmt_size,
    log,
    parse_size,
    run_tool,
    start_daemon,
    tail,
)

KiB = 1024
ITEMS = ("spill", "restore", "ttfb", "segments", "pipeline")
RESTORE_WAIT = 120.0  # seconds for a background restore / the evictor to settle


# --------------------------------------------------------------------------
# Small helpers


def io_timeout(nbytes):
    """Seconds allowed for moving nbytes: >= 20 MiB/s or it is a hang."""
    return max(120, nbytes // (20 * MiB))


def state(path):
    """user.spillway.state of a file as a dict of ints."""
    with Watchdog(60, "getxattr state of " + path):
        raw = os.getxattr(path, "user.spillway.state").decode()
    out = {}
    for kv in raw.split():
        k, _, v = kv.partition("=")
        try:
            out[k] = int(v)
        except ValueError:
            pass
    return out


def stats(mnt):
    with Watchdog(60, "getxattr stats of " + mnt):
        raw = os.getxattr(mnt, "user.spillway.stats")
    return json.loads(raw.decode())


def nchunks(size, chunk):
    return (size + chunk - 1) // chunk


def wait_for(cond, what, timeout=RESTORE_WAIT, step=0.02):
    """Poll cond() until true (a benchmark waits for the daemon's background
    work to settle; a test would use an event instead)."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise BenchError("%s: not reached within %ds" % (what, timeout))
        time.sleep(step)


def percentile(xs, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    s = sorted(xs)
    k = max(1, math.ceil(p / 100.0 * len(s)))
    return s[k - 1]


def fio_direct(path, rw, size, timeout):
    """fio sequential write (fresh file, end_fsync) or read of path with
    io_uring, O_DIRECT, 1 MiB blocks, iodepth 8. Returns MiB/s."""
    args = [
        "fio",
        "--name=tier-" + rw,
        "--filename=" + path,
        "--rw=" + rw,
        "--bs=1M",
        "--size=%d" % size,
        "--ioengine=io_uring",
        "--direct=1",
        "--iodepth=8",
        "--fallocate=none",
    ]
    return benchlib.fio_mibs(args, path, rw, size, timeout)


# --------------------------------------------------------------------------
# Mounts


class Mount:
    """One spillway daemon with its own hot dir (tmpfs) and cold dir (disk)."""

    def __init__(self, opts, roots, name, hot_size, min_spill, extra=""):
        self.name = name
        self.hot = tempfile.mkdtemp(prefix=name + "-hot-", dir=roots["shm"])
        self.cold = tempfile.mkdtemp(prefix=name + "-cold-", dir=roots["cold"])
        self.mnt = tempfile.mkdtemp(prefix=name + "-", dir=roots["mnt"])
        self.log = os.path.join(roots["logs"], name + ".log")
        o = "hot_dir=%s,hot_size=%s,nvme=%s,min_spill_size=%s,io_workers=%d,chunk_size=%s" % (
            self.hot,
            fmt_size(hot_size),
            self.cold,
            fmt_size(min_spill),
            opts.io_workers,
            fmt_size(opts.chunk_size),
        )
        for more in (extra, opts.spillway_opts):
            if more:
                o += "," + more
        self.options = o
        args = [opts.spillway_bin, "-f", "-o", o, self.mnt]
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in opts.spillway_env)
        log("%s: %s" % (name, " ".join(opts.spillway_env + args)))
        self.proc = start_daemon(name, args, self.mnt, self.log, env)
        self.entry = CLEANUP.daemons[-1]

    def alive(self):
        if self.proc.poll() is not None:
            raise BenchError(
                "%s (pid %d) died with %d:\n%s"
                % (self.name, self.proc.pid, self.proc.returncode, tail(self.log))
            )

    def close(self):
        """Unmount, reap the daemon, remove its hot and cold dirs."""
        ok = CLEANUP.stop_daemon(self.name, self.proc, self.mnt)
        if self.entry in CLEANUP.daemons:
            CLEANUP.daemons.remove(self.entry)
        if not ok:
            raise BenchError("%s: %s still mounted after stop" % (self.name, self.mnt))
        if self.proc.returncode not in (0, None):
            raise BenchError(
                "%s exited with %d:\n%s" % (self.name, self.proc.returncode, tail(self.log))
            )
        for d in (self.mnt, self.hot, self.cold):
            shutil.rmtree(d, ignore_errors=True)


# --------------------------------------------------------------------------
# Items 1-3: one mount, one file of --size bytes


class BigFile:
    """Writes a file of size bytes through the mount, 1 MiB at a time, from
    a random block with each MiB's index stamped in; remembers its crc32 and
    first 4 KiB to check what comes back."""

    def __init__(self, path, size):
        self.path, self.size = path, size
        self.block = bytearray(os.urandom(MiB))
        self.head = None
        self.crc = None

    def write(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        crc = 0
        with Watchdog(io_timeout(self.size), "writing " + self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                for i in range(self.size // MiB):
                    self.block[0:8] = i.to_bytes(8, "little")
                    if i == 0:
                        self.head = bytes(self.block[:4096])
                    crc = zlib.crc32(self.block, crc)
                    if os.write(fd, self.block) != MiB:
                        raise BenchError("short write to " + self.path)
            finally:
                os.close(fd)
        self.crc = crc

    def verify(self):
        crc, got = 0, 0
        with Watchdog(io_timeout(self.size), "verifying " + self.path):
            with open(self.path, "rb", buffering=0) as f:
                buf = bytearray(MiB)
                while True:
                    n = f.readinto(buf)
                    if not n:
                        break
                    crc = zlib.crc32(memoryview(buf)[:n], crc)
                    got += n
        if got != self.size or crc != self.crc:
            raise BenchError(
                "%s: read back %d bytes crc %08x, wrote %d bytes crc %08x"
                % (self.path, got, crc, self.size, self.crc)
            )


def evict(path, n, what):
    """Evict path (n chunks) and check that every chunk is cold."""
    with Watchdog(io_timeout(os.stat(path).st_size), "evict of " + path):
        os.setxattr(path, "user.spillway.evict", b"1")
    st = state(path)
    if st.get("cold") != n:
        raise BenchError("%s: after evict %s: %r, expected %d cold chunks" % (path, what, st, n))


def wait_restored(path, n, lazy=False):
    """No chunk is restoring, and (restore=open) every chunk is back."""
    wait_for(
        lambda: (lambda s: s.get("restoring") == 0 and (lazy or s.get("hot") == n))(state(path)),
        "restore of " + path,
    )


def round_spill_restore(opts, m, bf, fio_path, results, rnd, verify):
    """One round of items 1 and 2 (spillway and fio interleaved)."""
    size, n = opts.size, nchunks(opts.size, opts.chunk_size)

    def spw_spill():
        bf.write()
        st = state(bf.path)
        if st.get("dirty") != n:
            raise BenchError("%s: %r before evict, expected %d dirty chunks" % (bf.path, st, n))
        t0 = time.perf_counter()
        with Watchdog(io_timeout(size), "evict of " + bf.path):
            os.setxattr(bf.path, "user.spillway.evict", b"1")
        dt = time.perf_counter() - t0
        st = state(bf.path)
        if st.get("cold") != n:
            raise BenchError("%s: %r after evict, expected %d cold chunks" % (bf.path, st, n))
        results["spill"].append(size / MiB / dt)

    def read_all(what):
        """drop_caches, then open + 1 MiB reads to EOF. Returns MiB/s."""
        drop_caches(3)
        buf = bytearray(MiB)
        got = 0
        with Watchdog(io_timeout(size), what + " of " + bf.path):
            t0 = time.perf_counter()
            fd = os.open(bf.path, os.O_RDONLY)
            try:
                while True:
                    r = os.readv(fd, [buf])
                    if r <= 0:
                        break
                    got += r
            finally:
                os.close(fd)
            dt = time.perf_counter() - t0
        if got != size:
            raise BenchError("%s: read %d bytes, expected %d" % (bf.path, got, size))
        return size / MiB / dt

    def spw_restore():
        results["restore_read"].append(read_all("restore read"))
        wait_restored(bf.path, n)
        if verify:
            bf.verify()
        # the FUSE read path alone: the same read with every chunk hot
        results["hot_read"].append(read_all("hot read"))
        evict(bf.path, n, "(restored copy)")
        drop_caches(3)
        t0 = time.perf_counter()
        with Watchdog(io_timeout(size), "warm of " + bf.path):
            os.setxattr(bf.path, "user.spillway.warm", b"1")
        dt = time.perf_counter() - t0
        st = state(bf.path)
        if st.get("hot") != n:
            raise BenchError("%s: %r after warm, expected %d hot chunks" % (bf.path, st, n))
        results["restore_warm"].append(size / MiB / dt)
        if verify:
            bf.verify()

    def fio_write():
        if os.path.exists(fio_path):
            os.unlink(fio_path)
        results["fio_write"].append(fio_direct(fio_path, "write", size, io_timeout(size)))

    def fio_read():
        drop_caches(3)
        results["fio_read"].append(fio_direct(fio_path, "read", size, io_timeout(size)))

    # alternate who goes first, so a trend in machine noise hits both sides
    order = [spw_spill, fio_write, spw_restore, fio_read]
    if rnd % 2:
        order = [fio_write, spw_spill, fio_read, spw_restore]
    for step in order:
        step()
        m.alive()


def ttfb_samples(opts, m, bf, count, out, lazy=False):
    """count samples of: evict (file fully cold), drop caches, then time
    open and pread 4 KiB at 0. out gets (open ms, read ms) pairs. With
    restore=open, waits for the background restore between samples."""
    n = nchunks(opts.size, opts.chunk_size)
    for _ in range(count):
        wait_restored(bf.path, n, lazy)
        evict(bf.path, n, "for ttfb")
        drop_caches(3)
        with Watchdog(60, "first byte of " + bf.path):
            t0 = time.perf_counter()
            fd = os.open(bf.path, os.O_RDONLY)
            try:
                t1 = time.perf_counter()
                data = os.pread(fd, 4096, 0)
                t2 = time.perf_counter()
            finally:
                os.close(fd)
        if data != bf.head:
            raise BenchError("%s: first 4 KiB read back differ from what was written" % bf.path)
        out.append(((t1 - t0) * 1000.0, (t2 - t1) * 1000.0))
        m.alive()
    wait_restored(bf.path, n, lazy)


def run_ttfb_lazy(opts, roots, results):
    """The same first-byte samples on a restore=lazy mount: only the chunk
    read is restored, nothing competes with it (a diagnostic row)."""
    hot = opts.hot_size or max(GiB, 2 * opts.size + 512 * MiB)
    m = Mount(opts, roots, "spw-lazy", hot, opts.min_spill, "restore=lazy")
    try:
        bf = BigFile(os.path.join(m.mnt, "big.dat"), opts.size)
        bf.write()
        log("time to first byte, restore=lazy: %d warm-up + %d samples" % (3, opts.ttfb_samples))
        ttfb_samples(opts, m, bf, 3, [], lazy=True)
        ttfb_samples(opts, m, bf, opts.ttfb_samples, results["ttfb_lazy"], lazy=True)
    finally:
        m.close()


def run_file_items(opts, roots, results, extra):
    hot = opts.hot_size or max(GiB, 2 * opts.size + 512 * MiB)
    m = Mount(opts, roots, "spw-file", hot, opts.min_spill)
    try:
        fio_path = os.path.join(m.cold, "fio-baseline.dat")  # the same cold directory
        bf = BigFile(os.path.join(m.mnt, "big.dat"), opts.size)
        if "spill" in opts.only or "restore" in opts.only:
            total = opts.warmup + opts.reps
            for i in range(total):
                warm = i < opts.warmup
                log("spill/restore round %d/%d%s" % (i + 1, total, " (warm-up)" if warm else ""))
                sink = {k: [] for k in results} if warm else results
                round_spill_restore(opts, m, bf, fio_path, sink, i, verify=(i == 0))
            if os.path.exists(fio_path):
                os.unlink(fio_path)
        if "ttfb" in opts.only:
            if bf.crc is None:
                bf.write()
            log("time to first byte: %d warm-up + %d samples" % (3, opts.ttfb_samples))
            ttfb_samples(opts, m, bf, 3, [])
            ttfb_samples(opts, m, bf, opts.ttfb_samples, results["ttfb"])
        st = stats(m.mnt)
        extra["file_stats"] = st
        if st["errors"]["io"] or st["errors"]["crc"]:
            raise BenchError("spillway reported errors: %r" % st["errors"])
    finally:
        m.close()


# --------------------------------------------------------------------------
# Item 4: many small objects through a small hot tier


def settle(m):
    """Wait until the evictor is idle: usage at or under spill_threshold and
    no new segment for two evictor periods (it wakes every second)."""
    limit = None

    def quiet():
        nonlocal limit
        s = stats(m.mnt)
        limit = s["hot"]["limit"]
        return s["hot"]["used"] + s["hot"]["reserved"] <= 0.75 * limit and not s["writers_waiting"]

    wait_for(quiet, "evictor below spill_threshold", step=0.1)
    last = stats(m.mnt)["segments"]["written"]
    deadline = time.monotonic() + RESTORE_WAIT
    while time.monotonic() < deadline:
        time.sleep(2.2)
        now = stats(m.mnt)["segments"]["written"]
        if now == last:
            return
        last = now
    raise BenchError("evictor still writing segments after %ds" % RESTORE_WAIT)


def run_segments(opts, roots, extra):
    m = Mount(opts, roots, "spw-objs", opts.obj_hot_size, opts.min_spill)
    try:
        d = os.path.join(m.mnt, "objects")
        os.mkdir(d)
        payload = bytearray(os.urandom(opts.object_size))
        per_dir = 1000
        log(
            "segments: writing %d x %s objects through hot_size=%s"
            % (opts.objects, fmt_size(opts.object_size), fmt_size(opts.obj_hot_size))
        )
        total = opts.objects * opts.object_size
        with Watchdog(io_timeout(total) + opts.objects // 200, "writing objects"):
            t0 = time.perf_counter()
            for i in range(opts.objects):
                if i % per_dir == 0:
                    sub = os.path.join(d, "%04d" % (i // per_dir))
                    os.mkdir(sub)
                payload[0:8] = i.to_bytes(8, "little")
                fd = os.open(
                    os.path.join(sub, "obj-%07d" % i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644
                )
                try:
                    if os.write(fd, payload) != opts.object_size:
                        raise BenchError("short write of object %d" % i)
                finally:
                    os.close(fd)
            dt = time.perf_counter() - t0
            settle(m)
        m.alive()
        st = stats(m.mnt)
        # spot-check a few objects that went cold (the oldest) and one recent
        for i in sorted({0, opts.objects // 3, opts.objects - 1}):
            p = os.path.join(d, "%04d" % (i // per_dir), "obj-%07d" % i)
            with Watchdog(60, "reading " + p):
                with open(p, "rb") as f:
                    data = f.read()
            payload[0:8] = i.to_bytes(8, "little")
            if data != payload:
                raise BenchError("%s: content differs from what was written" % p)
        spilled = st["spilled"]["bytes"]
        written = st["segments"]["written"]
        extra["segments"] = {
            "objects": opts.objects,
            "object_size": opts.object_size,
            "write_s": dt,
            "objects_per_s": opts.objects / dt,
            "MiBps": total / MiB / dt,
            "spilled_bytes": spilled,
            "spilled_chunks": st["spilled"]["chunks"],
            "segments_written": written,
            "segments_bytes": st["segments"]["bytes"],
            "ideal": spilled / opts.min_spill,
            "avg_segment": spilled / written if written else 0,
            "spill_MiBps_daemon": st["spilled"]["MiBps"],
            "write_waits": st["write_waits"],
            "stats": st,
        }
        if st["errors"]["io"] or st["errors"]["crc"] or st["enospc"]:
            raise BenchError("spillway reported errors: %r" % st)
    finally:
        m.close()


# --------------------------------------------------------------------------
# Item 5: the example pipeline


def pipeline_run(opts, path, what):
    args = [opts.pipeline_bin, path, "-p", str(opts.producers), "-t", fmt_size(opts.pipe_total)]
    args += ["-s", fmt_size(opts.pipe_file)]
    t0 = time.perf_counter()
    out = run_tool(args, io_timeout(opts.pipe_total * 2), "longdoc_pipeline on " + what)
    wall = time.perf_counter() - t0
    phases = {}
    for line in out.splitlines():
        k, _, rest = line.partition(":")
        if k in ("produce", "aggregate"):
            phases[k] = float(rest.split()[0])
    if "OK:" not in out or len(phases) != 2:
        raise BenchError("longdoc_pipeline on %s: unexpected output:\n%s" % (what, out))
    return wall, phases


def run_pipeline(opts, roots, results, extra):
    total = opts.warmup + opts.reps
    for i in range(total):
        warm = i < opts.warmup
        log("pipeline round %d/%d%s" % (i + 1, total, " (warm-up)" if warm else ""))
        sink = {k: [] for k in results} if warm else results

        def spw():
            m = Mount(opts, roots, "spw-pipe", opts.pipe_hot_size, opts.min_spill)
            try:
                drop_caches(3)
                wall, ph = pipeline_run(opts, m.mnt, "spillway")
                m.alive()
                st = stats(m.mnt)
                if not warm:
                    extra.setdefault("pipeline_stats", []).append(st)
                if st["errors"]["io"] or st["errors"]["crc"] or st["enospc"]:
                    raise BenchError("spillway reported errors in the pipeline: %r" % st)
            finally:
                m.close()
            sink["pipe_spw"].append(wall)
            sink["pipe_spw_produce"].append(ph["produce"])
            sink["pipe_spw_aggregate"].append(ph["aggregate"])

        def plain():
            d = tempfile.mkdtemp(prefix="plain-", dir=roots["cold"])
            try:
                drop_caches(3)
                wall, ph = pipeline_run(opts, d, "plain directory")
                t0 = time.perf_counter()
                os.sync()
                sink["pipe_plain_sync"].append(time.perf_counter() - t0)
            finally:
                shutil.rmtree(d, ignore_errors=True)
            sink["pipe_plain"].append(wall)
            sink["pipe_plain_produce"].append(ph["produce"])
            sink["pipe_plain_aggregate"].append(ph["aggregate"])

        for step in (spw, plain) if i % 2 == 0 else (plain, spw):
            step()


# --------------------------------------------------------------------------
# Report


def fmt(v, unit):
    if v is None:
        return "-"
    if unit in ("MiB/s", "MiB"):
        return "%.0f" % v if v >= 100 else "%.1f" % v
    if unit == "ms":
        return "%.2f" % v if v < 10 else "%.1f" % v
    if unit == "s":
        return "%.2f" % v
    if unit == "count" and v != int(v):
        return "{:,.1f}".format(v)
    return "{:,.0f}".format(v)


def build_rows(opts, r, extra):
    """[metric, unit, spillway, baseline, baseline name, ratio, target, verdict]."""
    rows, verdicts = [], []

    def add(title, unit, s, b, bname, goal):
        """goal: (">=" | "<=", x, text) compared on s/b, or ("<=abs", limit, text) on s."""
        ratio = s / b if s is not None and b else None
        verdict, gtxt = "-", "-"
        if goal:
            kind, need, gtxt = goal
            if kind == ">=" and ratio is not None:
                verdict = "PASS" if ratio >= need else "MISS"
            elif kind == "<=" and ratio is not None:
                verdict = "PASS" if ratio <= need else "MISS"
            elif kind == "<=abs" and s is not None:
                verdict = "PASS" if s <= need else "MISS"
            if verdict != "-":
                verdicts.append((title, verdict))
        rows.append(
            [title, unit, fmt(s, unit), fmt(b, unit), bname if b is not None else "-",
             "%.2fx" % ratio if ratio is not None else "-", gtxt, verdict]
        )

    sz = fmt_size(opts.size)
    if "spill" in opts.only:
        add("spill %s (evict xattr)" % sz, "MiB/s", med(r["spill"]), med(r["fio_write"]),
            "fio write", (">=", 0.9, ">= 0.9x fio"))
    if "restore" in opts.only:
        add("restore %s, read via mount" % sz, "MiB/s", med(r["restore_read"]),
            med(r["fio_read"]), "fio read", (">=", 0.8, ">= 0.8x fio"))
        add("restore %s, warm xattr" % sz, "MiB/s", med(r["restore_warm"]),
            med(r["fio_read"]), "fio read", (">=", 0.8, ">= 0.8x fio"))
    if "ttfb" in opts.only and r["ttfb"]:
        t = [a + b for a, b in r["ttfb"]]
        add("first 4K of cold %s, p50" % sz, "ms", percentile(t, 50), None, "", None)
        add("first 4K of cold %s, p99" % sz, "ms", percentile(t, 99), None, "",
            ("<=abs", 20.0, "<= 20 ms"))
    if "ttfb" in opts.only and r["ttfb_lazy"]:
        t = [a + b for a, b in r["ttfb_lazy"]]
        add("  same, restore=lazy, p99", "ms", percentile(t, 99), None, "", None)
    if "segments" in opts.only and "segments" in extra:
        sg = extra["segments"]
        add("segments for %dx%s objects" % (sg["objects"], fmt_size(sg["object_size"])),
            "count", sg["segments_written"], sg["ideal"], "ideal", ("<=", 1.25, "<= 1.25x ideal*"))
        add("  average segment size", "MiB", sg["avg_segment"] / MiB, opts.min_spill / MiB,
            "min_spill", None)
    if "pipeline" in opts.only and r["pipe_spw"]:
        add("pipeline %s, %d producers" % (fmt_size(opts.pipe_total), opts.producers), "s",
            med(r["pipe_spw"]), med(r["pipe_plain"]), "plain dir", None)
        add("  produce phase", "s", med(r["pipe_spw_produce"]), med(r["pipe_plain_produce"]),
            "plain dir", None)
        add("  aggregate phase", "s", med(r["pipe_spw_aggregate"]),
            med(r["pipe_plain_aggregate"]), "plain dir", None)
    return rows, verdicts


def report(opts, env, r, extra):
    print()
    print("spillway tiering benchmark (issue 3)")
    env["load"] = "%s at start, %s at end (1/5/15 min)" % (env["load"], benchlib.loadavg())
    for k in ("date", "kernel", "cpu", "memory", "load", "nice", "fio", "libfuse", "spillway",
              "hot", "cold"):
        if k in env:
            print("  %-9s %s" % (k + ":", env[k]))
    print(
        "  run:      chunk_size %s, io_workers %d, min_spill_size %s; median of %d round(s)"
        " after %d warm-up; fio: io_uring, direct, 1M, iodepth 8"
        % (fmt_size(opts.chunk_size), opts.io_workers, fmt_size(opts.min_spill), opts.reps,
           opts.warmup)
    )
    print()
    rows, verdicts = build_rows(opts, r, extra)
    head = ["metric", "unit", "spillway", "baseline", "vs", "ratio", "target", "verdict"]
    print_table(head, rows, {0, 1, 4, 6, 7})
    print()
    misses = [v[0].strip() for v in verdicts if v[1] == "MISS"]
    print(
        "targets: %d/%d PASS%s (informational; the bench does not fail on a miss)"
        % (len(verdicts) - len(misses), len(verdicts),
           ", MISS: " + "; ".join(misses) if misses else "")
    )
    if "segments" in extra:
        print("  * the segment target is this bench's own yardstick (the issue sets none)")
    print()
    print("notes:")
    for key, what in (("ttfb", "restore=open"), ("ttfb_lazy", "restore=lazy")):
        if not r[key]:
            continue
        t = [a + b for a, b in r[key]]
        print(
            "  first byte, %s: %d samples, min %.1f / p50 %.1f / p90 %.1f / p99 %.1f /"
            " max %.1f ms; open (LOOKUP+OPEN after drop_caches) p50 %.1f max %.1f ms,"
            " pread 4K p50 %.1f max %.1f ms"
            % (what, len(t), min(t), percentile(t, 50), percentile(t, 90), percentile(t, 99),
               max(t), percentile([a for a, _ in r[key]], 50), max(a for a, _ in r[key]),
               percentile([b for _, b in r[key]], 50), max(b for _, b in r[key]))
        )
    if r["hot_read"]:
        print(
            "  the FUSE read path alone (same file, all chunks hot, caches dropped): %.0f MiB/s;"
            " the restore read cannot beat it" % med(r["hot_read"])
        )
    fs = extra.get("file_stats")
    if fs:
        print(
            "  daemon's own figures (item 1-2 mount): spill %.0f MiB/s, restore %.0f MiB/s"
            " (per-chunk restore time summed over workers)"
            % (fs["spilled"]["MiBps"], fs["restored"]["MiBps"])
        )
    sg = extra.get("segments")
    if sg:
        print(
            "  objects: %d written in %.1f s (%.0f objects/s, %.0f MiB/s) through hot_size=%s;"
            " spilled %s in %d chunks, %d segments (%.1f MiB payload each, ideal %.1f),"
            " %d writer waits, daemon spill rate %.0f MiB/s"
            % (sg["objects"], sg["write_s"], sg["objects_per_s"], sg["MiBps"],
               fmt_size(opts.obj_hot_size), "%.2f GiB" % (sg["spilled_bytes"] / GiB),
               sg["spilled_chunks"], sg["segments_written"], sg["avg_segment"] / MiB,
               sg["ideal"], sg["write_waits"], sg["spill_MiBps_daemon"])
        )
        if opts.objects_scaled:
            print("  objects: %s" % opts.objects_scaled)
    if r["pipe_spw"]:
        ps = extra.get("pipeline_stats") or [{}]
        last = ps[-1]
        print(
            "  pipeline: spillway hot_size=%s, %s x %s files; spilled %.2f GiB in %d segments,"
            " restored %.2f GiB, %d writer waits (last round)"
            % (fmt_size(opts.pipe_hot_size), opts.pipe_total // opts.pipe_file,
               fmt_size(opts.pipe_file),
               last.get("spilled", {}).get("bytes", 0) / GiB,
               last.get("segments", {}).get("written", 0),
               last.get("restored", {}).get("bytes", 0) / GiB, last.get("write_waits", 0))
        )
        print(
            "  pipeline: the plain directory's data stays in the page cache (nothing forces it"
            " to disk during the run); a sync after it took %.2f s more (median)"
            % (med(r["pipe_plain_sync"]) or 0)
        )
    if opts.reps > 1:
        print()
        print("spread (max-min)/median, %:")
        for k in ("spill", "fio_write", "restore_read", "hot_read", "restore_warm", "fio_read",
                  "pipe_spw",
                  "pipe_plain"):
            xs = r[k]
            if len(xs) > 1:
                print("  %-13s %3.0f   (%s)" % (
                    k, 100 * (max(xs) - min(xs)) / statistics.median(xs),
                    ", ".join("%.1f" % x for x in xs)))
    print(flush=True)


# --------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench_tier.sh",
        description="spillway tiering benchmark (issue 3)",
    )
    arg = p.add_argument
    arg("--quick", action="store_true", help="smoke run: small sizes, 1 round, < 60 s")
    arg("--size", type=parse_size, help="file for spill/restore/ttfb (default 1G; quick 64M)")
    arg("--reps", type=int, help="measured rounds (default 3; quick 1)")
    arg("--warmup", type=int, help="discarded warm-up rounds (default 1; quick 0)")
    arg("--ttfb-samples", type=int, help="cold opens timed (default 60; quick 10)")
    arg("--no-lazy", action="store_true", help="skip the restore=lazy first-byte row")
    arg("--objects", type=int, help="objects for the segment count (default 100000; quick 3000)")
    arg("--object-size", type=parse_size, default=64 * KiB, help="default 64K")
    arg("--obj-hot-size", type=parse_size, help="hot_size there (default 256M; quick 32M)")
    arg("--pipe-hot-size", type=parse_size, help="pipeline hot_size (default 512M; quick 64M)")
    arg("--pipe-total", type=parse_size, help="pipeline bytes (default 4 x pipe hot size)")
    arg("--pipe-file", type=parse_size, help="pipeline file size (default 64M; quick 16M)")
    arg("--producers", type=int, default=8, help="pipeline producers (default 8)")
    arg("--hot-size", type=parse_size, help="hot_size for items 1-3 (default 2 x size + 512M)")
    arg("--min-spill", type=parse_size, help="min_spill_size (default 64M; quick 16M)")
    arg("--chunk-size", type=parse_size, default=4 * MiB, help="chunk_size (default 4M)")
    arg("--io-workers", type=int, default=8, help="io_workers (default 8)")
    arg("--only", default=",".join(ITEMS), help="comma list of " + ",".join(ITEMS))
    arg(
        "--build",
        default=os.environ.get("SPILLWAY_BUILD", os.path.join(REPO, "build")),
        help="dir with spillway and examples/ (default REPO/build or $SPILLWAY_BUILD)",
    )
    arg("--cold-root", default="/var/tmp", help="cold dirs go here: a real disk (default /var/tmp)")
    arg("--tmpfs-root", default="/dev/shm", help="hot dirs go here (default /dev/shm)")
    arg("--spillway-opts", default="", help="extra -o options for every spillway mount")
    arg("--spillway-env", action="append", default=[], metavar="VAR=VALUE",
        help="environment for the spillway daemons only (repeatable)")
    arg("--nice", type=int, default=0, help="niceness increment for the bench and its children")
    arg("--json", metavar="FILE", help="also write every sample and figure as JSON")
    o = p.parse_args(argv)
    q = o.quick
    o.size = o.size or (64 * MiB if q else GiB)
    o.reps = o.reps or (1 if q else 3)
    o.warmup = o.warmup if o.warmup is not None else (0 if q else 1)
    o.ttfb_samples = o.ttfb_samples or (10 if q else 60)
    o.objects = o.objects or (3000 if q else 100000)
    o.obj_hot_size = o.obj_hot_size or (32 * MiB if q else 256 * MiB)
    o.pipe_hot_size = o.pipe_hot_size or (64 * MiB if q else 512 * MiB)
    o.pipe_total = o.pipe_total or 4 * o.pipe_hot_size
    o.pipe_file = o.pipe_file or (16 * MiB if q else 64 * MiB)
    o.min_spill = o.min_spill or (16 * MiB if q else 64 * MiB)
    o.objects_scaled = ""
    if o.size % MiB or o.size < o.chunk_size:
        p.error("--size must be a multiple of 1M and at least chunk_size")
    if o.reps <= 0 or o.warmup < 0 or o.ttfb_samples <= 0 or o.objects <= 0 or o.producers <= 0:
        p.error("--reps, --ttfb-samples, --objects, --producers must be positive, --warmup >= 0")
    for kv in o.spillway_env:
        if "=" not in kv or kv.startswith("="):
            p.error("--spillway-env wants VAR=VALUE, got %r" % kv)
    o.only = [x.strip() for x in o.only.split(",") if x.strip()]
    for x in o.only:
        if x not in ITEMS:
            p.error("unknown item %r (%s)" % (x, ", ".join(ITEMS)))
    build = os.path.abspath(o.build)
    o.spillway_bin = os.path.join(build, "spillway")
    o.pipeline_bin = os.path.join(build, "examples", "longdoc_pipeline")
    # for benchlib.environment()
    o.targets, o.tmpfs_root = ["spillway"], o.tmpfs_root
    return o


def preflight(opts):
    if os.geteuid() != 0:
        raise BenchError("run as root (drop_caches, FUSE mounts)")
    for tool in ("fio", "fusermount3", "findmnt"):
        if not shutil.which(tool):
            raise BenchError("%s not found in PATH" % tool)
    if not os.access(opts.spillway_bin, os.X_OK):
        raise BenchError("%s not found; build it or pass --build BUILD" % opts.spillway_bin)
    if "pipeline" in opts.only and not os.access(opts.pipeline_bin, os.X_OK):
        raise BenchError("%s not found (cmake --build BUILD builds it)" % opts.pipeline_bin)
    benchlib.raise_nofile()
    st = os.statvfs(opts.cold_root)
    free = st.f_bavail * st.f_frsize
    need = 512 * MiB
    if "spill" in opts.only or "restore" in opts.only or "ttfb" in opts.only:
        need += 3 * opts.size
    if "segments" in opts.only:
        need += opts.objects * max(opts.object_size, 4096) * 2
    if "pipeline" in opts.only:
        need += 2 * opts.pipe_total
    if free < need:
        raise BenchError("%s: %d MiB free, need ~%d" % (opts.cold_root, free // MiB, need // MiB))
    st = os.statvfs(opts.tmpfs_root)
    free = st.f_bavail * st.f_frsize
    need = max(2 * opts.size + 512 * MiB, opts.pipe_hot_size, opts.obj_hot_size) + 256 * MiB
    if free < need:
        raise BenchError("%s: %d MiB free, need ~%d" % (opts.tmpfs_root, free // MiB, need // MiB))


def main(argv):
    opts = parse_args(argv)
    if not os.path.exists("/dev/fuse"):
        log("SKIP: /dev/fuse is missing")
        return 77
    keys = ("spill", "fio_write", "restore_read", "hot_read", "restore_warm", "fio_read", "ttfb",
            "ttfb_lazy",
            "pipe_spw",
            "pipe_spw_produce", "pipe_spw_aggregate", "pipe_plain", "pipe_plain_produce",
            "pipe_plain_aggregate", "pipe_plain_sync")
    results = {k: [] for k in keys}
    extra = {}
    t_start = time.monotonic()

    def body():
        preflight(opts)
        if opts.nice:
            os.nice(opts.nice)
        roots = benchlib.work_roots("tier", opts)
        env = benchlib.environment(opts)
        env["hot"] = "%s (%s)" % (opts.tmpfs_root, cold_fs(opts.tmpfs_root))
        env["cold"] = "%s: %s" % (opts.cold_root, cold_fs(roots["cold"]))
        if any(x in opts.only for x in ("spill", "restore", "ttfb")):
            run_file_items(opts, roots, results, extra)
        if "ttfb" in opts.only and not opts.no_lazy:
            run_ttfb_lazy(opts, roots, results)
        if "segments" in opts.only:
            run_segments(opts, roots, extra)
        if "pipeline" in opts.only:
            run_pipeline(opts, roots, results, extra)
        report(opts, env, results, extra)
        log("finished in %.0f s" % (time.monotonic() - t_start))
        if opts.json:
            with open(opts.json, "w") as f:
                doc = {"env": env, "options": {k: v for k, v in vars(opts).items()
                                               if isinstance(v, (int, float, str, list))}}
                doc.update(samples=results, extra=extra)
                json.dump(doc, f, indent=1)

    return benchlib.run_guarded(body)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
