#!/usr/bin/env python3
"""
test_tiering_faults - spillway's tiering when things go wrong.

A flipped byte in a segment is EIO for the chunk it hits (never wrong bytes)
and nothing else; a full cold directory is skipped while another has room;
with every cold directory full, writes fail with ENOSPC after write_wait and
everything acknowledged still reads back; bad tiering options are refused.
Cold directories that must fill up are small tmpfs mounts made by the test
(root needed; unmounted on every exit path).

Run: python3 test_tiering_faults.py --build BUILD_DIR [-k pattern]
"""

import errno
import json
import os
import re
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import SpwTestCase  # noqa: E402
from lib.data import MiB, content, first_diff, open_uncached, write_content  # noqa: E402
from lib.tier import TierCase, Tmpfs, extent_bytes, extents_in, seg_files  # noqa: E402

# --------------------------------------------------------------------------
# cold directories that fill up (Tmpfs: lib/tier.py)


def fill_up(d, leave=0):
    """Fill directory d's filesystem until writes fail, then give back `leave` bytes."""
    path = os.path.join(d, "filler")
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        block = b"\xee" * MiB
        while True:
            try:
                os.write(fd, block)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        # the last MiB may have been partly written; finish with small blocks
        while True:
            try:
                os.write(fd, block[:4096])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        if leave:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave))
    finally:
        os.close(fd)
    return path


class FaultCase(TierCase):
    def tmpfs(self, size):
        t = Tmpfs(size)
        self.addCleanup(t.stop)
        return t.mnt


# --------------------------------------------------------------------------
# 8. a flipped byte in a segment


class TestCorruptSegment(FaultCase):
    timeout = 60

    def test_flipped_byte_is_eio(self):
        # admit=always: the good chunks read come into RAM (counted below);
        # test_admission reads a flipped byte once, from the segment
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M", admit="always")
        cold = self.cold[0]
        a, b = self.p("a"), self.p("b")
        write_content(a, 81, 4 * MiB)
        write_content(b, 82, 4 * MiB)
        self.evict(b)
        before = set(seg_files(cold))
        self.evict(a)
        segs_a = set(seg_files(cold)) - before
        self.assertEqual(len(segs_a), 1, "evicting a 4-chunk file wrote %s" % segs_a)
        self.assertEqual(self.state(a)["cold"], 4)
        self.assertEqual(self.state(b)["cold"], 4)
        seg = os.path.join(cold, segs_a.pop())
        # payloads start after the 4 KiB header in (inode, chunk) order: this
        # byte belongs to chunk 0 of a
        flip_at = 4096 + 12345
        fd = os.open(seg, os.O_RDWR)
        try:
            old = os.pread(fd, 1, flip_at)
            os.pwrite(fd, bytes([old[0] ^ 0x40]), flip_at)
            os.fsync(fd)
        finally:
            os.close(fd)
        crc0 = self.stats()["errors"]["crc"]

        fd = open_uncached(a)
        try:
            with self.assertRaises(OSError, msg="read of the corrupt chunk succeeded") as cm:
                os.pread(fd, 4096, 8192)
            self.assertEqual(cm.exception.errno, errno.EIO, cm.exception)
            # the other chunks of the same segment are fine
            for c in (1, 2, 3):
                self.assertEqual(os.pread(fd, MiB, c * MiB), content(81, c * MiB, MiB),
                                 "chunk %d" % c)
            # and the bad one stays bad (no wrong bytes on a retry)
            with self.assertRaises(OSError) as cm:
                os.pread(fd, MiB, 0)
            self.assertEqual(cm.exception.errno, errno.EIO)
        finally:
            os.close(fd)
        self.assertContent(b, 82, 4 * MiB, "(file in another segment)")
        s = self.stats()
        self.assertGreater(s["errors"]["crc"], crc0, json.dumps(s))
        st = self.state(a)
        self.assertEqual(st["hot"], 3, st)
        # overwriting the damaged chunk whole makes the file good again
        fd = os.open(a, os.O_WRONLY)
        try:
            os.pwrite(fd, content(81, 0, MiB), 0)
        finally:
            os.close(fd)
        self.assertContent(a, 81, 4 * MiB, "(after rewriting the damaged chunk)")


# --------------------------------------------------------------------------
# 9. full cold directories


class TestColdFull(FaultCase):
    timeout = 120

    def test_full_dir_is_skipped(self):
        full = self.tmpfs("16M")
        fill_up(full)
        good = self.cold_dir()
        # the journal cannot live in a full directory (the default state_dir
        # is in the first one, and a mount there is refused): put it aside
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M",
                        cold=[full, good], extents="on",
                        state_dir=os.path.join(self.tmpdir(), "state"))
        sizes = [40 * MiB, 40 * MiB + 5, 40 * MiB, 40 * MiB - 7]
        for i, sz in enumerate(sizes):
            write_content(self.p("f%d" % i), 90 + i, sz)
        s = self.stats()
        # spilled into segments, or in extents (on disk: a seal comes at the
        # writer's release, after close() returned)
        self.assertGreaterEqual(s["spilled"]["bytes"] + extent_bytes(good),
                                sum(sizes) - 64 * MiB, json.dumps(s))
        self.assertEqual(s["enospc"], 0, json.dumps(s))
        self.assertEqual(s["errors"]["io"], 0, json.dumps(s))
        self.assertEqual(seg_files(full), {}, "segments placed on the full directory")
        self.assertEqual(extents_in(full), [], "extents placed on the full directory")
        self.assertTrue(seg_files(good) or extents_in(good),
                        "nothing on the directory with room")
        dirs = {c["dir"]: c for c in s["cold"]}
        self.assertEqual(set(dirs), {full, good}, s["cold"])
        self.assertLess(dirs[full]["avail"], 8 * MiB, s["cold"])
        for i, sz in enumerate(sizes):
            self.assertContent(self.p("f%d" % i), 90 + i, sz)

    def test_dir_filling_up_is_skipped(self):
        # at first only the small one has room; once it is full, the other
        # gets room and spilling carries on there
        small = self.tmpfs("16M")
        big = self.tmpfs("160M")
        filler = fill_up(big)
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M",
                        cold=[small, big])
        write_content(self.p("first"), 100, 56 * MiB)
        self.poll(lambda: seg_files(small), 10, "a segment spilled to the small directory")
        os.unlink(filler)
        sizes = [30 * MiB] * 5
        for i, sz in enumerate(sizes):
            write_content(self.p("f%d" % i), 110 + i, sz)
        s = self.stats()
        self.assertEqual(s["enospc"], 0, json.dumps(s))
        self.assertGreaterEqual(s["spilled"]["bytes"], 56 * MiB + sum(sizes) - 64 * MiB,
                                json.dumps(s))
        self.assertTrue(seg_files(big), "no segments on the directory with room")
        st = os.statvfs(small)
        self.assertLess(st.f_bavail * st.f_frsize, 8 * MiB + 8192, "small dir not full")
        self.assertContent(self.p("first"), 100, 56 * MiB)
        for i, sz in enumerate(sizes):
            self.assertContent(self.p("f%d" % i), 110 + i, sz)

    def test_all_dirs_full_enospc_after_write_wait(self):
        c1, c2 = self.tmpfs("24M"), self.tmpfs("24M")
        self.tier_mount(hot_size="32M", chunk_size="1M", min_spill_size="4M",
                        write_wait="2s", cold=[c1, c2])
        written = []  # (name, tag, acknowledged bytes)
        failed = None
        t_fail = None
        i = 0
        while failed is None and i < 40:
            name, tag = "f%d" % i, 300 + i
            fd = os.open(self.p(name), os.O_CREAT | os.O_WRONLY, 0o644)
            done = 0
            try:
                while done < 8 * MiB:
                    t0 = time.monotonic()
                    try:
                        n = os.pwrite(fd, content(tag, done, MiB), done)
                    except OSError as e:
                        failed, t_fail = e, time.monotonic() - t0
                        break
                    self.assertGreater(n, 0)
                    done += n
            finally:
                os.close(fd)
            written.append((name, tag, done))
            i += 1
        self.assertIsNotNone(failed, "wrote %d MiB into 32M hot + 2 x 24M cold without an "
                             "error" % (sum(w[2] for w in written) // MiB))
        self.assertEqual(failed.errno, errno.ENOSPC, failed)
        self.assertGreaterEqual(t_fail, 1.5, "ENOSPC came after %.2fs, not after write_wait"
                                % t_fail)
        self.assertLess(t_fail, 20, "ENOSPC came after %.2fs" % t_fail)
        acked = sum(w[2] for w in written)
        # both cold dirs took segments before the end
        self.assertTrue(seg_files(c1), "nothing spilled to %s" % c1)
        self.assertTrue(seg_files(c2), "nothing spilled to %s" % c2)
        self.assertGreater(acked, 32 * MiB + 24 * MiB, "only %d MiB acknowledged" % (acked >> 20))
        s = self.stats()
        self.assertGreater(s["enospc"], 0, json.dumps(s))
        sys.stderr.write("\n  [all full] %d MiB acknowledged; ENOSPC after %.2fs; stats %s\n"
                         % (acked >> 20, t_fail, json.dumps(s)))
        # everything acknowledged reads back
        for name, tag, n in written:
            fd = open_uncached(self.p(name))
            try:
                self.assertEqual(os.fstat(fd).st_size, n, name)
                for off in range(0, n, MiB):
                    k = min(MiB, n - off)
                    try:
                        got = os.pread(fd, k, off)
                    except OSError as e:
                        self.fail("%s: reading acknowledged bytes at %d: %s (all tiers full)\n"
                                  "stats %s\n%s" % (name, off, e, json.dumps(self.stats()),
                                                    self.m.log_text(15)))
                    if got != content(tag, off, k):
                        self.fail("%s: wrong data at %d" % (name, off + first_diff(
                            got, content(tag, off, k))))
            finally:
                os.close(fd)


# --------------------------------------------------------------------------
# 10. one of two cold directories failing (a dying disk, a lying one)


class TestExtentSyncFails(FaultCase):
    """An extent's disk fails the sync of a seal (the last writer's close):
    the close cannot report it (FUSE's release comes after close()
    returned), so the next fsync of the file does, once, as the kernel's
    errseq would; the extent stays unsealed. (tests/shims/spw_faultdir.c
    fails fdatasync on the cold directory's files.)"""
    timeout = 120

    def test_failed_seal_sync_is_the_next_fsyncs_eio(self):
        shim = os.path.join(harness.BUILD_DIR, "tests", "spw_faultdir.so")
        cold = os.path.realpath(self.cold_dir())
        ctl = os.path.join(self.tmpdir(), "fault")
        env = dict(os.environ, LD_PRELOAD=shim, SPW_FAULT_DIR=cold, SPW_FAULT_CTL=ctl)
        self.m = self.mount(hot_size="64M", env=env, opts=[
            "chunk_size=1M", "nvme=" + cold, "io_engine=psync", "extents=on", "seal_delay=0",
            "state_dir=" + os.path.join(self.tmpdir(), "state")])
        self.mnt = self.m.mnt
        p = self.p("f")
        write_content(p, 71, 20 * MiB)
        self.evict(p)  # a sealed extent (durable first)
        self.assertEqual((self.state(p)["extent"], self.state(p)["sealed"]), (1, 1))
        fd = os.open(p, os.O_WRONLY)
        try:
            os.pwrite(fd, b"x" * 4096, 5 * MiB)  # the kernel writes the extent
            with open(ctl, "w") as f:
                f.write("EIO data")
        finally:
            os.close(fd)
        harness.wait_until(lambda: "its sync failed" in self.m.log_text(50), 20,
                           "the seal at the writer's release met the failing sync")
        os.unlink(ctl)  # the disk works again
        self.assertEqual(self.state(p)["sealed"], 0)
        fd = os.open(p, os.O_RDONLY)
        try:
            with self.assertRaises(OSError) as cm:
                os.fsync(fd)
            self.assertEqual(cm.exception.errno, errno.EIO)
            os.fsync(fd)  # reported once
            self.assertEqual(os.pread(fd, 4096, 5 * MiB), b"x" * 4096)
        finally:
            os.close(fd)


class TestColdDirFails(FaultCase):
    """One of two cold directories fails: EIO at segment creation, EIO or
    ENOSPC in the middle of a segment (statvfs still showing room, as a
    thin-provisioned or quota'd disk does). The other directory takes the
    segments; no writer sees an error; nothing acknowledged is lost; the
    failing directory is tried again once it works.

    The faults come from tests/shims/spw_faultdir.c (an LD_PRELOAD shim that
    fails the calls on one directory's files, switched through a control
    file); hence io_engine=psync (io_uring's writes bypass libc)."""
    timeout = 240

    def fault_mount(self, fault):
        shim = os.path.join(harness.BUILD_DIR, "tests", "spw_faultdir.so")
        self.assertTrue(os.path.exists(shim), "%s is missing (tests/CMakeLists.txt)" % shim)
        self.bad = os.path.realpath(self.cold_dir())
        self.good = os.path.realpath(self.cold_dir())
        self.ctl = os.path.join(self.tmpdir(), "fault")
        self.fault_word = fault
        env = dict(os.environ, LD_PRELOAD=shim, SPW_FAULT_DIR=self.bad, SPW_FAULT_CTL=self.ctl)
        # the journal aside: the failing directory is a data disk here
        # (test_faults_fiu fails the journal's own writes)
        self.state_dir = os.path.join(self.tmpdir(), "state")
        self.cold = [self.bad, self.good]
        # segments retry on the other directory; an extent's write error
        # is the writer's errno, as on a plain disk: these follow segments
        self.opts = ["chunk_size=1M", "nvme=%s:%s" % (self.bad, self.good), "min_spill_size=4M",
                     "io_engine=psync", "state_dir=" + self.state_dir, "extents=off"]
        self.m = self.mount(hot_size="32M", opts=self.opts, env=env)
        self.mnt = self.m.mnt

    def set_fault(self, on):
        with open(self.ctl + ".new", "w") as f:
            f.write(self.fault_word if on else "")
        os.rename(self.ctl + ".new", self.ctl)

    def segs(self, d):
        return set(seg_files(d))

    def run_fault(self, fault, expect_log, recover=False):
        self.fault_mount(fault)
        files = []  # (name, tag, size)

        def write(i, size):
            name, tag = "f%d" % i, 500 + i
            fd = os.open(self.p(name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            try:
                for off in range(0, size, MiB):
                    n = min(MiB, size - off)
                    self.assertEqual(os.pwrite(fd, content(tag, off, n), off), n)
                os.fsync(fd)  # spills the file's dirty chunks: durable segments
            finally:
                os.close(fd)
            files.append((name, tag, size))

        write(0, 12 * MiB)
        self.evict(self.p("f0"))
        self.set_fault(True)
        before_bad = self.segs(self.bad)
        # segments go to either directory (weighted by free space) until the
        # failing one has failed once; then only to the good one
        i = 1
        while not re.search(expect_log, self.m.log_text(400)) and i < 40:
            write(i, 6 * MiB + 4096 * i)
            i += 1
        self.assertRegex(self.m.log_text(400), expect_log, "the fault never hit a segment")
        for k in range(i, i + 6):  # more after the failure: the good one takes them
            write(k, 6 * MiB + 4096 * k)
        s = self.stats()
        self.assertEqual(s["enospc"], 0, json.dumps(s))
        self.assertEqual(self.segs(self.bad), before_bad, "a segment completed in the failing dir")
        self.assertEqual([n for n in os.listdir(self.bad) if n.startswith(".tmp-")], [],
                         "a failed segment's temp file left behind")
        self.assertTrue(self.segs(self.good) - before_bad)
        bad_dir = [c for c in s["cold"] if c["dir"] == self.bad]
        self.assertEqual(len(bad_dir), 1, s["cold"])
        for name, tag, size in files:
            self.evict(self.p(name))
        for name, tag, size in files:
            self.assertContent(self.p(name), tag, size, "(read from the cold tier)")
        if recover:
            # the fault gone, the directory is used again after its back-off
            # (NVME_FAIL_BACKOFF_S, 30 s): a file spilled every second
            self.set_fault(False)
            k = i + 6

            def bad_used():
                nonlocal k
                write(k, 4 * MiB)
                self.evict(self.p("f%d" % k))
                k += 1
                return self.segs(self.bad) - before_bad
            harness.wait_until(bad_used, 90, "a segment in the recovered directory",
                               interval=1.0)
        t = self.stats()
        sys.stderr.write("\n  [%s] %d files, %d MiB; %d segments in the good dir, %d in the "
                         "recovered one; io errors %d\n"
                         % (fault, len(files), sum(f[2] for f in files) >> 20,
                            len(self.segs(self.good)), len(self.segs(self.bad) - before_bad),
                            t["errors"]["io"]))
        # everything acknowledged survives a remount without the fault shim
        self.assertFalse(self.m.stop(), self.m.log_text())
        self.m = self.mount(hot_size="32M", opts=self.opts, tag="remount")
        self.mnt = self.m.mnt
        for name, tag, size in files:
            self.assertContent(self.p(name), tag, size, "(after a remount)")

    def test_eio_creating_a_segment(self):
        self.run_fault("EIO", r"cannot create \.tmp-[0-9a-f]+.*: Input/output error")

    def test_eio_in_the_middle_of_a_segment(self):
        self.run_fault("EIO data", r"writing segment [0-9a-f]+ at \d+: Input/output error",
                       recover=True)

    def test_enospc_in_the_middle_of_a_segment(self):
        self.run_fault("ENOSPC data", r"writing segment [0-9a-f]+ at \d+: No space left")


# --------------------------------------------------------------------------
# 11. bad tiering options


def mentions(text, value):
    return re.search(r"(?<![0-9A-Za-z])%s(?![0-9A-Za-z])" % re.escape(value), text) is not None


class TestBadTierOptions(SpwTestCase):
    timeout = 60

    def bad(self, opt, name, value):
        mnt = self.tmpdir()
        hot = os.path.join(self.tmpdir(on_shm=True), "hot")
        cold = self.tmpdir()
        opts = ["hot_dir=" + hot, "hot_size=64M"]
        if not opt.startswith("nvme="):
            opts.append("nvme=" + cold)
        opts.append(opt)
        args = ["-f", "-o", ",".join(opts), mnt]
        rc, out, err, was_mounted = harness.run_spillway(args, mnt)
        ctx = "spillway %s\nrc=%r\nstdout=%r\nstderr=%r" % (" ".join(args), rc, out, err)
        self.assertFalse(was_mounted, "a bad option still mounted\n" + ctx)
        self.assertEqual(rc, 1, ctx)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, "expected exactly one line on stderr\n" + ctx)
        self.assertIn(name, lines[0], ctx)
        self.assertTrue(mentions(lines[0], value), "stderr does not name %r\n%s" % (value, ctx))
        self.assertFalse(harness.is_mounted(mnt))
        self.assertFalse(os.path.exists(hot), "hot_dir left behind\n" + ctx)
        self.assertEqual(os.listdir(cold), [], "cold dir touched\n" + ctx)
        return lines[0]

    def test_spill_threshold_above_1(self):
        self.bad("spill_threshold=1.5", "spill_threshold", "1.5")

    def test_low_watermark_above_spill(self):
        self.bad("low_watermark=0.8", "low_watermark", "0.8")

    def test_io_workers_zero(self):
        self.bad("io_workers=0", "io_workers", "0")

    def test_nvme_missing_dir(self):
        self.bad("nvme=/does/not/exist", "nvme", "/does/not/exist")
        self.assertFalse(os.path.exists("/does/not/exist"))

    def test_nvme_is_hot_dir(self):
        shm = self.tmpdir(on_shm=True)
        hot = os.path.join(shm, "hot")
        os.mkdir(hot)
        mnt = self.tmpdir()
        args = ["-f", "-o", "hot_dir=%s,hot_size=64M,nvme=%s" % (hot, hot), mnt]
        rc, out, err, was_mounted = harness.run_spillway(args, mnt)
        ctx = "rc=%r stderr=%r" % (rc, err)
        self.assertFalse(was_mounted, ctx)
        self.assertEqual(rc, 1, ctx)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, ctx)
        self.assertIn("nvme", lines[0], ctx)
        self.assertIn(hot, lines[0], ctx)
        self.assertIn("hot_dir", lines[0], ctx)

    def test_restore_eager(self):
        self.bad("restore=eager", "restore", "eager")

    def test_nvme_dir_of_a_live_mount(self):
        # a second mount on the same cold directory would delete the first
        # one's segments as leftovers: it is refused, and the first is intact
        cold = self.tmpdir()
        m = self.mount(hot_size="64M", opts=["chunk_size=1M", "nvme=" + cold,
                                             "min_spill_size=4M"])
        data = os.urandom(1 << 20)
        with open(m.path("keep"), "wb") as f:
            for _ in range(8):
                f.write(data)
        os.setxattr(m.path("keep"), "user.spillway.evict", b"1")
        segs = sorted(x for x in os.listdir(cold) if x.startswith("seg-"))
        self.assertTrue(segs, "evict wrote no segment")
        mnt2 = self.tmpdir()
        hot2 = os.path.join(self.tmpdir(on_shm=True), "hot")
        rc, out, err, was_mounted = harness.run_spillway(
            ["-f", "-o", "hot_dir=%s,hot_size=64M,nvme=%s" % (hot2, cold), mnt2], mnt2)
        self.assertFalse(was_mounted, err)
        self.assertEqual(rc, 1, err)
        # the state_dir (in the first nvme dir) is locked first, then each dir
        self.assertRegex(err, "option '(nvme|state_dir)'")
        self.assertIn("in use", err)
        self.assertEqual(sorted(x for x in os.listdir(cold) if x.startswith("seg-")), segs)
        with open(m.path("keep"), "rb") as f:
            for _ in range(8):
                self.assertEqual(f.read(1 << 20), data)

    def test_write_wait_forever(self):
        self.bad("write_wait=forever", "write_wait", "forever")


if __name__ == "__main__":
    harness.main()
