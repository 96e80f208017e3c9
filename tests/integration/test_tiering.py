#!/usr/bin/env python3
"""
test_tiering - spillway's tiering (hot tmpfs tier -> cold NVMe segments) on
real mounts with a small hot tier.

Overflow of the hot tier by 4x from several writers (hot usage never above
hot_size, segments batched to min_spill_size), a file larger than the hot
tier, writes racing with spills of the same chunks, concurrent readers of a
file being restored, restore=lazy / restore=open, O_TRUNC on a cold file,
pinning, GC (deletion and compaction), fallocate under pressure, and
requests spanning two cold chunks when RAM has room for only one. Every byte
read back is checked.
Faults (corrupt segments, full cold directories, bad options) are in
test_tiering_faults.py.

Run: python3 test_tiering.py --build BUILD_DIR [-k pattern]
"""

import errno
import json
import mmap
import os
import random
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from lib.data import (KiB, MiB, PAGE, content, content_sha, first_diff,  # noqa: E402
                      open_uncached, read_all, run_threads, sha_file, write_content)
from lib.tier import TierCase, cold_read_bytes, seg_files  # noqa: E402


# --------------------------------------------------------------------------
# 1. overflow


class TestOverflow(TierCase):
    timeout = 150

    HOT = 64 * MiB
    MIN_SPILL = 16 * MiB

    def test_overflow_4x_mixed_sizes_4_writers(self):
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="16M", hot_tmpfs="256M")
        limit = self.stats()["hot"]["limit"]
        self.assertEqual(limit, self.HOT)

        # mixed sizes, 4 KiB .. 100 MiB, 4 x hot_size in total
        sizes = [100 * MiB, 40 * MiB + 12345, 25 * MiB, 17 * MiB + 1, 10 * MiB, 7 * MiB + 4097,
                 5 * MiB, 3 * MiB + 17, 2 * MiB, MiB, 512 * KiB + 123, 100 * KiB, 10 * KiB,
                 4 * KiB, 4 * KiB + 1]
        total = 4 * self.HOT
        rest = total - sum(sizes)
        while rest > 0:
            n = min(rest, 6 * MiB + 777 * len(sizes))
            sizes.append(n)
            rest -= n
        files = [("f%03d" % i, sz, 1000 + i) for i, sz in enumerate(sizes)]
        self.assertEqual(sum(sz for _, sz, _ in files), total)
        # deal the files out so each writer gets about a quarter of the bytes
        queues = [[] for _ in range(4)]
        loads = [0] * 4
        for f in sorted(files, key=lambda f: -f[1]):
            i = loads.index(min(loads))
            queues[i].append(f)
            loads[i] += f[1]

        stop = threading.Event()
        samples = {"n": 0, "used": 0, "alloc": 0, "errors": []}

        def sampler():
            while not stop.is_set():
                try:
                    used = self.stats()["hot"]["used"]
                except OSError as e:
                    samples["errors"].append(e)
                    return
                samples["used"] = max(samples["used"], used)
                # the hot files' real pages, all at one instant
                samples["alloc"] = max(samples["alloc"], self.hot_pages())
                samples["n"] += 1
                stop.wait(0.01)

        def writer(q):
            for name, size, tag in q:
                # odd write sizes for some files so requests straddle chunks
                bs = MiB if tag % 2 else 768 * KiB + 512
                write_content(self.p(name), tag, size, bs=bs)

        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        try:
            run_threads([lambda q=q: writer(q) for q in queues])
        finally:
            stop.set()
            st.join()
        self.assertFalse(samples["errors"], "stats xattr failed while writing")
        self.assertGreater(samples["n"], 10, "sampler hardly ran")
        self.assertLessEqual(samples["used"], limit,
                             "hot.used reached %d > hot_size %d" % (samples["used"], limit))
        self.assertLessEqual(samples["alloc"], limit,
                             "hot files allocated %d > hot_size %d" % (samples["alloc"], limit))

        s = self.stats()
        spilled = s["spilled"]["bytes"]
        self.assertGreater(spilled, 0)
        # everything acknowledged beyond what RAM holds is on the cold tier
        self.assertGreaterEqual(spilled, total - limit, json.dumps(s))
        written = s["segments"]["written"]
        bound = 2 * -(-spilled // self.MIN_SPILL) + 4
        self.assertLessEqual(written, bound,
                             "%d segments for %d spilled bytes (min_spill_size 16M): batching "
                             "does not hold\n%s" % (written, spilled, json.dumps(s)))
        sys.stderr.write("\n  [overflow] max hot.used %d, max allocated %d (limit %d, %d samples); "
                         "%d segments for %d MiB spilled\n" % (
                             samples["used"], samples["alloc"], limit, samples["n"], written,
                             spilled >> 20))
        on_disk = seg_files(self.cold[0])
        self.assertTrue(on_disk, "no segment files in the cold dir")
        tiny = [n for n, sz in on_disk.items() if sz < self.MIN_SPILL // 4]
        self.assertLessEqual(len(tiny), 4, "many tiny segments: %s" % sorted(on_disk.items()))
        self.assertEqual(s["enospc"], 0)
        self.assertEqual(s["errors"], {"io": 0, "crc": 0})

        # read everything back (4 readers, through the restore path)
        def reader(q):
            for name, size, tag in q:
                got, n = sha_file(self.p(name))
                self.assertEqual(n, size, name)
                self.assertEqual(got, content_sha(tag, size),
                                 "%s (%d bytes): sha256 mismatch after read-back" % (name, size))

        run_threads([lambda q=q: reader(q) for q in queues])
        s = self.stats()
        self.assertGreater(cold_read_bytes(s), 0)
        self.assertLessEqual(s["hot"]["used"], limit)
        self.assertEqual(s["errors"], {"io": 0, "crc": 0})


# --------------------------------------------------------------------------
# 2. a file larger than the hot tier


class TestBigFile(TierCase):
    timeout = 90

    def test_file_3x_hot_size(self):
        self.tier_mount(hot_size="64M", chunk_size="4M", min_spill_size="16M")
        size = 3 * 64 * MiB + 12345
        p = self.p("big")
        write_content(p, 7, size)
        st = self.state(p)
        self.assertGreater(st["cold"], 0, st)
        self.assertEqual(st["hot"] + st["cold"] + st["restoring"], -(-size // (4 * MiB)), st)
        self.assertContent(p, 7, size)
        # and once more, backwards, chunk by chunk
        fd = open_uncached(p)
        try:
            for off in reversed(range(0, size, 4 * MiB)):
                n = min(4 * MiB, size - off)
                self.assertEqual(os.pread(fd, n, off), content(7, off, n), "offset %d" % off)
        finally:
            os.close(fd)
        self.assertLessEqual(self.stats()["hot"]["used"], 64 * MiB)


# --------------------------------------------------------------------------
# 3. writes racing with spills of the same chunks


class TestWriteSpillRace(TierCase):
    timeout = 120

    def test_overwrites_during_spill_lose_nothing(self):
        self.tier_mount(hot_size="32M", chunk_size="1M", min_spill_size="4M", io_workers="4")
        nchunks = 8
        size = nchunks * MiB
        p = self.p("race")
        write_content(p, 1, size)
        model = bytearray(content(1, 0, size))
        stop = threading.Event()
        progress = threading.Condition()
        counts = {"writes": 0, "full": 0, "evicts": 0, "filler": 0}
        deadline = time.monotonic() + 8.0

        def writer():
            rng = random.Random(42)
            fd = os.open(p, os.O_WRONLY)
            try:
                tag = 100
                while (time.monotonic() < deadline or counts["evicts"] < 20
                       or counts["writes"] < 150):
                    if time.monotonic() > deadline + 30:
                        break
                    tag += 1
                    kind = rng.random()
                    if kind < 0.4:  # a whole chunk, versioned
                        off, n = rng.randrange(nchunks) * MiB, MiB
                        counts["full"] += 1
                    elif kind < 0.7:  # inside one chunk
                        off = rng.randrange(size - 1)
                        n = rng.randint(1, min(256 * KiB, size - off))
                    else:  # straddling chunks
                        c = rng.randrange(1, nchunks)
                        off = c * MiB - rng.randint(1, 600 * KiB)
                        n = min(rng.randint(2, 1200 * KiB), size - off)
                    data = content(tag, off, n)
                    self.assertEqual(os.pwrite(fd, data, off), n)
                    model[off:off + n] = data
                    with progress:
                        counts["writes"] += 1
                        progress.notify_all()
            finally:
                os.close(fd)
                with progress:
                    stop.set()
                    progress.notify_all()

        def evicter():
            # spill + drop the file while the writer keeps going; a few writes
            # land between evictions so there is always something dirty
            while not stop.is_set():
                self.evict(p)
                counts["evicts"] += 1
                with progress:
                    seen = counts["writes"]
                    progress.wait_for(lambda: stop.is_set() or counts["writes"] >= seen + 3)

        def filler():
            # other files keep the evictor busy spilling under pressure (the
            # race file's chunks are candidates too)
            i = 0
            while not stop.is_set():
                write_content(self.p("fill%d" % (i % 3)), 500 + i, 12 * MiB)
                i += 1
                counts["filler"] += 1

        run_threads([writer, evicter, filler])
        sys.stderr.write("\n  [race] %s\n" % counts)
        self.assertGreaterEqual(counts["evicts"], 20, counts)
        self.assertGreaterEqual(counts["writes"], 150, counts)
        s = self.stats()
        self.assertGreater(s["segments"]["written"], 10, json.dumps(s))
        # the fillers did their part: gone, so the warm below does not push
        # the hot tier over its watermark (the evictor would drop the race
        # file's clean chunks again while the fillers' are still dirty)
        for i in range(3):
            if os.path.exists(self.p("fill%d" % i)):
                os.unlink(self.p("fill%d" % i))

        def check(when):
            fd = open_uncached(p)
            try:
                got = read_all(fd, size + 1)
            finally:
                os.close(fd)
            if got != bytes(model):
                d = first_diff(got, bytes(model))
                self.fail("race file differs from the last writes %s at offset %d (chunk %d); "
                          "counts %s\n%s" % (when, d, d // MiB, counts, self.m.log_text(20)))

        check("right after the race")
        self.evict(p)
        st = self.state(p)
        self.assertEqual(st["cold"], nchunks, st)
        check("after evicting it (every chunk read from its segment)")
        self.warm(p)
        st = self.state(p)
        self.assertEqual((st["hot"], st["cold"]), (nchunks, 0), st)
        check("after warming it")
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


# --------------------------------------------------------------------------
# 4. concurrent readers of a file being restored


class TestConcurrentRestore(TierCase):
    timeout = 90

    def test_four_readers_while_restoring(self):
        # admit=always: the readers restore (test_admission has what the
        # filter does with readers of a file read once)
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M", io_workers="2",
                        admit="always")
        nchunks = 40
        size = nchunks * MiB - 999
        p = self.p("shared")
        for rnd in range(3):
            write_content(p, 9, size, bs=MiB)
            self.evict(p)
            st = self.state(p)
            self.assertEqual(st["cold"], nchunks, st)
            self.assertEqual(st["hot"], 0, st)
            before = self.stats()["restored"]["bytes"]
            rng = random.Random(rnd)
            orders = [list(range(nchunks)), list(reversed(range(nchunks))),
                      rng.sample(range(nchunks), nchunks),
                      list(range(0, nchunks, 2)) + list(range(1, nchunks, 2))]
            barrier = threading.Barrier(4)

            def reader(order):
                fd = open_uncached(p)
                try:
                    barrier.wait()
                    for c in order:
                        off = c * MiB
                        n = min(MiB, size - off)
                        # two reads per chunk: its tail first, then all of it
                        self.assertEqual(os.pread(fd, 4096, off + n - 4096),
                                         content(9, off + n - 4096, 4096), "chunk %d tail" % c)
                        got = os.pread(fd, n, off)
                        if got != content(9, off, n):
                            raise AssertionError("round %d chunk %d: wrong bytes at %d" % (
                                rnd, c, off + first_diff(got, content(9, off, n))))
                finally:
                    os.close(fd)

            run_threads([lambda o=o: reader(o) for o in orders])
            st = self.state(p)
            self.assertEqual(st["cold"] + st["restoring"], 0, st)
            restored = self.stats()["restored"]["bytes"] - before
            # each chunk came back exactly once although four readers wanted it
            self.assertEqual(restored, size, "restored %d bytes for a %d-byte file"
                             % (restored, size))
        self.assertEqual(self.stats()["errors"], {"io": 0, "crc": 0})


# --------------------------------------------------------------------------
# 5. restore=lazy and restore=open


class TestRestoreModes(TierCase):
    timeout = 60

    def test_lazy_restores_only_what_is_read(self):
        # admit=always: a read brings its chunk into RAM (the filter would
        # read it once from its segment: test_admission)
        self.tier_mount(hot_size="128M", chunk_size="4M", min_spill_size="8M",
                        restore="lazy", admit="always")
        nchunks = 8
        size = nchunks * 4 * MiB
        p = self.p("lazy")
        write_content(p, 21, size)
        self.evict(p)
        self.assertEqual(self.state(p)["cold"], nchunks)
        before = self.stats()["restored"]["bytes"]
        fd = open_uncached(p)
        try:
            st = self.state(p)
            self.assertEqual((st["hot"], st["cold"], st["restoring"]), (0, nchunks, 0),
                             "restore=lazy restored on open: %s" % st)
            off = 2 * 4 * MiB + 8192
            self.assertEqual(os.pread(fd, 4096, off), content(21, off, 4096))
            # the reader's blocks come first, the rest of the chunk after the reply
            self.poll(lambda: self.state(p)["restoring"] == 0, 10, "rest of the chunk")
            st = self.state(p)
            self.assertEqual((st["hot"], st["cold"], st["restoring"]), (1, nchunks - 1, 0),
                             "after reading one chunk: %s" % st)
        finally:
            os.close(fd)
        self.assertEqual(self.stats()["restored"]["bytes"] - before, 4 * MiB)
        st = self.state(p)
        self.assertEqual((st["hot"], st["cold"]), (1, nchunks - 1), "after close: %s" % st)
        # the rest comes back when read
        self.assertContent(p, 21, size)
        self.assertEqual(self.state(p)["cold"], 0)

    def test_open_restores_everything_in_background(self):
        # admit=always: open brings every chunk (with the filter, those read
        # before: test_admission)
        self.tier_mount(hot_size="256M", chunk_size="1M", min_spill_size="8M",
                        restore="open", io_workers="1", admit="always")
        nchunks = 96
        size = nchunks * MiB
        p = self.p("eager")
        write_content(p, 22, size)
        self.evict(p)
        self.assertEqual(self.state(p)["cold"], nchunks)
        before = self.stats()["restored"]["bytes"]
        fd = open_uncached(p)
        try:
            t0 = time.monotonic()
            self.assertEqual(os.pread(fd, 4096, 0), content(22, 0, 4096))
            first = time.monotonic() - t0
            st_first = self.state(p)
            self.assertGreaterEqual(st_first["hot"] + st_first["restoring"], 1, st_first)
            # the fd stays open and nothing else is read: only the background
            # restore can bring the other chunks back
            self.poll(lambda: self.state(p)["hot"] == nchunks, 30,
                      "every chunk restored after open (state %s)" % self.state(p))
            total = time.monotonic() - t0
        finally:
            os.close(fd)
        st = self.state(p)
        self.assertEqual((st["cold"], st["restoring"], st["dirty"]), (0, 0, 0), st)
        self.assertEqual(self.stats()["restored"]["bytes"] - before, size)
        sys.stderr.write("\n  [restore=open] first 4 KiB after %.1f ms (state then: %s); "
                         "all %d chunks after %.1f ms\n"
                         % (first * 1e3, st_first, nchunks, total * 1e3))
        self.assertContent(p, 22, size)


# --------------------------------------------------------------------------
# 6. O_TRUNC on a cold file


class TestTruncCold(TierCase):
    timeout = 60

    def test_o_trunc_drops_cold_chunks_unread(self):
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M")
        size = 24 * MiB
        p = self.p("victim")
        write_content(p, 31, size)
        self.evict(p)
        self.assertEqual(self.state(p)["cold"], 24)
        segs = self.all_segs()
        self.assertTrue(segs)
        s0 = self.stats()
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        os.close(fd)
        s1 = self.stats()
        grew = s1["restored"]["bytes"] - s0["restored"]["bytes"]
        self.assertEqual(grew, 0, "O_TRUNC on a cold file restored %d bytes" % grew)
        self.assertEqual(os.stat(p).st_size, 0)
        with open(p, "rb") as f:
            self.assertEqual(f.read(), b"")
        st = self.state(p)
        self.assertEqual(st["cold"] + st["hot"] + st["restoring"], 0, st)
        # growing it again shows zeros, never the old bytes
        os.truncate(p, size)
        fd = open_uncached(p)
        try:
            for off in range(0, size, 4 * MiB):
                b = os.pread(fd, 4 * MiB, off)
                self.assertEqual(b.count(0), len(b), "old data reappeared at %d" % off)
        finally:
            os.close(fd)
        self.assertEqual(self.stats()["restored"]["bytes"], s0["restored"]["bytes"])
        # its segments held nothing else: GC deletes them
        # (the file goes first, the counter right after: poll both)
        self.poll(lambda: not (segs & self.all_segs()) and
                  self.stats()["segments"]["deleted"] >= len(segs), 10,
                  "segments of the truncated file deleted (%s left)" % (segs & self.all_segs()))


# --------------------------------------------------------------------------
# 7. pin


class TestPin(TierCase):
    timeout = 120

    def test_pinned_file_stays_hot(self):
        # admit=always: the pressure is a stream, which would go around
        # (test_admission) rather than push the unpinned file out
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="16M", admit="always")
        p = self.p("pinned")
        write_content(p, 41, 8 * MiB)
        with self.assertRaises(OSError) as cm:
            os.setxattr(p, "user.spillway.pin", b"2")
        self.assertEqual(cm.exception.errno, errno.EINVAL)
        self.pin(p, True)
        self.assertEqual(self.state(p)["pinned"], 1)
        self.assertEqual(os.getxattr(p, "user.spillway.pin"), b"1")
        # heavy pressure: 4 x hot_size through other files
        for i in range(8):
            write_content(self.p("other%d" % i), 400 + i, 32 * MiB)
        s = self.stats()
        self.assertGreaterEqual(s["spilled"]["bytes"], 4 * 64 * MiB - 64 * MiB - 8 * MiB)
        self.assertGreater(sum(self.state(self.p("other%d" % i))["cold"] for i in range(8)), 0)
        st = self.state(p)
        self.assertEqual((st["hot"], st["cold"]), (8, 0), "pinned file evicted: %s" % st)
        self.assertContent(p, 41, 8 * MiB)
        # unpinned: evictable again, by pressure (its chunks are the oldest)
        self.pin(p, False)
        self.assertEqual(self.state(p)["pinned"], 0)
        for i in range(4):
            write_content(self.p("more%d" % i), 450 + i, 32 * MiB)
        self.poll(lambda: self.state(p)["cold"] > 0, 10,
                  "unpinned file spilled under pressure (%s)" % self.state(p))
        self.evict(p)
        self.assertEqual(self.state(p)["cold"], 8)
        self.assertContent(p, 41, 8 * MiB)


# --------------------------------------------------------------------------
# 10. GC


class TestGC(TierCase):
    timeout = 90

    def test_delete_removes_segments(self):
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M")
        files = {}
        for i in range(4):
            p = self.p("g%d" % i)
            before = self.all_segs()
            write_content(p, 60 + i, 10 * MiB)
            self.evict(p)
            files[p] = self.all_segs() - before
            self.assertTrue(files[p], "evict wrote no segment for %s" % p)
        s0 = self.stats()
        for i in (0, 2):
            os.unlink(self.p("g%d" % i))
        gone = files[self.p("g0")] | files[self.p("g2")]
        self.poll(lambda: not (gone & self.all_segs()) and
                  self.stats()["segments"]["deleted"] - s0["segments"]["deleted"] >= len(gone),
                  10, "segments of deleted files removed (%s left)" % (gone & self.all_segs()))
        s1 = self.stats()
        self.assertLess(s1["segments"]["live_bytes"], s0["segments"]["live_bytes"])
        for i in (1, 3):
            self.assertTrue(files[self.p("g%d" % i)] <= self.all_segs())
            self.assertContent(self.p("g%d" % i), 60 + i, 10 * MiB)

    def test_overwrite_compacts(self):
        # restore=lazy: the untouched chunks stay cold through the overwrite,
        # so compaction relocates cold chunks and reading them uses the new segment
        self.tier_mount(hot_size="64M", chunk_size="1M", min_spill_size="8M",
                        gc_threshold="0.5", restore="lazy")
        nchunks = 16
        size = nchunks * MiB
        p, q = self.p("y"), self.p("z")
        write_content(p, 70, size)
        write_content(q, 71, 4 * MiB)
        before = self.all_segs()
        self.evict(p)
        segs_y = self.all_segs() - before
        # evict writes min_spill_size segments (8M): 16 chunks -> 2 segments
        self.assertEqual(len(segs_y), 2, segs_y)
        self.evict(q)
        self.assertEqual(self.state(p)["cold"], nchunks)
        s0 = self.stats()
        # overwrite 12 of 16 chunks: the segment drops to 25% live
        model = bytearray(content(70, 0, size))
        fd = os.open(p, os.O_WRONLY)
        try:
            for c in range(nchunks):
                if c % 4 == 1:
                    continue
                data = content(170 + c, c * MiB, MiB)
                os.pwrite(fd, data, c * MiB)
                model[c * MiB:(c + 1) * MiB] = data
        finally:
            os.close(fd)
        self.poll(lambda: self.stats()["segments"]["compacted"] > s0["segments"]["compacted"],
                  15, "a segment compacted (stats %s)" % json.dumps(self.stats()))
        self.poll(lambda: not (segs_y & self.all_segs()), 15,
                  "the sparse segment deleted after compaction")
        # the 4 untouched chunks now live in the new segment: read them from it
        st = self.state(p)
        self.assertEqual(st["cold"], 4, st)

        def check(when):
            fd = open_uncached(p)
            try:
                got = read_all(fd, size + 1)
            finally:
                os.close(fd)
            if got != bytes(model):
                d = first_diff(got, bytes(model))
                self.fail("%s: wrong data at %d (chunk %d) %s" % (p, d, d // MiB, when))

        check("after compaction")
        self.evict(p)
        check("after evicting again")
        self.assertContent(q, 71, 4 * MiB, "(other file)")
        s = self.stats()
        self.assertEqual(s["errors"], {"io": 0, "crc": 0})
        self.assertGreaterEqual(s["segments"]["live_ratio"], 0.5 - 1e-9, json.dumps(s))


# --------------------------------------------------------------------------
# 12. fallocate under pressure waits for room like write does


class TestFallocatePressure(TierCase):
    timeout = 90

    def test_fallocate_then_write_4x_hot(self):
        """The preallocate-then-write pattern (databases, download managers)
        through a full hot tier: fallocate must wait for the evictor like a
        write does, not fail with ENOSPC while the cold tier has room."""
        self.tier_mount(hot_size="32M", chunk_size="1M", min_spill_size="4M")
        p = self.p("prealloc")
        size = 4 * 32 * MiB
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            for off in range(0, size, 4 * MiB):
                try:
                    harness.fallocate(fd, 0, off, 4 * MiB)
                except OSError as e:
                    s = self.stats()
                    self.fail("fallocate(%d, 4M) failed with %s while the cold tier has room "
                              "(hot used %d of %d, spilled %d)" % (
                                  off, errno.errorcode.get(e.errno, e.errno), s["hot"]["used"],
                                  s["hot"]["limit"], s["spilled"]["bytes"]))
                for o in range(off, off + 4 * MiB, MiB):
                    self.assertEqual(os.pwrite(fd, content(120, o, MiB), o), MiB)
        finally:
            os.close(fd)
        self.assertContent(p, 120, size)

    def test_one_fallocate_of_4x_hot(self):
        """One fallocate of four times the hot tier (a VM image, a torrent, a
        database's preallocation): it goes in pieces the evictor spills, as a
        stream of writes would. In one piece it waited write_wait and failed
        with ENOSPC while the cold tier had room."""
        self.tier_mount(hot_size="16M", chunk_size="1M", min_spill_size="4M",
                        write_wait="5s")
        p = self.p("big")
        size = 4 * 16 * MiB
        fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            try:
                harness.fallocate(fd, 0, 0, size)
            except OSError as e:
                self.fail("fallocate of %d bytes failed with %s while the cold tier has room"
                          % (size, errno.errorcode.get(e.errno, e.errno)))
            self.assertEqual(os.fstat(fd).st_size, size)
            self.assertGreater(self.stats()["spilled"]["bytes"], 0)
            # zeros, then data written over the end of it
            self.assertEqual(os.pwrite(fd, content(121, size - MiB, MiB), size - MiB), MiB)
        finally:
            os.close(fd)
        exp = bytes(size - MiB) + content(121, size - MiB, MiB)
        with open(p, "rb") as f:
            got = f.read()
        self.assertEqual(len(got), size)
        if got != exp:
            self.fail("wrong bytes from offset %d" % first_diff(got, exp))


# --------------------------------------------------------------------------
# 13. a request spanning two cold chunks while the hot tier is tight


class TestStraddleUnderPressure(TierCase):
    """Hot tier nearly all pinned, room for one chunk: a request spanning two
    cold chunks restores the first, and restoring the second needs room that
    only evicting the first would give. The daemon may fail such a request
    (ENOSPC/EIO after write_wait) but must never serve or keep a hole where
    the first chunk's bytes were."""

    timeout = 60
    ALLOWED = (errno.ENOSPC, errno.EIO)

    def setup_tight(self):
        self.tier_mount(hot_size="8M", chunk_size="1M", min_spill_size="1M", restore="lazy",
                        write_wait="3s")
        f, pf = self.p("f"), self.p("pinned")
        write_content(f, 1, 2 * MiB)
        self.evict(f)
        self.assertEqual(self.state(f)["cold"], 2)
        with open(pf, "wb"):
            pass
        self.pin(pf, True)
        # leaves 64K + one chunk free: room for the first restore only
        write_content(pf, 2, 7 * MiB - 64 * KiB)
        st = self.state(pf)
        self.assertEqual((st["hot"], st["cold"]), (7, 0), st)
        return f, pf

    def attempt(self, what, fn):
        """Run fn(); an allowed error is reported on stderr and returns None."""
        t0 = time.monotonic()
        try:
            r = fn()
        except OSError as e:
            if e.errno not in self.ALLOWED:
                raise
            sys.stderr.write("\n  [straddle] %s failed after %.1fs with %s (allowed)\n"
                             % (what, time.monotonic() - t0, errno.errorcode[e.errno]))
            return None
        sys.stderr.write("\n  [straddle] %s succeeded after %.1fs\n"
                         % (what, time.monotonic() - t0))
        return r

    def check_whole(self, f, pf, exp, what):
        self.pin(pf, False)
        fd = open_uncached(f)
        try:
            got = read_all(fd, 2 * MiB + 1)
        finally:
            os.close(fd)
        if got != bytes(exp):
            d = first_diff(got, bytes(exp))
            bad = sum(1 for i in range(0, 2 * MiB, PAGE) if got[i:i + PAGE] != exp[i:i + PAGE])
            self.fail("after %s: %d pages of the file damaged, first at offset %d (zeros: %s); "
                      "state %s" % (what, bad, d, got[d:d + 16].count(0) == 16, self.state(f)))

    def test_write_across_two_cold_chunks(self):
        f, pf = self.setup_tight()
        off = MiB - 8192
        fd = open_uncached(f, os.O_RDWR)
        try:
            n = self.attempt("16K write across chunks 0/1",
                             lambda: os.pwrite(fd, b"X" * 16384, off))
        finally:
            os.close(fd)
        exp = bytearray(content(1, 0, 2 * MiB))
        if n is not None:
            self.assertEqual(n, 16384)
            exp[off:off + 16384] = b"X" * 16384
        self.check_whole(f, pf, exp, "a 16K write across chunks 0/1")

    def test_read_across_two_cold_chunks(self):
        f, pf = self.setup_tight()
        # O_DIRECT: one FUSE read request spanning both chunks (buffered
        # reads without readahead would arrive a page at a time)
        off, n = MiB - 8192, 16384
        buf = mmap.mmap(-1, n)
        fd = os.open(f, os.O_RDONLY | os.O_DIRECT)
        try:
            r = self.attempt("O_DIRECT 16K read across chunks 0/1",
                             lambda: os.preadv(fd, [buf], off))
        finally:
            os.close(fd)
        if r is not None:
            self.assertEqual(r, n)
            got, exp = bytes(buf), content(1, off, n)
            if got != exp:
                d = first_diff(got, exp)
                self.fail("read across chunks 0/1 wrong from offset %d (zeros: %s); state %s"
                          % (off + d, got[d:d + 16].count(0) == 16, self.state(f)))
        self.check_whole(f, pf, content(1, 0, 2 * MiB), "the read")

    def test_buffered_read_across_two_cold_chunks(self):
        """Same through the page cache (the request holds those pages locked
        while the daemon works on it)."""
        f, pf = self.setup_tight()
        off, n = MiB - 8192, 16384
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            got = self.attempt("buffered 16K read across chunks 0/1",
                               lambda: os.pread(fd, n, off))
        finally:
            os.close(fd)
        if got is not None:
            exp = content(1, off, n)
            if got != exp:
                d = first_diff(got, exp)
                self.fail("buffered read across chunks 0/1 wrong from offset %d (zeros: %s); "
                          "state %s" % (off + d, got[d:d + 16].count(0) == 16, self.state(f)))
        self.check_whole(f, pf, content(1, 0, 2 * MiB), "the buffered read")


if __name__ == "__main__":
    harness.main()
