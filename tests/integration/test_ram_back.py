#!/usr/bin/env python3
"""
test_ram_back - spillway gives RAM back to the node (README "What the node
gets back, and when"; issue #12).

1. Unmount: with a cold tier, a clean unmount (fusermount3 -u, or SIGTERM
   to the daemon) spills every dirty chunk, writes the last checkpoint and
   removes the hot files (and the hot_dir it created): nothing of the mount
   stays in RAM, and a reboot after it (hot_dir wiped) loses nothing.
   keep_hot keeps the hot files (a remount finds the data in RAM); without a
   cold tier the hot files stay and the log says so; state_dir=none leaves
   nothing; a cold tier that fails at unmount leaves the unspilled files in
   hot_dir, says so, and the daemon still exits.
2. Elastic hot tier: fake /proc and cgroup files (SPW_PROC_ROOT) drive the
   memory signals: the budget shrinks at once under pressure (stats,
   metrics, log), hot usage goes below the new low watermark, writers keep
   succeeding, the budget never goes below hot_min and grows back in steps
   after the pressure is gone. And one run in a real cgroup v1 memory cgroup
   with a limit (skipped where there is none).

Run: python3 test_ram_back.py --build BUILD_DIR [-k pattern]
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from test_durability import CrashMount, stats_of  # noqa: E402
from test_tiering import MiB, content, open_uncached, first_diff, write_content  # noqa: E402


def hot_names(hot):
    """Hot files in hot_dir (daemon-private files left out); [] if it is gone."""
    try:
        return sorted(n for n in os.listdir(hot) if n not in harness.DAEMON_FILES)
    except FileNotFoundError:
        return []


def file_state(path):
    s = os.getxattr(path, "user.spillway.state").decode()
    return {k: int(v) for k, v in (f.split("=") for f in s.split())}


class RamCase(SpwTestCase):
    timeout = 180

    def make_state(self):
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        cold = tempfile.mkdtemp(prefix="spw-cold-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, cold, True)
        state = os.path.join(self.tmpdir(), "state")
        return hot, cold, state

    def cmount(self, hot, opts, tag, **kw):
        m = CrashMount(hot, opts, tag, **kw)
        m.start()
        self.addCleanup(self._stop_mount, m)
        return m

    def assertContent(self, path, tag, size, msg=""):
        fd = open_uncached(path)
        try:
            self.assertEqual(os.fstat(fd).st_size, size, "%s: size %s" % (path, msg))
            for off in range(0, size, 4 * MiB):
                n = min(4 * MiB, size - off)
                got = os.pread(fd, n, off)
                exp = content(tag, off, n)
                if got != exp:
                    d = first_diff(got, exp)
                    self.fail("%s: wrong data at offset %d %s" % (path, off + d, msg))
        finally:
            os.close(fd)


# --------------------------------------------------------------------------
# 1. unmount


class TestUnmount(RamCase):
    HOT = "32M"

    def opts(self, cold, state, *extra):
        o = ["chunk_size=1M", "min_spill_size=8M", "state_dir=" + state]
        if cold:
            o.append("nvme=" + cold)
        return o + list(extra)

    def fill(self, m, total):
        """Files of several shapes adding up to about `total` bytes: written,
        some evicted and rewritten, some read back (clean), one sparse."""
        files = {}
        n, i = 0, 0
        sizes = [9 * MiB + 5, 100, 4 * MiB, 70000, 13 * MiB + 3]
        while n < total:
            size = sizes[i % len(sizes)]
            rel = "f%03d" % i
            write_content(m.path(rel), 100 + i, size)
            files[rel] = (100 + i, size)
            n += size
            i += 1
        # spilled, then partly rewritten: a dirty chunk among cold ones
        os.setxattr(m.path("f000"), "user.spillway.evict", b"1")
        fd = os.open(m.path("f000"), os.O_WRONLY)
        os.pwrite(fd, content(100, 3 * MiB, 10), 3 * MiB)
        os.close(fd)
        # read back after a spill: hot and clean
        os.setxattr(m.path("f002"), "user.spillway.evict", b"1")
        os.setxattr(m.path("f002"), "user.spillway.warm", b"1")
        # sparse: a hole and a tail
        fd = os.open(m.path("sparse"), os.O_CREAT | os.O_WRONLY, 0o644)
        os.pwrite(fd, content(7, 5 * MiB, 3000), 5 * MiB)
        os.close(fd)
        os.mkdir(m.path("d"))
        os.symlink("f001", m.path("d/link"))
        return files

    def check_all(self, m, files, msg):
        for rel, (tag, size) in sorted(files.items()):
            self.assertContent(m.path(rel), tag, size, msg)
        with open(m.path("sparse"), "rb") as f:
            data = f.read()
        self.assertEqual(len(data), 5 * MiB + 3000, msg)
        self.assertEqual(data[:5 * MiB].count(0), 5 * MiB, msg)
        self.assertEqual(data[5 * MiB:], content(7, 5 * MiB, 3000), msg)
        self.assertEqual(os.readlink(m.path("d/link")), "f001")

    def reboot_and_check(self, hot, opts, files, tag):
        # the reboot: the tmpfs is empty (whatever was left in it)
        shutil.rmtree(hot, ignore_errors=True)
        m2 = self.cmount(hot, opts, tag)
        self.check_all(m2, files, "after unmount + reboot")
        s = stats_of(m2.mnt)
        self.assertEqual(s["lost_files"], 0, json.dumps(s))
        return m2

    def test_unmount_returns_ram(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)
        m = self.cmount(hot, opts, "before", hot_size=self.HOT)
        files = self.fill(m, 3 * 32 * MiB)
        s = stats_of(m.mnt)
        self.assertGreater(s["hot"]["used"], 4 * MiB, json.dumps(s))
        self.assertTrue(hot_names(hot), "no hot file before the unmount")
        t0 = time.monotonic()
        self.assertEqual(m.unmount_clean(), 0, m.log_text(30))
        took = time.monotonic() - t0
        m.stop()
        self.assertEqual(hot_names(hot), [], "hot files left after a clean unmount\n%s"
                         % m.log_text(30))
        self.assertFalse(os.path.exists(hot), "the hot_dir the daemon made is still there")
        log = m.log_all()
        self.assertIn("unmount: spilled", log)
        self.assertIn("nothing left in RAM", log)
        sys.stderr.write("[unmount flush of %d MiB dirty: %.2f s] " % (
            s["hot"]["used"] >> 20, took))
        m2 = self.reboot_and_check(hot, opts, files, "after")
        # and a second round: the files written after a remount too
        write_content(m2.path("late"), 9, 3 * MiB)
        files["late"] = (9, 3 * MiB)
        self.assertEqual(m2.unmount_clean(), 0, m2.log_text(30))
        m2.stop()
        self.assertEqual(hot_names(hot), [])
        self.reboot_and_check(hot, opts, files, "again")

    def test_sigterm_is_unmount(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state)
        m = self.cmount(hot, opts, "before", hot_size=self.HOT)
        files = self.fill(m, 40 * MiB)
        # one file still open (by this process) when the daemon is told to go
        fd = os.open(m.path("f001"), os.O_RDONLY)
        try:
            os.kill(m.pid, signal.SIGTERM)
            m.proc.wait(timeout=60)
        finally:
            try:
                os.close(fd)
            except OSError:
                pass
        m.killed_by_watchdog = True  # the exit status is checked here
        self.assertEqual(m.proc.returncode, 0, m.log_text(30))
        harness.wait_until(lambda: not harness.is_mounted(m.mnt), 10, "mount gone")
        m.stop()
        self.assertEqual(hot_names(hot), [], m.log_text(30))
        self.assertIn("nothing left in RAM", m.log_all())
        self.reboot_and_check(hot, opts, files, "after")

    def test_keep_hot(self):
        hot, cold, state = self.make_state()
        opts = self.opts(cold, state, "keep_hot")
        m = self.cmount(hot, opts, "before", hot_size="64M")
        files = {}
        for i in range(4):
            write_content(m.path("k%d" % i), 20 + i, 5 * MiB)
            files["k%d" % i] = (20 + i, 5 * MiB)
        self.assertEqual(m.unmount_clean(), 0, m.log_text(30))
        m.stop()
        self.assertEqual(len(hot_names(hot)), 4, "keep_hot: hot files gone")
        self.assertIn("keep_hot", m.log_all())
        m2 = self.cmount(hot, opts, "after", hot_size="64M")
        for rel, (tag, size) in files.items():
            # in RAM at once: no chunk cold, nothing to restore
            st = file_state(m2.path(rel))
            self.assertEqual(st["cold"], 0, "%s: %s" % (rel, st))
            self.assertEqual(st["hot"], 5, "%s: %s" % (rel, st))
            self.assertContent(m2.path(rel), tag, size, "after a keep_hot remount")
        self.assertEqual(stats_of(m2.mnt)["restored"]["bytes"], 0)

    def test_no_cold_tier_keeps_hot_files(self):
        hot, _, state = self.make_state()
        opts = self.opts(None, state)
        m = self.cmount(hot, opts, "before", hot_size="64M")
        write_content(m.path("a"), 1, 3 * MiB)
        self.assertEqual(m.unmount_clean(), 0, m.log_text(30))
        m.stop()
        self.assertEqual(len(hot_names(hot)), 1)
        self.assertIn("no cold tier: the hot files stay", m.log_all())
        m2 = self.cmount(hot, opts, "after", hot_size="64M")
        self.assertContent(m2.path("a"), 1, 3 * MiB)

    def test_volatile_leaves_nothing(self):
        hot, cold, _ = self.make_state()
        opts = ["chunk_size=1M", "nvme=" + cold, "state_dir=none"]
        m = self.cmount(hot, opts, "before", hot_size=self.HOT)
        write_content(m.path("a"), 1, 40 * MiB)
        self.assertEqual(m.unmount_clean(), 0, m.log_text(30))
        m.stop()
        self.assertFalse(os.path.exists(hot), "state_dir=none left %s: %s"
                         % (hot, hot_names(hot)))
        self.assertEqual([n for n in os.listdir(cold) if n.startswith("seg-")], [])

    def test_failing_cold_tier_keeps_hot_files(self):
        hot, cold, state = self.make_state()
        small = os.path.join(self.tmpdir(), "small")
        os.mkdir(small)
        # a 4 MiB cold directory: the unmount's spill cannot fit
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", small], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", small])
        opts = self.opts(small, state)
        m = self.cmount(hot, opts, "before", hot_size="64M")
        files = {}
        for i in range(3):
            write_content(m.path("k%d" % i), 30 + i, 6 * MiB)
            files["k%d" % i] = (30 + i, 6 * MiB)
        t0 = time.monotonic()
        self.assertEqual(m.unmount_clean(), 0, m.log_text(30))
        self.assertLess(time.monotonic() - t0, 30)
        m.stop()
        log = m.log_all()
        self.assertIn("cannot spill every dirty chunk", log)
        self.assertTrue(hot_names(hot), "the unspilled files' hot files are gone\n%s" % log)
        # kill -9 semantics: a remount (no reboot) has every byte
        m2 = self.cmount(hot, opts, "after", hot_size="64M")
        for rel, (tag, size) in files.items():
            self.assertContent(m2.path(rel), tag, size, "after a failed unmount flush")


if __name__ == "__main__":
    harness.main()
