#!/usr/bin/env python3
"""
test_faults_fiu - spillway under injected I/O faults (libfiu: fiu-run -x
preloads wrappers of the POSIX calls; fiu-ctrl switches failure points at run
time). The daemon runs with io_engine=psync so its cold-tier I/O goes through
pread/pwrite/fdatasync, which libfiu can fail.

1. Random EIO on pwrite, pread and fdatasync (cold tier, and the hot tier's
   pwrites too) while a writer pushes 3x hot_size through the mount and reads
   it all back: every read returns the right bytes or an error (EIO/ENOSPC),
   never wrong bytes; every acknowledged write reads back identical; with the
   faults switched off (fiu-ctrl) everything acknowledged is readable.
   (state_dir=none: a journal would rightly turn read-only at the first
   injected fdatasync failure; the journal has its own test below.)
2. Random EIO on pread (restores; the hot tier's preads too) with the
   journal on: right bytes or EIO; then a remount without fiu reads
   everything back.
3. An injected fdatasync failure on the journal turns it read-only: later
   creates and writes fail with EIO, reads keep working, the log says why;
   a remount (without faults) has everything synced before the failure.

Needs fiu-utils (tests/deps.sh installs it).

Run: python3 test_faults_fiu.py --build BUILD_DIR [-k pattern]
"""

import errno
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.crash import DurCase  # noqa: E402
from lib.data import MiB, PAGE, content, first_diff, open_uncached, write_content  # noqa: E402
from lib.tier import cold_read_bytes, segments_in, stats_of  # noqa: E402

FIU_RUN = shutil.which("fiu-run")
FIU_CTRL = shutil.which("fiu-ctrl")
EIO = 5
ALLOWED = (errno.EIO, errno.ENOSPC)


def ename(e):
    return errno.errorcode.get(e, str(e))


def read_range(fd, off, n):
    """Read [off, off+n) in as many preads as it takes: a read() that meets an
    error after some pages returns those pages first (a short count). Returns
    (bytes read, errno of the error that stopped it or None); fewer bytes and
    no error means end of file."""
    parts = []
    got = 0
    while got < n:
        try:
            b = os.pread(fd, n - got, off + got)
        except OSError as e:
            return b"".join(parts), e.errno
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts), None


class FiuCase(DurCase):
    timeout = 240

    def setUp(self):
        super().setUp()
        if not (FIU_RUN and FIU_CTRL):
            self.fail("fiu-run/fiu-ctrl not found: install the Debian package fiu-utils "
                      "(tests/deps.sh does)")

    def fiu_mount(self, hot, opts, tag, enable=(), **kw):
        """A daemon started by fiu-run -x (which execs it: same pid), with
        failure points `enable` on from the start and remote control on."""
        ctl = os.path.join(self.tmpdir(), "fiu")
        prefix = [FIU_RUN, "-x", "-f", ctl]
        for c in enable:
            prefix += ["-c", c]
        m = self.cmount(hot, opts, tag, prefix=prefix, **kw)
        m.fiu_ctl = ctl
        # the mount is up, so the preload's constructor (which makes the
        # control fifos) ran long ago; check it did, with the right pid
        fifo = "%s-%d.in" % (ctl, m.pid)
        harness.wait_until(lambda: os.path.exists(fifo), 10, "fiu control fifo %s" % fifo)
        # fiu-run execs the daemon: the pid the harness kills is spillway's
        self.assertEqual(os.path.realpath("/proc/%d/exe" % m.pid),
                         os.path.realpath(harness.SPILLWAY))
        return m

    def fiu(self, m, *cmds):
        argv = [FIU_CTRL, "-f", m.fiu_ctl]
        for c in cmds:
            argv += ["-c", c]
        argv.append(str(m.pid))
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        out = r.stdout.decode(errors="replace")
        if r.returncode != 0 or "error" in out.lower() or "skipping" in out.lower():
            self.fail("%s: status %d: %s" % (" ".join(argv), r.returncode, out))

    def check_chunk(self, got, tag, off, acked, what):
        """got = bytes read at offset off of a file written with stream tag,
        whose first `acked` bytes there were acknowledged: those are exactly
        the stream's; past them (a write that failed) each page is the
        stream's or zeros."""
        exp = content(tag, off, len(got))
        if got == exp:
            return
        if len(got) < acked or got[:acked] != exp[:acked]:
            d = first_diff(got[:acked], exp[:acked])
            self.fail("%s: wrong acknowledged bytes at %d (read %d bytes, %d acknowledged "
                      "there; zeros there: %s)" % (what, off + d, len(got), acked,
                                                   got[d:d + 16] == bytes(len(got[d:d + 16]))))
        zero = bytes(PAGE)
        for p in range(acked, len(got), PAGE):
            g, e = got[p:p + PAGE], exp[p:p + PAGE]
            if g != e and g != zero[:len(g)]:
                self.fail("%s: bytes at %d (past the %d acknowledged) are neither the failed "
                          "write's nor zeros" % (what, off + p, acked))


# --------------------------------------------------------------------------
# 1. random faults on the cold and hot tier I/O


class TestRandomFaults(FiuCase):
    # A failed segment write takes the (only) cold directory out for 30 s
    # (NVME_FAIL_BACKOFF_S), during which writers wait: write faults are
    # rarer than read faults to keep the run short.
    HOT = 32 * MiB
    PROB = {"posix/io/rw/pwrite": 0.02, "posix/io/sync/fdatasync": 0.02,
            "posix/io/rw/pread": 0.05}
    WRITE_POINTS = ("posix/io/rw/pwrite", "posix/io/sync/fdatasync")
    WRITE_FAULTS = 2
    MAX_LOG_LINES = 1000

    def test_random_eio_no_wrong_bytes(self):
        hot, cold, _ = self.make_state()
        points = sorted(self.PROB)
        enable = ["enable_random name=%s,probability=%s,failinfo=%d" % (p, self.PROB[p], EIO)
                  for p in points]
        opts = self.opts(cold, "none", io_engine="psync", write_wait="45s")
        # the faults start once the mount is up: a mount whose hot_dir
        # marker cannot be made durable is refused, as it should be, and
        # 2 % of fdatasyncs failing made that a CI flake, not a finding
        m = self.fiu_mount(hot, opts, "faults", (), hot_size="32M")
        self.fiu(m, *enable)
        rng = random.Random(7)

        def seg_write_failures():
            return [ln for ln in m.log_all().splitlines()
                    if "nvme %s: writing segment" % cold in ln or "fdatasync of segment" in ln]

        write_faults_on = True
        files = []  # (path, tag, size, [acknowledged bytes of each 1 MiB write])
        total = 0
        write_errors = {}
        t0 = time.monotonic()
        while total < 3 * self.HOT:
            size = rng.choice([1, 2, 3, 5, 8, 13]) * MiB
            tag = 500 + len(files)
            path = m.path("f%03d" % len(files))
            fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
            acked = []
            try:
                for c in range(size // MiB):
                    try:
                        # a short count is fine (a later FUSE request of the
                        # write failed); the rest of the chunk is unacknowledged
                        acked.append(os.pwrite(fd, content(tag, c * MiB, MiB), c * MiB))
                    except OSError as e:
                        if e.errno not in ALLOWED:
                            self.fail("%s: write of chunk %d failed with %s (allowed: EIO, "
                                      "ENOSPC)\n%s" % (path, c, ename(e.errno), m.log_text(20)))
                        acked.append(0)
                        write_errors[ename(e.errno)] = write_errors.get(ename(e.errno), 0) + 1
            finally:
                os.close(fd)
            files.append((path, tag, size, acked))
            total += size
            # each failed segment write costs a 30 s backoff: two are enough
            if write_faults_on and len(seg_write_failures()) >= self.WRITE_FAULTS:
                self.fiu(m, *("disable name=%s" % p for p in self.WRITE_POINTS))
                write_faults_on = False
        t_write = time.monotonic() - t0
        seg_failures = len(seg_write_failures())
        acked_bytes = sum(sum(f[3]) for f in files)
        s = stats_of(m.mnt)
        self.assertGreaterEqual(acked_bytes, 2 * self.HOT,
                                "only %d MiB of %d acknowledged: %s\nstats %s\n%s"
                                % (acked_bytes >> 20, total >> 20, write_errors, json.dumps(s),
                                   m.log_text(20)))
        self.assertGreater(s["spilled"]["bytes"], acked_bytes - self.HOT - 8 * MiB,
                           json.dumps(s))

        read_errors = {}

        def read_all(what, faults_on):
            for path, tag, size, acked in files:
                fd = open_uncached(path)
                try:
                    n = os.fstat(fd).st_size
                    need = max([c * MiB + a for c, a in enumerate(acked) if a] + [0])
                    if not need <= n <= size:
                        self.fail("%s: size %d, acknowledged up to %d, written up to %d"
                                  % (path, n, need, size))
                    for c in range(size // MiB):
                        want = min(MiB, max(0, n - c * MiB))
                        got, err = read_range(fd, c * MiB, want)
                        if err is not None and not (faults_on and err in ALLOWED):
                            self.fail("%s chunk %d (%d bytes acknowledged) %s: read failed "
                                      "at +%d with %s\nstats %s\n%s"
                                      % (path, c, acked[c], what, len(got), ename(err),
                                         json.dumps(stats_of(m.mnt)), m.log_text(20)))
                        if err is not None:
                            read_errors[ename(err)] = read_errors.get(ename(err), 0) + 1
                        elif len(got) != want:
                            self.fail("%s chunk %d %s: end of file after %d bytes, size %d"
                                      % (path, c, what, len(got), n))
                        self.check_chunk(got, tag, c * MiB, min(acked[c], len(got)),
                                         "%s chunk %d %s" % (path, c, what))
                finally:
                    os.close(fd)

        read_all("with faults on", True)
        s_on = stats_of(m.mnt)
        self.fiu(m, *("disable name=%s" % p for p in points
                      if write_faults_on or p not in self.WRITE_POINTS))
        read_all("with faults off", False)
        read_all("with faults off, again", False)
        s = stats_of(m.mnt)
        sys.stderr.write("\n  [fiu random] %d MiB written in %.1fs, %d MiB acknowledged; "
                         "%d segment writes failed; write errors %s, read errors %s; stats "
                         "errors %s, spilled %d MiB, restored %d MiB\n"
                         % (total >> 20, t_write, acked_bytes >> 20, seg_failures,
                            write_errors, read_errors, s["errors"], s["spilled"]["bytes"] >> 20,
                            s["restored"]["bytes"] >> 20))
        # the faults did reach the cold tier (no vacuous pass)
        log = m.log_all().splitlines()
        cold_errors = [ln for ln in log if "nvme " + cold in ln or "restore:" in ln]
        self.assertTrue(cold_errors, "no cold-tier I/O error logged with faults on: %s"
                        % json.dumps(s_on))
        self.assertGreater(s_on["errors"]["io"], 0, json.dumps(s_on))
        self.assertGreater(cold_read_bytes(s), 0, json.dumps(s))
        # checked after the recovery below, so that none hides another
        problems = []
        # only EIO was injected: no segment was damaged
        if s["errors"]["crc"]:
            problems.append("crc errors counted although only I/O errors were injected: %s"
                            % json.dumps(s["errors"]))
        # a failing cold tier is reported, not flooded into the log
        if len(log) > self.MAX_LOG_LINES:
            common = {}
            for ln in log:
                k = re.sub(r"[0-9a-f]{16}|\d+", "N", ln)
                common[k] = common.get(k, 0) + 1
            top = sorted(common.items(), key=lambda kv: -kv[1])[:3]
            problems.append("%d log lines for %d injected-fault errors; most frequent:\n%s"
                            % (len(log), len(cold_errors),
                               "\n".join("%7d x %s" % (n, k) for k, n in top)))
        # and the cold tier works normally again, once its failure backoff ends
        harness.wait_until(lambda: not any(c["failed"] for c in stats_of(m.mnt)["cold"]), 40,
                           "the cold dir back in service (30 s backoff)", interval=0.2)
        write_content(m.path("after"), 999, 2 * self.HOT)
        self.assertContent(m.path("after"), 999, 2 * self.HOT, "(after the faults)")
        if problems:
            self.fail("\n".join(problems))


# --------------------------------------------------------------------------
# 2. faults on cold reads with the journal on; remount without fiu


class TestReadFaultsRemount(FiuCase):
    HOT = 64 * MiB

    def test_pread_faults_then_remount(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, io_engine="psync", restore="lazy")
        m = self.fiu_mount(hot, opts, "faults")
        files = []
        for i in range(12):
            size = (16 + 4 * (i % 3)) * MiB + 4097 * (i % 2)
            p = m.path("g%02d" % i)
            write_content(p, 600 + i, size)
            files.append((p, "g%02d" % i, 600 + i, size))
        self.assertGreater(stats_of(m.mnt)["spilled"]["bytes"], 2 * self.HOT)
        self.assertTrue(segments_in(cold))
        self.fiu(m, "enable_random name=posix/io/rw/pread,probability=0.2,failinfo=%d" % EIO)
        errors = 0
        good = 0
        for p, _, tag, size in files:
            fd = open_uncached(p)
            try:
                for off in range(0, size, MiB):
                    n = min(MiB, size - off)
                    got, err = read_range(fd, off, n)
                    self.check_chunk(got, tag, off, len(got), "%s with pread faults" % p)
                    if err is not None:
                        if err != errno.EIO:
                            self.fail("%s at %d: %s, expected the bytes or EIO"
                                      % (p, off + len(got), ename(err)))
                        errors += 1
                    elif len(got) != n:
                        self.fail("%s at %d: end of file after %d of %d bytes"
                                  % (p, off, len(got), n))
                    else:
                        good += 1
            finally:
                os.close(fd)
        sys.stderr.write("\n  [fiu pread] %d chunk reads failed (EIO), %d right\n"
                         % (errors, good))
        self.assertGreater(errors, 0, "no read failed with 20%% pread faults on cold chunks")
        self.assertGreater(good, 0)
        self.fiu(m, "disable name=posix/io/rw/pread")
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        m.stop()
        m2 = self.cmount(hot, opts, "remount")
        for _, rel, tag, size in files:
            self.assertContent(m2.path(rel), tag, size, "(after a remount without faults)")


# --------------------------------------------------------------------------
# 3. the journal's fdatasync fails


class TestJournalSyncFailure(FiuCase):
    timeout = 120

    def test_fdatasync_failure_makes_journal_read_only(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, io_engine="psync", journal_sync_ms="100")
        m = self.fiu_mount(hot, opts, "faults")
        os.mkdir(m.path("d"))
        write_content(m.path("d", "a"), 1, 3 * MiB)
        write_content(m.path("b"), 2, 100)
        os.setxattr(m.path("b"), "user.x", b"y")
        os.symlink("b", m.path("l"))
        root = os.open(m.mnt, os.O_RDONLY)
        try:
            os.fsync(root)  # all of the above is durable
            self.fiu(m, "enable name=posix/io/sync/fdatasync,failinfo=%d" % EIO)
            try:  # a change to sync; it may already fail (group commit)
                write_content(m.path("c"), 3, 10)
            except OSError as e:
                self.assertEqual(e.errno, errno.EIO, e)
            with self.assertRaises(OSError, msg="fsync of the root dir succeeded with "
                                   "fdatasync failing") as cm:
                os.fsync(root)
            self.assertEqual(cm.exception.errno, errno.EIO, cm.exception)
        finally:
            os.close(root)

        def eio(what, fn, *a):
            try:
                fn(*a)
            except OSError as e:
                if e.errno != errno.EIO:
                    self.fail("%s after the journal failed: %s, expected EIO" % (what,
                                                                                  ename(e.errno)))
                return
            self.fail("%s succeeded after the journal failed (it must be read-only)" % what)

        def write_existing():
            fd = os.open(m.path("d", "a"), os.O_WRONLY)
            try:
                os.pwrite(fd, b"z" * 4096, 0)
            finally:
                os.close(fd)

        eio("create", os.open, m.path("new"), os.O_CREAT | os.O_WRONLY, 0o644)
        eio("mkdir", os.mkdir, m.path("newdir"))
        eio("write to an existing file", write_existing)
        eio("truncate", os.truncate, m.path("d", "a"), 5)
        eio("unlink", os.unlink, m.path("b"))
        eio("rename", os.rename, m.path("b"), m.path("b2"))
        eio("setxattr", os.setxattr, m.path("b"), "user.x", b"z")
        eio("chmod", os.chmod, m.path("b"), 0o600)
        eio("symlink", os.symlink, "x", m.path("l2"))
        eio("link", os.link, m.path("b"), m.path("b3"))
        # reads keep working
        self.assertContent(m.path("d", "a"), 1, 3 * MiB, "(journal read-only)")
        self.assertContent(m.path("b"), 2, 100, "(journal read-only)")
        self.assertEqual(os.getxattr(m.path("b"), "user.x"), b"y")
        self.assertEqual(os.readlink(m.path("l")), "b")
        self.assertIn("d", os.listdir(m.mnt))
        self.assertEqual(os.stat(m.path("d", "a")).st_size, 3 * MiB)
        # the log says why
        why = [ln for ln in m.log_all().splitlines()[1:] if "journal" in ln and
               "fdatasync" in ln and ("read-only" in ln or "read only" in ln)]
        self.assertTrue(why, "no log line about the journal failing:\n%s" % m.log_text(20))
        # read-only for good, even with the fault gone
        self.fiu(m, "disable name=posix/io/sync/fdatasync")
        eio("create after the fault is gone", os.open, m.path("new2"),
            os.O_CREAT | os.O_WRONLY, 0o644)
        self.assertContent(m.path("d", "a"), 1, 3 * MiB)
        rc = m.unmount_clean()
        sys.stderr.write("\n  [fiu journal] log: %s\n  exit status after unmount: %s\n"
                         % (why[0].strip(), rc))
        m.stop()
        # a remount without faults: everything synced before the failure
        m2 = self.cmount(hot, opts, "remount")
        self.assertContent(m2.path("d", "a"), 1, 3 * MiB, "(after remount)")
        self.assertContent(m2.path("b"), 2, 100, "(after remount)")
        self.assertEqual(os.getxattr(m2.path("b"), "user.x"), b"y")
        self.assertEqual(os.readlink(m2.path("l")), "b")
        self.assertFalse(os.path.exists(m2.path("new")))
        write_content(m2.path("new"), 4, 1000)  # writable again
        self.assertContent(m2.path("new"), 4, 1000)


if __name__ == "__main__":
    harness.main()
