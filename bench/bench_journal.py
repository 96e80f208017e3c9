#!/usr/bin/env python3
"""spillway journal benchmark: what durability costs.

Three measurements, side by side in one run:

  meta     metadata rates (bench/metaops.c: create+close, setxattr, chmod,
           rename, unlink, mkdir, rmdir, N entries in one directory) on
           spillway with the journal on (nvme=COLD, default state_dir) and
           off (nvme=COLD2, state_dir=none), and on tmpfs as the physical
           reference; ratio on/off, target >= 0.8x;
  remount  a tree of 1M empty files (1000 directories) created through a
           journaled mount; time from starting the daemon until a stat() of
           a file answers, after a clean unmount (checkpoint loaded), after
           kill -9 (checkpoint + journal replayed) and after a "reboot"
           (hot_dir wiped first), target <= 5 s; the
           daemon's RSS with 1M files, state_dir size, the unmount time (the
           final checkpoint);
  fsync    write 64 MiB into a spillway file, then fsync() (dirty chunks
           spilled write-through to the cold dir, journal synced) vs the same
           write+fsync of a plain file in the cold dir, fio --end_fsync=1 and
           dd conv=fsync there.

A warm-up round runs first and is discarded; medians of the measured rounds
are printed with the ratios and targets. Misses are informational: the exit
status is non-zero only when the harness fails (a mount, a tool, a file that
did not come back, a journal that is not on when it should be...).
Uses benchlib.py's cleanup, daemon, tool and watchdog helpers (same
directory). Every mount, daemon (killed by pid) and temp dir is
removed on every exit path. Run as root; bench_journal.sh installs and builds
what is missing.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import benchlib  # noqa: E402  (shared: cleanup, daemons, tools)
from benchlib import (  # noqa: E402
    CLEANUP,
    HERE,
    REPO,
    Watchdog,
    cold_fs,
    med,
    print_table,
    proc_status,
    GiB,
    MiB,
    BenchError,
    fmt_size,
    is_mounted,
    log,
    parse_size,
    run_tool,
    tail,
)

KiB = 1024
ITEMS = ("meta", "remount", "fsync")

# metaops phase -> title; run in this order on each target (each needs the
# files the earlier ones made; rename moves every file there and back)
META_OPS = [
    ("create", "create+close"),
    ("setxattr", "setxattr"),
    ("chmod", "chmod"),
    ("rename", "rename"),
    ("unlink", "unlink"),
    ("mkdir", "mkdir"),
    ("rmdir", "rmdir"),
]
META_TARGETS = ("tmpfs", "off", "on")
META_TITLES = {"tmpfs": "tmpfs", "off": "journal off", "on": "journal on"}
META_GOAL = 0.8  # journal on >= 0.8 x journal off
REMOUNT_GOAL = 5.0  # seconds
STOP_TIMEOUT = 600.0  # a final checkpoint of 1M files may take a while
MOUNT_TIMEOUT = 300.0


# --------------------------------------------------------------------------
# One spillway daemon, started and stopped with timing


def stats(mnt):
    with Watchdog(120, "getxattr stats of " + mnt):
        raw = os.getxattr(mnt, "user.spillway.stats")
    return json.loads(raw.decode())


class Daemon:
    """spillway -f on mnt with options o. start() returns the seconds from
    exec until stat(probe) answered (probe relative to the mount; the root
    when None). Registered with CLEANUP while it runs."""

    count = 0

    def __init__(self, opts, name, mnt, o, logdir):
        self.opts, self.name, self.mnt, self.o, self.logdir = opts, name, mnt, o, logdir
        self.proc = None
        self.entry = None
        self.log = None

    def start(self, probe=None):
        Daemon.count += 1
        self.log = os.path.join(self.logdir, "%s-%d.log" % (self.name, Daemon.count))
        args = [self.opts.spillway_bin, "-f", "-o", self.o, self.mnt]
        env = dict(os.environ)
        env.update(kv.split("=", 1) for kv in self.opts.spillway_env)
        target = os.path.join(self.mnt, probe) if probe else self.mnt
        logf = open(self.log, "w")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            args, env=env, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT
        )
        logf.close()
        self.entry = (self.name, self.proc, self.mnt, self.log)
        CLEANUP.daemons.append(self.entry)
        deadline = t0 + MOUNT_TIMEOUT
        # Until the kernel mount exists, the probe is looked up in the empty
        # mountpoint directory underneath: ENOENT, quickly. Once mounted, the
        # stat goes to the daemon (the watchdog kills it if it never answers).
        while True:
            try:
                if probe is None and not is_mounted(self.mnt):
                    raise FileNotFoundError(self.mnt)
                with Watchdog(MOUNT_TIMEOUT, "stat of %s" % target):
                    os.stat(target)
                break
            except FileNotFoundError:
                pass
            if self.proc.poll() is not None:
                raise BenchError(
                    "%s exited with %d before answering:\n%s"
                    % (self.name, self.proc.returncode, tail(self.log))
                )
            if time.perf_counter() > deadline:
                raise BenchError(
                    "%s: %s did not answer within %ds:\n%s"
                    % (self.name, target, MOUNT_TIMEOUT, tail(self.log))
                )
            time.sleep(0.002)
        dt = time.perf_counter() - t0
        if not is_mounted(self.mnt):
            raise BenchError("%s: %s answered but %s is not a mount"
                             % (self.name, target, self.mnt))
        return dt

    def alive(self):
        if self.proc is None:
            raise BenchError("%s is not running" % self.name)
        if self.proc.poll() is not None:
            raise BenchError(
                "%s (pid %d) died with %d:\n%s"
                % (self.name, self.proc.pid, self.proc.returncode, tail(self.log))
            )

    def _forget(self):
        if self.entry in CLEANUP.daemons:
            CLEANUP.daemons.remove(self.entry)
        self.proc = self.entry = None

    def stop(self):
        """Clean unmount; returns seconds until the daemon exited (it writes
        its final checkpoint after the unmount)."""
        t0 = time.perf_counter()
        r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError("%s: fusermount3 -u %s: %s" % (self.name, self.mnt, r.stderr.strip()))
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise BenchError("%s (pid %d) still running %ds after unmount"
                             % (self.name, self.proc.pid, STOP_TIMEOUT))
        dt = time.perf_counter() - t0
        if self.proc.returncode != 0:
            raise BenchError(
                "%s exited with %d after unmount:\n%s"
                % (self.name, self.proc.returncode, tail(self.log))
            )
        self._forget()
        return dt

    def kill9(self):
        """SIGKILL the daemon (its pid), reap it, lazily unmount the dead mount."""
        self.proc.kill()
        self.proc.wait()
        r = subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True, text=True)
        if is_mounted(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        if is_mounted(self.mnt):
            raise BenchError("%s: %s still mounted after kill -9 (%s)"
                             % (self.name, self.mnt, r.stderr.strip()))
        self._forget()

    def abandon(self, extra):
        """On an error path: keep the log's warnings, kill -9 if still running.
        Never raises (the error in flight is the one to report)."""
        if self.proc is None:
            return
        collect_warnings(self, extra)
        state = "running" if self.proc.poll() is None else "exited %d" % self.proc.returncode
        log("%s (pid %d, %s) log tail:\n%s" % (self.name, self.proc.pid, state, tail(self.log)))
        try:
            self.kill9()
        except (BenchError, OSError) as e:
            log("%s: %s (cleanup retries)" % (self.name, e))

    def log_lines(self, pattern):
        try:
            with open(self.log, errors="replace") as f:
                return [ln.rstrip() for ln in f if re.search(pattern, ln)]
        except (OSError, TypeError):
            return []


def spw_options(opts, hot, cold, extra=""):
    o = "hot_dir=%s,hot_size=%s,nvme=%s" % (hot, fmt_size(opts.hot_size), cold)
    for more in (extra, opts.spillway_opts):
        if more:
            o += "," + more
    return o


def state_dir_size(d):
    """(checkpoint bytes, journal bytes, file count) of a state_dir."""
    ck = jn = n = 0
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if name.startswith("checkpoint."):
            ck += os.path.getsize(p)
            n += 1
        elif name.startswith("journal."):
            jn += os.path.getsize(p)
            n += 1
    return ck, jn, n


COLLECTED = set()  # daemon logs already scanned


def collect_warnings(d, extra):
    """Warning and error lines of a daemon's log (once per log), kept for the
    report."""
    if d.log in COLLECTED:
        return
    COLLECTED.add(d.log)
    for ln in d.log_lines(r"spillway: (warn|error|crit|alert|emerg):"):
        extra.setdefault("daemon_warnings", []).append("%s: %s" % (os.path.basename(d.log), ln))


# --------------------------------------------------------------------------
# Item 1: metadata rates, journal on vs off vs tmpfs


def metaops(tool, phase, d, n, first, timeout):
    """metaops PHASE D N FIRST; returns (ops, seconds) timed inside it."""
    out = run_tool([tool, phase, d, str(n), str(first)], timeout,
                   "metaops %s in %s" % (phase, d))
    f = out.split()
    want = 2 * n if phase == "rename" else n
    if len(f) != 4 or f[0] != phase or int(f[1]) != want:
        raise BenchError("metaops %s: unexpected output %r" % (phase, out))
    return want, float(f[2])


def meta_round(opts, tool, dirs, daemons, results, rnd):
    """Each phase on the three targets in turn, in opts.slices slices (each
    target has its own directory, so phases and slices can interleave): the
    on and off figures of one op are taken within a second or so of each
    other, and who goes first alternates between slices. The rate of a phase
    is its ops over the summed in-process time of its slices."""
    n = opts.files
    timeout = max(120, n // 100)  # >= 100 ops/s or it is a hang
    rdirs = {t: os.path.join(dirs[t], "round%d" % rnd) for t in META_TARGETS}
    for t in META_TARGETS:
        os.mkdir(rdirs[t])
    bounds = [n * k // opts.slices for k in range(opts.slices + 1)]
    for phase, _ in META_OPS:
        ops = {t: 0 for t in META_TARGETS}
        secs = {t: 0.0 for t in META_TARGETS}
        for k in range(opts.slices):
            first, cnt = bounds[k], bounds[k + 1] - bounds[k]
            order = ["tmpfs", "off", "on"] if (rnd + k) % 2 == 0 else ["tmpfs", "on", "off"]
            for t in order:
                o, s = metaops(tool, phase, rdirs[t], cnt, first, timeout)
                ops[t] += o
                secs[t] += s
        for t in META_TARGETS:
            results[t][phase].append(ops[t] / max(secs[t], 1e-9))
            d = rdirs[t]
            if phase == "setxattr":
                v = os.getxattr(os.path.join(d, "m%07d" % (n - 1)), "user.bench")
                if len(v) != 32:
                    raise BenchError("%s: user.bench is %d bytes, expected 32" % (t, len(v)))
            elif phase == "chmod":
                mode = os.stat(os.path.join(d, "m%07d" % (n - 1))).st_mode & 0o7777
                if mode != 0o600:
                    raise BenchError("%s: mode %o after chmod 0600" % (t, mode))
            elif phase == "rename":
                if len(os.listdir(d)) != n or not os.path.exists(os.path.join(d, "m0000000")):
                    raise BenchError("%s: the directory changed after renaming there and back" % t)
            if t in daemons:
                daemons[t].alive()
    for t in META_TARGETS:
        left = os.listdir(rdirs[t])
        if left:
            raise BenchError("%s: %d entries left after unlink and rmdir" % (t, len(left)))
        os.rmdir(rdirs[t])


def run_meta(opts, roots, tool, results, extra):
    dirs = {"tmpfs": tempfile.mkdtemp(prefix="meta-tmpfs-", dir=roots["shm"])}
    daemons = {}
    try:
        for t, more in (("on", ""), ("off", "state_dir=none")):
            hot = tempfile.mkdtemp(prefix="meta-%s-hot-" % t, dir=roots["shm"])
            cold = tempfile.mkdtemp(prefix="meta-%s-cold-" % t, dir=roots["cold"])
            mnt = tempfile.mkdtemp(prefix="meta-%s-" % t, dir=roots["mnt"])
            o = spw_options(opts, hot, cold, more)
            d = Daemon(opts, "spw-meta-" + t, mnt, o, roots["logs"])
            log("meta: journal %s: %s" % (t, d.o))
            daemons[t] = d
            d.start()
            dirs[t] = mnt
        for t in ("on", "off"):
            j = stats(dirs[t])["journal"]
            if j["enabled"] != (t == "on"):
                raise BenchError("journal %s mount reports journal.enabled=%r" % (t, j["enabled"]))
        before = stats(dirs["on"])["journal"]
        total = opts.warmup + opts.reps
        for i in range(total):
            warm = i < opts.warmup
            log("meta round %d/%d%s: %d entries per op"
                % (i + 1, total, " (warm-up, discarded)" if warm else "", opts.files))
            sink = {t: {p: [] for p, _ in META_OPS} for t in META_TARGETS} if warm else results
            meta_round(opts, tool, dirs, daemons, sink, i)
        after = stats(dirs["on"])["journal"]
        if after["failed"]:
            raise BenchError("the journal of the 'on' mount failed: %r" % after)
        if after["checkpoints"] == before["checkpoints"] and after["bytes"] <= before["bytes"]:
            raise BenchError("the 'on' mount's journal did not grow: %r -> %r" % (before, after))
        extra["meta_journal"] = {"before": before, "after": after}
        for d in daemons.values():
            collect_warnings(d, extra)
            d.stop()
    finally:
        for d in daemons.values():
            d.abandon(extra)


# --------------------------------------------------------------------------
# Item 2: 1M files, remount after a clean unmount and after kill -9


def wipe(d):
    """Delete everything inside d (a hot_dir: what a reboot does to tmpfs).
    The daemon removes a hot_dir it leaves empty at unmount: then no-op."""
    if not os.path.isdir(d):
        return
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.unlink(p)


def tree_paths(opts):
    per = opts.tree_files // opts.tree_dirs
    first = "tree/d0000/f0000000"
    last = "tree/d%04d/f%07d" % (opts.tree_dirs - 1, opts.tree_dirs * per - 1)
    return per, first, last


def check_files(d, want, what):
    st = stats(d.mnt)
    if st["files"] != want:
        raise BenchError("%s: %d files in the index, expected %d" % (what, st["files"], want))
    if st["journal"]["failed"] or not st["journal"]["enabled"]:
        raise BenchError("%s: journal %r" % (what, st["journal"]))
    return st


def walk_count(mnt, ndirs):
    n = 0
    with Watchdog(1200, "listing the tree"):
        for k in range(ndirs):
            n += len(os.listdir(os.path.join(mnt, "tree", "d%04d" % k)))
    return n


def run_remount(opts, roots, tool, r, extra):
    per, first, last = tree_paths(opts)
    nfiles = per * opts.tree_dirs
    hot = tempfile.mkdtemp(prefix="remount-hot-", dir=roots["shm"])
    cold = tempfile.mkdtemp(prefix="remount-cold-", dir=roots["cold"])
    mnt = tempfile.mkdtemp(prefix="remount-", dir=roots["mnt"])
    sdir = os.path.join(cold, ".spillway")
    d = Daemon(opts, "spw-remount", mnt, spw_options(opts, hot, cold), roots["logs"])
    log("remount: %s" % d.o)
    try:
        d.start()
        slab0 = benchlib.meminfo(("Slab",))["Slab"]
        log("remount: creating %d files in %d directories (%d creator process%s)"
            % (nfiles, opts.tree_dirs, opts.jobs, "es" if opts.jobs > 1 else ""))
        out = run_tool([tool, "tree", os.path.join(mnt, "tree"), str(opts.tree_dirs), str(per),
                        str(opts.jobs)], max(1200, nfiles // 300), "metaops tree")
        f = out.split()
        if len(f) != 4 or f[0] != "tree" or int(f[1]) != nfiles:
            raise BenchError("metaops tree: unexpected output %r" % out)
        extra["tree"] = {"files": nfiles, "dirs": opts.tree_dirs, "seconds": float(f[2]),
                         "rate": float(f[3]), "jobs": opts.jobs}
        log("remount: created %d files in %.1f s (%.0f files/s)"
            % (nfiles, float(f[2]), float(f[3])))
        d.alive()
        st = check_files(d, nfiles, "after creating the tree")
        extra["rss_created"] = proc_status(d.proc.pid)
        extra["stats_created"] = st
        extra["slab_growth"] = benchlib.meminfo(("Slab",))["Slab"] - slab0
        extra["hot_files"] = len(os.listdir(hot))
        collect_warnings(d, extra)
        r["umount_s"].append(d.stop())
        extra["state_dir_clean"] = state_dir_size(sdir)

        # clean unmount -> remount (checkpoint loaded)
        total = opts.warmup + opts.remounts
        for i in range(total):
            warm = i < opts.warmup
            log("remount after a clean unmount %d/%d%s"
                % (i + 1, total, " (warm-up)" if warm else ""))
            dt = d.start(last)
            st = check_files(d, nfiles, "after a clean remount")
            if not warm:
                r["clean_s"].append(dt)
                r["clean_recovery_ms"].append(st["recovery"]["ms"])
            if i == 0:
                extra["rss_remounted"] = proc_status(d.proc.pid)
                os.stat(os.path.join(mnt, first))
                if opts.walk:
                    log("remount: listing all %d directories to count the files" % opts.tree_dirs)
                    t0 = time.perf_counter()
                    got = walk_count(mnt, opts.tree_dirs)
                    extra["walk_s"] = time.perf_counter() - t0
                    if got != nfiles:
                        raise BenchError("after a clean remount: %d files listed, created %d"
                                         % (got, nfiles))
            collect_warnings(d, extra)
            if i < total - 1:  # the last mount stays up for the kill -9 series
                u = d.stop()
                if not warm:
                    r["umount_s"].append(u)

        # kill -9 -> remount (checkpoint + journal replayed)
        churned = 0
        for i in range(total):
            warm = i < opts.warmup
            cdir = os.path.join(mnt, "churn%02d" % i)
            os.mkdir(cdir)
            metaops(tool, "create", cdir, opts.churn, 0, max(120, opts.churn // 100))
            churned += opts.churn
            jb = stats(mnt)["journal"]["bytes"]
            collect_warnings(d, extra)
            log("remount after kill -9 %d/%d%s (%s in the journal)"
                % (i + 1, total, " (warm-up)" if warm else "", fmt_bytes(jb)))
            d.kill9()
            probe = os.path.relpath(os.path.join(cdir, "m%07d" % (opts.churn - 1)), mnt)
            dt = d.start(probe)
            st = check_files(d, nfiles + churned, "after kill -9 and remount")
            if len(os.listdir(cdir)) != opts.churn:
                raise BenchError("after kill -9: %s holds %d files, created %d"
                                 % (cdir, len(os.listdir(cdir)), opts.churn))
            os.stat(os.path.join(mnt, last))
            if not warm:
                r["kill_s"].append(dt)
                r["kill_recovery_ms"].append(st["recovery"]["ms"])
                r["kill_journal_bytes"].append(jb)
                r["kill_records"].append(st["recovery"]["records"])
        extra["rss_killed"] = proc_status(d.proc.pid)
        collect_warnings(d, extra)
        d.stop()
        extra["state_dir_end"] = state_dir_size(sdir)

        # reboot: hot_dir wiped, then remount (nothing is lost: the files are
        # empty); no hot file to reconcile, so the difference with the clean
        # remount is what the hot files cost
        for i in range(total):
            warm = i < opts.warmup
            log("remount after a reboot (hot_dir wiped) %d/%d%s"
                % (i + 1, total, " (warm-up)" if warm else ""))
            wipe(hot)
            dt = d.start(last)
            st = check_files(d, nfiles + churned, "after a reboot and remount")
            if st["lost_files"]:
                raise BenchError("after a reboot: %d files reported lost (all were empty)"
                                 % st["lost_files"])
            if not warm:
                r["reboot_s"].append(dt)
                r["reboot_recovery_ms"].append(st["recovery"]["ms"])
            collect_warnings(d, extra)
            d.stop()
    finally:
        d.abandon(extra)
        shutil.rmtree(cold, ignore_errors=True)
        shutil.rmtree(hot, ignore_errors=True)


# --------------------------------------------------------------------------
# Item 3: fsync of a 64 MiB file


def write_then_fsync(path, block, size, what):
    """Write size bytes (1 MiB at a time, each MiB stamped) into a new file,
    then fsync. Returns (write seconds, fsync seconds)."""
    with Watchdog(max(120, size // (10 * MiB)), what + " " + path):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            t0 = time.perf_counter()
            for i in range(size // MiB):
                block[0:8] = i.to_bytes(8, "little")
                if os.write(fd, block) != MiB:
                    raise BenchError("short write to " + path)
            t1 = time.perf_counter()
            os.fsync(fd)
            t2 = time.perf_counter()
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass  # the first error is the one to report
            raise
        os.close(fd)
    return t1 - t0, t2 - t1


def fio_fsync(cold, size, timeout):
    """fio sequential 1 MiB psync write of size bytes into cold, end_fsync=1.
    Returns the job's runtime in seconds (the final fsync included)."""
    args = ["fio", "--name=fsyncbase", "--rw=write", "--bs=1M", "--size=%d" % size,
            "--end_fsync=1", "--directory=" + cold, "--ioengine=psync", "--fallocate=none",
            "--output-format=json"]
    out = run_tool(args, timeout, "fio write+fsync in " + cold)
    try:
        job = json.loads(out[out.index("{"):])["jobs"][0]
    except (ValueError, KeyError, IndexError) as e:
        raise BenchError("fio: cannot parse output (%s): %s" % (e, out[:500]))
    if job.get("error") or job["write"]["io_bytes"] != size:
        raise BenchError("fio in %s: error %s, %d bytes written"
                         % (cold, job.get("error"), job["write"]["io_bytes"]))
    for name in os.listdir(cold):
        if name.startswith("fsyncbase"):
            os.unlink(os.path.join(cold, name))
    return (job["write"].get("runtime") or job.get("job_runtime") or 1) / 1000.0


def dd_fsync(src, dst, size, timeout):
    """dd conv=fsync of src (random bytes on tmpfs) to dst; dd's own seconds."""
    err = subprocess.run(
        ["dd", "if=" + src, "of=" + dst, "bs=1M", "count=%d" % (size // MiB), "conv=fsync"],
        capture_output=True, text=True, timeout=timeout,
    )
    if err.returncode != 0:
        raise BenchError("dd to %s: %s" % (dst, err.stderr.strip()))
    m = re.search(r"^(\d+) bytes .* copied, ([0-9.]+) s", err.stderr, re.M)
    if not m or int(m.group(1)) != size:
        raise BenchError("dd to %s: unexpected output %r" % (dst, err.stderr))
    os.unlink(dst)
    return float(m.group(2))


def run_fsync(opts, roots, r, extra):
    size = opts.fsync_size
    hot = tempfile.mkdtemp(prefix="fsync-hot-", dir=roots["shm"])
    cold = tempfile.mkdtemp(prefix="fsync-cold-", dir=roots["cold"])
    base = tempfile.mkdtemp(prefix="fsync-plain-", dir=roots["cold"])
    mnt = tempfile.mkdtemp(prefix="fsync-", dir=roots["mnt"])
    src = os.path.join(roots["shm"], "dd-src.dat")
    block = bytearray(os.urandom(MiB))
    with open(src, "wb") as f:
        for _ in range(size // MiB):
            f.write(os.urandom(MiB))
    d = Daemon(opts, "spw-fsync", mnt, spw_options(opts, hot, cold), roots["logs"])
    log("fsync: %s" % d.o)
    timeout = max(120, size // (10 * MiB))
    try:
        d.start()
        nch = size // (4 * MiB) if "chunk_size" not in opts.spillway_opts else None
        spilled0 = stats(mnt)["spilled"]["bytes"]

        def spw(sink):
            p = os.path.join(mnt, "fsync.dat")
            w, s = write_then_fsync(p, block, size, "spillway write+fsync")
            with Watchdog(60, "getxattr state"):
                state = os.getxattr(p, "user.spillway.state").decode()
            kv = dict(x.split("=", 1) for x in state.split())
            if int(kv.get("dirty", -1)) != 0 or (nch and int(kv.get("hot", 0)) + int(
                    kv.get("cold", 0)) != nch) or int(kv.get("segments", 0)) < 1:
                raise BenchError("%s after fsync: %s (expected no dirty chunk, a segment)"
                                 % (p, state))
            os.unlink(p)
            sink["spw_fsync"].append(s)
            sink["spw_total"].append(w + s)

        def plain(sink):
            p = os.path.join(base, "plain.dat")
            w, s = write_then_fsync(p, block, size, "plain write+fsync")
            os.unlink(p)
            sink["plain_fsync"].append(s)
            sink["plain_total"].append(w + s)

        def fio(sink):
            sink["fio"].append(fio_fsync(base, size, timeout))

        def dd(sink):
            sink["dd"].append(dd_fsync(src, os.path.join(base, "dd.dat"), size, timeout))

        total = opts.warmup + opts.reps
        for i in range(total):
            warm = i < opts.warmup
            log("fsync round %d/%d%s" % (i + 1, total, " (warm-up, discarded)" if warm else ""))
            sink = {k: [] for k in r} if warm else r
            steps = [spw, plain, fio, dd] if i % 2 == 0 else [dd, fio, plain, spw]
            for step in steps:
                os.sync()  # nobody's earlier writeback lands in the next sample
                step(sink)
            d.alive()
        st = stats(mnt)
        spilled = st["spilled"]["bytes"] - spilled0
        if spilled < total * size:
            raise BenchError("spillway spilled %d bytes for %d fsyncs of %d"
                             % (spilled, total, size))
        if st["errors"]["io"] or st["errors"]["crc"] or st["journal"]["failed"]:
            raise BenchError("spillway reported errors: %r / %r" % (st["errors"], st["journal"]))
        extra["fsync_stats"] = {"spilled": spilled, "journal_syncs": st["journal"]["syncs"]}
        collect_warnings(d, extra)
        d.stop()
    finally:
        d.abandon(extra)
        for p in (cold, base, hot):
            shutil.rmtree(p, ignore_errors=True)
        if os.path.exists(src):
            os.unlink(src)


# --------------------------------------------------------------------------
# Report


def fmt_bytes(n):
    for suf, mult in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= mult:
            return "%.1f %s" % (n / mult, suf)
    return "%d B" % n


def fmt_ops(v):
    return "-" if v is None else "{:,.0f}".format(v)


def ratio(a, b):
    return "-" if a is None or not b else "%.2fx" % (a / b)


def spread_line(name, xs, fmtx):
    if len(xs) > 1:
        s = 100 * (max(xs) - min(xs)) / statistics.median(xs)
        print("  %-26s %3.0f   (%s)" % (name, s, ", ".join(fmtx(x) for x in xs)))


def report(opts, env, meta, rem, fs, extra):
    verdicts = []  # (title, value text, target text, verdict)
    print()
    print("spillway journal benchmark (durability)")
    env["load"] = "%s at start, %s at end (1/5/15 min)" % (env["load"], benchlib.loadavg())
    for k in ("date", "kernel", "cpu", "memory", "load", "nice", "fio", "libfuse", "spillway",
              "hot", "cold"):
        if k in env:
            print("  %-9s %s" % (k + ":", env[k]))
    print("  run:      median of %d round(s) after %d warm-up; hot_size %s; spillway options"
          " otherwise default (journal_sync_ms=1000, checkpoint_size=64M)"
          % (opts.reps, opts.warmup, fmt_size(opts.hot_size)))

    if "meta" in opts.only:
        print()
        print("1. metadata ops/s, %d entries in one directory, each op in %d slices interleaved"
              " across the targets (rename: there and back, 2x%d)"
              % (opts.files, opts.slices, opts.files))
        head = ["op", "tmpfs", "journal off", "journal on", "on/off", "on/tmpfs", "target",
                "verdict"]
        rows = []
        for p, title in META_OPS:
            t, off, on = (med(meta[x][p]) for x in META_TARGETS)
            v = "-"
            if on is not None and off:
                v = "PASS" if on / off >= META_GOAL else "MISS"
                verdicts.append(("%s on/off" % title, ratio(on, off), ">= %.1fx" % META_GOAL, v))
            rows.append([title, fmt_ops(t), fmt_ops(off), fmt_ops(on), ratio(on, off),
                         ratio(on, t), ">= %.1fx" % META_GOAL, v])
        print_table(head, rows, {0, 6, 7})
        mj = extra.get("meta_journal")
        if mj:
            a, b = mj["after"], mj["before"]
            print("  journal on: %d checkpoints and %d syncs during the rounds, journal now %s"
                  % (a["checkpoints"] - b["checkpoints"], a["syncs"] - b["syncs"],
                     fmt_bytes(a["bytes"])))

    if "remount" in opts.only and "tree" in extra:
        tr = extra["tree"]
        print()
        print("2. remount with %s files in %d directories (journal on)"
              % ("{:,}".format(tr["files"]), tr["dirs"]))
        head = ["measure", "value", "target", "verdict"]
        rows = []

        def goal_row(title, v):
            verdict = "-" if v is None else ("PASS" if v <= REMOUNT_GOAL else "MISS")
            rows.append([title, "-" if v is None else "%.2f s" % v, "<= %.0f s" % REMOUNT_GOAL,
                         verdict])
            if v is not None:
                verdicts.append((title, "%.2f s" % v, "<= %.0f s" % REMOUNT_GOAL, verdict))

        rows.append(["create %s files (%d process%s)" % ("{:,}".format(tr["files"]), tr["jobs"],
                                                         "es" if tr["jobs"] > 1 else ""),
                     "%.1f s, %s files/s" % (tr["seconds"], fmt_ops(tr["rate"])), "", ""])
        goal_row("remount after clean unmount", med(rem["clean_s"]))
        rows.append(["  daemon's recovery time", "%.0f ms" % med(rem["clean_recovery_ms"])
                     if rem["clean_recovery_ms"] else "-", "", ""])
        goal_row("remount after kill -9", med(rem["kill_s"]))
        rows.append(["  daemon's recovery time", "%.0f ms" % med(rem["kill_recovery_ms"])
                     if rem["kill_recovery_ms"] else "-", "", ""])
        rows.append(["  journal at the kill, replayed",
                     "%s, %s records recovered" % (fmt_bytes(med(rem["kill_journal_bytes"]) or 0),
                                                   fmt_ops(med(rem["kill_records"]))), "", ""])
        goal_row("remount after reboot (hot_dir wiped)", med(rem["reboot_s"]))
        rows.append(["  daemon's recovery time", "%.0f ms" % med(rem["reboot_recovery_ms"])
                     if rem["reboot_recovery_ms"] else "-", "", ""])
        rows.append(["clean unmount (final checkpoint)", "%.2f s" % med(rem["umount_s"])
                     if rem["umount_s"] else "-", "", ""])
        for key, title in (("rss_created", "daemon RSS after creating"),
                           ("rss_remounted", "daemon RSS after a clean remount"),
                           ("rss_killed", "daemon RSS after the kill -9 series")):
            if key in extra:
                rows.append([title, "%s (peak %s)" % (fmt_bytes(extra[key]["VmRSS"]),
                                                      fmt_bytes(extra[key]["VmHWM"])), "", ""])
        if "hot_files" in extra:
            rows.append(["hot files in hot_dir after creating", "%s (kernel slab %+.0f MiB during"
                         " the creation, whole machine)" % (fmt_ops(extra["hot_files"]),
                                                           extra["slab_growth"] / MiB), "", ""])
        for key, title in (("state_dir_clean", "state_dir after clean unmount"),
                           ("state_dir_end", "state_dir at the end")):
            if key in extra:
                ck, jn, n = extra[key]
                rows.append([title, "%s (checkpoints %s + journals %s, %d files)"
                             % (fmt_bytes(ck + jn), fmt_bytes(ck), fmt_bytes(jn), n), "", ""])
        if "walk_s" in extra:
            rows.append(["list every directory (count check)", "%.1f s" % extra["walk_s"], "", ""])
        print_table(head, rows, {0, 1, 2, 3})
        print("  remount = from exec of the daemon until stat() of a file deep in the tree"
              " answers (kill -9: a file created just before the kill); reboot = the same"
              " state with every hot file deleted first (the files are empty: nothing lost)")

    if "fsync" in opts.only and fs["spw_fsync"]:
        print()
        print("3. fsync of a %s file (cold dir %s)" % (fmt_size(opts.fsync_size), opts.cold_root))
        head = ["what", "write+fsync ms", "fsync ms", "spw fsync / this", "spw total / this"]
        rows = []
        sf, stt = med(fs["spw_fsync"]) * 1000, med(fs["spw_total"]) * 1000
        rows.append(["spillway: write, then fsync()", "%.0f" % stt, "%.0f" % sf, "", ""])
        pf, pt = med(fs["plain_fsync"]) * 1000, med(fs["plain_total"]) * 1000
        rows.append(["plain file in the cold dir", "%.0f" % pt, "%.0f" % pf, ratio(sf, pf),
                     ratio(stt, pt)])
        fio = med(fs["fio"]) * 1000
        rows.append(["fio --end_fsync=1 (runtime)", "%.0f" % fio, "", "", ratio(stt, fio)])
        dd = med(fs["dd"]) * 1000
        rows.append(["dd conv=fsync (dd's time)", "%.0f" % dd, "", "", ratio(stt, dd)])
        print_table(head, rows, {0})
        print("  spillway's fsync spills every dirty chunk into a segment (O_DIRECT, fdatasync)"
              " and syncs the journal; the write part is RAM (tmpfs hot tier)")
        verdicts.append(("fsync %s: spillway / plain file" % fmt_size(opts.fsync_size),
                         "%.0f / %.0f ms (%s)" % (sf, pf, ratio(sf, pf)), "none", "-"))
        verdicts.append(("write+fsync: spillway / fio", "%.0f / %.0f ms (%s)"
                         % (stt, fio, ratio(stt, fio)), "none", "-"))

    print()
    print("summary")
    print_table(["measure", "value", "target", "verdict"], [list(v) for v in verdicts],
                {0, 1, 2, 3})
    judged = [v for v in verdicts if v[3] in ("PASS", "MISS")]
    misses = [v[0] for v in judged if v[3] == "MISS"]
    print()
    print("targets: %d/%d PASS%s (informational; the bench does not fail on a miss)"
          % (len(judged) - len(misses), len(judged),
             ", MISS: " + "; ".join(misses) if misses else ""))
    warns = extra.get("daemon_warnings") or []
    if warns:
        print()
        print("daemon warnings/errors (%d):" % len(warns))
        for w in warns[:20]:
            print("  " + w)
    if opts.reps > 1:
        print()
        print("spread (max-min)/median, %:")
        for p, title in META_OPS:
            for t in META_TARGETS:
                spread_line("%s, %s" % (title, META_TITLES[t]), meta[t][p], fmt_ops)
        for k in ("clean_s", "kill_s", "reboot_s", "umount_s"):
            spread_line(k, rem[k], lambda x: "%.2f" % x)
        for k in ("spw_fsync", "spw_total", "plain_fsync", "plain_total", "fio", "dd"):
            spread_line(k, fs[k], lambda x: "%.0f" % (x * 1000))
    print(flush=True)


# --------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench_journal.sh",
                                description="spillway journal benchmark (durability)")
    arg = p.add_argument
    arg("--quick", action="store_true",
        help="smoke run: 2000 entries per op, 100k-file tree, 3 rounds (~2 min)")
    arg("--files", type=int, help="entries per metadata op (default 20000; quick 2000)")
    arg("--reps", type=int, help="measured rounds (default 5; quick 3)")
    arg("--warmup", type=int, default=1, help="discarded warm-up rounds (default 1)")
    arg("--slices", type=int, default=4,
        help="slices each metadata phase is cut into, alternating on/off (default 4)")
    arg("--remounts", type=int, help="measured remounts of each kind (default --reps)")
    arg("--tree-files", type=int, help="files for the remount test (default 1000000; quick 100000)")
    arg("--tree-dirs", type=int, help="directories they go in (default 1000; quick 100)")
    arg("--jobs", type=int, default=2, help="processes creating the tree (default 2)")
    arg("--churn", type=int, help="files created before each kill -9 (default 10000; quick 2000)")
    arg("--no-walk", dest="walk", action="store_false",
        help="do not list the whole tree after the first remount")
    arg("--fsync-size", type=parse_size, default=64 * MiB, help="file fsync'd (default 64M)")
    arg("--hot-size", type=parse_size, default=256 * MiB, help="spillway hot_size (default 256M)")
    arg("--only", default=",".join(ITEMS), help="comma list of " + ",".join(ITEMS))
    arg("--build", default=os.environ.get("SPILLWAY_BUILD", os.path.join(REPO, "build")),
        help="dir holding spillway (default REPO/build or $SPILLWAY_BUILD)")
    arg("--cold-root", default="/var/tmp", help="cold dirs and state_dirs: a real disk (/var/tmp)")
    arg("--tmpfs-root", default="/dev/shm", help="hot dirs and the tmpfs target (/dev/shm)")
    arg("--spillway-opts", default="", help="extra -o options for every spillway mount")
    arg("--spillway-env", action="append", default=[], metavar="VAR=VALUE",
        help="environment for the spillway daemons only (repeatable)")
    arg("--nice", type=int, default=0, help="niceness increment for the bench and its children")
    arg("--json", metavar="FILE", help="also write every sample and figure as JSON")
    o = p.parse_args(argv)
    q = o.quick
    o.files = o.files or (2000 if q else 20000)
    o.reps = o.reps or (3 if q else 5)
    o.remounts = o.remounts or o.reps
    o.tree_files = o.tree_files or (100000 if q else 1000000)
    o.tree_dirs = o.tree_dirs or (100 if q else 1000)
    o.churn = o.churn or (2000 if q else 10000)
    if min(o.files, o.slices, o.reps, o.remounts, o.tree_files, o.tree_dirs, o.jobs, o.churn) <= 0:
        p.error("counts must be positive")
    if o.warmup < 0:
        p.error("--warmup must be >= 0")
    if o.slices > o.files:
        p.error("--slices at most --files")
    if o.tree_dirs > 10000 or o.tree_files % o.tree_dirs or o.jobs > 64:
        p.error("--tree-dirs at most 10000 and dividing --tree-files; --jobs at most 64")
    if o.fsync_size % MiB:
        p.error("--fsync-size must be a multiple of 1M")
    for kv in o.spillway_env:
        if "=" not in kv or kv.startswith("="):
            p.error("--spillway-env wants VAR=VALUE, got %r" % kv)
    o.only = [x.strip() for x in o.only.split(",") if x.strip()]
    for x in o.only:
        if x not in ITEMS:
            p.error("unknown item %r (%s)" % (x, ", ".join(ITEMS)))
    o.spillway_bin = os.path.join(os.path.abspath(o.build), "spillway")
    o.targets = ["spillway"]  # for benchlib.environment()
    return o


def preflight(opts):
    if os.geteuid() != 0:
        raise BenchError("run as root (FUSE mounts, kill -9 of the daemon)")
    for tool in ("fio", "fusermount3", "findmnt", "cc", "dd"):
        if not shutil.which(tool):
            raise BenchError("%s not found in PATH (bench_journal.sh installs it)" % tool)
    if not os.access(opts.spillway_bin, os.X_OK):
        raise BenchError("%s not found; build it or pass --build BUILD (bench_journal.sh builds"
                         " it when no --build is given)" % opts.spillway_bin)
    benchlib.raise_nofile()
    need = 512 * MiB
    if "remount" in opts.only:
        need += opts.tree_files * 400  # checkpoints + journals: ~100 B a file, several copies
    if "fsync" in opts.only:
        need += 6 * opts.fsync_size
    st = os.statvfs(opts.cold_root)
    if st.f_bavail * st.f_frsize < need:
        raise BenchError("%s: %d MiB free, need ~%d" % (opts.cold_root,
                                                        st.f_bavail * st.f_frsize // MiB,
                                                        need // MiB))
    st = os.statvfs(opts.tmpfs_root)
    need = 3 * opts.fsync_size + 256 * MiB
    if st.f_bavail * st.f_frsize < need:
        raise BenchError("%s: %d MiB free, need ~%d" % (opts.tmpfs_root,
                                                        st.f_bavail * st.f_frsize // MiB,
                                                        need // MiB))


def build_metaops(tooldir):
    mo = os.path.join(tooldir, "metaops")
    r = subprocess.run(["cc", "-O2", "-Wall", "-o", mo, os.path.join(HERE, "metaops.c")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError("building metaops failed:\n" + r.stderr)
    return mo


def failure_text(e):
    """e, and for anything but a BenchError which call failed (an fd op names no file)."""
    if isinstance(e, BenchError):
        return str(e)
    fr = traceback.extract_tb(e.__traceback__)[-1]
    return "%s (in %s, line %d: %s)" % (e, fr.name, fr.lineno, fr.line)


def main(argv):
    opts = parse_args(argv)
    if not os.path.exists("/dev/fuse"):
        log("SKIP: /dev/fuse is missing")
        return 77
    meta = {t: {p: [] for p, _ in META_OPS} for t in META_TARGETS}
    rem = {k: [] for k in ("clean_s", "kill_s", "reboot_s", "umount_s", "clean_recovery_ms",
                           "kill_recovery_ms", "reboot_recovery_ms", "kill_journal_bytes",
                           "kill_records")}
    fs = {k: [] for k in ("spw_fsync", "spw_total", "plain_fsync", "plain_total", "fio", "dd")}
    extra = {}
    t_start = time.monotonic()

    def body():
        preflight(opts)
        if opts.nice:
            os.nice(opts.nice)
        roots = benchlib.work_roots("jrnl", opts)
        tool = build_metaops(roots["logs"])
        env = benchlib.environment(opts)
        env["hot"] = "%s (%s)" % (opts.tmpfs_root, cold_fs(opts.tmpfs_root))
        env["cold"] = "%s: %s" % (opts.cold_root, cold_fs(roots["cold"]))
        if "meta" in opts.only:
            run_meta(opts, roots, tool, meta, extra)
        if "fsync" in opts.only:
            run_fsync(opts, roots, fs, extra)
        if "remount" in opts.only:
            run_remount(opts, roots, tool, rem, extra)
        report(opts, env, meta, rem, fs, extra)
        log("finished in %.0f s" % (time.monotonic() - t_start))
        if opts.json:
            with open(opts.json, "w") as f:
                doc = {"env": env, "options": {k: v for k, v in vars(opts).items()
                                               if isinstance(v, (int, float, str, list))}}
                doc.update(meta=meta, remount=rem, fsync=fs, extra=extra)
                json.dump(doc, f, indent=1)

    return benchlib.run_guarded(body, catch=(subprocess.SubprocessError,), describe=failure_text)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
