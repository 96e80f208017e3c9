#!/usr/bin/env python3
"""test_extent_evict - the evictor spills a cold big file as an extent.

With extents=on, when RAM fills, a closed file of 16 MiB or more all in RAM
among the evictor's coldest dirty chunks moves whole into a sealed extent
(tier/extent, DESIGN section 16) rather than into packed segments: read once
later, the kernel reads it from the disk. Its times are the file's (the copy
does not make it newer), it survives kill -9 and a wiped hot_dir, and a small
file still goes into a segment. extents=off keeps segments.
"""
import os
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.tier import file_state, stats_of  # noqa: E402
from test_extents import ExtentCase, MiB, extent_files, pattern, read, write  # noqa: E402

OLD = 946684800  # 2000-01-01: a time set by the application (cp -p, tar)


class TestEvictorExtents(ExtentCase):

    def fill(self, m, mib=32, seed=50):
        """A file written after the big one in shuffled 1 MiB blocks (not a
        stream: nothing is written around, no extent granted at its open):
        RAM crosses spill_threshold and the evictor takes the coldest dirty
        chunks, the big file's."""
        rnd = pattern(seed, MiB)
        order = list(range(mib))
        random.Random(seed).shuffle(order)
        fd = os.open(m.path("fill"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            for b in order:
                self.assertEqual(os.pwrite(fd, rnd, b * MiB), MiB)
        finally:
            os.close(fd)

    def test_cold_big_file_becomes_an_extent(self):
        m = harness.Mount(hot_size="64M", opts=self.opts + ["extents=on", "seal_delay=0"], hot_dir=self.hot,
                          tag="ext-ev")
        m.start()
        try:
            ino = self.cold_big_file(m)
            # durable before its RAM copy went: kill -9 and a wiped hot_dir
            m.abort()
        finally:
            m.stop()
        shutil.rmtree(self.hot)
        m2 = self.start(tag="ext-ev2", hot_size="64M")
        self.assertEqual(os.stat(m2.path("big")).st_ino, ino)
        self.assertEqual(os.stat(m2.path("big")).st_mtime_ns, OLD * 10**9 + 5)
        self.assertEqual(read(m2.path("big")), pattern(40, 24 * MiB + 4097))
        self.assertEqual(file_state(m2.path("big"))["sealed"], 1)
        self.assertEqual(extent_files(self.cold), extent_files(self.cold, ino))

    def cold_big_file(self, m):
        big = pattern(40, 24 * MiB + 4097)
        write(m.path("big"), big)
        os.utime(m.path("big"), ns=(OLD * 10**9, OLD * 10**9 + 5))
        small = pattern(41, 3 * MiB)
        write(m.path("small"), small)
        st0 = file_state(m.path("big"))
        self.assertNotIn("extent", st0)  # RAM had room: it stayed there
        self.fill(m)
        harness.wait_until(lambda: file_state(m.path("big")).get("extent") == 1, 30,
                           "the evictor moved the big file into an extent\n" + m.log_text(20))
        st = file_state(m.path("big"))
        self.assertEqual((st["sealed"], st["hot"], st.get("segments", 0)), (1, 0, 0), st)
        harness.wait_until(lambda: stats_of(m.mnt)["extents"]["evicted"] >= 1, 10,
                           "the move counted (it is, just after the extent is in place)")
        self.assertEqual(len(extent_files(self.cold, m.path("big"))), 1)
        self.assertEqual(os.stat(m.path("big")).st_mtime_ns, OLD * 10**9 + 5)
        self.assertEqual(os.stat(m.path("big")).st_size, len(big))
        self.assertEqual(read(m.path("big")), big)
        # the 3 MiB file is not an extent's business: a segment or RAM
        self.assertNotIn("extent", file_state(m.path("small")))
        self.assertEqual(read(m.path("small")), small)
        return os.stat(m.path("big")).st_ino

    def test_evict_keeps_the_files_times(self):
        """user.spillway.evict into an extent: the copy is newer than the
        file, yet the file's mtime is the application's, now and after a
        remount."""
        m = self.start(hot_size="128M")
        data = pattern(42, 18 * MiB)
        write(m.path("f"), data)
        os.utime(m.path("f"), ns=(OLD * 10**9, OLD * 10**9 + 7))
        os.setxattr(m.path("f"), "user.spillway.evict", b"1")
        self.assertEqual(file_state(m.path("f"))["extent"], 1)
        self.assertEqual(os.stat(m.path("f")).st_mtime_ns, OLD * 10**9 + 7)
        self.assertEqual(read(m.path("f")), data)
        m.stop()
        m2 = self.start(tag="ext-ev3", hot_size="128M")
        self.assertEqual(os.stat(m2.path("f")).st_mtime_ns, OLD * 10**9 + 7)
        self.assertEqual(read(m2.path("f")), data)

    def test_sparse_file_stays_sparse(self):
        """A sparse file all in RAM (18 MiB of data in 1 GiB) moves into an
        extent holding its data only: its holes stay holes on disk."""
        m = self.start(hot_size="128M")
        data = pattern(45, 9 * MiB)
        fd = os.open(m.path("sp"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            self.assertEqual(os.pwrite(fd, data, 0), len(data))
            self.assertEqual(os.pwrite(fd, data, 600 * MiB), len(data))
            os.ftruncate(fd, 1024 * MiB)
        finally:
            os.close(fd)
        os.setxattr(m.path("sp"), "user.spillway.evict", b"1")
        self.assertEqual(file_state(m.path("sp"))["extent"], 1)
        names = extent_files(self.cold, m.path("sp"))
        self.assertEqual(len(names), 1)
        st = os.stat(os.path.join(self.cold, "extents", names[0]))
        self.assertEqual(st.st_size, 1024 * MiB)
        self.assertLess(st.st_blocks * 512, 64 * MiB, "the holes were written as zeros")
        with open(m.path("sp"), "rb") as f:
            self.assertEqual(os.pread(f.fileno(), len(data), 600 * MiB), data)
            self.assertEqual(os.pread(f.fileno(), MiB, 300 * MiB), bytes(MiB))
            self.assertEqual(os.pread(f.fileno(), len(data), 0), data)

    def test_open_file_is_not_moved(self):
        """A big file held open (read-only) is not moved by the evictor: its
        chunks go into segments as before, and the open keeps reading the
        right bytes."""
        m = self.start(["min_spill_size=8M"], hot_size="64M")
        big = pattern(43, 20 * MiB)
        write(m.path("big"), big)
        fd = os.open(m.path("big"), os.O_RDONLY)
        try:
            self.fill(m)
            harness.wait_until(lambda: stats_of(m.mnt)["spilled"]["bytes"] > 0, 30,
                               "the evictor spilled")
            self.assertNotIn("extent", file_state(m.path("big")))
            self.assertEqual(os.pread(fd, MiB, 5 * MiB), big[5 * MiB:6 * MiB])
        finally:
            os.close(fd)
        self.assertEqual(read(m.path("big")), big)

    def test_extent_min(self):
        """extent_min=32M: a 20 MiB evict goes into segments, a 40 MiB one
        into an extent; a value out of range is refused in one line and
        nothing is mounted."""
        m = self.start(["extent_min=32M"], hot_size="128M")
        small, big = pattern(46, 20 * MiB), pattern(47, 40 * MiB)
        write(m.path("small"), small)
        write(m.path("big"), big)
        for n in ("small", "big"):
            os.setxattr(m.path(n), "user.spillway.evict", b"1")
        self.assertNotIn("extent", file_state(m.path("small")))
        self.assertGreater(file_state(m.path("small"))["segments"], 0)
        self.assertEqual(file_state(m.path("big"))["extent"], 1)
        self.assertEqual(read(m.path("small")), small)
        self.assertEqual(read(m.path("big")), big)
        mnt = self.tmpdir()
        args = ["-f", "-o", "hot_dir=%s,hot_size=64M,nvme=%s,extent_min=512K"
                % (os.path.join(self.tmpdir(on_shm=True), "hot"), self.cold), mnt]
        rc, out, err, was_mounted = harness.run_spillway(args, mnt)
        self.assertFalse(was_mounted)
        self.assertEqual(rc, 1, err)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, err)
        self.assertIn("extent_min", lines[0])
        self.assertIn("512K", lines[0])

    def test_extents_off_keeps_segments(self):
        m = self.start(["extents=off", "min_spill_size=8M"], hot_size="64M")
        big = pattern(44, 24 * MiB)
        write(m.path("big"), big)
        self.fill(m)
        harness.wait_until(lambda: file_state(m.path("big")).get("segments", 0) > 0, 30,
                           "the evictor spilled the big file into segments")
        self.assertNotIn("extent", file_state(m.path("big")))
        self.assertEqual(stats_of(m.mnt)["extents"]["evicted"], 0)
        self.assertEqual(read(m.path("big")), big)



class TestWarmExtent(ExtentCase):
    """warm brings an extent into the hot tier: into segments on the cold
    directory first (its cold copy, so RAM holds a clean copy and a reboot
    loses nothing), then restored like any cold file."""

    def test_warm_brings_an_extent_into_ram(self):
        m = self.start(hot_size="64M")
        data = pattern(60, 40 * MiB + 777)
        write(m.path("w"), data)
        self.evict(m.path("w"))
        self.assertEqual(file_state(m.path("w")).get("extent"), 1)
        ino = os.stat(m.path("w")).st_ino
        # open: it stays an extent, read into the page cache
        fd = os.open(m.path("w"), os.O_RDONLY)
        try:
            self.warm(m.path("w"))
            self.assertEqual(file_state(m.path("w")).get("extent"), 1)
        finally:
            os.close(fd)
        harness.wait_until(lambda: self.closed(m, "w"), 10, "the reader's release")
        self.warm(m.path("w"))
        st = file_state(m.path("w"))
        nch = (len(data) + 4 * MiB - 1) // (4 * MiB)  # chunk_size 4M, the default
        self.assertNotIn("extent", st)
        self.assertEqual((st["hot"], st["dirty"], st["cold"]), (nch, 0, 0), st)
        self.assertGreaterEqual(st["segments"], 1, st)
        self.assertEqual(extent_files(self.cold, ino), [])
        self.assertEqual(read(m.path("w")), data)
        # its cold copy: kill -9 and a wiped hot_dir lose nothing
        m.abort()
        m.proc.wait()
        m.stop()
        shutil.rmtree(self.hot)
        m2 = self.start(tag="warm2", hot_size="64M")
        self.assertEqual(read(m2.path("w")), data)
        self.assertEqual(stats_of(m2.mnt)["lost_files"], 0)

    def closed(self, m, name):
        """No open of the file is left in the daemon (its release arrived)."""
        self.warm(m.path(name))
        return "extent" not in file_state(m.path(name))

    def evict(self, path):
        os.setxattr(path, "user.spillway.evict", b"1")

    def warm(self, path):
        os.setxattr(path, "user.spillway.warm", b"1")


if __name__ == "__main__":
    harness.main()
