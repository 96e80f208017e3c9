#!/usr/bin/env python3
"""soak - an hour of mixed load on one spillway mount, with kill -9 and remounts
(issue 25, item 6). Not in CI.

One mount (hot_size 64M, chunk_size 1M, two cold dirs, a state_dir on disk);
at the same time:

  fsx        build/tests/spw_fsx, two runs (one with -m -P: mmap, and reopens
             with a read-only open held) restarted after each run and remount
  stress-ng  --hdd and --iomix with --verify on a subdir: the stand-in for
             fsstress, which Debian does not ship
  small      small files (100 B .. 64 KiB) written, fsync'd (file and
             directory), put in the ledger with their sha256 only then; some
             re-read, some deleted
  pipeline   a producer writes objects of 16..48 MiB (fsync'd, ledgered), a
             consumer reads each back, checks it, deletes it
  readers    a thread holds a few fsync'd files open read-only for 30-60 s and
             reads them again and again (passed through while they are hot)
  hog        a process in the daemon's (v1) memory cgroup that allocates and
             frees up to --hog-max: the daemon's budget follows the pressure
  faults     the second cold dir is a small tmpfs; every --fault-every s a
             filler file fills it up (ENOSPC) or is removed

Every --kill-every s (jittered) the daemon gets SIGKILL, and is remounted on
the same state_dir and cold dirs; half the time hot_dir is wiped first (a
reboot). Then every ledger entry (fsync'd before the kill) is read back and
compared byte for byte: a missing or different file is LOST. Every 10 s:
the daemon's VmRSS and open fds, each worker's operations. At the end: a
table per 5 minutes, RSS/fds per lifetime at equal uptime, and a verdict
(exit 1 when anything was lost, the daemon died by itself, a worker saw a
wrong byte, or RSS/fds grew).

    nice -n 10 python3 bench/soak/soak.py --build build --duration 3600
    python3 bench/soak/soak.py --build build --duration 120 --kill-every 40   # debug

Run as root (FUSE, tmpfs mount, cgroup). Python 3 standard library only;
needs stress-ng (apt-get install stress-ng). Mounting, daemon logs and
cleanup come from tests/integration/harness.py and lib/.
"""

import argparse
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
import harness  # noqa: E402
from lib.crash import CrashMount, lazy_unmount  # noqa: E402
from lib.data import content  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20

T0 = time.monotonic()


def now():
    return time.monotonic() - T0


def say(msg):
    print("[soak %7.1fs] %s" % (now(), msg), flush=True)


# --------------------------------------------------------------------------
# shared state


class Gate:
    """The mount's availability. go_down() bumps the epoch before the daemon
    is killed: an acknowledgement seen while valid(epoch) came from a live
    daemon; anything that fails after go_down() is the kill's doing."""

    def __init__(self):
        self.cv = threading.Condition()
        self.up = False
        self.epoch = 0
        self.mnt = None
        self.stop = False
        self.parked = set()
        self.names = set()

    def register(self, name):
        with self.cv:
            self.names.add(name)

    def wait_up(self, name):
        with self.cv:
            self.parked.add(name)
            self.cv.notify_all()
            while not self.up and not self.stop:
                self.cv.wait(1)
            self.parked.discard(name)
            if self.stop:
                return None
            return self.epoch, self.mnt

    def valid(self, epoch):
        return self.up and self.epoch == epoch and not self.stop

    def go_down(self):
        with self.cv:
            self.up = False
            self.epoch += 1
            self.cv.notify_all()

    def go_up(self, mnt):
        with self.cv:
            self.mnt = mnt
            self.up = True
            self.cv.notify_all()

    def finish(self):
        with self.cv:
            self.stop = True
            self.up = False
            self.epoch += 1
            self.cv.notify_all()

    def wait_parked(self, timeout):
        """Wait until every registered thread waits in wait_up(); the ones that do not."""
        end = time.monotonic() + timeout
        with self.cv:
            while self.names - self.parked and time.monotonic() < end:
                self.cv.wait(0.2)
            return sorted(self.names - self.parked)


class Soak:
    def __init__(self, args):
        self.args = args
        self.gate = Gate()
        self.lock = threading.Lock()
        self.ledger = {}  # rel path -> (size, sha256 hex, kind)
        self.ops = {}  # worker -> operations acknowledged
        self.bytes_verified = 0
        self.lost = []  # (when, rel, why)
        self.wrong = []  # wrong bytes seen by a worker during a run (not after a kill)
        self.errors = []  # unexpected errors of workers while the mount was up
        self.crashes = []  # daemon deaths we did not cause
        self.hangs = []  # SIGKILLs the daemon did not die of (FUSE connection aborted)
        self.restarts = 0
        self.reboots = 0
        self.lifetimes = []  # {"n", "start", "wiped", "samples": [...]}
        self.samples = []
        self.fault_on = False
        self.fault_flips = 0
        self.hog_ooms = 0
        self.events = []
        self.procs = {}  # name -> Popen of worker subprocesses (fsx, stress-ng)
        self.proc_lock = threading.Lock()
        self.m = None
        self.threads = []
        self.rng = random.Random(args.seed)
        self.notes = {"fsx_runs_ok": 0, "fsx_killed": 0, "fsx_failed": 0, "sng_runs_ok": 0,
                      "sng_killed": 0, "sng_failed": 0, "pt_opens": 0, "lost_files_stat": 0,
                      "verify_s": []}

    def count(self, worker, n=1):
        with self.lock:
            self.ops[worker] = self.ops.get(worker, 0) + n

    def verified(self, n):
        with self.lock:
            self.bytes_verified += n

    def error(self, worker, what):
        with self.lock:
            self.errors.append((now(), worker, what))
        say("ERROR %s: %s" % (worker, what))

    def event(self, what):
        self.events.append((now(), what))
        say(what)


def sha_path(path, bs=MiB, pause=0.0):
    """(sha256 hex, bytes) of path, read bs at a time; pause seconds after
    each read (a slow consumer)."""
    h = hashlib.sha256()
    n = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            b = f.read(bs)
            if not b:
                break
            h.update(b)
            n += len(b)
            if pause:
                time.sleep(pause)
    return h.hexdigest(), n


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path, data):
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + MiB])
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------
# python workers: each runs steps while its epoch is valid; an error after
# the epoch moved on is the kill's doing, before it a finding


def worker_loop(s, name, setup, step):
    s.gate.register(name)
    rng = random.Random(zlib.crc32(("%d %s" % (s.args.seed, name)).encode()))
    while True:
        tok = s.gate.wait_up(name)
        if tok is None:
            return
        epoch, mnt = tok
        ctx = {"epoch": epoch, "mnt": mnt, "rng": rng}
        try:
            setup(s, ctx)
            while s.gate.valid(epoch):
                step(s, ctx)
        except OSError as e:
            if s.gate.valid(epoch):
                s.error(name, "%s: %s" % (type(e).__name__, e))
                time.sleep(1)
        except Exception as e:  # a bug of the soak: report and keep going
            s.error(name, "%s\n%s" % (e, traceback.format_exc()))
            time.sleep(1)
        finally:
            cleanup = ctx.get("cleanup")
            if cleanup:
                try:
                    cleanup()
                except OSError:
                    pass


def add_ledger(s, ctx, entries):
    """entries [(rel, size, sha, kind)] were fsync'd; ledger them if the daemon
    that acknowledged them was the live one."""
    if not s.gate.valid(ctx["epoch"]):
        return False
    with s.lock:
        for rel, size, sha, kind in entries:
            s.ledger[rel] = (size, sha, kind)
    return True


def small_setup(s, ctx):
    ctx["dir"] = os.path.join(ctx["mnt"], "small")
    os.makedirs(ctx["dir"], exist_ok=True)


def small_step(s, ctx):
    rng, d = ctx["rng"], ctx["dir"]
    batch = []
    for _ in range(20):
        size = rng.choice([rng.randint(100, 4 * KiB), rng.randint(4 * KiB, 64 * KiB)])
        data = rng.randbytes(size)
        ctx["n"] = ctx.get("n", 0) + 1
        rel = "small/o%d_%07d" % (ctx["epoch"], ctx["n"])
        p = os.path.join(ctx["mnt"], rel)
        write_file(p, data)
        batch.append((rel, size, hashlib.sha256(data).hexdigest(), "small"))
    fsync_dir(d)
    if add_ledger(s, ctx, batch):
        s.count("small", len(batch))
    # re-read a few
    with s.lock:
        mine = [(k, v) for k, v in s.ledger.items() if v[2] == "small"]
    for rel, (size, sha, _) in rng.sample(mine, min(5, len(mine))):
        check_entry(s, ctx, "small", rel, size, sha)
    # keep the set bounded: delete some
    if len(mine) > s.args.small_live:
        for rel, _ in rng.sample(mine, len(mine) // 4):
            with s.lock:
                s.ledger.pop(rel, None)
            try:
                os.unlink(os.path.join(ctx["mnt"], rel))
            except FileNotFoundError:
                pass
            s.count("small_del")
    time.sleep(s.args.small_pause)


def check_entry(s, ctx, worker, rel, size, sha):
    """Read a ledger entry during the run; a wrong byte while the mount is up
    is a finding (after a kill it is the kill's doing)."""
    with s.lock:
        if s.ledger.get(rel, (None, None))[1] != sha:
            return  # deleted meanwhile
    try:
        h, n = sha_path(os.path.join(ctx["mnt"], rel))
    except FileNotFoundError:
        with s.lock:
            still = rel in s.ledger
        if still and s.gate.valid(ctx["epoch"]):
            s.wrong.append((now(), worker, rel, "missing"))
            s.error(worker, "%s: missing during the run" % rel)
        return
    if (h, n) != (sha, size):
        if s.gate.valid(ctx["epoch"]):
            with s.lock:
                still = rel in s.ledger
            if still:
                s.wrong.append((now(), worker, rel, "%d bytes sha %s" % (n, h[:12])))
                s.error(worker, "%s: wrong content during the run (%d bytes, want %d)"
                        % (rel, n, size))
        return
    s.verified(n)


def pipe_setup(s, ctx):
    ctx["dir"] = os.path.join(ctx["mnt"], "pipe")
    os.makedirs(ctx["dir"], exist_ok=True)
    ctx.setdefault("tag", 1000 * (ctx["epoch"] + 1))


def obj_sha(tag, size):
    h = hashlib.sha256()
    for off in range(0, size, 4 * MiB):
        h.update(content(tag, off, min(4 * MiB, size - off)))
    return h.hexdigest()


def producer_step(s, ctx):
    rng = ctx["rng"]
    with s.lock:
        queued = sum(1 for v in s.ledger.values() if v[2] == "pipe")
    if queued >= s.args.pipe_depth:
        time.sleep(0.5)
        return
    ctx["tag"] += 1
    tag = ctx["tag"]
    size = rng.randint(16 * MiB, 48 * MiB) + rng.randint(0, 4095)
    rel = "pipe/obj_%d_%d" % (ctx["epoch"], tag)
    p = os.path.join(ctx["mnt"], rel)
    fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    h = hashlib.sha256()
    try:
        for off in range(0, size, MiB):
            b = content(tag, off, min(MiB, size - off))
            os.write(fd, b)
            h.update(b)
            time.sleep(s.args.pipe_pause)  # ~1 core for everything: pace it
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(ctx["dir"])
    if add_ledger(s, ctx, [(rel, size, h.hexdigest(), "pipe")]):
        s.count("pipe_put")
        s.count("pipe_put_MiB", size // MiB)


def consumer_step(s, ctx):
    with s.lock:
        objs = sorted((k, v) for k, v in s.ledger.items() if v[2] == "pipe")
    if not objs:
        time.sleep(0.5)
        return
    rel, (size, sha, _) = objs[0]
    p = os.path.join(ctx["mnt"], rel)
    got = sha_path(p, pause=s.args.pipe_pause / 2)
    n = got[1]
    if got != (sha, size):
        if s.gate.valid(ctx["epoch"]):
            s.wrong.append((now(), "consumer", rel, "%d bytes" % n))
            s.error("consumer", "%s: wrong content (%d bytes, want %d)" % (rel, n, size))
            with s.lock:  # counted once; LOST is judged after the remounts
                s.ledger.pop(rel, None)
        return
    if not s.gate.valid(ctx["epoch"]):
        return
    s.verified(n)
    with s.lock:
        s.ledger.pop(rel, None)
    os.unlink(p)
    s.count("pipe_get")


def pt_setup(s, ctx):
    ctx["dir"] = os.path.join(ctx["mnt"], "pt")
    os.makedirs(ctx["dir"], exist_ok=True)
    ctx["fds"] = []
    # the files of a hold the kill cut short: verified after the remount, now gone
    with s.lock:
        old = [k for k, v in s.ledger.items() if v[2] == "pt"]
        for k in old:
            s.ledger.pop(k)
    for k in old:
        try:
            os.unlink(os.path.join(ctx["mnt"], k))
        except FileNotFoundError:
            pass

    def close_all():
        for fd, _, _, _ in ctx["fds"]:
            try:
                os.close(fd)
            except OSError:
                pass
        ctx["fds"] = []
    ctx["cleanup"] = close_all


def pt_step(s, ctx):
    """Write a few files (fsync'd, ledgered), hold them open read-only for
    30-60 s and read them again and again; then delete them."""
    rng = ctx["rng"]
    files = []
    for i in range(s.args.pt_files):
        size = rng.randint(256 * KiB, 4 * MiB)
        data = rng.randbytes(size)
        ctx["n"] = ctx.get("n", 0) + 1
        rel = "pt/f%d_%06d" % (ctx["epoch"], ctx["n"])
        write_file(os.path.join(ctx["mnt"], rel), data)
        files.append((rel, size, hashlib.sha256(data).hexdigest(), "pt"))
    fsync_dir(ctx["dir"])
    if not add_ledger(s, ctx, files):
        return
    s.count("pt_files", len(files))
    for rel, size, sha, _ in files:
        fd = os.open(os.path.join(ctx["mnt"], rel), os.O_RDONLY)
        ctx["fds"].append((fd, rel, size, sha))
        s.count("pt_opens")
    end = time.monotonic() + rng.uniform(30, 60)
    while time.monotonic() < end and s.gate.valid(ctx["epoch"]):
        for fd, rel, size, sha in ctx["fds"]:
            h = hashlib.sha256()
            off = 0
            while True:
                b = os.pread(fd, MiB, off)
                if not b:
                    break
                h.update(b)
                off += len(b)
            if not s.gate.valid(ctx["epoch"]):
                break
            if (h.hexdigest(), off) != (sha, size):
                s.wrong.append((now(), "readers", rel, "%d bytes" % off))
                s.error("readers", "%s: wrong content through a held fd (%d bytes, want %d)"
                        % (rel, off, size))
            else:
                s.verified(off)
                s.count("pt_reads")
        time.sleep(3)
    ctx["cleanup"]()
    if not s.gate.valid(ctx["epoch"]):
        return
    for rel, _, _, _ in files:
        with s.lock:
            s.ledger.pop(rel, None)
        os.unlink(os.path.join(ctx["mnt"], rel))


# --------------------------------------------------------------------------
# subprocess workers: fsx and stress-ng, restarted while the mount is up


def run_tool(s, name, make_cmd, on_exit):
    s.gate.register(name)
    n = 0
    while True:
        tok = s.gate.wait_up(name)
        if tok is None:
            return
        epoch, mnt = tok
        while s.gate.valid(epoch):
            n += 1
            cmd, d = make_cmd(epoch, mnt, n)
            try:
                os.makedirs(d, exist_ok=True)
            except OSError as e:
                if s.gate.valid(epoch):
                    s.error(name, "mkdir %s: %s" % (d, e))
                    time.sleep(1)  # the main loop sees a dead mount within 1 s
                break
            logp = os.path.join(s.out, "%s-%03d-%04d.log" % (name, epoch, n))
            tmpd = os.path.join(s.out, "%s-%03d-%04d.tmp" % (name, epoch, n))
            os.makedirs(tmpd, exist_ok=True)
            with open(logp, "wb") as lf:
                lf.write(("$ %s\n" % " ".join(cmd)).encode())
                lf.flush()
                p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf, stderr=lf,
                                     preexec_fn=harness._pdeathsig, start_new_session=True,
                                     env=dict(os.environ, TMPDIR=tmpd))
            with s.proc_lock:
                s.procs[name] = p
            p.wait()
            with s.proc_lock:
                s.procs.pop(name, None)
            with open(logp, errors="replace") as f:
                text = f.read()
            alive = s.gate.valid(epoch)
            kept = on_exit(s, name, p.returncode, text, alive)
            if not kept:
                try:
                    os.unlink(logp)
                except OSError:
                    pass
                shutil.rmtree(tmpd, ignore_errors=True)
            else:
                try:
                    os.rmdir(tmpd)
                except OSError:
                    pass
            if alive:
                try:
                    shutil.rmtree(d)
                except OSError as e:
                    if s.gate.valid(epoch):
                        s.error(name, "rm -r %s: %s" % (d, e))


def fsx_cmd(s, which):
    def make(epoch, mnt, n):
        seed = s.args.seed * 100000 + epoch * 1000 + n * 2 + which
        d = os.path.join(mnt, "fsx%d-%d-%d" % (which, epoch, n))
        extra = ["-m", "-P"] if which == 1 else []
        return ([s.fsx, "-q", "-S", str(seed), "-N", str(s.args.fsx_ops), "-f", "4", "-l",
                 "8M", "-b", "1M"] + extra + [d]), d
    return make


def tool_exit(s, name, tool, prog, key, ok, ops, rc, text, alive):
    """Account one run of a load tool that ended (rc, its output): ok, cut
    by a kill of the daemon (not alive), or a failure with the mount up
    (True: a finding)."""
    if ok:
        s.count(tool, ops)
        s.notes[key + "_runs_ok"] += 1
        return False
    if not alive:
        s.notes[key + "_killed"] += 1
        return False
    s.notes[key + "_failed"] += 1
    s.wrong.append((now(), name, tool, "exit %s" % rc))
    s.error(name, "%s failed (exit %s) with the mount up:\n%s" % (prog, rc, text[-3000:]))
    return True


def kill_tools(s):
    """SIGKILL every load tool's process group (the hog stays)."""
    with s.proc_lock:
        tools = [p for n, p in s.procs.items() if n != "hog"]
    for p in tools:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def fsx_exit(s, name, rc, text, alive):
    m = re.search(r"spw_fsx: (\d+) ops ok", text)
    return tool_exit(s, name, "fsx", "spw_fsx", "fsx", rc == 0 and m is not None,
                     int(m.group(1)) if m else 0, rc, text, alive)


def sng_cmd(s):
    def make(epoch, mnt, n):
        d = os.path.join(mnt, "sng-%d-%d" % (epoch, n))
        return (["stress-ng", "--hdd", "1", "--hdd-bytes", "16M", "--hdd-write-size", "64K",
                 "--iomix", "1", "--iomix-bytes", "8M", "--verify", "--temp-path", d,
                 "--timeout", "%ds" % s.args.sng_time, "--metrics-brief"]), d
    return make


def sng_exit(s, name, rc, text, alive):
    ops = sum(int(m.group(2)) for m in re.finditer(r"\]\s+(hdd|iomix)\s+(\d+)\s", text))
    return tool_exit(s, name, "stress-ng", "stress-ng", "sng", rc == 0, ops, rc, text, alive)


# --------------------------------------------------------------------------
# the memory hog, in the daemon's cgroup

HOG = r"""
import os, random, sys, time
open("/proc/self/oom_score_adj", "w").write("1000")
rng = random.Random(int(sys.argv[2]))
hmax = int(sys.argv[1])
while True:
    n = rng.randint(hmax // 4, hmax) // (16 << 20)
    held = [bytes([i & 0xff]) * (16 << 20) for i in range(n)]
    time.sleep(rng.uniform(15, 40))
    del held
    time.sleep(rng.uniform(10, 30))
"""


def cg_wrap(cg):
    """argv prefix: join the cgroup, then exec the rest (same pid)."""
    return ["sh", "-c", 'echo $$ > %s/cgroup.procs && exec "$@"' % cg, "sh"]


def hog_thread(s):
    n = 0
    while not s.gate.stop:
        n += 1
        p = subprocess.Popen(cg_wrap(s.cg) + [sys.executable, "-c", HOG, str(s.args.hog_max),
                                              str(s.args.seed + n)],
                             stdin=subprocess.DEVNULL, preexec_fn=harness._pdeathsig,
                             start_new_session=True)
        with s.proc_lock:
            s.procs["hog"] = p
        while p.poll() is None and not s.gate.stop:
            time.sleep(1)
        if p.poll() is None or s.gate.stop:
            return
        if p.returncode == -signal.SIGKILL:
            s.hog_ooms += 1
            s.event("hog killed (OOM in the cgroup), restarting it")
        else:
            s.event("hog exited with %s, restarting it" % p.returncode)
        time.sleep(2)


# --------------------------------------------------------------------------
# cold-tier faults: the second cold dir's tmpfs filled up and emptied


def fault_thread(s):
    filler = os.path.join(s.faulty, "filler")
    while not s.gate.stop:
        end = time.monotonic() + s.args.fault_every * s.rng.uniform(0.7, 1.3)
        while time.monotonic() < end and not s.gate.stop:
            time.sleep(1)
        if s.gate.stop:
            return
        if not s.fault_on:
            written = 0
            try:
                fd = os.open(filler, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
                try:
                    blk = b"\xee" * MiB
                    while True:
                        written += os.write(fd, blk)
                finally:
                    os.close(fd)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    s.error("faults", "filler: %s" % e)
            s.fault_on = True
            s.fault_flips += 1
            s.event("cold fault ON: %s full (filler %d MiB)" % (s.cold2, written // MiB))
        else:
            try:
                os.unlink(filler)
            except FileNotFoundError:
                pass
            s.fault_on = False
            s.fault_flips += 1
            s.event("cold fault OFF: filler removed")


# --------------------------------------------------------------------------
# sampling


def proc_rss_fds(pid):
    """VmRSS, open fds, and {RssAnon, RssFile, RssShmem, cpu seconds}."""
    rss, more = None, {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k = line.split(":")[0]
                if k == "VmRSS":
                    rss = int(line.split()[1]) * KiB
                elif k in ("RssAnon", "RssFile", "RssShmem", "Threads"):
                    more[k] = int(line.split()[1]) * (KiB if k != "Threads" else 1)
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
        more["cpu_s"] = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None, None, {}
    try:
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        fds = None
    return rss, fds, more


def sample_thread(s):
    while not s.gate.stop:
        m, life = s.m, (s.lifetimes[-1] if s.lifetimes else None)
        if m is not None and life is not None and m.proc is not None and m.proc.poll() is None \
                and s.gate.up:
            rss, fds, more = proc_rss_fds(m.proc.pid)
            st = {}
            try:
                st = json.loads(os.getxattr(m.mnt, "user.spillway.stats").rstrip(b"\0"))
            except (OSError, ValueError):
                pass
            if rss is not None:
                with s.lock:
                    ops = dict(s.ops)
                    bv = s.bytes_verified
                smp = {"t": round(now(), 1), "life": life["n"],
                       "uptime": round(now() - life["start"], 1), "rss": rss, "fds": fds,
                       "anon": more.get("RssAnon"), "shmem": more.get("RssShmem"),
                       "file": more.get("RssFile"), "threads": more.get("Threads"),
                       "cpu_s": more.get("cpu_s"),
                       "ops": ops, "bytes_verified": bv, "restarts": s.restarts,
                       "lost": len(s.lost), "fault": s.fault_on,
                       "hot_used": st.get("hot", {}).get("used"),
                       "budget": st.get("pressure", {}).get("budget"),
                       "cg_usage": st.get("pressure", {}).get("cgroup_usage"),
                       "pt_open": st.get("passthrough", {}).get("open"),
                       "segments": st.get("segments", {}).get("count"),
                       "err_io": st.get("errors", {}).get("io"),
                       "err_crc": st.get("errors", {}).get("crc"),
                       "enospc": st.get("enospc"), "write_waits": st.get("write_waits"),
                       "slow_ms": st.get("slow_request", {}).get("ms"),
                       "slow_op": st.get("slow_request", {}).get("op"),
                       "cold_full": st.get("cold_full"),
                       "cold": [(c.get("used"), c.get("avail"), c.get("failed"))
                                for c in st.get("cold", [])],
                       "spilled": st.get("spilled", {}).get("bytes"),
                       "restored": st.get("restored", {}).get("bytes"),
                       "pt_opens": st.get("passthrough", {}).get("opens"),
                       "jrnl_failed": st.get("journal", {}).get("failed")}
                s.samples.append(smp)
                life["samples"].append(smp)
                with open(os.path.join(s.out, "samples.jsonl"), "a") as f:
                    f.write(json.dumps(smp) + "\n")
        for _ in range(s.args.sample_every * 10):
            if s.gate.stop:
                return
            time.sleep(0.1)


# --------------------------------------------------------------------------
# the mount's lifetimes


def mount_opts(s):
    return ["chunk_size=1M", "nvme=%s:%s" % (s.cold1, s.cold2), "state_dir=" + s.state,
            "mem_reserve=" + s.args.mem_reserve, "min_spill_size=4M"] + \
        [o for o in s.args.opts.split(",") if o]


def start_mount(s, wiped):
    n = len(s.lifetimes)
    m = CrashMount(s.hot, mount_opts(s), "life-%03d" % n, prefix=cg_wrap(s.cg),
                   hot_size=s.args.hot_size)
    m.check_requests = False
    m.start()
    s.m = m
    s.lifetimes.append({"n": n, "start": now(), "wiped": wiped, "samples": [], "log": m.log})
    return m


def verify_ledger(s, mnt, when):
    """Every ledger entry reads back byte for byte; else LOST."""
    t = time.monotonic()
    with s.lock:
        entries = sorted(s.ledger.items())
    bad = 0
    nbytes = 0
    for rel, (size, sha, kind) in entries:
        p = os.path.join(mnt, rel)
        try:
            h, n = sha_path(p)
        except OSError as e:
            why = "missing" if e.errno == errno.ENOENT else "error %s" % errno.errorcode.get(
                e.errno, e.errno)
            s.lost.append((now(), rel, "%s (%s, %d bytes, %s)" % (why, kind, size, when)))
            bad += 1
            continue
        if (h, n) != (sha, size):
            s.lost.append((now(), rel, "mismatch: %d bytes sha %s, want %d bytes sha %s (%s, %s)"
                           % (n, h[:12], size, sha[:12], kind, when)))
            bad += 1
            continue
        nbytes += n
    s.verified(nbytes)
    dt = time.monotonic() - t
    s.notes["verify_s"].append(round(dt, 1))
    s.event("verified %d ledger entries (%.1f MiB) in %.1fs %s: %d lost"
            % (len(entries), nbytes / MiB, dt, when, bad))
    for x in s.lost[-bad:] if bad else []:
        say("LOST %s: %s" % (x[1], x[2]))
    with s.lock:  # a lost entry is counted once
        for _, rel, _ in s.lost:
            s.ledger.pop(rel, None)


def sweep(s, mnt):
    """Remove what the workers left unacknowledged (files not in the ledger,
    the dirs of killed fsx and stress-ng runs)."""
    with s.lock:
        keep = set(s.ledger)
    removed = 0
    for d in ("small", "pipe", "pt"):
        try:
            names = os.listdir(os.path.join(mnt, d))
        except FileNotFoundError:
            continue
        for n in names:
            rel = d + "/" + n
            if rel not in keep:
                os.unlink(os.path.join(mnt, rel))
                removed += 1
    for n in os.listdir(mnt):
        if n.startswith(("fsx", "sng-")):
            shutil.rmtree(os.path.join(mnt, n))
            removed += 1
    return removed


def d_stacks():
    """The kernel stacks of every task in D state (and of zombie spillways)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            tasks = os.listdir("/proc/%s/task" % d)
            comm = open("/proc/%s/comm" % d).read().strip()
        except OSError:
            continue
        for t in tasks:
            try:
                st = open("/proc/%s/task/%s/stat" % (d, t)).read().rsplit(")", 1)[1].split()[0]
                if st != "D":
                    continue
                out.append("== pid %s tid %s %s\n%s" % (d, t, comm, open(
                    "/proc/%s/task/%s/stack" % (d, t)).read()))
            except OSError:
                continue
    return "\n".join(out)


def mounted_raw(mnt):
    """harness.is_mounted without its realpath (no request to a stuck daemon)."""
    mnt = os.path.abspath(mnt)
    with open("/proc/self/mountinfo") as f:
        return any(harness._unescape_mount_field(ln.split()[4]) == mnt for ln in f)


def abort_fuse(s, mnt):
    """echo 1 > /sys/fs/fuse/connections/<dev minor>/abort (fusectl mounted if need be)."""
    dev = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            # no realpath: an lstat of the mountpoint would wait on the stuck connection
            if harness._unescape_mount_field(fields[4]) == os.path.abspath(mnt):
                dev = fields[2].split(":")[1]
    if dev is None:
        s.event("abort: %s is not in mountinfo" % mnt)
        return
    ctl = "/sys/fs/fuse/connections"
    if not os.path.exists(os.path.join(ctl, dev)):
        subprocess.run(["mount", "-t", "fusectl", "none", ctl], check=False)
        s.fusectl_mounted = True
    with open(os.path.join(ctl, dev, "abort"), "w") as f:
        f.write("1")


def kill_cycle(s, crashed=False):
    """kill -9 the daemon (unless it died by itself), stop the tools, remount
    (hot_dir wiped half the time), verify the ledger, let the workers go."""
    m = s.m
    s.gate.go_down()
    if not crashed:
        os.kill(m.proc.pid, signal.SIGKILL)
    m.killed_by_watchdog = True
    try:
        m.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        # a thread stuck in the kernel keeps /dev/fuse open: nothing is
        # aborted, every request waits; only fusectl's abort gets out
        stacks = d_stacks()
        s.hangs.append((now(), stacks))
        s.event("HANG: the daemon is still there 20 s after SIGKILL; aborting its FUSE "
                "connection (stacks in %s)" % os.path.join(s.out, "hang-%d.txt" % len(s.hangs)))
        with open(os.path.join(s.out, "hang-%d.txt" % len(s.hangs)), "w") as f:
            f.write(stacks)
        abort_fuse(s, m.mnt)
        m.proc.wait(timeout=60)
    kill_tools(s)
    lazy_unmount(m.mnt)
    with open(m.log, "a") as f:
        f.write("\n[soak] %s; lazily unmounted\n" % ("died by itself" if crashed else
                                                   "killed with SIGKILL"))
    stuck = s.gate.wait_parked(60)
    if stuck:
        s.event("workers not parked 60 s after the kill: %s" % stuck)
    m.stop()
    wipe = s.rng.random() < s.args.wipe_ratio
    if wipe:
        shutil.rmtree(s.hot, ignore_errors=True)
        s.reboots += 1
    s.restarts += 1
    s.event("restart %d (%s)%s" % (s.restarts, "crash" if crashed else "kill -9",
                                   ", hot_dir wiped (reboot)" if wipe else ", hot_dir kept"))
    try:
        m2 = start_mount(s, wipe)
    except harness.MountError as e:
        s.crashes.append((now(), "remount failed: %s" % e))
        raise
    st = json.loads(os.getxattr(m2.mnt, "user.spillway.stats").rstrip(b"\0"))
    lf = st.get("lost_files", 0)
    s.notes["lost_files_stat"] += lf
    if lf and not wipe:
        s.lost.append((now(), "(stats)", "lost_files=%d after kill -9 with hot_dir kept" % lf))
        s.event("lost_files=%d after a kill -9 with hot_dir kept" % lf)
    elif lf:
        s.event("lost_files=%d after the reboot (files whose newest bytes were only in RAM)"
                % lf)
    verify_ledger(s, m2.mnt, "after restart %d" % s.restarts)
    rm = sweep(s, m2.mnt)
    s.event("swept %d unacknowledged files/dirs" % rm)
    s.gate.go_up(m2.mnt)


# --------------------------------------------------------------------------
# report


def mib(x):
    return "%.0f" % (x / MiB) if x is not None else "-"


def report(s, total_s, interrupted=False):
    out = []
    P = out.append
    with s.lock:
        ops = dict(s.ops)
    P("")
    P("== soak: %.0f s, %d restarts (%d with hot_dir wiped), %d cold-fault flips, "
      "%d hog OOM kills" % (total_s, s.restarts, s.reboots, s.fault_flips, s.hog_ooms))
    P("operations: " + ", ".join("%s %d" % kv for kv in sorted(ops.items())))
    P("fsx runs ok %(fsx_runs_ok)d, killed %(fsx_killed)d, failed %(fsx_failed)d; "
      "stress-ng runs ok %(sng_runs_ok)d, killed %(sng_killed)d, failed %(sng_failed)d"
      % s.notes)
    P("bytes verified: %.2f GiB; ledger verifications took %s s" % (
        s.bytes_verified / (1 << 30), s.notes["verify_s"]))
    P("lost: %d; wrong bytes during the run: %d; unexpected worker errors: %d; "
      "daemon deaths not ours: %d; SIGKILLs that did not kill: %d; lost_files reported by "
      "the daemon after reboots: %d"
      % (len(s.lost), len(s.wrong), len(s.errors), len(s.crashes), len(s.hangs),
         s.notes["lost_files_stat"]))
    # per 5 minutes
    P("")
    P("%-9s %4s %-16s %-9s %-9s %-9s %7s %10s" % (
        "minutes", "life", "RSS MiB min/med/max", "anon med", "fds", "budget", "ops",
        "verified"))
    bucket = s.args.table_every
    prev_ops, prev_bv = 0, 0
    for b0 in range(0, int(total_s) + 1, bucket):
        smp = [x for x in s.samples if b0 <= x["t"] < b0 + bucket]
        if not smp:
            continue
        rss = [x["rss"] for x in smp]
        fds = [x["fds"] for x in smp if x["fds"] is not None]
        bud = [x["budget"] for x in smp if x["budget"] is not None]
        anon = [x["anon"] for x in smp if x.get("anon") is not None]
        tot = sum(v for k, v in smp[-1]["ops"].items() if not k.endswith("MiB"))
        bv = smp[-1]["bytes_verified"]
        lives = sorted({x["life"] for x in smp})
        P("%3d-%-5d %4s %5s/%4s/%4s   %8s  %3d-%-4d  %3s-%-4s %7d %8.0fM" % (
            b0 // 60, (b0 + bucket) // 60, ",".join(str(x) for x in lives)[:4],
            mib(min(rss)), mib(statistics.median(rss)), mib(max(rss)),
            mib(statistics.median(anon)) if anon else "-",
            min(fds) if fds else -1, max(fds) if fds else -1,
            mib(min(bud)) if bud else "-", mib(max(bud)) if bud else "-",
            tot - prev_ops, (bv - prev_bv) / MiB))
        prev_ops, prev_bv = tot, bv
    # per lifetime at equal uptime
    P("")
    w0, w1 = s.args.steady_from, s.args.steady_to
    P("per lifetime (steady state = uptime %d..%d s): RSS MiB median there, max; fds max"
      % (w0, w1))
    steady = []
    for life in s.lifetimes:
        sm = life["samples"]
        win = [x for x in sm if w0 <= x["uptime"] < w1]
        if not sm:
            continue
        r = statistics.median([x["rss"] for x in win]) if win else None
        an = [x["anon"] for x in win if x.get("anon") is not None]
        an = statistics.median(an) if an else None
        cpu = (sm[-1].get("cpu_s") or 0) / max(1, sm[-1]["uptime"])
        fmax = max(x["fds"] for x in sm if x["fds"] is not None)
        if win:
            steady.append((life["n"], r, max(x["fds"] for x in win if x["fds"] is not None)))
        P("  life %2d  start %6.0fs  %s  uptime %5.0fs  RSS steady %5s (anon %4s)  max %5s  "
          "fds max %3d  daemon CPU %3.0f%%"
          % (life["n"], life["start"], "wiped" if life["wiped"] else "kept ",
             sm[-1]["uptime"], mib(r), mib(an), mib(max(x["rss"] for x in sm)), fmax,
             100 * cpu))
    # the daemon's own counters, summed over the lifetimes (each starts at 0)
    tot = {}
    slow = (0, "")
    for life in s.lifetimes:
        if not life["samples"]:
            continue
        last = life["samples"][-1]
        for k in ("err_io", "err_crc", "enospc", "write_waits", "spilled", "restored",
                  "pt_opens"):
            tot[k] = tot.get(k, 0) + (last.get(k) or 0)
        for x in life["samples"]:
            if (x.get("slow_ms") or 0) > slow[0]:
                slow = (x["slow_ms"], x.get("slow_op"))
    full = sum(1 for x in s.samples if x.get("cold_full"))
    c2 = [x["cold"][1] for x in s.samples if len(x.get("cold") or []) > 1]
    if c2:
        P("cold2 (the faulty tmpfs) in the samples: used %.0f..%.0f MiB by spillway and the "
          "filler, full (< 1 MiB free) in %d of %d samples, failed in %d"
          % (min(u for u, _, _ in c2) / MiB, max(u for u, _, _ in c2) / MiB,
             sum(1 for _, av, _ in c2 if av < MiB), len(c2), sum(1 for _, _, f in c2 if f)))
    P("daemon counters over all lifetimes (to the last sample of each): io errors %d, crc "
      "errors %d, ENOSPC %d, write waits %d, spilled %.1f GiB, restored %.1f GiB, "
      "passthrough opens %d; slowest request %s ms (%s); samples with cold_full set: %d"
      % (tot.get("err_io", 0), tot.get("err_crc", 0), tot.get("enospc", 0),
         tot.get("write_waits", 0), tot.get("spilled", 0) / (1 << 30),
         tot.get("restored", 0) / (1 << 30), tot.get("pt_opens", 0), slow[0], slow[1], full))
    # warnings and errors in the daemon logs, folded
    msgs = {}
    for life in s.lifetimes:
        try:
            with open(life["log"], errors="replace") as f:
                for line in f:
                    m = re.search(r"\b(warn|error|fatal)\b:? (.*)", line)
                    if m:
                        k = m.group(1) + ": " + re.sub(r"\d+", "N", m.group(2))[:150]
                        msgs[k] = msgs.get(k, 0) + 1
        except OSError:
            pass
    if msgs:
        P("daemon log warnings/errors (digits folded):")
        for k, n in sorted(msgs.items(), key=lambda kv: -kv[1])[:15]:
            P("  %5d  %s" % (n, k))
    verdict = []
    grew = False
    if len(steady) >= 2:
        k = max(1, len(steady) // 3)
        first = statistics.mean(x[1] for x in steady[:k])
        last = statistics.mean(x[1] for x in steady[-k:])
        ffd = max(x[2] for x in steady[:k])
        lfd = max(x[2] for x in steady[-k:])
        rss_ok = last <= first * (1 + s.args.rss_tolerance) + 8 * MiB
        fd_ok = lfd <= ffd + 16
        P("steady RSS: first %d lifetime(s) %.1f MiB, last %d %.1f MiB (%+.1f%%): %s"
          % (k, first / MiB, k, last / MiB, 100.0 * (last - first) / first,
             "flat" if rss_ok else "GREW"))
        P("steady fds: first %d, last %d: %s" % (ffd, lfd, "flat" if fd_ok else "GREW"))
        grew = not (rss_ok and fd_ok)
    else:
        P("fewer than two lifetimes reached the steady window: no RSS/fds verdict")
    # the longest lifetime: its first vs last third
    if s.lifetimes:
        longest = max(s.lifetimes, key=lambda L: len(L["samples"]))
        sm = longest["samples"]
        if len(sm) >= 9:
            k = len(sm) // 3
            a = statistics.median(x["rss"] for x in sm[k:2 * k])
            b = statistics.median(x["rss"] for x in sm[2 * k:])
            P("longest lifetime (%d, %.0f s): RSS median middle third %.1f MiB, last third "
              "%.1f MiB" % (longest["n"], sm[-1]["uptime"], a / MiB, b / MiB))
    if s.lost:
        verdict.append("LOST %d" % len(s.lost))
        for t, rel, why in s.lost[:50]:
            P("  LOST at %.0fs: %s: %s" % (t, rel, why))
    if s.wrong:
        verdict.append("%d wrong reads/tool failures during the run" % len(s.wrong))
        for x in s.wrong[:30]:
            P("  WRONG at %.0fs: %s %s %s" % x)
    if s.crashes:
        verdict.append("%d daemon deaths not caused by the soak" % len(s.crashes))
        for t, why in s.crashes:
            P("  CRASH at %.0fs: %s" % (t, why[:2000]))
    if s.errors:
        verdict.append("%d unexpected worker errors" % len(s.errors))
        for t, w, what in s.errors[:30]:
            P("  ERROR at %.0fs %s: %s" % (t, w, what[:1500]))
    if s.hangs:
        verdict.append("%d kill -9 left the daemon stuck in the kernel (connection aborted)"
                       % len(s.hangs))
        for t, st in s.hangs:
            P("  HANG at %.0fs:\n%s" % (t, st[:3000]))
    # a recovery that finds a chunk it cannot read (its segment gone) is
    # data lost, even in a file no worker checks (fsx's, stress-ng's)
    rec_err = sum(n for k, n in msgs.items() if k.startswith("error: recovery:"))
    if rec_err:
        verdict.append("%d recovery errors in the daemon logs (unreadable chunks)" % rec_err)
    if grew:
        verdict.append("RSS or fds grew")
    if interrupted:
        verdict.append("interrupted before the end")
    P("")
    P("VERDICT: " + ("PASS (0 lost, memory and fds flat)" if not verdict else
                     "FAIL: " + "; ".join(verdict)))
    text = "\n".join(out)
    print(text, flush=True)
    with open(os.path.join(s.out, "report.txt"), "w") as f:
        f.write(text + "\n")
        f.write("\nevents:\n" + "\n".join("%8.1fs %s" % e for e in s.events) + "\n")
    return not verdict


# --------------------------------------------------------------------------


def setup_env(s):
    a = s.args
    s.base = tempfile.mkdtemp(prefix="spw-soak-", dir="/var/tmp")
    # cold1: an ext4 on a loop device (disk I/O, a size like cold2's, so that
    # placement, which weighs the dirs by free space, sends both a share)
    s.cold1mnt = os.path.join(s.base, "disk")
    os.mkdir(s.cold1mnt)
    img = os.path.join(s.base, "disk.img")
    with open(img, "wb") as f:
        f.truncate(a.cold1_size_mib * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["mount", "-o", "loop", img, s.cold1mnt], check=True)
    s.loop_mounted = True
    s.cold1 = os.path.join(s.cold1mnt, "cold")
    os.mkdir(s.cold1)
    s.faulty = os.path.join(s.base, "faulty")
    os.mkdir(s.faulty)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % a.fault_size,
                    "spw-soak-faulty", s.faulty], check=True)
    s.tmpfs_mounted = True
    s.cold2 = os.path.join(s.faulty, "cold")
    os.mkdir(s.cold2)
    s.state = os.path.join(s.base, "state")
    s.shm = tempfile.mkdtemp(prefix="spw-soak-", dir="/dev/shm")
    s.hot = os.path.join(s.shm, "hot")
    s.cg = "/sys/fs/cgroup/memory/spw-soak-%d" % os.getpid()
    os.mkdir(s.cg)
    with open(os.path.join(s.cg, "memory.limit_in_bytes"), "w") as f:
        f.write(str(a.cg_limit_mib * MiB))
    # everything the soak starts (daemon included) shares --cpus cores
    if a.cpus > 0 and os.path.isdir("/sys/fs/cgroup/cpu"):
        s.cpucg = "/sys/fs/cgroup/cpu/spw-soak-%d" % os.getpid()
        os.mkdir(s.cpucg)
        with open(os.path.join(s.cpucg, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(s.cpucg, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(int(a.cpus * 100000)))
        with open("/proc/self/cgroup") as f:
            s.cpucg_old = "/sys/fs/cgroup/cpu" + [ln.strip().split(":", 2)[2] for ln in f
                                                  if ln.split(":")[1] == "cpu"][0]
        with open(os.path.join(s.cpucg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))


def teardown(s):
    s.gate.finish()
    with s.proc_lock:
        procs = list(s.procs.items())
    for n, p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    if s.m is not None and s.m.proc is not None and s.m.proc.poll() is None:
        s.m.killed_by_watchdog = True  # the end's clean unmount was checked already
    harness.cleanup_all()
    for t in s.threads:
        t.join(timeout=30)
    for flag, mp in (("fusectl_mounted", "/sys/fs/fuse/connections"),
                     ("tmpfs_mounted", getattr(s, "faulty", None)),
                     ("loop_mounted", getattr(s, "cold1mnt", None))):
        if getattr(s, flag, False):
            r = subprocess.run(["umount", mp], stderr=subprocess.PIPE)
            if r.returncode != 0:
                subprocess.run(["umount", "-l", mp])
    if getattr(s, "cpucg", None):
        try:
            with open(os.path.join(s.cpucg_old, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            say("could not leave the cpu cgroup: %s" % e)
    for cg in (getattr(s, "cg", None), getattr(s, "cpucg", None)):
        if not cg or not os.path.isdir(cg):
            continue
        for _ in range(50):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.2)
        else:
            say("could not remove the cgroup %s" % cg)
    for d in (getattr(s, "base", None), getattr(s, "shm", None)):
        if d and not any(mp == d or mp.startswith(d + "/")
                         for mp in (ln.split()[1] for ln in open("/proc/mounts"))):
            shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--duration", type=int, default=3600, help="seconds of load (3600)")
    ap.add_argument("--kill-every", type=int, default=300, help="seconds between kill -9s")
    ap.add_argument("--wipe-ratio", type=float, default=0.5,
                    help="fraction of the restarts with hot_dir wiped (a reboot)")
    ap.add_argument("--fault-every", type=int, default=None,
                    help="seconds between cold-fault flips (default kill-every*0.6)")
    ap.add_argument("--hot-size", default="64M")
    ap.add_argument("--cpus", type=float, default=1.0,
                    help="cores for the soak and all it starts (a v1 cpu cgroup; 0: no limit)")
    ap.add_argument("--opts", default="", help="extra -o options, comma-separated")
    ap.add_argument("--mem-reserve", default="64M")
    ap.add_argument("--cg-limit-mib", type=int, default=448, help="the cgroup's memory limit")
    ap.add_argument("--hog-max", type=int, default=256 * MiB, help="bytes the hog takes at most")
    ap.add_argument("--fault-size", default="768M", help="the faulty cold dir's tmpfs")
    ap.add_argument("--cold1-size-mib", type=int, default=3072,
                    help="the other cold dir's ext4 (a loop device on /var/tmp)")
    ap.add_argument("--small-live", type=int, default=3000)
    ap.add_argument("--small-pause", type=float, default=0.3)
    ap.add_argument("--pipe-depth", type=int, default=4)
    ap.add_argument("--pipe-pause", type=float, default=0.02)
    ap.add_argument("--pt-files", type=int, default=4)
    ap.add_argument("--fsx-ops", type=int, default=20000)
    ap.add_argument("--sng-time", type=int, default=60)
    ap.add_argument("--sample-every", type=int, default=10)
    ap.add_argument("--table-every", type=int, default=300)
    ap.add_argument("--steady-from", type=int, default=None)
    ap.add_argument("--steady-to", type=int, default=None)
    ap.add_argument("--rss-tolerance", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=25)
    ap.add_argument("--out", default=None, help="logs, samples.jsonl, report.txt")
    a = ap.parse_args()
    if a.fault_every is None:
        a.fault_every = max(20, int(a.kill_every * 0.6))
    if a.steady_from is None:
        a.steady_from = min(60, a.kill_every // 4)
    if a.steady_to is None:
        a.steady_to = max(a.steady_from + 10, int(a.kill_every * 0.7))
    if os.geteuid() != 0:
        sys.exit("soak: run as root (FUSE, a tmpfs mount, a memory cgroup)")
    if not shutil.which("stress-ng"):
        sys.exit("soak: stress-ng is missing (apt-get install stress-ng)")
    build = os.path.abspath(a.build)
    harness.BUILD_DIR = build
    harness.SPILLWAY = os.path.join(build, "spillway")
    harness.MOUNT_DEADLINE = 120.0
    harness._current_test[0] = "soak"
    out = a.out or os.path.join(build, "soak-logs", time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(out, exist_ok=True)
    harness.LOG_DIR = out
    s = Soak(a)
    s.out = out
    s.fsx = os.path.join(build, "tests", "spw_fsx")
    for p in (harness.SPILLWAY, s.fsx):
        if not os.access(p, os.X_OK):
            sys.exit("soak: %s is missing (build first)" % p)

    def on_signal(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    ok = False
    t_start = now()
    try:
        setup_env(s)
        say("base %s, hot %s, cgroup %s (limit %d MiB), logs in %s"
            % (s.base, s.hot, s.cg, a.cg_limit_mib, out))
        start_mount(s, False)
        say("mounted %s: %s" % (s.m.mnt, " ".join(s.m.argv())))
        s.gate.go_up(s.m.mnt)
        workers = [
            ("small", lambda: worker_loop(s, "small", small_setup, small_step)),
            ("producer", lambda: worker_loop(s, "producer", pipe_setup, producer_step)),
            ("consumer", lambda: worker_loop(s, "consumer", lambda s, c: None, consumer_step)),
            ("readers", lambda: worker_loop(s, "readers", pt_setup, pt_step)),
            ("fsx0", lambda: run_tool(s, "fsx0", fsx_cmd(s, 0), fsx_exit)),
            ("fsx1", lambda: run_tool(s, "fsx1", fsx_cmd(s, 1), fsx_exit)),
            ("stress-ng", lambda: run_tool(s, "stress-ng", sng_cmd(s), sng_exit)),
            ("hog", lambda: hog_thread(s)),
            ("faults", lambda: fault_thread(s)),
            ("sampler", lambda: sample_thread(s)),
        ]
        for name, fn in workers:
            t = threading.Thread(target=fn, name=name, daemon=True)
            t.start()
            s.threads.append(t)
        end = t_start + a.duration
        next_kill = now() + a.kill_every * s.rng.uniform(0.8, 1.2)
        while now() < end:
            time.sleep(1)
            p = s.m.proc
            if p.poll() is not None or not mounted_raw(s.m.mnt):
                why = "daemon exited with status %s" % p.poll() if p.poll() is not None \
                    else "mount vanished"
                s.crashes.append((now(), "%s (life %d)\n%s" % (why, s.lifetimes[-1]["n"],
                                                              s.m.log_text(40))))
                s.event("DAEMON DIED BY ITSELF: %s; log %s" % (why, s.m.log))
                if p.poll() is None:
                    os.kill(p.pid, signal.SIGKILL)
                kill_cycle(s, crashed=True)
                next_kill = now() + a.kill_every * s.rng.uniform(0.8, 1.2)
            elif now() >= next_kill and end - now() > 30:
                kill_cycle(s)
                next_kill = now() + a.kill_every * s.rng.uniform(0.8, 1.2)
        # the end: stop the load, verify, clean unmount, remount, verify again
        s.event("load over; stopping the workers")
        s.gate.go_down()
        kill_tools(s)
        stuck = s.gate.wait_parked(120)
        if stuck:
            s.event("workers still busy 120 s after the end: %s" % stuck)
        verify_ledger(s, s.m.mnt, "at the end, same daemon")
        sweep(s, s.m.mnt)
        rc = s.m.unmount_clean()
        if rc != 0:
            s.crashes.append((now(), "clean unmount: exit status %s\n%s"
                              % (rc, s.m.log_text(40))))
        s.event("clean unmount: exit status %s" % rc)
        s.m.stop()
        start_mount(s, False)
        verify_ledger(s, s.m.mnt, "after the final clean remount")
        rc = s.m.unmount_clean()
        s.event("final clean unmount: exit status %s" % rc)
        if rc != 0:
            s.crashes.append((now(), "final clean unmount: exit status %s" % rc))
        s.m.stop()
        s.gate.finish()
        for t in s.threads:
            t.join(timeout=30)
        ok = report(s, now() - t_start)
    except KeyboardInterrupt as e:
        say("interrupted (%s): cleaning up" % e)
        try:
            report(s, now() - t_start, interrupted=True)
        except Exception:
            traceback.print_exc()
    except Exception:
        traceback.print_exc()
        try:
            report(s, now() - t_start, interrupted=True)
        except Exception:
            traceback.print_exc()
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        teardown(s)
        say("cleaned up (logs in %s)" % out)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
