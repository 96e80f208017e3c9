#!/usr/bin/env python3
"""
test_small_objects - the RAM budget holds for files of every size, and no
read waits for room that cannot come.

- Evicting a file frees every page it used (tmpfs frees only whole pages: the
  last partial page of a file must go too) and removes its hot file: hot
  usage 0 and no hot file left, for sizes from 1 byte to chunk_size + 1.
- A punch through EOF with fallocate frees the last page too.
- 200k files of 100-3,000 bytes through a 16 MiB hot tier: no ENOSPC, the
  hot files never allocate more than hot_size, every byte reads back, and
  hot_dir holds no file per cold object.
- A read of a cold file while RAM is full of pinned data returns at once
  (the evictor can free nothing: the restore overshoots, it does not wait
  write_wait).

Run: python3 test_small_objects.py --build BUILD_DIR [-k pattern]
"""

import os
import random
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import (KiB, MiB, PAGE, content, open_uncached, run_threads,  # noqa: E402
                      write_content)
from lib.tier import TierCase, hot_alloc  # noqa: E402


def small_content(i, n):
    """Content of small object i: n bytes, different for every i."""
    return content(1000 + i % 50, (i * 131) % (64 * KiB), n)


class TestEvictFreesEverything(TierCase):
    timeout = 120

    def test_every_size_leaves_nothing_in_ram(self):
        cs = MiB
        sizes = [1, 100, PAGE - 1, PAGE, PAGE + 1, cs - 1, cs, cs + 1, 3 * cs + 7]
        self.tier_mount(hot_size="64M", chunk_size="1M")
        for i, n in enumerate(sizes):
            write_content(self.p("f%d" % i), 10 + i, n)
        self.assertGreater(hot_alloc(self.m.hot_dir), 0)
        for i, n in enumerate(sizes):
            self.evict(self.p("f%d" % i))
            st = self.state(self.p("f%d" % i))
            self.assertEqual(st["hot"], 0, "size %d: %s" % (n, st))
        # nothing of them is in RAM: no page, no tmpfs inode
        self.assertEqual(hot_alloc(self.m.hot_dir), 0, "pages left in hot_dir")
        self.assertEqual(self.m.hot_files(), [], "hot files left for cold files")
        self.assertEqual(self.stats()["hot"]["used"], 0)
        # they read back byte for byte: once straight from the segments
        # (admission: nothing comes into RAM), then again into RAM; and
        # leave again
        for i, n in enumerate(sizes):
            self.assertContent(self.p("f%d" % i), 10 + i, n, "size %d" % n)
        self.assertEqual(hot_alloc(self.m.hot_dir), 0, "read once, yet in RAM")
        for i, n in enumerate(sizes):
            self.assertContent(self.p("f%d" % i), 10 + i, n, "size %d, again" % n)
        self.assertGreater(hot_alloc(self.m.hot_dir), 0)
        for i, n in enumerate(sizes):
            self.evict(self.p("f%d" % i))
        self.assertEqual(hot_alloc(self.m.hot_dir), 0)
        self.assertEqual(self.m.hot_files(), [])
        self.assertEqual(self.stats()["hot"]["used"], 0)

    def test_open_cold_file_keeps_a_hot_file_until_closed(self):
        self.tier_mount(hot_size="64M", chunk_size="1M", restore="lazy")
        write_content(self.p("a"), 3, 5000)
        self.evict(self.p("a"))
        self.assertEqual(self.m.hot_files(), [])
        fd = os.open(self.p("a"), os.O_RDONLY)
        try:
            self.assertEqual(len(self.m.hot_files()), 1, "an open file has its hot file")
            self.assertEqual(os.pread(fd, 5000, 0), content(3, 0, 5000))
        finally:
            os.close(fd)
        self.evict(self.p("a"))
        self.poll(lambda: self.m.hot_files() == [], 10, "no hot file once closed and evicted")
        self.assertEqual(hot_alloc(self.m.hot_dir), 0)

    def test_punch_through_eof_frees_last_page(self):
        self.tier_mount(hot_size="64M", chunk_size="1M")
        write_content(self.p("p"), 4, 100)
        fd = os.open(self.p("p"), os.O_RDWR)
        try:
            harness.fallocate(fd, 0x01 | 0x02, 0, 100)  # KEEP_SIZE | PUNCH_HOLE
            self.assertEqual(os.fstat(fd).st_size, 100)
            self.assertEqual(os.pread(fd, 100, 0), b"\0" * 100)
        finally:
            os.close(fd)
        self.assertEqual(hot_alloc(self.m.hot_dir), 0, "punched page still allocated")
        # the kernel sends RELEASE after close() returns
        self.poll(lambda: self.m.hot_files() == [], 10, "a file of holes keeps no hot file")
        self.assertEqual(self.stats()["hot"]["used"], 0)
        with open(self.p("p"), "rb") as f:
            self.assertEqual(f.read(), b"\0" * 100)


class TestManySmallObjects(TierCase):
    timeout = 420

    def test_200k_small_files_through_16m(self):
        n = int(os.environ.get("SPW_SMALL_OBJECTS", "200000"))
        hot = 16 * MiB
        self.tier_mount(hot_size="16M", chunk_size="1M", write_wait="20s", hot_tmpfs="128M")
        rnd = random.Random(11)
        sizes = [rnd.randint(100, 3000) for _ in range(n)]
        peak = [0]
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                # the hot files' real pages, all at one instant
                peak[0] = max(peak[0], self.hot_pages())
                stop.wait(0.05)

        w = threading.Thread(target=watch, daemon=True)
        w.start()
        try:
            for d in range(n // 1000 + 1):
                os.mkdir(self.p("d%03d" % d))

            def name(i):
                return self.p("d%03d/o%d" % (i // 1000, i))

            def writer(k):
                for i in range(k, n, 4):
                    fd = os.open(name(i), os.O_CREAT | os.O_WRONLY, 0o644)
                    try:
                        self.assertEqual(os.write(fd, small_content(i, sizes[i])), sizes[i])
                    finally:
                        os.close(fd)

            def reader(k):
                for i in range(k, n, 4):
                    with open(name(i), "rb") as f:
                        got = f.read()
                    if got != small_content(i, sizes[i]):
                        self.fail("object %d (%d bytes) read back wrong (%d bytes)"
                                  % (i, sizes[i], len(got)))

            run_threads([lambda k=k: writer(k) for k in range(4)])
            written_peak = peak[0]
            st = self.stats()
            self.assertEqual(st["enospc"], 0)
            # cold objects keep no hot file: hot_dir is bounded by hot data
            nhot = len(self.m.hot_files())
            self.assertLess(nhot, hot // 100, "%d hot files for %d objects" % (nhot, n))
            run_threads([lambda k=k: reader(k) for k in range(4)])
        finally:
            stop.set()
            w.join()
        st = self.stats()
        self.assertEqual(st["enospc"], 0)
        self.assertEqual(st["errors"]["io"], 0)
        self.assertLessEqual(written_peak, hot, "hot files allocated %d > hot_size while "
                             "writing" % written_peak)
        # reads overshoot by at most the chunks in flight (clean, dropped first)
        self.assertLessEqual(peak[0], hot + 16 * MiB, "hot files allocated %d" % peak[0])
        self.assertGreater(st["spilled"]["chunks"], n // 2)


class TestNoWaitForRoomThatCannotCome(TierCase):
    timeout = 120

    def test_cold_read_with_ram_full_of_pinned_data(self):
        # admit=always: every cold read restores (the filter would read
        # these once from the segment and need no room at all)
        self.tier_mount(hot_size="32M", chunk_size="1M", write_wait="30s", restore="lazy",
                        admit="always")
        write_content(self.p("cold"), 7, 4 * MiB)
        self.evict(self.p("cold"))
        self.assertEqual(self.state(self.p("cold"))["hot"], 0)
        # RAM full of pinned data: nothing the evictor can free
        with open(self.p("pinned"), "wb"):
            pass
        self.pin(self.p("pinned"), True)
        write_content(self.p("pinned"), 8, 32 * MiB - 256 * KiB)
        self.assertGreater(self.stats()["hot"]["used"], 31 * MiB)
        fd = open_uncached(self.p("cold"))
        try:
            t0 = time.monotonic()
            got = os.pread(fd, 64 * KiB, 2 * MiB + 5)
            dt = time.monotonic() - t0
        finally:
            os.close(fd)
        self.assertEqual(got, content(7, 2 * MiB + 5, 64 * KiB))
        self.assertLess(dt, 1.0, "a cold read waited %.2fs for room that cannot come" % dt)
        st = self.stats()
        self.assertGreaterEqual(st["restore_overshoots"], 1)
        # the whole file reads back too, each chunk without waiting
        t0 = time.monotonic()
        self.assertContent(self.p("cold"), 7, 4 * MiB)
        self.assertLess(time.monotonic() - t0, 4.0)


if __name__ == "__main__":
    harness.main()
