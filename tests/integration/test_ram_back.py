#!/usr/bin/env python3
"""
test_ram_back - spillway gives RAM back to the node (docs/ram.md, "What
the node gets back, and when"; issue #12).

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
   after the pressure is gone. And runs in a real cgroup v1 memory cgroup
   with a limit (skipped where there is none): the budget follows it, and the
   default mem_reserve is 5 % of its limit (a given one above half is refused).
3. The daemon's own memory: after 4x the hot tier written and read back by
   4 writers and 4 readers, its RSS comes back under the bound of
   docs/costs-and-waits.md (48 MiB plus the heap per file).

Run: python3 test_ram_back.py --build BUILD_DIR [-k pattern]
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.crash import CrashCase  # noqa: E402
from lib.data import MiB, content, content_sha, run_threads, sha_file, write_content  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402


def hot_names(hot):
    """Hot files in hot_dir (daemon-private files left out); [] if it is gone."""
    try:
        return sorted(n for n in os.listdir(hot) if n not in harness.DAEMON_FILES)
    except FileNotFoundError:
        return []


class RamCase(CrashCase):
    timeout = 180


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


# --------------------------------------------------------------------------
# 2. elastic hot tier


class FakeProc:
    """A fake /proc and cgroup tree for SPW_PROC_ROOT: MemAvailable, PSI and
    (optionally) a cgroup v2 memory controller the test sets at will."""

    def __init__(self, root, cgroup=False):
        self.root = root
        os.makedirs(os.path.join(root, "proc/pressure"))
        os.makedirs(os.path.join(root, "proc/self"))
        self.cg = os.path.join(root, "sys/fs/cgroup/spw")
        with open(os.path.join(root, "proc/self/cgroup"), "w") as f:
            f.write("0::/spw\n" if cgroup else "0::/\n")
        if cgroup:
            os.makedirs(self.cg)
            self.cgroup(limit=None, usage=0)
        self.set(avail=8 << 30, psi=0.0)

    def _write(self, rel, text):
        p = os.path.join(self.root, rel)
        with open(p + ".tmp", "w") as f:
            f.write(text)
        os.rename(p + ".tmp", p)  # the daemon never reads half a file

    def set(self, avail=None, psi=None):
        if avail is not None:
            self._write("proc/meminfo", "MemTotal:       16777216 kB\nMemFree:  1000 kB\n"
                        "MemAvailable:   %d kB\nBuffers: 0 kB\n" % (avail >> 10))
        if psi is not None:
            self._write("proc/pressure/memory",
                        "some avg10=%.2f avg60=0.00 avg300=0.00 total=1\n"
                        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n" % psi)

    def cgroup(self, limit, usage, inactive=0):
        rel = "sys/fs/cgroup/spw/"
        self._write(rel + "memory.max", "max\n" if limit is None else "%d\n" % limit)
        self._write(rel + "memory.high", "max\n")
        self._write(rel + "memory.current", "%d\n" % usage)
        self._write(rel + "memory.stat", "anon 0\nfile %d\ninactive_file %d\n"
                    % (inactive, inactive))
        self._write(rel + "memory.pressure",
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                    "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


class TestElastic(RamCase):
    HOT = 64 * MiB
    MIN = 16 * MiB

    def emount(self, fake, extra=(), hold_ms=1500, step_ms=300, tag="elastic"):
        hot, cold, state = self.make_state()
        self.metrics = os.path.join(self.tmpdir(), "spw.prom")
        env = dict(os.environ, SPW_PROC_ROOT=fake.root, SPW_PRESSURE_HOLD_MS=str(hold_ms),
                   SPW_PRESSURE_STEP_MS=str(step_ms), SPW_PRESSURE_PSI_STEP_MS=str(step_ms))
        opts = ["chunk_size=1M", "min_spill_size=4M", "nvme=" + cold, "state_dir=" + state,
                "hot_min=16M", "mem_reserve=256M", "write_wait=20s",
                "metrics=" + self.metrics, "metrics_interval=100ms"] + list(extra)
        return self.cmount(hot, opts, tag, hot_size="64M", env=env)

    def stats(self, m):
        return stats_of(m.mnt)

    def wait_budget(self, m, pred, what, timeout=30):
        """Poll the stats until pred(stats); every sample must respect hot_min."""
        seen = []

        def ok():
            s = self.stats(m)
            b = s["pressure"]["budget"]
            seen.append(b)
            self.assertGreaterEqual(b, self.MIN, "budget below hot_min: %s" % json.dumps(s))
            self.assertLessEqual(b, self.HOT)
            self.assertEqual(s["hot"]["limit"], b)
            return pred(s)
        harness.wait_until(ok, timeout, what, interval=0.05)
        return seen

    def test_shrink_spill_grow(self):
        fake = FakeProc(self.tmpdir())
        m = self.emount(fake)
        s = self.stats(m)
        self.assertEqual(s["pressure"]["enabled"], 1)
        self.assertEqual(s["pressure"]["budget"], self.HOT, json.dumps(s["pressure"]))
        self.assertEqual(s["hot"]["hot_size"], self.HOT)
        self.assertEqual(s["hot"]["hot_min"], self.MIN)
        files = {}
        for i in range(4):
            write_content(m.path("a%d" % i), 40 + i, 10 * MiB)
            files["a%d" % i] = (40 + i, 10 * MiB)
        used0 = self.stats(m)["hot"]["used"]
        self.assertGreater(used0, 30 * MiB)

        # pressure: less available than mem_reserve -> down to hot_min at once
        t0 = time.monotonic()
        fake.set(avail=200 * MiB)
        self.wait_budget(m, lambda s: s["pressure"]["budget"] == self.MIN, "budget shrank")
        t_shrink = time.monotonic() - t0
        low = int(0.60 * self.MIN)
        harness.wait_until(lambda: self.stats(m)["hot"]["used"] <= low, 20,
                           "hot usage below the new low watermark")
        t_spill = time.monotonic() - t0
        s = self.stats(m)
        self.assertGreaterEqual(s["pressure"]["shrinks"], 1)
        self.assertEqual(s["pressure"]["under_pressure"], 1)
        sys.stderr.write("[shrink %.2f s, spilled %d MiB down to %d MiB in %.2f s] "
                         % (t_shrink, used0 >> 20, s["hot"]["used"] >> 20, t_spill))
        # writers still succeed under the small budget (they wait for the evictor)
        for i in range(3):
            write_content(m.path("b%d" % i), 60 + i, 12 * MiB)
            files["b%d" % i] = (60 + i, 12 * MiB)
        s = self.stats(m)
        self.assertEqual(s["enospc"], 0, json.dumps(s))
        self.assertLessEqual(s["hot"]["used"], self.MIN + 2 * MiB, json.dumps(s["hot"]))
        # nothing available at all: still hot_min, never below
        fake.set(avail=0)
        self.wait_budget(m, lambda s: s["pressure"]["available"] == 0, "available 0 seen")
        self.assertEqual(self.stats(m)["pressure"]["budget"], self.MIN)

        # pressure gone: held for hold_ms, then back in steps of <= 10% of hot_size
        t1 = time.monotonic()
        fake.set(avail=8 << 30)
        seen = self.wait_budget(m, lambda s: s["pressure"]["budget"] > self.MIN, "growth begins")
        self.assertGreaterEqual(time.monotonic() - t1, 1.4, "grew before the hold time")
        seen += self.wait_budget(m, lambda s: s["pressure"]["budget"] == self.HOT,
                                 "budget back to hot_size", timeout=40)
        steps = sorted(set(seen))
        for a, b in zip(steps, steps[1:]):
            self.assertLessEqual(b - a, self.HOT // 10 + 1, "a step too large: %s" % steps)
        self.assertEqual(seen, sorted(seen), "the budget went down while growing: %s" % seen)
        s = self.stats(m)
        self.assertGreaterEqual(s["pressure"]["grows"], 5, json.dumps(s["pressure"]))
        log = m.log_all()
        self.assertIn("memory pressure: hot budget 64M -> 16M", log)
        self.assertIn("memory pressure gone: hot budget 16M ->", log)
        # the metrics file tells the same
        with open(self.metrics) as f:
            prom = f.read()
        self.assertRegex(prom, r"spillway_hot_budget_shrinks_total [1-9]")
        self.assertRegex(prom, r"spillway_hot_size_bytes %d" % self.HOT)
        self.assertIn("spillway_hot_min_bytes %d" % self.MIN, prom)
        # spillctl shows it
        out = subprocess.run([sys.executable, os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "../../mount-helpers/spillctl"),
            "stats", m.mnt], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
        self.assertEqual(out.returncode, 0, out.stdout)
        self.assertRegex(out.stdout.decode(), r"pressure +budget .* of hot_size")
        for rel, (tag, size) in files.items():
            self.assertContent(m.path(rel), tag, size, "after the pressure")

    def test_psi_steps_down(self):
        fake = FakeProc(self.tmpdir())
        m = self.emount(fake, hold_ms=60000)
        fake.set(psi=45.0)  # stalls, though MemAvailable is plenty
        # 8 steps of step_ms (300 ms here; 1 s by default): a few seconds,
        # with room for a loaded machine
        seen = self.wait_budget(m, lambda s: s["pressure"]["budget"] == self.MIN,
                                "PSI steps the budget down to hot_min", timeout=30)
        steps = sorted(set(seen), reverse=True)
        self.assertGreaterEqual(len(steps), 3, "not stepwise: %s" % steps)
        s = self.stats(m)
        self.assertGreater(s["pressure"]["psi_some_avg10"], 40)
        self.assertGreaterEqual(s["pressure"]["shrinks"], 3)
        fake.set(psi=0.0)
        # the hold time (60 s here) keeps it small
        harness.wait_until(lambda: self.stats(m)["pressure"]["under_pressure"] == 0, 5,
                           "pressure seen as gone")
        self.assertEqual(self.stats(m)["pressure"]["budget"], self.MIN)

    def test_cgroup_limit(self):
        fake = FakeProc(self.tmpdir(), cgroup=True)
        fake.cgroup(limit=1 << 30, usage=(1 << 30) - 100 * MiB, inactive=40 * MiB)
        m = self.emount(fake)
        # available in the cgroup: 1G - (usage - inactive) = 140M < 256M reserve
        self.wait_budget(m, lambda s: s["pressure"]["budget"] == self.MIN, "cgroup shrink")
        p = self.stats(m)["pressure"]
        self.assertEqual(p["cgroup"], 2)
        self.assertEqual(p["cgroup_limit"], 1 << 30)
        self.assertEqual(p["available"], 140 * MiB)
        fake.cgroup(limit=None, usage=0)
        self.wait_budget(m, lambda s: s["pressure"]["budget"] == self.HOT, "cgroup unlimited",
                         timeout=40)

    def test_mem_pressure_off(self):
        fake = FakeProc(self.tmpdir())
        fake.set(avail=0, psi=90.0)
        m = self.emount(fake, extra=["mem_pressure=off"])
        write_content(m.path("x"), 1, 20 * MiB)
        s = self.stats(m)
        self.assertEqual(s["pressure"]["enabled"], 0)
        self.assertEqual(s["hot"]["limit"], self.HOT)
        self.assertEqual(s["pressure"]["shrinks"], 0)


# --------------------------------------------------------------------------
# 3. the daemon's own memory

RSS_BASE = 48 * MiB  # docs/costs-and-waits.md: the daemon's RSS ...
RSS_PER_FILE = 250   # ... plus its heap per file


def vm_rss(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


class TestDaemonMemory(RamCase):
    def test_rss_after_a_run(self):
        """4 x a 64 MiB tier written by 4 writers, evicted, read back twice
        by 4 readers (the first read from the segments, the second brought
        into RAM; io_workers=8): what the run took in buffers (FUSE replies,
        staging, segment reads, restores) goes back once the mount is
        still, down to the documented bound."""
        hot, cold, state = self.make_state()
        # extents=off: the daemon's buffers on the segment path are measured
        opts = ["chunk_size=1M", "min_spill_size=16M", "nvme=" + cold, "state_dir=" + state,
                "extents=off"]
        m = self.cmount(hot, opts, "rss", hot_size="64M")
        names = ["w%d" % i for i in range(4)]
        run_threads([lambda i=i: write_content(m.path(names[i]), 80 + i, 64 * MiB)
                     for i in range(4)])
        for n in names:
            os.setxattr(m.path(n), "user.spillway.evict", b"1")

        def reader(i):
            got, size = sha_file(m.path(names[i]))
            self.assertEqual((got, size), (content_sha(80 + i, 64 * MiB), 64 * MiB), names[i])
        for _ in range(2):
            run_threads([lambda i=i: reader(i) for i in range(4)])
        s = stats_of(m.mnt)
        cold_read = s["restored"]["bytes"] + s.get("admission", {}).get("direct_read_bytes", 0)
        self.assertGreaterEqual(cold_read, 3 * 64 * MiB, json.dumps(s))
        bound = RSS_BASE + RSS_PER_FILE * s["files"]
        seen = []
        if harness.SANITIZE:  # shadow memory and quarantine: no bound to check
            sys.stderr.write("[RSS %d MiB under %s: not checked] " % (
                vm_rss(m.pid) >> 20, harness.SANITIZE))
            return

        def under():
            seen.append(vm_rss(m.pid))
            return seen[-1] <= bound
        # the idle memory goes back within a few seconds of the mount being
        # still (tier/hot/pressure.c, common/heap.c); the wait is bounded, not timed
        try:
            harness.wait_until(under, 30, "the daemon's RSS under %.1f MiB" % (bound / MiB),
                               interval=0.25)
        except AssertionError as e:
            raise AssertionError("%s; RSS seen: %s MiB (first, last 5)\n%s" % (
                e, [seen[0] >> 20] + [x >> 20 for x in seen[-5:]], m.log_text(10)))
        sys.stderr.write("[RSS after the run %.1f MiB, first seen %.1f MiB, bound %.1f MiB] " % (
            seen[-1] / MiB, seen[0] / MiB, bound / MiB))


CG_ROOT = "/sys/fs/cgroup/memory"


def own_memory_cgroup():
    """This process's v1 memory cgroup directory (the test runs inside one,
    e.g. /process_api/ID), or CG_ROOT."""
    with open("/proc/self/cgroup") as f:
        for ln in f:
            parts = ln.rstrip("\n").split(":", 2)
            if len(parts) == 3 and "memory" in parts[1].split(","):
                d = CG_ROOT + parts[2].rstrip("/")
                if os.path.exists(os.path.join(d, "memory.limit_in_bytes")):
                    return d
    return CG_ROOT


class TestRealCgroup(RamCase):
    """The machine's cgroup v1 memory controller: a child cgroup with a
    limit, the daemon in it; the budget shrinks, nothing is OOM-killed, every
    byte reads back; the default mem_reserve is 5 % of the cgroup's limit."""

    timeout = 240

    def make_cgroup(self, limit):
        """A fresh memory cgroup with `limit`, below this process's own; the
        argv prefix that runs a program inside it. Removed at cleanup (after
        the mounts registered later have stopped)."""
        if not os.path.exists(os.path.join(CG_ROOT, "memory.limit_in_bytes")):
            self.skipTest("no cgroup v1 memory controller here")
        parent = own_memory_cgroup()
        cg = os.path.join(parent, "spw-test-%d-%d" % (os.getpid(), limit >> 20))
        os.mkdir(cg)

        def rm_cgroup():
            # the daemon is gone by now (its mount is stopped first); move any
            # straggler to the parent cgroup, then remove ours
            try:
                with open(os.path.join(cg, "cgroup.procs")) as f:
                    pids = [int(x) for x in f.read().split()]
                for pid in pids:
                    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                        f.write("%d\n" % pid)
            except OSError:
                pass
            harness.wait_until(lambda: _rmdir_ok(cg), 10, "cgroup %s removed" % cg)
        self.addCleanup(rm_cgroup)  # registered first: runs after the mount stops
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))
        return cg, ["sh", "-c", 'echo $$ > "%s/cgroup.procs" && exec "$@"' % cg, "sh"]

    def test_cgroup_v1_limit(self):
        limit = 320 * MiB
        cg, prefix = self.make_cgroup(limit)
        hot, cold, state = self.make_state()
        opts = ["chunk_size=1M", "min_spill_size=8M", "nvme=" + cold, "state_dir=" + state,
                "mem_reserve=96M", "hot_min=32M", "write_wait=30s"]
        m = self.cmount(hot, opts, "cgroup", hot_size="512M", prefix=prefix)
        with open(os.path.join(cg, "cgroup.procs")) as f:
            self.assertIn(str(m.pid), f.read().split())
        files = {}
        for i in range(8):
            write_content(m.path("c%d" % i), 70 + i, 64 * MiB)
            files["c%d" % i] = (70 + i, 64 * MiB)
        s = stats_of(m.mnt)
        p = s["pressure"]
        self.assertEqual(p["cgroup"], 1, json.dumps(p))
        self.assertEqual(p["cgroup_limit"], limit)
        self.assertGreaterEqual(p["shrinks"], 1, json.dumps(p))
        self.assertLess(p["budget"], 512 * MiB)
        self.assertLessEqual(p["budget"], limit)
        self.assertEqual(s["enospc"], 0)
        # given, and at most half of the cgroup's limit: taken as given
        self.assertEqual(p["mem_reserve"], 96 * MiB)
        self.assertEqual(p["mem_reserve_of"], "given")
        self.assertIn("mem_reserve 96M (given; the memory cgroup's limit is 320M)",
                      m.log_all())
        with open(os.path.join(cg, "memory.oom_control")) as f:
            oc = dict(ln.split() for ln in f.read().splitlines())
        self.assertEqual(int(oc.get("oom_kill", 0)), 0, oc)
        self.assertIsNone(m.proc.poll(), "daemon died in its cgroup\n" + m.log_text(20))
        sys.stderr.write("[cgroup %d MiB: budget %d MiB, max usage %d MiB] " % (
            limit >> 20, p["budget"] >> 20,
            _read_int(os.path.join(cg, "memory.max_usage_in_bytes")) >> 20))
        for rel, (tag, size) in files.items():
            self.assertContent(m.path(rel), tag, size, "in a memory cgroup")

    def test_reserve_follows_cgroup(self):
        """Issue 35 item 5: a mount in a 1 GiB cgroup takes 5 % of the
        cgroup's limit (<= 51 MiB), not of the node's RAM, says so in its
        log and its stats; a given mem_reserve above half of the limit is
        refused with one line, nothing mounted."""
        limit = 1024 * MiB
        cg, prefix = self.make_cgroup(limit)
        hot, cold, state = self.make_state()
        opts = ["chunk_size=1M", "min_spill_size=8M", "nvme=" + cold, "state_dir=" + state]
        m = self.cmount(hot, opts, "reserve", hot_size="256M", prefix=prefix)
        p = stats_of(m.mnt)["pressure"]
        self.assertEqual(p["cgroup"], 1, json.dumps(p))
        self.assertEqual(p["cgroup_limit"], limit, json.dumps(p))
        self.assertLessEqual(p["mem_reserve"], 51 * MiB, json.dumps(p))
        self.assertGreaterEqual(p["mem_reserve"], 50 * MiB, json.dumps(p))
        self.assertEqual(p["mem_reserve_of"], "default", json.dumps(p))
        self.assertEqual(p["mem_limit_of"], "cgroup", json.dumps(p))
        self.assertEqual(p["mem_limit"], limit, json.dumps(p))
        # room in the cgroup beyond the reserve: the whole hot_size
        self.assertEqual(p["budget"], 256 * MiB, json.dumps(p))
        log = m.log_all()
        self.assertIn("mem_reserve 51M (5% of the memory cgroup's limit 1024M)", log)
        write_content(m.path("r"), 5, 40 * MiB)
        self.assertContent(m.path("r"), 5, 40 * MiB, "in a 1 GiB cgroup")
        self.assertEqual(m.unmount_clean(), 0, m.log_text(30))
        m.stop()

        # given above half of the cgroup's limit: refused, one line
        mnt = self.tmpdir()
        args = prefix + [harness.SPILLWAY, "-f", "-o", "hot_dir=%s,hot_size=256M,mem_reserve=600M"
                         % os.path.join(self.tmpdir(on_shm=True), "hot"), mnt]
        try:
            r = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            mounted = harness.is_mounted(mnt)
        finally:
            if harness.is_mounted(mnt):
                harness.force_unmount(mnt)
        err = r.stderr.decode(errors="replace")
        ctx = "rc=%r stderr=%r" % (r.returncode, err)
        self.assertFalse(mounted, ctx)
        self.assertEqual(r.returncode, 1, ctx)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, ctx)
        self.assertIn("option 'mem_reserve': invalid value '600M'", lines[0])
        self.assertIn("cgroup", lines[0])
        self.assertIn("512M", lines[0])


def _read_int(path):
    with open(path) as f:
        return int(f.read())


def _rmdir_ok(d):
    try:
        os.rmdir(d)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


if __name__ == "__main__":
    harness.main()
