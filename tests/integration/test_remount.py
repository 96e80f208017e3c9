#!/usr/bin/env python3
"""
test_remount - unmount then mount at once, and whose hot_dir it is.

1. umount(2) of a FUSE mount returns while the daemon still spills and holds
   its locks: a mount of the same state_dir, hot_dir and cold directory
   started at once waits for it (one log line) instead of failing "in use by
   another spillway daemon"; 20 rounds, each unmount spilling, the data
   checked after each remount. A live mount's state_dir or hot_dir is still
   refused at once.
2. A hot_dir is spillway's only when it can prove it (tier/hot.h
   HOT_MARKER): a remount adopts its own hot_dir with the hot files it kept,
   another filesystem's is refused untouched, an older spillway's marker
   (no filesystem named) is adopted when the index knows every hot file, and
   a wiped hot_dir (a reboot) just works.
Run: python3 test_remount.py --build BUILD_DIR [-k pattern]
"""

import os
import re
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.crash import CrashMount, DurCase  # noqa: E402
from lib.data import MiB, content, write_content  # noqa: E402
from lib.tier import stats_of  # noqa: E402

WAIT_LINE = "finishing its unmount"


def slurp(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def read_kv(path):
    with open(path) as f:
        return dict(ln.rstrip("\n").split(" ", 1) for ln in f if " " in ln)


class RemountCase(DurCase):
    def mount_on(self, mnt, hot, opts, tag, **kw):
        """A CrashMount on the given mountpoint (kept across remounts, as a
        systemd mount unit's is)."""
        m = CrashMount(hot, opts, tag, **kw)
        m.mnt = mnt
        self.addCleanup(self._stop_mount, m)
        return m.start()

    def unmount(self, mnt):
        """fusermount3 -u, which returns while the daemon still spills. EBUSY
        is retried for a few seconds: on a shared machine another user's
        process (a `spillctl stats` of every mount, a tree walk) may be
        inside the mount for an instant; nothing of this test is."""
        rc, out, holders = harness.clean_unmount(mnt, busy_deadline=5)
        self.assertFalse(harness.is_mounted(mnt), "fusermount3 -u %s: rc %d, %s (held by: %s)"
                         % (mnt, rc, out, "; ".join(holders) or "no process"))

    def finished(self, m):
        """The daemon of an unmounted m exited 0 (it may still be spilling)."""
        try:
            m.proc.wait(timeout=harness.EXIT_DEADLINE)
        except subprocess.TimeoutExpired:
            self.fail("daemon %s still running %.0fs after its unmount\n%s"
                      % (m.tag, harness.EXIT_DEADLINE, m.log_text(30)))
        m.killed_by_watchdog = True  # its exit is checked here
        self.assertEqual(m.proc.returncode, 0, "daemon %s exit status\n%s"
                         % (m.tag, m.log_text(30)))


class TestRemountAtOnce(RemountCase):
    timeout = 600

    def test_remount_at_once_20_times(self):
        """umount, then mount at once: it said 'in use by another spillway
        daemon' while the first daemon still spilled (issue 39)."""
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)
        mnt = os.path.join(self.tmpdir(), "mnt")
        os.mkdir(mnt)
        size = 24 * MiB  # over hot_size: spilled while written and at unmount
        small = {}
        prev, waited = None, 0
        for r in range(20):
            m = self.mount_on(mnt, hot, opts, "r%02d" % r, hot_size="16M")
            if prev is not None:
                self.finished(prev)
                log = m.log_all()
                if WAIT_LINE in log:
                    waited += 1
                    lines = [ln for ln in log.splitlines() if WAIT_LINE in ln]
                    self.assertEqual(len(lines), 1, log)
                    self.assertRegex(lines[0], r"(state_dir|hot_dir|nvme) '")
                self.assertContent(m.path("big"), r - 1, size, "after remount %d" % r)
            for name, tag in sorted(small.items()):
                self.assertContent(m.path(name), tag, 5000 + tag, "after remount %d" % r)
            write_content(m.path("big"), r, size)
            small["s%02d" % r] = 100 + r
            write_content(m.path("s%02d" % r), 100 + r, 5000 + 100 + r)
            # what the unmount must spill: the evictor leaves the last chunks
            self.assertTrue(m.hot_files(), "nothing left in RAM for the unmount")
            self.unmount(mnt)
            prev = m
        m = self.mount_on(mnt, hot, opts, "last", hot_size="16M")
        self.finished(prev)
        self.assertContent(m.path("big"), 19, size, "after the last remount")
        for name, tag in sorted(small.items()):
            self.assertContent(m.path(name), tag, 5000 + tag, "after the last remount")
        sys.stderr.write("[remount] %d of 20 mounts waited for the daemon before\n" % waited)

    def test_live_mount_still_refused_at_once(self):
        """Waiting is only for a daemon whose mount is gone: a second daemon on
        a live mount's state_dir or hot_dir is refused at once."""
        hot, cold, state = self.make_state()
        m = self.cmount(hot, self.opts(cold, state), "live")
        for opt, what in (("state_dir=" + state, "state_dir"), ("hot_dir=" + hot, "hot_dir")):
            mnt2 = self.tmpdir()
            cold2 = os.path.join(self.tmpdir(), "cold2")
            os.mkdir(cold2)
            o = ["nvme=" + cold2, opt]
            if what == "state_dir":
                o.append("hot_dir=" + os.path.join(self.tmpdir(on_shm=True), "hot2"))
            else:
                o.append("state_dir=" + os.path.join(self.tmpdir(), "state2"))
            t0 = time.monotonic()
            rc, out, err, was = harness.run_spillway(["-f", "-o", ",".join(o), mnt2], mnt2,
                                                     timeout=30)
            took = time.monotonic() - t0
            self.assertFalse(was, err)
            self.assertEqual(rc, 1, err)
            self.assertIn(what, err)
            self.assertIn("another spillway", err)
            self.assertNotIn(WAIT_LINE, err)
            self.assertLess(took, 10, "refused only after %.1fs: %s" % (took, err))
        self.assertTrue(harness.is_mounted(m.mnt))


HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mount-helpers",
                      "umount.fuse.spillway")


class TestUmountHelper(RemountCase):
    """umount(8) runs /sbin/umount.fuse.spillway for a fuse.spillway mount
    (mount(8)- and systemd-made mounts): it returns once the daemon has
    spilled and exited. Run here directly (installing it in /sbin would
    change every other test's umount)."""

    timeout = 180

    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("umount -i of a FUSE mount needs root")

    def test_helper_returns_after_the_flush(self):
        hot, cold, state = self.make_state()
        # the evictor leaves it all: the unmount spills 160 MiB (about a
        # second here), far longer than umount(2) takes
        opts = self.opts(cold, state, min_spill_size="128M")
        mnt = os.path.join(self.tmpdir(), "mnt")
        os.mkdir(mnt)
        m = self.mount_on(mnt, hot, opts, "helper", hot_size="256M")
        write_content(m.path("big"), 5, 160 * MiB)
        self.assertGreater(stats_of(mnt)["hot"]["used"], 100 * MiB, "spilled before the unmount")
        r = subprocess.run([sys.executable, HELPER, mnt, "-v"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertFalse(harness.is_mounted(mnt))
        # the daemon is gone when umount returns: nothing for a remount to wait for
        self.assertIsNotNone(m.proc.poll(), "umount returned while the daemon still ran\n"
                             + m.log_text(20))
        self.finished(m)
        self.assertRegex(m.log_all(), r"unmount: spilled [1-9][0-9]{2} MiB")
        self.assertFalse(os.path.exists(hot), "the hot_dir it made is still there")
        m2 = self.mount_on(mnt, hot, opts, "after-helper", hot_size="256M")
        self.assertNotIn(WAIT_LINE, m2.log_all())
        self.assertContent(m2.path("big"), 5, 160 * MiB, "after umount through the helper")

    def test_helper_lazy_does_not_wait(self):
        """umount -l: the mount leaves the namespace, the daemon spills once the
        last open file in it is closed; the helper does not wait for that."""
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)
        mnt = os.path.join(self.tmpdir(), "mnt")
        os.mkdir(mnt)
        m = self.mount_on(mnt, hot, opts, "lazy", hot_size="16M")
        write_content(m.path("f"), 6, 2 * MiB)
        fd = os.open(m.path("f"), os.O_RDONLY)
        try:
            r = subprocess.run([sys.executable, HELPER, mnt, "-l"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout)
            self.assertFalse(harness.is_mounted(mnt))
            self.assertIsNone(m.proc.poll(), "the daemon exited with a file still open")
            self.assertEqual(os.pread(fd, 16, 0), content(6, 0, 16))
        finally:
            os.close(fd)
        self.finished(m)


class TestHotDirOwner(RemountCase):
    timeout = 180

    def keep_hot_round(self):
        """A mount with keep_hot whose unmount leaves a RAM-only file in
        hot_dir; returns (hot, cold, state, opts, mnt)."""
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, min_spill_size="64M") + ["keep_hot"]
        mnt = os.path.join(self.tmpdir(), "mnt")
        os.mkdir(mnt)
        m = self.mount_on(mnt, hot, opts, "first")
        write_content(m.path("ram"), 7, 3 * MiB + 11)
        self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
        self.assertTrue(m.hot_files(), "keep_hot left no hot file")
        return hot, cold, state, opts, mnt

    def uuid_of(self, state):
        with open(os.path.join(state, "tiers")) as f:
            kv = dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)
        return kv["uuid"]

    def test_remount_adopts_own_hot_dir(self):
        hot, cold, state, opts, mnt = self.keep_hot_round()
        with open(os.path.join(hot, ".spillway-hot")) as f:
            marker = f.read()
        self.assertEqual(marker, "spillway hot_dir\ncreated\nfilesystem %s\n"
                         % self.uuid_of(state))
        self.assertNotIn(".lock", os.listdir(hot))
        m = self.mount_on(mnt, hot, opts, "again")
        self.assertContent(m.path("ram"), 7, 3 * MiB + 11, "after a remount with keep_hot")
        lock = read_kv(os.path.join(hot, ".lock"))
        self.assertEqual(lock.get("id"), self.uuid_of(state))
        self.assertEqual(lock.get("pid"), str(m.pid))
        self.assertEqual(lock.get("mountpoint"), mnt)

    def test_other_filesystems_hot_dir_refused_untouched(self):
        hot, cold, state, opts, mnt = self.keep_hot_round()
        before = {n: slurp(os.path.join(hot, n)) for n in os.listdir(hot)}
        cold2 = os.path.join(self.tmpdir(), "cold2")
        os.mkdir(cold2)
        mnt2 = self.tmpdir()
        for st2 in (os.path.join(self.tmpdir(), "state2"), "none"):
            o = ["nvme=" + cold2, "state_dir=" + st2, "hot_dir=" + hot]
            rc, out, err, was = harness.run_spillway(["-f", "-o", ",".join(o), mnt2], mnt2)
            self.assertFalse(was, err)
            self.assertEqual(rc, 1, err)
            lines = [ln for ln in err.splitlines() if ln.strip()]
            self.assertEqual(len(lines), 1, err)
            self.assertIn("hot_dir", lines[0])
            self.assertIn(hot, lines[0])
            self.assertIn("another spillway filesystem", lines[0])
            after = {n: slurp(os.path.join(hot, n)) for n in os.listdir(hot)}
            self.assertEqual(after, before)
        # its own filesystem still has its data
        m = self.mount_on(mnt, hot, opts, "own")
        self.assertContent(m.path("ram"), 7, 3 * MiB + 11, "after the refusals")

    def test_older_spillways_marker(self):
        """A hot_dir of an older spillway (its marker names no filesystem, its
        .lock is empty) is adopted when the index knows every hot file in
        it, and refused untouched when it holds one it does not."""
        hot, cold, state, opts, mnt = self.keep_hot_round()
        old = "spillway hot_dir\ncreated\n"
        with open(os.path.join(hot, ".spillway-hot"), "w") as f:
            f.write(old)
        open(os.path.join(hot, ".lock"), "w").close()
        stray = os.path.join(hot, "00000000000fffff")
        with open(stray, "wb") as f:
            f.write(b"not known to the index")
        mnt2 = self.tmpdir()
        rc, out, err, was = harness.run_spillway(
            ["-f", "-o", ",".join(["hot_dir=" + hot, "hot_size=64M"] + opts), mnt2], mnt2)
        self.assertEqual(rc, 1, err)
        self.assertFalse(was, err)
        self.assertIn("index", err)
        self.assertTrue(os.path.exists(stray))
        with open(os.path.join(hot, ".spillway-hot")) as f:
            self.assertEqual(f.read(), old)
        os.unlink(stray)
        m = self.mount_on(mnt, hot, opts, "upgraded")
        self.assertContent(m.path("ram"), 7, 3 * MiB + 11, "in an older spillway's hot_dir")
        with open(os.path.join(hot, ".spillway-hot")) as f:
            self.assertEqual(f.read(), old + "filesystem %s\n" % self.uuid_of(state))

    def test_wiped_hot_dir_works(self):
        """A reboot empties the tmpfs: the hot_dir is gone or empty, the
        spilled data comes back, the RAM-only file is reported lost."""
        for wipe in ("rmtree", "empty"):
            hot, cold, state = self.make_state()
            opts = self.opts(cold, state)
            mnt = os.path.join(self.tmpdir(), "mnt")
            os.mkdir(mnt)
            m = self.mount_on(mnt, hot, opts, "before-" + wipe)
            write_content(m.path("spilled"), 3, 5 * MiB)
            self.assertEqual(m.unmount_clean(), 0, m.log_text(20))
            if wipe == "rmtree":
                shutil.rmtree(hot, ignore_errors=True)
            else:
                os.makedirs(hot, exist_ok=True)
                for n in os.listdir(hot):
                    os.unlink(os.path.join(hot, n))
            m2 = self.mount_on(mnt, hot, opts, "after-" + wipe)
            self.assertContent(m2.path("spilled"), 3, 5 * MiB, "after a wiped hot_dir")
            self.assertTrue(re.search(r"filesystem [0-9a-f]{32}\n$",
                                      slurp(os.path.join(hot, ".spillway-hot"), "r")))


if __name__ == "__main__":
    harness.main()
