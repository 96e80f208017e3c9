#!/usr/bin/env python3
"""
test_crash_states - the states a power loss can leave in spillway's cold and
state directories, each one mounted and checked (tests/crash/README.md).

1. Record: spillway runs with -o io_engine=psync under spw_record.so (an
   LD_PRELOAD shim) that logs every write, truncate, fallocate, rename,
   unlink, mkdir and sync of the daemon in its two cold directories (and the
   state directory inside the first). The test drives a small workload
   through the mount (files of 0 B to 3 MiB written in 128 KiB pieces, fsync
   of files and directories, renames, unlinks, evictions, enough metadata
   for a checkpoint rotation, a reboot - kill -9, empty hot_dir, remount -
   so states fall inside a recovery too, a compaction) and writes a mark
   into the same log before and after each of its operations, then
   unmounts cleanly.
   Replaying the whole log must give exactly the directories the daemon
   left: nothing it did went unrecorded.
2. States (crashlib.py): at every sync point of the log, the state with
   everything kept, and after it (with the sync not yet done) states with
   unsynced operations lost: only what was synced, one file's unsynced
   writes cut to a prefix, namespace operations cut to a prefix, one write
   dropped, one write torn at a sector, a rename kept without the data it
   renamed, random subsets.
   Bounded by SPW_CRASH_STATES (default 300), chosen with SPW_CRASH_SEED.
3. Each state: written into the cold directory (same path as recorded: the
   tiers file names it), `spillway-fsck` run on it, mounted with a fresh
   empty hot_dir (power loss wipes RAM), and checked against the marks:
   every file fsync'd (content) whose name was synced before the crash
   reads back byte for byte at that name; any other file present is some
   version the workload gave it, at a name it had, not older than its last
   fsync nor at a name it durably left, never bytes no version had; a mount
   that refuses must say why in one line (and not hold fsync'd files). Then
   a clean unmount (status 0) and `spillway-fsck --verify-data` must find
   the state clean. A control state no disk can leave must fail the checks.
4. Two findings, each an expected failure until its fix (README.md):
   test_first_mount_fsync_survives_posix_disk, test_first_mount_torn_journal_header.

Knobs (environment):
  SPW_CRASH_STATES=N     states to check (default 300; bench/bench_crash.sh: thousands)
  SPW_CRASH_SEED=N       seed of the state choice (default 1)
  SPW_CRASH_UNORDERED=1  also lose namespace operations out of order (POSIX
                         allows it; ext4/xfs/btrfs do not)
  SPW_CRASH_DIRECT_DURABLE=1  an O_DIRECT write is its own sync point (by
                         default only O_DSYNC/O_SYNC ones are: crashlib.py)
  SPW_CRASH_KEEP=DIR     copy each failing state to DIR/<n> (for fsck, debugging)
  SPW_CRASH_MAX_FAILURES=N  stop after N failing states (default 5)
  SPW_CRASH_ASSUME_DURABLE=REGEX  namespace operations on matching paths are
                         durable at once (to look past a finding already known)

Run: python3 tests/crash/test_crash_states.py --build BUILD_DIR
"""

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import unittest

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import harness  # noqa: E402
import crashlib  # noqa: E402
from lib.crash import HOT_SIZE, CrashMount  # noqa: E402
from lib.data import KiB, MiB, content  # noqa: E402
from lib.tier import stats_of  # noqa: E402

PIECE = 128 * KiB  # one FUSE write request (max_write is 1 MiB): versions are exact


def sha(b):
    return hashlib.sha256(b).hexdigest()


# --------------------------------------------------------------------------
# the workload and its model


class FileObj:
    def __init__(self, fid):
        self.fid = fid
        self.data = bytearray()
        self.versions = []  # (sha, size, op)
        self.names = []     # [name, op set, op unset or None]
        self.fsyncs = []    # (op, version index at the fsync)
        self.gone = None    # op that removed its last name


class Workload:
    """Operations on the mount, each between two marks in the recorder's log
    ("B n", "E n"), and the model the checks need."""

    def __init__(self, mnt, log_path):
        self.mnt = mnt
        self.logfd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        self.ops = []     # (description, kind, fid or None)
        self.files = []
        self.by_name = {}  # current name -> FileObj
        self.tag = 1000

    def close(self):
        os.close(self.logfd)

    def p(self, name):
        return os.path.join(self.mnt, name)

    def _op(self, desc, kind, f, fn):
        n = len(self.ops)
        self.ops.append((desc, kind, f.fid if f else None))
        os.write(self.logfd, crashlib.mark_bytes("B %d" % n))
        fn()
        os.write(self.logfd, crashlib.mark_bytes("E %d" % n))
        return n

    def _version(self, f, n):
        f.versions.append((sha(f.data), len(f.data), n))

    def mkdir(self, name):
        self._op("mkdir " + name, "ns", None, lambda: os.mkdir(self.p(name)))

    def create(self, name):
        f = FileObj(len(self.files))
        self.files.append(f)

        def go():
            os.close(os.open(self.p(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        n = self._op("create " + name, "create", f, go)
        self._version(f, n)
        f.names.append([name, n, None])
        self.by_name[name] = f
        return f

    def write(self, name, off, size, sync=False):
        """Fresh bytes at [off, off+size), one op per PIECE; with sync, an
        fsync of the same fd (a passthrough writer's, when the file is all
        in RAM) before it is closed."""
        f = self.by_name[name]
        fd = os.open(self.p(name), os.O_WRONLY)
        try:
            pos = off
            while pos < off + size:
                n = min(PIECE, off + size - pos)
                self.tag += 1
                b = content(self.tag, pos, n)

                def go(b=b, pos=pos):
                    if os.pwrite(fd, b, pos) != len(b):
                        raise AssertionError("short write to " + name)
                i = self._op("pwrite %s %d+%d" % (name, pos, n), "data", f, go)
                if len(f.data) < pos + n:
                    f.data.extend(bytes(pos + n - len(f.data)))
                f.data[pos:pos + n] = b
                self._version(f, i)
                pos += n
            if sync:
                i = self._op("fsync " + name, "fsync", f, lambda: os.fsync(fd))
                f.fsyncs.append((i, len(f.versions) - 1))
        finally:
            os.close(fd)

    def truncate(self, name, size):
        f = self.by_name[name]
        n = self._op("truncate %s %d" % (name, size), "data", f,
                     lambda: os.truncate(self.p(name), size))
        if size < len(f.data):
            del f.data[size:]
        else:
            f.data.extend(bytes(size - len(f.data)))
        self._version(f, n)

    def fsync(self, name):
        f = self.by_name[name]
        fd = os.open(self.p(name), os.O_RDWR)
        try:
            n = self._op("fsync " + name, "fsync", f, lambda: os.fsync(fd))
        finally:
            os.close(fd)
        f.fsyncs.append((n, len(f.versions) - 1))

    def fsync_dir(self, name):
        fd = os.open(self.p(name), os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._op("fsync dir " + name, "fsync", None, lambda: os.fsync(fd))
        finally:
            os.close(fd)

    def rename(self, a, b):
        f = self.by_name[a]
        victim = self.by_name.get(b)
        n = self._op("rename %s %s" % (a, b), "ns", f, lambda: os.rename(self.p(a), self.p(b)))
        self._unname(f, a, n)
        if victim is not None:
            self._unname(victim, b, n)
        f.names.append([b, n, None])
        self.by_name[b] = f

    def unlink(self, name):
        f = self.by_name[name]
        n = self._op("unlink " + name, "ns", f, lambda: os.unlink(self.p(name)))
        self._unname(f, name, n)

    def _unname(self, f, name, n):
        for e in f.names:
            if e[0] == name and e[2] is None:
                e[2] = n
        del self.by_name[name]
        if not any(e[2] is None for e in f.names):
            f.gone = n

    def reboot(self, restart):
        """kill -9 and a remount with an empty hot_dir (restart() does both
        and returns the new mountpoint), recorded like the rest, so the
        states cover a crash during recovery. Then the model follows what
        the remount shows: a file not there was lost (the daemon must have
        said so), a file there has a version it had, at its name."""
        n = self._op("reboot", "reboot", None, lambda: setattr(self, "mnt", restart()))
        found = read_tree(self.mnt)
        for name, f in sorted(self.by_name.items()):
            got = found.pop(name, None)
            if got is None:
                self._unname(f, name, n)
                continue
            cand = [vi for vi, v in enumerate(f.versions) if v[0] == got[0]]
            if not cand:
                raise AssertionError("after the reboot %s has bytes it never had" % name)
            if cand[-1] != len(f.versions) - 1:
                f.data = bytearray(open(self.p(name), "rb").read())
                self._version(f, n)
        if found:
            raise AssertionError("after the reboot, files nobody made: %s" % sorted(found))
        return n

    def evict(self, name):
        f = self.by_name[name]
        self._op("evict " + name, "meta", f,
                 lambda: os.setxattr(self.p(name), "user.spillway.evict", b"1"))

    def wait(self, what, pred, timeout=20):
        """Poll the daemon (no sleeps as synchronisation)."""
        harness.wait_until(pred, timeout, what, interval=0.02)


def run_workload(w, restart):
    """Small, but through every path the issue names: writes, fsync of files
    and directories, unlink, rename (within and across directories, over an
    existing name), evictions, a checkpoint rotation, a compaction; then
    writes over cold data (overlay records) and a passthrough writer."""
    st0 = stats_of(w.mnt)
    w.mkdir("d1")
    w.mkdir("d2")
    sizes = [0, 1, 4095, 65536 + 3, MiB - 1, MiB + 5, 2 * MiB + MiB // 2, 3 * MiB]
    for i, size in enumerate(sizes):
        name = "d1/f%d" % i
        w.create(name)
        w.write(name, 0, size)
        if i % 3 != 1:
            w.fsync(name)
    w.fsync_dir("d1")
    w.evict("d1/f1")         # spilled, never fsync'd
    w.evict("d1/f7")         # fsync'd, then evicted
    w.rename("d1/f2", "d2/g2")
    w.fsync_dir("d2")        # the rename is durable
    w.rename("d1/f3", "d1/f3b")  # never synced
    w.unlink("d1/f5")
    w.fsync_dir("d1")
    w.write("d1/f6", MiB, 64 * KiB)  # an fsync'd file changed in place
    w.fsync("d1/f6")
    w.write("d1/f0", 0, 10)  # the empty fsync'd file gets bytes, not synced
    w.create("d2/over")
    w.write("d2/over", 0, 5000)
    w.fsync("d2/over")
    w.rename("d2/over", "d2/g2")  # over an existing (fsync'd) name
    w.fsync_dir("d2")
    w.truncate("d1/f7", MiB + 17)
    w.fsync("d1/f7")
    # a checkpoint rotation (checkpoint_size=64K): metadata only
    ck0 = stats_of(w.mnt)["journal"]["checkpoints"]
    for i in range(400):
        name = "d2/s%d" % i
        w.create(name)
        w.write(name, 0, 100)
        if ck0 < stats_of(w.mnt)["journal"]["checkpoints"] and i % 50 == 49:
            break
    w.fsync("d2/s0")
    w.wait("a checkpoint rotation",
           lambda: stats_of(w.mnt)["journal"]["checkpoints"] > ck0)
    # a power loss of RAM only: recovery drops the lost files' names,
    # deletes orphan segments, checkpoints (all recorded)
    w.create("d1/unsynced")
    w.write("d1/unsynced", 0, MiB + 3)
    w.reboot(restart)
    # a compaction: a 4-chunk segment left 25% live
    w.create("d1/gc")
    w.write("d1/gc", 0, 4 * MiB)
    w.evict("d1/gc")
    c0 = stats_of(w.mnt)["segments"]["compacted"]
    for c in range(3):  # rewritten whole: their old records die (a part
        w.write("d1/gc", c * MiB, MiB)  # written over would keep them: overlays)
    w.fsync("d1/gc")
    w.wait("a compaction", lambda: stats_of(w.mnt)["segments"]["compacted"] > c0)
    # writes over cold data (docs/overlays.md): small writes into an evicted
    # file spill as overlay records chained on its base record
    ov0 = stats_of(w.mnt)["overlay"]["spills"]
    w.create("d1/ovl")
    w.write("d1/ovl", 0, 2 * MiB)
    w.fsync("d1/ovl")
    w.evict("d1/ovl")
    w.write("d1/ovl", 3 * 4096, 4096)
    w.write("d1/ovl", MiB + 100, 5000)
    w.fsync("d1/ovl")
    w.evict("d1/ovl")
    w.write("d1/ovl", 2 * 4096 + 7, 100, sync=True)  # a second record on chunk 0
    w.wait("overlay spills", lambda: stats_of(w.mnt)["overlay"]["spills"] >= ov0 + 3)
    # a writer the kernel passes through to the hot file (a reader holds a
    # passthrough open, so the writer's open joins it: docs/passthrough.md),
    # fsync'd on its fd; its open, fsync and close mark every chunk changed,
    # which must never cost the fsync'd version (it did: the file was lost)
    pt0 = stats_of(w.mnt)["passthrough"]["opens"]
    w.create("d2/pt")
    # pinned: only a file all in RAM is passed through, and a loaded
    # machine's memory pressure may shrink the budget and drop its chunks
    os.setxattr(w.p("d2/pt"), "user.spillway.pin", b"1")
    w.write("d2/pt", 0, 2 * MiB + 7)
    w.fsync("d2/pt")
    reader = os.open(w.p("d2/pt"), os.O_RDONLY)
    try:
        w.write("d2/pt", MiB, 4096, sync=True)  # closed after its fsync
        os.close(os.open(w.p("d2/pt"), os.O_WRONLY))  # opened to write, nothing written
    finally:
        os.close(reader)
    w.wait("passthrough opens", lambda: stats_of(w.mnt)["passthrough"]["opens"] >= pt0 + 2)
    # survivors of the reboot (fsync'd) renamed and unlinked
    w.unlink("d2/s0")
    w.rename("d1/f6", "d2/f6")
    w.fsync_dir("d1")
    return st0


# --------------------------------------------------------------------------
# the checks of one state


class Oracle:
    """What must and what may be in the mount at crash point k."""

    def __init__(self, w, log):
        self.w = w
        self.B, self.E = {}, {}
        for text, i in log.marks.items():
            kind, n = text.split()
            (self.B if kind == "B" else self.E)[int(n)] = i
        self.nops = len(w.ops)
        self.sync_ops = [n for n, op in enumerate(w.ops) if op[1] == "fsync"]
        self.by_sha = {}
        for f in w.files:
            for vi, (s, size, op) in enumerate(f.versions):
                self.by_sha.setdefault(s, []).append((f, vi))

    def done(self, n, k):
        return n in self.E and self.E[n] < k

    def started(self, n, k):
        return n in self.B and self.B[n] < k

    def synced_after(self, n, k, fid=None):
        """A completed fsync (of file fid, or any) that began after op n ended."""
        for s in self.sync_ops:
            if fid is not None and self.w.ops[s][2] != fid:
                continue
            if self.done(s, k) and self.B[s] > self.E[n]:
                return True
        return False

    def expect(self, k):
        """(required {name: (fid, sha, size)}, allowed {fid: (names, min version, max version)})."""
        required, allowed = {}, {}
        for f in self.w.files:
            vers = [vi for vi, v in enumerate(f.versions) if self.started(v[2], k)]
            if not vers:
                continue  # not created yet
            low = 0
            for op, vi in f.fsyncs:
                if self.done(op, k):
                    low = max(low, vi)
            names = set()
            for name, n_set, n_unset in f.names:
                if not self.started(n_set, k):
                    continue
                if n_unset is not None and self.done(n_unset, k) and \
                        self.synced_after(n_unset, k):
                    continue  # durably left
                names.add(name)
            allowed[f.fid] = (names, low, max(vers))
            # required: quiescent, content fsync'd, name synced
            last = max(vers)
            if not self.done(f.versions[last][2], k):
                continue
            cur = [e for e in f.names if self.started(e[1], k) and
                   (e[2] is None or not self.started(e[2], k))]
            if len(cur) != 1 or not self.done(cur[0][1], k):
                continue
            if any(e[2] is not None and self.started(e[2], k) and not self.done(e[2], k)
                   for e in f.names):
                continue
            if not any(self.done(op, k) and self.B[op] > self.E[f.versions[last][2]]
                       for op, vi in f.fsyncs):
                continue
            if not self.synced_after(cur[0][1], k):
                continue
            required[cur[0][0]] = (f.fid, f.versions[last][0], f.versions[last][1])
        return required, allowed

    def check(self, k, found, mnt=None):
        """Problems with what the mount shows ({name: (sha, size)}; mnt:
        where it is mounted, for a subclass that looks closer)."""
        required, allowed = self.expect(k)
        bad = []
        for name, (fid, s, size) in sorted(required.items()):
            got = found.get(name)
            if got is None:
                bad.append("%s (file %d, fsync'd %d bytes) is missing" % (name, fid, size))
            elif got[1] < 0:
                bad.append("%s (file %d, fsync'd): %s" % (name, fid, got[0]))
            elif got[0] != s:
                bad.append("%s (file %d, fsync'd) has %d bytes that are not what was fsync'd "
                           "(%d bytes)%s" % (name, fid, got[1], size, self.which(got[0])))
        for name, (s, size) in sorted(found.items()):
            if name in required:
                continue
            cands = self.by_sha.get(s, [])
            ok = False
            for f, vi in cands:
                a = allowed.get(f.fid)
                if a and name in a[0] and a[1] <= vi <= a[2]:
                    ok = True
                    break
            if not ok:
                if size < 0:
                    why = "reading it fails (%s)" % s
                elif not cands:
                    why = "bytes no version of any file ever had"
                else:
                    why = "; ".join("file %d version %d (allowed here: %s)" % (
                        f.fid, vi, "names %s versions %d..%d" % (
                            sorted(allowed[f.fid][0]), allowed[f.fid][1], allowed[f.fid][2])
                        if f.fid in allowed else "not created yet") for f, vi in cands[:3])
                bad.append("%s: %d bytes: %s" % (name, size, why))
        return bad

    def named(self, k):
        """{name: fid} of the files whose current name the journal had synced
        at k (no name change in flight): at the mount each one is there, or
        reported lost by path."""
        out = {}
        for f in self.w.files:
            live = [e for e in f.names if self.started(e[1], k)]
            if not live or any(e[2] is not None and self.started(e[2], k) for e in live):
                continue
            if len(live) == 1 and self.done(live[0][1], k) and self.synced_after(live[0][1], k):
                out[live[0][0]] = f.fid
        return out

    def which(self, s):
        c = self.by_sha.get(s)
        if not c:
            return " (bytes no version ever had)"
        return " (those of file %d version %d)" % (c[0][0].fid, c[0][1])


def read_tree(mnt):
    """{relative name: (sha, size)} of the regular files in the mount."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(mnt):
        for n in filenames:
            p = os.path.join(dirpath, n)
            try:
                with open(p, "rb") as f:
                    b = f.read()
            except OSError as e:
                out[os.path.relpath(p, mnt)] = ("error: %s" % e.strerror, -1)
                continue
            out[os.path.relpath(p, mnt)] = (sha(b), len(b))
    return out


# --------------------------------------------------------------------------
# the test


def fsck(build, state_dir, *args):
    r = subprocess.run([os.path.join(build, "spillway-fsck"), "--quiet"] + list(args) +
                       [state_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=60)
    return r.returncode, r.stdout.decode(errors="replace")


def error_lines(text):
    """The daemon's own lines of a log (not the command line nor the
    harness' and the test's notes)."""
    return [ln for ln in text.splitlines()
            if ln.strip() and not ln.startswith("$ ") and not ln.startswith("[")]


class CrashStates(harness.SpwTestCase):
    timeout = int(os.environ.get("SPW_CRASH_TIMEOUT", "540"))
    hot_size = HOT_SIZE  # of the recorded mount and of every state's

    def setUp(self):
        super().setUp()
        self.shim = os.path.join(harness.BUILD_DIR, "tests", "spw_record.so")
        if not os.path.exists(self.shim):
            self.fail("%s is missing (built by tests/CMakeLists.txt)" % self.shim)
        self.base = os.path.realpath(self.tmpdir(on_shm=True))
        # two cold directories: segments land in both, the state in the first
        self.colds = [os.path.join(self.base, "cold%d" % i) for i in range(2)]
        for d in self.colds:
            os.mkdir(d)
        self.cold = self.colds[0]
        self.state = os.path.join(self.cold, ".spillway")
        self.opts = ["chunk_size=1M", "nvme=" + ":".join(self.colds), "min_spill_size=4M",
                     "io_engine=psync", "checkpoint_size=64K", "gc_threshold=0.5",
                     "restore=lazy"]
        self.refusals = []
        self.busy = 0

    def hot(self):
        return os.path.join(self.tmpdir(on_shm=True), "hot")

    def record(self, workload=None):
        """Run workload(w, restart) (default run_workload) on a mount under
        the recorder, then a clean unmount; (Workload, log path)."""
        workload = workload or run_workload
        log_path = os.path.join(self.base, "rec.log")
        env = dict(os.environ, LD_PRELOAD=self.shim, SPW_REC_LOG=log_path,
                   SPW_REC_ROOTS=":".join(self.colds))
        mounts = []

        def restart():
            if mounts:
                mounts[-1].kill9()
            m = CrashMount(self.hot(), self.opts, "record%d" % len(mounts), env=env,
                           hot_size=self.hot_size)
            mounts.append(m)
            m.start()
            self.addCleanup(self._stop_mount, m)
            return m.mnt

        w = self.make_workload(restart(), log_path)
        try:
            workload(w, restart)
        finally:
            w.close()
        m = mounts[-1]
        rc = self.unmount(m)  # the passthrough writer's release may lag its close
        self.assertEqual(rc, 0, "the recorded daemon's clean unmount\n%s" % m.log_text(30))
        return w, log_path

    def make_workload(self, mnt, log_path):
        return Workload(mnt, log_path)

    def test_crash_states(self):
        t0 = time.monotonic()
        w, log_path = self.record()
        t_rec = time.monotonic() - t0
        ordered = os.environ.get("SPW_CRASH_UNORDERED", "") != "1"
        log = crashlib.Log(log_path, self.colds, ordered_meta=ordered,
                           assume_durable=os.environ.get("SPW_CRASH_ASSUME_DURABLE"),
                           direct_durable=os.environ.get("SPW_CRASH_DIRECT_DURABLE") == "1")
        # nothing the daemon did went past the recorder
        final = crashlib.scan(self.colds)
        diff = crashlib.diff_states(log.contents(len(log.recs)), final)
        self.assertEqual(diff, [], "replaying the whole log does not give what the daemon "
                         "left in %s:\n%s" % (self.colds, "\n".join(diff[:20])))
        oracle = Oracle(w, log)
        # every op of the workload has both marks
        self.assertEqual(len(oracle.B), len(w.ops))
        self.assertEqual(len(oracle.E), len(w.ops))
        states = self.choose(log)
        kinds = {}
        for name, k, dropped in states:
            kinds[name] = kinds.get(name, 0) + 1
        sys.stderr.write("\n[crash] recorded %d records (%d sync points, %d workload ops, "
                         "%.1f MiB) in %.1fs; checking %d states: %s\n"
                         % (len(log.recs), len(log.syncs), len(w.ops),
                            os.path.getsize(log_path) / MiB, t_rec, len(states),
                            json.dumps(kinds, sort_keys=True)))
        failures = []
        required_checked = 0
        t1 = time.monotonic()
        for n, (name, k, dropped) in enumerate(states):
            problems, nreq = self.check_state(log, oracle, k, dropped, n)
            required_checked += nreq
            if problems:
                where = "state %d (%s) at record %d of %d, %d operations lost: %s" % (
                    n, name, k, len(log.recs), len(dropped), self.describe(log, k, dropped))
                failures.append(where + "\n  " + "\n  ".join(problems))
                keep = os.environ.get("SPW_CRASH_KEEP")
                if keep:
                    log.write_state(k, dropped)
                    for d in self.colds:
                        shutil.copytree(d, os.path.join(keep, str(n), os.path.basename(d)))
                if len(failures) >= int(os.environ.get("SPW_CRASH_MAX_FAILURES", "5")):
                    break
        sys.stderr.write("[crash] %d states in %.1fs (%d fsync'd files checked byte for "
                         "byte; %d refused to mount%s; %d unmounts retried: busy)\n"
                         % (n + 1, time.monotonic() - t1, required_checked, len(self.refusals),
                            ", e.g. state %s: %s" % self.refusals[0] if self.refusals else "",
                            self.busy))
        # the checks can fail: the same checks on a state that a disk cannot
        # leave (the journal appends the workload's last fsync made durable,
        # lost) must find something wrong
        k, dropped = self.impossible_state(log, oracle, w)
        self.assertTrue(dropped, "no journal append made durable by the last fsync")
        problems, _ = self.check_state(log, oracle, k, dropped, "control")
        self.assertTrue(problems, "a state without the journal appends of the last fsync "
                        "passed the checks: %s" % self.describe(log, k, dropped))
        if failures:
            self.fail("%d crash state(s) failed (SPW_CRASH_SEED=%s):\n%s"
                      % (len(failures), os.environ.get("SPW_CRASH_SEED", "1"),
                         "\n".join(failures)))
        # the states reached the workload's fsync'd files, not just empty starts
        self.assertGreater(required_checked, 0)

    def test_first_mount_fsync_survives_posix_disk(self):
        """A file fsync'd in the first mount, before any segment was sealed,
        survives a power loss on a disk that keeps a new directory entry only
        once its directory is fsync'd (POSIX; ext4/xfs/btrfs order their
        metadata and do not show it). Today it does not: jrnl_open
        (index/journal.c) creates STATE_DIR with mkdir() and never fsyncs the
        parent; the first fsync of the cold directory comes with the first
        sealed segment (an fsync of a file with data seals one). Until then
        the disk may lose the whole state directory with the empty file
        fsync'd in it: the remount starts an empty filesystem (the same for a
        cold directory that store_nvme_open creates). The fix: fsync the
        parent after a mkdir that created the directory."""
        def small(w, restart):
            w.create("a")  # empty: its fsync seals no segment, syncs the journal
            w.fsync("a")
        w, log_path = self.record(small)
        log = crashlib.Log(log_path, self.colds, ordered_meta=False)
        oracle = Oracle(w, log)
        fsync_op = [n for n, op in enumerate(w.ops) if op[1] == "fsync"][0]
        k = oracle.E[fsync_op] + 1  # right after fsync("a") returned
        self.assertEqual(list(oracle.expect(k)[0]), ["a"])
        lost = frozenset(r.i for r in log.unsynced(k))  # everything not synced lost
        problems, _ = self.check_state(log, oracle, k, lost, "posix")
        self.assertEqual(problems, [], "the state right after fsync(a) returned, without "
                         "what was not synced: %s\n%s"
                         % (self.describe(log, k, lost), "\n".join(problems)))

    def test_first_mount_torn_journal_header(self):
        """A power loss while the first mount writes journal.1's header (a
        prefix of it on disk, nothing else: nothing was ever acknowledged)
        must not make the next mount refuse. Today it refuses ("no valid
        checkpoint ... spillway-fsck --rebuild"): journals_empty
        (index/journal_recover.c) takes an incomplete first record
        (jrnl_decode returns 0) for a non-empty journal; a journal holding a
        prefix of its header can hold nothing else (the header is
        fdatasync'd before the first checkpoint and the first append)."""
        w, log_path = self.record(lambda w, restart: None)
        log = crashlib.Log(log_path, self.colds)
        oracle = Oracle(w, log)
        first = next(r for r in log.recs if r.type == crashlib.WRITE and
                     os.path.basename(self.path_of(log, r)).startswith("journal."))
        k = first.i + 1  # the header written, not yet synced
        for keep in (1, len(first.data) // 2, len(first.data) - 1):
            problems, _ = self.check_state(log, oracle, k, frozenset([(first.i, keep)]),
                                           "torn%d" % keep)
            self.assertEqual(problems, [])
            self.assertEqual(self.refusals, [], "journal.1's header torn at %d of %d bytes"
                             % (keep, len(first.data)))

    def choose(self, log):
        """[(variant name, crash point k, dropped)] within SPW_CRASH_STATES:
        'all' right after every sync point; 'synced-only' just before each
        (the sync not done: everything unsynced lost); then the other
        variants just before the sync points, drawn evenly."""
        budget = int(os.environ.get("SPW_CRASH_STATES", "300"))
        rng = random.Random(int(os.environ.get("SPW_CRASH_SEED", "1")))
        first = [("all", j + 1, frozenset()) for j in log.syncs]
        cap = max(4, 2 * budget // max(1, len(log.syncs)))
        pools = []
        for j in log.syncs:
            v = log.variants(j, rng, cap)
            first += [(name, j, d) for name, d in v if name == "synced-only"]
            rest = [(name, j, d) for name, d in v if name not in ("all", "synced-only")]
            rng.shuffle(rest)
            pools.append(rest)
        states = first[:budget]
        # round robin over the sync points, so a big budget does not go to
        # the points with the most unsynced operations only
        while len(states) < budget and any(pools):
            for p in pools:
                if p and len(states) < budget:
                    states.append(p.pop())
        return states

    def unmount(self, m):
        """m.unmount_clean(), retried while fusermount3 says the mount is
        busy (seen about once in a thousand states, every file closed; the
        kernel's release of the last file read is asynchronous); counted."""
        deadline = time.monotonic() + 10
        while True:
            try:
                return m.unmount_clean()
            except AssertionError as e:
                if "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                self.busy += 1
                time.sleep(0.05)

    def impossible_state(self, log, oracle, w):
        """The state right after the workload's last fsync of a file, minus the
        journal appends that fsync made durable."""
        last = max(n for n, op in enumerate(w.ops) if op[1] == "fsync" and op[2] is not None)
        k = oracle.E[last] + 1
        syncs = [r for r in log.recs[oracle.B[last]:k] if r.kind == "sync" and r.ino and
                 os.path.basename(self.path_of(log, r)).startswith("journal.")]
        dropped = frozenset(r.i for r in log.recs[:k] for s in syncs[-1:]
                            if r.kind == "data" and r.durable == s.i)
        return k, dropped

    @staticmethod
    def path_of(log, r):
        for q in reversed(log.recs[:r.i]):
            if q.type == crashlib.OPEN and q.fd == r.fd:
                return q.path
        return ""

    def describe(self, log, k, dropped):
        last = [r for r in log.recs[:k] if r.kind != "mark"][-1:] or ["nothing"]
        lost = [repr(log.recs[d]) if isinstance(d, int) else
                "%r cut to %d bytes" % (log.recs[d[0]], d[1])
                for d in sorted(dropped, key=lambda d: d if isinstance(d, int) else d[0])][:6]
        return "last record %s; lost: %s" % (last[0], lost or "none")

    def check_state(self, log, oracle, k, dropped, n):
        build = harness.BUILD_DIR
        log.write_state(k, dropped)
        rc_pre, out_pre = fsck(build, self.state)
        m = CrashMount(self.hot(), self.opts, "state%s" % n, hot_size=self.hot_size)
        problems = []
        try:
            m.start()
        except harness.MountError:
            m.stop()
            lines = [ln for ln in error_lines(m.log_all()) if ": info: " not in ln]
            if len(lines) != 1:
                return ["the mount failed without one clear line:\n" + m.log_all()], 0
            # a refusal is allowed (never wrong bytes), but not of a state
            # holding fsync'd files, and fsck must see the problem too
            nreq = len(oracle.expect(k)[0])
            self.refusals.append((n, lines[0]))
            sys.stderr.write("[crash] state %s refused: %s; %s\n"
                             % (n, lines[0], self.describe(log, k, dropped)))
            if nreq:
                problems.append("the mount refused a state with %d fsync'd files: %s"
                                % (nreq, lines[0]))
            if rc_pre == 0:
                problems.append("spillway-fsck found the state clean, the mount refused it: %s"
                                % lines[0])
            return problems, 0
        try:
            found = read_tree(m.mnt)
            # a file some of whose chunks were only in RAM is kept in
            # /lost+found/#<ino>, holes where RAM was (recover.c): each one
            # reported by its name, which counts as reported lost
            damaged = dict(re.findall(r"recovery: damaged /(\S+) \(.* as /(lost\+found/#\d+)",
                                      m.log_all()))
            problems = ["%s is in /lost+found but no 'recovery: damaged' line names it" % n
                        for n in found if n.startswith("lost+found/") and
                        n not in damaged.values()]
            found = {n: v for n, v in found.items() if not n.startswith("lost+found/")}
            problems += oracle.check(k, found, m.mnt)
            lost = set(re.findall(r"recovery: lost /(\S+) \(", m.log_all())) | set(damaged)
            for name, fid in sorted(oracle.named(k).items()):
                if name not in found and name not in lost:
                    problems.append("%s (file %d, its name synced) is gone and was not "
                                    "reported lost" % (name, fid))
            nreq = len(oracle.expect(k)[0])
            rc = self.unmount(m)
            if rc != 0:
                problems.append("clean unmount exited %d" % rc)
        finally:
            m.stop()
        if problems:
            problems.append("daemon log:\n" + m.log_text(15))
        rc_post, out_post = fsck(build, self.state, "--verify-data")
        if rc_post != 0:
            problems.append("spillway-fsck --verify-data after the mount and a clean "
                            "unmount: exit %d: %s" % (rc_post, out_post.strip()[:500]))
        # fsck must be able to judge every state that holds fsync'd data (a
        # crash in the first mount, before STATE_DIR/tiers, holds none)
        if rc_pre not in (0, 4) and nreq:
            problems.append("spillway-fsck before the mount: exit %d (the mount came up): %s"
                            % (rc_pre, out_pre.strip()[:500]))
        return problems, nreq


if __name__ == "__main__":
    harness.main()
